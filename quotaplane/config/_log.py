"""``EventLog``: the durable, append-only config event log (segments of CRC32C frames, group commit).

Every config change is a ``pb.Event`` at a dense 0-based offset. The log is a directory of segment
files ``%020d.log`` (named by the base offset of their first frame), each a concatenation of frames
(``_framing``); ``docs/eventlog-format.md`` is the byte-level specification and the recovery rules.

**Durability.** ``append`` returns only after the frame holding its events is written and fsynced
(``os.fdatasync``; a new segment's directory entry is fsynced when the segment is created).
Concurrent appends share one frame, one write and one fsync (group commit): the first waiter to
find no write in progress becomes the leader, takes every pending append (in arrival order, each
caller's events contiguous), writes one frame, fsyncs, wakes the waiters of that round and hands
the lead to the first waiter still queued; appends arriving meanwhile queue for the next round. The
leader also encodes the round's appends that wait as copies of their events (all but those too large
for a frame by their size bound, encoded and checked at ``submit``): one ``encode_events`` call for
the round's events instead of one per append.
Each waiter sleeps on its own lock, so a round wakes only its own waiters and the next leader, not
every queued thread. If a write or fsync fails, nothing of that round is acknowledged and the log
refuses every later append (``EventLogFailedError``): after a failed fsync Linux may drop the dirty
pages and report success the next time, so the only safe next step is to reopen, which re-reads
what is really on disk.

**Pipelining.** ``submit`` queues an append and returns at once with its offsets (``PendingAppend``):
they are assigned in queue order, which is the order on disk. ``PendingAppend.wait`` is the
acknowledgement: it returns once the frame is fsynced (leading a round itself if no one is writing).
A writer that must answer each change only when durable, yet decide the next change before then
(Kafka's controller applies a record to its in-memory state at once and answers when it commits),
submits under its own lock and waits outside it, so concurrent changes share one fsync. ``append``
is ``submit(...).wait()``.

**One writer.** ``open`` takes an exclusive ``flock`` on ``<directory>/.lock`` (the holder's pid is
written in it), released by ``close`` or by the process's death, even by ``kill -9``.
``read_only=True`` takes no lock and never writes.

**Recovery** (at every open, ``_segments``): segments wholly below the recovery point
(``_recovery_point``: a checkpoint file advanced when a segment is rolled, all its frames fsynced, and
at a clean close) are indexed from the checkpoint after two header reads each, not re-verified; the
others (always the last) have each frame verified without decompressing. So reopen time is bounded by
the active segment's size, not the log's. A torn tail of the last segment is copied aside and cut off
(a read-only open stops at it), any other damage raises ``CorruptLogError``; frames of trusted segments
are verified (CRCs) when read. The rules are in ``docs/eventlog-format.md``.
A directory with snapshots and no segment starts at the newest valid snapshot's end offset (its start
and end offsets both, no frame yet; the next append gets that offset), as KRaft bootstraps from a
snapshot; if none verifies, ``LogGapError``: never an empty log where a config was.

**Disk faults.** Every write and fsync of an append goes through ``_io`` (``LogIO``), the one seam
where tests inject ``ENOSPC``, ``EIO`` or a slow fsync under the real writer.

**Commit times.** The log reads no clock: events keep the ``commit_time_ms`` their caller set. A
frame's ``max_commit_time_ms`` is the largest commit time of that frame's events *and of every event
before it* (the running maximum), so it never decreases along the log whatever callers do, and
``offset_for_time`` bisects frame headers and decodes one frame. When commit times never decrease
(the controller's rule) it is simply the commit time of the frame's last event.
"""

from __future__ import annotations

import _thread
import bisect
import contextlib
import fcntl
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

import zstandard

from quotaplane.durable import fsync_directory, write_all
from quotaplane.v1 import config_events_pb2 as pb

