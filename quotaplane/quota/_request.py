"""ClientRequestQuotaManager: the share of request-handler and network thread time a client may use.

Kafka's ``request_percentage`` quota: thread time is recorded as a percentage of one thread over
the window (1 s of thread time in 1 s = 100 %), checked like a byte rate, and the throttle is capped
at one quota window so an idle-then-busy client never waits minutes.
"""

from __future__ import annotations

from ..metrics import Metrics, Rate, Sensor
from ._callback import ClientQuotaCallback
from ._client import ClientQuotaManager, ClientQuotaManagerConfig, _check_names
from ._types import QuotaType
from .throttle import throttle_time_for

__all__ = ["NANOS_TO_PERCENTAGE_PER_SECOND", "ClientRequestQuotaManager", "nanos_to_percentage"]

#: 100 % per second of thread time, per nanosecond.
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1_000_000_000

_EXEMPT_SENSOR_NAME = f"exempt-{QuotaType.REQUEST}"


def nanos_to_percentage(nanos: int) -> float:
    """Thread time in nanoseconds as a percentage of one second of one thread.

    >>> nanos_to_percentage(250_000_000)
    25.0
    """
    return nanos * NANOS_TO_PERCENTAGE_PER_SECOND


def _check_nanos(nanos: object) -> int:
    if isinstance(nanos, bool) or not isinstance(nanos, int) or nanos < 0:
        raise ValueError(f"thread time must be a non-negative integer of nanoseconds, got {nanos!r}")
    return nanos


class ClientRequestQuotaManager(ClientQuotaManager):
    """``request_percentage`` quotas; requests from exempt principals feed one shared exempt sensor."""

    quota_metric_name = "request-time"
    quota_metric_description = "Tracking request-time per user/client-id"

    def __init__(
        self,
        config: ClientQuotaManagerConfig,
        *,
        metrics: Metrics | None = None,
        quota_callback: ClientQuotaCallback | None = None,
        now_ms: int = 0,
    ) -> None:
        super().__init__(config, QuotaType.REQUEST, metrics=metrics, quota_callback=quota_callback)
        self.max_throttle_time_ms = config.quota_window_size_seconds * 1000
        # one sensor for all exempt clients, so it never expires
        self.exempt_sensor: Sensor = self.metrics.sensor(_EXEMPT_SENSOR_NAME, now_ms=now_ms)
        self.exempt_sensor.add(
            self.metrics.metric_name(
                "exempt-request-time", str(QuotaType.REQUEST), "Tracking exempt-request-time utilization percentage"
            ),
            Rate(),
        )

    def throttle_time_for(self, value: float, bound: float, window_size_ms: int) -> int:
        """Kafka's ``boundedThrottleTime``: never more than one quota window."""
        return min(throttle_time_for(value, bound, window_size_ms), self.max_throttle_time_ms)

    def maybe_record_request_time(
        self, user: str, client_id: str, *, request_thread_time_nanos: int, now_ms: int
    ) -> int:
        """Record a request's handler-thread time and return its throttle (0 if no quota is set)."""
        _check_names(user, client_id)
        percentage = nanos_to_percentage(_check_nanos(request_thread_time_nanos))
        if not self.quotas_enabled():
            return 0
        return self.record_and_get_throttle_time_ms(user, client_id, percentage, now_ms)

    def record_network_thread_time(self, user: str, client_id: str, *, time_nanos: int, now_ms: int) -> None:
        """Record the network-thread time of a response once it is sent; it is never throttled alone."""
        _check_names(user, client_id)
        percentage = nanos_to_percentage(_check_nanos(time_nanos))
        if self.quotas_enabled():
            self.record_no_throttle(user, client_id, percentage, now_ms)

    def maybe_record_exempt(self, *, time_nanos: int, now_ms: int) -> None:
        """Record thread time of an exempt request (e.g. inter-broker) in the shared exempt sensor."""
        percentage = nanos_to_percentage(_check_nanos(time_nanos))
        if self.quotas_enabled():
            self.exempt_sensor.record(percentage, now_ms)
