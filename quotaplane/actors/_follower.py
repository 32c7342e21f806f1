"""Following the config log from outside the controller: what a shard and a gateway's replica share.

A follower keeps a ConfigImage (and, once it has managers, their ManagerBinding) in step with the
ConfigController's log through whatever call function its owner has (a shard retries while Ray restarts
the controller; a gateway maps a dead controller to UNAVAILABLE):

- ``start()``: the image as of now, the fast way (``replay_columns``, no deltas: there are no managers
  yet), or the controller's snapshot and then the log when the log's beginning was deleted;
- ``apply(base_offset, columns)``: pushed events, strictly in offset order, each through ``image.apply``
  and the binding so managers change in place; events already applied are skipped;
- ``catch_up(target)``: pull missing events (``read_from``); when they were deleted
  (``OffsetOutOfRangeError``), jump to the controller's snapshot and give the managers the differences;
- ``events_after(offset)`` / ``apply_handed(batches, target)``: the log's events one follower applied,
  handed to another that misses them, without the controller.

**The tail: why a follower remembers what it applied.** The offset fence (``ShardActor.serve_at``) makes a
shard ahead of a gateway refuse the gateway's batches until the gateway has the shard's image. The gateway
used to fetch the missing events from the controller, so while Ray restarted a killed controller (seconds)
every batch routed to that shard failed, although the shard held exactly those events. A follower therefore
keeps the last events it applied (``tail_events`` / ``tail_bytes``, as the log's own ``EventColumns``
payloads, contiguous and ending at its offset) and hands them over with its refusal; the gateway applies them
through the same validation and code path as events read from the controller. A gap older than the tail (or
a snapshot jump inside it) hands over nothing and the gateway asks the controller, as before.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from quotaplane.config import (
    ConfigImage,
    ManagerBinding,
    OffsetOutOfRangeError,
    changes_between,
    decode_columns,
    encode_events,
    events_of,
)
from quotaplane.v1 import config_events_pb2 as pb

__all__ = ["Bindings", "ConfigFollower", "EventBatches", "ray_get"]


class Bindings:
    """Several targets kept in step with the log through one follower: each event's delta, or a snapshot jump's
    changes, goes to every target in order (the managers first, then what follows them: per-node hosts, the
    shard count's placement)."""

    def __init__(self, *targets: Any) -> None:
        self.targets = targets

    def apply(self, delta: Any, image: Any) -> None:
        for target in self.targets:
            target.apply(delta, image)

    def apply_changes(self, changes: Any, image: Any) -> None:
        changes = list(changes)  # every target sees all of them
        for target in self.targets:
            target.apply_changes(changes, image)


#: Log batches ``(base offset, EventColumns payload)``, as ``ConfigController.read_from`` answers them.
EventBatches = Sequence[tuple[int, bytes]]


def ray_get(ref: Any, timeout_s: float | None = None) -> Any:
    """``ray.get`` with an actor's own exception re-raised as itself (Ray wraps it in ``RayTaskError``), so
    callers handle ``OffsetOutOfRangeError``, ``ApiError``, ``ValueError`` as from a local call. Ray's own
    failures (``RayActorError``, ``GetTimeoutError``) pass through for the caller to map."""
    import ray
    from ray.exceptions import RayTaskError

    try:
        return ray.get(ref, timeout=timeout_s)
    except RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


class ConfigFollower:
    """An image kept in step with the controller; ``call(method_name, *args)`` reaches the controller.

    ``lock`` (optional) guards the image and binding while events are applied; the controller is asked
    without holding it, so readers of the image are never blocked on a remote call. ``tail_events`` /
    ``tail_bytes`` bound the applied events kept for ``events_after`` (0: keep none).
    """

    def __init__(
        self,
        call: Callable[..., Any],
        *,
        max_events: int = 10_000,
        lock: contextlib.AbstractContextManager[Any] | None = None,
        tail_events: int = 10_000,
        tail_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self._call = call
        self._max_events = max_events
        self._lock = lock if lock is not None else contextlib.nullcontext()
        self.image = ConfigImage()
        self.binding: ManagerBinding | None = None
        self.catch_ups = 0
        self.snapshot_loads = 0
        #: events applied from another follower's tail (``apply_handed``)
        self.handed_events = 0
        self._tail_limits = (tail_events, tail_bytes)
        #: ``(base, payload, count)``: contiguous, not overlapping, the last one ending at the image's end
        self._tail: collections.deque[tuple[int, bytes, int]] = collections.deque()
        self._tail_events = 0
        self._tail_bytes = 0

    @property
    def offset(self) -> int:
        """The next offset expected (= events applied)."""
        return self.image.end_offset

    def start(self) -> ConfigImage:
        """Load the controller's image as of now (before any managers are bound)."""
        try:
            self._replay_all()
        except OffsetOutOfRangeError:
            self.image = self._call("snapshot").to_image()
            self._forget_tail()
            self.snapshot_loads += 1
            self._replay_all()
        return self.image

    def _replay_all(self) -> None:
        while batches := self._call("read_from", self.image.end_offset, self._max_events):
            for base, payload in batches:
                columns = decode_columns(payload)
                before = self.image.end_offset
                self.image.replay_columns(base, columns)
                self._remember(base, payload, columns, before)

    def apply(self, base_offset: int, columns: pb.EventColumns, payload: bytes | None = None) -> bool:
        """Apply a batch at ``base_offset`` (consecutive offsets); True if anything was new. A batch that
        starts past the image's end is a gap: the missing events are pulled first. ``payload``: the batch
        as received (kept for the tail; re-encoded from ``columns`` when not given)."""
        end = base_offset + len(columns.kind)
        if end <= self.image.end_offset:
            return False
        if base_offset > self.image.end_offset:
            self.catch_up(end)
            if end <= self.image.end_offset:
                return True
        with self._lock:
            self._apply_events(base_offset, columns, payload)
        return True

    def _apply_events(self, base_offset: int, columns: pb.EventColumns, payload: bytes | None = None) -> None:
        """Apply a batch (events below the image's end skipped) and remember it in the tail; under the lock.
        Every path that applies log events after ``start`` comes here: pushes, pulls and handed-over ones."""
        image, binding = self.image, self.binding
        before = image.end_offset
        for offset, event in enumerate(events_of(columns), base_offset):
            if offset >= image.end_offset:
                delta = image.apply(offset, event)
                if binding is not None:
                    binding.apply(delta, image)
        self._remember(base_offset, payload, columns, before)

    def catch_up(self, target: int | None = None) -> bool:
        """Pull and apply events up to at least ``target`` (None: everything the controller has); True if
        anything changed."""
        changed = False
        self.catch_ups += 1
        while target is None or self.image.end_offset < target:
            try:
                batches = self._call("read_from", self.image.end_offset, self._max_events)
            except OffsetOutOfRangeError:
                self._load_snapshot()
                changed = True
                continue
            if not batches:
                break
            with self._lock:
                for base, payload in batches:
                    self._apply_events(base, decode_columns(payload), payload)
            changed = True
        return changed

    def _load_snapshot(self) -> None:
        """Jump to the controller's current image; the managers get the differences, in place."""
        new = self._call("snapshot").to_image()
        if new.end_offset <= self.image.end_offset:
            raise RuntimeError(
                f"the controller's snapshot ends at {new.end_offset}, not past this follower's offset "
                f"{self.image.end_offset}, yet the events after it are gone"
            )
        with self._lock:
            if self.binding is not None:
                self.binding.apply_changes(changes_between(self.image, new), new)
            self.image = new
            self._forget_tail()  # the events up to the snapshot were never applied here: no tail to hand over
        self.snapshot_loads += 1

    # --- the tail: handing applied events to a follower that misses them ---------------------------------
    def _remember(self, base: int, payload: bytes | None, columns: pb.EventColumns, before: int) -> None:
        """Keep the events ``[before, image end)`` of a batch just applied from ``base``, then trim."""
        end = self.image.end_offset
        tail_events, tail_bytes = self._tail_limits
        if end <= before or tail_events <= 0:
            return
        if self._tail and self._tail[-1][0] + self._tail[-1][2] != before:
            self._forget_tail()  # cannot happen (every applied event comes through here); never hand a gap
        if base < before:  # a batch straddling the end: keep only the new events
            payload = encode_events(events_of(columns)[before - base : end - base])
            base = before
        elif payload is None:
            payload = columns.SerializeToString()
        count = end - base
        self._tail.append((base, payload, count))
        self._tail_events += count
        self._tail_bytes += len(payload)
        while self._tail and (self._tail_events > tail_events or self._tail_bytes > tail_bytes):
            _, dropped, dropped_count = self._tail.popleft()
            self._tail_events -= dropped_count
            self._tail_bytes -= len(dropped)

    def _forget_tail(self) -> None:
        self._tail.clear()
        self._tail_events = self._tail_bytes = 0

    def events_after(self, offset: int) -> tuple[tuple[int, bytes], ...]:
        """The applied events from ``offset`` to this follower's end, as contiguous log batches (the first may
        start before ``offset``); empty when ``offset`` is not below the end or the tail no longer reaches
        back to it (the caller then asks the controller)."""
        tail = self._tail
        if not tail or not tail[0][0] <= offset < self.image.end_offset:
            return ()
        handed = []
        for base, payload, _ in reversed(tail):  # from the end: a gateway is usually a batch or two behind
            handed.append((base, payload))
            if base <= offset:
                break
        return tuple(reversed(handed))

    def apply_handed(self, batches: EventBatches, target: int) -> bool:
        """Apply batches another follower handed over (``events_after``), which must reach exactly
        ``target`` (the offset that follower is at): each a ``(base offset, EventColumns payload)``, in
        offset order, contiguous (the next starts where the last ended), the first starting at or before
        this image's end. Checked whole before any is applied, then applied as pulled events are (events
        already applied skipped), under the lock. True if the image now reaches ``target``; False, with
        nothing applied, if the first batch starts past the image's end (a gap: the caller asks the
        controller). A malformed answer (bad types, out of order, overlapping, short of ``target``) is a
        ValueError."""
        if isinstance(target, bool) or not isinstance(target, int):
            raise ValueError(f"target must be an int, got {target!r}")
        if not isinstance(batches, list | tuple) or not batches:
            raise ValueError("handed-over events must be a non-empty sequence of (base offset, payload) batches")
        decoded = []
        expected = None
        for index, batch in enumerate(batches):
            if not (isinstance(batch, tuple) and len(batch) == 2):
                raise ValueError(f"batch {index}: expected (base offset, payload), got {type(batch).__name__}")
            base, payload = batch
            if isinstance(base, bool) or not isinstance(base, int) or base < 0 or not isinstance(payload, bytes):
                raise ValueError(f"batch {index}: expected (base offset >= 0, bytes)")
            columns = decode_columns(payload)
            if not columns.kind:
                raise ValueError(f"batch {index} at {base} holds no events")
            if expected is not None and base != expected:
                raise ValueError(f"batch {index} starts at {base}, not where the one before ended ({expected})")
            expected = base + len(columns.kind)
            decoded.append((base, columns, payload))
        if expected != target:
            raise ValueError(f"the handed-over events end at {expected}, not at the offset {target} they claim")
        with self._lock:
            if decoded[0][0] > self.image.end_offset:
                return False
            for base, columns, payload in decoded:
                if base + len(columns.kind) > self.image.end_offset:
                    applied_from = self.image.end_offset
                    self._apply_events(base, columns, payload)
                    self.handed_events += self.image.end_offset - applied_from
        return True
