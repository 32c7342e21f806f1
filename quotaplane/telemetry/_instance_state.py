"""The client instances of a ``ClientMetricsManager`` copied out and into another (a reshard's hand-over).

Telemetry state is keyed by client instance id (the gateway routes by ``str(client_instance_id)``, see
:func:`instance_key`). When a reshard moves a key, the giver exports the instance (:func:`export_instances`),
forgets it (:func:`forget_instances`) and the receiver imports it (:func:`import_instances`) before it
answers any request of that client. The receiver then answers GetTelemetrySubscriptions and PushTelemetry
as the giver would have: the same subscription id, the same THROTTLING_QUOTA_EXCEEDED for a request
within the push interval (the last get and push times move), the same INVALID_REQUEST after a terminating
push, the same exemption from the get throttle after an UNKNOWN_SUBSCRIPTION_ID or
UNSUPPORTED_COMPRESSION_TYPE (the last error moves), and the instance expires at the same time.

**What moves, per instance:** the id, the connection's attributes (what subscriptions match on), the
connection it was last seen on and whether a disconnect of that connection evicts it, the last get / push
times, the terminating flag, the last error, its last request time (expiry is that plus
``max(cache expiry, 3 x push interval)``), and the subscription it was resolved to, as plain values
(metrics, interval, CRC; each distinct one once). The subscriptions themselves are config: both sides have
them from the log, so none is copied. The snapshot carries a fingerprint of the giver's subscriptions (name,
metrics, interval, match, in Kafka's map order). If the receiver's are the same, an instance that was
current on the giver is current on the receiver and keeps its resolution (shared with the receiver's
equal resolution object). If they differ, every imported instance is resolved again at its next request,
as any instance is after a subscription change (Kafka's ``subscriptionUpdateVersion``); an instance already
out of date on the giver is out of date on the receiver either way. The subscription version itself is a
counter local to each manager, so it never crosses.

**Order.** The cache keeps instances in order of their last request per expiry duration; the expiry sweep
and the least-recently-used eviction look at the front of each queue. Imported instances are merged into
the receiver's queues by their last request time, each side keeping its own order (on a tie the receiver's
instance comes first), which is the order one manager that saw every request would hold when request
times do not go backwards.

**Not moved:** the manager's aggregate stats (throttle, unknown subscription and plugin counts are per
shard, not per client) and the resource-attribute labels an instance builds on its first push (derived
from its attributes and the receiver's ``node_id``; rebuilt at the next push). Imports can exceed the
receiver's memory budget: least-recently-used instances are evicted then, as a new instance would evict
them, and counted in ``evictions``.

An import replaces an instance the receiver already holds under the same id. A snapshot that does not fit
(another layout version, another cache expiry setting, columns of different lengths, a reserved or repeated
id, a bad value) raises ValueError before anything changes.
"""

from __future__ import annotations

import heapq
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import Errors
from ..kafka_uuid import RESERVED, Uuid
from ._instance import ClientInstanceCache, ClientMetricsInstance, ClientMetricsInstanceMetadata
from ._manager import ClientMetricsManager
from ._subscription import ResolvedSubscription, Subscriptions

__all__ = [
    "INSTANCE_STATE_VERSION",
    "InstanceSnapshot",
    "export_instances",
    "forget_instances",
    "import_instances",
    "instance_key",
    "subscriptions_fingerprint",
]

#: Bumped on any change of the snapshot's layout; a snapshot of another version is a ValueError.
INSTANCE_STATE_VERSION = 1

#: ``InstanceSnapshot.flags`` bits.
TERMINATING = 1
#: The instance was resolved against older subscriptions than the giver's current ones.
STALE = 2
#: A disconnect of the instance's connection evicts it (the cache maps the connection to it).
HOLDS_CONNECTION = 4
_FLAGS = TERMINATING | STALE | HOLDS_CONNECTION

_INT32 = (-(2**31), 2**31 - 1)
_ERROR_CODES = frozenset(int(e) for e in Errors)
#: Per-instance string columns: the connection, then ``ClientMetricsInstanceMetadata``'s attributes.
_STRING_COLUMNS = (
    "connection_ids",
    "client_ids",
    "software_names",
    "software_versions",
    "source_addresses",
    "source_ports",
    "principals",
)
_NUMBER_COLUMNS = ("resolutions", "touched", "last_get", "last_push", "errors", "flags")

