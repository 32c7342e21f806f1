"""Shared helpers for the client-quota tests (not a conftest: other quota test modules are written in parallel)."""

from __future__ import annotations

import math
import sys

from quotaplane.metrics import LONG_MAX_VALUE, Metrics
from quotaplane.quota import ClientQuotaManager

#: A realistic wall-clock start, as Kafka's ``MockTime`` uses: 0 is a "never" sentinel in several structures.
START_MS = 1_700_000_000_000

#: The bound ``quota()`` reports when no quota applies (Kafka's ``Long.MAX_VALUE`` as a double).
UNLIMITED = float(LONG_MAX_VALUE)

#: ``max_value_in_quota_window`` when no quota applies (Java's ``Double.MAX_VALUE``).
DOUBLE_MAX_VALUE = sys.float_info.max


def metric_values(metrics: Metrics, now_ms: int) -> dict[object, float]:
    """Every metric's measured value at ``now_ms``, NaN mapped to a marker so that dicts compare equal."""
    values: dict[object, float] = {}
    for name, metric in metrics.metrics.items():
        value = metric.measurable_value(now_ms)
        values[name] = "NaN" if math.isnan(value) else value
    return values


def quota_metric_value(mgr: ClientQuotaManager, user: str, client_id: str, now_ms: int) -> float:
    """The measured rate of the quota metric a client records into."""
    metric = mgr.metrics.metric(mgr.quota_metric(user, client_id))
    assert metric is not None, f"no quota metric for {user}/{client_id}"
    return metric.measurable_value(now_ms)
