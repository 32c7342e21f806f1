"""The config event log's frames: encode, parse and verify them as pure functions of bytes.

A frame is the log's unit of write and of fsync: one group commit of ``EventLog.append`` is one frame,
and a snapshot file is a sequence of frames too. Nothing here touches a file or a clock, so the log,
the snapshot files and a Spark job share one definition; ``docs/eventlog-format.md`` is the same
specification in prose and the two change together (the version byte is in every frame).

A frame is a 36-byte big-endian header, then ``payload_length`` bytes of payload:

======  ====  ===================  ===============================================================
offset  size  field                meaning
======  ====  ===================  ===============================================================
0       1     magic                ``FRAME_MAGIC`` (0xE7)
1       1     version              ``FRAME_VERSION`` (1)
2       1     codec                0 none, 1 zstd (a zstd frame that records its content size)
3       1     flags                0 in version 1
4       4     payload_length       u32, payload bytes on disk
8       8     base_offset          i64, the first record's number (a log offset in segments)
16      4     record_count         u32, at least 1
20      8     max_commit_time_ms   i64
28      4     payload_crc          u32, CRC32C of the payload bytes on disk
32      4     header_crc           u32, CRC32C of header bytes [0, 32)
======  ====  ===================  ===============================================================

The header has its own CRC so that a reader can trust ``payload_length`` before it reads the payload:
a flipped bit in the length is then a header CRC failure (corruption), never mistaken for a frame
whose payload runs past the end of the file (a torn write).

>>> frame = encode_frame(b"\\x0a\\x00", base_offset=7, record_count=1, max_commit_time_ms=1000)
>>> header = parse_frame(frame, 0)
>>> header.base_offset, header.record_count, header.next_offset, header.end == len(frame)
(7, 1, 8, True)
>>> bytes(decode_payload(frame, header))
b'\\n\\x00'
>>> parse_frame(frame[:-1], 0)
Traceback (most recent call last):
...
quotaplane.config._framing.FrameTruncatedError: at byte 0: payload of 2 bytes runs past the end (1 bytes left)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import crc32c
import zstandard
from google.protobuf.message import DecodeError, Message

from quotaplane.v1 import config_events_pb2 as pb

from ._columns import decode_columns, encode_events

__all__ = [
    "CODEC_NONE",
    "CODEC_ZSTD",
    "FRAME_HEADER_SIZE",
    "FRAME_MAGIC",
    "FRAME_VERSION",
    "MAX_PAYLOAD_BYTES",
    "FrameDecodeError",
    "FrameError",
    "FrameFormatError",
    "FrameHeader",
    "FrameHeaderCrcError",
    "FramePayloadCrcError",
    "FrameTruncatedError",
    "decode_event_batch",
    "decode_message",
    "decode_payload",
    "encode_event_batch",
    "encode_frame",
    "header_crc_matches",
    "iter_frames",
    "parse_frame",
    "parse_frame_header",
    "verify_payload",
]

#: Not ASCII and not zero: a zero-filled tail or a text file never starts a frame.
FRAME_MAGIC = 0xE7
FRAME_VERSION = 1
CODEC_NONE = 0
CODEC_ZSTD = 1
_CODECS = (CODEC_NONE, CODEC_ZSTD)

#: magic, version, codec, flags, payload_length, base_offset, record_count, max_commit_time_ms, payload_crc
_HEAD = struct.Struct(">BBBBIqIqI")
_HEADER_CRC = struct.Struct(">I")
FRAME_HEADER_SIZE = _HEAD.size + _HEADER_CRC.size  # 36
_U32_MAX = 0xFFFF_FFFF
#: The largest payload a frame may hold on disk (the u32 field's range).
MAX_PAYLOAD_BYTES = _U32_MAX


class FrameError(ValueError):
    """A frame that does not verify, at byte ``position`` of its buffer (the frame's first byte).

    Subclasses say what kind of damage it is, which is what the log's recovery decides on (a torn
    tail or corruption). Picklable with its fields (Spark ships exceptions between processes).
    """

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"at byte {position}: {reason}")
        self.position = position
        self.reason = reason

    def __reduce__(self) -> tuple[type[FrameError], tuple[int, str]]:
        return (type(self), (self.position, self.reason))


class FrameTruncatedError(FrameError):
    """The buffer ends inside the frame: fewer than 36 header bytes, or a payload that runs past the end."""


class FrameHeaderCrcError(FrameError):
    """The header's bytes do not match its header CRC (``payload_length`` cannot be trusted)."""


class FrameFormatError(FrameError):
    """A frame this reader does not understand: bad magic or version, or impossible header fields."""


class FramePayloadCrcError(FrameError):
    """The header verifies but the payload bytes do not match the payload CRC."""