#: ``(metrics, push_interval_ms, crc, kafka_exact)`` of a ``ResolvedSubscription``.
Resolution = tuple[tuple[str, ...], int, int, bool]
#: Per subscription, in Kafka's map order: ``(name, metrics, interval_ms, match)``.
Fingerprint = tuple[tuple[str, tuple[str, ...], int, tuple[str, ...]], ...]


def instance_key(client_instance_id: Uuid) -> str:
    """The routing key of a client instance, as the gateway computes it: Kafka's base64 form of the Uuid."""
    return str(client_instance_id)


def subscriptions_fingerprint(subscriptions: Subscriptions) -> Fingerprint:
    """What a resolution depends on: each subscription's name, metrics, interval and match, in map order."""
    return tuple((info.name, info.metrics, info.interval_ms, info.match) for info in subscriptions)


@dataclass(frozen=True, slots=True)
class InstanceSnapshot:
    """Client instances as columns: instance ``k`` is ``ids[16k:16k+16]`` and entry ``k`` of every column,
    in the giver's queue order (see the module docstring). Plain data: it pickles and crosses processes."""

    cache_expiry_ms: int
    subscriptions: Fingerprint
    #: the distinct resolutions; ``resolutions[k]`` indexes them
    resolved: tuple[Resolution, ...] = ()
    ids: bytes = b""
    resolutions: array = field(default_factory=lambda: array("q"))
    #: last request (ms): expiry is this plus the cache's expiry duration for the instance
    touched: array = field(default_factory=lambda: array("q"))
    last_get: array = field(default_factory=lambda: array("q"))
    last_push: array = field(default_factory=lambda: array("q"))
    errors: array = field(default_factory=lambda: array("q"))
    flags: array = field(default_factory=lambda: array("q"))
    connection_ids: list[str] = field(default_factory=list)
    client_ids: list[str | None] = field(default_factory=list)
    software_names: list[str | None] = field(default_factory=list)
    software_versions: list[str | None] = field(default_factory=list)
    source_addresses: list[str | None] = field(default_factory=list)
    source_ports: list[str | None] = field(default_factory=list)
    principals: list[str | None] = field(default_factory=list)
    version: int = INSTANCE_STATE_VERSION

    def __len__(self) -> int:
        return len(self.ids) // 16

    def client_instance_ids(self) -> list[Uuid]:
        return [Uuid(self.ids[at : at + 16]) for at in range(0, len(self.ids), 16)]

    def check(self) -> None:
        """ValueError unless the columns fit together and every value is one an instance can hold."""
        if self.version != INSTANCE_STATE_VERSION:
            raise ValueError(f"instance snapshot of version {self.version!r}, expected {INSTANCE_STATE_VERSION}")
        if not isinstance(self.ids, bytes) or len(self.ids) % 16:
            raise ValueError("instance snapshot: ids must be bytes, 16 per instance")
        n = len(self)
        for column in _NUMBER_COLUMNS:
            values = getattr(self, column)
            if not isinstance(values, array) or values.typecode != "q":
                raise ValueError(f"instance snapshot: column {column} must be an array of 'q'")
        for column in (*_NUMBER_COLUMNS, *_STRING_COLUMNS):
            if len(getattr(self, column)) != n:
                raise ValueError(f"instance snapshot: column {column} does not hold one entry per instance")
        ids = self.client_instance_ids()
        if len(set(ids)) != n:
            raise ValueError("instance snapshot: an instance id appears twice")
        if any(uuid in RESERVED for uuid in ids):
            raise ValueError("instance snapshot: a reserved instance id")
        for metrics, interval, crc, exact in self.resolved:
            if not (isinstance(metrics, tuple) and all(isinstance(m, str) for m in metrics)):
                raise ValueError("instance snapshot: a resolution's metrics must be a tuple of str")
            if type(interval) is not int or interval <= 0 or type(exact) is not bool:
                raise ValueError("instance snapshot: a resolution needs an interval > 0 and an exact flag")
            if type(crc) is not int or not _INT32[0] <= crc <= _INT32[1]:
                raise ValueError(f"instance snapshot: a resolution's CRC {crc!r} is not an int32")
        if n and not (min(self.resolutions) >= 0 and max(self.resolutions) < len(self.resolved)):
            raise ValueError("instance snapshot: a resolution index outside the resolutions")
        if any(code not in _ERROR_CODES for code in self.errors):
            raise ValueError("instance snapshot: an unknown error code")
        if n and not (min(self.flags) >= 0 and max(self.flags) <= _FLAGS):
            raise ValueError("instance snapshot: unknown flags")
        if not all(isinstance(c, str) and c for c in self.connection_ids):
            raise ValueError("instance snapshot: connection ids must be non-empty str")
        for column in _STRING_COLUMNS[1:]:
            if not all(v is None or isinstance(v, str) for v in getattr(self, column)):
                raise ValueError(f"instance snapshot: {column} must be str or None")


