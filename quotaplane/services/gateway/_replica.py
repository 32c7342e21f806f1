"""The gateway's replica of the config: which sensor an item belongs to, resolved as a shard resolves it.

Kafka decides which clients share a sensor from the *metric tags* (``DefaultQuotaCallback.quotaMetricTags``:
``(user, client-id)``, ``(user, "")`` or ``("", client-id)`` depending on which quota entities exist). The
gateway keeps a replica of the controller's image, polled with ``read_from``, and quota managers bound to
it by a ``ManagerBinding`` (used only for their callbacks), so it resolves every item's tags exactly as the
shard that owns the sensor will, at a config offset it sends along (see ``_routing``). The same managers
answer Kafka's ``getMaxValueInQuotaWindow`` (a proxy caps Fetch ``max_bytes`` with it) without a shard call.

Events reach the replica two ways, both through its ``ConfigFollower`` (same checks, same apply code, under
``lock``): polled from the controller, and handed over by a shard that refused a batch because it is ahead
(:meth:`ConfigReplica.apply_handed`), which keeps usage flowing while the controller restarts.
"""

from __future__ import annotations

import itertools
import logging
import operator
import sys
import threading
from collections.abc import Sequence
from typing import Any

from quotaplane.actors import Bindings, ConfigFollower, ray_get
from quotaplane.config import (
    SHARD_COUNT_CONFIG,
    ConfigDelta,
    ConfigImage,
    LeaseSettings,
    ManagerBinding,
    lease_settings,
    shard_count,
    shard_count_offset,
    startup_configs,
)
from quotaplane.quota import CLIENT_ID_TAG, USER_TAG, ProducerIdQuotaManager, build_quota_managers, sanitize

from ._checks import Unavailable, wall_clock_ms

__all__ = ["DOUBLE_MAX_VALUE", "ConfigReplica"]

log = logging.getLogger(__name__)

#: A shard key whose quota is not in the cache yet (None is an answer: no quota applies).
_UNRESOLVED = object()
#: What an item is resolved by: its ``(quota type, user, client_id)``.
_TAGS_KEY = operator.itemgetter(0, 1, 2)

#: Java's Double.MAX_VALUE: Kafka's ``getMaxValueInQuotaWindow`` when no quota applies (quotas disabled, or
#: none for the client's metric tags), as the core's ``ClientQuotaManager.max_value_in_quota_window``.
DOUBLE_MAX_VALUE = sys.float_info.max


