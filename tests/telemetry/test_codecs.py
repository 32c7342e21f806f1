"""KIP-714 payload codecs: client formats, Kafka's error codes, the decompression-bomb limit, fuzzing."""

from __future__ import annotations

import doctest
import gzip
import random
import struct
import tracemalloc
import zlib

import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.errors import Errors, InvalidRecordError, TelemetryTooLargeError, UnsupportedCompressionTypeError
from quotaplane.telemetry import _codecs
from quotaplane.telemetry._codecs import (
    SUPPORTED_COMPRESSION_TYPES,
    CompressionType,
    compress,
    decompress,
    is_supported_compression_type,
)

from .test_otlp import producer_metrics_data

NONE, GZIP, SNAPPY, LZ4, ZSTD = CompressionType
COMPRESSED = (GZIP, SNAPPY, LZ4, ZSTD)
CODEC_IDS = {"ids": lambda c: c.kafka_name}
DECODE_ERRORS = (InvalidRecordError, TelemetryTooLargeError)

OTLP = producer_metrics_data().SerializeToString()
RANDOM_1MB = random.Random(7).randbytes(1 << 20)  # incompressible: stored/raw blocks
COMPRESSIBLE_3MB = b"".join(
    OTLP.replace(b"producer", b"produce%d" % (i % 10)) for i in range(3 * (1 << 20) // len(OTLP))
)
PAYLOADS = {"empty": b"", "otlp": OTLP, "random-1MiB": RANDOM_1MB, "compressible-3MiB": COMPRESSIBLE_3MB}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def xerial(data: bytes, chunk_size: int = 32 * 1024, version: int = 1) -> bytes:
    """snappy-java's SnappyOutputStream format, what Kafka's Java client sends for snappy."""
    out = [struct.pack(">8sii", XERIAL_MAGIC, version, 1)]
    for start in range(0, len(data), chunk_size):
        block = snappy.compress(data[start : start + chunk_size])
        out.append(struct.pack(">i", len(block)) + block)
    return b"".join(out)


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def zstd_rle_block(size: int, byte: bytes = b"\x00", last: bool = False) -> bytes:
    """An RFC 8878 RLE block: 4 bytes that decode to ``size`` copies of ``byte``."""
    return ((size << 3) | (1 << 1) | last).to_bytes(3, "little") + byte


def zstd_raw_block(data: bytes, last: bool = False) -> bytes:
    return ((len(data) << 3) | last).to_bytes(3, "little") + data


def zstd_frame(blocks: bytes, window_log: int = 17) -> bytes:
    """A frame with a window descriptor, no content size, no dictionary, no checksum."""
    return ZSTD_MAGIC + b"\x00" + bytes([(window_log - 10) << 3]) + blocks


def test_module_doctests_pass():
    result = doctest.testmod(_codecs)
    assert result.attempted >= 5 and result.failed == 0


# --- ids ------------------------------------------------------------------------------------------------
def test_ids_and_names_are_kafkas():
    assert [(int(c), c.kafka_name) for c in CompressionType] == [
        (0, "none"),
        (1, "gzip"),
        (2, "snappy"),
        (3, "lz4"),
        (4, "zstd"),
    ]


def test_advertised_types_are_kafkas_order_of_preference():
    # ClientMetricsManager.SUPPORTED_COMPRESSION_TYPES: a client takes the first one it supports.
    assert SUPPORTED_COMPRESSION_TYPES == (ZSTD, LZ4, GZIP, SNAPPY)
    assert SUPPORTED_COMPRESSION_TYPES == (4, 3, 1, 2)
    assert all(type(c) is int for c in SUPPORTED_COMPRESSION_TYPES)  # plain ids, as on the wire


@pytest.mark.parametrize("compression_type", [0, 1, 2, 3, 4])
def test_every_kafka_id_is_accepted_in_a_push_none_included(compression_type):
    assert is_supported_compression_type(compression_type)
    assert CompressionType.for_id(compression_type) == compression_type


@pytest.mark.parametrize("compression_type", [5, 6, -1, 127, -128, 255])
def test_unknown_ids_are_unsupported_compression_type(compression_type):
    assert not is_supported_compression_type(compression_type)
    with pytest.raises(UnsupportedCompressionTypeError, match=f"Unknown compression type id: {compression_type}$"):
        CompressionType.for_id(compression_type)


@pytest.mark.parametrize("compression_type", [5, -1, 255])
def test_decompress_with_an_unknown_id_is_unsupported_compression_type(compression_type):
    for data in (b"", OTLP, compress(ZSTD, OTLP)):
        with pytest.raises(UnsupportedCompressionTypeError, match=str(compression_type)) as info:
            decompress(compression_type, data, 1 << 20)
        assert info.value.error is Errors.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(compression_type, OTLP)


def test_a_negative_limit_is_a_programming_error():
    with pytest.raises(ValueError, match="max_decompressed_bytes"):
        decompress(NONE, b"", -1)


# --- round trips and the limit --------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(PAYLOADS))
@pytest.mark.parametrize("codec", list(CompressionType), **CODEC_IDS)
def test_round_trip_at_exactly_the_limit(codec, name):
    data = PAYLOADS[name]
    assert decompress(codec, compress(codec, data), len(data)) == data
    assert decompress(codec, compress(codec, data), len(data) + 1) == data


@pytest.mark.parametrize("name", [name for name in PAYLOADS if name != "empty"])
@pytest.mark.parametrize("codec", list(CompressionType), **CODEC_IDS)
def test_one_byte_over_the_limit_is_telemetry_too_large(codec, name):
    data = PAYLOADS[name]
    with pytest.raises(TelemetryTooLargeError, match=f"maximum allowed size: {len(data) - 1}$") as info:
        decompress(codec, compress(codec, data), len(data) - 1)
    assert info.value.error is Errors.TELEMETRY_TOO_LARGE


@pytest.mark.parametrize("codec", list(CompressionType), **CODEC_IDS)
def test_a_zero_limit_admits_only_empty_output(codec):
    assert decompress(codec, compress(codec, b""), 0) == b""
    with pytest.raises(TelemetryTooLargeError):
        decompress(codec, compress(codec, b"x"), 0)


@pytest.mark.parametrize("wrap", [bytearray, memoryview], ids=["bytearray", "memoryview"])
@pytest.mark.parametrize("codec", list(CompressionType), **CODEC_IDS)
def test_any_bytes_like_payload_is_accepted(codec, wrap):
    out = decompress(codec, wrap(compress(codec, OTLP)), len(OTLP))
    assert out == OTLP and type(out) is bytes


# --- what the clients send ------------------------------------------------------------------------------
def test_gzip_at_level_0_as_librdkafka_sends_it():
    payload = compress(GZIP, OTLP)
    assert len(payload) > len(OTLP)  # level 0: stored deflate blocks, bigger than the input
    assert payload[:2] == b"\x1f\x8b"
    assert decompress(GZIP, payload, len(OTLP)) == OTLP
    # and a stored multi-block member (a stored block holds at most 64 KiB)
    assert decompress(GZIP, gzip.compress(COMPRESSIBLE_3MB, compresslevel=0), len(COMPRESSIBLE_3MB)) == COMPRESSIBLE_3MB


@pytest.mark.parametrize("level", [1, 6, 9])
def test_gzip_at_other_levels_and_with_a_file_name(level):
    assert decompress(GZIP, gzip.compress(OTLP, compresslevel=level), len(OTLP)) == OTLP
    compressor = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    assert decompress(GZIP, compressor.compress(OTLP) + compressor.flush(), len(OTLP)) == OTLP


@pytest.mark.parametrize(
    "payload",
    [pytest.param(zlib.compress(OTLP), id="zlib-stream"), pytest.param(zlib.compress(OTLP)[2:-4], id="raw-deflate")],
)
def test_gzip_means_the_gzip_container(payload):
    with pytest.raises(InvalidRecordError, match="gzip"):
        decompress(GZIP, payload, 1 << 20)


def _zstd_streaming(data: bytes) -> bytes:
    compressor = zstandard.ZstdCompressor(level=3).compressobj()  # no pledged size, like librdkafka's stream
    return compressor.compress(data) + compressor.flush()


ZSTD_CLIENT_FRAMES = {
    "streaming": (_zstd_streaming, False),
    "no-content-size": (lambda d: zstandard.ZstdCompressor(write_content_size=False).compress(d), False),
    "content-size": (lambda d: zstandard.ZstdCompressor().compress(d), True),
    "checksum": (lambda d: zstandard.ZstdCompressor(write_checksum=True, write_content_size=False).compress(d), False),
    "level-19": (lambda d: zstandard.ZstdCompressor(level=19, write_content_size=False).compress(d), False),
    "ours": (lambda d: compress(ZSTD, d), False),
}


@pytest.mark.parametrize("name", list(ZSTD_CLIENT_FRAMES))
def test_zstd_frames_with_and_without_content_size(name):
    make, has_content_size = ZSTD_CLIENT_FRAMES[name]
    for data in (OTLP, COMPRESSIBLE_3MB, RANDOM_1MB):
        payload = make(data)
        content_size = zstandard.get_frame_parameters(payload).content_size
        assert (content_size == len(data)) if has_content_size else (content_size == zstandard.CONTENTSIZE_UNKNOWN)
        assert decompress(ZSTD, payload, len(data)) == data
        with pytest.raises(TelemetryTooLargeError):
            decompress(ZSTD, payload, len(data) - 1)
    if not has_content_size:  # why the one-shot API is not an option for librdkafka's frames
        with pytest.raises(zstandard.ZstdError, match="content size"):
            zstandard.ZstdDecompressor().decompress(payload)


def test_a_hand_made_zstd_frame_of_raw_and_rle_blocks_decodes_across_many_pieces():
    # Enough RLE blocks that the frame is fed to the decoder in several pieces.
    blocks, expected = [], []
    for index in range(40):
        blocks.append(zstd_raw_block(b"raw%d" % index))
        blocks.append(zstd_rle_block(100_000, bytes([index])))
        expected += [b"raw%d" % index, bytes([index]) * 100_000]
    blocks.append(zstd_raw_block(b"end", last=True))
    expected.append(b"end")
    frame, data = zstd_frame(b"".join(blocks)), b"".join(expected)
    assert decompress(ZSTD, frame, len(data)) == data
    with pytest.raises(TelemetryTooLargeError):
        decompress(ZSTD, frame, len(data) - 1)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"store_size": False},
        {"block_linked": False, "store_size": False},  # librdkafka's and Kafka's frames
        {"content_checksum": True, "block_checksum": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
        {"compression_level": lz4.frame.COMPRESSIONLEVEL_MINHC},
    ],
    ids=["size", "no-size", "independent", "checksums", "4MiB-blocks", "hc"],
)
def test_lz4_frames_with_and_without_content_size(options):
    for data in (OTLP, COMPRESSIBLE_3MB, RANDOM_1MB):
        payload = lz4.frame.compress(data, **options)
        assert decompress(LZ4, payload, len(data)) == data
        with pytest.raises(TelemetryTooLargeError):
            decompress(LZ4, payload, len(data) - 1)


