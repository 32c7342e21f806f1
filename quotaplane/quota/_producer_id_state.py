"""The KIP-936 state of some users copied out of a ``ProducerIdQuotaManager`` and into another (a reshard).

Producer-id state is kept per user (the gateway routes it by the user name as given, :func:`producer_id_key`).
When a reshard moves a user, the giver exports its state (:func:`export_producer_ids`), forgets it
(:func:`forget_producer_ids`) and the receiver imports it (:func:`import_producer_ids`) before it answers any
item of that user. The receiver then answers ``record_batch`` / ``record_and_get_throttle_time_ms`` as the
giver would have: the same ids count as seen (the Bloom filters' bits and their windows move), a new id
takes a token from the same bucket, and ``cleanup`` drops the filters and forgets the user at the same
calls.

**What moves, per user:** its ``TimedBloomFilter`` (the current and the older filter, each rbloom's saved
bytes, with their start times: ``TimedBloomFilter.export_state``), the quota sensor's last recording, the
``tokens`` bucket (tokens, last refill), the ``rate`` samples as ``SampledStat`` keeps them, the
throttle-time sensor if the user has one (last recording, ``Avg`` samples), and when ``cleanup`` next looks
at the user. The quota is config: the receiver's bucket gets the bound the user has there, from the same log.

**Order.** ``cleanup`` pops users from a heap by ``(due time, sequence)``; users due at the same time are
forgotten in the order they were scheduled. The snapshot lists users in that order and the import schedules
them in it, so the imported users keep their order among themselves (relative to the receiver's own users a
tie is broken by the import's sequence). The manager's cache of ids seen per filter (``_seen``) is not moved:
it only saves hashing, and the receiver's restored filters have new serials, so nothing in it matches them.

An import replaces a user the receiver already tracks. A snapshot that does not fit (another layout version,
other window or filter settings or hash key, a repeated user, a bad value) raises ValueError before anything
changes. This module is the manager's friend: it reads and writes the manager's per-user state and heap.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from ..metrics import Avg
from ._bloom import TimedBloomFilter, make_id_hasher
from ._mutation_state import SampledState, check_tokens
from ._producer_id_items import check_user
from ._producer_ids import GROUP, USER_TAG, ProducerIdQuotaManager, _UserState
from ._types import sanitize

__all__ = [
    "PRODUCER_ID_STATE_VERSION",
    "ProducerIdSnapshot",
    "ProducerIdUser",
    "export_producer_ids",
    "forget_producer_ids",
    "import_producer_ids",
    "producer_id_key",
]

#: Bumped on any change of the snapshot's layout; a snapshot of another version is a ValueError.
PRODUCER_ID_STATE_VERSION = 1

#: The throttle-time metric, as ``ProducerIdQuotaManager.throttle`` names it.
_THROTTLE_METRIC = ("throttle-time", "Tracking average throttle-time per user")


@dataclass(frozen=True, slots=True)
class ProducerIdUser:
    """One user's KIP-936 state. ``filters``: ``TimedBloomFilter.export_state`` (current start, current
    filter's bytes, older start, older filter's bytes). ``throttle_last_record_ms`` is None when the user has
    no throttle-time sensor (it is made by the first throttle reported)."""

    user: str
    due_ms: int
    last_record_ms: int
    tokens: float
    last_update_ms: int
    rate: SampledState
    throttle_last_record_ms: int | None
    throttle_time: SampledState | None
    filters: tuple[int, bytes | None, int, bytes | None]


@dataclass(frozen=True, slots=True)
class ProducerIdSnapshot:
    """Users of one manager, copied (plain data: it pickles), in ``cleanup``'s order.

    The settings an import needs equal: the manager's window (``samples``, ``window_ms``: the bucket's burst,
    the rate's samples and the filters' life), the filters' shape, a fingerprint of the ids' hash key (the
    digest of id 0: equal keys give equal fingerprints, and it does not reveal the key) and the metrics
    registry's default config (``registry_samples``, ``registry_window_ms``: the throttle-time samples)."""

    samples: int
    window_ms: int
    expected_items: int
    false_positive_rate: float
    hash_fingerprint: int
    registry_samples: int
    registry_window_ms: int
    users: tuple[ProducerIdUser, ...]
    version: int = PRODUCER_ID_STATE_VERSION