from ._columns import events_of, slice_columns
from ._framing import FrameError, FrameHeader, decode_event_batch, encode_frame, parse_frame
from ._log_errors import (
    CorruptLogError,
    EventLogClosedError,
    EventLogError,
    EventLogFailedError,
    EventLogLockedError,
    OffsetOutOfRangeError,
)
from ._pending import PendingAppend, round_payload, wake
from ._recovery_point import RecoveryPoint, read_checkpoint, write_checkpoint
from ._segments import Segment, SegmentView, recover, segment_name

__all__ = ["DEFAULT_SEGMENT_BYTES", "LOCK_FILE", "MAX_FRAME_BYTES", "EventLog", "LogIO", "PendingAppend"]

_log = logging.getLogger("quotaplane.config")

#: Small segments bound a reopen after a crash: only the active segment is verified frame by frame (the
#: recovery point vouches for the rest), ~30 ms for 1 MiB of small frames on a 2-core machine against ~0.5 s
#: for 16 MiB. A config log grows slowly, so the cost (a file and a checkpoint write per MiB) is small.
DEFAULT_SEGMENT_BYTES = 1024 * 1024
LOCK_FILE = ".lock"
#: A group-commit round takes pending appends up to this many serialized event bytes (at least one
#: append), so a frame, and what a reader decompresses at once, stays bounded; the rest wait a round.
MAX_FRAME_BYTES = 64 * 1024 * 1024
#: Readers read segments in chunks of about this many bytes (whole frames).
_READ_CHUNK_BYTES = 4 * 1024 * 1024


def _sync_data(fd: int) -> None:
    # Looked up at each call (not bound at import) so that a test can make it fail for real.
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


class LogIO:
    """The file-system calls the writer makes to put frames on disk: the one seam for disk faults.

    Every byte an append is acknowledged for goes through these methods (a segment's creation, the
    frame's write, its fsync, the truncation back after a failure), so a test replaces the module's
    ``_io`` with a subclass that raises ``ENOSPC`` or ``EIO``, writes part of a frame first, or sleeps in
    ``sync``, and observes the real writer, group commit and store above it; nothing of the log's own
    logic is mocked. Recovery and snapshot files do their own I/O: they run at open, not per change.
    """

    def create(self, path: Path) -> int:
        """Create the new segment ``path`` (it must not exist), opened for appending; its descriptor."""
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def sync_directory(self, directory: Path) -> None:
        """Persist the directory's entries (a new segment's name)."""
        fsync_directory(directory)

    def write(self, fd: int, data: bytes) -> None:
        """Write every byte of ``data`` at the end of the segment (``os.write`` until done)."""
        write_all(fd, data)

    def sync(self, fd: int) -> None:
        """Make what was written durable (``fdatasync``)."""
        _sync_data(fd)

    def truncate(self, fd: int, size: int) -> None:
        """Cut the segment back to ``size`` bytes (after a failed write or fsync)."""
        os.ftruncate(fd, size)


#: The writer's file-system calls (``LogIO``), looked up at each call so that a test can swap it.
_io = LogIO()


