"""ProducerIdQuotaManager: throttle users that churn producer ids (KIP-936, ``producer_ids_rate``).

Every idempotent producer gets a producer id (PID), and each PID costs a broker state for as long as
``producer.id.expiration.ms``; a client that opens a new producer per batch or per error can fill a
broker's heap. KIP-936 limits the rate of *new* PIDs per user (KafkaPrincipal):

- the quota ``producer_ids_rate`` (new ids per second, a double > 0) is set for ``<user>`` or the
  ``<default>`` user only; client ids are not authenticated, so no client-id entity exists for it;
- each user has a ``TimedBloomFilter`` of the ids it used in the last one to one and a half windows;
  an id in a live filter costs nothing, a new one is added to the filter and takes one token;
- the tokens are Kafka's ``TokenBucket`` (as ``controller_mutation_rate``): refilled at the quota,
  holding at most ``producer.id.quota.window.num * window seconds * rate`` tokens; when a new id
  leaves the bucket below zero the user is throttled for ``-tokens / rate`` seconds.

**Record, then check.** The KIP's manager adds an unseen PID to the cache and increments the quota
sensor, which then raises ``QuotaViolationException`` ("similar to existing quotas"), and the client
gets a ProduceResponse with ``throttleTimeMs`` as for bandwidth quotas; this is Kafka's ``Sensor.record``
order (and ``PermissiveControllerMutationQuota``'s). So the id that overdraws the bucket is recorded,
remembered and throttled; when the client comes back with the same id after the throttle it is seen
and costs nothing; ids already seen are never throttled by this quota. (Check-then-record, the strict
mutation quota's order, would reject the id unrecorded and count it only when it is accepted later.)

The core owns no thread: ``cleanup(now_ms)`` is called by the owner every
``producer.id.quota.cache.cleanup.scheduler.interval.ms``; it pops due users from a heap, so a call
with nothing due costs O(1).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import ClassVar

from ..metrics import (
    Avg,
    KafkaMetric,
    MetricConfig,
    Metrics,
    Quota,
    QuotaViolationError,
    Rate,
    Sensor,
    TimeUnit,
    TokenBucket,
)
from ._bloom import (
    TimedBloomFilter,
    check_filter_shape,
    check_hash_key,
    check_now_ms,
    check_producer_id,
    id_hash_base,
)
from ._producer_id_items import batch_columns, check_user
from ._types import DEFAULT, ClientQuotaEntity, sanitize
from .throttle import token_bucket_throttle_time

__all__ = [
    "PRODUCER_IDS_RATE",
    "ProducerIdItem",
    "ProducerIdQuotaManager",
    "ProducerIdQuotaManagerConfig",
]

#: The quota's config name (KIP-936), set with ``kafka-configs --entity-type users``.
PRODUCER_IDS_RATE = "producer_ids_rate"

#: The metric group and the sensor-name prefix.
GROUP = "ProducerIds"
USER_TAG = "user"

#: A bucket this close to its burst (in tokens, i.e. ids) counts as full: float rounding, not usage.
_FULL_TOLERANCE = 1e-9

#: Ids ``record_batch`` remembers as held by a user's current Bloom filter (``ProducerIdQuotaManager._seen``);
#: emptied when full. About 70 bytes an entry, so at most ~4.5 MB per manager.
_SEEN_CACHE_SIZE = 1 << 16

#: One item of a batch: (user, producer id) or (user, producer id, now_ms).
ProducerIdItem = tuple[str, int] | tuple[str, int, int]


def _positive_int(name: str, value: object) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{name} must be an int ≥ 1, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdQuotaManagerConfig:
    """The manager's settings; ``from_properties`` takes them by their broker config names.

    ============================================================  ========  ========================
    broker config                                                 default   field
    ============================================================  ========  ========================
    ``producer.id.quota.window.num``                              11        ``num_quota_samples``
    ``producer.id.quota.window.size.seconds``                     3600      ``quota_window_size_seconds``
    ``producer.id.quota.cache.cleanup.scheduler.interval.ms``     10        ``cache_cleanup_interval_ms``
    ``producer.id.quota.filter.expected.items`` (quotaplane)      10000     ``filter_expected_items``
    ``producer.id.quota.filter.false.positive.rate`` (quotaplane) 0.01      ``filter_false_positive_rate``
    ============================================================  ========  ========================

    The first three are KIP-936's, with its defaults: the window (1 hour) is both the TokenBucket's
    sample window and the life of one Bloom filter; the cleanup interval is in milliseconds, as its
    name and the KIP's table say ("the frequency in ms that the producer id quota manager will check
    for disposed cached windows"). The filter shape is quotaplane's: the KIP leaves it open.
    ``filter_expected_items`` is the number of distinct ids one user uses in one window (new ids and
    the ids of long-lived producers, which are refreshed into each new filter). ``hash_key`` keys the
    BLAKE2b hash of ids (None: unkeyed); keep it equal on every shard so answers are reproducible.

    >>> ProducerIdQuotaManagerConfig().window_ms
    3600000
    """

    num_quota_samples: int = 11
    quota_window_size_seconds: int = 3600
    cache_cleanup_interval_ms: int = 10
    filter_expected_items: int = 10_000
    filter_false_positive_rate: float = 0.01
    hash_key: bytes | None = None

    #: broker config name -> field
    PROPERTY_NAMES: ClassVar[Mapping[str, str]] = {
        "producer.id.quota.window.num": "num_quota_samples",
        "producer.id.quota.window.size.seconds": "quota_window_size_seconds",
        "producer.id.quota.cache.cleanup.scheduler.interval.ms": "cache_cleanup_interval_ms",
        "producer.id.quota.filter.expected.items": "filter_expected_items",
        "producer.id.quota.filter.false.positive.rate": "filter_false_positive_rate",
    }

    def __post_init__(self) -> None:
        _positive_int("producer.id.quota.window.num", self.num_quota_samples)
        _positive_int("producer.id.quota.window.size.seconds", self.quota_window_size_seconds)
        _positive_int("producer.id.quota.cache.cleanup.scheduler.interval.ms", self.cache_cleanup_interval_ms)
        check_filter_shape(self.filter_expected_items, self.filter_false_positive_rate)
        check_hash_key(self.hash_key)

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> ProducerIdQuotaManagerConfig:
        """Build from broker-style ``{"producer.id.quota.window.num": 11, ...}``; unknown names are errors."""
        kwargs = {}
        for name, value in properties.items():
            field_name = cls.PROPERTY_NAMES.get(name)
            if field_name is None:
                known = ", ".join(cls.PROPERTY_NAMES)
                raise ValueError(f"unknown producer-id quota config {name!r}; expected one of {known}")
            kwargs[field_name] = value
        return cls(**kwargs)

    @property
    def window_ms(self) -> int:
        return self.quota_window_size_seconds * 1000

    def as_properties(self) -> dict[str, object]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {name: values[field_name] for name, field_name in self.PROPERTY_NAMES.items()}


def _check_bound(bound: object) -> float | None:
    if bound is None:
        return None
    if isinstance(bound, bool) or not isinstance(bound, int | float) or math.isnan(bound):
        raise ValueError(f"a {PRODUCER_IDS_RATE} quota must be a number, got {bound!r}")
    if not 0.0 < bound < math.inf:
        raise ValueError(f"a {PRODUCER_IDS_RATE} quota must be finite and greater than 0, got {bound!r}")
    return float(bound)


def _check_entity(entity: object) -> str | object:
    if not isinstance(entity, ClientQuotaEntity):
        raise ValueError(f"expected a ClientQuotaEntity, got {type(entity).__name__}")
    if entity.client_id is not None or entity.user is None:
        raise ValueError(
            f"{PRODUCER_IDS_RATE} applies to <user> and <default> user entities only (KIP-936); "
            f"client ids are not authenticated, got {entity}"
        )
    return entity.user


class _UserState:
    """One user's filter and sensors."""

    __slots__ = ("bound", "filter", "quota_sensor", "rate", "throttle_sensor", "tokens")

    def __init__(
        self, bound: float | None, filter_: TimedBloomFilter, quota_sensor: Sensor, rate: Rate, tokens: KafkaMetric
    ) -> None:
        #: the quota that applies to the user now (its own, else the default user's, else None)
        self.bound = bound
        self.filter = filter_
        self.quota_sensor = quota_sensor
        self.rate = rate
        self.tokens = tokens
        #: created by the first throttle() reported: most users are never throttled (saves ~1.4 KB each)
        self.throttle_sensor: Sensor | None = None