def producer_id_key(user: str) -> str:
    """The routing key of a user's producer-id state: the user name as given (``ProducerIdQuotaManager``'s key)."""
    return user


def _settings(manager: ProducerIdQuotaManager) -> tuple[int, int, int, float, int, int, int]:
    config = manager.config
    registry = manager.metrics.config
    return (
        config.num_quota_samples,
        config.window_ms,
        config.filter_expected_items,
        float(config.filter_false_positive_rate),
        make_id_hasher(config.hash_key)(0),
        registry.samples,
        registry.time_window_ms,
    )


def _due_order(manager: ProducerIdQuotaManager) -> dict[str, tuple[int, int]]:
    """User -> (due time, sequence) of its live heap entry (entries of states no longer tracked are stale)."""
    users = manager._users
    return {user: (due, seq) for due, seq, user, state in manager._due if users.get(user) is state}


def export_producer_ids(
    manager: ProducerIdQuotaManager, owns: Callable[[str], bool] | None = None
) -> ProducerIdSnapshot:
    """A copy of the state of every tracked user whose routing key ``owns`` accepts (every user without
    ``owns``), in ``cleanup``'s order. Nothing changes in ``manager``."""
    due = _due_order(manager)
    owned = [(due[user], user, state) for user, state in manager._users.items() if owns is None or owns(user)]
    owned.sort(key=lambda entry: entry[0])
    users = []
    for (due_ms, _), user, state in owned:
        bucket = state.tokens.stat
        throttle = state.throttle_sensor
        throttle_time = None
        if throttle is not None:
            for metric in throttle.metrics:
                if isinstance(metric.stat, Avg):
                    throttle_time = SampledState.of(metric.stat)
        users.append(
            ProducerIdUser(
                user,
                due_ms,
                state.quota_sensor.last_record_time_ms,
                float(bucket.tokens),
                bucket.last_update_ms,
                SampledState.of(state.rate.stat),
                None if throttle is None else throttle.last_record_time_ms,
                throttle_time,
                state.filter.export_state(),
            )
        )
    return ProducerIdSnapshot(*_settings(manager), tuple(users))


def _drop(manager: ProducerIdQuotaManager, user: str, state: _UserState) -> None:
    """Forget a tracked user as ``cleanup`` does (its heap entry is left stale: see ``_prune_heap``)."""
    del manager._users[user]
    manager.metrics.remove_sensor(state.quota_sensor.name)
    if state.throttle_sensor is not None:
        manager.metrics.remove_sensor(state.throttle_sensor.name)


def _prune_heap(manager: ProducerIdQuotaManager) -> None:
    """Drop the heap entries of states no longer tracked (they hold the states' filters)."""
    users = manager._users
    due = [entry for entry in manager._due if users.get(entry[2]) is entry[3]]
    heapq.heapify(due)  # the same (due, sequence) keys: cleanup's order of the users kept is unchanged
    manager._due = due


def forget_producer_ids(manager: ProducerIdQuotaManager, owns: Callable[[str], bool]) -> int:
    """Forget every tracked user whose routing key ``owns`` accepts: state, filters, heap entry and sensors
    (with their metrics, so the giver stops reporting them). The number of users forgotten."""
    owned = [(user, state) for user, state in manager._users.items() if owns(user)]
    for user, state in owned:
        _drop(manager, user, state)
    if owned:
        _prune_heap(manager)
    return len(owned)


