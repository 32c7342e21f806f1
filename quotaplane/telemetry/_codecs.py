"""KIP-714 payload compression: Kafka's compression ids and a bounded ``decompress``.

A PushTelemetry request carries its metrics compressed with one of Kafka's record codecs, named by
id in ``compression_type``. What the clients actually send (observed, and read from their sources):

=========  ==  ===================================================================================
codec      id  on the wire
=========  ==  ===================================================================================
none       0   the OTLP bytes themselves (accepted although never advertised, as Kafka does)
gzip       1   one gzip member; librdkafka compresses at level 0 (stored deflate blocks)
snappy     2   librdkafka: *raw* snappy (a varint length, then the block). The Java client wraps
               it in snappy-java's stream (``SnappyOutputStream``: an 8-byte magic, two versions,
               then length-prefixed raw blocks); Kafka's broker reads both, and so does this module
lz4        3   one LZ4 *frame* (independent blocks; librdkafka and Kafka write no content size)
zstd       4   one zstd frame written by a streaming compressor: it declares **no content size**,
               so ``zstandard.ZstdDecompressor().decompress()`` refuses it; we stream it
=========  ==  ===================================================================================

**The size limit is a decompression-bomb guard.** A few hundred bytes of zstd or gzip can expand to
gigabytes, so ``decompress`` stops as soon as the output passes ``max_decompressed_bytes`` and never
holds much more than that: zlib and LZ4 are asked for at most ``limit + 1`` bytes, a snappy block's
declared length is checked before it is decoded, and a zstd frame is fed to the decoder a few blocks
at a time (each block decodes to at most 128 KiB), so at most one such piece is decoded past the
limit before the check fires. Kafka (``ClientTelemetryUtils.decompress``) checks after each 8 KiB read.

**Errors carry Kafka's codes** (``exc.error``), each a decision the client acts on:

* an id Kafka does not know (``CompressionType.forId`` fails) -> ``UnsupportedCompressionTypeError``
  (76): the client asks for its subscription again;
* output past the limit -> ``TelemetryTooLargeError`` (118): the client keeps pushing;
* anything malformed -> ``InvalidRecordError`` (87): the client stops telemetry for good. Library
  exceptions never escape; each codec's own exception types are caught and wrapped.

**Exactly one frame, nothing after it.** Every client sends one gzip member, one LZ4 frame, one zstd
frame or one snappy block (or one snappy-java stream), so a payload is that and only that: a frame
cut short and any byte after its end (trailing zeros, a second member or frame, a skippable frame)
are INVALID_RECORD, for every codec alike (a lone LZ4 or zstd skippable frame is one frame, of
nothing: ``b""``). This is stricter than Kafka's Java readers, which differ
by codec (GZIPInputStream reads concatenated members and ignores trailing junk, zstd-jni reads
across frames). Problems are reported in the order the decoder meets them: a frame that passes the
limit before it turns out corrupt or truncated is TELEMETRY_TOO_LARGE (the snappy length prefix is
read first of all).

An empty payload is a valid NONE payload (``b""``) and malformed for every other codec (no frame).
Kafka's manager does not decompress empty metrics at all; the caller should skip them the same way.

>>> raw = b"otlp bytes " * 100
>>> all(decompress(c, compress(c, raw), len(raw)) == raw for c in CompressionType)
True
>>> decompress(CompressionType.ZSTD, compress(CompressionType.ZSTD, raw), len(raw) - 1)
Traceback (most recent call last):
    ...
quotaplane.errors.TelemetryTooLargeError: Decompressed telemetry metrics exceed maximum allowed size: 1099
>>> SUPPORTED_COMPRESSION_TYPES, [CompressionType(c).kafka_name for c in SUPPORTED_COMPRESSION_TYPES]
((4, 3, 1, 2), ['zstd', 'lz4', 'gzip', 'snappy'])
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib
from enum import IntEnum
from typing import Any

import lz4.frame
import snappy
import zstandard

from ..compiled import load_compiled
from ..errors import InvalidRecordError, TelemetryTooLargeError, UnsupportedCompressionTypeError

__all__ = [
    "SUPPORTED_COMPRESSION_TYPES",
    "CompressionType",
    "compress",
    "decompress",
    "is_supported_compression_type",
]


class CompressionType(IntEnum):
    """Kafka's ``CompressionType``: the id on the wire, and Kafka's lower-case name as ``kafka_name``.

    >>> CompressionType(4).kafka_name, CompressionType.for_id(3)
    ('zstd', <CompressionType.LZ4: 3>)
    """

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """The name Kafka uses in configs and logs (``compression.type=zstd``)."""
        return self.name.lower()

    @classmethod
    def for_id(cls, compression_type: int) -> CompressionType:
        """Kafka's ``CompressionType.forId``; an unknown id is UNSUPPORTED_COMPRESSION_TYPE (76)."""
        if not is_supported_compression_type(compression_type):
            raise UnsupportedCompressionTypeError(f"Unknown compression type id: {compression_type}")
        return cls(compression_type)


