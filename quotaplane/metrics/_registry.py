"""The metrics registry: metric names with tags, metrics, sensors and inactive-sensor expiry.

Kafka's ``Metrics`` runs an expiry thread every 30 s. The core owns no threads: its owner calls
``expire_sensors(now_ms)`` on its own schedule (a shard actor does it between batches).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from ._config import MetricConfig, RecordingLevel
from ._sensor import Sensor

__all__ = ["KafkaMetric", "MetricName", "Metrics", "MetricsReporter"]


class MetricName:
    """A metric's identity: name, group and tags. The description is not part of equality.

    Tags keep their insertion order (Kafka's sensor names join tag values in that order), but two
    names with the same tags in another order are equal.
    """

    __slots__ = ("_hash", "_tags", "description", "group", "name")

    def __init__(self, name: str, group: str, description: str = "", tags: Mapping[str, str] | None = None):
        if not isinstance(name, str) or not isinstance(group, str):
            raise TypeError("metric name and group must be strings")
        self.name = name
        self.group = group
        self.description = description
        self._tags: tuple[tuple[str, str], ...] = tuple((tags or {}).items())
        self._hash = hash((name, group, frozenset(self._tags)))

    @property
    def tags(self) -> dict[str, str]:
        return dict(self._tags)

    @property
    def tag_items(self) -> tuple[tuple[str, str], ...]:
        """The tags as ``(key, value)`` pairs in their order, without a dict made (``tags.items()``, kept)."""
        return self._tags

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetricName):
            return NotImplemented
        return (
            self._hash == other._hash
            and self.name == other.name
            and self.group == other.group
            and (self._tags == other._tags or dict(self._tags) == dict(other._tags))
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"MetricName(name={self.name!r}, group={self.group!r}, tags={self.tags!r})"

    __str__ = __repr__


class KafkaMetric:
    """A named measurable with its config; the config is swapped whole when a quota changes."""

    __slots__ = ("config", "metric_name", "stat")

    def __init__(self, metric_name: MetricName, stat: object, config: MetricConfig) -> None:
        self.metric_name = metric_name
        self.stat = stat
        self.config = config

    def measurable_value(self, now_ms: int) -> float:
        return self.stat.measure(self.config, now_ms)

    def __repr__(self) -> str:
        return f"KafkaMetric({self.metric_name!r}, {type(self.stat).__name__})"


class MetricsReporter(Protocol):
    """Told of every metric added and removed (Kafka's ``MetricsReporter``); e.g. a Prometheus bridge."""

    def metric_change(self, metric: KafkaMetric) -> None: ...

    def metric_removal(self, metric: KafkaMetric) -> None: ...


class _FunctionStat:
    """Adapts ``(config, now_ms) -> float`` to a measurable (Kafka's lambda ``Measurable``)."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[MetricConfig, int], float]) -> None:
        self._fn = fn

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self._fn(config, now_ms)

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        raise TypeError("a function metric cannot be recorded into")

    def is_violated(self, quota, value: float) -> bool:
        return not quota.acceptable(value)


class Metrics:
    """The registry of metrics and sensors (Kafka's ``Metrics``), without threads or clocks."""

    def __init__(self, config: MetricConfig | None = None, *, reporters: Iterable[MetricsReporter] = ()) -> None:
        self.config = config if config is not None else MetricConfig()
        self._metrics: dict[MetricName, KafkaMetric] = {}
        self._sensors: dict[str, Sensor] = {}
        self._children: dict[str, list[Sensor]] = {}
        self._reporters: list[MetricsReporter] = list(reporters)
        #: Count of sensors ever removed; lets owners invalidate caches of Sensor references cheaply.
        self.sensors_removed = 0
        self.add_metric(
            self.metric_name("count", "kafka-metrics-count", "total number of registered metrics"),
            lambda config, now_ms: float(len(self._metrics)),
        )

    # --- names -----------------------------------------------------------------------------------
    def metric_name(
        self, name: str, group: str, description: str = "", tags: Mapping[str, str] | None = None
    ) -> MetricName:
        """A name whose tags are the registry's default tags overlaid with ``tags``."""
        combined = dict(self.config.tags)
        if tags:
            combined.update(tags)
        return MetricName(name, group, description, combined)

    # --- sensors ---------------------------------------------------------------------------------
    def get_sensor(self, name: str) -> Sensor | None:
        return self._sensors.get(name)

    def sensor(
        self,
        name: str,
        config: MetricConfig | None = None,
        *,
        now_ms: int,
        inactive_sensor_expiration_time_seconds: float = float("inf"),
        recording_level: RecordingLevel = RecordingLevel.INFO,
        parents: Sequence[Sensor] = (),
    ) -> Sensor:
        """The sensor named ``name``, created (idle since ``now_ms``) if it does not exist."""
        sensor = self._sensors.get(name)
        if sensor is None:
            sensor = Sensor(
                self,
                name,
                config=config if config is not None else self.config,
                now_ms=now_ms,
                parents=parents,
                inactive_sensor_expiration_time_seconds=inactive_sensor_expiration_time_seconds,
                recording_level=recording_level,
            )
            self._sensors[name] = sensor
            for parent in parents:
                self._children.setdefault(parent.name, []).append(sensor)
        return sensor

    def remove_sensor(self, name: str) -> None:
        """Remove a sensor, its metrics, and (recursively) the sensors that have it as a parent."""
        sensor = self._sensors.pop(name, None)
        if sensor is None:
            return
        self.sensors_removed += 1
        for metric in sensor.metrics:
            self.remove_metric(metric.metric_name)
        for parent in sensor.parents:
            siblings = self._children.get(parent.name)
            if siblings and sensor in siblings:
                siblings.remove(sensor)
        for child in self._children.pop(name, []):
            self.remove_sensor(child.name)

    def expire_sensors(self, now_ms: int) -> list[str]:
        """Remove every sensor idle past its expiration (Kafka's ``ExpireSensorTask``); their names."""
        expired = [name for name, sensor in self._sensors.items() if sensor.has_expired(now_ms)]
        for name in expired:
            self.remove_sensor(name)
        return expired

    @property
    def sensors(self) -> dict[str, Sensor]:
        return self._sensors

    # --- metrics ---------------------------------------------------------------------------------
    def _new_metric(self, metric_name: MetricName, stat: object, config: MetricConfig) -> KafkaMetric:
        if not isinstance(metric_name, MetricName):
            raise TypeError(f"expected a MetricName, got {type(metric_name).__name__}")
        if callable(stat) and not hasattr(stat, "measure"):
            stat = _FunctionStat(stat)
        return KafkaMetric(metric_name, stat, config)

    def add_metric(
        self,
        metric_name: MetricName,
        measurable: object,
        config: MetricConfig | None = None,
    ) -> KafkaMetric:
        """Register a metric not fed by a sensor (a stat, or a ``(config, now_ms) -> float`` function)."""
        metric = self._new_metric(metric_name, measurable, config if config is not None else self.config)
        self.register_metric(metric)
        return metric

    def register_metric(self, metric: KafkaMetric) -> None:
        if metric.metric_name in self._metrics:
            raise ValueError(f"A metric named '{metric.metric_name}' already exists, can't register another one.")
        self._metrics[metric.metric_name] = metric
        for reporter in self._reporters:
            reporter.metric_change(metric)

    def remove_metric(self, metric_name: MetricName) -> KafkaMetric | None:
        metric = self._metrics.pop(metric_name, None)
        if metric is not None:
            for reporter in self._reporters:
                reporter.metric_removal(metric)
        return metric

    def metric(self, metric_name: MetricName) -> KafkaMetric | None:
        return self._metrics.get(metric_name)

    @property
    def metrics(self) -> dict[MetricName, KafkaMetric]:
        return self._metrics

    def add_reporter(self, reporter: MetricsReporter) -> None:
        for metric in self._metrics.values():
            reporter.metric_change(metric)
        self._reporters.append(reporter)