def export_instances(manager: ClientMetricsManager, owns: Callable[[str], bool]) -> InstanceSnapshot:
    """A copy of every instance whose routing key (:func:`instance_key`) ``owns`` accepts. Changes nothing."""
    cache = manager.instances
    version = manager.subscriptions.version
    connections = cache._connections
    index: dict[int, int] = {}  # id(resolution) -> its index: resolutions are shared objects
    resolved: list[Resolution] = []
    ids: list[bytes] = []
    numbers: dict[str, array] = {column: array("q") for column in _NUMBER_COLUMNS}
    strings: dict[str, list[Any]] = {column: [] for column in _STRING_COLUMNS}
    resolutions, touched, last_get, last_push, errors, flags = (numbers[column] for column in _NUMBER_COLUMNS)
    connection_ids, client_ids, names, versions, addresses, ports, principals = strings.values()
    for duration, queue in cache._by_duration.items():
        for uuid, instance in queue.items():
            if not owns(str(uuid)):
                continue
            sub = instance.subscription
            at = index.get(id(sub))
            if at is None:
                at = index[id(sub)] = len(resolved)
                resolved.append((sub.metrics, sub.push_interval_ms, sub.crc, sub.kafka_exact))
            md = instance.instance_metadata
            ids.append(uuid)
            resolutions.append(at)
            touched.append(instance.expires_at_ms - duration)
            last_get.append(instance.last_get_request_ms)
            last_push.append(instance.last_push_request_ms)
            errors.append(int(instance.last_known_error))
            flags.append(
                (TERMINATING if instance.terminating else 0)
                | (STALE if instance.subscription_version < version else 0)
                | (HOLDS_CONNECTION if connections.get(instance.connection_id) == uuid else 0)
            )
            connection_ids.append(instance.connection_id)
            client_ids.append(md.client_id)
            names.append(md.client_software_name)
            versions.append(md.client_software_version)
            addresses.append(md.client_source_address)
            ports.append(md.client_source_port)
            principals.append(md.principal)
    return InstanceSnapshot(
        cache.cache_expiry_ms,
        subscriptions_fingerprint(manager.subscriptions),
        tuple(resolved),
        b"".join(ids),
        **numbers,
        **strings,
    )


def forget_instances(manager: ClientMetricsManager, owns: Callable[[str], bool]) -> int:
    """Remove every instance whose routing key ``owns`` accepts (not counted as expired or evicted): the
    giver after a hand-over. The number removed."""
    cache = manager.instances
    doomed = [uuid for uuid in cache._instances if owns(str(uuid))]
    for uuid in doomed:
        cache.remove(uuid)
    return len(doomed)


