"""Kafka's metric primitives, clock-free: every call takes ``now_ms``.

>>> from quotaplane.metrics import MetricConfig, Quota, Rate
>>> config = MetricConfig(samples=11, time_window_ms=1000, quota=Quota.upper_bound(5.0))
>>> rate = Rate()
>>> rate.record(config, 560.0, 1_700_000_000_000)
>>> rate.window_size(config, 1_700_000_000_000), rate.measure(config, 1_700_000_000_000)
(10000, 56.0)
"""

from ._config import DEFAULT_NUM_SAMPLES, LONG_MAX_VALUE, MetricConfig, Quota, RecordingLevel, TimeUnit
from ._rate import Rate, SimpleRate
from ._registry import KafkaMetric, MetricName, Metrics, MetricsReporter
from ._sensor import QuotaViolationError, Sensor
from ._stats import (
    Avg,
    CumulativeCount,
    CumulativeSum,
    Max,
    MeasurableStat,
    Min,
    SampledStat,
    TokenBucket,
    Value,
    WindowedCount,
    WindowedSum,
)

__all__ = [
    "DEFAULT_NUM_SAMPLES",
    "LONG_MAX_VALUE",
    "Avg",
    "CumulativeCount",
    "CumulativeSum",
    "KafkaMetric",
    "Max",
    "MeasurableStat",
    "MetricConfig",
    "MetricName",
    "Metrics",
    "MetricsReporter",
    "Min",
    "Quota",
    "QuotaViolationError",
    "Rate",
    "RecordingLevel",
    "SampledStat",
    "Sensor",
    "SimpleRate",
    "TimeUnit",
    "TokenBucket",
    "Value",
    "WindowedCount",
    "WindowedSum",
]