class ConfigReplica:
    """The controller's image, kept current by polling ``read_from``; resolves items' metric tags.

    Quota managers are built from the image as a shard builds them and kept in step by a
    ``ManagerBinding``, so their ``DefaultQuotaCallback`` holds exactly the quotas the shards hold; only the
    callbacks' ``metric_tags`` and ``quota_limit`` are used (no sensor is ever created here), and of a
    ``ProducerIdQuotaManager`` bound the same way only its configured ``quotas()``. Thread-safe:
    ``lock`` guards the image and callbacks; :meth:`resolve` and :meth:`max_values_in_quota_window` read the
    offset and all answers of a batch under it.
    """

    def __init__(self, controller: Any, *, timeout_s: float = 30.0, max_events: int = 10_000) -> None:
        self._controller = controller
        self._timeout_s = timeout_s
        self.lock = threading.RLock()
        self.polls = 0
        #: (quota type, user, client id) -> shard key, valid at ``_keys_offset`` only: ``resolve`` empties it, under
        #: ``lock``, as soon as the image has moved (the follower applies events under the same lock), so no
        #: batch is ever stamped with an offset and routed by keys of an older one
        self._keys: dict[tuple[str, str, str], str] = {}
        self._keys_offset = -1
        self._enabled: tuple[int, dict[str, bool]] | None = None
        self._lease_settings: tuple[int, LeaseSettings] | None = None
        #: shard key -> the quota it resolves to, valid at ``_bounds_offset`` only (as ``_keys``)
        self._bounds: dict[str, float | None] = {}
        self._bounds_offset = -1
        # no tail: nothing asks a gateway for the events it applied
        self.follower = ConfigFollower(self._call, max_events=max_events, lock=self.lock, tail_events=0)
        self.follower.start()
        startup = startup_configs(self.image)
        self.quotas = build_quota_managers(startup.quota, now_ms=wall_clock_ms())
        self._callbacks = {
            "PRODUCE": self.quotas.produce.quota_callback,
            "FETCH": self.quotas.fetch.quota_callback,
            "REQUEST": self.quotas.request.quota_callback,
            "CONTROLLER_MUTATION": self.quotas.controller_mutation.quota_callback,
        }
        #: only its bounds are used (``producer_ids_rate`` configured at all); it never records
        self.producer_ids = ProducerIdQuotaManager(startup.producer_ids)
        self.binding = ManagerBinding(quotas=self.quotas, producer_ids=self.producer_ids)
        self.binding.load(self.image)
        #: ``(offset from which it holds, shard count)`` of the reshards this replica applied, oldest first
        self.shard_counts: list[tuple[int, int]] = []
        self._note_shard_count(self.image)
        self.follower.binding = Bindings(self.binding, self)

    def _call(self, method: str, *args: Any) -> Any:
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray_get(getattr(self._controller, method).remote(*args), self._timeout_s)
        except (RayActorError, GetTimeoutError) as e:
            raise Unavailable(f"the config controller is unavailable: {str(e).splitlines()[0]}") from None

    @property
    def image(self) -> ConfigImage:
        return self.follower.image

    @property
    def offset(self) -> int:
        """The next offset this replica expects (= events applied)."""
        return self.image.end_offset

    def _pull(self) -> bool:
        """Apply everything the controller has past our offset; True if anything changed (the controller is
        asked without holding ``lock``, so resolution goes on meanwhile)."""
        return self.follower.catch_up()

    def shard_count_at(self, offset: int) -> int | None:
        """The shard count that holds at ``offset`` (a batch's routed offset): the last reshard at or before it
        (None: no count logged by then). Offsets older than the reshards kept get the oldest kept count: a
        batch that old is refused by the shards (they are past it) and routed again."""
        counts = self.shard_counts
        for begin, count in reversed(counts):
            if begin <= offset:
                return count
        return counts[0][1] if counts and offset >= counts[0][0] else None

    def _note_shard_count(self, image: ConfigImage) -> None:
        count = shard_count(image)
        if count is not None:
            self.shard_counts = [*self.shard_counts[-15:], (shard_count_offset(image), count)]

    # bound to the log beside the managers (``Bindings``): a reshard's event, at the offset it holds from
    def apply(self, delta: ConfigDelta, image: ConfigImage) -> None:
        if any(getattr(change, "name", None) == SHARD_COUNT_CONFIG for change in delta.changes):
            self._note_shard_count(image)

    def apply_changes(self, changes: Sequence[Any], image: ConfigImage) -> None:
        if any(getattr(change, "name", None) == SHARD_COUNT_CONFIG for change in changes):
            self._note_shard_count(image)

    def poll(self) -> bool:
        """One round: apply the controller's new events, if any."""
        self.polls += 1
        return self._pull()

    def catch_up(self, target: int) -> None:
        """Reach at least ``target`` (a shard said it is there)."""
        if self.image.end_offset < target:
            self._pull()

    def apply_handed(self, batches: Sequence[tuple[int, bytes]], target: int) -> bool:
        """Apply the log batches a shard at ``target`` handed over with its refusal (``ShardActor.serve_at``):
        True if the replica now reaches ``target`` without the controller. False, with nothing applied, when
        they do not connect to this replica's offset or are malformed (logged: a shard should never send
        that); the caller then reads the controller, as without them."""
        try:
            return self.follower.apply_handed(batches, target)
        except ValueError as e:
            log.warning("config events handed over by a shard at %d were refused: %s", target, e)
            return False

    def resolve(self, items: Sequence[tuple[Any, ...]]) -> tuple[int, list[str]]:
        """The offset and each item's shard key ``type NUL user-tag NUL client-id-tag``; an item starts
        with ``(quota type, user, client_id)``: PRODUCE, FETCH, REQUEST or CONTROLLER_MUTATION."""
        with self.lock:
            callbacks = self._callbacks
            cache = self._keys
            offset = self.image.end_offset
            if offset != self._keys_offset or len(cache) > 500_000:
                cache = self._keys = {}
                self._keys_offset = offset
            get = cache.get
            keys = list(map(get, map(_TAGS_KEY, items)))  # C loops: no bytecode per item
            if None in keys:  # first sight of some (type, user, client id) at this offset
                for index, key in enumerate(keys):
                    if key is None:
                        quota_type, user, client_id = found = items[index][:3]
                        key = cache.get(found)
                        if key is None:
                            user_tag, client_tag = callbacks[quota_type].metric_tags(sanitize(user), client_id)
                            key = cache[found] = f"{quota_type}\x00{user_tag}\x00{client_tag}"
                        keys[index] = key
            return offset, keys

    def lease_settings(self) -> LeaseSettings:
        """The leased-budget settings of the image now (``quotaplane.lease.*``), cached per offset."""
        with self.lock:
            offset = self.image.end_offset
            cached = self._lease_settings
            if cached is None or cached[0] != offset:
                cached = self._lease_settings = (offset, lease_settings(self.image))
            return cached[1]

    def resolve_bounds(self, items: Sequence[tuple[Any, ...]]) -> tuple[int, list[str], list[float | None]]:
        """``resolve`` and, per item, the quota its metric tags resolve to (None: none applies, or quotas of
        its type are disabled): what a leased share is cut from. One offset for all of them."""
        with self.lock:
            offset, keys = self.resolve(items)
            if self._bounds_offset != offset or len(self._bounds) > 500_000:
                self._bounds = {}
                self._bounds_offset = offset
            cache = self._bounds
            bounds: list[Any] = list(map(cache.get, keys, itertools.repeat(_UNRESOLVED)))  # C loops
            if _UNRESOLVED in bounds:
                for index, key in enumerate(keys):
                    if bounds[index] is _UNRESOLVED:
                        bounds[index] = cache[key] = self._bound_of(key)
            return offset, keys, bounds

    def _bound_of(self, key: str) -> float | None:
        quota_type, user_tag, client_tag = key.split("\x00")  # names with NUL never pass the checks
        manager = self.quotas.client_manager(quota_type)
        if not manager.quotas_enabled():
            return None
        tags = {USER_TAG: user_tag, CLIENT_ID_TAG: client_tag}
        return self._callbacks[quota_type].quota_limit(manager.client_quota_type, tags)

    def enabled_quota_types(self) -> tuple[int, dict[str, bool]]:
        """The offset and, per quota type, whether any quota of it is configured (Kafka's ``quotasEnabled``;
        ``producer_ids``: any ``producer_ids_rate``), cached per offset."""
        with self.lock:
            offset = self.image.end_offset
            cached = self._enabled
            if cached is None or cached[0] != offset:
                quotas = self.quotas
                cached = self._enabled = (
                    offset,
                    {
                        "produce": quotas.produce.quotas_enabled(),
                        "fetch": quotas.fetch.quotas_enabled(),
                        "request": quotas.request.quotas_enabled(),
                        "controller_mutation": quotas.controller_mutation.quotas_enabled(),
                        "producer_ids": bool(self.producer_ids.quotas()),
                    },
                )
            return cached

    def max_values_in_quota_window(self, items: Sequence[tuple[Any, ...]]) -> tuple[int, list[float]]:
        """The offset and Kafka's ``ClientQuotaManager.getMaxValueInQuotaWindow`` of each item, an item starting
        with ``(quota type, user, client_id)``, PRODUCE or FETCH: ``limit * (samples - 1) * window seconds`` of
        the quota its metric tags resolve to, or :data:`DOUBLE_MAX_VALUE` when quotas are disabled or none
        applies. Kafka resolves the tags through the client's sensors; the tags are the same without them."""
        with self.lock:
            managers = {"PRODUCE": self.quotas.produce, "FETCH": self.quotas.fetch}
            callbacks = self._callbacks
            values = []
            append = values.append
            for quota_type, user, client_id, *_ in items:
                manager = managers[quota_type]
                if not manager.quotas_enabled():
                    append(DOUBLE_MAX_VALUE)
                    continue
                callback = callbacks[quota_type]
                user_tag, client_tag = callback.metric_tags(sanitize(user), client_id)
                limit = callback.quota_limit(manager.client_quota_type, {USER_TAG: user_tag, CLIENT_ID_TAG: client_tag})
                if limit is None:
                    append(DOUBLE_MAX_VALUE)
                else:
                    config = manager.config
                    append(limit * (config.num_quota_samples - 1) * config.quota_window_size_seconds)
            return self.image.end_offset, values