#: What Kafka's ClientMetricsManager advertises, in its order of preference: a client takes the first
#: one it supports. Plain ids, as they go on the wire. NONE is not listed but is accepted in a push
#: (``is_supported_compression_type``).
SUPPORTED_COMPRESSION_TYPES: tuple[int, ...] = tuple(
    int(c) for c in (CompressionType.ZSTD, CompressionType.LZ4, CompressionType.GZIP, CompressionType.SNAPPY)
)

_IDS = frozenset(int(c) for c in CompressionType)


def is_supported_compression_type(compression_type: int) -> bool:
    """Whether a push may use this id: Kafka accepts any id ``CompressionType.forId`` knows, NONE included."""
    return compression_type in _IDS


def decompress(compression_type: int, data: bytes, max_decompressed_bytes: int) -> bytes:
    """The payload's OTLP bytes, at most ``max_decompressed_bytes`` of them.

    Raises ``UnsupportedCompressionTypeError`` for an unknown id, ``TelemetryTooLargeError`` once the
    output would pass the limit (a payload of exactly the limit is fine) and ``InvalidRecordError``
    for anything that is not exactly one well-formed frame of the codec (see the module docstring).
    ``max_decompressed_bytes`` below zero is a programming error (ValueError).
    """
    # by plain id: building the CompressionType member per push cost about a microsecond (Enum's __call__)
    decoder = _DECOMPRESSORS_BY_ID.get(compression_type)
    if decoder is None:
        decoder = _DECOMPRESSORS[CompressionType.for_id(compression_type)]  # raises for an unknown id
    if max_decompressed_bytes < 0:
        raise ValueError(f"max_decompressed_bytes must be >= 0, got {max_decompressed_bytes}")
    if not isinstance(data, bytes):
        data = bytes(data)
    return decoder(data, max_decompressed_bytes)


def compress(compression_type: int, data: bytes) -> bytes:
    """``data`` compressed as a real client sends it (librdkafka's settings); for tests and benchmarks.

    gzip at level 0 in one member (librdkafka's level; ``mtime`` 0 so the output is reproducible),
    an LZ4 frame of independent blocks without content size, raw snappy, and a zstd frame from a
    streaming compressor at level 3 (no content size, a 2 MiB window).
    """
    codec = CompressionType.for_id(compression_type)
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.GZIP:
        return gzip.compress(data, compresslevel=0, mtime=0)
    if codec is CompressionType.SNAPPY:
        return snappy.compress(bytes(data))
    if codec is CompressionType.LZ4:
        return lz4.frame.compress(data, block_linked=False, store_size=False)
    compressor = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    return compressor.compress(data) + compressor.flush()


# --- the codecs -------------------------------------------------------------------------------------


def _too_large(limit: int) -> TelemetryTooLargeError:
    # Kafka's message (ClientTelemetryUtils.decompress).
    return TelemetryTooLargeError(f"Decompressed telemetry metrics exceed maximum allowed size: {limit}")


def _trailing(codec: str, count: int) -> InvalidRecordError:
    return InvalidRecordError(f"{codec} payload has {count} bytes after the end of its frame")


def _truncated(codec: str) -> InvalidRecordError:
    return InvalidRecordError(f"{codec} payload is truncated: it ends inside its frame")


def _none(data: bytes, limit: int) -> bytes:
    if len(data) > limit:
        raise _too_large(limit)
    return data


def _gzip(data: bytes, limit: int) -> bytes:
    # wbits 16 + 15: a gzip container only (header, CRC-32 and length are checked), not zlib or raw
    # deflate. max_length bounds the output buffer zlib grows; one byte past the limit is enough to know.
    decoder = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = decoder.decompress(data, limit + 1)
    except zlib.error as e:
        raise InvalidRecordError(f"gzip payload is corrupt: {e}") from None
    # Under the limit, zlib consumed all the input it could: it stopped at the end of the member or
    # ran out of input.
    return _one_frame(out, decoder, limit, "gzip")


