"""The event log's segment files: their names, the index of their verified frames, and recovery at open.

A segment ``%020d.log`` is named by the base offset of its first frame (Kafka's segment names), so a
directory listing sorts as the log does. Recovery is kept apart from ``EventLog`` because it is the
one place that decides what a crash may leave on disk and what is corruption. At open, the segments
wholly below the recovery point (``_recovery_point``: flushed and known good when it was written)
whose size and first and last frame headers still match the checkpoint are *trusted*: indexed from
the checkpoint, not read, so reopen time does not grow with the log kept (Kafka's ``LogLoader``
recovers only the segments from the recovery point on). Their per-frame index is built on first read
(``Segment.load_index``: every header verified, offsets dense, the end as recorded), and their payload
CRCs are verified as frames are read. Every other segment (from the first one the checkpoint does not
vouch for, and always the last) is scanned: each frame verified (header CRC, payload CRC, dense
offsets across frames and segments) without decompressing. A torn tail of the last segment, the trace
of a write no caller was acknowledged for, is copied to ``<segment>.torn-<position>`` and cut off (a
read-only open just stops there); any other damage raises ``CorruptLogError`` naming the file, the
byte position and the offset. ``docs/eventlog-format.md`` states the same rules.

A directory with snapshots and no segment (restored from a backup, or its segments deleted after a
compaction) is a log that starts where its newest valid snapshot ends, as KRaft bootstraps a node from
a snapshot: it holds no frame yet, and the next event appended gets that offset. If no snapshot
verifies, recovery refuses (``LogGapError``) rather than open empty: that would drop every quota.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from quotaplane.durable import fsync_directory, write_all

from ._framing import (
    FRAME_HEADER_SIZE,
    FrameError,
    FrameFormatError,
    FrameHeaderCrcError,
    FramePayloadCrcError,
    FrameTruncatedError,
    header_crc_matches,
    parse_frame,
    parse_frame_header,
)
from ._log_errors import CorruptLogError, LogGapError
from ._recovery_point import RecoveryPoint, SegmentRecord
from ._snapshot_file import CorruptSnapshotError, list_snapshots, verify_snapshot

__all__ = [
    "SEGMENT_SUFFIX",
    "Recovered",
    "Segment",
    "SegmentView",
    "list_segments",
    "parse_segment_name",
    "recover",
    "segment_name",
]

_log = logging.getLogger("quotaplane.config")

SEGMENT_SUFFIX = ".log"
_SEGMENT_RE = re.compile(r"(\d{20})\.log")


# --- names ---------------------------------------------------------------------------------------------
def segment_name(base_offset: int) -> str:
    """``%020d.log``: names sort as offsets do (Kafka's segment names)."""
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base offset of a segment file name, or None for any other file (``.lock``, torn copies, snapshots)."""
    m = _SEGMENT_RE.fullmatch(name)
    return int(m[1]) if m else None


def list_segments(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(base offset, path)`` of every segment file in ``directory``, by offset, from names only."""
    found = []
    with os.scandir(directory) as entries:
        for entry in entries:
            base = parse_segment_name(entry.name)
            if base is not None and entry.is_file():
                found.append((base, Path(entry.path)))
    found.sort()
    return found


# --- the in-memory index -------------------------------------------------------------------------------
@dataclass(slots=True, eq=False)
class Segment:
    """One segment's verified frames: parallel arrays, 24 bytes a frame (a 1M-frame log indexes in 24 MB).

    A segment trusted from the recovery point checkpoint is opened with ``indexed=False``: its offsets,
    size, last frame position and end-of-segment running max commit time are known, its arrays are
    empty until ``load_index`` (the first read of it). Such a segment is never the last one, so it is
    never appended to and its index, once loaded, never changes.
    """

    path: Path
    base_offset: int
    end_offset: int  # the next offset after its last frame (= base_offset when empty)
    size: int = 0  # bytes of verified frames
    bases: array = field(default_factory=lambda: array("q"))
    positions: array = field(default_factory=lambda: array("q"))
    max_times: array = field(default_factory=lambda: array("q"))  # the log's running maximum, per frame
    indexed: bool = True
    # a trusted segment's last frame position and running max commit times before it and at its end
    trusted_last_position: int = 0
    trusted_max_time_before: int = 0
    trusted_max_time: int = 0
    _load_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, base: int, position: int, max_time: int, next_offset: int, end: int) -> None:
        self.bases.append(base)
        self.positions.append(position)
        self.max_times.append(max_time)
        self.end_offset = next_offset
        self.size = end

    @property
    def max_time_at_end(self) -> int:
        """The log's running maximum commit time after this segment's last frame (0 if it is empty)."""
        if not self.indexed:
            return self.trusted_max_time
        return self.max_times[-1] if self.max_times else 0

    def record(self) -> SegmentRecord:
        """This (non-empty, complete) segment as a recovery point checkpoint record."""
        if self.indexed:
            return SegmentRecord(self.base_offset, self.end_offset, self.size, self.positions[-1], self.max_times[-1])
        return SegmentRecord(
            self.base_offset, self.end_offset, self.size, self.trusted_last_position, self.trusted_max_time
        )

    def load_index(self) -> Segment:
        """Build a trusted segment's frame index (once; thread-safe); the segment.

        Every frame header is verified (CRC, fields) and must lie inside the file, offsets must be dense
        from the name to the recorded end, and the last frame must be where the checkpoint said and carry
        the recorded running max: else ``CorruptLogError``. Payload CRCs are left to the reads, which
        verify every frame they return (``EventLog._read_frames``).
        """
        if self.indexed:
            return self
        with self._load_lock:
            if not self.indexed:
                self._load()
        return self

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise CorruptLogError(
                str(self.path), 0, "segment below the recovery point is gone", offset=self.base_offset
            ) from None
        bases, positions, max_times = array("q"), array("q"), array("q")
        max_time = self.trusted_max_time_before
        position = 0
        next_offset = self.base_offset
        where = " (segment below the recovery point, indexed at its first read)"
        if len(data) != self.size:
            raise CorruptLogError(
                str(self.path), 0, f"size {len(data)} changed since open ({self.size}){where}", offset=self.base_offset
            )
        while position < len(data):
            try:
                header = parse_frame_header(data, position)
            except FrameError as exc:
                raise CorruptLogError(str(self.path), position, exc.reason + where, offset=next_offset) from None
            if header.end > len(data):
                raise CorruptLogError(
                    str(self.path), position, f"frame runs past the end of the segment{where}", offset=next_offset
                )
            if header.base_offset != next_offset:
                raise CorruptLogError(
                    str(self.path),
                    position,
                    f"frame base offset {header.base_offset}, expected {next_offset}{where}",
                    offset=next_offset,
                )
            max_time = max(max_time, header.max_commit_time_ms)
            bases.append(header.base_offset)
            positions.append(position)
            max_times.append(max_time)
            next_offset = header.next_offset
            position = header.end
        if (
            next_offset != self.end_offset
            or not positions
            or positions[-1] != self.trusted_last_position
            or max_time != self.trusted_max_time
        ):
            raise CorruptLogError(
                str(self.path),
                positions[-1] if positions else 0,
                f"frames end at offset {next_offset}, the recovery point checkpoint says {self.end_offset}{where}",
                offset=next_offset,
            )
        self.bases, self.positions, self.max_times = bases, positions, max_times
        self.indexed = True


