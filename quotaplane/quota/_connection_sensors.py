"""The ``socket-server-metrics`` sensors of Kafka's ``ConnectionQuotas``: accept rates and accept throttle times.

Kafka measures connection creation with rate sensors that carry the quota (broker
``Connection-Accept-Rate``, ``Connection-Accept-Rate-<listener>``, ``Connection-Accept-Rate-<ip>``) and
records the delays it imposes on ``ConnectionRateThrottleTime-<listener>`` sensors. Their names, tags,
windows and the throttle time of a violated one are Kafka's, in one place, so the manager only decides
*which* sensor to record on and what an over-quota recording means for the connection.
"""

from __future__ import annotations

import math

from ..metrics import Avg, MetricConfig, MetricName, Metrics, Quota, QuotaViolationError, Rate, Sensor
from .throttle import bounded_throttle_time

__all__ = [
    "BROKER_CONNECTION_RATE_METRIC_NAME",
    "CONNECTION_RATE_METRIC_NAME",
    "CONNECTION_RATE_SENSOR_NAME",
    "IP_METRIC_TAG",
    "IP_SENSOR_EXPIRATION_SECONDS",
    "LISTENER_METRIC_TAG",
    "SOCKET_SERVER_METRICS_GROUP",
    "ConnectionSensors",
    "ListenerConnectionQuota",
]

#: Kafka's ``SocketServer.MetricsGroup``.
SOCKET_SERVER_METRICS_GROUP = "socket-server-metrics"
#: Kafka's ``ConnectionQuotaEntity`` names: sensors are this, ``-<listener>`` or ``-<ip>``.
CONNECTION_RATE_SENSOR_NAME = "Connection-Accept-Rate"
CONNECTION_RATE_METRIC_NAME = "connection-accept-rate"
BROKER_CONNECTION_RATE_METRIC_NAME = "broker-" + CONNECTION_RATE_METRIC_NAME
LISTENER_METRIC_TAG = "listener"
IP_METRIC_TAG = "ip"
LISTENER_THROTTLE_PREFIX = ""
IP_THROTTLE_PREFIX = "ip-"
_RATE_DESCRIPTION = "Tracking rate of accepting new connections (per second)"
_THROTTLE_DESCRIPTION = "Tracking average throttle-time, out of non-zero throttle times, per listener"
#: An IP's rate sensor is dropped after an hour without connections; broker and listener ones never.
IP_SENSOR_EXPIRATION_SECONDS = 3600


class ListenerConnectionQuota:
    """One listener's limits, count and sensors (Kafka's ``ListenerConnectionQuota``)."""

    __slots__ = (
        "count",
        "ip_throttle_sensor",
        "max_connection_creation_rate",
        "max_connections",
        "name",
        "rate_metric_name",
        "rate_sensor",
        "throttle_sensor",
    )

    def __init__(
        self,
        name: str,
        max_connections: int,
        max_connection_creation_rate: int,
        *,
        rate_metric_name: MetricName,
        rate_sensor: Sensor,
        throttle_sensor: Sensor,
        ip_throttle_sensor: Sensor,
    ) -> None:
        self.name = name
        self.max_connections = max_connections
        self.max_connection_creation_rate = max_connection_creation_rate
        self.count = 0
        self.rate_metric_name = rate_metric_name
        self.rate_sensor = rate_sensor
        self.throttle_sensor = throttle_sensor
        self.ip_throttle_sensor = ip_throttle_sensor