class FrameDecodeError(FrameError):
    """The frame verifies (both CRCs) but its payload does not decompress or decode as the header says."""


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """A parsed, CRC-verified frame header; ``position`` is where the frame starts in its buffer."""

    position: int
    codec: int
    flags: int
    payload_length: int
    base_offset: int
    record_count: int
    max_commit_time_ms: int
    payload_crc: int

    @property
    def payload_start(self) -> int:
        return self.position + FRAME_HEADER_SIZE

    @property
    def end(self) -> int:
        """The position just past the payload: where the next frame starts."""
        return self.position + FRAME_HEADER_SIZE + self.payload_length

    @property
    def size(self) -> int:
        return FRAME_HEADER_SIZE + self.payload_length

    @property
    def next_offset(self) -> int:
        """The base offset the next frame must have (records are dense)."""
        return self.base_offset + self.record_count

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1


Buffer = bytes | bytearray | memoryview


# --- encoding ------------------------------------------------------------------------------------------
def encode_frame(
    raw: Buffer,
    *,
    base_offset: int,
    record_count: int,
    max_commit_time_ms: int,
    codec: int | None = None,
    compressor: zstandard.ZstdCompressor | None = None,
) -> bytes:
    """One frame holding ``raw`` (a serialized message), header first.

    ``codec=None`` picks zstd unless compressing does not make the payload smaller (a one-event frame
    of a few dozen bytes), then none: readers handle both, so the choice is the writer's per frame.
    The zstd frame records its content size, so a reader allocates once.
    """
    if record_count < 1 or record_count > _U32_MAX:
        raise ValueError(f"a frame holds 1..{_U32_MAX} records, got {record_count}")
    if base_offset < 0:
        raise ValueError(f"base_offset must be >= 0, got {base_offset}")
    if codec is None or codec == CODEC_ZSTD:
        compressed = (compressor or zstandard.ZstdCompressor()).compress(raw)
        if codec is None and len(compressed) >= len(raw):
            codec, payload = CODEC_NONE, bytes(raw)
        else:
            codec, payload = CODEC_ZSTD, compressed
    elif codec == CODEC_NONE:
        payload = bytes(raw)
    else:
        raise ValueError(f"unknown codec {codec}")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"frame payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    head = _HEAD.pack(
        FRAME_MAGIC,
        FRAME_VERSION,
        codec,
        0,
        len(payload),
        base_offset,
        record_count,
        max_commit_time_ms,
        crc32c.crc32c(payload),
    )
    return head + _HEADER_CRC.pack(crc32c.crc32c(head)) + payload


def encode_event_batch(
    events: Iterable[pb.Event], base_offset: int, compressor: zstandard.ZstdCompressor | None = None
) -> bytes:
    """A log frame of ``events`` at ``base_offset``; ``max_commit_time_ms`` is the events' largest commit time.

    (``EventLog`` writes frames itself, with the log's running maximum: see its docstring.)
    """
    events = list(events)
    count = len(events)
    if count == 0:
        raise ValueError("a frame holds at least one event")
    max_time = max(e.commit_time_ms for e in events)
    return encode_frame(
        encode_events(events),
        base_offset=base_offset,
        record_count=count,
        max_commit_time_ms=max_time,
        compressor=compressor,
    )


# --- parsing -------------------------------------------------------------------------------------------
def parse_frame_header(buf: Buffer, position: int) -> FrameHeader:
    """The header at ``position``, verified: magic, version, header CRC, then the fields.

    Magic and version come before the CRC so that a frame of another format or a future version is
    named as such. The payload is not looked at (see ``verify_payload``). Raises a ``FrameError``.
    """
    left = len(buf) - position
    if left < FRAME_HEADER_SIZE:
        raise FrameTruncatedError(position, f"{left} bytes left, a frame header is {FRAME_HEADER_SIZE}")
    magic, version, codec, flags, length, base, count, max_time, payload_crc = _HEAD.unpack_from(buf, position)
    if magic != FRAME_MAGIC:
        raise FrameFormatError(position, f"bad magic {magic:#04x}, expected {FRAME_MAGIC:#04x}")
    if version != FRAME_VERSION:
        raise FrameFormatError(position, f"unsupported frame version {version} (this reader knows {FRAME_VERSION})")
    (stored,) = _HEADER_CRC.unpack_from(buf, position + _HEAD.size)
    with memoryview(buf) as view:
        computed = crc32c.crc32c(view[position : position + _HEAD.size])
    if computed != stored:
        raise FrameHeaderCrcError(
            position, f"header CRC32C mismatch (stored {stored:#010x}, computed {computed:#010x})"
        )
    if codec not in _CODECS:
        raise FrameFormatError(position, f"unknown codec {codec}")
    if flags != 0:
        raise FrameFormatError(position, f"unknown flags {flags:#04x}")
    if count == 0:
        raise FrameFormatError(position, "record_count is 0")
    if base < 0:
        raise FrameFormatError(position, f"negative base_offset {base}")
    return FrameHeader(position, codec, flags, length, base, count, max_time, payload_crc)