def test_snappy_is_raw_snappy_as_librdkafka_sends_it():
    payload = compress(SNAPPY, OTLP)
    assert payload.startswith(varint(len(OTLP)))  # raw: the uncompressed length, then the block
    assert decompress(SNAPPY, payload, len(OTLP)) == OTLP


def test_snappy_javas_stream_as_the_java_client_sends_it():
    for data in (OTLP, COMPRESSIBLE_3MB, b""):
        payload = xerial(data)
        assert decompress(SNAPPY, payload, len(data)) == data
    assert decompress(SNAPPY, xerial(b""), 0) == b""  # the header alone: an empty stream


def test_snappy_javas_stream_is_limited_before_a_block_is_decoded():
    data = OTLP * 4
    payload = xerial(data, chunk_size=len(OTLP))
    assert decompress(SNAPPY, payload, len(data)) == data
    with pytest.raises(TelemetryTooLargeError):
        decompress(SNAPPY, payload, len(data) - 1)
    # A last block whose body is corrupt, but whose declared length already passes the limit.
    corrupt_block = varint(len(OTLP)) + b"\xff" * 8
    corrupt = xerial(OTLP * 3, chunk_size=len(OTLP)) + struct.pack(">i", len(corrupt_block)) + corrupt_block
    with pytest.raises(InvalidRecordError):
        decompress(SNAPPY, corrupt, len(data))
    with pytest.raises(TelemetryTooLargeError):
        decompress(SNAPPY, corrupt, len(data) - 1)