def _one_frame(out: bytes, decoder: Any, limit: int, codec: str) -> bytes:
    """The output of a decoder given the whole input at once, if it is one complete frame within ``limit``:
    else TelemetryTooLargeError, or InvalidRecordError for a truncated frame or bytes after it."""
    if len(out) > limit:
        raise _too_large(limit)
    if not decoder.eof:
        raise _truncated(codec)
    if decoder.unused_data:
        raise _trailing(codec, len(decoder.unused_data))
    return out


#: How much LZ4 output one call may produce: bounds the buffer python-lz4 allocates up front.
_LZ4_CHUNK = 256 * 1024


def _lz4(data: bytes, limit: int) -> bytes:
    decoder = lz4.frame.LZ4FrameDecompressor()
    chunks = []
    total = 0
    pending = data
    try:
        while True:
            chunk = decoder.decompress(pending, max_length=min(_LZ4_CHUNK, limit + 1 - total))
            pending = b""
            total += len(chunk)
            if total > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            # needs_input: every input byte is consumed and no more output can come without more input.
            if decoder.eof or decoder.needs_input:
                break
    except RuntimeError as e:  # python-lz4 reports every LZ4F error as RuntimeError
        raise InvalidRecordError(f"lz4 payload is corrupt: {e}") from None
    if not decoder.eof:
        raise _truncated("lz4")
    if decoder.unused_data:
        raise _trailing("lz4", len(decoder.unused_data))
    return b"".join(chunks)


# snappy-java's SnappyOutputStream header (SnappyCodec): magic, then version and minimum compatible
# version as big-endian int32s; after it, blocks as a big-endian int32 length and a raw snappy block.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_INT32 = struct.Struct(">i")


def _snappy(data: bytes, limit: int) -> bytes:
    # As snappy-java's SnappyInputStream (Kafka's broker): a full header with the magic is the stream
    # format, anything else is one raw block.
    if len(data) >= _XERIAL_HEADER.size and data.startswith(_XERIAL_MAGIC):
        return _xerial_snappy(data, limit)
    declared = _snappy_declared_length(data)
    if declared > limit:
        raise _too_large(limit)
    return _snappy_block(data, declared)


def _xerial_snappy(data: bytes, limit: int) -> bytes:
    _magic, version, _compatible = _XERIAL_HEADER.unpack_from(data)
    if version < 1:  # snappy-java's MINIMUM_COMPATIBLE_VERSION
        raise InvalidRecordError(f"snappy stream has an unsupported version {version}")
    view = memoryview(data)
    chunks = []
    total = 0
    position = _XERIAL_HEADER.size
    while position < len(data):
        if position + _INT32.size > len(data):
            raise _truncated("snappy")
        (length,) = _INT32.unpack_from(data, position)
        position += _INT32.size
        if length <= 0:
            raise InvalidRecordError(f"snappy stream has a block of invalid length {length}")
        if position + length > len(data):
            raise _truncated("snappy")
        block = view[position : position + length]
        position += length
        declared = _snappy_declared_length(block)
        total += declared
        if total > limit:
            raise _too_large(limit)
        chunks.append(_snappy_block(block, declared))
    return b"".join(chunks)


def _snappy_declared_length(block: bytes | memoryview) -> int:
    """The uncompressed length a raw snappy block starts with: a base-128 varint of at most 5 bytes.

    Read and checked against the limit before decoding, because snappy allocates that much first.
    """
    declared = shift = 0
    for position in range(min(5, len(block))):
        byte = block[position]
        declared |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    else:  # empty, or no final byte within 5
        raise InvalidRecordError("snappy payload is corrupt: it does not start with an uncompressed length")
    if declared > 0xFFFF_FFFF:
        raise InvalidRecordError("snappy payload is corrupt: its uncompressed length does not fit 32 bits")
    return declared


def _snappy_block(block: bytes | memoryview, declared: int) -> bytes:
    try:
        out = snappy.uncompress(bytes(block))
    except snappy.UncompressError:
        raise InvalidRecordError("snappy payload is corrupt") from None
    if len(out) != declared:  # the decoder checks this too; the limit must not rest on that alone
        raise InvalidRecordError(f"snappy payload is corrupt: {len(out)} bytes decoded, {declared} declared")
    return out


# zstd (RFC 8878): the frame magic and the largest output of one block.
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_MAX = 128 * 1024
#: Feed the zstd decoder pieces whose blocks may decode to about this much, then check the limit.
_ZSTD_FEED_BYTES = 128 * 1024


