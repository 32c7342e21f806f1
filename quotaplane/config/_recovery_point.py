"""The event log's recovery point checkpoint: which segments need no scan at open (Kafka's recovery point).

Kafka keeps, per log, a *recovery point*: every offset below it is in a segment that was flushed and
is known good, so after an unclean shutdown ``LogLoader.recoverLog`` re-reads only the segments from
the recovery point on ("unflushed" segments) and merely indexes the others. Without it, opening the
config event log verifies every frame of every segment, so reopen time grows with the log kept.

The file ``recovery-point-checkpoint`` in the log directory holds the recovery point and, for every
segment wholly below it, what an open must know without reading the segment: its base and end
offsets, its size, the position of its last frame and the log's running maximum commit time at its
end. An open trusts a segment only if all of that still matches the file on disk (its size by
``stat``, its first and last frame headers by two 36-byte reads: CRC, offsets, end at the file's end);
the first segment that does not match, and every segment after it, is scanned in full as without a
checkpoint. The payload CRCs of trusted segments are verified when their frames are read, as Kafka
verifies batch CRCs on fetch.

The file is written whole or not at all (a temporary file, fsynced, renamed over the old one, the
directory fsynced) and carries a magic, a version and a CRC-32C of its bytes: a torn, truncated or
corrupted checkpoint is refused with a WARNING and the open falls back to a full scan, which gives
the same result, only slower. ``docs/eventlog-format.md`` §5.1 specifies the bytes.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

from quotaplane.durable import replace_file

__all__ = [
    "CHECKPOINT_FILE",
    "CHECKPOINT_VERSION",
    "CorruptCheckpointError",
    "RecoveryPoint",
    "SegmentRecord",
    "decode_checkpoint",
    "encode_checkpoint",
    "read_checkpoint",
    "write_checkpoint",
]

_log = logging.getLogger("quotaplane.config")

CHECKPOINT_FILE = "recovery-point-checkpoint"
_TEMP_FILE = f".{CHECKPOINT_FILE}.tmp"
CHECKPOINT_VERSION = 1
_MAGIC = b"QPRP"
#: magic, version, flags, recovery_point, segment_count
_HEAD = struct.Struct(">4sHHqI")
#: base_offset, end_offset, size, last_frame_position, max_commit_time_ms
_RECORD = struct.Struct(">qqqqq")
_CRC = struct.Struct(">I")
#: A checkpoint of more segments than this is refused (a damaged count must not allocate gigabytes).
_MAX_SEGMENTS = 10_000_000


class CorruptCheckpointError(ValueError):
    """A checkpoint file that does not verify; the open ignores it and scans every segment."""


@dataclass(frozen=True, slots=True)
class SegmentRecord:
    """What an open needs to know of a segment wholly below the recovery point, without scanning it."""

    base_offset: int
    end_offset: int  # the offset after its last frame: the next segment's name
    size: int  # bytes; the file must have exactly this size
    last_frame_position: int  # where its last frame starts (its header is re-read at open)
    max_commit_time_ms: int  # the log's running maximum commit time at its end (its last frame's header field)


@dataclass(frozen=True, slots=True)
class RecoveryPoint:
    """The recovery point and the records of the segments wholly below it, oldest first, contiguous."""

    recovery_point: int
    segments: tuple[SegmentRecord, ...]


def encode_checkpoint(point: RecoveryPoint) -> bytes:
    """The checkpoint file's bytes: header, records, CRC-32C of everything before it."""
    body = _HEAD.pack(_MAGIC, CHECKPOINT_VERSION, 0, point.recovery_point, len(point.segments)) + b"".join(
        _RECORD.pack(r.base_offset, r.end_offset, r.size, r.last_frame_position, r.max_commit_time_ms)
        for r in point.segments
    )
    return body + _CRC.pack(crc32c.crc32c(body))


def decode_checkpoint(data: bytes) -> RecoveryPoint:
    """The checkpoint in ``data``, verified (CRC, magic, version, consistent records); else
    ``CorruptCheckpointError``."""
    if len(data) < _HEAD.size + _CRC.size:
        raise CorruptCheckpointError(f"{len(data)} bytes, shorter than a checkpoint header")
    magic, version, flags, recovery_point, count = _HEAD.unpack_from(data, 0)
    if magic != _MAGIC:
        raise CorruptCheckpointError(f"bad magic {magic!r}")
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"unsupported version {version} (this reader knows {CHECKPOINT_VERSION})")
    if count > _MAX_SEGMENTS or len(data) != _HEAD.size + count * _RECORD.size + _CRC.size:
        raise CorruptCheckpointError(f"{len(data)} bytes do not hold {count} segment records")
    (stored,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    computed = crc32c.crc32c(memoryview(data)[: len(data) - _CRC.size])
    if stored != computed:
        raise CorruptCheckpointError(f"CRC32C mismatch (stored {stored:#010x}, computed {computed:#010x})")
    if flags != 0:
        raise CorruptCheckpointError(f"unknown flags {flags:#06x}")
    records = tuple(SegmentRecord(*_RECORD.unpack_from(data, _HEAD.size + i * _RECORD.size)) for i in range(count))
    previous: SegmentRecord | None = None
    for r in records:
        if r.base_offset < 0 or r.end_offset <= r.base_offset:
            raise CorruptCheckpointError(f"segment {r.base_offset}: end offset {r.end_offset} is not above its base")
        if not 0 <= r.last_frame_position < r.size:
            raise CorruptCheckpointError(
                f"segment {r.base_offset}: last frame at {r.last_frame_position}, size {r.size}"
            )
        if previous is not None and r.base_offset != previous.end_offset:
            raise CorruptCheckpointError(f"segment {r.base_offset} does not follow the previous one's end")
        if previous is not None and r.max_commit_time_ms < previous.max_commit_time_ms:
            raise CorruptCheckpointError(f"segment {r.base_offset}: running max commit time decreases")
        previous = r
    if recovery_point < 0 or (records and recovery_point != records[-1].end_offset):
        raise CorruptCheckpointError(f"recovery point {recovery_point} is not the end of the last segment recorded")
    return RecoveryPoint(recovery_point, records)


def read_checkpoint(directory: Path) -> RecoveryPoint | None:
    """The directory's checkpoint, or None if there is none or it does not verify (a WARNING: the open
    then scans every segment)."""
    path = directory / CHECKPOINT_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        _log.warning("%s: recovery point checkpoint unreadable, every segment is scanned: %s", path, exc)
        return None
    try:
        return decode_checkpoint(data)
    except CorruptCheckpointError as exc:
        _log.warning("%s: recovery point checkpoint ignored, every segment is scanned: %s", path, exc)
        return None


def write_checkpoint(directory: Path, point: RecoveryPoint, *, fsync: bool, sync_directory: bool = True) -> None:
    """Replace the directory's checkpoint atomically (``durable.replace_file``: temporary file, fsync, rename,
    directory fsync).

    ``sync_directory=False`` leaves the directory fsync to the caller (a roll fsyncs it once for the
    rename and the new segment). Only the log's writer (holding the lock) calls this; a crash leaves
    the old checkpoint or the new one, and at most the hidden temporary file, which the next write
    replaces. On an ``OSError`` the temporary file is removed (best effort) and the error raised.
    """
    replace_file(
        directory / CHECKPOINT_FILE,
        encode_checkpoint(point),
        fsync=fsync,
        sync_directory=sync_directory,
        temporary_name=_TEMP_FILE,
    )
