r"""KIP-714 broker-side metrics (Kafka's ``ClientMetricsManager.ClientMetricsStats``).

Group ``client-metrics``: ``instance-count``; ``unknown-subscription-request-rate/-count``;
``throttle-rate/-count``; ``plugin-export-rate/-count`` with ``plugin-export-time-avg/-max``;
``plugin-error-rate/-count``. KIP-714 calls them ClientMetricsInstanceCount,
ClientMetricsUnknownSubscriptionRequest, ClientMetricsThrottle, ClientMetricsPluginExport,
ClientMetricsPluginError and ClientMetricsPluginExportTime.

Kafka registers the throttle, export and error sensors once per client instance (tagged
``client_instance_id``): three sensors and eight metrics per client. At a million instances that is
the whole memory budget again, and a Prometheus series per client, so quotaplane keeps them at the
fleet level (untagged). The per-instance picture comes from the telemetry itself.

**Beyond Kafka: pushes by client software.** Kafka's group has no breakdown by client, so an operator cannot
see which client library's pushes fail (a librdkafka release sending a compression the broker refuses, say).
quotaplane adds two counters tagged with the software the client announced in ApiVersions (KIP-511; Kafka's
``unknown`` when it did not): ``push-count`` (pushes accepted) and ``push-error-count`` (pushes refused, also
tagged ``error``: the Kafka error name answered). Counters only (a ``CumulativeCount``, no windowed rate:
Prometheus' ``rate()`` gives it); at most :data:`MAX_SOFTWARE` distinct name/version pairs per manager, the
others counted under ``(other)``, which no valid software name can be (KIP-511's names are
``[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?``), so a client inventing versions cannot grow the registry.
"""

from __future__ import annotations

from collections.abc import Callable

from ..metrics import Avg, CumulativeCount, Max, Metrics, Rate, Sensor, WindowedCount

__all__ = ["GROUP_NAME", "MAX_SOFTWARE", "OTHER_SOFTWARE", "UNKNOWN_SOFTWARE", "ClientMetricsStats"]

GROUP_NAME = "client-metrics"
INSTANCE_COUNT = "instance-count"
UNKNOWN_SUBSCRIPTION_REQUEST = "unknown-subscription-request"
THROTTLE = "throttle"
PLUGIN_EXPORT = "plugin-export"
PLUGIN_ERROR = "plugin-error"
PLUGIN_EXPORT_TIME = "plugin-export-time"
PUSH = "push"
PUSH_ERROR = "push-error"
SOFTWARE_NAME_TAG = "client_software_name"
SOFTWARE_VERSION_TAG = "client_software_version"
ERROR_TAG = "error"
#: Kafka's ``ClientInformation.UNKNOWN_NAME_OR_VERSION``: a client that did not announce its software
UNKNOWN_SOFTWARE = "unknown"
#: Distinct (software name, version) pairs counted apart per manager; the rest share ``OTHER_SOFTWARE``
MAX_SOFTWARE = 100
OTHER_SOFTWARE = "(other)"


