"""The shards' metric snapshots merged into Prometheus families, one series per entity, bounded per name.

Separate from the gathering because it is pure: it takes what the shards answered and decides the page
(which series, which label set, which duplicate wins, which series are dropped by the cardinality bound),
so the rules of the package docstring ("No shard label on entity metrics", "Cardinality is bounded by
configuration") live in one place.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily

from ._naming import ENTITY_TAGS, USAGE_OF_GROUP, label_name, prometheus_name

__all__ = ["Family", "Series", "Snapshot", "bounded", "counter", "kafka_families"]

#: A shard's ``metrics_snapshot``: ``(name, group, description, tags, value)`` per Kafka metric.
Snapshot = list[tuple[str, str, str, dict[str, str], float]]
LabelKey = tuple[tuple[str, str], ...]


@dataclass
class Series:
    """One sample: its labels, its value, and the rank the cardinality bound keeps the highest of."""

    labels: dict[str, str]
    value: float
    rank: float


@dataclass
class Family:
    """The series of one Prometheus metric name, keyed by their sorted label set."""

    name: str
    documentation: str
    series: dict[LabelKey, Series] = field(default_factory=dict)


def kafka_families(answers: Mapping[str, tuple[Snapshot, int]], duplicates: dict[str, int]) -> dict[str, Family]:
    """Kafka's metrics of every answering shard as families (by Prometheus name).

    ``answers`` maps a shard's name to ``(snapshot, applied offset)``. A series reported by two shards keeps
    the larger value and is counted in ``duplicates`` (by metric name). A ``quota-value`` series is ranked by
    the same entity's usage metric, so the bound keeps the bounds of the entities whose usage it keeps.
    """
    families: dict[str, Family] = {}
    usage: dict[tuple[str, LabelKey], float] = {}
    value_series: list[tuple[Family, LabelKey, str]] = []
    for shard, (snapshot, _) in answers.items():
        for name, group, description, tags, value in snapshot:
            if not math.isfinite(value):
                continue
            prom = prometheus_name(name, group)
            family = families.get(prom)
            if family is None:
                family = families[prom] = Family(prom, description or f"Kafka metric {group}/{name}")
            labels = {label_name(tag): str(tag_value) for tag, tag_value in tags.items()}
            if not ENTITY_TAGS.intersection(tags):
                labels["shard"] = shard
            key = tuple(sorted(labels.items()))
            existing = family.series.get(key)
            if existing is not None:
                duplicates[prom] = duplicates.get(prom, 0) + 1
                if existing.value >= value:
                    continue
            family.series[key] = Series(labels, value, value)
            if USAGE_OF_GROUP.get(group) == name:
                usage[(group, key)] = max(value, usage.get((group, key), -math.inf))
            elif name == "quota-value" and group in USAGE_OF_GROUP:
                value_series.append((family, key, group))
    for family, key, group in value_series:
        series = family.series.get(key)
        if series is not None:
            series.rank = usage.get((group, key), -math.inf)
    return families


def bounded(family: Family, limit: int, dropped: dict[str, int]) -> list[Series]:
    """At most ``limit`` series of ``family``, the highest ranked; the rest counted in ``dropped``."""
    series = list(family.series.values())
    if len(series) <= limit:
        return series
    dropped[family.name] = dropped.get(family.name, 0) + len(series) - limit
    return heapq.nlargest(limit, series, key=lambda s: s.rank)


def counter(name: str, documentation: str, label: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    """A counter family with one sample per ``label`` value, in sorted order."""
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key, count in sorted(counts.items()):
        family.add_metric([key], count)
    return family