_THREAD_STATE = threading.local()
#: A push's plain frame decoded without letting the GIL go (``_zstd_compiled``'s docstring says why); None where
#: the extension was not built or the pure paths are asked for: the streaming decoder then does every frame.
_zstd_compiled = load_compiled(f"{__package__}._zstd_compiled")


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """One decompression context per thread: creating one costs several times a small push's decoding."""
    decompressor = getattr(_THREAD_STATE, "zstd", None)
    if decompressor is None:
        decompressor = _THREAD_STATE.zstd = zstandard.ZstdDecompressor()
    return decompressor


def _zstd(data: bytes, limit: int) -> bytes:
    # ZstdDecompressionObj has no max_length: one call decodes all it is given, and four bytes of an RLE
    # block make 128 KiB. So the frame is cut at block boundaries into pieces of bounded output; any cut
    # of the input is valid for a streaming decoder, so the cuts only bound memory and the decoder alone
    # judges the frame. Its default window limit (128 MiB, as Kafka's zstd-jni) stays: the window is
    # allocated but only touched as output is written, and output is bounded here.
    # a frame longer than the compiled path's output decodes to about that much or more (zstd's framing adds a
    # few bytes at most): the streaming decoder takes it at once rather than after a decode begun in vain
    if _zstd_compiled is not None and len(data) <= _zstd_compiled.OUTPUT_CAPACITY:
        out = _zstd_compiled.decompress_frame(data, limit)
        if out is not None:
            return out
    cuts = _zstd_cuts(data)
    decoder = _zstd_decompressor().decompressobj()
    try:
        if not cuts:  # one piece, whose output is bounded by one block (a client's push, nearly always)
            return _one_frame(decoder.decompress(data), decoder, limit, "zstd")
        view = memoryview(data)
        chunks = []
        total = 0
        start = 0
        cuts.append(len(data))
        for cut in cuts:
            chunk = decoder.decompress(view[start:cut])
            start = cut
            total += len(chunk)
            if total > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            if decoder.eof:
                break
    except zstandard.ZstdError as e:
        raise InvalidRecordError(f"zstd payload is corrupt: {e}") from None
    if not decoder.eof:
        raise _truncated("zstd")
    trailing = len(decoder.unused_data) + len(data) - start
    if trailing:
        raise _trailing("zstd", trailing)
    return b"".join(chunks)


def _zstd_cuts(data: bytes) -> list[int]:
    """Offsets, at block boundaries, that cut a zstd frame into pieces decoding to ~_ZSTD_FEED_BYTES.

    Reads only the frame header's size fields and the 3-byte block headers, and validates nothing:
    at the first thing it does not follow (a bad magic, a reserved block type, the end of the input)
    it stops and the rest goes to the decoder in one piece, whose output is then at most its length
    (a raw block streams; a partial compressed or RLE block decodes to nothing). A frame whose blocks
    decode to less than ~_ZSTD_FEED_BYTES has no cut (a list, not a generator: that is the common case,
    and a push should not pay for a generator's frames).
    """
    cuts: list[int] = []
    size = len(data)
    if size < 6 or not data.startswith(_ZSTD_MAGIC):
        return cuts
    descriptor = data[4]
    single_segment = descriptor & 0x20
    position = (
        5
        + (0 if single_segment else 1)  # window descriptor
        + (0, 1, 2, 4)[descriptor & 0x03]  # dictionary id
        + ((1 if single_segment else 0), 2, 4, 8)[descriptor >> 6]  # frame content size
    )
    bound = 0
    while position + 3 <= size:
        header = int.from_bytes(data[position : position + 3], "little")
        block_type = (header >> 1) & 0x03
        block_size = header >> 3
        if block_type == 3 or header & 1:  # reserved type, or the last block: the rest is one piece
            return cuts
        position += 3 + (1 if block_type == 1 else block_size)
        if position > size:
            return cuts
        # raw and RLE blocks decode to block_size bytes, a compressed block to at most 128 KiB
        bound += _ZSTD_BLOCK_MAX if block_type == 2 else block_size
        if bound >= _ZSTD_FEED_BYTES:
            cuts.append(position)
            bound = 0
    return cuts


_DECOMPRESSORS = {
    CompressionType.NONE: _none,
    CompressionType.GZIP: _gzip,
    CompressionType.SNAPPY: _snappy,
    CompressionType.LZ4: _lz4,
    CompressionType.ZSTD: _zstd,
}
_DECOMPRESSORS_BY_ID = {int(codec): decoder for codec, decoder in _DECOMPRESSORS.items()}
