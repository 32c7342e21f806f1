"""Throttle-time formulas (Kafka's ``QuotaUtils`` and ``ControllerMutationQuotaManager.throttleTimeMs``).

All pure functions. Results are Java ``Math.round`` (half up), clamped to a Java int because every
caller turns them into an ``int`` throttle_time_ms field.
"""

from __future__ import annotations

import math

from ..metrics import QuotaViolationError, Rate, TokenBucket

__all__ = [
    "INT_MAX_VALUE",
    "bounded_throttle_time",
    "java_round",
    "throttle_time",
    "throttle_time_for",
    "token_bucket_throttle_time",
    "violated_rate_window_size",
]

#: Java's ``Integer.MAX_VALUE``: the largest throttle_time_ms a Kafka response can carry.
INT_MAX_VALUE = 2**31 - 1

_floor = math.floor


def java_round(x: float) -> int:
    """Java's ``Math.round``: the closest integer, ties toward positive infinity.

    Python's ``round`` rounds ties to even, so ``round(2.5) == 2`` where Java gives 3.

    >>> java_round(2.5), java_round(-2.5), java_round(0.49999999999999994)
    (3, -2, 0)
    """
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return 2**63 - 1 if x > 0 else -(2**63)
    floor = math.floor(x)
    return floor + 1 if x - floor >= 0.5 else floor


def _clamp_int(ms: int) -> int:
    # Kafka casts the long to an int (Scala .toInt wraps); a wrapped, negative throttle helps no one
    return min(ms, INT_MAX_VALUE)


def throttle_time_for(value: float, bound: float, window_size_ms: int) -> int:
    """Delay that brings an observed rate O back to the target T over a window W.

    Adding a delay X to the window gives ``O * W / (W + X) = T``, so ``X = (O - T) / T * W``.

    >>> throttle_time_for(5.6, 5.0, 10_000)  # 12% over quota in a 10 s window
    1200
    >>> throttle_time_for(1.0, 0.0, 1000)  # a zero quota: Java's x/0 is Infinity, rounded to Long.MAX
    2147483647
    """
    difference = value - bound
    if bound == 0.0:
        # Java divides by zero to ±Infinity (or NaN at 0/0) and Math.round saturates; a zero
        # connection-rate quota thus throttles for the whole cap, as in Kafka
        return _clamp_int(java_round(math.copysign(math.inf, difference) if difference else math.nan))
    x = difference / bound * window_size_ms
    if x - x != 0.0:  # infinite or NaN
        return _clamp_int(java_round(x))
    # java_round and _clamp_int written out: every throttled request of a quota manager passes here
    floor = _floor(x)
    ms = floor + 1 if x - floor >= 0.5 else floor
    return ms if ms < INT_MAX_VALUE else INT_MAX_VALUE


def violated_rate_window_size(e: QuotaViolationError, now_ms: int) -> int:
    """The padded window at ``now_ms`` of the ``Rate`` that ``e`` reports; ValueError for any other stat."""
    stat = e.metric.stat
    if not isinstance(stat, Rate):
        raise ValueError(f"Metric {e.metric.metric_name} is not a Rate metric, value {stat!r}")
    return stat.window_size(e.metric.config, now_ms)


def throttle_time(e: QuotaViolationError, now_ms: int) -> int:
    """Kafka's ``QuotaUtils.throttleTime``: the delay for a violated ``Rate``, using its padded window at ``now_ms``.

    Raises ValueError if the violated metric is not a ``Rate``.
    """
    return throttle_time_for(e.value, e.bound, violated_rate_window_size(e, now_ms))


def bounded_throttle_time(e: QuotaViolationError, max_throttle_time_ms: int, now_ms: int) -> int:
    """``throttle_time`` capped at ``max_throttle_time_ms`` (request and connection quotas cap at one window)."""
    return min(throttle_time(e, now_ms), max_throttle_time_ms)


def token_bucket_throttle_time(e: QuotaViolationError) -> int:
    """Time for a token bucket at ``e.value`` (< 0) tokens to refill to zero at ``e.bound`` tokens/s.

    >>> from quotaplane.metrics import KafkaMetric, MetricName, MetricConfig
    >>> m = KafkaMetric(MetricName("tokens", "ControllerMutation"), TokenBucket(), MetricConfig())
    >>> token_bucket_throttle_time(QuotaViolationError(m, -60.0, 5.0))
    12000
    """
    if not isinstance(e.metric.stat, TokenBucket):
        raise ValueError(f"Metric {e.metric.metric_name} is not a TokenBucket metric, value {e.metric.stat!r}")
    return _clamp_int(java_round(-e.value / e.bound * 1000))
