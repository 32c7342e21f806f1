"""The gateway proper: admission, resolution, routing, and the config replica's poll loop.

Every kind of call (usage, un-record, request time, mutations, replication, producer ids, connections,
telemetry) goes through the same per-shard queues (``_batching``) as a micro-batch for
``ShardActor.serve_at``: :meth:`Gateway.submit` for the kinds routed by metric tags, :meth:`Gateway.dispatch`
for kinds keyed by a user, node id or client instance id.

**Which shard: Kafka's two-stage resolution, done twice at the same offset.** The shard key of a tag-routed
item is ``(quota type, user tag, client-id tag)``, resolved by the :class:`ConfigReplica`, and rendezvous
hashing over the shard ids picks its owner. The shard resolves the tags again with its own managers (that
is where the sensor lives), so both must read the same image: every batch carries the gateway's config
offset (``ShardActor.serve_at``). A shard behind catches up first; a shard ahead records nothing and answers
its offset and the config events it applied since the batch's offset (from the bounded tail its follower keeps):
the gateway's replica applies them, validated and applied exactly as events read from the controller, resolves
and routes those items again, and resends them ahead of what is queued. Only when the shard no longer holds
the events (or they do not fit the replica) does the gateway read them from the controller; so a controller
that Ray is restarting does not fail usage that the shards and the gateway can decide between them. Sending
resolved tags instead would need a "record into these tags" entry point in the core; the offset fence keeps
the core untouched and makes gateway and shard agree on the sensor *and* its limit. Handing events over does
not weaken it: the resent items are stamped with the offset of the image that resolved them, and the shard
serves them only at exactly that offset.

**Propagation delay.** The replica polls the controller (``read_from``) every ``poll_interval_s`` (default
50 ms) and catches up at once when a shard reports a newer offset (with the events that shard handed over,
else from the controller). A quota change is therefore used by a
gateway at most ~``poll_interval_s`` + one controller call after it was acknowledged, and by a shard no
later than the first batch routed at the new offset (the controller's push usually gets there first). The
gateway does not subscribe to pushes because it is a driver, not an actor.

**Back-pressure.** At most ``max_in_flight_items`` items are queued or in flight; beyond that
:meth:`Gateway.admit` waits up to the caller's ``wait_s`` and then raises :class:`Exhausted` with a
retry-after estimate from the recent completion rate.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from quotaplane.actors import RendezvousPlacement, RequestColumns

from ._batching import Pending, Router, ShardWorker, Unit
from ._checks import Exhausted, GatewayConfig, Unavailable, wall_clock_ms
from ._leases import GatewayLeases
from ._lost_usage import Restart
from ._replica import ConfigReplica
from ._reshard_barrier import ReshardBarrier

__all__ = ["Gateway"]

log = logging.getLogger(__name__)

#: Where exempt request time goes: one shared sensor (Kafka's exempt-request-time), on one shard.
_EXEMPT_REQUEST_KEY = "REQUEST\x00exempt"


class Gateway:
    """Resolution, routing, back-pressure and the config poll: what every gateway servicer shares (each
    servicer checks its own requests and builds the shard's items)."""

    def __init__(
        self,
        controller: Any,
        shards: Mapping[str, Any],
        *,
        config: GatewayConfig | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        shard_lookup: Callable[[str], Any] | None = None,
    ) -> None:
        if not shards:
            raise ValueError("a gateway needs at least one shard")
        self.config = config or GatewayConfig()
        self.clock = clock
        self.stopping = False
        self._stop = threading.Event()
        self.replica = ConfigReplica(controller, timeout_s=self.config.shard_timeout_s)
        self.placement = RendezvousPlacement([str(s) for s in shards])
        self.workers = {str(s): ShardWorker(self, str(s), h) for s, h in shards.items()}
        self._owner_cache: dict[str, str] = {}
        #: the handles of shards a reshard adds (by id); None: only ``shards`` exist
        self._shard_lookup = shard_lookup
        self._handles = {str(s): h for s, h in shards.items()}
        self._placement_lock = threading.Lock()
        #: shards named 0 .. n-1 follow the log's shard count; a hand-picked set (a test's, a benchmark's) stays
        self.follows_reshards = set(self.workers) == {str(i) for i in range(len(self.workers))}
        #: placements (and their owner caches) of the shard counts seen in the log, by count
        self._placements: dict[int, tuple[RendezvousPlacement, dict[str, str]]] = {
            len(self.placement): (self.placement, self._owner_cache)
        }
        #: the shard count the workers serve (the latest in the log; the start's until one is logged)
        self._workers_for = len(self.placement)
        #: workers of shards a reshard removed: they drain what was queued for them (routed again)
        self.retired: dict[str, ShardWorker] = {}
        #: placement changes this gateway made (a reshard seen in the log)
        self.reshards = 0
        #: usage bytes sent to shards that then restarted without them (``_lost_usage``): by whether the new
        #: incarnation restored a checkpoint; the bound of what the restarts over-admitted
        self.over_admission_bound_bytes = {"checkpoint": 0.0, "no_checkpoint": 0.0}
        #: the last restarts seen, newest last
        self.restarts: list[Restart] = []
        self._restarts_lock = threading.Lock()
        #: holds units placed at a new shard count while the old count's are in flight (``_reshard_barrier``)
        self.barrier = ReshardBarrier(self._deliver)
        self._arrivals = itertools.count()
        self._in_flight = 0
        self._room = threading.Condition()
        self._completed_items = 0
        #: micro-batches a shard refused because it was at a newer config (each then routed again)
        self.reroutes = 0
        #: of those, the ones whose gap the shard's own events closed (no controller call)
        self.fence_handovers = 0
        #: config polls that failed (the controller unreachable or restarting)
        self.poll_failures = 0
        self.poll_failures_logged_at = 0.0
        #: told False when config polls have failed for ``config_stale_s``, True when they work again
        self.on_config_health: Callable[[bool], None] = lambda serving: None
        self._started = time.monotonic()
        for worker in self.workers.values():
            worker.start()
        latest = self.replica.shard_count_at(self.replica.offset)
        if self.follows_reshards and latest is not None and latest != self._workers_for:
            self._follow_shard_count(latest)
        self._poller = threading.Thread(target=self._poll_loop, name="gateway-config-poll", daemon=True)
        self._poller.start()
        #: leased budgets (``quotaplane.lease.quota.types``): usage of leased types decided here within a share
        self.leases = GatewayLeases(self)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the poller and the shard workers and wait for them (a call in flight gets ``timeout_s``), so
        nothing of this gateway touches Ray after it returns: Ray may be shut down next."""
        self.stopping = True
        self._stop.set()
        self.leases.close(timeout_s)
        for worker in [*self.workers.values(), *self.retired.values()]:
            with worker.cond:
                worker.cond.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in [self._poller, *self.workers.values(), *self.retired.values()]:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def config_offset(self) -> int:
        return self.replica.offset

    def _poll_loop(self) -> None:
        """Poll the controller; after ``config_stale_s`` without a successful poll the gateway reports
        NOT_SERVING on gRPC health (``on_config_health(False)``), so a load balancer moves traffic to a
        gateway that sees the config, and SERVING again once a poll succeeds. It keeps answering from its
        last image meanwhile (quotas rarely change; refusing all traffic would be worse)."""
        last_ok = time.monotonic()
        healthy = True
        while not self._stop.wait(self.config.poll_interval_s):
            try:
                self.replica.poll()
                last_ok = time.monotonic()
                if not healthy:
                    healthy = True
                    log.warning("config polls succeed again: SERVING")
                    self.on_config_health(True)
            except Exception as e:  # keep the last image; the next round retries
                if self.stopping:
                    return
                self.poll_failures += 1
                reason = str(e).splitlines()[0] if str(e) else type(e).__name__
                # once per outage, not once per poll (every 50 ms)
                (log.warning if healthy and self.poll_failures_logged_at != last_ok else log.debug)(
                    "config poll failed: %s", reason
                )
                self.poll_failures_logged_at = last_ok
                if healthy and time.monotonic() - last_ok > self.config.config_stale_s:
                    healthy = False
                    log.warning("no config poll succeeded for %.1f s: NOT_SERVING", self.config.config_stale_s)
                    self.on_config_health(False)

    # --- admission -------------------------------------------------------------------------------------
    def _retry_after_ms(self) -> int:
        elapsed = max(1e-3, time.monotonic() - self._started)
        rate = max(1_000.0, self._completed_items / elapsed)
        return int(min(1000, max(1, 1000 * self._in_flight / rate)))

    def admit(self, count: int, wait_s: float) -> None:
        """Reserve room for ``count`` items, waiting up to ``wait_s``; Exhausted if there is none."""
        deadline = time.monotonic() + wait_s
        with self._room:
            while self._in_flight + count > self.config.max_in_flight_items and self._in_flight > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Exhausted(
                        f"the gateway is full ({self._in_flight} items in flight); retry later",
                        self._retry_after_ms(),
                    )
                self._room.wait(left)
            self._in_flight += count

    def finish(self, pending: Pending, error: Exception | None = None) -> None:
        """A request is answered (or failed): give its room back once."""
        if error is not None and not pending.fail(error):
            return
        with self._room:
            self._in_flight -= len(pending.items)
            self._completed_items += len(pending.items)
            self._room.notify_all()

    # --- routing ---------------------------------------------------------------------------------------
    def _placement_at(self, offset: int) -> tuple[RendezvousPlacement, dict[str, str]]:
        """The placement, and its owner cache, of the shard count that holds at ``offset`` (the offset a batch
        was resolved at: gateway and shards must agree on the count there, as on the metric tags). A count
        new to this gateway starts workers for its new shards; the workers of shards beyond the latest count
        retire (they drain what was queued for them, which the shards refuse and the gateway routes again)."""
        count = self.replica.shard_count_at(offset) if self.follows_reshards else None
        if count is None or count == len(self.placement):
            found = self._placements[len(self.placement)]
        else:
            found = self._placements.get(count)  # type: ignore[assignment]
            if found is None:
                with self._placement_lock:
                    found = self._placements.get(count)  # type: ignore[assignment]
                    if found is None:
                        ids = [str(i) for i in range(count)]
                        found = self._placements[count] = (RendezvousPlacement(ids), {})
        if self.follows_reshards:
            latest = self.replica.shard_count_at(self.replica.offset)
            if latest is not None and latest != self._workers_for:
                self._follow_shard_count(latest)
        return found

    def _follow_shard_count(self, count: int) -> None:
        """Workers for the shards ``0 .. count - 1`` and none other (the latest reshard this gateway applied)."""
        with self._placement_lock:
            if count == self._workers_for:
                return
            ids = [str(i) for i in range(count)]
            for shard in ids:
                if shard not in self.workers:
                    self.retired.pop(shard, None)
                    worker = self.workers[shard] = ShardWorker(self, shard, self._handle(shard))
                    worker.start()
            for shard in [s for s in self.workers if s not in ids]:
                worker = self.retired[shard] = self.workers.pop(shard)
                worker.retired = True
                with worker.cond:
                    worker.cond.notify_all()
            self._workers_for = count
            self.reshards += 1
            log.info("%d shards from config offset %d on: placement changed", count, self.replica.offset)

    def _handle(self, shard: str) -> Any:
        """The actor handle of shard ``shard``: looked up anew for a shard a reshard (re)creates."""
        if self._shard_lookup is not None:
            return self._shard_lookup(shard)
        handle = self._handles.get(shard)
        if handle is None:
            raise Unavailable(f"shard {shard} is in the placement but this gateway cannot find it")
        return handle

    def _route(self, pending: Pending, indices: Sequence[int] | None = None, *, front: bool = False) -> None:
        offset, placement, groups = self._owners(pending, indices)
        sizes = pending.sizes
        workers = self.workers
        count = len(placement)
        for shard, group in groups.items():
            if shard not in workers:  # placed at an offset before a reshard removed the shard: place them anew
                self._route(pending, group, front=front)
                continue
            size = sum(sizes[i] for i in group) if sizes is not None else 0
            self.barrier.send(shard, Unit(pending, group, offset, size, count), front=front)

    def _owners(
        self, pending: Pending, indices: Sequence[int] | None
    ) -> tuple[int, RendezvousPlacement, dict[str, list[int]]]:
        """The config offset the items at ``indices`` (None: all) are routed at, the placement that holds there, and
        the items' indices by the shard owning them."""
        items = pending.items
        chosen = list(range(len(items)) if indices is None else indices)
        with self.replica.lock:  # an offset whose shard count the replica has applied
            offset = self.replica.offset
        placement, cache = self._placement_at(offset)
        if len(placement) == 1 and chosen:
            # one shard owns every key: the items' keys (their metric tags: ~0.4-0.7 ms a 1000 items) cannot change
            # where they go, so they are not resolved; the shard resolves the tags itself, at this offset (the fence)
            return offset, placement, {str(placement.shard_ids[0]): chosen}
        resolved, keys = pending.route(items, indices)
        if resolved != offset:  # the replica moved on between the two reads
            offset = resolved
            placement, cache = self._placement_at(offset)
        owners = list(map(cache.get, keys))
        if None in owners:
            if len(cache) > 100_000:
                cache.clear()
            owner = placement.owner
            owners = [
                shard if shard is not None else cache.setdefault(key, owner(key))
                for shard, key in zip(owners, keys, strict=True)
            ]
        if len(set(owners)) == 1:  # one shard owns them all
            return offset, placement, {owners[0]: chosen}
        groups: dict[str, list[int]] = {}
        for index, shard in zip(chosen, owners, strict=True):
            group = groups.get(shard)
            if group is None:
                groups[shard] = [index]
            else:
                group.append(index)
        return offset, placement, groups

    def _deliver(self, shard: str, unit: Unit, front: bool) -> None:
        """The barrier lets ``unit`` go: to its shard's worker, or placed anew if a reshard removed the shard
        while it waited."""
        worker = self.workers.get(shard) or self.retired.get(shard)
        if worker is None:
            self._route(unit.pending, unit.indices, front=front)
        else:
            worker.put([unit], front=front)

    def reroute(self, units: Sequence[Unit], shard_offset: int, events: Sequence[tuple[int, bytes]] = ()) -> None:
        """A shard was at a newer config than these items were routed at: catch up (with ``events``, the log
        batches the shard handed over, if they close the gap; else from the controller), route them again,
        ahead of what is queued (so a shard still sees each stream's items in order)."""
        self.reroutes += 1
        try:
            if events and self.replica.apply_handed(events, shard_offset):
                self.fence_handovers += 1
            self.replica.catch_up(shard_offset)
        except Exception as e:
            for unit in units:
                self.finish(unit.pending, error=Unavailable(f"cannot catch up with the config: {e}"))
            return
        for unit in reversed(units):
            pending = unit.pending
            pending.reroutes += 1
            if pending.reroutes > self.config.max_reroutes * max(1, len(self.workers)):
                self.finish(pending, error=Unavailable("the shards' config keeps moving; retry"))
                continue
            self._route(pending, unit.indices, front=True)

    def submit(
        self,
        kind: str,
        items: list[Any],
        wait_s: float,
        route: Router | None = None,
        *,
        sizes: Sequence[int] | None = None,
        columns: RequestColumns | None = None,
    ) -> Pending:
        """Admit, route and queue a validated batch; the caller waits on ``pending.done``. ``route`` gives
        ``(config offset, shard keys)`` of the items at some indices (None: all); by default each item's
        metric tags, for items that start ``(quota type, user, client_id)``. ``columns``: usage items also as
        the request's columns, which the shards are sent (``Pending.columns``)."""
        self.admit(len(items), wait_s)
        pending = Pending(kind, items, route if route is not None else self._resolve_tags, next(self._arrivals))
        pending.columns = columns
        if sizes is not None:
            if len(sizes) != len(items):
                raise ValueError(f"{len(items)} items but {len(sizes)} sizes")
            pending.sizes = list(sizes)
        try:
            rest = self._decide_leased(pending) if kind in ("usage", "unrecord") else None
            if rest is None or rest:
                self._route(pending, rest)
        except Exception as e:
            self.finish(pending, error=e if isinstance(e, Unavailable) else Unavailable(str(e)))
        return pending

    def _decide_leased(self, pending: Pending) -> list[int] | None:
        """Usage of leased quota types decided here (``_leases``): the indices left for the shards (None: all);
        a batch decided whole is answered at once. Un-recorded usage goes to the shards and this gateway's
        windows both."""
        if pending.kind == "unrecord":
            self.leases.unrecord(pending.items)
            return None
        decided = self.leases.decide(pending.items)
        if decided is None:
            return None
        offset, throttles = decided
        local = [i for i, throttle in enumerate(throttles) if throttle is not None]
        if not local:
            return None
        rest = [i for i, throttle in enumerate(throttles) if throttle is None]
        if pending.fill(local, [throttles[i] for i in local], offset):
            self.finish(pending)
        return rest

    def wait(self, pending: Pending) -> tuple[int, list[Any]]:
        """Wait for a submitted batch: ``(config offset, results in the items' order)``, or its error."""
        if not pending.done.wait(self.config.shard_timeout_s + 5):
            raise Unavailable("the shards did not answer in time")
        if pending.error is not None:
            raise pending.error
        return pending.offset, pending.results

    def resolve_by(self, tags: list[tuple[str, str, str]], exempt: Sequence[bool] | None = None) -> Router:
        """A router resolving item i by ``tags[i]`` (its own metric tags; ``exempt[i]``: the exempt key)."""

        def route(_items: list[Any], indices: Sequence[int] | None) -> tuple[int, list[str]]:
            chosen = range(len(tags)) if indices is None else indices
            offset, keys = self.replica.resolve([tags[i] for i in chosen])
            if exempt is not None:
                keys = [_EXEMPT_REQUEST_KEY if exempt[i] else key for i, key in zip(chosen, keys, strict=True)]
            return offset, keys

        return route

    def dispatch(
        self,
        kind: str,
        items: list[Any],
        keys: Sequence[str],
        *,
        wait_s: float = 0.0,
        sizes: Sequence[int] | None = None,
    ) -> tuple[int, list[Any]]:
        """Serve ``items`` of ``kind`` on the shards owning ``keys`` (one per item): micro-batched per shard
        with everything else queued for it, ``ShardActor.serve_at(kind, offset, items)`` on each, and
        ``(config offset, results in the items' order)`` back. For kinds keyed without config (a user, a
        node, a client instance id); fenced kinds are routed by metric tags (``submit``).
        ``sizes`` (bytes per item) bounds the bytes of one shard call (``max_shard_batch_bytes``).
        Raises Unavailable / Exhausted (after waiting ``wait_s`` for room)."""
        if len(keys) != len(items):
            raise ValueError(f"{len(items)} items but {len(keys)} keys")
        fixed = list(keys)

        def route(_items: list[Any], indices: Sequence[int] | None) -> tuple[int, list[str]]:
            return self.replica.offset, fixed if indices is None else [fixed[i] for i in indices]

        return self.wait(self.submit(kind, items, wait_s, route, sizes=sizes))

    def _resolve_tags(self, items: list[Any], indices: Sequence[int] | None) -> tuple[int, list[str]]:
        return self.replica.resolve(items if indices is None else [items[i] for i in indices])

    def note_restart(self, restart: Restart) -> None:
        """A shard worker found its shard restarted (a new incarnation): count the usage it lost."""
        cause = "no_checkpoint" if restart.checkpoint_ms is None else "checkpoint"
        with self._restarts_lock:
            self.over_admission_bound_bytes[cause] += restart.lost_bytes
            self.restarts = [*self.restarts[-19:], restart]
        log.warning(
            "shard %s restarted (%s): %.0f usage bytes sent to it since were lost, the bound of its over-admission",
            restart.shard_id,
            "restored a checkpoint" if restart.checkpoint_ms is not None else "no checkpoint",
            restart.lost_bytes,
        )

    def stats(self) -> dict[str, Any]:
        return {
            "over_admission_bound_bytes": dict(self.over_admission_bound_bytes),
            "config_offset": self.replica.offset,
            "in_flight_items": self._in_flight,
            "reroutes": self.reroutes,
            "fence_handovers": self.fence_handovers,
            "reshard_held_units": self.barrier.held_units,
            "leases": self.leases.stats(),
            "shards": {s: {"batches": w.batches, "items": w.items} for s, w in self.workers.items()},
        }
