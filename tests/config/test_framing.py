"""Frames of the config event log: every header field, round trips, and each kind of bad input with its error."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import crc32c
import pytest
import zstandard

from quotaplane.config._columns import decode_columns, encode_events, events_of
from quotaplane.config._framing import (
    CODEC_NONE,
    CODEC_ZSTD,
    FRAME_HEADER_SIZE,
    FRAME_MAGIC,
    FRAME_VERSION,
    FrameDecodeError,
    FrameError,
    FrameFormatError,
    FrameHeaderCrcError,
    FramePayloadCrcError,
    FrameTruncatedError,
    decode_event_batch,
    decode_message,
    decode_payload,
    encode_event_batch,
    encode_frame,
    header_crc_matches,
    iter_frames,
    parse_frame,
    parse_frame_header,
    verify_payload,
)
from quotaplane.v1 import config_events_pb2 as pb

T0 = 1_700_000_000_000
HEAD = struct.Struct(">BBBBIqIqI")


def event(i: int) -> pb.Event:
    return pb.Event(
        commit_time_ms=T0 + i,
        principal="User:admin",
        request_id=f"req-{i}",
        client_quota=pb.ClientQuotaRecord(
            entity=[pb.EntityData(entity_type="user", entity_name=f"user-{i % 3}")],
            key="producer_byte_rate",
            value=1024.0 * i,
        ),
    )


def events(n: int, start: int = 0) -> list[pb.Event]:
    return [event(i) for i in range(start, start + n)]


def forge(fields: dict, payload: bytes) -> bytes:
    """A frame with chosen header fields and a correct header CRC (what a buggy or foreign writer makes)."""
    values = {
        "magic": FRAME_MAGIC,
        "version": FRAME_VERSION,
        "codec": CODEC_NONE,
        "flags": 0,
        "length": len(payload),
        "base": 0,
        "count": 1,
        "max_time": 0,
        "payload_crc": crc32c.crc32c(payload),
    }
    values.update(fields)
    head = HEAD.pack(*values.values())
    return head + struct.pack(">I", crc32c.crc32c(head)) + payload


def test_header_layout_is_the_documented_one():
    raw = encode_events(events(3))
    frame = encode_frame(raw, base_offset=42, record_count=3, max_commit_time_ms=T0 + 2, codec=CODEC_ZSTD)
    magic, version, codec, flags, length, base, count, max_time, payload_crc = HEAD.unpack_from(frame, 0)
    (header_crc,) = struct.unpack_from(">I", frame, 32)
    payload = frame[FRAME_HEADER_SIZE:]
    assert FRAME_HEADER_SIZE == 36
    assert (magic, version, codec, flags) == (0xE7, 1, CODEC_ZSTD, 0)
    assert (length, base, count, max_time) == (len(payload), 42, 3, T0 + 2)
    assert payload_crc == crc32c.crc32c(payload)
    assert header_crc == crc32c.crc32c(frame[:32])
    assert zstandard.frame_content_size(payload) == len(raw)  # a zstd frame WITH its content size
    assert zstandard.ZstdDecompressor().decompress(payload) == raw


def test_parse_gives_every_field():
    frame = encode_event_batch(events(5, start=10), base_offset=7)
    header = parse_frame(frame, 0)
    assert header.position == 0
    assert header.codec == CODEC_ZSTD and header.flags == 0
    assert header.payload_length == len(frame) - FRAME_HEADER_SIZE
    assert (header.base_offset, header.record_count, header.max_commit_time_ms) == (7, 5, T0 + 14)
    assert (header.next_offset, header.last_offset) == (12, 11)
    assert header.payload_start == FRAME_HEADER_SIZE and header.end == header.size == len(frame)
    assert header.payload_crc == crc32c.crc32c(frame[FRAME_HEADER_SIZE:])


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_ZSTD, None])
def test_event_batch_round_trip(codec: int | None):
    batch = events(50)
    frame = encode_frame(encode_events(batch), base_offset=0, record_count=50, max_commit_time_ms=0, codec=codec)
    header = parse_frame(frame, 0)
    assert header.codec == (CODEC_ZSTD if codec is None else codec)  # 50 events compress well
    assert events_of(decode_event_batch(frame, header)) == batch
    assert decode_message(memoryview(frame), header, pb.EventColumns) == decode_columns(encode_events(batch))


def test_auto_codec_stores_incompressible_payloads_raw():
    raw = bytes(range(40))  # zstd adds its frame header: not smaller
    header = parse_frame(frame := encode_frame(raw, base_offset=0, record_count=1, max_commit_time_ms=0), 0)
    assert header.codec == CODEC_NONE and bytes(decode_payload(frame, header)) == raw


def test_iter_frames_over_a_buffer_with_offsets():
    frames = [encode_event_batch(events(n, start=b), base_offset=b) for b, n in [(0, 2), (2, 1), (3, 4)]]
    buf = b"".join(frames)
    headers = list(iter_frames(buf))
    assert [(h.position, h.base_offset, h.record_count) for h in headers] == [
        (0, 0, 2),
        (len(frames[0]), 2, 1),
        (len(frames[0]) + len(frames[1]), 3, 4),
    ]
    assert list(iter_frames(buf, headers[1].position, headers[2].position)) == [headers[1]]
    assert list(iter_frames(memoryview(buf), headers[2].position)) == [headers[2]]
    assert list(iter_frames(b"")) == []
    decoded = [e for h in headers for e in events_of(decode_event_batch(buf, h))]
    assert decoded == events(7)


def test_encode_refuses_impossible_frames():
    with pytest.raises(ValueError, match="record"):
        encode_frame(b"x", base_offset=0, record_count=0, max_commit_time_ms=0)
    with pytest.raises(ValueError, match="base_offset"):
        encode_frame(b"x", base_offset=-1, record_count=1, max_commit_time_ms=0)
    with pytest.raises(ValueError, match="codec"):
        encode_frame(b"x", base_offset=0, record_count=1, max_commit_time_ms=0, codec=7)
    with pytest.raises(ValueError, match="at least one"):
        encode_event_batch([], base_offset=0)


@pytest.mark.parametrize("cut", range(FRAME_HEADER_SIZE))
def test_truncated_header(cut: int):
    frame = encode_event_batch(events(2), base_offset=0)
    with pytest.raises(FrameTruncatedError, match=f"{cut} bytes left, a frame header is 36") as info:
        parse_frame_header(frame[:cut], 0)
    assert info.value.position == 0


def test_truncated_payload():
    frame = encode_event_batch(events(2), base_offset=0)
    header = parse_frame_header(frame[:-3], 0)  # the header alone is fine
    with pytest.raises(FrameTruncatedError, match="runs past the end") as info:
        verify_payload(frame[:-3], header)
    assert info.value.position == 0
    with pytest.raises(FrameTruncatedError):
        parse_frame(b"\0" * 5 + frame[:-1], 5)


def test_bad_magic_and_version_are_named_before_the_crc():
    frame = bytearray(encode_event_batch(events(1), base_offset=0))
    frame[0] = 0x00
    with pytest.raises(FrameFormatError, match="bad magic 0x00, expected 0xe7"):
        parse_frame(frame, 0)
    frame = forge({"version": 2}, b"\x0a\x00")
    with pytest.raises(FrameFormatError, match="unsupported frame version 2"):
        parse_frame(frame, 0)


@pytest.mark.parametrize("byte", range(4, 36))  # magic and version are checked first, see above
def test_any_flipped_header_bit_fails_the_header_crc(byte: int):
    frame = bytearray(encode_event_batch(events(2), base_offset=0))
    frame[byte] ^= 0x10
    with pytest.raises(FrameHeaderCrcError, match="header CRC32C mismatch") as info:
        parse_frame(frame, 0)
    assert info.value.position == 0
    assert not header_crc_matches(frame, 0)


def test_a_corrupted_length_is_not_mistaken_for_a_short_payload():
    frame = bytearray(encode_event_batch(events(2), base_offset=0))
    frame[4:8] = struct.pack(">I", 1 << 30)  # as if the payload ran far past the end of the file
    with pytest.raises(FrameHeaderCrcError):
        parse_frame(frame, 0)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"codec": 5}, "unknown codec 5"),
        ({"flags": 1}, "unknown flags 0x01"),
        ({"count": 0}, "record_count is 0"),
        ({"base": -3}, "negative base_offset -3"),
    ],
)
def test_impossible_fields_with_a_valid_header_crc(fields: dict, message: str):
    frame = forge(fields, b"\x0a\x00")
    assert header_crc_matches(frame, 0)
    with pytest.raises(FrameFormatError, match=message):
        parse_frame(frame, 0)


@pytest.mark.parametrize("byte", [0, 1, 17, -1])
def test_flipped_payload_bit_fails_the_payload_crc(byte: int):
    frame = bytearray(encode_event_batch(events(4), base_offset=0))
    frame[FRAME_HEADER_SIZE + byte if byte >= 0 else byte] ^= 0x01  # first, second, a middle, the last byte
    header = parse_frame_header(frame, 0)
    with pytest.raises(FramePayloadCrcError, match="payload CRC32C mismatch"):
        verify_payload(frame, header)


def test_errors_at_a_later_position_name_that_position():
    good = encode_event_batch(events(1), base_offset=0)
    bad = bytearray(encode_event_batch(events(1, start=1), base_offset=1))
    bad[-1] ^= 0xFF
    with pytest.raises(FramePayloadCrcError) as info:
        list(iter_frames(good + bad))
    assert info.value.position == len(good) and str(info.value).startswith(f"at byte {len(good)}: ")


def test_crc_valid_payloads_that_do_not_decode():
    not_zstd = forge({"codec": CODEC_ZSTD}, b"definitely not zstd")
    with pytest.raises(FrameDecodeError, match="zstd"):
        decode_payload(not_zstd, parse_frame(not_zstd, 0))
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(b"\x0a\x00")
    frame = forge({"codec": CODEC_ZSTD}, no_size)
    with pytest.raises(FrameDecodeError, match="content size"):
        decode_payload(frame, parse_frame(frame, 0))
    garbage = forge({}, b"\xff\xff\xff")
    with pytest.raises(FrameDecodeError, match=r"not an EventColumns message"):
        decode_event_batch(garbage, parse_frame(garbage, 0))
    two_events = encode_events(events(2))
    miscounted = forge({"count": 3}, two_events)
    with pytest.raises(FrameDecodeError, match="header says 3 events, payload holds 2"):
        decode_event_batch(miscounted, parse_frame(miscounted, 0))


def test_errors_pickle_with_their_fields():
    for cls in (FrameTruncatedError, FrameHeaderCrcError, FrameFormatError, FramePayloadCrcError, FrameDecodeError):
        error = pickle.loads(pickle.dumps(cls(12, "why")))
        assert type(error) is cls and isinstance(error, FrameError) and isinstance(error, ValueError)
        assert (error.position, error.reason, str(error)) == (12, "why", "at byte 12: why")


def test_the_worked_example_of_the_format_page():
    """The bytes shown in docs/eventlog-format.md §2."""
    e = pb.Event(
        commit_time_ms=1_700_000_000_000,
        principal="User:alice",
        request_id="r1",
        client_quota=pb.ClientQuotaRecord(
            entity=[pb.EntityData(entity_type="user", entity_name="alice")], key="producer_byte_rate", value=1048576.0
        ),
    )
    frame = encode_event_batch([e], base_offset=0)
    documented = (
        "e7 01 00 00  00 00 00 50  00 00 00 00 00 00 00 00  00 00 00 01  00 00 01 8b cf e5 68 00"
        "  fb 58 e2 77  91 24 fb 37"
        "  12 06 80 d0 95 ff bc 31 1a 0a 55 73 65 72 3a 61 6c 69 63 65 22 02 72 31 2a 01 01 32 12 5b 5b 22 75 73 65"
        "  72 22 2c 22 61 6c 69 63 65 22 5d 5d 3a 12 70 72 6f 64 75 63 65 72 5f 62 79 74 65 5f 72 61 74 65 42 08 00"
        "  00 00 00 00 00 30 41 4a 01 00"
    )
    assert frame == bytes.fromhex(documented)
    page = (Path(__file__).resolve().parents[2] / "docs" / "eventlog-format.md").read_text()
    assert "fb 58 e2 77                   payload_crc" in page and "91 24 fb 37" in page
