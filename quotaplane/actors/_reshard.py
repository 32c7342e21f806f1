"""A shard's side of a reshard: the keys it owns at its image's offset, and the state of the keys that move.

The shard count is a config in the log (``quotaplane.config.SHARD_COUNT_CONFIG``), so every gateway and
shard changes placement at the same offset ``R`` (just after that event). Rendezvous placement over the
ids ``"0"`` .. ``str(count - 1)`` moves only the keys a new shard wins (growing) or a removed shard owned
(shrinking): every shard is either a **giver** (it loses keys) or a **receiver** (it gains keys), never both.

**Fenced, so no key has two owners or none.**

- A giver stops deciding moved keys the moment it applies the event: fenced kinds are served only at the
  exact offset they were routed at, and the other kinds only when routed at ``R`` or later
  (:attr:`ReshardHost.placement_offset`); a batch routed before is refused with the events the gateway
  misses, and the gateway routes it again at the new count.
- A receiver pulls the moved state *while it applies the event* (:meth:`ReshardHost.apply`, under its
  serving lock): each giver's ``hand_over(R, receiver, count)`` first brings the giver to ``R`` (so it has
  stopped), then exports the keys the receiver now owns and forgets them. Until that returns, the receiver
  serves nothing (its lock), and it serves nothing at the new placement before it has applied the event.
- Receivers call givers, givers call only the controller: no cycle, no deadlock.

A giver that cannot be reached within ``hand_over_timeout_s`` (dead, or killed too early) loses its keys'
state: the receiver starts them empty, as a restarted shard without a checkpoint would, and counts it
(``hand_over_failures``): at most one quota window of over-admission for those keys.

What moves, every kind of per-key state, exact to the bit (each kind's export with an owner filter, forget on
the giver, import on the receiver): the usage windows of the client quota sensors (produce, fetch, request),
the controller-mutation token buckets (KIP-599), the producer-id state (KIP-936 filters, bucket and rate), the
KIP-714 client instances, and per node id Kafka's connection quotas (counts, rates, pending attempts) and the
replication rates. Not moved: shard-wide counters (the telemetry manager's totals) and the shared
exempt-request sensor, which only report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ray.exceptions import GetTimeoutError, RayActorError

from quotaplane.config import SHARD_COUNT_CONFIG, ConfigDelta, ConfigImage, ConfigResourceType, shard_count_offset
from quotaplane.quota import (
    MutationSnapshot,
    ProducerIdSnapshot,
    UsageSnapshot,
    export_mutations,
    export_producer_ids,
    export_usage,
    forget_mutations,
    forget_producer_ids,
    forget_usage,
    import_mutations,
    import_producer_ids,
    import_usage,
)
from quotaplane.telemetry import InstanceSnapshot

from ._connection_host import ConnectionNodesSnapshot
from ._follower import ray_get
from ._placement import RendezvousPlacement
from ._replication_host import ReplicationNodesSnapshot

__all__ = ["HandOver", "ReshardHost", "givers_for", "shard_ids"]

log = logging.getLogger(__name__)


def shard_ids(count: int) -> list[str]:
    """The shard ids of a cluster of ``count`` shards, as placement names them."""
    return [str(i) for i in range(count)]


def givers_for(receiver: str, old: int, new: int) -> list[str]:
    """The shards that may hold state ``receiver`` wins when the count goes from ``old`` to ``new``: every old
    shard for a shard that is new, the removed ones for a shard that stays; none for one that goes."""
    index = int(receiver)
    if index >= new:
        return []
    if index >= old:  # a new shard: it wins keys from every old one
        return shard_ids(old)
    return [str(i) for i in range(new, old)]  # a remaining shard: it wins only the removed ones' keys


@dataclass(frozen=True, slots=True)
class HandOver:
    """What a giver hands a receiver: the moved keys' state (plain data; crosses processes through Ray)."""

    giver: str
    usage: UsageSnapshot
    sensors: int = 0
    #: KIP-599 controller-mutation token buckets of the moved clients
    mutations: MutationSnapshot | None = None
    #: KIP-936 producer-id state (filters, bucket, rate) of the moved users
    producer_ids: ProducerIdSnapshot | None = None
    #: KIP-714 client instances by instance id
    instances: InstanceSnapshot | None = None
    #: Kafka's ConnectionQuotas of the moved node ids (counts, rates, pending attempts)
    connections: ConnectionNodesSnapshot | None = None
    #: the replication rates of the moved node ids
    replication: ReplicationNodesSnapshot | None = None

    def keys(self) -> int:
        """How many keys' state is handed over, every kind together."""
        parts = (self.instances, self.connections, self.replication)
        mutations = 0 if self.mutations is None else len(self.mutations.clients)
        producer_ids = 0 if self.producer_ids is None else len(self.producer_ids.users)
        return self.sensors + mutations + producer_ids + sum(len(part) for part in parts if part is not None)


