"""Snapshot files: the config image at an offset, written atomically beside the log's segments.

A snapshot ``%020d.snapshot`` (named by ``header.end_offset``) is a sequence of ``_framing`` frames:

- frame 0: the ``pb.SnapshotHeader``; ``base_offset`` 0, ``record_count`` 1, ``max_commit_time_ms``
  = ``header.last_commit_time_ms``;
- frames 1..n: ``pb.EventColumns`` of entries (``_columns``), with the ``offset`` column set;
  ``base_offset`` = 1 + the index of the frame's first entry in the file (the header is record 0,
  the entries records 1..entry_count, dense as log offsets), ``record_count`` = entries in the frame,
  ``max_commit_time_ms`` = the largest commit time of its entries' events.

(Record numbers, not log offsets: an entry's log offset is in the ``offset`` column.)

The file appears whole or not at all: it is written under a hidden temporary name, fsynced, renamed
and the directory fsynced. So unlike a log segment there is no torn tail to forgive: any frame that
does not verify, a count that does not add up, or a name that is not ``header.end_offset`` is
``CorruptSnapshotError``, and ``read_snapshot`` checks all of it before it returns anything.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import zstandard

from quotaplane.durable import replace_file
from quotaplane.v1 import config_events_pb2 as pb

from ._columns import decode_columns, encode_events, events_of
from ._framing import FrameError, decode_message, decode_payload, encode_frame, iter_frames
from ._log_errors import EventLogError

__all__ = [
    "ENTRIES_PER_FRAME",
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "CorruptSnapshotError",
    "list_snapshots",
    "read_snapshot",
    "read_snapshot_batches",
    "snapshot_name",
    "verify_snapshot",
    "write_snapshot",
    "write_snapshot_columns",
]

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
_NAME_RE = re.compile(r"(\d{20})\.snapshot")


class CorruptSnapshotError(EventLogError):
    """A snapshot file that does not verify: ``path`` and the byte ``position`` of the bad frame (0 for the file)."""

    def __init__(self, path: str, position: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt snapshot at byte {position}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason

    def __reduce__(self) -> tuple[type[CorruptSnapshotError], tuple[str, int, str]]:
        return (type(self), (self.path, self.position, self.reason))


def snapshot_name(end_offset: int) -> str:
    """``%020d.snapshot``: names sort as end offsets do."""
    return f"{end_offset:020d}{SNAPSHOT_SUFFIX}"


def _parse_name(name: str) -> int | None:
    m = _NAME_RE.fullmatch(name)
    return int(m[1]) if m else None


#: Entries per frame, as ``write_snapshot`` cuts them by default (and ``ConfigStore`` writes them).
ENTRIES_PER_FRAME = 4096


def write_snapshot(
    directory: str | os.PathLike[str],
    header: pb.SnapshotHeader,
    entries: Iterable[tuple[int, pb.Event]],
    *,
    entries_per_frame: int = ENTRIES_PER_FRAME,
    fsync: bool = True,
) -> Path:
    """Write ``entries`` ((log offset, event) pairs, offsets increasing) after ``header`` as
    ``<directory>/%020d.snapshot``; the final path.

    The header is copied: ``version`` and ``entry_count`` are set here (from what was written); the
    caller's message is not changed. Entry frames are compressed as ``entries`` is consumed and kept
    in memory until the header (which needs the count) is written first: memory is the compressed
    size of the snapshot. An existing snapshot of the same end offset is replaced atomically.
    """
    if entries_per_frame < 1:
        raise ValueError(f"entries_per_frame must be >= 1, got {entries_per_frame}")

    def payloads() -> Iterator[tuple[bytes, int, int]]:
        it = iter(entries)
        while chunk := list(itertools.islice(it, entries_per_frame)):
            if not all(isinstance(e, tuple) and len(e) == 2 and isinstance(e[1], pb.Event) for e in chunk):
                raise TypeError("snapshot entries are (offset, quotaplane.v1.Event) pairs")
            events = [event for _, event in chunk]
            payload = encode_events(events, [offset for offset, _ in chunk])
            yield payload, len(chunk), max(e.commit_time_ms for e in events)

    return _write(directory, header, payloads(), fsync=fsync)


def write_snapshot_columns(
    directory: str | os.PathLike[str],
    header: pb.SnapshotHeader,
    batches: Iterable[pb.EventColumns],
    *,
    fsync: bool = True,
) -> Path:
    """``write_snapshot`` for entries already in columns: each non-empty batch, its ``offset`` column
    set, is one entry frame. The bytes are ``write_snapshot``'s for the same entries cut into the same
    frames (``ENTRIES_PER_FRAME`` each, as it cuts them); a writer with many entries (the Spark
    compaction) builds them without an ``Event`` message per entry."""

    def payloads() -> Iterator[tuple[bytes, int, int]]:
        for batch in batches:
            n = len(batch.kind)
            if len(batch.offset) != n:
                raise ValueError(f"{len(batch.offset)} offsets for {n} snapshot entries")
            if n:
                yield batch.SerializeToString(), n, max(batch.commit_time_ms)

    return _write(directory, header, payloads(), fsync=fsync)


def _write(
    directory: str | os.PathLike[str],
    header: pb.SnapshotHeader,
    payloads: Iterable[tuple[bytes, int, int]],
    *,
    fsync: bool,
) -> Path:
    """The header frame, then one entry frame per ``(payload, entries, max commit time)``, as one file."""
    if header.version not in (0, SNAPSHOT_VERSION):
        raise ValueError(f"unsupported snapshot version {header.version} (this writer knows {SNAPSHOT_VERSION})")
    if header.end_offset < 0:
        raise ValueError(f"end_offset must be >= 0, got {header.end_offset}")
    compressor = zstandard.ZstdCompressor()
    frames: list[bytes] = []
    count = 0
    for payload, n, max_time in payloads:
        frames.append(
            encode_frame(
                payload, base_offset=1 + count, record_count=n, max_commit_time_ms=max_time, compressor=compressor
            )
        )
        count += n
    head = pb.SnapshotHeader()
    head.CopyFrom(header)
    head.version = SNAPSHOT_VERSION
    head.entry_count = count
    first = encode_frame(
        head.SerializeToString(),
        base_offset=0,
        record_count=1,
        max_commit_time_ms=head.last_commit_time_ms,
        compressor=compressor,
    )
    directory = Path(directory)
    final = directory / snapshot_name(head.end_offset)
    replace_file(final, [first, *frames], fsync=fsync)
    return final


def read_snapshot_batches(path: str | os.PathLike[str]) -> tuple[pb.SnapshotHeader, list[pb.EventColumns]]:
    """The header and the decoded entry batches of a snapshot file, all verified (the replay fast path).

    Verified: every frame's CRCs, dense record numbers, the header's version, that the file name is
    ``header.end_offset``, each batch's entry count against its frame and the total against
    ``header.entry_count``. One decompress and one ``ParseFromString`` per frame.
    """
    batches: list[pb.EventColumns] = []
    header = _walk(Path(path), batches)
    return header, batches


def verify_snapshot(path: str | os.PathLike[str]) -> pb.SnapshotHeader:
    """The header of a snapshot file whose every frame verifies, without decompressing its entries.

    Every check of ``read_snapshot_batches`` except the one that needs the entries decoded (each batch
    holds its frame's ``record_count`` events): both CRCs of every frame, dense record numbers, the
    header's version and end offset against the name, the entry total. The event log decides its start
    offset from it (a snapshot-only directory) at the price of a CRC pass, leaving the one full decode
    to whoever replays the snapshot. Raises ``CorruptSnapshotError``.
    """
    return _walk(Path(path), None)


def _walk(path: Path, batches: list[pb.EventColumns] | None) -> pb.SnapshotHeader:
    """Verify every frame of a snapshot file and return its header; decode the entry batches into
    ``batches`` (checking their counts) unless it is None."""
    name = str(path)
    end_offset = _parse_name(path.name)
    if end_offset is None:
        raise CorruptSnapshotError(name, 0, f"not a snapshot file name (expected %020d{SNAPSHOT_SUFFIX})")
    data = path.read_bytes()
    if not data:
        raise CorruptSnapshotError(name, 0, "empty file: a snapshot starts with its header frame")
    decompressor = zstandard.ZstdDecompressor()
    header: pb.SnapshotHeader | None = None
    expected = 0
    try:
        for frame in iter_frames(data):
            if frame.base_offset != expected:
                raise CorruptSnapshotError(
                    name, frame.position, f"frame base_offset {frame.base_offset}, expected {expected}"
                )
            if header is None:
                if frame.record_count != 1:
                    raise CorruptSnapshotError(
                        name, 0, f"header frame has record_count {frame.record_count}, expected 1"
                    )
                header = decode_message(data, frame, pb.SnapshotHeader, decompressor)
                _check_header(name, header, end_offset)
            elif batches is not None:
                try:
                    batch = decode_columns(bytes(decode_payload(data, frame, decompressor)))
                except ValueError as exc:
                    raise CorruptSnapshotError(name, frame.position, str(exc)) from None
                if len(batch.kind) != frame.record_count or len(batch.offset) != len(batch.kind):
                    raise CorruptSnapshotError(
                        name,
                        frame.position,
                        f"frame says {frame.record_count} entries, payload holds {len(batch.kind)} events "
                        f"and {len(batch.offset)} offsets",
                    )
                batches.append(batch)
            expected = frame.next_offset
    except FrameError as exc:
        raise CorruptSnapshotError(name, exc.position, exc.reason) from None
    assert header is not None  # data is not empty, so a frame was read or FrameError raised
    if expected - 1 != header.entry_count:
        raise CorruptSnapshotError(
            name, len(data), f"header says {header.entry_count} entries, the file holds {expected - 1}"
        )
    return header


def _check_header(name: str, header: pb.SnapshotHeader, end_offset: int) -> None:
    if header.version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(
            name, 0, f"unsupported snapshot version {header.version} (this reader knows {SNAPSHOT_VERSION})"
        )
    if header.end_offset != end_offset:
        raise CorruptSnapshotError(
            name, 0, f"header end_offset {header.end_offset} does not match the file name ({end_offset})"
        )


def read_snapshot(path: str | os.PathLike[str]) -> tuple[pb.SnapshotHeader, Iterator[tuple[int, pb.Event]]]:
    """The header and the (offset, event) entries of a snapshot file; the whole file is verified before
    this returns. The iterator walks batches already decoded (see ``read_snapshot_batches``).
    """
    header, batches = read_snapshot_batches(path)
    return header, itertools.chain.from_iterable(zip(batch.offset, events_of(batch), strict=True) for batch in batches)


def list_snapshots(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(end_offset, path)`` of every snapshot in ``directory``, by end offset; temporary files are skipped.

    A missing directory has no snapshots. Files are listed by name only (``read_snapshot`` verifies).
    """
    found = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                end_offset = _parse_name(entry.name)
                if end_offset is not None and entry.is_file():
                    found.append((end_offset, Path(entry.path)))
    except FileNotFoundError:
        return []
    found.sort()
    return found
