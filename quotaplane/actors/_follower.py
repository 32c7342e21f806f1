"""Following the config log from outside the controller: what a shard and a gateway's replica share.

A follower keeps a ConfigImage (and, once it has managers, their ManagerBinding) in step with the
ConfigController's log through whatever call function its owner has (a shard retries while Ray restarts
the controller; a gateway maps a dead controller to UNAVAILABLE):

- ``start()``: the image as of now, the fast way (``replay_columns``, no deltas: there are no managers
  yet), or the controller's snapshot and then the log when the log's beginning was deleted;
- ``apply(base_offset, columns)``: pushed events, strictly in offset order, each through ``image.apply``
  and the binding so managers change in place; events already applied are skipped;
- ``catch_up(target)``: pull missing events (``read_from``); when they were deleted
  (``OffsetOutOfRangeError``), jump to the controller's snapshot and give the managers the differences.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from quotaplane.config import (
    ConfigImage,
    ManagerBinding,
    OffsetOutOfRangeError,
    changes_between,
    decode_columns,
    events_of,
)
from quotaplane.v1 import config_events_pb2 as pb

__all__ = ["ConfigFollower", "ray_get"]


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
    without holding it, so readers of the image are never blocked on a remote call.
    """

    def __init__(
        self,
        call: Callable[..., Any],
        *,
        max_events: int = 10_000,
        lock: contextlib.AbstractContextManager[Any] | None = None,
    ) -> None:
        self._call = call
        self._max_events = max_events
        self._lock = lock if lock is not None else contextlib.nullcontext()
        self.image = ConfigImage()
        self.binding: ManagerBinding | None = None
        self.catch_ups = 0
        self.snapshot_loads = 0

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
            self.snapshot_loads += 1
            self._replay_all()
        return self.image

    def _replay_all(self) -> None:
        while batches := self._call("read_from", self.image.end_offset, self._max_events):
            for base, payload in batches:
                self.image.replay_columns(base, decode_columns(payload))

    def apply(self, base_offset: int, columns: pb.EventColumns) -> bool:
        """Apply a batch at ``base_offset`` (consecutive offsets); True if anything was new. A batch that
        starts past the image's end is a gap: the missing events are pulled first."""
        end = base_offset + len(columns.kind)
        if end <= self.image.end_offset:
            return False
        if base_offset > self.image.end_offset:
            self.catch_up(end)
            if end <= self.image.end_offset:
                return True
        with self._lock:
            self._apply_events(base_offset, columns)
        return True

    def _apply_events(self, base_offset: int, columns: pb.EventColumns) -> None:
        image, binding = self.image, self.binding
        for offset, event in enumerate(events_of(columns), base_offset):
            if offset >= image.end_offset:
                delta = image.apply(offset, event)
                if binding is not None:
                    binding.apply(delta, image)

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
                    self._apply_events(base, decode_columns(payload))
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
        self.snapshot_loads += 1
