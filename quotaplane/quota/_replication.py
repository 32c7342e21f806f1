"""ReplicationQuotaManager: throttled replication byte rates (leader, follower, alter-log-dirs).

Kafka throttles replication only for the replicas listed in a topic's
``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``
(``partition:broker`` pairs, or ``*`` for all), at the broker's ``*.replication.throttled.rate``.
The rate is a ``SimpleRate`` (true elapsed time, at least one window), checked without recording.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..metrics import LONG_MAX_VALUE, MetricConfig, Metrics, Quota, QuotaViolationError, Sensor, SimpleRate
from ._types import QuotaType

__all__ = [
    "ALL_REPLICAS",
    "ReplicationQuotaManager",
    "ReplicationQuotaManagerConfig",
    "ThrottledReplicas",
    "parse_throttled_replicas",
]

REPLICATION_QUOTA_TYPES = frozenset(
    {QuotaType.LEADER_REPLICATION, QuotaType.FOLLOWER_REPLICATION, QuotaType.ALTER_LOG_DIRS_REPLICATION}
)

_REPLICA = re.compile(r"([0-9]+):([0-9]+)")

#: What Java's ``String.trim`` strips: every char up to U+0020 (not Python's Unicode whitespace).
_JAVA_TRIM = "".join(map(chr, range(0x21)))


def _java_list_string(value: str) -> str:
    """``Arrays.asList(value.split(",")).toString()``: Java's split drops trailing empty strings."""
    parts = value.split(",")
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return "[" + ", ".join(parts) + "]"


@dataclass(frozen=True, slots=True)
class ThrottledReplicas:
    """A topic's throttled replicas: every replica, or a set of ``(partition, broker)`` pairs."""

    all_replicas: bool = False
    replicas: frozenset[tuple[int, int]] = frozenset()

    def partitions_on(self, broker_id: int) -> frozenset[int] | None:
        """Partitions throttled on ``broker_id``; None means all of them."""
        if self.all_replicas:
            return None
        return frozenset(p for p, b in self.replicas if b == broker_id)

    def __str__(self) -> str:
        if self.all_replicas:
            return "*"
        return ",".join(f"{p}:{b}" for p, b in sorted(self.replicas))


ALL_REPLICAS = ThrottledReplicas(all_replicas=True)


def parse_throttled_replicas(value: str, *, name: str = "throttled.replicas") -> ThrottledReplicas:
    """Parse Kafka's throttled-replica list: ``"*"``, ``""`` or ``"0:101,1:102"``.

    A malformed list raises ValueError with Kafka's message.

    >>> parse_throttled_replicas("0:101, 1:102").partitions_on(101)
    frozenset({0})
    """
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    value = value.strip(_JAVA_TRIM)  # Kafka trims the whole value, then each element
    elements = [element.strip(_JAVA_TRIM) for element in value.split(",")]
    if "".join(elements) == "*":
        return ALL_REPLICAS
    pairs = set()
    for element in elements:
        if element == "":
            continue
        match = _REPLICA.fullmatch(element)
        if match is None:
            raise ValueError(
                f"Invalid value {_java_list_string(value)} for configuration {name}: {name} must be the literal '*' "
                "or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
            )
        pairs.add((int(match.group(1)), int(match.group(2))))
    return ThrottledReplicas(replicas=frozenset(pairs))


@dataclass(frozen=True, slots=True)
class ReplicationQuotaManagerConfig:
    """Sampling of replication quotas (``replication.quota.window.num`` / ``.size.seconds``)."""

    num_quota_samples: int = 11
    quota_window_size_seconds: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.num_quota_samples, int) or self.num_quota_samples < 1:
            raise ValueError(f"num_quota_samples must be an integer ≥ 1, got {self.num_quota_samples!r}")
        if not isinstance(self.quota_window_size_seconds, int) or self.quota_window_size_seconds < 1:
            raise ValueError(
                f"quota_window_size_seconds must be an integer ≥ 1, got {self.quota_window_size_seconds!r}"
            )