@dataclass(frozen=True, slots=True)
class SegmentView:
    """A segment as a reader saw it when it started: the frame count and size then (the arrays only grow)."""

    segment: Segment
    frames: int
    size: int


# --- recovery ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Recovered:
    """What recovery found: the segments, the log end offset and the running max commit time; ``trusted``
    is how many leading segments were indexed from the recovery point checkpoint instead of scanned."""

    segments: list[Segment]
    end_offset: int
    max_commit_time_ms: int
    trusted: int = 0


@dataclass(frozen=True, slots=True)
class _TornTail:
    position: int
    reason: str


def recover(directory: Path, *, read_only: bool, fsync: bool, checkpoint: RecoveryPoint | None = None) -> Recovered:
    """Index every segment of ``directory``: the leading ones ``checkpoint`` vouches for from it (see
    ``_trusted``), every other one by verifying each frame; cut (or, read-only, stop at) a torn tail.
    ``checkpoint=None`` scans everything."""
    found = list_segments(directory)
    segments = _trusted(found, checkpoint) if checkpoint is not None else []
    trusted = len(segments)
    max_time = segments[-1].trusted_max_time if segments else 0
    expected: int | None = segments[-1].end_offset if segments else None
    for i in range(trusted, len(found)):
        base, path = found[i]
        is_last = i == len(found) - 1
        if expected is not None and base != expected:
            raise CorruptLogError(
                str(path), 0, f"offset gap: the previous segment ends at offset {expected}", offset=base
            )
        if not is_last and path.stat().st_size == 0:
            raise CorruptLogError(str(path), 0, "empty segment before the last one", offset=base)
        segment, max_time = _scan_segment(path, base, is_last, max_time, read_only=read_only, fsync=fsync)
        segments.append(segment)
        expected = segment.end_offset
    if not segments:
        return _start_at_snapshot(directory)
    return Recovered(segments, segments[-1].end_offset, max_time, trusted)


