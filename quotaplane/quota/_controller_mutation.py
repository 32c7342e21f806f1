"""ControllerMutationQuotaManager: a token bucket on topic and partition mutations per client.

Kafka's ``controller_mutation_rate``. Unlike byte rates it must not let a burst through and then
hold the client for minutes, so it is a token bucket (burst ``samples * window * rate``) and comes in
two flavours chosen by request version:

1. **strict** (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+): a request is rejected with
   THROTTLING_QUOTA_EXCEEDED, unrecorded, once the bucket is below zero; while it is at or above zero
   any number of mutations is accepted, even one that drives it far below zero.
2. **permissive** (older versions, auto topic creation): every mutation is accepted and recorded;
   the client is throttled for the deficit afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ..errors import ThrottlingQuotaExceededError
from ..metrics import Metrics, QuotaViolationError, Rate, Sensor, TokenBucket
from ._callback import ClientQuotaCallback
from ._client import ClientQuotaManager, ClientQuotaManagerConfig, _check_names, _check_value
from ._types import QuotaType
from .throttle import token_bucket_throttle_time

__all__ = [
    "STRICT_SINCE_VERSION",
    "UNBOUNDED_CONTROLLER_MUTATION_QUOTA",
    "ControllerMutationQuota",
    "ControllerMutationQuotaManager",
    "PermissiveControllerMutationQuota",
    "StrictControllerMutationQuota",
    "ThrottlingQuotaExceededError",
]

#: The first version of each mutating API whose quota is strict (by Kafka API key name).
STRICT_SINCE_VERSION: Mapping[str, int] = {"CreateTopics": 6, "DeleteTopics": 5, "CreatePartitions": 3}


class ControllerMutationQuota(Protocol):
    """The quota of one client for the lifetime of one request."""

    def is_exceeded(self) -> bool: ...

    def record(self, permits: float, now_ms: int) -> None: ...

    def throttle_time(self, now_ms: int) -> int: ...


class _UnboundedControllerMutationQuota:
    """The quota when none is configured: never exceeded, never throttles."""

    __slots__ = ()

    def is_exceeded(self) -> bool:
        return False

    def record(self, permits: float, now_ms: int) -> None:
        _check_value(permits)

    def throttle_time(self, now_ms: int) -> int:
        return 0


UNBOUNDED_CONTROLLER_MUTATION_QUOTA = _UnboundedControllerMutationQuota()


class _RecordedThrottle:
    """Throttle time that decays with the time elapsed since it was computed.

    A request may wait in purgatory long after its mutations were recorded; it is throttled for what
    is left, ``max(0, last_throttle - (now - recorded_at))``.
    """

    __slots__ = ("_quota_sensor", "last_recorded_time_ms", "last_throttle_time_ms")

    def __init__(self, quota_sensor: Sensor) -> None:
        self._quota_sensor = quota_sensor
        self.last_throttle_time_ms = 0
        self.last_recorded_time_ms = 0

    def _update_throttle_time(self, e: QuotaViolationError, now_ms: int) -> None:
        self.last_throttle_time_ms = token_bucket_throttle_time(e)
        self.last_recorded_time_ms = now_ms

    def throttle_time(self, now_ms: int) -> int:
        return max(0, self.last_throttle_time_ms - (now_ms - self.last_recorded_time_ms))


class StrictControllerMutationQuota(_RecordedThrottle):
    """Rejects (without recording) once the bucket is below zero; accepts anything while it is not."""

    __slots__ = ()

    def is_exceeded(self) -> bool:
        return self.last_throttle_time_ms > 0

    def record(self, permits: float, now_ms: int) -> None:
        _check_value(permits)
        try:
            self._quota_sensor.check_quotas(now_ms)
        except QuotaViolationError as e:
            self._update_throttle_time(e, now_ms)
            raise ThrottlingQuotaExceededError(
                f"The throttling quota has been exceeded; retry after {self.last_throttle_time_ms} ms.",
                self.last_throttle_time_ms,
            ) from None
        self._quota_sensor.record(permits, now_ms, check_quotas=False)


class PermissiveControllerMutationQuota(_RecordedThrottle):
    """Accepts and records every mutation; throttles for the deficit it leaves."""

    __slots__ = ()

    def is_exceeded(self) -> bool:
        return False

    def record(self, permits: float, now_ms: int) -> None:
        _check_value(permits)
        try:
            self._quota_sensor.record(permits, now_ms)
        except QuotaViolationError as e:
            self._update_throttle_time(e, now_ms)


class ControllerMutationQuotaManager(ClientQuotaManager):
    """``controller_mutation_rate`` quotas: a ``tokens`` TokenBucket plus an unbounded ``mutation-rate``.

    The manager's own ``record_and_get_throttle_time_ms`` is strict: check first, record only if the
    bucket is not below zero, and return the time until it refills to zero otherwise.
    """

    quota_metric_name = "tokens"
    quota_metric_description = "Tracking remaining tokens in the token bucket per user/client-id"
    supports_quota_value_metric = False

    def __init__(
        self,
        config: ClientQuotaManagerConfig,
        *,
        metrics: Metrics | None = None,
        quota_callback: ClientQuotaCallback | None = None,
    ) -> None:
        super().__init__(config, QuotaType.CONTROLLER_MUTATION, metrics=metrics, quota_callback=quota_callback)

    def register_quota_metrics(self, sensor: Sensor, metric_tags: Mapping[str, str]) -> None:
        sensor.add(
            self.metrics.metric_name(
                "mutation-rate", str(self.quota_type), "Tracking mutation-rate per user/client-id", metric_tags
            ),
            Rate(),
        )
        sensor.add(
            self.client_quota_metric_name(metric_tags),
            TokenBucket(),
            self.quota_metric_config(self._quota_limit(metric_tags)),
        )

    def throttle_time(self, e: QuotaViolationError, now_ms: int) -> int:
        return token_bucket_throttle_time(e)

    def _record(self, sensors, value: float, now_ms: int) -> int:
        quota_sensor = sensors.quota_sensor
        try:
            quota_sensor.check_quotas(now_ms)
        except QuotaViolationError as e:
            return self.throttle_time(e, now_ms)
        quota_sensor.record(value, now_ms, check_quotas=False)
        return 0

    def new_strict_quota_for(self, user: str, client_id: str, now_ms: int) -> ControllerMutationQuota:
        _check_names(user, client_id)
        if not self.quotas_enabled():
            return UNBOUNDED_CONTROLLER_MUTATION_QUOTA
        return StrictControllerMutationQuota(self.get_or_create_quota_sensors(user, client_id, now_ms).quota_sensor)

    def new_permissive_quota_for(self, user: str, client_id: str, now_ms: int) -> ControllerMutationQuota:
        _check_names(user, client_id)
        if not self.quotas_enabled():
            return UNBOUNDED_CONTROLLER_MUTATION_QUOTA
        return PermissiveControllerMutationQuota(self.get_or_create_quota_sensors(user, client_id, now_ms).quota_sensor)

    def new_quota_for(
        self, user: str, client_id: str, *, api_version: int, strict_since_version: int, now_ms: int
    ) -> ControllerMutationQuota:
        """Strict at ``api_version >= strict_since_version`` (see ``STRICT_SINCE_VERSION``), else permissive."""
        if api_version >= strict_since_version:
            return self.new_strict_quota_for(user, client_id, now_ms)
        return self.new_permissive_quota_for(user, client_id, now_ms)