class ReplicationQuotaManager:
    """One replication throttle (leader, follower or alter-log-dirs) on one broker.

    ``record`` adds bytes without checking; ``is_quota_exceeded`` checks without recording: a
    replica fetcher asks before fetching throttled partitions and records what it fetched.
    """

    def __init__(
        self,
        config: ReplicationQuotaManagerConfig,
        replication_type: QuotaType | str,
        *,
        metrics: Metrics | None = None,
    ) -> None:
        replication_type = QuotaType.parse(replication_type)
        if replication_type not in REPLICATION_QUOTA_TYPES:
            raise ValueError(f"{replication_type} is not a replication quota type")
        self.config = config
        self.replication_type = replication_type
        self.metrics = metrics if metrics is not None else Metrics()
        self._quota: Quota | None = None
        self._throttled: dict[str, frozenset[int] | None] = {}
        self._rate_metric_name = self.metrics.metric_name(
            "byte-rate", str(replication_type), f"Tracking byte-rate for {replication_type}"
        )

    def update_quota(self, quota: Quota | float | None) -> None:
        """Set the throttled rate in bytes/s (``Quota``, a number, or None for unthrottled)."""
        if quota is not None and not isinstance(quota, Quota):
            if isinstance(quota, bool) or not isinstance(quota, int | float) or math.isnan(quota) or quota < 0:
                raise ValueError(f"a replication throttled rate must be a number ≥ 0, got {quota!r}")
            quota = Quota.upper_bound(quota)
        self._quota = quota
        metric = self.metrics.metric(self._rate_metric_name)
        if metric is not None:
            metric.config = self._quota_metric_config()

    def is_quota_exceeded(self, now_ms: int) -> bool:
        try:
            self._sensor(now_ms).check_quotas(now_ms)
        except QuotaViolationError:
            return True
        return False

    def record(self, value: float, now_ms: int) -> None:
        """Add replicated bytes to the rate, whether or not the quota is exceeded."""
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
            raise ValueError(f"replicated bytes must be a finite number ≥ 0, got {value!r}")
        self._sensor(now_ms).record(float(value), now_ms, check_quotas=False)

    def is_throttled(self, topic: str, partition: int) -> bool:
        partitions = self._throttled.get(topic, frozenset())
        return partitions is None or partition in partitions

    def mark_throttled(self, topic: str, partitions: Iterable[int] | None = None) -> None:
        """Throttle these partitions of ``topic`` (None: all), replacing what was set before."""
        self._throttled[topic] = None if partitions is None else frozenset(partitions)

    def mark_throttled_replicas(self, topic: str, replicas: ThrottledReplicas, broker_id: int) -> None:
        """Apply a topic's throttled-replica config as seen by ``broker_id``; an empty list unthrottles."""
        if not replicas.all_replicas and not replicas.replicas:
            self.remove_throttle(topic)
        else:
            self.mark_throttled(topic, replicas.partitions_on(broker_id))

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    @property
    def upper_bound(self) -> int:
        """The throttled rate, or Long.MAX_VALUE when unthrottled."""
        return LONG_MAX_VALUE if self._quota is None else int(self._quota.bound)

    def _quota_metric_config(self) -> MetricConfig:
        return MetricConfig(
            samples=self.config.num_quota_samples,
            time_window_ms=self.config.quota_window_size_seconds * 1000,
            quota=self._quota,
        )

    def _sensor(self, now_ms: int) -> Sensor:
        sensor = self.metrics.get_sensor(str(self.replication_type))
        if sensor is None:
            sensor = self.metrics.sensor(
                str(self.replication_type), now_ms=now_ms, inactive_sensor_expiration_time_seconds=3600
            )
            sensor.add(self._rate_metric_name, SimpleRate(), self._quota_metric_config())
        return sensor