def test_the_snappy_framing_format_is_not_what_clients_send():
    framed = snappy.StreamCompressor().compress(OTLP)
    assert framed.startswith(b"\xff\x06\x00\x00sNaPpY")
    with pytest.raises(InvalidRecordError):
        decompress(SNAPPY, framed, 1 << 20)


# --- malformed payloads ---------------------------------------------------------------------------------
def _client_payloads(data: bytes) -> dict[str, tuple[CompressionType, bytes]]:
    return {
        "gzip": (GZIP, compress(GZIP, data)),
        "gzip-9": (GZIP, gzip.compress(data, compresslevel=9)),
        "snappy": (SNAPPY, compress(SNAPPY, data)),
        "lz4": (LZ4, compress(LZ4, data)),
        "lz4-size-checksum": (LZ4, lz4.frame.compress(data, content_checksum=True)),
        "zstd": (ZSTD, compress(ZSTD, data)),
        "zstd-size-checksum": (ZSTD, zstandard.ZstdCompressor(write_checksum=True).compress(data)),
    }


CLIENT_PAYLOADS = _client_payloads(OTLP)


@pytest.mark.parametrize("name", list(CLIENT_PAYLOADS))
def test_every_truncation_is_invalid_record(name):
    codec, payload = CLIENT_PAYLOADS[name]
    for cut in range(len(payload)):
        with pytest.raises(InvalidRecordError) as info:
            decompress(codec, payload[:cut], 1 << 20)
        assert info.value.error is Errors.INVALID_RECORD


