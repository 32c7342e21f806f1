"""ClientQuotaManager: produce and fetch byte-rate quotas per user / client id (Kafka's manager).

Each call names the user (principal name), the client id, the value and ``now_ms``; the manager
resolves the sensor the request shares (see ``_callback``), records, and answers the throttle time.
It owns no delay queue: the caller mutes the channel for the time returned.
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from types import ModuleType

from ..metrics import (
    LONG_MAX_VALUE,
    Avg,
    KafkaMetric,
    MetricConfig,
    MetricName,
    Metrics,
    Quota,
    QuotaViolationError,
    Rate,
    Sensor,
    Value,
    WindowedSum,
)
from ._callback import (
    CLIENT_ID_QUOTA_ENABLED,
    CLIENT_ID_TAG,
    CUSTOM_QUOTAS,
    NO_QUOTAS,
    USER_CLIENT_ID_QUOTA_ENABLED,
    USER_QUOTA_ENABLED,
    USER_TAG,
    ClientQuotaCallback,
    DefaultQuotaCallback,
)
from ._compiled import record_compiled
from ._types import DEFAULT, ClientQuotaEntity, QuotaType, sanitize
from .throttle import throttle_time_for, violated_rate_window_size

__all__ = [
    "INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS",
    "ClientQuotaManager",
    "ClientQuotaManagerConfig",
    "ClientSensors",
    "UsageItem",
]

#: Client sensors are purged after an hour without recordings.
INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS = 3600

#: Java's Double.MAX_VALUE: "no limit" for ``max_value_in_quota_window``.
DOUBLE_MAX_VALUE = sys.float_info.max

#: One usage item of a batch: (user, client id, value) or (user, client id, value, now_ms).
UsageItem = tuple[str, str, float] | tuple[str, str, float, int]

#: Distinct quota bounds whose metric config is shared (see ``quota_metric_config``).
_MAX_SHARED_CONFIGS = 4096

_SINGLE_LEVEL = (NO_QUOTAS, CLIENT_ID_QUOTA_ENABLED, USER_QUOTA_ENABLED, USER_CLIENT_ID_QUOTA_ENABLED)


@dataclass(frozen=True, slots=True)
class ClientQuotaManagerConfig:
    """Sampling of client quotas (Kafka's ``quota.window.num`` and ``quota.window.size.seconds``).

    ``client_quota_value_metric_enable`` (KIP-786) adds a ``quota-value`` metric per sensor holding
    the bound enforced; when false no such sensor exists at all. Off by default here as in Kafka's
    class; quotaplane's broker config (``QuotaConfig``, ``client.quota.value.metric.enable``) turns it on
    by default, so a shard's managers have it unless an operator turns it off.
    ``ClientQuotaManager.set_quota_value_metric_enabled`` switches it at runtime.

    >>> ClientQuotaManagerConfig(num_quota_samples=11, quota_window_size_seconds=1).quota_window_ms
    1000
    """

    num_quota_samples: int = 11
    quota_window_size_seconds: int = 1
    client_quota_value_metric_enable: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.num_quota_samples, int) or self.num_quota_samples < 1:
            raise ValueError(f"num_quota_samples must be an integer ≥ 1, got {self.num_quota_samples!r}")
        if not isinstance(self.quota_window_size_seconds, int) or self.quota_window_size_seconds < 1:
            raise ValueError(
                f"quota_window_size_seconds must be an integer ≥ 1, got {self.quota_window_size_seconds!r}"
            )

    @property
    def quota_window_ms(self) -> int:
        return self.quota_window_size_seconds * 1000


@dataclass(frozen=True, slots=True)
class ClientSensors:
    """The sensors one set of metric tags records into."""

    metric_tags: Mapping[str, str]
    quota_sensor: Sensor
    throttle_time_sensor: Sensor
    quota_value_sensor: Sensor | None = None
    #: The quota sensor's only metric when recording into it is "one Rate, then check": the fast path.
    rate_metric: KafkaMetric | None = None
    #: The quota-value sensor's Value holds the bound (kept so by ``_set_quota_limit`` while these sensors are
    #: cached): recording the bound into it again changes only its time, which is all the fast paths do.
    value_holds_bound: bool = False


def _check_value(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"usage value must be a number, got {type(value).__name__}")
    if not 0.0 <= value < math.inf:  # also rejects NaN
        raise ValueError(f"usage value must be a finite number ≥ 0, got {value!r}")
    return value


def _check_names(user: object, client_id: object) -> None:
    if not isinstance(user, str):
        raise ValueError(f"user must be a string (the principal name), got {type(user).__name__}")
    if not isinstance(client_id, str):
        raise ValueError(f"client_id must be a string, got {type(client_id).__name__}")


def _check_now(now_ms: object) -> int:
    if isinstance(now_ms, bool) or not isinstance(now_ms, int):
        raise ValueError(f"now_ms must be an integer of milliseconds, got {now_ms!r}")
    return now_ms


_FAST_NUMBER_TYPES = (float, int)
_TUPLE_TYPE = {tuple}
_LENGTH_3 = {3}
_LENGTH_4 = {4}
_first, _second, _third, _fourth = (operator.itemgetter(i) for i in range(4))
_STR_TYPE = {str}
_INT_TYPE = {int}
_NUMBER_TYPES = frozenset(_FAST_NUMBER_TYPES)


def _plain_width(items: Sequence[object]) -> int:
    """3 or 4 if every item is a ``(str, str, number)`` or every item a ``(str, str, number, int)`` tuple
    with a finite value ≥ 0, checked in bulk; 0 otherwise.

    A few C-level passes over the batch (``map`` of ``type``, ``len`` and item getters into sets, ``min``
    and a sum) instead of a dozen bytecodes per item, and without one object per item that the
    garbage collector would track (``zip(*items)`` makes an iterator per item, which alone set off a
    collection per 1000-item batch). It accepts only what ``_check_item`` accepts; 0 means "check
    item by item", which then names the first bad item exactly as before.
    """
    if set(map(type, items)) != _TUPLE_TYPE:
        return 0
    lengths = set(map(len, items))
    if lengths == _LENGTH_3:
        width = 3
    elif lengths == _LENGTH_4:
        width = 4
        if set(map(type, map(_fourth, items))) != _INT_TYPE:  # exact: a bool is not a time
            return 0
    else:
        return 0
    if set(map(type, map(_first, items))) != _STR_TYPE or set(map(type, map(_second, items))) != _STR_TYPE:
        return 0
    values = list(map(_third, items))
    if not _NUMBER_TYPES.issuperset(map(type, values)):  # exact types: a bool is not a usage value
        return 0
    try:
        # the sum is NaN or infinite if any value is (min() may skip a NaN); a sum that overflows, or an
        # int too large for a float, is left to the item-by-item check, which decides as before
        return width if min(values) >= 0.0 and math.isfinite(sum(values, 0.0)) else 0
    except OverflowError:
        return 0


def _check_item(index: int, item: object) -> None:
    """Validate one usage item of a batch, raising ValueError that names its index."""
    try:
        if not isinstance(item, tuple | list):
            raise ValueError(f"expected a (user, client_id, value[, now_ms]) tuple, got {type(item).__name__}")
        if len(item) not in (3, 4):
            raise ValueError(f"expected (user, client_id, value[, now_ms]), got {len(item)} fields")
        _check_names(item[0], item[1])
        _check_value(item[2])
        if len(item) == 4:
            _check_now(item[3])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"usage item {index}: {exc}") from None


def _single_rate_metric(sensor: Sensor) -> KafkaMetric | None:
    """The sensor's only metric if it is a plain ``Rate`` over a ``WindowedSum`` and the sensor records
    with no parents: then recording is "record, measure, compare", which the fast path does inline."""
    metrics = sensor.metrics
    if len(metrics) != 1 or sensor.parents or not sensor.should_record():
        return None
    stat = metrics[0].stat
    if type(stat) is Rate and type(stat.stat) is WindowedSum:
        return metrics[0]
    return None


def _check_bound(bound: object) -> float:
    if isinstance(bound, bool) or not isinstance(bound, int | float) or math.isnan(bound):
        raise ValueError(f"a quota bound must be a number, got {bound!r}")
    if bound <= 0.0:
        raise ValueError(f"a quota bound must be greater than 0, got {bound!r}")
    if math.isinf(bound):
        raise ValueError("a quota bound must be finite; remove the quota (bound None) for no limit")
    return float(bound)


class ClientQuotaManager:
    """Byte-rate quotas of one ``QuotaType`` (PRODUCE or FETCH) with Kafka's semantics.

    >>> mgr = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    >>> mgr.update_quota(ClientQuotaEntity(user="alice", client_id=DEFAULT), 1024.0)
    >>> now = 1_700_000_000_000
    >>> mgr.record_and_get_throttle_time_ms(user="alice", client_id="c1", value=10_240.0, now_ms=now)
    0
    >>> mgr.record_and_get_throttle_time_ms(user="alice", client_id="c1", value=4096.0, now_ms=now)
    4000
    """

    #: The compiled batch hot path (``_compiled``), or None for the pure-Python one; tests set it per instance
    #: to hold the two to the same results.
    record_compiled: ModuleType | None = record_compiled

    #: Name of the quota metric, per Kafka's manager of this kind.
    quota_metric_name = "byte-rate"
    quota_metric_description = "Tracking byte-rate per user/client-id"
    #: Whether KIP-786's quota-value metric applies to this kind of quota.
    supports_quota_value_metric = True

    def __init__(
        self,
        config: ClientQuotaManagerConfig,
        quota_type: QuotaType | str,
        *,
        metrics: Metrics | None = None,
        quota_callback: ClientQuotaCallback | None = None,
    ) -> None:
        self.config = config
        self.quota_type = QuotaType.parse(quota_type)
        self.client_quota_type = self.quota_type.to_client_quota_type()
        self.metrics = metrics if metrics is not None else Metrics()
        self._custom = quota_callback is not None
        self.quota_callback: ClientQuotaCallback = quota_callback if quota_callback else DefaultQuotaCallback()
        self._quota_value_enabled = config.client_quota_value_metric_enable and self.supports_quota_value_metric
        # (user, client id) -> sensors; valid until a quota changes or a sensor is removed.
        self._sensors: dict[tuple[str, str], ClientSensors] = {}
        # user -> client id -> (quota sensor, its rate metric, the Rate, the quota-value sensor or None) of the
        # cached sensors on the fast path: what record_batch unpacks per item. Two lookups of strings whose
        # hashes are cached cost less than building and hashing a (user, client id) key
        self._fast_paths: dict[str, dict[str, tuple[Sensor, KafkaMetric, Rate, Sensor | None]]] = {}
        self._sensors_removed_seen = self.metrics.sensors_removed
        self._metric_configs: dict[float, MetricConfig] = {}  # see quota_metric_config

    # --- state -------------------------------------------------------------------------------------
    @property
    def quota_types_enabled(self) -> int:
        """Kafka's bitmask of configured entity kinds; ``CUSTOM_QUOTAS`` with a custom callback."""
        if self._custom:
            return CUSTOM_QUOTAS
        return self.quota_callback.quota_types_enabled  # type: ignore[attr-defined]

    def quotas_enabled(self) -> bool:
        return self.quota_types_enabled != NO_QUOTAS

    # --- recording ---------------------------------------------------------------------------------
    def maybe_record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """``record_and_get_throttle_time_ms`` if any quota is configured, else 0 without recording."""
        if not self.quotas_enabled():
            _check_names(user, client_id)
            _check_value(value)
            return 0
        return self.record_and_get_throttle_time_ms(user, client_id, value, now_ms)

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` for the client and return how long to throttle it (0 if within quota).

        The value stays recorded even when it violates the quota (Kafka records, then checks).
        """
        _check_names(user, client_id)
        _check_value(value)
        return self._record(self.get_or_create_quota_sensors(user, client_id, now_ms), value, now_ms)

    def record_batch(self, items: Sequence[UsageItem], now_ms: int) -> list[int]:
        """Record usage items in order; the throttle times are exactly those of one-by-one calls.

        An item is ``(user, client_id, value)`` recorded at ``now_ms``, or ``(user, client_id, value,
        item_now_ms)``. Every item is validated before any is recorded, so a bad item rejects the
        whole batch with a ValueError naming its index, and nothing is half-applied.
        """
        _check_now(now_ms)
        if not items:
            return []
        if type(self)._record is ClientQuotaManager._record:
            compiled = self.record_compiled
            if compiled is not None:
                width = compiled.plain_width(items)
                if width:
                    return self._record_compiled_batch(compiled, items, now_ms if width == 3 else None)
            width = _plain_width(items)
            if width == 4:
                return self._record_plain_batch(items)
            if width == 3:
                return self._record_plain_batch(
                    zip(map(_first, items), map(_second, items), map(_third, items), repeat(now_ms))
                )
        for index, item in enumerate(items):
            # the common item passes three type checks; anything else gets the full, explaining check
            if not (
                type(item) is tuple
                and len(item) == 3
                and type(item[0]) is str
                and type(item[1]) is str
                and type(item[2]) in _FAST_NUMBER_TYPES
                and 0.0 <= item[2] < math.inf
            ):
                _check_item(index, item)
        sensors_for = self.get_or_create_quota_sensors
        cached = self._cached_sensors().get
        record = self._record
        results = []
        append = results.append
        for item in items:
            if len(item) == 3:
                user, client_id, value = item
                t = now_ms
            else:
                user, client_id, value, t = item
            sensors = cached((user, client_id))
            if sensors is None:
                sensors = sensors_for(user, client_id, t)
            append(record(sensors, value, t))
        return results

    def _record_plain_batch(self, items: Iterable[tuple[str, str, float, int]]) -> list[int]:
        """``record_batch`` of validated ``(user, client_id, value, now_ms)`` items.

        ``_record`` written out in the loop for sensors on the fast path, with every lookup that does not
        depend on the item hoisted: per item two dict lookups, one ``Rate.record_and_measure`` and the
        bound comparison (and, with KIP-786's metric on, the quota-value sensor's time). A client without
        cached fast-path sensors goes through ``_record``.
        """
        self._cached_sensors()  # empties the caches if a sensor was removed since
        fast_paths = self._fast_paths
        record_one = self._record
        sensors_for = self.get_or_create_quota_sensors
        throttle = self.throttle_time_for
        if type(self).throttle_time_for is ClientQuotaManager.throttle_time_for:
            throttle = throttle_time_for  # the same function without the method's frame
        results: list[int] = []
        append = results.append
        for user, client_id, value, now_ms in items:
            try:
                quota_sensor, metric, rate, value_sensor = fast_paths[user][client_id]
            except KeyError:
                append(record_one(sensors_for(user, client_id, now_ms), value, now_ms))
                continue
            if value_sensor is not None:
                # recording the bound into the quota-value sensor (what ``_record`` does) changes only its
                # time: its Value already holds the bound, which ``_set_quota_limit`` keeps current
                value_sensor.last_record_time_ms = now_ms
            quota_sensor.last_record_time_ms = now_ms
            config = metric.config
            quota = config.quota
            if quota is None:
                rate.record(config, value, now_ms)
                append(0)
                continue
            measured = rate.record_and_measure(config, value, now_ms)
            bound = quota.bound
            if (measured <= bound) if quota.upper else (measured >= bound):
                append(0)
            else:
                append(throttle(measured, bound, rate.last_window_ms))
        return results

    def _record_compiled_batch(self, compiled: ModuleType, items: Sequence[UsageItem], now_ms: int | None) -> list[int]:
        """``_record_plain_batch`` through the compiled module: the same items (``(user, client_id, value, now_ms)``,
        or ``(user, client_id, value)`` at ``now_ms``), the same methods for what is off its fast path."""
        self._cached_sensors()  # empties the caches if a sensor was removed since
        throttle = self.throttle_time_for
        if type(self).throttle_time_for is ClientQuotaManager.throttle_time_for:
            throttle = throttle_time_for
        return compiled.record_plain_batch(
            self._fast_paths,
            items,
            now_ms,
            self._record,
            self.get_or_create_quota_sensors,
            throttle,
            Rate.record_and_measure,
        )

    def _record(self, sensors: ClientSensors, value: float, now_ms: int) -> int:
        """Record into a client's quota sensor and return the throttle time (0 within quota)."""
        quota_sensor = sensors.quota_sensor
        value_sensor = sensors.quota_value_sensor
        if value_sensor is not None:
            if sensors.value_holds_bound:
                value_sensor.last_record_time_ms = now_ms
            else:
                value_sensor.record(self._bound_of(quota_sensor), now_ms, check_quotas=False)
        metric = sensors.rate_metric
        if metric is None:
            try:
                quota_sensor.record(value, now_ms)
            except QuotaViolationError as e:
                return self.throttle_time(e, now_ms)
            return 0
        # Sensor.record for a sensor whose only metric is a Rate and which has no parents: record,
        # measure once, compare. The window measured is the one the throttle time is computed over.
        quota_sensor.last_record_time_ms = now_ms
        config = metric.config
        rate = metric.stat
        quota = config.quota
        if quota is None:
            rate.record(config, value, now_ms)
            return 0
        measured = rate.record_and_measure(config, value, now_ms)
        bound = quota.bound
        if (measured <= bound) if quota.upper else (measured >= bound):
            return 0
        return self.throttle_time_for(measured, bound, rate.last_window_ms)

    def record_no_throttle(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Record without checking the quota; the next checked recording sees the total."""
        _check_names(user, client_id)
        _check_value(value)
        sensors = self.get_or_create_quota_sensors(user, client_id, now_ms)
        sensors.quota_sensor.record(value, now_ms, check_quotas=False)

    def unrecord_quota_sensor(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch returns no data, so its bytes must not count).

        Records ``-value``: the sample sums return to what they were before the recording.
        """
        _check_names(user, client_id)
        _check_value(value)
        sensors = self.get_or_create_quota_sensors(user, client_id, now_ms)
        sensors.quota_sensor.record(-value, now_ms, check_quotas=False)

    def throttle(self, user: str, client_id: str, throttle_time_ms: int, now_ms: int) -> None:
        """Record a throttle the caller applies, in the client's ``throttle-time`` metric (Avg)."""
        _check_names(user, client_id)
        if isinstance(throttle_time_ms, bool) or not isinstance(throttle_time_ms, int) or throttle_time_ms < 0:
            raise ValueError(f"throttle_time_ms must be a non-negative integer, got {throttle_time_ms!r}")
        if throttle_time_ms > 0:
            sensors = self.get_or_create_quota_sensors(user, client_id, now_ms)
            sensors.throttle_time_sensor.record(float(throttle_time_ms), now_ms)

    def throttle_batch(self, items: Iterable[tuple[str, str, int, int]]) -> None:
        """``throttle(user, client_id, throttle_time_ms, now_ms)`` for each item, in order.

        The shard records every throttle it answers (a broker's ``throttle()`` after each throttled
        response), a fifth of the items under load: one call per micro-batch and a cache hit per item
        instead of a checked call each. An item of a client without cached sensors, or with anything but
        an int ≥ 0 as its time, goes through ``throttle``, which checks it and raises as one call would.
        """
        cached = self._cached_sensors().get
        throttle = self.throttle
        compiled = self.record_compiled
        if compiled is not None:  # the same loop, a recording in a sensor's current sample done in C
            compiled.record_throttle_times(cached, items, throttle)
            return
        for user, client_id, throttle_time_ms, now_ms in items:
            sensors = cached((user, client_id))
            if sensors is None or type(throttle_time_ms) is not int or type(now_ms) is not int or throttle_time_ms < 0:
                throttle(user, client_id, throttle_time_ms, now_ms)
            elif throttle_time_ms > 0:
                sensors.throttle_time_sensor.record(float(throttle_time_ms), now_ms)

    def throttle_time(self, e: QuotaViolationError, now_ms: int) -> int:
        """The delay for a violated quota metric, over its padded window at ``now_ms``."""
        return self.throttle_time_for(e.value, e.bound, violated_rate_window_size(e, now_ms))

    def throttle_time_for(self, value: float, bound: float, window_size_ms: int) -> int:
        """Kafka's ``QuotaUtils.throttleTime`` from its parts; managers with a cap override this."""
        return throttle_time_for(value, bound, window_size_ms)

    # --- queries -----------------------------------------------------------------------------------
    def max_value_in_quota_window(self, user: str, client_id: str, now_ms: int) -> float:
        """The largest value that is not throttled for sure: ``limit * (samples - 1) * window_seconds``.

        Fetch uses it to cap the bytes fetched at once.
        """
        _check_names(user, client_id)
        if not self.quotas_enabled():
            return DOUBLE_MAX_VALUE
        sensors = self.get_or_create_quota_sensors(user, client_id, now_ms)
        limit = self.quota_callback.quota_limit(self.client_quota_type, sensors.metric_tags)
        if limit is None:
            return DOUBLE_MAX_VALUE
        return limit * (self.config.num_quota_samples - 1) * self.config.quota_window_size_seconds

    def quota(self, user: str, client_id: str) -> Quota:
        """The quota that applies to a client now (resolves without creating sensors)."""
        _check_names(user, client_id)
        tags = self._metric_tags(user, client_id)
        return Quota.upper_bound(self._quota_limit(tags))

    def quota_metric(self, user: str, client_id: str) -> MetricName:
        """Name of the quota metric a client records into (for inspection and exporters)."""
        _check_names(user, client_id)
        return self.client_quota_metric_name(self._metric_tags(user, client_id))

    # --- configuration -----------------------------------------------------------------------------
    def update_quota(self, entity: ClientQuotaEntity, bound: float | None) -> None:
        """Set (or, with ``bound=None``, remove) the quota of an entity; usage is never reset.

        Existing sensors keep their samples and get the new bound in their ``MetricConfig``.
        """
        if not isinstance(entity, ClientQuotaEntity):
            raise ValueError(f"expected a ClientQuotaEntity, got {type(entity).__name__}")
        callback = self.quota_callback
        # Kafka's tags depend on which entities have quotas, not on their bounds: a new bound of an entity that
        # has one resolves every client as before, so the cached sensors stay (a lease's share changes often)
        same_entities = (
            bound is not None
            and not self._custom
            and isinstance(callback, DefaultQuotaCallback)
            and callback.has_quota(entity)
        )
        if bound is None:
            callback.remove_quota(self.client_quota_type, entity)
        else:
            callback.update_quota(self.client_quota_type, entity, _check_bound(bound))
        if not same_entities:
            self._clear_sensor_cache()  # metric tags may resolve differently now
        if entity.user is DEFAULT or entity.client_id is DEFAULT:
            self.update_quota_metric_configs(None)  # a default may apply to many sensors
        else:
            self.update_quota_metric_configs(entity)

    def update_quota_metric_configs(self, updated_entity: ClientQuotaEntity | None = None) -> None:
        """Give existing quota metrics their current bound.

        With one named entity and one level of quotas, only that entity's metric can change; otherwise
        every quota metric of this manager is checked (defaults, several levels, custom callbacks).
        """
        if updated_entity is not None and self.quota_types_enabled in _SINGLE_LEVEL:
            user = sanitize(updated_entity.user) if isinstance(updated_entity.user, str) else ""
            client_id = updated_entity.client_id if isinstance(updated_entity.client_id, str) else ""
            tags = {USER_TAG: user, CLIENT_ID_TAG: client_id}
            metric = self.metrics.metric(self.client_quota_metric_name(tags))
            if metric is not None:
                self._set_quota_limit(metric, self._quota_limit(tags))
            return
        probe = self.client_quota_metric_name({})
        for name, metric in self.metrics.metrics.items():
            if name.name == probe.name and name.group == probe.group:
                limit = self._quota_limit(name.tags)
                if metric.config.quota is None or limit != metric.config.quota.bound:
                    self._set_quota_limit(metric, limit)

    def _set_quota_limit(self, metric: KafkaMetric, limit: float) -> None:
        metric.config = self.quota_metric_config(limit)
        if self._quota_value_enabled:
            # KIP-786: the quota-value metric shows the new bound now, not at the client's next request
            value_metric = self.metrics.metric(self.quota_value_metric_name(metric.metric_name.tags))
            if value_metric is not None:
                value_metric.stat.value = limit

    @property
    def quota_value_metric_enabled(self) -> bool:
        """Whether this manager keeps KIP-786's ``quota-value`` sensors now."""
        return self._quota_value_enabled

    def set_quota_value_metric_enabled(self, enabled: bool) -> None:
        """Switch KIP-786's ``quota-value`` metric at runtime (quotaplane's ``client.quota.value.metric.enable``
        is a dynamic config; Kafka's is read at start-up only).

        Off: every quota-value sensor of this manager is removed with its metric, so the series leaves the
        registry (and the next scrape). On: every live quota sensor gets its quota-value sensor at once, holding
        its current bound and idle since the quota sensor's last recording, so it expires with the client's
        other sensors; clients seen later get theirs on creation, as before. Usage is never touched. A manager
        whose kind has no quota-value metric (controller mutations) ignores the switch.
        """
        if not isinstance(enabled, bool):
            raise ValueError(f"enabled must be a bool, got {enabled!r}")
        enabled = enabled and self.supports_quota_value_metric
        if enabled == self._quota_value_enabled:
            return
        self._quota_value_enabled = enabled
        self._clear_sensor_cache()  # cached entries name the quota-value sensor (or its absence)
        metrics = self.metrics
        if not enabled:
            prefix = f"{self.quota_type}QuotaValue-"
            for name in [name for name in metrics.sensors if name.startswith(prefix)]:
                metrics.remove_sensor(name)
            return
        probe = self.client_quota_metric_name({})
        quota_names = [name for name in metrics.metrics if name.name == probe.name and name.group == probe.group]
        for metric_name in quota_names:
            tags = metric_name.tags
            suffix = ":".join(tags.values())
            quota_sensor = metrics.get_sensor(f"{self.quota_type}-{suffix}")
            if quota_sensor is None:
                continue
            self._quota_value_sensor(suffix, tags, quota_sensor, quota_sensor.last_record_time_ms)

    def _quota_value_sensor(self, suffix: str, tags: Mapping[str, str], quota_sensor: Sensor, now_ms: int) -> Sensor:
        """The quota-value sensor of a set of metric tags, created holding ``quota_sensor``'s bound when
        missing (idle since ``now_ms``)."""
        name = f"{self.quota_type}QuotaValue-{suffix}"
        value_sensor = self.metrics.get_sensor(name)
        if value_sensor is None:
            value_sensor = self._new_sensor(name, now_ms)
            value_sensor.add(self.quota_value_metric_name(tags), Value())
            value_sensor.record(self._bound_of(quota_sensor), now_ms, check_quotas=False)
        return value_sensor

    @staticmethod
    def _holds_bound(value_sensor: Sensor, quota_sensor: Sensor) -> bool:
        """True if recording the bound into ``value_sensor`` would change nothing but its time: its only
        metric is a ``Value`` already holding ``quota_sensor``'s bound (the fast path then skips the record)."""
        metrics = value_sensor.metrics
        if len(metrics) != 1 or value_sensor.parents or not value_sensor.should_record():
            return False
        stat = metrics[0].stat
        return type(stat) is Value and stat.value == ClientQuotaManager._bound_of(quota_sensor)

    # --- sensors -----------------------------------------------------------------------------------
    def get_or_create_quota_sensors(self, user: str, client_id: str, now_ms: int) -> ClientSensors:
        """The sensors a client records into, created (idle since ``now_ms``) when missing."""
        metrics = self.metrics
        key = (user, client_id)
        sensors = self._cached_sensors().get(key)
        if sensors is not None:
            return sensors
        tags = self._metric_tags(user, client_id)
        suffix = ":".join(tags.values())
        quota_type = self.quota_type
        quota_sensor = self.quota_sensor_for_tags(tags, now_ms)
        throttle_sensor = metrics.get_sensor(f"{quota_type}ThrottleTime-{suffix}")
        if throttle_sensor is None:
            throttle_sensor = self._new_sensor(f"{quota_type}ThrottleTime-{suffix}", now_ms)
            throttle_sensor.add(
                metrics.metric_name(
                    "throttle-time", str(quota_type), "Tracking average throttle-time per user/client-id", tags
                ),
                Avg(),
            )
        value_sensor = None
        if self._quota_value_enabled:
            value_sensor = self._quota_value_sensor(suffix, tags, quota_sensor, now_ms)
        rate_metric = _single_rate_metric(quota_sensor)
        # only for sensors that are cached (not with a custom callback): the cache is emptied when a bound changes
        holds = (
            value_sensor is not None
            and rate_metric is not None
            and not self._custom
            and self._holds_bound(value_sensor, quota_sensor)
        )
        sensors = ClientSensors(tags, quota_sensor, throttle_sensor, value_sensor, rate_metric, holds)
        if self._custom:
            if self.quota_callback.quota_reset_required(self.client_quota_type):
                self.update_quota_metric_configs()
        else:
            self._sensors[key] = sensors
            if rate_metric is not None and (value_sensor is None or holds):
                self._fast_paths.setdefault(user, {})[client_id] = (
                    quota_sensor,
                    rate_metric,
                    rate_metric.stat,
                    value_sensor,
                )
        return sensors

    def quota_sensor_for_tags(self, metric_tags: Mapping[str, str], now_ms: int) -> Sensor:
        """The quota sensor of a set of metric tags, created (idle since ``now_ms``, with the quota those tags
        resolve to now) when missing. ``get_or_create_quota_sensors`` resolves the tags of a client first; a
        restored usage checkpoint has the tags already (``import_usage``)."""
        name = f"{self.quota_type}-{':'.join(metric_tags.values())}"
        quota_sensor = self.metrics.get_sensor(name)
        if quota_sensor is None:
            quota_sensor = self._new_sensor(name, now_ms)
            self.register_quota_metrics(quota_sensor, metric_tags)
        return quota_sensor

    def _cached_sensors(self) -> dict[tuple[str, str], ClientSensors]:
        """The sensor cache, emptied first if any sensor was removed since it was filled."""
        removed = self.metrics.sensors_removed
        if self._sensors_removed_seen != removed:
            self._clear_sensor_cache()  # cached entries may point at removed sensors
            self._sensors_removed_seen = removed
        return self._sensors

    def _clear_sensor_cache(self) -> None:
        self._sensors.clear()
        self._fast_paths.clear()

    def register_quota_metrics(self, sensor: Sensor, metric_tags: Mapping[str, str]) -> None:
        """Add the quota metric(s) to a new quota sensor; managers of other kinds override this."""
        sensor.add(
            self.client_quota_metric_name(metric_tags),
            Rate(),
            self.quota_metric_config(self._quota_limit(metric_tags)),
        )

    def client_quota_metric_name(self, metric_tags: Mapping[str, str]) -> MetricName:
        return self.metrics.metric_name(
            self.quota_metric_name, str(self.quota_type), self.quota_metric_description, metric_tags
        )

    def quota_value_metric_name(self, metric_tags: Mapping[str, str]) -> MetricName:
        """Name of KIP-786's ``quota-value`` metric for a set of metric tags."""
        return self.metrics.metric_name(
            "quota-value", str(self.quota_type), "The quota enforced per user/client-id", metric_tags
        )

    def quota_metric_config(self, limit: float) -> MetricConfig:
        """The config of a quota metric with bound ``limit``: one shared (immutable) object per bound.

        Thousands of clients share a few bounds (the defaults), so sharing the config keeps the few
        objects every recording reads in the CPU's cache instead of one cold object per client.
        """
        config = self._metric_configs.get(limit)
        if config is None:
            if len(self._metric_configs) >= _MAX_SHARED_CONFIGS:
                self._metric_configs.clear()  # bounds churned: start over rather than grow without end
            config = self._metric_configs[limit] = MetricConfig(
                samples=self.config.num_quota_samples,
                time_window_ms=self.config.quota_window_ms,
                quota=Quota.upper_bound(limit),
            )
        return config

    def expire_sensors(self, now_ms: int) -> list[str]:
        """Remove sensors idle for an hour (Kafka's sensor expiry); returns the names removed."""
        return self.metrics.expire_sensors(now_ms)

    def _new_sensor(self, name: str, now_ms: int) -> Sensor:
        return self.metrics.sensor(
            name, now_ms=now_ms, inactive_sensor_expiration_time_seconds=INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS
        )

    def _metric_tags(self, user: str, client_id: str) -> dict[str, str]:
        callback = self.quota_callback
        if isinstance(callback, DefaultQuotaCallback) and not self._custom:
            user_tag, client_tag = callback.metric_tags(sanitize(user), client_id)
            return {USER_TAG: user_tag, CLIENT_ID_TAG: client_tag}
        return dict(callback.quota_metric_tags(self.client_quota_type, user, client_id))

    def _quota_limit(self, metric_tags: Mapping[str, str]) -> float:
        limit = self.quota_callback.quota_limit(self.client_quota_type, metric_tags)
        return float(LONG_MAX_VALUE) if limit is None else limit

    @staticmethod
    def _bound_of(quota_sensor: Sensor) -> float:
        for metric in quota_sensor.metrics:
            if metric.config.quota is not None:
                return metric.config.quota.bound
        return float(LONG_MAX_VALUE)