class ConnectionSensors:
    """Creates, re-quotas and records on the connection sensors of one ``Metrics`` registry.

    Rate sensors sample ``num_quota_samples`` windows of ``quota_window_ms`` (Kafka's
    ``quota.window.num`` / ``quota.window.size.seconds``); a violation's delay is capped at
    ``max_throttle_ms`` (Kafka's ``maxThrottleTimeMs``, one window).
    """

    def __init__(self, metrics: Metrics, *, num_quota_samples: int, quota_window_ms: int) -> None:
        self.metrics = metrics
        self.num_quota_samples = num_quota_samples
        self.quota_window_ms = quota_window_ms
        self.max_throttle_ms = quota_window_ms

    # --- creation ------------------------------------------------------------------------------
    def rate_config(self, quota_limit: int) -> MetricConfig:
        return MetricConfig(
            samples=self.num_quota_samples, time_window_ms=self.quota_window_ms, quota=Quota.upper_bound(quota_limit)
        )

    def rate_sensor(
        self, sensor_name: str, metric_name: MetricName, quota_limit: int, now_ms: int, *, expiration_seconds: float
    ) -> Sensor:
        """The rate sensor ``sensor_name`` (created with ``quota_limit`` if absent)."""
        sensor = self.metrics.get_sensor(sensor_name)
        if sensor is None:
            sensor = self.metrics.sensor(
                sensor_name,
                self.rate_config(quota_limit),
                now_ms=now_ms,
                inactive_sensor_expiration_time_seconds=expiration_seconds,
            )
            sensor.add(metric_name, Rate())
        return sensor

    def broker_rate_sensor(self, quota_limit: int, now_ms: int) -> tuple[Sensor, MetricName]:
        """Kafka's broker-wide ``Connection-Accept-Rate`` (never expires)."""
        metric_name = self.metrics.metric_name(
            BROKER_CONNECTION_RATE_METRIC_NAME, SOCKET_SERVER_METRICS_GROUP, _RATE_DESCRIPTION
        )
        sensor = self.rate_sensor(
            CONNECTION_RATE_SENSOR_NAME, metric_name, quota_limit, now_ms, expiration_seconds=math.inf
        )
        return sensor, metric_name

    def ip_rate_sensor(self, host: str, quota_limit: int, now_ms: int) -> tuple[Sensor, MetricName]:
        """``Connection-Accept-Rate-<ip>`` (``host`` in Java's host-address form), dropped after an idle hour."""
        metric_name = self.metrics.metric_name(
            CONNECTION_RATE_METRIC_NAME, SOCKET_SERVER_METRICS_GROUP, _RATE_DESCRIPTION, {IP_METRIC_TAG: host}
        )
        sensor = self.rate_sensor(
            f"{CONNECTION_RATE_SENSOR_NAME}-{host}",
            metric_name,
            quota_limit,
            now_ms,
            expiration_seconds=IP_SENSOR_EXPIRATION_SECONDS,
        )
        return sensor, metric_name

    def listener(
        self, name: str, max_connections: int, max_connection_creation_rate: int, now_ms: int
    ) -> ListenerConnectionQuota:
        """A new listener's state with its rate and throttle-time sensors (Kafka's ``addListener``)."""
        rate_metric_name = self.metrics.metric_name(
            CONNECTION_RATE_METRIC_NAME, SOCKET_SERVER_METRICS_GROUP, _RATE_DESCRIPTION, {LISTENER_METRIC_TAG: name}
        )
        return ListenerConnectionQuota(
            name,
            max_connections,
            max_connection_creation_rate,
            rate_metric_name=rate_metric_name,
            rate_sensor=self.rate_sensor(
                f"{CONNECTION_RATE_SENSOR_NAME}-{name}",
                rate_metric_name,
                max_connection_creation_rate,
                now_ms,
                expiration_seconds=math.inf,
            ),
            throttle_sensor=self._throttle_sensor(LISTENER_THROTTLE_PREFIX, name, now_ms),
            ip_throttle_sensor=self._throttle_sensor(IP_THROTTLE_PREFIX, name, now_ms),
        )

    def remove_listener(self, state: ListenerConnectionQuota) -> None:
        for sensor in (state.rate_sensor, state.throttle_sensor, state.ip_throttle_sensor):
            self.metrics.remove_sensor(sensor.name)

    def _throttle_sensor(self, prefix: str, listener: str, now_ms: int) -> Sensor:
        sensor = self.metrics.sensor(f"{prefix}ConnectionRateThrottleTime-{listener}", now_ms=now_ms)
        sensor.add(
            self.metrics.metric_name(
                f"{prefix}connection-accept-throttle-time",
                SOCKET_SERVER_METRICS_GROUP,
                _THROTTLE_DESCRIPTION,
                {LISTENER_METRIC_TAG: listener},
            ),
            Avg(),
        )
        return sensor

    # --- quotas and recording ------------------------------------------------------------------
    def update_rate_quota(self, metric_name: MetricName, quota_limit: int) -> None:
        """Replace the quota of a rate metric in place (its samples stay); nothing if it does not exist."""
        metric = self.metrics.metric(metric_name)
        if metric is not None:
            metric.config = self.rate_config(quota_limit)

    def record_and_get_throttle_time(self, sensor: Sensor, now_ms: int) -> int:
        """Record one connection; the delay Kafka imposes if that violates the sensor's quota, else 0."""
        try:
            sensor.record(1.0, now_ms)
        except QuotaViolationError as e:
            if e.bound <= 0:
                # a zero quota: Java's (v - 0) / 0 is +Infinity, Math.round gives Long.MAX_VALUE, then the cap
                return self.max_throttle_ms
            return bounded_throttle_time(e, self.max_throttle_ms, now_ms)
        return 0