def _trusted(found: list[tuple[int, Path]], checkpoint: RecoveryPoint) -> list[Segment]:
    """The longest run of leading segments, never the last, that ``checkpoint`` vouches for, unread.

    A segment is trusted when the checkpoint records it (wholly below the recovery point), its end is
    the next segment's name, its file has the recorded size, and its first and last frame headers (two
    36-byte reads) verify and say what the record says. The first that fails stops the run: it and every
    later segment are scanned, so a checkpoint that is stale, points past the log's end (segments
    deleted or replaced) or was written by another log can only make the open slower, never different.
    """
    records = {r.base_offset: r for r in checkpoint.segments}
    trusted: list[Segment] = []
    max_before = 0
    for i, (base, path) in enumerate(found[:-1]):
        record = records.get(base)
        why = "not below the recovery point" if record is None else _mismatch(path, record, found[i + 1][0])
        if why is not None:
            if record is not None:
                _log.warning("%s: does not match the recovery point checkpoint (%s); scanned from here", path, why)
            break
        trusted.append(
            Segment(
                path,
                base,
                record.end_offset,
                record.size,
                indexed=False,
                trusted_last_position=record.last_frame_position,
                trusted_max_time_before=max_before,
                trusted_max_time=record.max_commit_time_ms,
            )
        )
        max_before = record.max_commit_time_ms
    return trusted


def _mismatch(path: Path, record: SegmentRecord, next_base: int) -> str | None:
    """Why ``path`` is not the segment ``record`` describes, or None if it is (as far as cheap checks see)."""
    if record.end_offset != next_base:
        return f"recorded end offset {record.end_offset}, the next segment starts at {next_base}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"unreadable: {exc}"
    try:
        size = os.fstat(fd).st_size
        if size != record.size:
            return f"{size} bytes, recorded {record.size}"
        first = os.pread(fd, FRAME_HEADER_SIZE, 0)
        last = os.pread(fd, FRAME_HEADER_SIZE, record.last_frame_position)
    except OSError as exc:
        return f"unreadable: {exc}"
    finally:
        os.close(fd)
    try:
        head = parse_frame_header(first, 0)
        tail = parse_frame_header(last, 0)
    except FrameError as exc:
        return f"first or last frame header does not verify: {exc.reason}"
    if head.base_offset != record.base_offset:
        return f"first frame at offset {head.base_offset}"
    if (
        record.last_frame_position + tail.size != record.size
        or tail.next_offset != record.end_offset
        or tail.max_commit_time_ms != record.max_commit_time_ms
    ):
        return "last frame header differs from the record"
    return None