def import_instances(manager: ClientMetricsManager, snapshot: InstanceSnapshot, now_ms: int) -> int:
    """Put ``export_instances``' instances into ``manager`` (same config; it may hold other instances and,
    under the same ids, loses them to the imported ones). ValueError, before any change, for a snapshot
    that does not fit. The number imported."""
    if not isinstance(snapshot, InstanceSnapshot):
        raise ValueError(f"expected an InstanceSnapshot, got {type(snapshot).__name__}")
    if type(now_ms) is not int or now_ms < 0:
        raise ValueError(f"now_ms must be an int >= 0, got {now_ms!r}")
    snapshot.check()
    cache = manager.instances
    if snapshot.cache_expiry_ms != cache.cache_expiry_ms:
        raise ValueError(
            f"instance snapshot taken with cache expiry {snapshot.cache_expiry_ms} ms, this manager has "
            f"{cache.cache_expiry_ms} ms"
        )
    subscriptions = manager.subscriptions
    same = snapshot.subscriptions == subscriptions_fingerprint(subscriptions)
    current, stale = subscriptions.version, subscriptions.version - 1
    resolutions = _intern(snapshot.resolved, subscriptions)
    share = cache.strings
    queues: dict[int, list[tuple[Any, ClientMetricsInstance]]] = {}
    holders: list[ClientMetricsInstance] = []
    for k, uuid in enumerate(snapshot.client_instance_ids()):
        metadata = ClientMetricsInstanceMetadata(
            uuid,
            snapshot.client_ids[k],
            share(snapshot.software_names[k]),
            share(snapshot.software_versions[k]),
            snapshot.source_addresses[k],
            snapshot.source_ports[k],
            share(snapshot.principals[k]),
        )
        flags = snapshot.flags[k]
        version = current if same and not flags & STALE else stale
        instance = ClientMetricsInstance(
            uuid, metadata, resolutions[snapshot.resolutions[k]], version, snapshot.connection_ids[k]
        )
        instance.last_get_request_ms = snapshot.last_get[k]
        instance.last_push_request_ms = snapshot.last_push[k]
        instance.terminating = bool(flags & TERMINATING)
        instance.last_known_error = Errors(snapshot.errors[k])
        duration = cache.expiry_ms(instance)
        instance.expires_at_ms = snapshot.touched[k] + duration
        queues.setdefault(duration, []).append((uuid, instance))
        if flags & HOLDS_CONNECTION:
            holders.append(instance)
    for _, instance in (entry for queue in queues.values() for entry in queue):
        if instance.client_instance_id in cache:
            cache.remove(instance.client_instance_id)
        cache._instances[instance.client_instance_id] = instance
        cache.bytes_used += instance.estimated_bytes()
    for instance in holders:
        _take_connection(cache, instance)
    for duration, entries in queues.items():
        _merge_queue(cache, duration, entries)
    _evict_over_budget(cache)
    return len(snapshot)


def _intern(resolved: Iterable[Resolution], subscriptions: Subscriptions) -> list[ResolvedSubscription]:
    """The snapshot's resolutions as objects, the receiver's own where it holds an equal one (shared, as the
    resolutions of clients matching the same subscriptions are)."""
    known = {(r.metrics, r.push_interval_ms, r.crc, r.kafka_exact): r for r in subscriptions._resolved.values()}
    return [known.get(r) or ResolvedSubscription(*r) for r in resolved]


def _take_connection(cache: ClientInstanceCache, instance: ClientMetricsInstance) -> None:
    """The connection maps to the instance last put or moved to it; across shards, the later request time
    stands in for that (on a tie the imported instance takes it)."""
    connection_id = instance.connection_id
    holder = cache._connections.get(connection_id)
    if holder is not None and holder != instance.client_instance_id:
        other = cache._instances.get(holder)
        if other is not None and other.expires_at_ms - cache.expiry_ms(other) > _touched(cache, instance):
            return
    cache._connections[connection_id] = instance.client_instance_id


def _touched(cache: ClientInstanceCache, instance: ClientMetricsInstance) -> int:
    return instance.expires_at_ms - cache.expiry_ms(instance)


def _merge_queue(cache: ClientInstanceCache, duration: int, entries: list[tuple[Any, ClientMetricsInstance]]) -> None:
    """Merge imported instances (in the giver's order) into the receiver's queue of ``duration``, by last
    request time; each side keeps its own order, the receiver's first on a tie."""
    queue = cache._by_duration.get(duration)
    if not queue:
        cache._by_duration[duration] = OrderedDict(entries)
        return
    if next(reversed(queue.values())).expires_at_ms <= entries[0][1].expires_at_ms:
        queue.update(entries)  # the common case when the receiver's own clients are older: append
        return
    merged = heapq.merge(queue.items(), entries, key=lambda entry: entry[1].expires_at_ms)
    cache._by_duration[duration] = OrderedDict(merged)


def _evict_over_budget(cache: ClientInstanceCache) -> None:
    while cache.bytes_used > cache.memory_budget_bytes and len(cache) > 1:
        victim = cache._least_recently_used(exclude=None)  # type: ignore[arg-type]
        if victim is None:
            break
        cache._unlink(victim)
        cache.evictions += 1