class ProducerIdQuotaManager:
    """``producer_ids_rate`` quotas per user, with KIP-936's Bloom-filter cache of recent ids.

    >>> mgr = ProducerIdQuotaManager(ProducerIdQuotaManagerConfig(num_quota_samples=2, quota_window_size_seconds=1))
    >>> mgr.update_quota(ClientQuotaEntity(user="alice"), 1.0)  # 1 new id/s, a burst of 2 * 1 s * 1 = 2
    >>> now = 1_700_000_000_000
    >>> [mgr.record_and_get_throttle_time_ms("alice", pid, now) for pid in (1, 2, 3, 4, 1)]
    [0, 0, 1000, 2000, 0]
    """

    def __init__(self, config: ProducerIdQuotaManagerConfig | None = None, *, metrics: Metrics | None = None) -> None:
        self.config = config if config is not None else ProducerIdQuotaManagerConfig()
        self.metrics = metrics if metrics is not None else Metrics()
        self._user_bounds: dict[str, float] = {}
        self._default_bound: float | None = None
        self._users: dict[str, _UserState] = {}
        # (due_ms, sequence, user, state): one entry per tracked user, popped by cleanup
        self._due: list[tuple[int, int, str, _UserState]] = []
        self._sequence = 0
        self._bucket_configs: dict[float | None, MetricConfig] = {}
        self._sensor_config = MetricConfig(samples=self.config.num_quota_samples, time_window_ms=self.config.window_ms)
        #: the filters' hash of ids (``make_id_hasher``'s, as each user's TimedBloomFilter has it), inlined
        self._id_hash_copy = id_hash_base(self.config.hash_key).copy
        #: id -> serial of a Bloom filter (``TimedBloomFilter._live_view``) known to hold the id's key
        self._seen: dict[int, int] = {}

    # --- recording ---------------------------------------------------------------------------------
    def record_and_get_throttle_time_ms(self, user: str, producer_id: int, now_ms: int) -> int:
        """Note that ``user`` produced with ``producer_id``; the throttle time in ms (0 if none).

        An id in one of the user's live filters returns 0 and records nothing. A new id is added to
        the filter and takes one token; if that leaves the bucket below zero the result is the time
        for it to refill to zero. Users with no quota (own or default) are not tracked at all.
        """
        check_user(user)
        check_producer_id(producer_id)
        check_now_ms(now_ms)
        return self._record(user, producer_id, now_ms)

    def record_batch(self, items: Sequence[ProducerIdItem], now_ms: int) -> list[int]:
        """Record items in order; the throttle times are exactly those of one-by-one calls.

        An item is ``(user, producer_id)`` recorded at ``now_ms``, or ``(user, producer_id,
        item_now_ms)``. Every item is validated first: a bad item rejects the whole batch with a
        ValueError naming its index, and nothing is recorded.

        The loop is one-by-one calls fused. An item whose time moves its user's filters goes through
        ``TimedBloomFilter._add_key``; the filters' view after it (``_live_view``, kept between
        batches) serves the next items, which read and add to the Bloom filters directly. An id
        already put into the current filter (``_seen``: id -> that filter's serial) is answered
        without hashing; a new id is charged inline (``_charge``).
        """
        check_now_ms(now_ms)
        users, pids, times = batch_columns(items, now_ms)
        user_bounds = self._user_bounds
        default_bound = self._default_bound
        tracked_get = self._users.get
        seen = self._seen
        seen_get = seen.get
        hash_copy = self._id_hash_copy
        from_bytes = int.from_bytes
        sensor_config = self._sensor_config
        results: list[int] = []
        append = results.append
        for user, producer_id, t in zip(users, pids, times, strict=True):
            state = tracked_get(user)
            if state is None:
                bound = user_bounds.get(user, default_bound)
                if bound is None:
                    append(0)
                    continue
                state = self._new_state(user, bound, t)
            else:
                bound = state.bound
                if bound is None:
                    append(0)
                    continue
            filter_ = state.filter
            until, current, previous, serial = filter_._live
            if t < until and seen_get(producer_id) == serial:
                append(0)  # the id's key went into this very filter before: `key in current`
                continue
            h = hash_copy()  # make_id_hasher's body, inlined
            h.update(producer_id.to_bytes(8, "little"))
            key = from_bytes(h.digest(), "little")
            if t >= until:  # the filters move at t: the reference step, then their new view
                fresh = filter_._add_key(key, t)
                serial = filter_._live_view()[3]
            elif key in current:
                fresh = False
            else:
                current.add(key)
                fresh = previous is None or key not in previous
            if len(seen) >= _SEEN_CACHE_SIZE:
                seen.clear()
            seen[producer_id] = serial  # the key is in the current filter now, found or added
            if not fresh:
                append(0)
                continue
            # a new id: _charge inlined (see there), with the bucket's TokenBucket.record(config, 1.0, t)
            # inlined too: refill for the elapsed seconds up to the burst, then take one token (the
            # bucket is in seconds, made by _new_state; its config's quota bound is ``bound``)
            state.quota_sensor.last_record_time_ms = t
            state.rate.stat.record(sensor_config, 1.0, t)  # Rate.record
            tokens_metric = state.tokens
            bucket = tokens_metric.stat
            config = tokens_metric.config
            burst = config.samples * (config.time_window_ms / 1000.0) * bound
            tokens = bucket.tokens + bound * ((t - bucket.last_update_ms) / 1000.0)
            if not tokens < burst:
                tokens = burst  # min(burst, tokens)
            bucket.last_update_ms = t
            bucket.tokens = tokens = tokens - 1.0  # min(burst, tokens - 1.0): never above burst here
            if tokens < 0:
                append(token_bucket_throttle_time(QuotaViolationError(tokens_metric, tokens, bound)))
            else:
                append(0)
        return results

    def _record(self, user: str, producer_id: int, now_ms: int) -> int:
        bound = self._user_bounds.get(user, self._default_bound)
        if bound is None:
            return 0
        state = self._users.get(user)
        if state is None:
            state = self._new_state(user, bound, now_ms)
        filter_ = state.filter
        if not filter_._add_key(filter_._hash(producer_id), now_ms):
            return 0
        return self._charge(state, bound, now_ms)

    def _charge(self, state: _UserState, bound: float, now_ms: int) -> int:
        """A new id: take one token and answer the throttle time.

        This is ``Sensor.record(1.0, now_ms)`` inlined (the sensor has no parents and records at
        INFO): every stat records, then the bucket's quota is checked. ``TokenBucket.record`` has just
        refilled to ``now_ms``, so its tokens are what ``measure(now_ms)`` would return.
        """
        state.quota_sensor.last_record_time_ms = now_ms
        state.rate.record(self._sensor_config, 1.0, now_ms)
        tokens_metric = state.tokens
        bucket = tokens_metric.stat
        bucket.record(tokens_metric.config, 1.0, now_ms)
        if bucket.tokens < 0:
            return token_bucket_throttle_time(QuotaViolationError(tokens_metric, bucket.tokens, bound))
        return 0

    def throttle(self, user: str, throttle_time_ms: int, now_ms: int) -> None:
        """Record a throttle the caller applies in the user's ``throttle-time`` metric (Avg).

        As with Kafka's quota managers, the caller reports the throttle it actually applies. The metric
        is created by a user's first throttle; a user this manager does not track (no quota) has none
        and the call does nothing.
        """
        check_user(user)
        check_now_ms(now_ms)
        if type(throttle_time_ms) is not int or throttle_time_ms < 0:
            raise ValueError(f"throttle_time_ms must be an int ≥ 0, got {throttle_time_ms!r}")
        state = self._users.get(user)
        if throttle_time_ms > 0 and state is not None:
            sensor = state.throttle_sensor
            if sensor is None:
                tags = {USER_TAG: sanitize(user)}
                sensor = state.throttle_sensor = self.metrics.sensor(
                    f"{GROUP}ThrottleTime-{tags[USER_TAG]}", now_ms=now_ms
                )
                sensor.add(
                    self.metrics.metric_name("throttle-time", GROUP, "Tracking average throttle-time per user", tags),
                    Avg(),
                )
            sensor.record(float(throttle_time_ms), now_ms)

    # --- configuration -----------------------------------------------------------------------------
    def update_quota(self, entity: ClientQuotaEntity, bound: float | None) -> None:
        """Set (or, with ``bound=None``, remove) the ``producer_ids_rate`` of a user or the default user.

        Only ``ClientQuotaEntity(user=...)`` and ``ClientQuotaEntity(user=DEFAULT)`` are accepted.
        Tracked users keep their tokens and filters; their bucket gets the new bound.
        """
        user = _check_entity(entity)
        checked = _check_bound(bound)
        if user is DEFAULT:
            self._default_bound = checked
            affected: Iterable[str] = [u for u in self._users if u not in self._user_bounds]
        else:
            if checked is None:
                self._user_bounds.pop(user, None)
            else:
                self._user_bounds[user] = checked
            affected = [user] if user in self._users else []
        for name in affected:
            state = self._users[name]
            state.bound = self.quota(name)
            state.tokens.config = self._bucket_config(state.bound)

    def quota(self, user: str) -> float | None:
        """The ``producer_ids_rate`` that applies to ``user``: its own, else the default user's, else None."""
        check_user(user)
        bound = self._user_bounds.get(user)
        return bound if bound is not None else self._default_bound

    def quotas(self) -> dict[str | object, float]:
        """Every configured quota, by user name (``DEFAULT`` for the default user)."""
        configured: dict[str | object, float] = dict(self._user_bounds)
        if self._default_bound is not None:
            configured[DEFAULT] = self._default_bound
        return configured

    # --- cleanup -----------------------------------------------------------------------------------
    def cleanup(self, now_ms: int) -> list[str]:
        """Drop expired filters and forget users with no live filter; the users forgotten.

        Called by the owner every ``cache_cleanup_interval_ms``. A user with no live filter is removed
        with its sensors once its token bucket has refilled to its burst, when a fresh bucket would be
        identical (so waiting never earns a user more than the quota gives); until then only its
        sensors are kept. Each tracked user has one entry in a heap ordered by when it is next due,
        so a call costs O(1) when nothing is due and O(log users) per user it looks at.
        """
        check_now_ms(now_ms)
        due = self._due
        users = self._users
        removed: list[str] = []
        while due and due[0][0] <= now_ms:
            _, _, user, state = heapq.heappop(due)
            if users.get(user) is not state:
                continue
            filter_ = state.filter
            filter_.expire(now_ms)
            next_expiry = filter_.next_expiry_ms
            if next_expiry is not None:
                self._schedule(user, state, next_expiry)
                continue
            full_at = self._bucket_full_at(state, now_ms)
            if full_at is None:
                del users[user]
                self.metrics.remove_sensor(state.quota_sensor.name)
                if state.throttle_sensor is not None:
                    self.metrics.remove_sensor(state.throttle_sensor.name)
                removed.append(user)
            else:
                self._schedule(user, state, max(full_at, now_ms + 1))
        return removed

    @staticmethod
    def _bucket_full_at(state: _UserState, now_ms: int) -> int | None:
        """When the user's bucket is back at its burst (None if it is, or has no bound); no change."""
        metric = state.tokens
        quota = metric.config.quota
        if quota is None:
            return None
        stat: TokenBucket = metric.stat  # type: ignore[assignment]
        bound = quota.bound
        burst = metric.config.samples * (metric.config.time_window_ms / 1000.0) * bound
        tokens = stat.tokens + bound * max(0, now_ms - stat.last_update_ms) / 1000.0
        if tokens >= burst - _FULL_TOLERANCE:
            return None
        # never late by a rounding error; an early due date is just looked at again
        return now_ms + math.ceil((burst - tokens) / bound * 1000.0 - 1e-6)

    def _schedule(self, user: str, state: _UserState, due_ms: int) -> None:
        self._sequence += 1
        heapq.heappush(self._due, (due_ms, self._sequence, user, state))

    # --- state -------------------------------------------------------------------------------------
    def _new_state(self, user: str, bound: float, now_ms: int) -> _UserState:
        config = self.config
        tags = {USER_TAG: sanitize(user)}
        metrics = self.metrics
        suffix = tags[USER_TAG]
        quota_sensor = metrics.sensor(f"{GROUP}-{suffix}", self._sensor_config, now_ms=now_ms)
        rate = Rate()
        quota_sensor.add(
            metrics.metric_name("rate", GROUP, "Tracking new producer ids per second per user", tags), rate
        )
        tokens_name = metrics.metric_name(
            "tokens", GROUP, "Tracking remaining tokens in the token bucket per user", tags
        )
        quota_sensor.add(tokens_name, TokenBucket(unit=TimeUnit.SECONDS), self._bucket_config(bound))
        tokens = metrics.metric(tokens_name)
        assert tokens is not None
        filter_ = TimedBloomFilter(
            config.filter_expected_items, config.filter_false_positive_rate, config.window_ms, hash_key=config.hash_key
        )
        state = _UserState(bound, filter_, quota_sensor, rate, tokens)
        self._users[user] = state
        # first due when a filter made now would expire; cleanup re-schedules from the real state
        self._schedule(user, state, now_ms + filter_.lifetime_ms)
        return state

    def _bucket_config(self, bound: float | None) -> MetricConfig:
        """The token bucket's config for a bound; one shared (immutable) object per distinct bound."""
        config = self._bucket_configs.get(bound)
        if config is None:
            if len(self._bucket_configs) > 1024:
                self._bucket_configs.clear()  # bounds come from admins; this only caps a pathological churn
            config = self._bucket_configs[bound] = MetricConfig(
                samples=self.config.num_quota_samples,
                time_window_ms=self.config.window_ms,
                quota=None if bound is None else Quota.upper_bound(bound),
            )
        return config

    # --- inspection --------------------------------------------------------------------------------
    @property
    def tracked_users(self) -> list[str]:
        return list(self._users)

    def live_filters(self, user: str, now_ms: int) -> int:
        """How many of ``user``'s filters are alive at ``now_ms`` (0 if untracked); no change."""
        check_user(user)
        state = self._users.get(user)
        return 0 if state is None else state.filter.live_filters(now_ms)

    def filter_of(self, user: str) -> TimedBloomFilter | None:
        """The user's filter (for inspection), or None if the user is not tracked."""
        state = self._users.get(check_user(user))
        return None if state is None else state.filter

    def bit_array_bytes(self) -> int:
        """Bytes of Bloom-filter bit arrays held now, over every user."""
        return sum(state.filter.bit_array_bytes for state in self._users.values())
