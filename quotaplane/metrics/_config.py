"""Quota bounds, metric configuration and recording levels (Kafka's ``Quota``, ``MetricConfig``).

Both are immutable: a quota change swaps a metric's whole ``MetricConfig`` (as Kafka's
``ClientQuotaManager.updateQuotaMetricConfigs`` does) while the stat keeps its samples, so usage
survives every change of bound.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace

__all__ = ["DEFAULT_NUM_SAMPLES", "LONG_MAX_VALUE", "MetricConfig", "Quota", "RecordingLevel", "TimeUnit"]

#: Java's ``Long.MAX_VALUE``: Kafka's "no limit" for quota bounds and event windows.
LONG_MAX_VALUE = 2**63 - 1

#: Kafka's ``MetricConfig.DEFAULT_NUM_SAMPLES``.
DEFAULT_NUM_SAMPLES = 2


@dataclass(frozen=True, slots=True)
class Quota:
    """An upper or lower bound on a metric's value.

    >>> Quota.upper_bound(5.0).acceptable(5.0), Quota.upper_bound(5.0).acceptable(5.1)
    (True, False)
    """

    bound: float
    upper: bool = True

    @classmethod
    def upper_bound(cls, bound: float) -> Quota:
        return cls(float(bound), True)

    @classmethod
    def lower_bound(cls, bound: float) -> Quota:
        return cls(float(bound), False)

    @property
    def is_upper_bound(self) -> bool:
        return self.upper

    def acceptable(self, value: float) -> bool:
        return (self.upper and value <= self.bound) or (not self.upper and value >= self.bound)

    def __str__(self) -> str:
        return f"{'upper' if self.upper else 'lower'}={self.bound}"


class RecordingLevel(enum.IntEnum):
    """Kafka's ``Sensor.RecordingLevel``: a sensor records only if the config's level admits it."""

    INFO = 0
    DEBUG = 1
    TRACE = 2

    @classmethod
    def for_name(cls, name: str) -> RecordingLevel:
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"unknown recording level {name!r}; expected INFO, DEBUG or TRACE") from None

    def should_record(self, config_level: RecordingLevel) -> bool:
        """True if a sensor of this level records under a config of ``config_level``.

        INFO config records INFO sensors only; DEBUG records INFO and DEBUG; TRACE records all.
        """
        return self <= config_level


class TimeUnit(enum.Enum):
    """The unit a ``Rate`` or ``TokenBucket`` reports per; values are milliseconds per unit."""

    NANOSECONDS = 1e-6
    MICROSECONDS = 1e-3
    MILLISECONDS = 1.0
    SECONDS = 1000.0
    MINUTES = 60.0 * 1000.0
    HOURS = 60.0 * 60.0 * 1000.0
    DAYS = 24.0 * 60.0 * 60.0 * 1000.0

    def convert(self, time_ms: float) -> float:
        """Milliseconds to this unit, with Kafka's ``MetricsUtils.convert`` arithmetic."""
        if self is TimeUnit.NANOSECONDS:
            return time_ms * 1000.0 * 1000.0
        if self is TimeUnit.MICROSECONDS:
            return time_ms * 1000.0
        if self is TimeUnit.MILLISECONDS:
            return float(time_ms)
        return time_ms / self.value


@dataclass(frozen=True, slots=True)
class MetricConfig:
    """How a stat samples and what bound it is held to.

    ============================  =====================================================
    ``samples``                   number of windows kept (Kafka keeps one more, see SampledStat)
    ``time_window_ms``            length of one window
    ``event_window``              events per window before it is complete (default: unlimited)
    ``quota``                     the bound a ``Sensor`` checks, or None
    ``recording_level``           the level a sensor must be at or below to record
    ============================  =====================================================

    >>> MetricConfig(samples=11, time_window_ms=1000, quota=Quota.upper_bound(5.0)).samples
    11
    """

    samples: int = DEFAULT_NUM_SAMPLES
    time_window_ms: int = 30_000
    quota: Quota | None = None
    event_window: int = LONG_MAX_VALUE
    tags: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    recording_level: RecordingLevel = RecordingLevel.INFO

    def __post_init__(self) -> None:
        if not isinstance(self.samples, int) or self.samples < 1:
            raise ValueError(f"The number of samples must be at least 1, got {self.samples!r}")
        if not isinstance(self.time_window_ms, int) or self.time_window_ms < 1:
            raise ValueError(f"time_window_ms must be a positive integer, got {self.time_window_ms!r}")
        if not isinstance(self.event_window, int) or self.event_window < 1:
            raise ValueError(f"event_window must be a positive integer, got {self.event_window!r}")
        if self.quota is not None and math.isnan(self.quota.bound):
            raise ValueError("a quota bound cannot be NaN")

    def with_quota(self, quota: Quota | None) -> MetricConfig:
        return replace(self, quota=quota)