def _check(manager: ProducerIdQuotaManager, snapshot: object) -> None:
    """ValueError unless ``snapshot`` fits ``manager``: the import then cannot fail half-way."""
    if not isinstance(snapshot, ProducerIdSnapshot):
        raise ValueError(f"expected a ProducerIdSnapshot, got {type(snapshot).__name__}")
    if snapshot.version != PRODUCER_ID_STATE_VERSION:
        raise ValueError(f"producer-id snapshot of version {snapshot.version!r}, expected {PRODUCER_ID_STATE_VERSION}")
    exported = (
        snapshot.samples,
        snapshot.window_ms,
        snapshot.expected_items,
        snapshot.false_positive_rate,
        snapshot.hash_fingerprint,
        snapshot.registry_samples,
        snapshot.registry_window_ms,
    )
    here = _settings(manager)
    if exported != here:
        raise ValueError(
            "producer-id snapshot of other settings (window, filter shape, hash key or registry window) "
            f"than this manager's: {exported[:4]}, {exported[5:]} against {here[:4]}, {here[5:]}"
        )
    if not isinstance(snapshot.users, tuple):
        raise ValueError("producer-id snapshot: users must be a tuple")
    config = manager.config
    probe = TimedBloomFilter(
        config.filter_expected_items, config.filter_false_positive_rate, config.window_ms, hash_key=config.hash_key
    )
    registry_samples = manager.metrics.config.samples
    seen = set()
    for entry in snapshot.users:
        if not isinstance(entry, ProducerIdUser):
            raise ValueError(f"producer-id snapshot: expected ProducerIdUser entries, got {type(entry).__name__}")
        user = check_user(entry.user)
        if user in seen:
            raise ValueError(f"producer-id snapshot: user {user!r} given twice")
        seen.add(user)
        where = f"producer-id snapshot: user {user!r}"
        if not all(type(t) is int for t in (entry.due_ms, entry.last_update_ms)):
            raise ValueError(f"{where}: times must be ints")
        check_tokens(where, entry.tokens)
        SampledState.check_sensor(where, entry.last_record_ms, entry.rate, config.num_quota_samples, "rate")
        if entry.throttle_last_record_ms is not None:
            SampledState.check_sensor(
                where, entry.throttle_last_record_ms, entry.throttle_time, registry_samples, "throttle-time"
            )
        if not isinstance(entry.filters, tuple) or len(entry.filters) != 4:
            raise ValueError(f"{where}: filters must be a 4-tuple")
        probe.check_state(*entry.filters)


def import_producer_ids(manager: ProducerIdQuotaManager, snapshot: ProducerIdSnapshot, now_ms: int) -> int:
    """Put ``export_producer_ids``'s users into ``manager`` (built from the same config; it may track other
    users). A user tracked already is replaced. The whole snapshot is checked first: one that does not fit
    raises ValueError and changes nothing. The number of users imported."""
    _check(manager, snapshot)
    metrics = manager.metrics
    registry_samples = metrics.config.samples
    samples = manager.config.num_quota_samples
    imported = []
    for entry in snapshot.users:
        user = entry.user
        old = manager._users.get(user)
        if old is not None:
            _drop(manager, user, old)
        # the user's sensors and filter, made as the manager makes them, then given the exported state; the
        # heap entry _new_state pushes is replaced below
        state = manager._new_state(user, manager.quota(user), now_ms)  # type: ignore[arg-type]
        state.filter.restore_state(*entry.filters)
        state.quota_sensor.last_record_time_ms = entry.last_record_ms
        entry.rate.restore_into(state.rate.stat, samples)
        bucket = state.tokens.stat
        bucket.tokens, bucket.last_update_ms = entry.tokens, entry.last_update_ms
        if entry.throttle_last_record_ms is not None:
            tags = {USER_TAG: sanitize(user)}
            throttle = state.throttle_sensor = metrics.sensor(f"{GROUP}ThrottleTime-{tags[USER_TAG]}", now_ms=now_ms)
            avg = Avg()
            throttle.add(metrics.metric_name(_THROTTLE_METRIC[0], GROUP, _THROTTLE_METRIC[1], tags), avg)
            entry.throttle_time.restore_into(avg, registry_samples)  # type: ignore[union-attr]
            throttle.last_record_time_ms = entry.throttle_last_record_ms
        imported.append((user, state, entry.due_ms))
    if imported:
        fresh = {id(state) for _, state, _ in imported}
        manager._due = [entry for entry in manager._due if id(entry[3]) not in fresh]
        _prune_heap(manager)  # also drops the entries of the states replaced
        for user, state, due_ms in imported:  # in the snapshot's order: cleanup's order among them is kept
            manager._schedule(user, state, due_ms)
    return len(imported)
