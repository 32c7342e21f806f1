"""Keeping each stream's order across a reshard: units placed at a new shard count wait for the old count's.

A gateway pipelines: several micro-batches of one stream may be in flight at once. When the shard count changes
between two of them, the earlier one was placed by the old count (say on shard 1, which gives its keys away) and
the later one by the new count (on shard 3, which receives them). Shard 1 refuses the earlier one once it
applied the reshard, and the gateway routes it again, to shard 3: where the later one may already have been
recorded. Two records of one key in the other order give the other throttle times than one broker would (the
same bytes are admitted: nothing is lost or counted twice, but the decisions differ from the core's).

The barrier keeps the order: a unit is handed to its shard's worker only while no unit placed at another count
is in flight; otherwise it waits here, in the order the gateway took the requests in (``Pending.arrival``: units
routed again take their place among the waiting ones by it, since several shards may refuse and hand back units
in any order), until the in-flight ones are answered, failed or routed again; then they go to their workers in
that order. Outside a reshard every unit has the same count and passes at the cost of one lock; during one, the
new count's units wait about one shard call.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._batching import Unit

__all__ = ["ReshardBarrier"]


def _age(unit: Unit) -> tuple[int, int]:
    """Which of two units went first: the request taken first, then the item first in it."""
    return unit.pending.arrival, unit.indices[0] if unit.indices else 0


#: ``(shard id, unit, front)`` -> hand the unit to that shard's worker (or place it anew if the shard is gone)
Deliver = Callable[[str, "Unit", bool], None]


class ReshardBarrier:
    """Units in flight by the shard count that placed them, and those waiting for another count's to finish."""

    def __init__(self, deliver: Deliver) -> None:
        self._deliver = deliver
        self._lock = threading.RLock()  # delivering may place a unit anew, through ``send``
        self._in_flight: collections.Counter[int] = collections.Counter()
        self._held: collections.deque[tuple[str, Unit]] = collections.deque()
        #: units that waited here (a reshard's cost in this gateway)
        self.held_units = 0

    def send(self, shard: str, unit: Unit, *, front: bool = False) -> None:
        """Hand ``unit`` to ``shard``'s worker now, or once no unit placed at another count is in flight."""
        with self._lock:
            if self._held or any(n for c, n in self._in_flight.items() if c != unit.count):
                self.held_units += 1
                held = self._held
                if front:  # routed again: older than what arrived after it, wherever it waits
                    key = _age(unit)
                    place = next((i for i, (_, waiting) in enumerate(held) if _age(waiting) > key), len(held))
                    held.insert(place, (shard, unit))
                else:
                    held.append((shard, unit))
                return
            self._in_flight[unit.count] += 1
            self._deliver(shard, unit, front)

    def done(self, units: Sequence[Unit]) -> None:
        """These units left flight (answered, failed, or routed again as new units): release what may go."""
        with self._lock:
            for unit in units:
                self._in_flight[unit.count] -= 1
                if self._in_flight[unit.count] <= 0:
                    del self._in_flight[unit.count]
            while self._held:
                shard, unit = self._held[0]
                if any(n for c, n in self._in_flight.items() if c != unit.count):
                    break
                self._held.popleft()
                self._in_flight[unit.count] += 1
                # in order, so at the back of its worker's queue: what is queued there went before the barrier
                self._deliver(shard, unit, False)

    def held(self) -> int:
        with self._lock:
            return len(self._held)
