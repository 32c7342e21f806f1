"""Client instances (KIP-714): one per client process, keyed by the broker-assigned Uuid.

``ClientMetricsInstance`` is Kafka's class of that name: the resolved subscription, the gating
timestamps and the terminating flag. ``ClientInstanceCache`` replaces Kafka's 16,384-entry LRU cache
plus one timer task per instance. Kafka's cap fills under connection churn and then evicts clients
that are still pushing, which answers their next push with UNKNOWN_SUBSCRIPTION_ID; here the bound is
a memory budget (a million instances take well under 1 GiB), expiry is a sweep the owner calls with
``now_ms``, and eviction past the budget is least-recently-used and counted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import re2

from ..errors import Errors
from ..kafka_uuid import Uuid
from ._configs import (
    CLIENT_ID,
    CLIENT_INSTANCE_ID,
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    CLIENT_SOURCE_ADDRESS,
    CLIENT_SOURCE_PORT,
    matches,
)
from ._exporter import RequestContext
from ._subscription import ResolvedSubscription

__all__ = [
    "ESTIMATED_INSTANCE_BYTES",
    "ESTIMATED_LABELS_BYTES",
    "ClientInstanceCache",
    "ClientMetricsInstance",
    "ClientMetricsInstanceMetadata",
]

#: The cost of one live instance (instance, metadata, Uuid, the index, expiry and connection entries)
#: apart from its per-client strings, whose lengths are added. Set from bench/telemetry.py: at a
#: million instances the process grew by 903 bytes per instance (RSS, allocator slack and dict
#: growth included; tracemalloc sees about 560); the estimate comes to about 920 with typical strings.
ESTIMATED_INSTANCE_BYTES = 860
#: What an instance's first push adds (``ClientMetricsInstance.resource_labels``) apart from twice its labels'
#: values: the broker's resource attributes as a dict, their OTLP encoding for the merge, and the archive's
#: encoded record labels in ``labels_memo``. Measured with /proc RSS over 100,000 instances pushing once each
#: (the archive on, as in every shard with a data directory): about 2,050 bytes an instance with typical values.
ESTIMATED_LABELS_BYTES = 1_900

_SHARED_STRINGS_MAX = 65_536


class _StringPool:
    """Shares equal strings that many clients send (software name and version, principal).

    Bounded, so a stream of distinct values cannot grow it without limit: once full, new values
    are kept as they are.
    """

    __slots__ = ("_pool",)

    def __init__(self) -> None:
        self._pool: dict[str, str] = {}

    def __call__(self, s: str | None) -> str | None:
        if s is None:
            return None
        shared = self._pool.get(s)
        if shared is not None:
            return shared
        if len(self._pool) < _SHARED_STRINGS_MAX:
            self._pool[s] = s
        return s


class ClientMetricsInstanceMetadata:
    """The attributes subscriptions match on, taken from the connection (Kafka's class of that name).

    The client instance id is kept as the Uuid and rendered only when a selector asks for it.
    """

    __slots__ = (
        "client_id",
        "client_instance_id",
        "client_software_name",
        "client_software_version",
        "client_source_address",
        "client_source_port",
        "principal",
    )

    def __init__(
        self,
        client_instance_id: Uuid,
        client_id: str | None,
        client_software_name: str | None,
        client_software_version: str | None,
        client_source_address: str | None,
        client_source_port: str | None,
        principal: str | None,
    ) -> None:
        self.client_instance_id = client_instance_id
        self.client_id = client_id
        self.client_software_name = client_software_name
        self.client_software_version = client_software_version
        self.client_source_address = client_source_address
        self.client_source_port = client_source_port
        self.principal = principal

    @classmethod
    def from_context(
        cls, client_instance_id: Uuid, context: RequestContext, pool: _StringPool | None = None
    ) -> ClientMetricsInstanceMetadata:
        share = pool if pool is not None else (lambda s: s)
        return cls(
            client_instance_id,
            context.client_id,
            share(context.client_software_name),
            share(context.client_software_version),
            context.client_source_address,
            None if context.client_source_port is None else str(context.client_source_port),
            share(context.principal),
        )

    def get(self, key: str, default: str | None = None) -> str | None:
        """The attribute a ``match`` selector names (Kafka's attributesMap lookup)."""
        if key == CLIENT_INSTANCE_ID:
            return str(self.client_instance_id)
        if key in _SELECTOR_SLOTS:
            value = getattr(self, key)
            return default if value is None else value
        return default

    def attributes(self) -> dict[str, str | None]:
        """Every matchable attribute, as Kafka's attributesMap."""
        return {key: self.get(key) for key in (CLIENT_INSTANCE_ID, *_SELECTOR_SLOTS)}

    def is_match(self, patterns: Mapping[str, re2._Regexp]) -> bool:
        """Kafka's ``isMatch`` over this client's attributes (see ``_configs.matches``)."""
        return matches(patterns, self)


_SELECTOR_SLOTS = (CLIENT_ID, CLIENT_SOFTWARE_NAME, CLIENT_SOFTWARE_VERSION, CLIENT_SOURCE_ADDRESS, CLIENT_SOURCE_PORT)


class ClientMetricsInstance:
    """One client instance and its gating state (Kafka's ``ClientMetricsInstance``)."""

    __slots__ = (
        "client_instance_id",
        "connection_id",
        "expires_at_ms",
        "instance_metadata",
        "labels_bytes",
        "last_get_request_ms",
        "last_known_error",
        "last_push_request_ms",
        "resource_labels",
        "subscription",
        "subscription_id",
        "subscription_version",
        "terminating",
    )

    def __init__(
        self,
        client_instance_id: Uuid,
        instance_metadata: ClientMetricsInstanceMetadata,
        subscription: ResolvedSubscription,
        subscription_version: int,
        connection_id: str,
    ) -> None:
        self.client_instance_id = client_instance_id
        self.instance_metadata = instance_metadata
        self.subscription = subscription
        self.subscription_id = subscription.subscription_id(client_instance_id)
        self.subscription_version = subscription_version
        self.connection_id = connection_id
        # Java's long fields start at 0: the first get or push is accepted at any realistic clock.
        self.last_get_request_ms = 0
        self.last_push_request_ms = 0
        self.terminating = False
        self.last_known_error = Errors.NONE
        self.expires_at_ms = 0
        #: the broker's resource attributes of this instance, their merge into a push (with their encoding,
        #: ``prepare_resource_attributes``) and the exporters' ``labels_memo``; built by the manager on its first
        #: push; ``labels_bytes`` is their estimate, in the cache's budget from then on (``add_labels_bytes``)
        self.resource_labels: Any = None
        self.labels_bytes = 0

    @property
    def push_interval_ms(self) -> int:
        return self.subscription.push_interval_ms

    @property
    def metrics(self) -> tuple[str, ...]:
        return self.subscription.metrics

    def maybe_update_get_request_timestamp(self, now_ms: int) -> bool:
        """A get is accepted once a push interval has passed since the last get or push."""
        if now_ms - max(self.last_get_request_ms, self.last_push_request_ms) >= self.push_interval_ms:
            self.last_get_request_ms = now_ms
            return True
        return False

    def maybe_update_push_request_timestamp(self, now_ms: int) -> bool:
        """A push is accepted right after a get (clients jitter their first push), else once per interval."""
        can_accept = self.last_get_request_ms > self.last_push_request_ms
        if not can_accept:
            can_accept = now_ms - self.last_push_request_ms >= self.push_interval_ms
        if can_accept:
            self.last_push_request_ms = now_ms
        return can_accept

    def estimated_bytes(self) -> int:
        md = self.instance_metadata
        return (
            ESTIMATED_INSTANCE_BYTES
            + len(self.connection_id)
            + len(md.client_id or "")
            + len(md.client_source_address or "")
            + self.labels_bytes
        )

    def __repr__(self) -> str:
        return (
            f"ClientMetricsInstance({self.client_instance_id}, subscription_id={self.subscription_id}, "
            f"push_interval_ms={self.push_interval_ms}, terminating={self.terminating})"
        )


@dataclass(frozen=True, slots=True)
class Removal:
    """An instance that left the cache, and why ("expired", "evicted", "disconnected")."""

    client_instance_id: Uuid
    reason: str


class ClientInstanceCache:
    """Live client instances with expiry and a memory budget.

    Instances are kept in one OrderedDict per expiry duration (``max(60 s, 3 x push interval)``), in
    order of their last request, so both the expiry sweep and the least-recently-used eviction look
    only at the front of a few queues.
    """

    def __init__(self, *, memory_budget_bytes: int, cache_expiry_ms: int) -> None:
        if memory_budget_bytes < ESTIMATED_INSTANCE_BYTES:
            raise ValueError(f"memory_budget_bytes must be at least {ESTIMATED_INSTANCE_BYTES}")
        self.memory_budget_bytes = memory_budget_bytes
        self.cache_expiry_ms = cache_expiry_ms
        self._instances: dict[Uuid, ClientMetricsInstance] = {}
        self._by_duration: dict[int, OrderedDict[Uuid, ClientMetricsInstance]] = {}
        self._connections: dict[str, Uuid] = {}
        self.bytes_used = 0
        self.evictions = 0
        self.expirations = 0
        self.strings = _StringPool()

    def __len__(self) -> int:
        return len(self._instances)

    def __contains__(self, client_instance_id: object) -> bool:
        return client_instance_id in self._instances

    def __iter__(self) -> Iterator[ClientMetricsInstance]:
        return iter(self._instances.values())

    def get(self, client_instance_id: Uuid) -> ClientMetricsInstance | None:
        return self._instances.get(client_instance_id)

    def connection_instance(self, connection_id: str) -> Uuid | None:
        return self._connections.get(connection_id)

    def expiry_ms(self, instance: ClientMetricsInstance) -> int:
        return max(self.cache_expiry_ms, 3 * instance.push_interval_ms)

    def put(self, instance: ClientMetricsInstance, now_ms: int) -> list[Removal]:
        """Add or replace an instance and touch it; returns the instances evicted to stay in budget."""
        old = self._instances.get(instance.client_instance_id)
        if old is not None:
            self._unlink(old)
        self._instances[instance.client_instance_id] = instance
        self.bytes_used += instance.estimated_bytes()
        self._connections[instance.connection_id] = instance.client_instance_id
        self._enqueue(instance, now_ms)
        return self._evict_over_budget(exclude=instance)

    def add_labels_bytes(self, instance: ClientMetricsInstance, nbytes: int) -> list[Removal]:
        """``instance`` holds ``nbytes`` more (its labels, built on its first push): counted in the budget from now
        on; returns the instances evicted to stay in it (never this one)."""
        if self._instances.get(instance.client_instance_id) is instance:
            self.bytes_used += nbytes
        instance.labels_bytes += nbytes
        return self._evict_over_budget(exclude=instance)

    def _evict_over_budget(self, exclude: ClientMetricsInstance) -> list[Removal]:
        evicted: list[Removal] = []
        while self.bytes_used > self.memory_budget_bytes and len(self._instances) > 1:
            victim = self._least_recently_used(exclude=exclude)
            if victim is None:
                break
            self._unlink(victim)
            self.evictions += 1
            evicted.append(Removal(victim.client_instance_id, "evicted"))
        return evicted

    def touch(self, instance: ClientMetricsInstance, connection_id: str, now_ms: int) -> None:
        """A request from this instance: push its expiry out and move it to the back of its queue.

        A request on another connection (the client reconnected) moves the connection mapping, so a
        disconnect of the new connection evicts it.
        """
        if connection_id != instance.connection_id:
            if self._connections.get(instance.connection_id) == instance.client_instance_id:
                del self._connections[instance.connection_id]
            self.bytes_used += len(connection_id) - len(instance.connection_id)
            instance.connection_id = connection_id
            self._connections[connection_id] = instance.client_instance_id
        self._dequeue(instance)
        self._enqueue(instance, now_ms)

    def remove(self, client_instance_id: Uuid) -> ClientMetricsInstance | None:
        instance = self._instances.get(client_instance_id)
        if instance is not None:
            self._unlink(instance)
        return instance

    def disconnect(self, connection_id: str) -> ClientMetricsInstance | None:
        """The connection closed: forget the instance last seen on it (Kafka's disconnect listener)."""
        client_instance_id = self._connections.pop(connection_id, None)
        if client_instance_id is None:
            return None
        return self.remove(client_instance_id)

    def expire(self, now_ms: int) -> list[Removal]:
        """Remove every instance whose last request is older than its expiry; the removed ids."""
        removed: list[Removal] = []
        for queue in list(self._by_duration.values()):
            while queue:
                instance = next(iter(queue.values()))
                if instance.expires_at_ms > now_ms:
                    break
                self._unlink(instance)
                self.expirations += 1
                removed.append(Removal(instance.client_instance_id, "expired"))
        return removed

    # --- internals ---------------------------------------------------------------------------------
    def _enqueue(self, instance: ClientMetricsInstance, now_ms: int) -> None:
        duration = self.expiry_ms(instance)
        instance.expires_at_ms = now_ms + duration
        queue = self._by_duration.get(duration)
        if queue is None:
            queue = self._by_duration[duration] = OrderedDict()
        queue[instance.client_instance_id] = instance

    def _dequeue(self, instance: ClientMetricsInstance) -> None:
        duration = self.expiry_ms(instance)
        queue = self._by_duration.get(duration)
        if queue is not None:
            queue.pop(instance.client_instance_id, None)
            if not queue:
                del self._by_duration[duration]

    def _unlink(self, instance: ClientMetricsInstance) -> None:
        self._dequeue(instance)
        if self._instances.get(instance.client_instance_id) is instance:
            del self._instances[instance.client_instance_id]
            self.bytes_used -= instance.estimated_bytes()
        if self._connections.get(instance.connection_id) == instance.client_instance_id:
            del self._connections[instance.connection_id]

    def _least_recently_used(self, exclude: ClientMetricsInstance) -> ClientMetricsInstance | None:
        oldest: ClientMetricsInstance | None = None
        oldest_touch = 0
        for duration, queue in self._by_duration.items():
            for instance in queue.values():
                if instance is exclude:
                    continue
                touched = instance.expires_at_ms - duration
                if oldest is None or touched < oldest_touch:
                    oldest, oldest_touch = instance, touched
                break
        return oldest
