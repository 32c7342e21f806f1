"""The gateway's reshard barrier (``_reshard_barrier``): a unit placed at a new shard count waits while units
placed at another count are in flight, so a stream's batches reach the receiving shard in their order even
when the giving shard refuses the earlier ones and they are routed again."""

from __future__ import annotations

import threading

from quotaplane.services.gateway._batching import Pending, Unit
from quotaplane.services.gateway._reshard_barrier import ReshardBarrier


def _unit(name: str, count: int, arrival: int = 0) -> Unit:
    """One item ``name`` of the request the gateway took ``arrival``-th, placed by ``count`` shards."""
    pending = Pending("usage", [name], lambda items, indices: (0, ["k"]), arrival)
    return Unit(pending, [0], offset=0, count=count)


class Shards:
    """What the barrier delivered, in order: ``(shard, item, front)``."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, str, bool]] = []

    def __call__(self, shard: str, unit: Unit, front: bool) -> None:
        self.delivered.append((shard, unit.pending.items[0], front))


def test_one_count_passes_at_once_in_order():
    shards = Shards()
    barrier = ReshardBarrier(shards)
    units = [_unit(f"b{i}", 2) for i in range(3)]
    for i, unit in enumerate(units):
        barrier.send(str(i % 2), unit)
    assert shards.delivered == [("0", "b0", False), ("1", "b1", False), ("0", "b2", False)]
    barrier.done(units)
    assert barrier.held() == 0 and barrier.held_units == 0


def test_the_new_counts_units_wait_for_the_old_counts_and_a_refused_batch_goes_first():
    shards = Shards()
    barrier = ReshardBarrier(shards)
    first = _unit("b1", 2, arrival=1)
    barrier.send("1", first)  # placed by the old count on the giving shard, in flight
    later = _unit("b2", 4, arrival=2)
    barrier.send("3", later)  # placed by the new count on the receiving shard: must not overtake b1
    same_count_behind = _unit("b3", 2, arrival=3)
    barrier.send("0", same_count_behind)  # behind a waiting unit: waits too, keeping the order
    assert shards.delivered == [("1", "b1", False)]
    # the giver refuses b1: the gateway routes it again (by the new count, ahead of what is queued) before the
    # worker reports b1's unit done
    again = _unit("b1", 4, arrival=1)
    barrier.send("3", again, front=True)
    assert shards.delivered == [("1", "b1", False)] and barrier.held() == 3
    barrier.done([first])
    # in the order the requests came, each at the back of its worker's queue
    assert shards.delivered == [("1", "b1", False), ("3", "b1", False), ("3", "b2", False)]
    # b3 was placed by the old count: it waits until the new count's units are done
    barrier.done([again, later])
    assert shards.delivered[-1] == ("0", "b3", False)
    barrier.done([same_count_behind])
    assert barrier.held() == 0 and barrier.held_units == 3  # b2, b3 and b1 routed again


def test_delivering_may_place_a_unit_anew_through_the_barrier():
    delivered: list[str] = []
    barrier: ReshardBarrier

    def deliver(shard: str, unit: Unit, front: bool) -> None:
        if shard == "gone":  # the shard a reshard removed while the unit waited: placed anew
            barrier.send("0", _unit(unit.pending.items[0], unit.count), front=front)
        else:
            delivered.append(unit.pending.items[0])

    barrier = ReshardBarrier(deliver)
    old = _unit("a", 2)
    barrier.send("1", old)
    barrier.send("gone", _unit("b", 3))
    done = threading.Event()
    threading.Thread(target=lambda: (barrier.done([old]), done.set())).start()
    assert done.wait(5)  # no deadlock: the barrier's lock is re-entrant
    assert delivered == ["a", "b"]


def test_batches_refused_in_turn_wait_in_the_order_the_requests_came():
    """A removed shard's worker refuses its queue one micro-batch at a time: each refused batch is routed again
    while the earlier refused ones still wait. Each takes its place by its request's arrival, not at the front
    (at the front, the later refusal would overtake the earlier one and the receiving shard would record the
    stream backwards)."""
    shards = Shards()
    barrier = ReshardBarrier(shards)
    old = [_unit(f"b{i}", 4, arrival=i) for i in range(1, 5)]
    for unit in old:
        barrier.send("3", unit)  # placed by 4 shards on shard 3, which a reshard to 3 removes
    newer = _unit("b5", 3, arrival=5)
    barrier.send("0", newer)  # placed by the new count: waits
    barrier.send("0", _unit("b1", 3, arrival=1), front=True)  # shard 3 refused [b1, b2]: both routed again
    barrier.send("1", _unit("b2", 3, arrival=2), front=True)
    barrier.done(old[:2])
    barrier.send("0", _unit("b3", 3, arrival=3), front=True)  # then [b3, b4]
    barrier.send("1", _unit("b4", 3, arrival=4), front=True)
    assert [d[1] for d in shards.delivered] == ["b1", "b2", "b3", "b4"]  # only the first placements so far
    barrier.done(old[2:])
    assert [d[1] for d in shards.delivered[4:]] == ["b1", "b2", "b3", "b4", "b5"]