# --- the log -------------------------------------------------------------------------------------------
class EventLog:
    """The config event log of one directory. Thread-safe; use ``EventLog.open``."""

    def __init__(self, directory: Path, *, segment_bytes: int, fsync: bool, read_only: bool) -> None:
        # Private: ``open`` builds the log, takes the lock and recovers it.
        self._directory = directory
        self._segment_bytes = segment_bytes
        self._fsync = fsync
        self._read_only = read_only
        self._cond = threading.Condition(threading.Lock())
        self._segments: list[Segment] = []
        self._end_offset = 0
        self._next_offset = 0  # the end offset once every queued append is written (submit assigns from it)
        self._max_commit_time = 0  # running maximum of commit times (frame headers carry it)
        self._queue: list[PendingAppend] = []
        self._leading = False
        self._closed = False
        self._failure: OSError | None = None
        self._fd: int | None = None  # the active segment, opened for append
        self._lock_fd: int | None = None
        self._compressor = zstandard.ZstdCompressor()

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        fsync: bool = True,
        read_only: bool = False,
        full_recovery: bool = False,
    ) -> EventLog:
        """Open (creating if needed) the log in ``directory``: lock, recover from the recovery point, cut a torn tail.

        ``segment_bytes``: roll to a new segment before a frame once the active one holds that many.
        ``fsync=False`` (tests and benchmarks only) skips every fsync: appends survive a process crash,
        not a power loss. ``read_only=True`` takes no lock and changes nothing: it indexes the frames
        on disk now, stops quietly at a torn tail, and does not see later appends. A directory with
        snapshots and no segment opens at the newest valid snapshot's end offset. Raises
        ``EventLogLockedError``, ``CorruptLogError``, ``LogGapError`` (snapshots only, none valid), and
        ``FileNotFoundError`` for a missing directory opened read-only.

        ``full_recovery=True`` ignores the recovery point checkpoint and verifies every frame of every
        segment, as an open without a checkpoint does (an operator's check of the whole log; the
        benchmarks' reference).
        """
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be >= 1, got {segment_bytes}")
        path = Path(directory)
        log = cls(path, segment_bytes=segment_bytes, fsync=fsync, read_only=read_only)
        if read_only:
            if not path.is_dir():
                raise FileNotFoundError(f"{path}: no event log directory")
            log._recover(full_recovery)
            return log
        log._create_directory()
        log._take_lock()
        try:
            log._recover(full_recovery)
            log._open_active_segment()
        except BaseException:
            log._release()
            raise
        return log

    # --- opening ---------------------------------------------------------------------------------------
    def _create_directory(self) -> None:
        if self._directory.is_dir():
            return
        missing = []
        d = self._directory
        while not d.exists():
            missing.append(d)
            d = d.parent
        for d in reversed(missing):
            with contextlib.suppress(FileExistsError):
                d.mkdir()
            if self._fsync:
                fsync_directory(d.parent)

    def _take_lock(self) -> None:
        lock_path = self._directory / LOCK_FILE
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            finally:
                os.close(fd)
            raise EventLogLockedError(
                f"{self._directory}: event log is locked by another writer (pid {holder}, in {lock_path})"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._lock_fd = fd

    def _recover(self, full_recovery: bool) -> None:
        """Index every segment, trusting those the checkpoint vouches for and verifying each frame of the
        others; cut (or, read-only, stop at) a torn tail (``_segments``). A writer whose scan verified
        segments below the last one that the checkpoint did not cover flushes them and advances the
        recovery point past them, so the next open does not scan them again."""
        checkpoint = None if full_recovery else read_checkpoint(self._directory)
        recovered = recover(self._directory, read_only=self._read_only, fsync=self._fsync, checkpoint=checkpoint)
        self._segments = recovered.segments
        self._end_offset = self._next_offset = recovered.end_offset
        self._max_commit_time = recovered.max_commit_time_ms
        if not self._read_only and recovered.trusted < len(self._segments) - 1:
            complete = self._segments[:-1]
            if self._fsync:
                # Kafka advances its recovery point only over flushed data: the previous writer may have
                # run with fsync off, so what the scan verified in the page cache is made durable first.
                try:
                    for segment in complete[recovered.trusted :]:
                        fd = os.open(segment.path, os.O_RDONLY | os.O_CLOEXEC)
                        try:
                            os.fsync(fd)
                        finally:
                            os.close(fd)
                except OSError as exc:
                    _log.warning("%s: recovery point not advanced, segments not flushed: %s", self._directory, exc)
                    return
            self._write_checkpoint(complete, sync_directory=True)

    def _write_checkpoint(self, complete: list[Segment], *, sync_directory: bool) -> None:
        """Record ``complete`` (non-empty, fully written and fsynced segments, oldest first) as wholly below
        the recovery point. Best effort: a failure is logged and leaves the previous checkpoint, which
        only makes the next open scan more (never changes what it finds)."""
        if not complete:
            return
        point = RecoveryPoint(complete[-1].end_offset, tuple(s.record() for s in complete))
        try:
            write_checkpoint(self._directory, point, fsync=self._fsync, sync_directory=sync_directory)
        except OSError as exc:
            _log.warning(
                "%s: recovery point checkpoint not written (the next open scans more): %s", self._directory, exc
            )

    def _open_active_segment(self) -> None:
        if self._segments:
            self._fd = os.open(self._segments[-1].path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    # --- appending -------------------------------------------------------------------------------------
    def append(self, events: Sequence[pb.Event]) -> int:
        """Append ``events`` (as given) at the next offsets; the offset of the last one, durable on return.

        Concurrent calls share one frame and one fsync; each call's events stay contiguous and in
        order. Raises ValueError for no events, TypeError for something that is not a ``pb.Event``,
        ``EventLogClosedError``, ``EventLogFailedError`` (this or an earlier round failed to write),
        or ``EventLogError`` on a read-only log.
        """
        return self.submit(events).wait()

    def submit(self, events: Sequence[pb.Event]) -> PendingAppend:
        """Queue ``events`` for the next group commit and return at once; ``wait()`` on the result is the
        acknowledgement (durable on return). Offsets are assigned now, in submission order.

        Raises as ``append`` does for bad events and for a log that takes no appends; a write that
        fails later is raised by ``wait``.
        """
        request = PendingAppend.prepare(self, events, MAX_FRAME_BYTES)
        with self._cond:
            self._check_writable()
            request.first_offset = self._next_offset
            self._next_offset += request.count
            request.last_offset = self._next_offset - 1
            self._queue.append(request)
        return request

    def _wait(self, request: PendingAppend) -> None:
        """Until ``request`` is done: lead a round when no one is writing, else sleep until woken (by the
        round that wrote it, or to lead the next one)."""
        while True:
            with self._cond:
                if request.done:
                    return
                if self._leading:
                    sleeper = _thread.allocate_lock()
                    sleeper.acquire()
                    request._sleepers.append(sleeper)
                    round_ = None
                else:
                    round_ = self._take_round()
            if round_ is None:
                sleeper.acquire()  # released by _wake
            elif round_:
                self._lead(round_)

    def _check_writable(self) -> None:
        if self._read_only:
            raise EventLogError(f"{self._directory}: the event log was opened read-only")
        if self._closed:
            raise EventLogClosedError(f"{self._directory}: the event log is closed")
        if self._failure is not None:
            raise self._failed_error()

    def _failed_error(self) -> EventLogFailedError:
        error = EventLogFailedError(
            f"{self._directory}: a write or fsync failed ({self._failure}); nothing of that round was "
            "acknowledged and the log takes no more appends until it is reopened"
        )
        error.__cause__ = self._failure
        return error

    def _take_round(self) -> list[PendingAppend]:
        """Become the leader (lock held): take pending appends up to ``MAX_FRAME_BYTES``, in arrival order.
        On a failed or closed log, fail every queued append instead and return no round."""
        if self._failure is not None or self._closed:
            for request in self._queue:
                request.error = (
                    self._failed_error()
                    if self._failure is not None
                    else EventLogClosedError(f"{self._directory}: the event log is closed")
                )
                request.done = True
                wake(request)
            self._queue.clear()
            return []
        size = 0
        n = 0
        for request in self._queue:
            if n and size + request.size > MAX_FRAME_BYTES:
                break
            size += request.size
            n += 1
        round_ = self._queue[:n]
        del self._queue[:n]
        self._leading = True
        return round_

    def _lead(self, round_: list[PendingAppend]) -> None:
        """Write and fsync one frame for the round (lock released), then publish it, wake the round's
        waiters and hand the lead to the first waiter still queued."""
        base = self._end_offset  # only the leader moves it, and there is one leader at a time
        count = 0
        max_time = self._max_commit_time
        for request in round_:
            count += request.count
            max_time = max(max_time, request.max_time)
        assert round_[0].first_offset == base and round_[-1].last_offset == base + count - 1
        failure: BaseException | None = None
        written: tuple[Segment, int, int] | None = None
        try:
            frame = encode_frame(
                round_payload(round_),
                base_offset=base,
                record_count=count,
                max_commit_time_ms=max_time,
                compressor=self._compressor,
            )
            segment = self._segment_for(base)
            position = segment.size
            try:
                _io.write(self._fd, frame)
                if self._fsync:
                    _io.sync(self._fd)
            except BaseException:
                with contextlib.suppress(OSError):  # best effort: no unacknowledged bytes after a reopen
                    _io.truncate(self._fd, position)
                raise
            written = (segment, position, len(frame))
        except BaseException as exc:
            failure = exc
        with self._cond:
            self._leading = False
            if written is not None:
                segment, position, size = written
                segment.add(base, position, max_time, base + count, position + size)
                self._end_offset = base + count
                self._max_commit_time = max_time
            else:
                self._failure = failure if isinstance(failure, OSError) else OSError(f"append failed: {failure!r}")
                if not isinstance(failure, OSError):
                    self._failure.__cause__ = failure
            for request in round_:
                if written is None:
                    request.error = self._failed_error()
                request.done = True
                request.payload = request.events = None  # written or failed: a caller keeping the handle keeps no copy
                wake(request)
            for request in self._queue:
                if request._sleepers:
                    wake(request)  # the next leader
                    break
            self._cond.notify_all()  # a close() waiting for this round
        if failure is not None and not isinstance(failure, Exception):
            raise failure  # KeyboardInterrupt, SystemExit: the waiters were failed, the leader's thread stops

    def _segment_for(self, base: int) -> Segment:
        """The segment the frame at ``base`` goes to: the active one, or a new one once it is full.

        Before a roll the recovery point advances to ``base``: every frame so far was written and
        fsynced (a failed round stops the log before any roll), so the segments up to the active one
        are complete. The checkpoint is renamed into place before the new segment is created, and the
        one directory fsync of the roll persists both (a crash between them leaves a checkpoint whose
        recovery point is the log end: true).
        """
        if self._segments and self._segments[-1].size < self._segment_bytes:
            return self._segments[-1]
        self._write_checkpoint(list(self._segments), sync_directory=False)
        path = self._directory / segment_name(base)
        fd = _io.create(path)
        try:
            if self._fsync:
                _io.sync_directory(self._directory)
        except BaseException:
            os.close(fd)
            raise
        segment = Segment(path, base, base)
        with self._cond:
            if self._fd is not None:
                os.close(self._fd)
            self._fd = fd
            self._segments.append(segment)
        return segment

    # --- reading ---------------------------------------------------------------------------------------
    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def end_offset(self) -> int:
        """The end of what is durable (Kafka's log end offset): every event below it is written and fsynced.

        Appends submitted and not yet acknowledged get offsets at or above it and are not counted until
        their frame is fsynced, so ``read`` / ``read_batches`` (and whoever follows the log through them)
        never see an event that could still be lost."""
        return self._end_offset

    @property
    def start_offset(self) -> int:
        """The first offset still in a segment (Kafka's log start offset): 0 unless segments were deleted,
        or the log started at a snapshot (a directory with a snapshot and no segment): then, until the
        first append, start and end are both the snapshot's end offset and the log holds no frame."""
        segments = self._segments
        return segments[0].base_offset if segments else self._end_offset

    @property
    def failure(self) -> OSError | None:
        """The error of the write or fsync that failed the log (it takes no appends until reopened), or None."""
        return self._failure

    def segments(self) -> list[Path]:
        """The segment files, oldest first; the last one is the active segment."""
        with self._cond:
            return [s.path for s in self._segments]

    def read(self, from_offset: int = 0, to_offset: int | None = None) -> Iterator[tuple[int, pb.Event]]:
        """``(offset, event)`` for every offset in ``[from_offset, to_offset)`` (see ``read_batches``)."""
        return _events(self.read_batches(from_offset, to_offset))

    def read_batches(self, from_offset: int = 0, to_offset: int | None = None) -> Iterator[tuple[int, pb.EventColumns]]:
        """``(base_offset, columns)`` per frame overlapping ``[from_offset, to_offset)``: the replay fast path.

        One decompress and one ``EventColumns`` parse per frame (``ConfigImage.replay_columns`` takes it).
        Batches are **trimmed** to the range:
        the first and last may hold fewer events than their frame, and ``base_offset`` is always the
        offset of the batch's first event, so the caller never sees an offset outside the range.

        ``to_offset=None`` (or past the end) reads up to ``end_offset`` as it is at the call; the range
        is checked at the call, not at the first ``next``: ``OffsetOutOfRangeError`` if
        ``from_offset`` is below ``start_offset`` (deleted) or above ``end_offset``, ValueError if
        ``to_offset < from_offset``. Frames are re-verified (CRCs) as they are read: ``CorruptLogError``.
        """
        with self._cond:
            if self._closed:
                raise EventLogClosedError(f"{self._directory}: the event log is closed")
            end = self._end_offset
            start = self._segments[0].base_offset if self._segments else end
            to = end if to_offset is None else min(to_offset, end)
            if to_offset is not None and to_offset < from_offset:
                raise ValueError(f"to_offset {to_offset} is below from_offset {from_offset}")
            if from_offset < start:
                raise OffsetOutOfRangeError(
                    f"{self._directory}: offset {from_offset} is below the log start offset {start} "
                    "(its segment was deleted); read from a snapshot"
                )
            if from_offset > end:
                raise OffsetOutOfRangeError(
                    f"{self._directory}: offset {from_offset} is above the log end offset {end}"
                )
            views = [
                SegmentView(s, len(s.bases), s.size)
                for s in self._segments
                if s.end_offset > from_offset and s.base_offset < to
            ]
        return self._iter_batches(views, from_offset, to)

    @staticmethod
    def _indexed(view: SegmentView) -> SegmentView:
        """``view`` with its segment's frame index, loading it for a segment trusted at open (it never
        grows: the last segment is never trusted). ``CorruptLogError`` if the file no longer matches."""
        segment = view.segment
        if segment.indexed:
            return view
        segment.load_index()
        return SegmentView(segment, len(segment.bases), segment.size)

    def _iter_batches(
        self, views: list[SegmentView], from_offset: int, to_offset: int
    ) -> Iterator[tuple[int, pb.EventColumns]]:
        decompressor = zstandard.ZstdDecompressor()
        for view in views:
            view = self._indexed(view)
            segment = view.segment
            bases = segment.bases
            first = max(0, bisect.bisect_right(bases, from_offset, 0, view.frames) - 1)
            stop = bisect.bisect_left(bases, to_offset, first, view.frames)
            for buf, headers in self._read_frames(view, first, stop, from_offset):
                for header in headers:
                    try:
                        batch = decode_event_batch(buf, header, decompressor)
                    except FrameError as exc:
                        raise CorruptLogError(
                            str(segment.path), header.position, exc.reason, offset=header.base_offset
                        ) from None
                    base = header.base_offset
                    if base < from_offset or header.next_offset > to_offset:
                        batch = slice_columns(batch, from_offset - base, to_offset - base)
                        base = max(base, from_offset)
                    yield base, batch

    def _read_frames(
        self, view: SegmentView, first: int, stop: int, from_offset: int
    ) -> Iterator[tuple[bytes, list[FrameHeader]]]:
        """Chunks of whole frames ``[first, stop)`` of a segment: ``(buffer, verified headers)``."""
        segment = view.segment
        positions = segment.positions
        bases = segment.bases
        try:
            fd = os.open(segment.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise OffsetOutOfRangeError(
                f"{segment.path}: segment deleted while reading (offsets from {from_offset})"
            ) from None
        try:
            i = first
            while i < stop:
                chunk_start = positions[i]
                j = i + 1
                while j < stop and positions[j] - chunk_start < _READ_CHUNK_BYTES:
                    j += 1
                chunk_end = positions[j] if j < view.frames else view.size
                buf = os.pread(fd, chunk_end - chunk_start, chunk_start)
                headers = []
                for k in range(i, j):
                    position = positions[k] - chunk_start
                    try:
                        header = parse_frame(buf, position)
                    except FrameError as exc:
                        raise CorruptLogError(
                            str(segment.path), positions[k], f"{exc.reason} (re-read after open)", offset=bases[k]
                        ) from None
                    if header.base_offset != bases[k]:
                        raise CorruptLogError(
                            str(segment.path),
                            positions[k],
                            f"frame base offset {header.base_offset} changed since open ({bases[k]})",
                            offset=bases[k],
                        )
                    headers.append(header)
                yield buf, headers
                i = j
        finally:
            os.close(fd)

    def offset_for_time(self, time_ms: int) -> int:
        """The end offset of the longest prefix of events with ``commit_time_ms <= time_ms``.

        The first event later than ``time_ms`` is found by bisecting the frames' (running maximum)
        ``max_commit_time_ms`` and decoding the one frame that holds it; ``end_offset`` if there is
        none. Events below ``start_offset`` are gone, so a time before every event on disk answers
        ``start_offset`` (the true answer is then at most that).
        """
        with self._cond:
            if self._closed:
                raise EventLogClosedError(f"{self._directory}: the event log is closed")
            views = [SegmentView(s, len(s.bases), s.size) for s in self._segments]
            end = self._end_offset
        for view in views:
            if not view.segment.indexed and view.segment.max_time_at_end <= time_ms:
                continue
            view = self._indexed(view)
            if view.frames == 0 or view.segment.max_times[view.frames - 1] <= time_ms:
                continue
            k = bisect.bisect_right(view.segment.max_times, time_ms, 0, view.frames)
            for buf, headers in self._read_frames(view, k, k + 1, view.segment.bases[k]):
                header = headers[0]
                try:
                    batch = decode_event_batch(buf, header)
                except FrameError as exc:
                    raise CorruptLogError(
                        str(view.segment.path), view.segment.positions[k], exc.reason, offset=header.base_offset
                    ) from None
                for i, commit_time_ms in enumerate(batch.commit_time_ms):
                    if commit_time_ms > time_ms:
                        return header.base_offset + i
            # The running maximum rose past time_ms in this frame, so one of its events is later.
            raise CorruptLogError(
                str(view.segment.path),
                view.segment.positions[k],
                "frame's max_commit_time_ms is above every event's commit time",
                offset=view.segment.bases[k],
            )
        return end

    # --- retention and lifecycle -----------------------------------------------------------------------
    def delete_segments_before(self, offset: int) -> list[Path]:
        """Delete the segments whose every offset is below ``offset``, oldest first; never the active one.

        ``start_offset`` moves to the first remaining segment's base offset. The directory is fsynced
        after the deletions. Readers already iterating a deleted segment get ``OffsetOutOfRangeError``
        if they had not opened it yet.
        """
        deleted: list[Path] = []
        with self._cond:
            self._check_writable()
            try:
                while len(self._segments) > 1 and self._segments[0].end_offset <= offset:
                    path = self._segments[0].path
                    path.unlink()
                    self._segments.pop(0)
                    deleted.append(path)
            finally:
                if deleted and self._fsync:
                    fsync_directory(self._directory)
        if deleted:
            _log.info("%s: deleted %d segments below offset %d", self._directory, len(deleted), offset)
        return deleted

    def close(self) -> None:
        """Wait for an in-flight write, fail queued appends (``EventLogClosedError``), advance the recovery
        point to the log end (a writer that has not failed: every frame is fsynced), release the lock.

        Idempotent.
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            while self._leading:
                self._cond.wait()
            for request in self._queue:
                request.error = EventLogClosedError(f"{self._directory}: the event log was closed")
                request.done = True
                wake(request)
            self._queue.clear()
            try:
                if not self._read_only and self._failure is None and self._lock_fd is not None:
                    self._write_checkpoint([s for s in self._segments if s.size > 0], sync_directory=True)
            finally:
                self._release()

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # drops the flock
            self._lock_fd = None

    def __enter__(self) -> EventLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "read-only" if self._read_only else "open"
        return (
            f"EventLog({str(self._directory)!r}, {state}, offsets [{self.start_offset}, {self._end_offset}), "
            f"{len(self._segments)} segments)"
        )


def _events(batches: Iterator[tuple[int, pb.EventColumns]]) -> Iterator[tuple[int, pb.Event]]:
    for base, batch in batches:
        yield from enumerate(events_of(batch), base)
