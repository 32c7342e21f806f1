"""Pausing Python's cyclic garbage collector around bulk work that makes many objects and no cycles, and keeping
a serving process's long-lived objects out of its full collections.

A bulk replay of the config log, a chunk of the log decoded in a Spark executor, a shard's usage checkpoint:
each allocates thousands to millions of containers (lists, tuples, dicts) that reference counting frees, none
of them in a cycle. Yet every 700 allocations trigger a collection that walks the young objects, and the
collections that follow promote them and walk the older ones too: measured, pausing makes a replay of a
million events 1.5-2x faster, takes 15 % off a log chunk's decoding, and keeps a shard's full collections
(tens of ms) out of its decisions while it copies its usage. One definition, so the three agree on how the
collector is put back.

A full collection walks every tracked object of the process. In a shard or the ``up`` process most of them
are made at start and live as long as it: the imported modules (Ray, gRPC, protobuf: ~70,000 objects, 30 ms
a full collection on a 2-core VM), the replayed config image, the managers. :func:`freeze_long_lived`, called
once a process is ready to serve, moves them to the permanent generation, so the full collections that fall
between decisions walk only what was made since.

The ``up`` process (the Kafka frontend's loop and the gateway's threads) also collects its young objects less
often (:func:`set_serving_thresholds`): a request keeps its tracked objects (its coroutine, future, context,
decoded header) alive until it is answered, so a young collection there walked 19,000-25,000 objects, freed
none of them, and came every few milliseconds: ~15 % of the process's CPU.

>>> import gc
>>> with gc_paused():
...     gc.isenabled()
False
>>> gc.isenabled()
True
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["SERVING_THRESHOLDS", "freeze_long_lived", "gc_paused", "ready_to_serve", "set_serving_thresholds"]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Within the block, no cyclic garbage collection; after it, the collector as it was before (enabled only
    if it was)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def freeze_long_lived() -> int:
    """Collect once, then freeze what survived (``gc.freeze``): no later collection walks it. The number of
    frozen objects.

    Call it once, when a long-lived process has built what it serves with. What is frozen is freed by
    reference counting as before; only a cycle among frozen objects that becomes garbage later stays (a
    shard's expired sensors form none: checked in tests/test_gc_pause.py)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


#: ``gc.set_threshold`` of a process serving Kafka clients and the gateway (CPython's default: 700, 10, 10).
SERVING_THRESHOLDS = (20_000, 20, 20)


def set_serving_thresholds() -> tuple[int, int, int]:
    """Collect the young generation once per ``SERVING_THRESHOLDS[0]`` net allocations instead of 700; the
    thresholds before.

    Why (``bench/frontend.py``, 2,400 clients, the gateway and the frontend in one process, as ``up`` runs them):
    the process made ~370 young collections in its 11 s of handshakes and pushes, each ~2 ms (perf:
    ``gc_collect_main`` and its visits ~15 % of the process's CPU), each walking 19,000-25,000 young objects (the
    count that triggers one is net of frees) and freeing none: what a request allocates lives until it is
    answered, and reference counting frees it then. At 20,000 the same run made 6 (~9 ms each): the process's
    CPU a push fell by 7-22 us and its p99 by a third; the decision path (``bench/cluster_quota.py``) was no
    worse (docs/performance.md). The shards, whose objects die within a call, showed no collector in their
    profile and keep the default.
    """
    previous = gc.get_threshold()
    gc.set_threshold(*SERVING_THRESHOLDS)
    return previous


def ready_to_serve() -> None:
    """What ``quotaplane up``'s process does once it is ready (the gateway and the frontend in one process):
    :func:`freeze_long_lived`, then :func:`set_serving_thresholds`. The benchmarks that run ``launch()`` in their
    own process call it too, so they measure the process as ``up`` runs it."""
    freeze_long_lived()
    set_serving_thresholds()