@pytest.mark.parametrize("tail", [b"\x00", b"\x00" * 4, b"garbage!", "twice"], ids=["0", "0000", "text", "twice"])
@pytest.mark.parametrize("name", list(CLIENT_PAYLOADS))
def test_anything_after_the_frame_is_invalid_record(name, tail):
    codec, payload = CLIENT_PAYLOADS[name]
    tail = payload if tail == "twice" else tail  # a second, complete frame
    with pytest.raises(InvalidRecordError) as info:
        decompress(codec, payload + tail, 1 << 20)
    if codec is not SNAPPY:  # a raw snappy block has no end: the extra bytes are just a corrupt block
        assert f"{len(tail)} bytes after the end of its frame" in str(info.value)


#: A skippable frame (magic 0x184D2A50, little endian, then its length): LZ4 and zstd share the format.
SKIPPABLE_FRAME = b"\x50\x2a\x4d\x18" + struct.pack("<I", 3) + b"abc"


@pytest.mark.parametrize("codec", [LZ4, ZSTD], **CODEC_IDS)
def test_a_skippable_frame_after_the_frame_is_invalid_record(codec):
    with pytest.raises(InvalidRecordError, match="after the end of its frame"):
        decompress(codec, compress(codec, OTLP) + SKIPPABLE_FRAME, 1 << 20)


@pytest.mark.parametrize("codec", [LZ4, ZSTD], **CODEC_IDS)
def test_a_lone_skippable_frame_is_one_frame_of_nothing(codec):
    assert decompress(codec, SKIPPABLE_FRAME, 0) == b""


GARBAGE = {
    "text": b"garbage",
    "zeros": bytes(16),
    "ones": b"\xff" * 16,
    "random": random.Random(3).randbytes(1024),
    "otlp": OTLP,
}


@pytest.mark.parametrize("garbage", list(GARBAGE))
@pytest.mark.parametrize("codec", COMPRESSED, **CODEC_IDS)
def test_garbage_is_invalid_record(codec, garbage):
    with pytest.raises(InvalidRecordError):
        decompress(codec, GARBAGE[garbage], 1 << 20)


@pytest.mark.parametrize("codec", COMPRESSED, **CODEC_IDS)
def test_another_codecs_payload_is_invalid_record(codec):
    for other in COMPRESSED:
        if other is not codec:
            with pytest.raises(InvalidRecordError):
                decompress(codec, compress(other, OTLP), 1 << 20)


