"""A Kafka metrics registry as rows, measured: what ``ShardActor.metrics_snapshot`` and its per-node hosts
(``ConnectionHost``, ``ReplicationHost``) give the metrics endpoint."""

from __future__ import annotations

import math
from collections.abc import Container

from quotaplane.metrics import Metrics

__all__ = ["NODE_METRIC_TAG", "MetricRow", "metric_rows"]

#: Added to a per-node registry's metrics (Kafka's have no node tag: one broker, one registry).
NODE_METRIC_TAG = "node"

#: ``(name, group, description, tags, value)``
MetricRow = tuple[str, str, str, dict[str, str], float]


def metric_rows(
    metrics: Metrics, now_ms: int, *, node_id: int | None = None, groups: Container[str] | None = None
) -> list[MetricRow]:
    """Every metric of ``metrics`` (of ``groups`` only, if given) measured at ``now_ms``, tagged with
    ``node_id`` if given. Non-finite values are left out (Prometheus has no use for Kafka's NaN of an
    empty Avg)."""
    rows = []
    for metric_name, metric in list(metrics.metrics.items()):
        if groups is not None and metric_name.group not in groups:
            continue
        value = metric.measurable_value(now_ms)
        if math.isfinite(value):
            tags = dict(metric_name.tags)
            if node_id is not None:
                tags[NODE_METRIC_TAG] = str(node_id)
            rows.append((metric_name.name, metric_name.group, metric_name.description, tags, value))
    return rows
