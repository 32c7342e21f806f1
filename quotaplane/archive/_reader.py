"""Reading segments: pure functions over bytes (for Spark's ``binaryFile``) and over paths, plus ``ArchiveReader``.

**The torn-tail rule.** Batches are read in order from byte 8. At the first batch that is not valid
(too short for its header or payload, bad magic or version, impossible header fields, or a CRC
mismatch), the reader looks for any valid batch (sound header, matching CRC) starting later in the
file:

- none: the bad bytes are a **torn tail**, the trace of a write a crash interrupted (or of a write
  still in progress). Reading stops there without error; the tail is reported (a ``TornTail``, handed
  to ``on_torn_tail``, logged at WARNING by default).
- one: the file is **corrupt**: ``ArchiveCorruptError(path, offset, reason)`` at the bad batch's
  offset. A writer never appends after a failed write, so valid data after a bad batch cannot come
  from a crash.

A batch that passes its CRC but does not decompress or decode is corrupt wherever it is (the CRC says
these are the bytes the writer wrote). A bad file header is corrupt too: the writer creates a segment
whole (header and first batch, then rename), so no crash leaves an empty or headless ``*.seg``.

>>> decode_segment_bytes(b"QPSG\\x00\\x01\\x00\\x00", "empty.seg")
SegmentContents(name='empty.seg', records=[], batches=[], torn_tail=None)
>>> decode_segment_bytes(b"QPSG\\x00\\x01\\x00\\x00QB\\x01", "torn.seg").torn_tail
TornTail(name='torn.seg', offset=8, length=3, reason='3 bytes left, a batch header is 36')
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from ._format import (
    BATCH_MAGIC,
    EPOCH,
    FILE_HEADER_SIZE,
    HOUR_MS,
    ArchiveCorruptError,
    ArchiveRecord,
    BatchHeader,
    batch_crc,
    decode_records,
    decompress_payload,
    explain_bad_batch_header,
    parse_batch_header,
    parse_file_header,
    parse_hour_partition,
    parse_segment_name,
    validate_name,
)

__all__ = [
    "ArchiveReader",
    "SegmentContents",
    "TornTail",
    "decode_segment_bytes",
    "iter_segment_batches",
    "iter_segment_bytes",
    "iter_segments",
    "read_segment",
]

_log = logging.getLogger("quotaplane.archive")


@dataclass(frozen=True, slots=True)
class TornTail:
    """The unreadable end of a segment: ``length`` bytes from ``offset`` to the end of the file were skipped."""

    name: str
    offset: int
    length: int
    reason: str


@dataclass(frozen=True, slots=True)
class SegmentContents:
    """A whole decoded segment: its records in order, its batch headers, and its torn tail if any."""

    name: str
    records: list[ArchiveRecord]
    batches: list[BatchHeader]
    torn_tail: TornTail | None


TornTailHandler = Callable[[TornTail], None]


def _log_torn_tail(tail: TornTail) -> None:
    _log.warning(
        "%s: torn tail of %d bytes at offset %d skipped (%s)", tail.name, tail.length, tail.offset, tail.reason
    )


def _next_valid_batch(data: bytes, start: int) -> int | None:
    """The offset of the first batch at or after ``start`` with a sound header and a matching CRC."""
    i = data.find(BATCH_MAGIC, start)
    while i != -1:
        header = parse_batch_header(data, i)
        if header is not None and batch_crc(data, i, header) == header.crc:
            return i
        i = data.find(BATCH_MAGIC, i + 1)
    return None


def _scan(data: bytes, name: str) -> Iterator[tuple[BatchHeader, list[ArchiveRecord]] | TornTail]:
    """Each valid batch with its records, in order; a ``TornTail`` last if the file ends in one."""
    parse_file_header(data, name)
    pos = FILE_HEADER_SIZE
    end = len(data)
    while pos < end:
        header = parse_batch_header(data, pos)
        if header is None:
            problem = explain_bad_batch_header(data, pos)
        elif (crc := batch_crc(data, pos, header)) != header.crc:
            problem = f"CRC32C mismatch (stored {header.crc:#010x}, computed {crc:#010x})"
        else:
            try:
                raw = decompress_payload(data, header)
            except ValueError as exc:
                raise ArchiveCorruptError(name, pos, f"batch passed its CRC but does not decompress: {exc}") from None
            yield header, decode_records(raw, header, name, pos)
            pos = header.end
            continue
        later = _next_valid_batch(data, pos + 1)
        if later is not None:
            raise ArchiveCorruptError(name, pos, f"{problem}, and a valid batch follows at offset {later}")
        yield TornTail(name, pos, end - pos, problem)
        return


def iter_segment_batches(data: bytes, name: str) -> Iterator[tuple[BatchHeader, list[ArchiveRecord]] | TornTail]:
    """A segment's records in bulk: each valid batch's header with all its records, then a ``TornTail``
    last if the file ends in one (returned, not logged: the caller decides how to report it).

    The bulk form of ``iter_segment_bytes`` for column builders (a Spark job turning a batch into
    Arrow arrays at once); the same checks, the same ArchiveCorruptError.
    """
    return _scan(data, name)


def iter_segment_bytes(
    data: bytes, name: str, *, on_torn_tail: TornTailHandler | None = None
) -> Iterator[ArchiveRecord]:
    """The records of a whole segment's bytes, lazily, batch by batch (what a Spark ``flatMap`` calls).

    ``name`` is only used in errors and reports (give the path). A torn tail ends the iteration and
    goes to ``on_torn_tail`` (default: a WARNING log). Raises ArchiveCorruptError as the module says.
    """
    for item in _scan(data, name):
        if isinstance(item, TornTail):
            (on_torn_tail or _log_torn_tail)(item)
        else:
            yield from item[1]


def decode_segment_bytes(data: bytes, name: str) -> SegmentContents:
    """Decode a whole segment eagerly; the torn tail, if any, is returned in the result, not logged."""
    records: list[ArchiveRecord] = []
    batches: list[BatchHeader] = []
    torn: TornTail | None = None
    for item in _scan(data, name):
        if isinstance(item, TornTail):
            torn = item
        else:
            batches.append(item[0])
            records += item[1]
    return SegmentContents(name, records, batches, torn)


def read_segment(
    path: str | os.PathLike[str], *, on_torn_tail: TornTailHandler | None = None
) -> Iterator[ArchiveRecord]:
    """The records of one segment file. The file is read and its header checked at the call (so a
    missing file raises FileNotFoundError and a bad header ArchiveCorruptError here); batches are
    decoded as the iterator is consumed."""
    data = Path(path).read_bytes()
    parse_file_header(data, os.fspath(path))
    return iter_segment_bytes(data, os.fspath(path), on_torn_tail=on_torn_tail)


def _to_ms(value: int | datetime, what: str) -> int:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{what} must be timezone-aware (partitions are UTC hours), got {value!r}")
        return (value - EPOCH) // timedelta(milliseconds=1)
    return int(value)


def iter_segments(
    root: str | os.PathLike[str],
    stream: str,
    start_hour: int | datetime | None = None,
    end_hour: int | datetime | None = None,
) -> Iterator[Path]:
    """The segment files of ``<root>/<stream>``, oldest hour first, then by name (first record time,
    writer id, sequence number).

    ``start_hour``/``end_hour`` (epoch ms or aware datetimes) select the hours that overlap
    ``[start_hour, end_hour)``: an hour ``H`` is read when ``floor_hour(start) <= H < end``. Filtering
    is by partition only; records are not compared with the bounds. A missing stream directory, or
    one with no segments, yields nothing. Directories and files not named as the layout says
    (``_SUCCESS``, hidden ``.*.tmp`` files of an interrupted segment creation) are skipped.
    """
    base = Path(root) / validate_name("stream", stream)
    lo = None if start_hour is None else _to_ms(start_hour, "start_hour") // HOUR_MS * HOUR_MS
    hi = None if end_hour is None else _to_ms(end_hour, "end_hour")
    found: list[tuple[int, int, str, int, Path]] = []
    for date_dir in _subdirs(base):
        for hour_dir in _subdirs(date_dir):
            hour = parse_hour_partition(date_dir.name, hour_dir.name)
            if hour is None or (lo is not None and hour < lo) or (hi is not None and hour >= hi):
                continue
            with os.scandir(hour_dir) as entries:
                for entry in entries:
                    parsed = parse_segment_name(entry.name)
                    if parsed is not None and entry.is_file():
                        found.append((hour, parsed.first_time_ms, parsed.writer_id, parsed.seq, Path(entry.path)))
    found.sort()
    return iter([f[-1] for f in found])


def _subdirs(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as entries:
            return [Path(e.path) for e in entries if e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []


class ArchiveReader:
    """Reads a stream of the archive and keeps the torn tails it met (``torn_tails``).

    Stateless apart from that list: one reader can read many streams. ``on_torn_tail`` is called
    for each torn tail as well (default: a WARNING log).
    """

    def __init__(self, *, on_torn_tail: TornTailHandler | None = None) -> None:
        self.torn_tails: list[TornTail] = []
        self._on_torn_tail = on_torn_tail or _log_torn_tail

    def _report(self, tail: TornTail) -> None:
        self.torn_tails.append(tail)
        self._on_torn_tail(tail)

    def read_segment(self, path: str | os.PathLike[str]) -> Iterator[ArchiveRecord]:
        """The records of one segment file (see the module function ``read_segment``)."""
        return read_segment(path, on_torn_tail=self._report)

    def iter_segments(
        self,
        root: str | os.PathLike[str],
        stream: str,
        start_hour: int | datetime | None = None,
        end_hour: int | datetime | None = None,
    ) -> Iterator[Path]:
        """The segment paths of a stream, in reading order (see the module function ``iter_segments``)."""
        return iter_segments(root, stream, start_hour, end_hour)

    def read(
        self,
        root: str | os.PathLike[str],
        stream: str,
        start_hour: int | datetime | None = None,
        end_hour: int | datetime | None = None,
    ) -> Iterator[ArchiveRecord]:
        """Every record of the selected hours: hour by hour, segment by segment, each in append order."""
        for path in iter_segments(root, stream, start_hour, end_hour):
            yield from self.read_segment(path)
