"""Sensors: record a value into every stat they own, then hold the stats to their quotas."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._config import MetricConfig, RecordingLevel

if TYPE_CHECKING:
    from ._registry import KafkaMetric, Metrics

__all__ = ["QuotaViolationError", "Sensor"]


class QuotaViolationError(Exception):
    """A recording moved a metric past its quota (Kafka's ``QuotaViolationException``).

    The value stays recorded: Kafka records first and checks after. ``value`` is the measurement
    that violated ``bound``; ``metric`` is the metric measured (its stat and config give the
    window that the throttle time is computed over).
    """

    __slots__ = ("bound", "metric", "value")

    def __init__(self, metric: KafkaMetric, value: float, bound: float) -> None:
        super().__init__()
        self.metric = metric
        self.value = value
        self.bound = bound

    def __str__(self) -> str:
        # formatted on demand: violations are routine on the hot path and are rarely printed
        return f"'{self.metric.metric_name}' violated quota. Actual: {self.value}, Threshold: {self.bound}"


class Sensor:
    """A named point of recording with the metrics fed from it (Kafka's ``Sensor``).

    ``record`` updates every stat, then (unless ``check_quotas=False``) measures each metric that
    has a quota and raises ``QuotaViolationError`` for the first one out of bounds, then records
    into the parent sensors. The violating value is never rolled back.
    """

    __slots__ = (
        "_metrics",
        "_recorders",
        "_registry",
        "_should_record",
        "config",
        "inactive_sensor_expiration_ms",
        "last_record_time_ms",
        "name",
        "parents",
        "recording_level",
    )

    def __init__(
        self,
        registry: Metrics,
        name: str,
        *,
        config: MetricConfig,
        now_ms: int,
        parents: Sequence[Sensor] = (),
        inactive_sensor_expiration_time_seconds: float = float("inf"),
        recording_level: RecordingLevel = RecordingLevel.INFO,
    ) -> None:
        if not isinstance(name, str):
            raise TypeError("a sensor name must be a string")
        self._registry = registry
        self.name = name
        self.parents = tuple(parents)
        self.config = config
        self.recording_level = recording_level
        self._should_record = recording_level.should_record(config.recording_level)
        self.inactive_sensor_expiration_ms = inactive_sensor_expiration_time_seconds * 1000
        self.last_record_time_ms = now_ms
        self._metrics: dict[object, KafkaMetric] = {}
        #: ``(metric, metric.stat.record)`` of every metric, in order: a sensor records on every push and every
        #: request, and the bound methods are looked up once (a metric's stat never changes; its config may)
        self._recorders: tuple[tuple[KafkaMetric, Any], ...] = ()
        self._check_forest(set())

    def _check_forest(self, seen: set[int]) -> None:
        if id(self) in seen:
            raise ValueError(f"Circular dependency in sensors: {self.name} is its own parent.")
        seen.add(id(self))
        for parent in self.parents:
            parent._check_forest(seen)

    def should_record(self) -> bool:
        return self._should_record

    def record(self, value: float, now_ms: int, *, check_quotas: bool = True) -> None:
        """Record ``value`` at ``now_ms`` in every stat, then check quotas, then record in parents."""
        if not self._should_record:
            return
        self.last_record_time_ms = now_ms
        for metric, stat_record in self._recorders:
            stat_record(metric.config, value, now_ms)
        if check_quotas:
            self.check_quotas(now_ms)
        for parent in self.parents:
            parent.record(value, now_ms, check_quotas=check_quotas)

    def check_quotas(self, now_ms: int) -> None:
        """Raise ``QuotaViolationError`` if any metric of this sensor is outside its quota at ``now_ms``."""
        for metric, _ in self._recorders:
            config = metric.config
            quota = config.quota
            if quota is not None:
                stat = metric.stat
                value = stat.measure(config, now_ms)
                # a stat of the caller's own (Kafka takes any MeasurableStat) is held to quota.acceptable
                is_violated = getattr(stat, "is_violated", None)
                violated = is_violated(quota, value) if is_violated is not None else not quota.acceptable(value)
                if violated:
                    raise QuotaViolationError(metric, value, quota.bound)

    def add(
        self, metric_name: object, stat: object, config: MetricConfig | None = None, *, now_ms: int | None = None
    ) -> bool:
        """Register a metric fed by this sensor, measured with ``config`` (default: the sensor's).

        Adding the same name twice is a no-op (Kafka's idempotent add); a name already registered
        by another sensor is an error. Given ``now_ms``, an expired sensor adds nothing and returns
        False, as Kafka's does (an expired sensor is about to be removed with its metrics).
        """
        if now_ms is not None and self.has_expired(now_ms):
            return False
        if metric_name in self._metrics:
            return True
        metric = self._registry._new_metric(metric_name, stat, config if config is not None else self.config)
        self._registry.register_metric(metric)
        self._metrics[metric.metric_name] = metric
        self._recorders += ((metric, metric.stat.record),)
        return True

    def has_metrics(self) -> bool:
        return bool(self._metrics)

    @property
    def metrics(self) -> list[KafkaMetric]:
        return list(self._metrics.values())

    def has_expired(self, now_ms: int) -> bool:
        """True once the sensor has been idle for longer than its inactivity expiration."""
        return (now_ms - self.last_record_time_ms) > self.inactive_sensor_expiration_ms

    def __repr__(self) -> str:
        return f"Sensor({self.name!r}, metrics={[str(n) for n in self._metrics]})"
