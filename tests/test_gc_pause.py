"""``freeze_long_lived``: what a serving process holds at start leaves its full collections, garbage does not
stay, and a shard's sensors that expire later make no cycle the freeze would keep. ``set_serving_thresholds``:
requests in flight do not make young collections by the hundred, and a cycle is still collected."""

from __future__ import annotations

import gc
import subprocess
import sys

from quotaplane.metrics import Metrics
from quotaplane.quota import DEFAULT, ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType

# run in a fresh interpreter: a freeze of the test process would keep every earlier test's objects frozen
_FREEZE_SCRIPT = """
import gc
import weakref
import quotaplane.actors.shard  # what a shard imports: Ray, gRPC, protobuf
from quotaplane.gc_pause import freeze_long_lived

class Node:
    pass

cycle = Node()
cycle.self = cycle
garbage = weakref.ref(cycle)  # dead only if a collection freed the cycle: a frozen cycle would live for good
del cycle
kept = Node()
tracked = len(gc.get_objects())
frozen = freeze_long_lived()
walked = gc.get_objects()
print(tracked, frozen, garbage() is None, any(o is kept for o in walked), len(walked))
"""


def test_what_lives_at_the_freeze_leaves_every_later_collection_and_garbage_is_collected_first() -> None:
    done = subprocess.run([sys.executable, "-c", _FREEZE_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    tracked, frozen, garbage_freed, kept_walked, walked_after = done.stdout.split()
    assert int(frozen) > 10_000  # Ray, gRPC and protobuf's modules alone are tens of thousands
    assert garbage_freed == "True"  # the cycle made before was collected, not frozen
    assert kept_walked == "False"
    assert int(walked_after) < int(tracked) // 10  # a full collection now walks almost nothing


def test_expired_sensors_form_no_cycle_a_freeze_would_keep() -> None:
    """A shard's sensors are made after its freeze and most expire; any made before it (restored usage) must
    be freed by reference counting when they expire, or a frozen cycle would keep them for good."""
    metrics = Metrics()
    manager = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE, metrics=metrics)
    manager.update_quota(ClientQuotaEntity(user="alice", client_id=DEFAULT), 1024.0)  # a sensor per client
    now = 1_700_000_000_000
    for i in range(200):
        manager.record_and_get_throttle_time_ms(user="alice", client_id=f"c{i}", value=10.0, now_ms=now)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # every unreachable object found goes to gc.garbage instead of being freed
    try:
        expired = metrics.expire_sensors(now + 10 * 3_600_000)
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage if type(o).__module__.startswith("quotaplane")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert len(expired) >= 200
    assert left == []


# a fresh interpreter again: the thresholds are the process's
_THRESHOLD_SCRIPT = """
import gc
import weakref
from quotaplane.gc_pause import SERVING_THRESHOLDS, set_serving_thresholds

class Node:
    pass

def young_collections(in_flight):
    counted = []
    callback = lambda phase, info: counted.append(info["generation"]) if phase == "start" else None
    gc.callbacks.append(callback)
    live = [[Node()] for _ in range(in_flight)]  # requests in flight: each holds a few tracked objects
    gc.callbacks.remove(callback)
    del live
    return sum(1 for generation in counted if generation == 0)

default = gc.get_threshold()
before = young_collections(30_000)
previous = set_serving_thresholds()
after = young_collections(30_000)
cycle = Node()
cycle.self = cycle
garbage = weakref.ref(cycle)
del cycle
held = [Node() for _ in range(SERVING_THRESHOLDS[0] + 1)]  # enough net allocations for one young collection
print(default == previous, gc.get_threshold() == SERVING_THRESHOLDS, before, after, garbage() is None)
"""


def test_serving_thresholds_collect_the_young_generation_less_often_and_still_free_cycles() -> None:
    done = subprocess.run([sys.executable, "-c", _THRESHOLD_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    returned_previous, set_now, before, after, cycle_freed = done.stdout.split()
    assert returned_previous == "True" and set_now == "True"
    assert int(before) >= 60  # 60,000 tracked objects at CPython's 700 (a collection per 700 net allocations)
    assert int(after) <= 3
    assert cycle_freed == "True"  # the collector still runs: a cycle is freed at the next young collection


def test_ready_to_serve_freezes_and_sets_the_serving_thresholds() -> None:
    script = (
        "import gc\n"
        "from quotaplane.gc_pause import SERVING_THRESHOLDS, ready_to_serve\n"
        "assert gc.get_freeze_count() == 0\n"
        "ready_to_serve()\n"
        "print(gc.get_freeze_count() > 0, gc.get_threshold() == SERVING_THRESHOLDS)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]
