"""An append queued for group commit (``EventLog.submit``): its events, encoded at ``submit`` or by the round
that writes them, its offsets, and the threads waiting for it to be durable."""

from __future__ import annotations

import _thread
from collections.abc import Sequence
from typing import TYPE_CHECKING

from quotaplane.v1 import config_events_pb2 as pb

from ._columns import check_records, encode_events, encoded_size_bound

if TYPE_CHECKING:
    from ._log import EventLog

__all__ = ["PendingAppend", "round_payload", "wake"]


class PendingAppend:
    """An append queued for group commit (``EventLog.submit``): offsets at once, durability at ``wait``.

    ``first_offset`` / ``last_offset`` are the offsets the events will have; nothing is acknowledged
    until ``wait`` returns. A pending append is written by the next round any waiter of the log leads.
    """

    __slots__ = (
        "_log",
        "_sleepers",
        "count",
        "done",
        "error",
        "events",
        "first_offset",
        "last_offset",
        "max_time",
        "payload",
        "size",
    )

    def __init__(
        self, log: EventLog, payload: bytes | None, events: list[pb.Event] | None, size: int, count: int, max_time: int
    ) -> None:
        self._log = log
        #: the append's ``EventColumns`` bytes, or None with ``events``: copies of the caller's events, encoded by
        #: the round that writes them together with the rest of the round's (``EventLog.submit``)
        self.payload = payload
        self.events = events
        #: ``len(payload)``, or an upper bound of it (``encoded_size_bound``) while the events wait unencoded
        self.size = size
        self.count = count
        self.max_time = max_time
        self.first_offset = -1
        self.last_offset = -1
        self.error: BaseException | None = None
        self.done = False  # written and fsynced, or failed (``error``)
        # one held lock per thread sleeping in ``wait``, released to wake it (under the log's lock)
        self._sleepers: list[_thread.LockType] = []

    @classmethod
    def prepare(cls, log: EventLog, events: Sequence[pb.Event], max_frame_bytes: int) -> PendingAppend:
        """The append of ``events`` (checked: a ``pb.Event`` each, at least one), offsets not yet assigned.

        ``EventColumns`` payloads of concurrent appends concatenate into one batch (every field is repeated). An
        append whose size bound fits a frame is encoded by the round that writes it, with the round's other such
        appends: one ``encode_events`` call for many events costs about half as much an event as one per append.
        It waits as copies of the events (what is written is what was given here), checked now for what encoding
        refuses. A larger append is encoded now, and refused if it does not fit a frame.
        """
        if not all(isinstance(event, pb.Event) for event in events):
            raise TypeError("append() takes a sequence of quotaplane.v1.Event messages")
        count = len(events)
        if count == 0:
            raise ValueError("append() needs at least one event")
        max_time = max(e.commit_time_ms for e in events)
        size = encoded_size_bound(events)
        if size <= max_frame_bytes:
            check_records(events)
            copies = []
            for event in events:
                copy = pb.Event()
                copy.CopyFrom(event)
                copies.append(copy)
            return cls(log, None, copies, size, count, max_time)
        payload = encode_events(events)
        if len(payload) > max_frame_bytes:
            raise ValueError(f"append of {len(payload)} serialized bytes exceeds MAX_FRAME_BYTES ({max_frame_bytes})")
        return cls(log, payload, None, len(payload), count, max_time)

    def wait(self) -> int:
        """Block until the events are written and fsynced; the last offset. Raises the round's error
        (``EventLogFailedError``, ``EventLogClosedError``)."""
        if not self.done:
            self._log._wait(self)
        if self.error is not None:
            raise self.error
        return self.last_offset

    @property
    def durable(self) -> bool:
        """True once ``wait`` would return without blocking or raising."""
        return self.done and self.error is None

    def __repr__(self) -> str:
        state = "failed" if self.error is not None else "durable" if self.done else "pending"
        return f"PendingAppend([{self.first_offset}, {self.last_offset}], {state})"


def round_payload(round_: list[PendingAppend]) -> bytes:
    """The frame's ``EventColumns`` bytes for a round, in queue order: each run of appends waiting unencoded is
    encoded in one call, between the payloads of the appends encoded at ``submit``."""
    parts: list[bytes] = []
    waiting: list[pb.Event] = []
    for request in round_:
        if request.events is not None:
            waiting += request.events
            continue
        if waiting:
            parts.append(encode_events(waiting))
            waiting = []
        assert request.payload is not None
        parts.append(request.payload)
    if waiting:
        parts.append(encode_events(waiting))
    return b"".join(parts)


def wake(request: PendingAppend) -> None:
    """Wake the threads sleeping on ``request`` (the log's lock held)."""
    for sleeper in request._sleepers:
        sleeper.release()
    request._sleepers.clear()
