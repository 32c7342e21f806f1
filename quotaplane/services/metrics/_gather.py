"""One scrape's questions to the cluster: the controller's end offset and every shard's snapshot and progress.

Apart from the page building because this is the part that talks to Ray and must survive a slow or dead
shard: everything is asked at once and waited for under one deadline (N slow shards cost one timeout, not
N), and a shard whose earlier call is still pending is not asked again, so a hung shard holds at most one
queued call from the endpoint however often Prometheus scrapes. It also keeps the counters the service
metrics report (errors, restarts seen, throttle decisions not archived).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ._families import Snapshot

__all__ = ["ShardGatherer"]


class ShardGatherer:
    """Asks the controller and the shards for one scrape and counts what went wrong.

    ``shards`` is read at each scrape, so a mapping the launcher updates (shards added or removed) is
    followed without restarting the endpoint. A sequence is named by index.
    """

    def __init__(self, controller: Any, shards: Mapping[str, Any] | Sequence[Any]) -> None:
        self._controller = controller
        self._shards = shards
        self._pending: dict[str, list[Any]] = {}
        self.shard_errors: dict[str, int] = {}
        self.controller_errors = 0
        #: restarts of each shard seen by this endpoint (each lost the usage windows of its entities)
        self.shard_restarts: dict[str, int] = {}
        self._incarnations: dict[str, Any] = {}
        #: throttle decisions each shard's current incarnation did not archive (rate bound or full queue)
        self.throttle_archive_dropped: dict[str, int] = {}
        #: how old the usage windows each shard's current incarnation restored at start were (ms); a shard that
        #: restored none (first start, no checkpoint) is absent
        self.restored_usage_age_ms: dict[str, int] = {}
        #: givers each shard's current incarnation could not reach in a reshard (their keys started empty there)
        self.hand_over_failures: dict[str, int] = {}

    @property
    def pending_shards(self) -> list[str]:
        """Shards whose call from an earlier scrape had not come back (they are not asked again until it does)."""
        return sorted(self._pending)

    def shard_items(self) -> list[tuple[str, Any]]:
        """``(name, actor handle)`` of every shard now, by name for a mapping, by index for a sequence."""
        if isinstance(self._shards, Mapping):
            return [(str(name), handle) for name, handle in list(self._shards.items())]
        return [(str(i), handle) for i, handle in enumerate(list(self._shards))]

    def gather(self, now_ms: int, timeout_s: float) -> tuple[int | None, dict[str, tuple[Snapshot, int]]]:
        """Ask everything at once, wait at most ``timeout_s`` once; the controller's end offset and each
        answering shard's ``(snapshot, applied offset)``. Failures and timeouts are counted here."""
        import ray

        deadline = time.monotonic() + timeout_s
        end_ref = self._controller.end_offset.remote() if self._controller is not None else None
        asked: dict[str, list[Any]] = {}
        for name, handle in self.shard_items():
            pending = self._pending.get(name)
            if pending:
                _, still = ray.wait(pending, num_returns=len(pending), timeout=0)
                if still:
                    self._count_shard_error(name)  # its last call has not come back: do not queue more
                    continue
                del self._pending[name]
            try:
                asked[name] = [handle.metrics_snapshot.remote(now_ms), handle.progress.remote()]
            except Exception:
                self._count_shard_error(name)
        refs = [ref for pair in asked.values() for ref in pair]
        if end_ref is not None:
            refs.append(end_ref)
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))

        end_offset: int | None = None
        if end_ref is not None:
            try:
                end_offset = int(ray.get(end_ref, timeout=0))
            except Exception:
                self.controller_errors += 1
        answers: dict[str, tuple[Snapshot, int]] = {}
        for name, pair in asked.items():
            try:
                snapshot, progress = ray.get(pair, timeout=0)
            except Exception as e:
                if isinstance(e, ray.exceptions.GetTimeoutError):
                    self._pending[name] = pair
                self._count_shard_error(name)
                continue
            self._note_incarnation(name, progress)
            self.throttle_archive_dropped[name] = int(progress.get("throttle_archive_dropped", 0))
            self.hand_over_failures[name] = int(progress.get("hand_over_failures", 0))
            age = progress.get("restored_usage_age_ms")
            if age is None:
                self.restored_usage_age_ms.pop(name, None)
            else:
                self.restored_usage_age_ms[name] = int(age)
            answers[name] = (snapshot, int(progress["applied_offset"]))
        return end_offset, answers

    def _note_incarnation(self, name: str, progress: Mapping[str, Any]) -> None:
        """Count a restart when a shard's incarnation changed since the last scrape, or when the first one
        seen is already a restart (Ray reconstructed it before this endpoint started)."""
        incarnation = progress["incarnation"]
        seen = self._incarnations.get(name)
        if progress["reconstructed"] if seen is None else seen != incarnation:
            self.shard_restarts[name] = self.shard_restarts.get(name, 0) + 1
        self._incarnations[name] = incarnation

    def _count_shard_error(self, name: str) -> None:
        self.shard_errors[name] = self.shard_errors.get(name, 0) + 1
