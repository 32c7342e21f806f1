"""The usage a restarted shard lost, counted by the gateway that sent it: the bound of what the restart over-admits.

A shard records usage in memory and writes its windows to a checkpoint every second (``quotaplane.actors``'
usage checkpoints). When Ray restarts it, the new incarnation puts the last checkpoint back; what the dead one
recorded after that checkpoint is gone, and every entity it belonged to may send that much again before its
quota throttles it: one Kafka broker that never stopped would have counted it. The shard cannot know how much
that was (it died with it); the gateway can, because it sent it. So each shard worker keeps, for the last
``horizon_ms``, how many usage bytes each answered micro-batch carried and when (between its send and its answer,
on the wall clock the shard's checkpoints are stamped with), and when it finds its shard
restarted (a new incarnation behind a reconnected channel) it sums what it sent after the restored checkpoint's
time (with no checkpoint restored: everything within the quota window before the restart, which the windows
held). That sum bounds the restart's over-admission from this gateway; the fleet's bound is the sum over its
gateways (``quotaplane_over_admission_bound_bytes`` on each metrics endpoint).

It is a bound, not the exact figure: an entity that was under its quota loses usage that changes no answer.
``bench/shard_restart.py`` prints both, the bound and the over-admission measured against an uninterrupted core.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

__all__ = ["DEFAULT_WINDOW_MS", "LostUsage", "Restart"]

#: Kafka's quota window, samples x window (11 x 1 s): the usage a shard's windows hold at most
DEFAULT_WINDOW_MS = 11_000


@dataclass(frozen=True, slots=True)
class Restart:
    """One restart of a shard, seen by this gateway: the usage bytes it had sent that the new incarnation lacks."""

    shard_id: str
    restarted_ms: int
    checkpoint_ms: int | None
    lost_bytes: float


class LostUsage:
    """Usage bytes sent to one shard, by item time, for the last ``horizon_ms``; thread-safe."""

    def __init__(self, horizon_ms: int = DEFAULT_WINDOW_MS + 4_000) -> None:
        self.horizon_ms = horizon_ms
        #: ``(sent ms, answered ms, bytes)`` per answered usage micro-batch (wall clock), oldest first
        self._sent: collections.deque[tuple[int, int, float]] = collections.deque()
        self._lock = threading.Lock()

    def sent(self, first_ms: int, last_ms: int, value: float) -> None:
        """An answered micro-batch: the shard recorded ``value`` bytes between ``first_ms`` (sent) and ``last_ms``
        (answered)."""
        with self._lock:
            sent = self._sent
            sent.append((first_ms, last_ms, value))
            oldest = last_ms - self.horizon_ms
            while sent and sent[0][1] < oldest:
                sent.popleft()

    def lost(self, restarted_ms: int, checkpoint_ms: int | None, window_ms: int = DEFAULT_WINDOW_MS) -> float:
        """Bytes recorded by the dead incarnation that the new one did not restore: sent after ``checkpoint_ms``
        (None: after ``restarted_ms - window_ms``, all the windows held) and before ``restarted_ms``. A batch that
        straddles the checkpoint counts whole (a bound)."""
        since = restarted_ms - window_ms if checkpoint_ms is None else max(checkpoint_ms, restarted_ms - window_ms)
        with self._lock:
            return sum(value for first, last, value in self._sent if last > since and first < restarted_ms)