class ClientMetricsStats:
    """The sensors above, registered in ``metrics``; ``unregister()`` removes them all."""

    def __init__(self, metrics: Metrics, instance_count: Callable[[], int], now_ms: int) -> None:
        self._metrics = metrics
        self._instance_count_name = metrics.metric_name(
            INSTANCE_COUNT, GROUP_NAME, "The current number of client metrics instances being managed by the broker"
        )
        metrics.add_metric(self._instance_count_name, lambda config, now: float(instance_count()))
        self.unknown_subscription_request = self._meter(UNKNOWN_SUBSCRIPTION_REQUEST, now_ms)
        self.throttle = self._meter(THROTTLE, now_ms)
        self.plugin_export = self._meter(PLUGIN_EXPORT, now_ms)
        self.plugin_export.add(
            metrics.metric_name(
                f"{PLUGIN_EXPORT_TIME}-avg",
                GROUP_NAME,
                "Average time broker spent in invoking plugin exportMetrics call",
            ),
            Avg(),
        )
        self.plugin_export.add(
            metrics.metric_name(
                f"{PLUGIN_EXPORT_TIME}-max",
                GROUP_NAME,
                "Maximum time broker spent in invoking plugin exportMetrics call",
            ),
            Max(),
        )
        self.plugin_error = self._meter(PLUGIN_ERROR, now_ms)
        # (name, version) -> the pair its pushes are counted under; (name, version, error or None) -> its counter
        # (the (other) counter under every key past the bound)
        self._software: dict[tuple[str, str], tuple[str, str]] = {}
        self._push_sensors: dict[tuple[str, str, str | None], Sensor] = {}

    def _meter(self, name: str, now_ms: int) -> Sensor:
        """Kafka's ``Meter(WindowedCount)``: a per-second rate of events and their running total."""
        sensor = self._metrics.sensor(f"{GROUP_NAME}:{name}", now_ms=now_ms)
        sensor.add(
            self._metrics.metric_name(f"{name}-rate", GROUP_NAME, f"The number of {name} per second"),
            Rate(WindowedCount()),
        )
        sensor.add(
            self._metrics.metric_name(f"{name}-count", GROUP_NAME, f"The total number of {name}"),
            CumulativeCount(),
        )
        return sensor

    def record_unknown_subscription(self, now_ms: int) -> None:
        self.unknown_subscription_request.record(1.0, now_ms)

    def record_throttle(self, now_ms: int) -> None:
        self.throttle.record(1.0, now_ms)

    def record_plugin_export(self, export_time_ms: float, now_ms: int) -> None:
        self.plugin_export.record(export_time_ms, now_ms)

    def record_plugin_error(self, now_ms: int) -> None:
        self.plugin_error.record(1.0, now_ms)

    def record_push(
        self, software_name: str | None, software_version: str | None, error: str | None, now_ms: int
    ) -> None:
        """Count one push of a client announcing that software: accepted (``error`` None) or refused with the Kafka
        error named ``error``."""
        key = (software_name or UNKNOWN_SOFTWARE, software_version or UNKNOWN_SOFTWARE, error)
        sensor = self._push_sensors.get(key)
        if sensor is None:
            sensor = self._push_sensors[key] = self._push_sensor_for(key, now_ms)
        sensor.record(1.0, now_ms)

    def _push_sensor_for(self, key: tuple[str, str, str | None], now_ms: int) -> Sensor:
        """The counter of a (software, error) seen for the first time: its own, or the ``(other)`` one past the
        bound on distinct software."""
        announced = key[:2]
        software = self._software.get(announced)
        if software is None:
            software = announced if len(self._software) < MAX_SOFTWARE else (OTHER_SOFTWARE, OTHER_SOFTWARE)
            self._software[announced] = software
        counted = (*software, key[2])
        sensor = self._push_sensors.get(counted)
        if sensor is None:
            sensor = self._push_sensors[counted] = self._push_sensor(software, key[2], now_ms)
        return sensor

    def _push_sensor(self, software: tuple[str, str], error: str | None, now_ms: int) -> Sensor:
        tags = {SOFTWARE_NAME_TAG: software[0], SOFTWARE_VERSION_TAG: software[1]}
        if error is None:
            name, description = f"{PUSH}-count", "The total number of pushes accepted from clients of this software"
        else:
            tags[ERROR_TAG] = error
            name = f"{PUSH_ERROR}-count"
            description = "The total number of pushes refused, with this error, from clients of this software"
        sensor = self._metrics.sensor(f"{GROUP_NAME}:{name}:{sorted(tags.items())!r}", now_ms=now_ms)
        sensor.add(self._metrics.metric_name(name, GROUP_NAME, description, tags), CumulativeCount())
        return sensor

    def value(self, name: str, now_ms: int) -> float:
        """The value at ``now_ms`` of one of this group's metrics by name, e.g. ``"throttle-count"``."""
        for metric_name, metric in self._metrics.metrics.items():
            if metric_name.group == GROUP_NAME and metric_name.name == name:
                return metric.measurable_value(now_ms)
        raise KeyError(name)

    def unregister(self) -> None:
        self._metrics.remove_metric(self._instance_count_name)
        for sensor in (self.unknown_subscription_request, self.throttle, self.plugin_export, self.plugin_error):
            self._metrics.remove_sensor(sensor.name)
        for sensor in {id(sensor): sensor for sensor in self._push_sensors.values()}.values():
            self._metrics.remove_sensor(sensor.name)
        self._push_sensors.clear()
