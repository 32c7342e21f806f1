"""KIP-714 broker-side metrics (Kafka's ``ClientMetricsManager.ClientMetricsStats``).

Group ``client-metrics``: ``instance-count``; ``unknown-subscription-request-rate/-count``;
``throttle-rate/-count``; ``plugin-export-rate/-count`` with ``plugin-export-time-avg/-max``;
``plugin-error-rate/-count``. KIP-714 calls them ClientMetricsInstanceCount,
ClientMetricsUnknownSubscriptionRequest, ClientMetricsThrottle, ClientMetricsPluginExport,
ClientMetricsPluginError and ClientMetricsPluginExportTime.

Kafka registers the throttle, export and error sensors once per client instance (tagged
``client_instance_id``): three sensors and eight metrics per client. At a million instances that is
the whole memory budget again, and a Prometheus series per client, so quotaplane keeps them at the
fleet level (untagged). The per-instance picture comes from the telemetry itself.
"""

from __future__ import annotations

from collections.abc import Callable

from ..metrics import Avg, CumulativeCount, Max, Metrics, Rate, Sensor, WindowedCount

__all__ = ["GROUP_NAME", "ClientMetricsStats"]

GROUP_NAME = "client-metrics"
INSTANCE_COUNT = "instance-count"
UNKNOWN_SUBSCRIPTION_REQUEST = "unknown-subscription-request"
THROTTLE = "throttle"
PLUGIN_EXPORT = "plugin-export"
PLUGIN_ERROR = "plugin-error"
PLUGIN_EXPORT_TIME = "plugin-export-time"


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