def _start_at_snapshot(directory: Path) -> Recovered:
    """A log with no segment: empty if there is no snapshot either, else starting at the end offset of the
    newest snapshot that verifies (its last commit time the running maximum the next frame continues).
    Snapshots that do not verify are skipped, loudly; if none verifies, ``LogGapError``."""
    snapshots = list_snapshots(directory)
    if not snapshots:
        return Recovered([], 0, 0)
    refused: list[str] = []
    for end, path in reversed(snapshots):
        try:
            header = verify_snapshot(path)
        except (CorruptSnapshotError, OSError) as exc:
            _log.warning("%s: snapshot %s does not verify, skipped: %s", directory, path.name, exc)
            refused.append(str(exc))
            continue
        newest = snapshots[-1][0]
        if end < newest:
            _log.warning(
                "%s: no segment, and the newest valid snapshot is %s: offsets [%d, %d) of the newer snapshots "
                "that do not verify are lost",
                directory,
                path.name,
                end,
                newest,
            )
        _log.info("%s: no segment; the log starts at snapshot %s (offset %d)", directory, path.name, end)
        return Recovered([], header.end_offset, header.last_commit_time_ms)
    raise LogGapError(
        str(directory),
        0,
        snapshots[-1][0],
        "the directory holds no segment and no snapshot that verifies: " + "; ".join(refused),
    )


def _scan_segment(
    path: Path, base: int, is_last: bool, max_time: int, *, read_only: bool, fsync: bool
) -> tuple[Segment, int]:
    """The verified index of one segment and the running max commit time after it."""
    data = path.read_bytes()
    segment = Segment(path, base, base)
    position = 0
    next_offset = base
    while position < len(data):
        try:
            header = parse_frame(data, position)
        except FrameError as exc:
            torn = _torn_tail_reason(data, position, exc) if is_last else None
            if torn is None:
                where = "" if is_last else " (not the last segment, so not a torn write)"
                raise CorruptLogError(str(path), position, exc.reason + where, offset=next_offset) from None
            if not read_only:
                _cut_torn_tail(path, data, _TornTail(position, torn), fsync=fsync)
            return segment, max_time
        if header.base_offset != next_offset:
            what = "the segment's name says" if position == 0 else "the previous frame ends at"
            raise CorruptLogError(
                str(path),
                position,
                f"frame base offset {header.base_offset}, but {what} {next_offset}",
                offset=next_offset,
            )
        max_time = max(max_time, header.max_commit_time_ms)
        segment.add(header.base_offset, position, max_time, header.next_offset, header.end)
        next_offset = header.next_offset
        position = header.end
    return segment, max_time


def _cut_torn_tail(path: Path, data: bytes, tail: _TornTail, *, fsync: bool) -> None:
    """Copy the torn bytes beside the segment (fsynced), then truncate the segment (fsynced)."""
    cut = data[tail.position :]
    copy = path.with_name(f"{path.name}.torn-{tail.position}")
    n = 0
    while copy.exists():  # an earlier crash cut at the same place: keep that copy too
        n += 1
        copy = path.with_name(f"{path.name}.torn-{tail.position}.{n}")
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, cut)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if fsync:
        fsync_directory(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, tail.position)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    _log.warning(
        "%s: torn tail of %d bytes at byte %d cut off (%s); the bytes are kept in %s",
        path,
        len(cut),
        tail.position,
        tail.reason,
        copy.name,
    )


def _torn_tail_reason(data: bytes, position: int, exc: FrameError) -> str | None:
    """Why the bad frame at ``position`` of the LAST segment is a torn tail, or None if it is corruption.

    A torn tail is what an interrupted write can leave: a prefix of the frame (header or payload cut
    by the end of the file), a header not (fully) written whose following bytes read as zeros (file
    systems may extend a file before its data reaches the disk, at block granularity), or a complete
    last frame whose payload was not fully written. Anything followed by non-zero bytes it does not
    explain is corruption: the writer never writes after a frame it did not fsync.
    """
    if isinstance(exc, FrameTruncatedError):
        return exc.reason
    if isinstance(exc, FrameHeaderCrcError | FrameFormatError):
        if header_crc_matches(data, position):
            return None  # an intact header with fields we refuse: another format, never a torn write
        after_header = position + FRAME_HEADER_SIZE
        if _all_zero(data, after_header):
            what = "every remaining byte is zero" if _all_zero(data, position) else "zeros follow the damaged header"
            return f"{exc.reason}; {what}"
        return None
    if isinstance(exc, FramePayloadCrcError) and parse_frame_header(data, position).end == len(data):
        return f"{exc.reason} in a last frame that ends at the end of the file"
    return None


def _all_zero(data: bytes, start: int) -> bool:
    return start >= len(data) or data.count(0, start) == len(data) - start
