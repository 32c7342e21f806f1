"""Writing segments: ``ArchiveWriter`` buffers records per UTC hour and appends one batch per hour on flush.

Durability rests on three rules, so that after ``flush()`` returns the data survives ``kill -9`` and
(with ``fsync=True``) a power loss, and a crash never leaves damage a reader calls corruption:

1. **A segment appears whole.** Its file header and first batch are written to a hidden temporary
   file (``.<name>.tmp``), fsynced, renamed to the final name and the directory fsynced. Every
   ``*.seg`` therefore starts with a valid header and a complete first batch; a crash before the
   rename leaves only a hidden file, which readers and Spark skip (and which held nothing a flush had
   acknowledged). New ``date=``/``hour=`` directories are fsynced into their parents the same way.
2. **Later batches are appended.** A crash mid-append leaves a torn final batch, which the reader
   detects and stops at. Nothing is ever written after a torn batch, because of rule 3.
3. **A failed segment is abandoned.** If a write or fsync fails, the file is truncated back to its
   last good size (best effort) and closed for good; the records stay pending and the next flush puts
   them in a new segment. Retrying fsync on the same file is not safe on Linux (a failed fsync may
   drop the dirty pages and report success the next time), and appending after a possibly half-written
   batch would turn a torn tail into mid-file corruption.

Not thread-safe: one writer belongs to one thread (the exporter's). Two writers (processes) may share
a stream directory as long as their ``writer_id`` differ; names never collide within one id.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from types import TracebackType

import zstandard

from ..durable import fsync_directory, write_all
from ._format import (
    FILE_HEADER,
    HOUR_MS,
    MAX_TIME_MS,
    ArchiveRecord,
    encode_batch,
    encode_record_fields,
    hour_partition,
    segment_name,
    validate_name,
)

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_SEGMENT_BYTES",
    "ArchiveWriter",
    "SegmentWriter",
]

#: Roll to a new segment once a file reaches this size: Spark reads one segment per task, and 128 MiB
#: is its default split size (``spark.sql.files.maxPartitionBytes``).
DEFAULT_MAX_SEGMENT_BYTES = 128 * 1024 * 1024
#: Split a flush into batches of at most this many uncompressed record bytes (a larger single record
#: gets a batch of its own): bounds what a reader decompresses at once.
DEFAULT_MAX_BATCH_BYTES = 8 * 1024 * 1024
_NAME_ATTEMPTS = 1000

_sync_data = getattr(os, "fdatasync", os.fsync)  # fdatasync also persists the size an append changed


class SegmentWriter:
    """One segment file: created atomically with its first batch, then append-only.

    ``write_batch`` is all-or-nothing from a reader's point of view: on an OSError the segment is
    marked ``broken`` (its owner must close it and use a new one) and the partial bytes are truncated
    away where the system allows.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        self.broken = False
        self._fd: int | None = None

    @property
    def created(self) -> bool:
        return self._fd is not None

    def write_batch(self, batch: bytes, *, fsync: bool = True) -> int:
        """Append one encoded batch (creating the file with the first); the bytes written to the file."""
        if self.broken:
            raise RuntimeError(f"{self.path}: segment was abandoned after an I/O error")
        if self._fd is None:
            return self._create(FILE_HEADER + batch, fsync=fsync)
        start = self.size
        try:
            write_all(self._fd, batch)
            if fsync:
                _sync_data(self._fd)
        except OSError:
            self.broken = True
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
            raise
        self.size += len(batch)
        return len(batch)

    def _create(self, data: bytes, *, fsync: bool) -> int:
        directory = self.path.parent
        tmp = directory / f".{self.path.name}.tmp"
        if self.path.exists():
            raise FileExistsError(self.path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            write_all(fd, data)
            if fsync:
                os.fsync(fd)
            os.rename(tmp, self.path)
        except BaseException:
            self.broken = True
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        self._fd = fd
        self.size = len(data)
        if fsync:
            try:
                fsync_directory(directory)
            except OSError:
                # The name may not be durable: keep the file (its data is) but write no more into it.
                self.broken = True
                raise
        return len(data)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class ArchiveWriter:
    """Append records to ``<root>/<stream>/date=YYYY-MM-DD/hour=HH/`` segments; ``flush`` makes them durable.

    >>> import tempfile
    >>> from quotaplane.archive import ArchiveReader
    >>> with tempfile.TemporaryDirectory() as root:
    ...     with ArchiveWriter(root, "demo", writer_id="w1") as w:
    ...         w.append(ArchiveRecord(1_700_000_000_000, {"client_id": "c1"}, b"payload"))
    ...         w.flush() > 0
    ...     [r.body for r in ArchiveReader().read(root, "demo")]
    True
    [b'payload']

    ``append`` only encodes and buffers; ``flush`` writes one batch per hour that has pending records
    (more if they exceed ``max_batch_bytes``) into that hour's open segment. A writer keeps one
    segment open per hour it writes to; a segment is closed when it reaches ``max_segment_bytes``, or
    when a flush brings nothing for its hour and a newer hour has been seen (late records for an
    hour whose segment was closed start a new segment). ``close`` flushes and closes everything.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        stream: str,
        *,
        writer_id: str | None = None,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        compression_level: int = 3,
    ) -> None:
        if max_segment_bytes <= 0 or max_batch_bytes <= 0:
            raise ValueError("max_segment_bytes and max_batch_bytes must be positive")
        self.root = Path(root)
        self.stream = validate_name("stream", stream)
        self.writer_id = validate_name("writer id", writer_id if writer_id is not None else uuid.uuid4().hex[:12])
        self.max_segment_bytes = max_segment_bytes
        self.max_batch_bytes = max_batch_bytes
        self._compressor = zstandard.ZstdCompressor(level=compression_level)
        self._pending: dict[int, list[tuple[int, bytes]]] = {}  # hour -> (time_ms, fields)
        self._segments: dict[int, SegmentWriter] = {}
        self._known_dirs: set[Path] = set()
        self._newest_hour = -1
        self._next_seq = 0
        self._closed = False
        self.pending_records = 0
        #: Bytes appended to segment files (file headers included), since the writer was made.
        self.bytes_written = 0
        #: Segment files started, since the writer was made.
        self.segments_created = 0

    # --- buffering ------------------------------------------------------------------------------------
    def append(self, record: ArchiveRecord) -> None:
        """Buffer one record for its hour. Raises ValueError/TypeError for a record the format cannot hold."""
        if self._closed:
            raise ValueError("append to a closed ArchiveWriter")
        t = record.time_ms
        if not isinstance(t, int) or not 0 <= t < MAX_TIME_MS:
            raise ValueError(f"record time must be an int in [0, {MAX_TIME_MS}) ms, got {t!r}")
        fields = encode_record_fields(record.labels, record.body)
        hour = t - t % HOUR_MS
        entries = self._pending.get(hour)
        if entries is None:
            entries = self._pending[hour] = []
        entries.append((t, fields))
        self.pending_records += 1
        if hour > self._newest_hour:
            self._newest_hour = hour

    def discard_pending(self) -> int:
        """Drop every buffered record (after an unrecoverable error); the number dropped."""
        dropped = self.pending_records
        self._pending.clear()
        self.pending_records = 0
        return dropped

    # --- flushing -------------------------------------------------------------------------------------
    def flush(self, *, fsync: bool = True) -> int:
        """Write every pending record; with ``fsync`` they are durable when this returns. Bytes written.

        Hours are written independently: if one fails, the others are still written, its records
        stay pending for the next flush (in a new segment), and the first OSError is raised at the end.
        ``fsync=False`` still survives a process crash (the data is in the page cache), not a power loss.
        """
        if self._closed:
            raise ValueError("flush of a closed ArchiveWriter")
        before = self.bytes_written
        first_error: OSError | None = None
        hours = sorted(self._pending)
        for hour in hours:
            entries = self._pending[hour]
            try:
                self._flush_hour(hour, entries, fsync=fsync)
            except OSError as exc:
                if first_error is None:
                    first_error = exc
            if not entries:
                del self._pending[hour]
        for hour in [h for h in self._segments if h < self._newest_hour and h not in hours]:
            self._segments.pop(hour).close()
        if first_error is not None:
            raise first_error
        return self.bytes_written - before

    def _flush_hour(self, hour: int, entries: list[tuple[int, bytes]], *, fsync: bool) -> None:
        while entries:
            # Take records up to max_batch_bytes (at least one).
            n = 0
            size = 0
            while n < len(entries) and (n == 0 or size + len(entries[n][1]) <= self.max_batch_bytes):
                size += len(entries[n][1])
                n += 1
            chunk = entries[:n]
            batch = encode_batch(chunk, self._compressor)
            segment = self._segment_for(hour, min(t for t, _ in chunk), fsync=fsync)
            try:
                self.bytes_written += segment.write_batch(batch, fsync=fsync)
            except BaseException:
                del self._segments[hour]
                segment.close()
                self._known_dirs.discard(segment.path.parent)  # it may have been deleted under us
                raise
            del entries[:n]
            self.pending_records -= n
            if segment.size >= self.max_segment_bytes:
                del self._segments[hour]
                segment.close()

    def _segment_for(self, hour: int, first_time_ms: int, *, fsync: bool) -> SegmentWriter:
        segment = self._segments.get(hour)
        if segment is not None:
            return segment
        directory = self.root / self.stream / hour_partition(hour)
        self._ensure_directory(directory, fsync=fsync)
        for _ in range(_NAME_ATTEMPTS):
            path = directory / segment_name(first_time_ms, self.writer_id, self._next_seq)
            self._next_seq += 1
            if not path.exists() and not (directory / f".{path.name}.tmp").exists():
                segment = SegmentWriter(path)
                self._segments[hour] = segment
                self.segments_created += 1
                return segment
        raise FileExistsError(f"{directory}: no free segment name for writer {self.writer_id!r}")

    def _ensure_directory(self, directory: Path, *, fsync: bool) -> None:
        if directory in self._known_dirs:
            return
        missing: list[Path] = []
        d = directory
        while not d.is_dir():
            missing.append(d)
            if d.parent == d:
                break
            d = d.parent
        for d in reversed(missing):
            with contextlib.suppress(FileExistsError):  # another writer made it first
                d.mkdir()
            if fsync:
                fsync_directory(d.parent)
        self._known_dirs.add(directory)

    # --- lifecycle ------------------------------------------------------------------------------------
    @property
    def open_segments(self) -> list[Path]:
        """The files of the open segments (created ones only), oldest hour first."""
        return [s.path for _, s in sorted(self._segments.items()) if s.created]

    def close(self) -> None:
        """Flush (with fsync) and close every segment. Idempotent; if the flush fails it raises after closing,
        and the records still pending (``pending_records``) are lost."""
        if self._closed:
            return
        try:
            if self._pending:
                self.flush(fsync=True)
        finally:
            self._closed = True
            for segment in self._segments.values():
                segment.close()
            self._segments.clear()

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