@pytest.mark.parametrize(
    ("name", "offset"),
    [("gzip", -8), ("lz4-size-checksum", -4), ("zstd-size-checksum", -4), ("gzip", 0), ("lz4", 0), ("zstd", 0)],
    ids=["gzip-crc", "lz4-checksum", "zstd-checksum", "gzip-magic", "lz4-magic", "zstd-magic"],
)
def test_a_corrupt_checksum_or_magic_is_invalid_record(name, offset):
    codec, payload = CLIENT_PAYLOADS[name]
    corrupt = bytearray(payload)
    corrupt[offset] ^= 0x01
    with pytest.raises(InvalidRecordError, match="corrupt"):
        decompress(codec, bytes(corrupt), 1 << 20)


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        pytest.param(b"", InvalidRecordError, id="empty"),
        pytest.param(b"\x80\x80\x80\x80\x80\x01", InvalidRecordError, id="varint-over-5-bytes"),
        pytest.param(b"\xff\xff\xff\xff\x1f", InvalidRecordError, id="length-over-32-bits"),
        pytest.param(b"\x80\x80", InvalidRecordError, id="unfinished-varint"),
        pytest.param(varint(100) + b"\x0cabcd", InvalidRecordError, id="shorter-than-declared"),
        pytest.param(varint(2**32 - 1) + b"\xff" * 8, TelemetryTooLargeError, id="4GiB-declared"),
    ],
)
def test_the_snappy_length_prefix_is_validated_and_limited_first(payload, error):
    tracemalloc.start()
    try:
        with pytest.raises(error):
            decompress(SNAPPY, payload, 1 << 20)
        assert tracemalloc.get_traced_memory()[1] < 1 << 20  # nothing the size of the declared length
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(struct.pack(">8sii", XERIAL_MAGIC, 0, 1) + b"\x00\x00\x00\x01\x00", id="version-0"),
        pytest.param(xerial(OTLP) + b"\x00\x00", id="partial-length"),
        pytest.param(xerial(b"") + b"\x00\x00\x00\x00", id="zero-length-block"),
        pytest.param(xerial(b"") + b"\xff\xff\xff\xff", id="negative-length"),
        pytest.param(xerial(OTLP)[:-1], id="block-cut-short"),
        pytest.param(xerial(b"") + b"\x00\x00\x00\x03abc", id="corrupt-block"),
        pytest.param(XERIAL_MAGIC + b"\x00\x00\x00\x01", id="header-cut-short"),  # not a stream: one raw block
    ],
)
def test_a_malformed_snappy_java_stream_is_invalid_record(payload):
    with pytest.raises(InvalidRecordError, match="snappy"):
        decompress(SNAPPY, payload, 1 << 20)


# --- decompression bombs --------------------------------------------------------------------------------
BOMB_SIZE = 100 * 1024 * 1024
BOMB_LIMIT = 1 << 20


