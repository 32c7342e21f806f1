"""How long a serving thread waits for the GIL: 0.5 ms in quotaplane's serving processes, not CPython's 5 ms.

A thread that wants the GIL while another thread runs Python code waits until that thread releases it or the
interpreter's switch interval (``sys.setswitchinterval``, 5 ms by default) passes and it is asked to. A shard's
serving thread gives the GIL up several times a micro-batch (reading the gateway's frame, waiting for its serving
lock, writing the answer) while its own background threads run Python for tens of milliseconds at a time: the
usage checkpoint copies and encodes every quota sensor each second (~43 ms at 4,000 quota sensors on a 2-core
VM), the throttle archive encodes its records. A gateway has gRPC's threads, a reader per stream and a worker per
shard. Each hand-off to a busy thread can cost the decision path up to the whole interval.

Measured with ``bench/cluster_quota.py --shards 1,2`` (3 pairs of runs alternating, load 1.1-2.9): the p99 of
the batches paced at half load fell from 40-60 ms to 30-44 ms with one shard and from 30-35 to 21-30 ms with
two (5 of the 6 comparisons), the throughput within the runs' noise. Shorter turns cost a forced switch at most
every 0.5 ms while two threads are busy: a few microseconds each.

``QUOTAPLANE_SWITCH_INTERVAL_S`` (seconds, > 0) overrides the interval, e.g. ``0.005`` for CPython's own.
"""

from __future__ import annotations

import logging
import math
import os
import sys

__all__ = ["SERVING_SWITCH_INTERVAL_S", "SWITCH_INTERVAL_ENV", "serving_switch_interval", "use_serving_switch_interval"]

#: the switch interval of a serving process, in seconds
SERVING_SWITCH_INTERVAL_S = 0.0005
#: the environment variable that overrides it
SWITCH_INTERVAL_ENV = "QUOTAPLANE_SWITCH_INTERVAL_S"

log = logging.getLogger(__name__)


def serving_switch_interval() -> float:
    """The interval a serving process uses: ``QUOTAPLANE_SWITCH_INTERVAL_S`` when set, else 0.5 ms. ValueError
    naming the variable for anything but a finite number of seconds > 0."""
    raw = os.environ.get(SWITCH_INTERVAL_ENV, "").strip()
    if not raw:
        return SERVING_SWITCH_INTERVAL_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (0.0 < seconds < math.inf):
        raise ValueError(f"{SWITCH_INTERVAL_ENV} must be a number of seconds > 0, got {raw!r}")
    return seconds


def use_serving_switch_interval(*, strict: bool = True) -> float:
    """Set this process's switch interval to :func:`serving_switch_interval` (once it is ready to serve: the
    interval is process-wide); the interval set. A bad override raises ValueError, or with ``strict=False`` (a
    shard, whose environment ``up`` did not check) is logged and the interval left as it is."""
    try:
        seconds = serving_switch_interval()
    except ValueError as e:
        if strict:
            raise
        log.warning("%s; the switch interval stays %.4f s", e, sys.getswitchinterval())
        return sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    return sys.getswitchinterval()
