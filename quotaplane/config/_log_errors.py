"""The errors of the config event log and its snapshot files, in a module of their own.

They are raised by the writer (``_log``), by the recovery that verifies segments at open
(``_segments``), by the snapshot files (``_snapshot_file``) and by readers of the format outside
this package (a Spark job raises ``CorruptLogError`` for a bad closed segment): a leaf module that
imports nothing lets all of them share one hierarchy without an import cycle.
"""

from __future__ import annotations

__all__ = [
    "CorruptLogError",
    "EventLogClosedError",
    "EventLogError",
    "EventLogFailedError",
    "EventLogLockedError",
    "LogGapError",
    "OffsetOutOfRangeError",
]


class EventLogError(Exception):
    """Base class of the event log's and the snapshot files' errors."""


class EventLogLockedError(EventLogError):
    """Another ``EventLog`` (this process or another) holds the directory's lock."""


class EventLogClosedError(EventLogError):
    """The log was closed."""


class EventLogFailedError(EventLogError):
    """A write or fsync failed: the round's appends were not acknowledged and the log takes no more.

    ``__cause__`` is the ``OSError``. Reopen the log (``EventLog.open``) to continue from what is on disk.
    """


class OffsetOutOfRangeError(EventLogError):
    """A read of offsets the log does not hold (Kafka's OFFSET_OUT_OF_RANGE): deleted or not yet written."""


class CorruptLogError(EventLogError):
    """Damage in a segment that is not a torn tail: ``path``, byte ``position`` and, where known, ``offset``."""

    def __init__(self, path: str, position: int, reason: str, offset: int | None = None) -> None:
        where = f"{path}: corrupt event log segment at byte {position}"
        if offset is not None:
            where += f" (offset {offset})"
        super().__init__(f"{where}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason
        self.offset = offset

    def __reduce__(self) -> tuple[type[CorruptLogError], tuple[str, int, str, int | None]]:
        return (type(self), (self.path, self.position, self.reason, self.offset))


class LogGapError(EventLogError):
    """Events the directory once held are in no segment and no valid snapshot: offsets ``[missing_from,
    missing_to)`` are gone, so no image can be trusted and nothing opens.

    Raised at open for a directory holding snapshots but no segments, none of which verifies; for segments
    that begin after the end of the newest valid snapshot below them (the segments that continued it were
    deleted); and, for the writer, for a valid snapshot that ends beyond the last segment (the segments lost
    events the snapshot holds). Opening empty, or at the wrong offset, would silently drop every quota the
    missing events set. Repair is a human decision: restore the missing files, or move aside the ones named.
    """

    def __init__(self, directory: str, missing_from: int, missing_to: int, detail: str) -> None:
        super().__init__(
            f"{directory}: offsets [{missing_from}, {missing_to}) are in no segment and no valid snapshot: {detail}"
        )
        self.directory = directory
        self.missing_from = missing_from
        self.missing_to = missing_to
        self.detail = detail

    def __reduce__(self) -> tuple[type[LogGapError], tuple[str, int, int, str]]:
        return (type(self), (self.directory, self.missing_from, self.missing_to, self.detail))