@dataclass(slots=True)
class ReshardStats:
    reshards: int = 0
    hand_overs_received: int = 0
    sensors_received: int = 0
    hand_overs_given: int = 0
    sensors_given: int = 0
    hand_over_failures: int = 0
    last_hand_over_ms: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)


class ReshardHost:
    """The shard's placement at its image's offset, bound to the log beside its managers (``apply``)."""

    def __init__(
        self,
        shard_id: str,
        shard: Any,
        peer: Callable[[str], Any],
        clock_ms: Callable[[], int],
        *,
        hand_over_timeout_s: float = 30.0,
        receives: Callable[[], bool] = lambda: True,
    ) -> None:
        """``shard``: what holds the state (a ShardActor: ``image``, ``quotas``, ``producer_ids``, ``telemetry``,
        ``connections``, ``replication``), read at each hand-over; ``peer``: another shard's handle by id;
        ``receives``: whether this member pulls what it wins (a warm standby that does not serve must not: a
        giver forgets what it hands over, and the primary is the one that decides those keys)."""
        self.shard_id = str(shard_id)
        self._shard = shard
        self._peer = peer
        self._clock_ms = clock_ms
        self.hand_over_timeout_s = hand_over_timeout_s
        self._receives = receives
        #: batches of the unfenced kinds routed before this offset used another shard count: refused
        self.placement_offset = shard_count_offset(shard.image)
        self.stats = ReshardStats()

    # --- bound to the log (ConfigFollower calls these under the shard's lock) ---------------------------
    def apply(self, delta: ConfigDelta, image: ConfigImage) -> None:
        self._changed(delta.changes, image)

    def apply_changes(self, changes: Iterable[Any], image: ConfigImage) -> None:
        self._changed(changes, image)

    def _changed(self, changes: Iterable[Any], image: ConfigImage) -> None:
        for change in changes:
            if (
                getattr(change, "name", None) == SHARD_COUNT_CONFIG
                and change.resource_type is ConfigResourceType.BROKER
                and change.resource_name == ""
            ):
                self.placement_offset = shard_count_offset(image)
                if change.old is not None and change.new is not None:
                    self._receive(int(change.old), int(change.new), image.end_offset)

    def _receive(self, old: int, new: int, end_offset: int) -> None:
        """Pull the state of the keys this shard wins from each giver (before serving anything at ``new``)."""
        self.stats.reshards += 1
        givers = givers_for(self.shard_id, old, new)
        if not givers or not self._receives():
            return  # this shard gains no keys (it keeps or gives its own)
        started = time.monotonic()
        record: dict[str, Any] = {
            "from": old,
            "to": new,
            "offset": end_offset,
            "received": {},
            "failed": [],
            "errors": {},
        }
        for giver in givers:
            try:
                handed = self._pull(giver, end_offset, new)
            except Exception as e:  # the giver is gone: its keys start empty here (counted)
                self.stats.hand_over_failures += 1
                record["failed"].append(giver)
                record["errors"][giver] = (str(e).splitlines() or [type(e).__name__])[-1][:300]
                log.warning(
                    "shard %s: no hand-over from shard %s for the reshard %d -> %d: %s",
                    self.shard_id,
                    giver,
                    old,
                    new,
                    e,
                )
                continue
            received = self._import(handed, self._clock_ms())
            self.stats.hand_overs_received += 1
            self.stats.sensors_received += received
            record["received"][giver] = received
        self.stats.last_hand_over_ms = round((time.monotonic() - started) * 1000, 3)
        record["ms"] = self.stats.last_hand_over_ms
        self.stats.history = [*self.stats.history[-9:], record]

    def _import(self, handed: HandOver, now_ms: int) -> int:
        """Put every kind of handed-over state into this shard's managers; how many keys it took."""
        shard = self._shard
        quotas = shard.quotas
        done = import_usage(quotas, handed.usage, now_ms)
        received = sum(n for kind, n in done.items() if kind != "skipped")
        if handed.mutations is not None:
            received += import_mutations(quotas.controller_mutation, handed.mutations, now_ms)
        if handed.producer_ids is not None:
            received += import_producer_ids(shard.producer_ids, handed.producer_ids, now_ms)
        if handed.instances is not None:
            received += shard.telemetry.import_instances(handed.instances, now_ms)
        if handed.connections is not None:
            received += shard.connections.import_nodes(handed.connections, now_ms)
        if handed.replication is not None:
            received += shard.replication.import_nodes(handed.replication, now_ms)
        return received

    def _pull(self, giver: str, end_offset: int, count: int) -> HandOver:
        """``hand_over`` on the giver, retried while Ray restarts it, for up to ``hand_over_timeout_s``."""
        deadline = time.monotonic() + self.hand_over_timeout_s
        delay = 0.05
        while True:
            try:
                handle = self._peer(giver)
                left = max(0.1, deadline - time.monotonic())
                return ray_get(handle.hand_over.remote(end_offset, self.shard_id, count), left)
            except (RayActorError, GetTimeoutError, ValueError):
                if time.monotonic() + delay >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    # --- the giver's side ---------------------------------------------------------------------------------
    def hand_over(self, receiver: str, count: int) -> HandOver:
        """Export and forget the state of the keys ``receiver`` owns among ``count`` shards (the caller has
        brought this shard to the reshard's offset, so it decides none of them any more)."""
        placement = RendezvousPlacement(shard_ids(count))
        receiver = str(receiver)
        owners: dict[str, str] = {}

        def owns(key: str) -> bool:
            owner = owners.get(key)
            if owner is None:
                owner = owners[key] = placement.owner(key)
            return owner == receiver

        shard = self._shard
        quotas = shard.quotas
        usage = export_usage(quotas, owns)
        sensors = forget_usage(quotas, usage)
        mutations = export_mutations(quotas.controller_mutation, owns)
        forget_mutations(quotas.controller_mutation, owns)
        users = export_producer_ids(shard.producer_ids, owns)
        forget_producer_ids(shard.producer_ids, owns)
        instances = shard.telemetry.export_instances(owns)
        shard.telemetry.forget_instances(owns)
        connections = shard.connections.export_nodes(owns)
        shard.connections.forget_nodes(owns)
        replication = shard.replication.export_nodes(owns)
        shard.replication.forget_nodes(owns)
        handed = HandOver(self.shard_id, usage, sensors, mutations, users, instances, connections, replication)
        self.stats.hand_overs_given += 1
        self.stats.sensors_given += handed.keys()
        return handed

    def info(self) -> dict[str, Any]:
        stats = self.stats
        return {
            "placement_offset": self.placement_offset,
            "reshards": stats.reshards,
            "hand_overs_received": stats.hand_overs_received,
            "sensors_received": stats.sensors_received,
            "hand_overs_given": stats.hand_overs_given,
            "sensors_given": stats.sensors_given,
            "hand_over_failures": stats.hand_over_failures,
            "last_hand_over_ms": stats.last_hand_over_ms,
            "history": list(stats.history),
        }