@pytest.fixture(scope="module")
def bombs() -> dict[str, tuple[CompressionType, bytes]]:
    """100 MiB of zeros in every client format, compressed once for the module."""
    zeros = bytes(BOMB_SIZE)
    zero_chunk = snappy.compress(bytes(32 * 1024))
    rle = zstd_rle_block(128 * 1024) * (BOMB_SIZE // (128 * 1024) - 1) + zstd_rle_block(128 * 1024, last=True)
    return {
        "gzip": (GZIP, gzip.compress(zeros, compresslevel=6, mtime=0)),
        "lz4-size": (LZ4, lz4.frame.compress(zeros)),
        "lz4-no-size": (LZ4, compress(LZ4, zeros)),
        "snappy": (SNAPPY, compress(SNAPPY, zeros)),
        "snappy-java": (
            SNAPPY,
            struct.pack(">8sii", XERIAL_MAGIC, 1, 1)
            + (struct.pack(">i", len(zero_chunk)) + zero_chunk) * (BOMB_SIZE // (32 * 1024)),
        ),
        "zstd-streaming": (ZSTD, compress(ZSTD, zeros)),
        "zstd-content-size": (ZSTD, zstandard.ZstdCompressor().compress(zeros)),
        # 3 KiB of RLE blocks: one decoder call on it would produce all 100 MiB at once
        "zstd-rle": (ZSTD, zstd_frame(rle)),
        "zstd-rle-single-segment": (ZSTD, ZSTD_MAGIC + b"\xe0" + BOMB_SIZE.to_bytes(8, "little") + rle),
        "zstd-rle-fcs4-dict-id": (
            ZSTD,
            ZSTD_MAGIC + b"\x81" + b"\x38" + b"\x00" + BOMB_SIZE.to_bytes(4, "little") + rle,
        ),
    }


BOMB_NAMES = [
    "gzip",
    "lz4-size",
    "lz4-no-size",
    "snappy",
    "snappy-java",
    "zstd-streaming",
    "zstd-content-size",
    "zstd-rle",
    "zstd-rle-single-segment",
    "zstd-rle-fcs4-dict-id",
]


@pytest.mark.parametrize("name", BOMB_NAMES)
def test_a_bomb_is_telemetry_too_large_without_materializing_it(bombs, name):
    codec, payload = bombs[name]
    assert len(payload) < BOMB_SIZE // 20
    tracemalloc.start()
    try:
        with pytest.raises(TelemetryTooLargeError):
            decompress(codec, payload, BOMB_LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the limit, plus one bounded piece and a join: nowhere near the 100 MiB
    assert peak < 4 * BOMB_LIMIT


@pytest.mark.parametrize("name", ["gzip", "lz4-no-size", "zstd-streaming", "zstd-rle"])
def test_errors_come_in_stream_order(bombs, name):
    # A bomb with junk after it, or cut short, passes the limit before the decoder meets the problem.
    codec, payload = bombs[name]
    with pytest.raises(TelemetryTooLargeError):
        decompress(codec, payload + b"junk", BOMB_LIMIT)
    with pytest.raises(TelemetryTooLargeError):
        decompress(codec, payload[: len(payload) // 2], BOMB_LIMIT)
    # the same problems on a frame under the limit are INVALID_RECORD
    small = compress(codec, OTLP)
    with pytest.raises(InvalidRecordError):
        decompress(codec, small + b"junk", BOMB_LIMIT)
    with pytest.raises(InvalidRecordError):
        decompress(codec, small[: len(small) // 2], BOMB_LIMIT)


# --- fuzzing --------------------------------------------------------------------------------------------
def _decodes_or_fails_cleanly(codec: int, data: bytes, limit: int) -> None:
    try:
        out = decompress(codec, data, limit)
    except DECODE_ERRORS:
        return
    assert type(out) is bytes and len(out) <= limit


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(list(CompressionType)), st.binary(max_size=300), st.integers(0, 4096))
def test_arbitrary_bytes_decode_or_fail_with_a_kafka_error(codec, data, limit):
    _decodes_or_fails_cleanly(codec, data, limit)


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**31), 2**31), st.binary(max_size=64))
def test_arbitrary_ids_are_supported_or_unsupported_compression_type(compression_type, data):
    if 0 <= compression_type <= 4:
        _decodes_or_fails_cleanly(compression_type, data, 1 << 16)
    else:
        with pytest.raises(UnsupportedCompressionTypeError):
            decompress(compression_type, data, 1 << 16)


MAGICS = {
    GZIP: b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff",
    SNAPPY: struct.pack(">8sii", XERIAL_MAGIC, 1, 1),
    LZ4: b"\x04\x22\x4d\x18",
    ZSTD: ZSTD_MAGIC,
}


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(COMPRESSED), st.binary(max_size=300), st.integers(0, 4096))
def test_random_bodies_behind_a_valid_magic_decode_or_fail_with_a_kafka_error(codec, body, limit):
    _decodes_or_fails_cleanly(codec, MAGICS[codec] + body, limit)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([*CLIENT_PAYLOADS, "snappy-java"]),
    st.data(),
    st.integers(0, 255),
    st.binary(max_size=8),
    st.integers(0, 2 * len(OTLP)),
)
def test_mutated_client_payloads_decode_or_fail_with_a_kafka_error(name, draw, byte, tail, limit):
    codec, payload = (SNAPPY, xerial(OTLP)) if name == "snappy-java" else CLIENT_PAYLOADS[name]
    position = draw.draw(st.integers(0, len(payload) - 1))
    cut = draw.draw(st.integers(position + 1, len(payload)))
    mutated = payload[:position] + bytes([byte]) + payload[position + 1 : cut] + tail
    _decodes_or_fails_cleanly(codec, mutated, limit)