def header_crc_matches(buf: Buffer, position: int) -> bool:
    """Whether the 36 bytes at ``position`` are a header exactly as some writer wrote it (CRC matches).

    Recovery uses it to tell a damaged header (a torn or corrupted write) from an intact one with
    fields this reader refuses (another format or version: never a torn tail).
    """
    if len(buf) - position < FRAME_HEADER_SIZE:
        return False
    (stored,) = _HEADER_CRC.unpack_from(buf, position + _HEAD.size)
    with memoryview(buf) as view:
        return crc32c.crc32c(view[position : position + _HEAD.size]) == stored


def verify_payload(buf: Buffer, header: FrameHeader) -> None:
    """Check that the payload lies inside ``buf`` and matches its CRC; raises a ``FrameError``."""
    left = len(buf) - header.payload_start
    if header.payload_length > left:
        raise FrameTruncatedError(
            header.position, f"payload of {header.payload_length} bytes runs past the end ({left} bytes left)"
        )
    with memoryview(buf) as view:
        computed = crc32c.crc32c(view[header.payload_start : header.end])
    if computed != header.payload_crc:
        raise FramePayloadCrcError(
            header.position,
            f"payload CRC32C mismatch (stored {header.payload_crc:#010x}, computed {computed:#010x})",
        )


def parse_frame(buf: Buffer, position: int) -> FrameHeader:
    """The whole frame at ``position`` verified (header and payload CRC); its header."""
    header = parse_frame_header(buf, position)
    verify_payload(buf, header)
    return header


def iter_frames(buf: Buffer, position: int = 0, end: int | None = None) -> Iterator[FrameHeader]:
    """Every frame of ``buf[position:end]``, verified, in order; raises the first ``FrameError`` met.

    Only the frames themselves are checked: whether base offsets are contiguous is the caller's rule
    (the log's and the snapshot reader's).
    """
    if end is None:
        end = len(buf)
    view = memoryview(buf)[:end] if end != len(buf) else buf
    while position < end:
        header = parse_frame(view, position)
        yield header
        position = header.end


# --- decoding ------------------------------------------------------------------------------------------
def decode_payload(
    buf: Buffer, header: FrameHeader, decompressor: zstandard.ZstdDecompressor | None = None
) -> bytes | memoryview:
    """The frame's serialized message (uncompressed). Raises ``FrameDecodeError`` for a bad zstd frame.

    Give one ``decompressor`` per thread for speed (they are not thread-safe).
    """
    view = memoryview(buf)[header.payload_start : header.end]
    if header.codec == CODEC_NONE:
        return view
    try:
        size = zstandard.frame_content_size(view)
        if size < 0:
            raise FrameDecodeError(header.position, "zstd frame does not record its content size")
        if size > _ZSTD_MAX_RATIO * len(view):  # checked before the decoder allocates ``size`` bytes
            raise FrameDecodeError(
                header.position, f"zstd frame claims {size} bytes of content, more than its {len(view)} bytes can hold"
            )
        return (decompressor or zstandard.ZstdDecompressor()).decompress(view, max_output_size=size)
    except zstandard.ZstdError as exc:
        raise FrameDecodeError(header.position, f"zstd decompression failed: {exc}") from None


#: The most a zstd frame can expand: every block that produces output takes at least 4 bytes (an RLE block:
#: a 3-byte header and the byte) and produces at most 128 KiB. A content size above ratio x payload is a lie,
#: and trusting it would let a frame of a few bytes make the decoder allocate gigabytes.
_ZSTD_MAX_RATIO = 128 * 1024 // 4


M = TypeVar("M", bound=Message)


def decode_message(
    buf: Buffer, header: FrameHeader, message_type: type[M], decompressor: zstandard.ZstdDecompressor | None = None
) -> M:
    """The frame's payload parsed as one ``message_type`` (one ``FromString``: no per-record Python work)."""
    raw = decode_payload(buf, header, decompressor)
    try:
        return message_type.FromString(raw)
    except DecodeError as exc:
        raise FrameDecodeError(
            header.position, f"payload does not parse as {message_type.DESCRIPTOR.full_name}: {exc}"
        ) from None


def decode_event_batch(
    buf: Buffer, header: FrameHeader, decompressor: zstandard.ZstdDecompressor | None = None
) -> pb.EventColumns:
    """A log frame's ``EventColumns`` (``_columns``), checked to hold ``record_count`` consistent events."""
    raw = decode_payload(buf, header, decompressor)
    try:
        columns = decode_columns(bytes(raw))
    except ValueError as exc:
        raise FrameDecodeError(header.position, str(exc)) from None
    if len(columns.kind) != header.record_count:
        raise FrameDecodeError(
            header.position, f"header says {header.record_count} events, payload holds {len(columns.kind)}"
        )
    return columns
