"""The gateway: gRPC ``QuotaService`` / ``ProducerIdService`` (and, registered from their own modules,
``TelemetryService`` and ``ConnectionService``) in front of the shard actors.

A broker, broker plugin or Kafka proxy streams batches of usage items; the gateway answers Kafka's
``throttle_time_ms`` for each, computed by the shard that owns the item's sensor, so an entity has one
budget across the fleet. The gateway is a Ray driver (it joins the cluster of ``quotaplane up``). Every
kind of call (usage, un-record, request time, mutations, replication, producer ids, connections,
telemetry) goes through the same per-shard queues as a micro-batch for ``ShardActor.serve_at``:
:meth:`Gateway.submit` for the kinds routed by metric tags, :meth:`Gateway.dispatch` for kinds keyed by
a user, node id or client instance id.

**Which sensor: Kafka's two-stage resolution, done twice at the same offset.** Kafka decides which clients
share a sensor from the *metric tags* (``DefaultQuotaCallback.quotaMetricTags``: ``(user, client-id)``,
``(user, "")`` or ``("", client-id)`` depending on which quota entities exist). The gateway keeps a replica
of the config (:class:`ConfigReplica`: a ConfigImage plus quota managers bound to it by a
``ManagerBinding``, used only for their callbacks) and resolves every item's tags; the shard key is
``(quota type, user tag, client-id tag)`` and rendezvous hashing over the shard ids picks its owner. The
shard resolves the tags again with its own managers (that is where the sensor lives), so both must read
the same image: every batch carries the gateway's config offset (``ShardActor.serve_at``). A shard
behind catches up first; a shard ahead records nothing and answers its offset: the gateway catches up,
resolves and routes those items again, and resends them. Sending resolved tags instead would need a
"record into these tags" entry point in the core; the offset fence keeps the core untouched and makes
gateway and shard agree on the sensor *and* its limit. Producer ids are keyed by user (no tags).

**Propagation delay.** The replica polls the controller (``read_from``) every ``poll_interval_s``
(default 50 ms) and catches up at once when a shard reports a newer offset. A quota change is therefore
used by a gateway at most ~``poll_interval_s`` + one controller call after it was acknowledged, and by a
shard no later than the first batch routed at the new offset (the controller's push usually gets there
first). The gateway does not subscribe to pushes because it is a driver, not an actor.

**Batching and order.** Items are grouped per owning shard and queued; one worker thread per shard drains
its queue into micro-batches (at most ``max_shard_batch_items`` items, waiting at most ``linger_s`` ~1 ms
for more) and makes one actor call per micro-batch. Items reach a shard in the order they arrived, and a
stream's answers are sent in the order of its requests (several may be in flight). Back-pressure: at most
``max_in_flight_items`` items are queued or in flight; a unary call beyond that is RESOURCE_EXHAUSTED with
a ``retry-after-ms`` trailer, a stream waits (gRPC flow control then slows the sender) up to
``stream_wait_s`` and then answers that batch with the same error in-band.

**Errors.** Bad input (empty or oversized batch, unknown quota type, negative / NaN / infinite value,
empty or oversized names, names with NUL, a negative ``now_ms``) is INVALID_ARGUMENT with a message naming
the item; nothing of the batch is recorded and the server (and the stream) goes on. A shard that is dead
or restarting is UNAVAILABLE (usage kept by a restarted shard is lost, see ``actors/README.md``).
"""

from __future__ import annotations

import collections
import functools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from quotaplane.actors import ConfigFollower, RendezvousPlacement, ray_get
from quotaplane.v1 import quota_pb2 as pb
from quotaplane.v1 import quota_pb2_grpc

from quotaplane.config import (
    ConfigImage,
    ManagerBinding,
    startup_configs,
)
from quotaplane.quota import build_quota_managers, sanitize

from ._security import ServerSecurity, bind_port

__all__ = [
    "DEFAULT_GATEWAY_PORT",
    "PRODUCER_ID_SERVICE_NAME",
    "QUOTA_SERVICE_NAME",
    "RETRY_AFTER_TRAILER",
    "ConfigReplica",
    "Exhausted",
    "Gateway",
    "GatewayConfig",
    "InvalidArgument",
    "ProducerIdServicer",
    "QuotaServicer",
    "Unavailable",
    "item_time",
    "serve_gateway",
    "unary",
]

log = logging.getLogger(__name__)

DEFAULT_GATEWAY_PORT = 9094
QUOTA_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["QuotaService"].full_name
PRODUCER_ID_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ProducerIdService"].full_name
#: Largest request message the gateway accepts (gRPC's default is 4 MiB: four 1 MiB telemetry pushes).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: Trailing metadata of RESOURCE_EXHAUSTED: milliseconds to wait before sending again.
RETRY_AFTER_TRAILER = "retry-after-ms"

#: The wire's quota types, by the names the shards' ``QuotaType.parse`` takes.
_TYPE_NAMES = {pb.PRODUCE: "PRODUCE", pb.FETCH: "FETCH"}
_REPLICATION_NAMES = {
    pb.LEADER_REPLICATION: "LEADER_REPLICATION",
    pb.FOLLOWER_REPLICATION: "FOLLOWER_REPLICATION",
    pb.ALTER_LOG_DIRS_REPLICATION: "ALTER_LOG_DIRS_REPLICATION",
}
_MAX_PRODUCER_ID = 2**63 - 1
_MAX_INT32 = 2**31 - 1
#: Where exempt request time goes: one shared sensor (Kafka's exempt-request-time), on one shard.
_EXEMPT_REQUEST_KEY = "REQUEST\x00exempt"


def _where(index: int, field: str | None) -> str:
    """How a message names item ``index`` of a batch: ``item 3``, or ``requests[3]`` when the caller names
    the batch's repeated ``field`` (the TelemetryService's messages)."""
    return f"item {index}" if field is None else f"{field}[{index}]"


def item_time(index: int, item: Any, now_ms: int, field: str | None = None) -> int:
    """The item's ``now_ms`` if it set one, else ``now_ms``; INVALID_ARGUMENT if negative."""
    t = item.now_ms if item.HasField("now_ms") else now_ms
    if t < 0:
        raise InvalidArgument(f"{_where(index, field)}: now_ms must be >= 0, got {t}")
    return t


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class GatewayConfig:
    """Limits of one gateway (the defaults suit a 2-core machine)."""

    #: Items per request batch, above which a batch is INVALID_ARGUMENT.
    max_batch_items: int = 10_000
    #: Longest user / client id, in characters (Kafka sets none; this bounds the gateway's memory).
    max_name_length: int = 1024
    #: Items per actor call to one shard.
    max_shard_batch_items: int = 1000
    #: Bytes per actor call to one shard (counted for items that declare a size: telemetry pushes), so a
    #: micro-batch of 1 MiB pushes never makes a 1 GiB call; a single larger request still goes alone.
    max_shard_batch_bytes: int = 8 * 1024 * 1024
    #: How long a shard's worker waits for more items before sending a partial micro-batch.
    linger_s: float = 0.001
    #: Items queued or in flight at once, gateway-wide (back-pressure beyond).
    max_in_flight_items: int = 200_000
    #: Request batches in flight per stream (answers still go out in order).
    max_stream_in_flight: int = 32
    #: How long a stream's batch waits for room before it is refused in-band with RESOURCE_EXHAUSTED.
    stream_wait_s: float = 5.0
    #: How often the config replica asks the controller for new events.
    poll_interval_s: float = 0.05
    #: Longest wait for a shard's answer before UNAVAILABLE.
    shard_timeout_s: float = 30.0
    #: Re-routes of one item after shards reported newer config, before UNAVAILABLE.
    max_reroutes: int = 8
    #: How long config polls may fail before gRPC health says NOT_SERVING.
    config_stale_s: float = 2.0

    # The limits applied to a request batch (every servicer's checks); ``field``: see ``_where``.
    def check_size(self, count: int, field: str | None = None) -> None:
        """INVALID_ARGUMENT for an empty batch or one over ``max_batch_items`` (every servicer's first check)."""
        if count == 0:
            raise InvalidArgument("empty batch: send at least one item" + (f" in {field}" if field else ""))
        if count > self.max_batch_items:
            raise InvalidArgument(f"batch of {count} items is over the limit of {self.max_batch_items}")

    def check_name(
        self,
        index: int,
        what: str,
        name: str,
        *,
        allow_empty: bool = True,
        field: str | None = None,
        empty_hint: str = " (the principal's name)",
    ) -> str:
        """``name``; INVALID_ARGUMENT if empty (unless allowed), over ``max_name_length`` or holding NUL."""
        if not name and not allow_empty:
            raise InvalidArgument(f"{_where(index, field)}: {what} must not be empty{empty_hint}")
        if len(name) > self.max_name_length:
            raise InvalidArgument(f"{_where(index, field)}: {what} is longer than {self.max_name_length} characters")
        if "\x00" in name:
            raise InvalidArgument(f"{_where(index, field)}: {what} contains a NUL character")
        return name


class InvalidArgument(Exception):
    """INVALID_ARGUMENT: the batch is refused as a whole (the message names the item)."""


class Unavailable(Exception):
    """UNAVAILABLE: the shards (or the controller) cannot answer now."""


class Exhausted(Exception):
    """RESOURCE_EXHAUSTED: the gateway is full; ``retry_after_ms`` goes to the caller as a trailer."""

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


def _ray_call(ref: Any, timeout_s: float) -> Any:
    """``ray_get`` with the shard's own error re-raised; a dead, restarting or silent shard (or controller,
    when the shard could not reach it to catch up) is :class:`Unavailable`."""
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        return ray_get(ref, timeout_s)
    except RayActorError as e:
        raise Unavailable(f"a shard is unavailable (restarting?): {str(e).splitlines()[0]}") from None
    except GetTimeoutError:
        raise Unavailable(f"a shard did not answer within {timeout_s:g} s") from None


# --- the config replica ------------------------------------------------------------------------------------
class ConfigReplica:
    """The controller's image, kept current by polling ``read_from``; resolves items' metric tags.

    Quota managers are built from the image as a shard builds them and kept in step by a
    ``ManagerBinding``, so their ``DefaultQuotaCallback`` holds exactly the quotas the shards hold; only the
    callbacks' ``metric_tags`` are used (no sensor is ever created here). Thread-safe: ``lock`` guards the
    image and callbacks; :meth:`resolve` reads the offset and all tags of a batch under it.
    """

    def __init__(self, controller: Any, *, timeout_s: float = 30.0, max_events: int = 10_000) -> None:
        self._controller = controller
        self._timeout_s = timeout_s
        self.lock = threading.RLock()
        self.polls = 0
        #: (quota type, user, client id) -> shard key, valid for the current offset (emptied on every change)
        self._keys: dict[tuple[str, str, str], str] = {}
        self.follower = ConfigFollower(self._call, max_events=max_events, lock=self.lock)
        self.follower.start()
        startup = startup_configs(self.image)
        self.quotas = build_quota_managers(startup.quota, now_ms=wall_clock_ms())
        self._callbacks = {
            "PRODUCE": self.quotas.produce.quota_callback,
            "FETCH": self.quotas.fetch.quota_callback,
            "REQUEST": self.quotas.request.quota_callback,
            "CONTROLLER_MUTATION": self.quotas.controller_mutation.quota_callback,
        }
        self.binding = ManagerBinding(quotas=self.quotas)
        self.binding.load(self.image)
        self.follower.binding = self.binding

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
        changed = self.follower.catch_up()
        if changed:
            with self.lock:
                self._keys = {}
        return changed

    def poll(self) -> bool:
        """One round: apply the controller's new events, if any."""
        self.polls += 1
        return self._pull()

    def catch_up(self, target: int) -> None:
        """Reach at least ``target`` (a shard said it is there)."""
        if self.image.end_offset < target:
            self._pull()

    def resolve(self, items: Sequence[tuple[Any, ...]]) -> tuple[int, list[str]]:
        """The offset and each item's shard key ``type NUL user-tag NUL client-id-tag``; an item starts
        with ``(quota type, user, client_id)``: PRODUCE, FETCH, REQUEST or CONTROLLER_MUTATION."""
        with self.lock:
            callbacks = self._callbacks
            cache = self._keys
            if len(cache) > 500_000:
                cache = self._keys = {}
            keys = []
            append = keys.append
            for quota_type, user, client_id, *_ in items:
                key = cache.get((quota_type, user, client_id))
                if key is None:
                    user_tag, client_tag = callbacks[quota_type].metric_tags(sanitize(user), client_id)
                    key = cache[(quota_type, user, client_id)] = f"{quota_type}\x00{user_tag}\x00{client_tag}"
                append(key)
            return self.image.end_offset, keys


# --- pending requests and per-shard workers ---------------------------------------------------------------
class _Pending:
    """One request batch: its items, where their answers go, and when it is done."""

    __slots__ = (
        "closed",
        "done",
        "error",
        "items",
        "kind",
        "lock",
        "offset",
        "remaining",
        "reroutes",
        "results",
        "route",
        "sizes",
    )

    def __init__(self, kind: str, items: list[Any], route: _Router) -> None:
        self.kind = kind
        self.items = items
        #: (items, indices or None for all) -> (config offset, those items' shard keys); called again when a
        #: fenced batch is routed again
        self.route = route
        #: bytes per item, when they matter for the size of an actor call (None: count items only)
        self.sizes: list[int] | None = None
        self.results: list[Any] = [None] * len(items)
        self.remaining = len(items)
        self.offset = 0
        self.error: Exception | None = None
        self.reroutes = 0
        self.lock = threading.Lock()
        self.closed = False  # answered or failed: decided under ``lock``, exactly once
        self.done = threading.Event()

    def fill(self, indices: Sequence[int], throttles: Sequence[Any], offset: int) -> bool:
        with self.lock:
            results = self.results
            for index, throttle in zip(indices, throttles, strict=True):
                results[index] = throttle
            self.offset = max(self.offset, offset)
            self.remaining -= len(indices)
            finished = self.remaining == 0 and not self.closed
            if finished:
                self.closed = True
        if finished:
            self.done.set()
        return finished

    def fail(self, error: Exception) -> bool:
        with self.lock:
            if self.closed:
                return False
            self.closed = True
            self.error = error
        self.done.set()
        return True


#: ``(items, indices or None for all) -> (config offset, shard keys of those items)``
_Router = Callable[[list[Any], Sequence[int] | None], tuple[int, list[str]]]


@dataclass(slots=True)
class _Unit:
    """Some items of one request, for one shard, resolved at ``offset``; ``size``: their bytes, when the
    request said (telemetry pushes), else 0."""

    pending: _Pending
    indices: list[int]
    offset: int
    size: int = 0


class _ShardWorker(threading.Thread):
    """Drains one shard's queue into micro-batches: one actor call each, one call in flight."""

    def __init__(self, gateway: Gateway, shard_id: str, handle: Any) -> None:
        super().__init__(name=f"gateway-shard-{shard_id}", daemon=True)
        self.gateway = gateway
        self.shard_id = shard_id
        self.handle = handle
        self.queue: collections.deque[_Unit] = collections.deque()
        self.cond = threading.Condition()
        self.batches = 0
        self.items = 0

    def put(self, units: Sequence[_Unit], *, front: bool = False) -> None:
        with self.cond:
            if front:
                self.queue.extendleft(reversed(units))
            else:
                self.queue.extend(units)
            self.cond.notify()

    def _take(self) -> list[_Unit] | None:
        config = self.gateway.config
        with self.cond:
            while not self.queue:
                if self.gateway.stopping:
                    return None
                self.cond.wait(0.1)
            first = self.queue.popleft()
            units = [first]
            count = len(first.indices)
            size = first.size
            deadline = time.monotonic() + config.linger_s
            while count < config.max_shard_batch_items and size < config.max_shard_batch_bytes:
                if not self.queue:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.cond.wait(left)
                    if not self.queue:
                        break
                head = self.queue[0]
                if head.offset != first.offset or head.pending.kind != first.pending.kind:
                    break
                if count + len(head.indices) > config.max_shard_batch_items and count:
                    break
                if size + head.size > config.max_shard_batch_bytes:
                    break
                units.append(self.queue.popleft())
                count += len(head.indices)
                size += head.size
            return units

    def run(self) -> None:
        while True:
            units = self._take()
            if units is None:
                return
            try:
                self._send(units)
            except Exception as e:  # never lose a worker: fail what it held
                if not isinstance(e, Unavailable | InvalidArgument):
                    log.exception("shard %s: a micro-batch failed", self.shard_id)
                for unit in units:
                    self.gateway.finish(unit.pending, error=e)

    def _send(self, units: list[_Unit]) -> None:
        gateway = self.gateway
        offset = units[0].offset
        kind = units[0].pending.kind
        items: list[Any] = []
        for unit in units:
            source = unit.pending.items
            items.extend(source[i] for i in unit.indices)
        ref = self.handle.serve_at.remote(kind, offset, items)
        try:
            shard_offset, throttles = _ray_call(ref, gateway.config.shard_timeout_s)
        except ValueError as e:  # the shard's validation: the gateway's check missed something
            raise InvalidArgument(str(e).splitlines()[0]) from None
        self.batches += 1
        if throttles is None:
            if shard_offset < offset:  # it could not catch up to the gateway's config
                raise Unavailable(f"shard {self.shard_id} is behind the config ({shard_offset} < {offset})")
            gateway.reroute(units, shard_offset)  # it is ahead of the offset these items were routed at
            return
        self.items += len(items)
        start = 0
        for unit in units:
            end = start + len(unit.indices)
            if unit.pending.fill(unit.indices, throttles[start:end], shard_offset):
                gateway.finish(unit.pending)
            start = end


# --- the gateway -------------------------------------------------------------------------------------------
class Gateway:
    """Validation, resolution, routing, back-pressure: what both servicers share."""

    def __init__(
        self,
        controller: Any,
        shards: Mapping[str, Any],
        *,
        config: GatewayConfig | None = None,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if not shards:
            raise ValueError("a gateway needs at least one shard")
        self.config = config or GatewayConfig()
        self.clock = clock
        self.stopping = False
        self._stop = threading.Event()
        self.replica = ConfigReplica(controller, timeout_s=self.config.shard_timeout_s)
        self.placement = RendezvousPlacement([str(s) for s in shards])
        self.workers = {str(s): _ShardWorker(self, str(s), h) for s, h in shards.items()}
        self._owner_cache: dict[str, str] = {}
        self._in_flight = 0
        self._room = threading.Condition()
        self._completed_items = 0
        #: micro-batches a shard refused because it was at a newer config (each then routed again)
        self.reroutes = 0
        #: config polls that failed (the controller unreachable or restarting)
        self.poll_failures = 0
        self.poll_failures_logged_at = 0.0
        #: told False when config polls have failed for ``config_stale_s``, True when they work again
        self.on_config_health: Callable[[bool], None] = lambda serving: None
        self._started = time.monotonic()
        for worker in self.workers.values():
            worker.start()
        self._poller = threading.Thread(target=self._poll_loop, name="gateway-config-poll", daemon=True)
        self._poller.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the poller and the shard workers and wait for them (a call in flight gets ``timeout_s``), so
        nothing of this gateway touches Ray after it returns: Ray may be shut down next."""
        self.stopping = True
        self._stop.set()
        for worker in self.workers.values():
            with worker.cond:
                worker.cond.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in [self._poller, *self.workers.values()]:
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

    # --- validation ------------------------------------------------------------------------------------
    def usage_items(self, batch: pb.UsageBatch, now_ms: int) -> list[tuple[str, str, str, float, int]]:
        """The batch's items as ``(type, user, client_id, value, now_ms)``, every item checked first."""
        self.config.check_size(len(batch.items))
        items = []
        append = items.append
        max_name = self.config.max_name_length
        for index, item in enumerate(batch.items):
            quota_type, user, client_id, value = item.quota_type, item.user, item.client_id, item.value
            if quota_type not in _TYPE_NAMES:
                raise InvalidArgument(f"item {index}: unknown quota type {quota_type}; expected PRODUCE or FETCH")
            if not (0.0 <= value < math.inf):
                raise InvalidArgument(f"item {index}: value must be a finite number >= 0, got {value!r}")
            if not user or len(user) > max_name or len(client_id) > max_name or "\x00" in user or "\x00" in client_id:
                self.config.check_name(index, "user", user, allow_empty=False)
                self.config.check_name(index, "client_id", client_id, allow_empty=True)
            t = item.now_ms if item.HasField("now_ms") else now_ms
            if t < 0:
                raise InvalidArgument(f"item {index}: now_ms must be >= 0, got {t}")
            append((_TYPE_NAMES[quota_type], user, client_id, value, t))
        return items

    def request_items(
        self, batch: pb.RequestTimeBatch, now_ms: int
    ) -> tuple[list[tuple[str, str, int, int, bool, int]], list[tuple[str, str, str]]]:
        """``(user, client_id, request nanos, network nanos, exempt, now_ms)`` per item, and what to resolve
        each by: ``("REQUEST", user, client_id)`` (an exempt item goes to the one exempt sensor)."""
        self.config.check_size(len(batch.items))
        items, tags = [], []
        for index, item in enumerate(batch.items):
            self.config.check_name(index, "user", item.user, allow_empty=False)
            self.config.check_name(index, "client_id", item.client_id, allow_empty=True)
            if item.request_thread_time_nanos < 0 or item.network_thread_time_nanos < 0:
                raise InvalidArgument(f"item {index}: thread times must be >= 0 nanoseconds")
            t = item_time(index, item, now_ms)
            items.append(
                (
                    item.user,
                    item.client_id,
                    item.request_thread_time_nanos,
                    item.network_thread_time_nanos,
                    item.exempt,
                    t,
                )
            )
            tags.append(("REQUEST", item.user, item.client_id))
        return items, tags

    def mutation_items(
        self, batch: pb.MutationBatch, now_ms: int
    ) -> tuple[list[tuple[str, str, bool, tuple[float, ...], int]], list[tuple[str, str, str]]]:
        """``(user, client_id, strict, permits, now_ms)`` per item, and ``("CONTROLLER_MUTATION", user,
        client_id)`` to resolve each by."""
        self.config.check_size(len(batch.items))
        items, tags = [], []
        for index, item in enumerate(batch.items):
            self.config.check_name(index, "user", item.user, allow_empty=False)
            self.config.check_name(index, "client_id", item.client_id, allow_empty=True)
            if item.mode not in (pb.STRICT, pb.PERMISSIVE):
                raise InvalidArgument(f"item {index}: mode must be STRICT or PERMISSIVE, got {item.mode}")
            if not item.permits:
                raise InvalidArgument(f"item {index}: permits must name at least one topic's mutations")
            if len(item.permits) > self.config.max_batch_items:
                raise InvalidArgument(f"item {index}: more than {self.config.max_batch_items} permits")
            permits = tuple(item.permits)
            if not all(0.0 <= p < math.inf for p in permits):
                raise InvalidArgument(f"item {index}: permits must be finite numbers >= 0")
            t = item_time(index, item, now_ms)
            items.append((item.user, item.client_id, item.mode == pb.STRICT, permits, t))
            tags.append(("CONTROLLER_MUTATION", item.user, item.client_id))
        return items, tags

    def replication_items(
        self, batch: pb.ReplicationBatch, now_ms: int
    ) -> tuple[list[tuple[int, str, str, int, float, int]], list[str]]:
        """``(node_id, type, topic, partition, record_bytes, now_ms)`` per item, keyed by node."""
        self.config.check_size(len(batch.items))
        items, keys = [], []
        for index, item in enumerate(batch.items):
            if item.node_id < 0:
                raise InvalidArgument(f"item {index}: node_id must be >= 0, got {item.node_id}")
            type_name = _REPLICATION_NAMES.get(item.type)
            if type_name is None:
                raise InvalidArgument(f"item {index}: unknown replication type {item.type}")
            self.config.check_name(index, "topic", item.topic, allow_empty=False)
            if item.partition < 0:
                raise InvalidArgument(f"item {index}: partition must be >= 0, got {item.partition}")
            if not 0.0 <= item.record_bytes < math.inf:
                raise InvalidArgument(f"item {index}: record_bytes must be a finite number >= 0")
            t = item_time(index, item, now_ms)
            items.append((item.node_id, type_name, item.topic, item.partition, item.record_bytes, t))
            keys.append(f"replication:{item.node_id}")
        return items, keys

    def resolve_by(self, tags: list[tuple[str, str, str]], exempt: Sequence[bool] | None = None) -> _Router:
        """A router resolving item i by ``tags[i]`` (its own metric tags; ``exempt[i]``: the exempt key)."""

        def route(_items: list[Any], indices: Sequence[int] | None) -> tuple[int, list[str]]:
            chosen = range(len(tags)) if indices is None else indices
            offset, keys = self.replica.resolve([tags[i] for i in chosen])
            if exempt is not None:
                keys = [_EXEMPT_REQUEST_KEY if exempt[i] else key for i, key in zip(chosen, keys, strict=True)]
            return offset, keys

        return route

    def producer_id_items(self, batch: pb.ProducerIdBatch, now_ms: int) -> list[tuple[str, int, int]]:
        self.config.check_size(len(batch.items))
        items = []
        for index, item in enumerate(batch.items):
            self.config.check_name(index, "user", item.user, allow_empty=False)
            if not 0 <= item.producer_id <= _MAX_PRODUCER_ID:
                raise InvalidArgument(f"item {index}: producer_id must be >= 0, got {item.producer_id}")
            items.append((item.user, item.producer_id, item_time(index, item, now_ms)))
        return items

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

    def finish(self, pending: _Pending, error: Exception | None = None) -> None:
        """A request is answered (or failed): give its room back once."""
        if error is not None and not pending.fail(error):
            return
        with self._room:
            self._in_flight -= len(pending.items)
            self._completed_items += len(pending.items)
            self._room.notify_all()

    # --- routing ---------------------------------------------------------------------------------------
    def _owner(self, key: str) -> str:
        owner = self._owner_cache.get(key)
        if owner is None:
            if len(self._owner_cache) > 100_000:
                self._owner_cache.clear()
            owner = self._owner_cache[key] = self.placement.owner(key)
        return owner

    def _route(self, pending: _Pending, indices: Sequence[int] | None = None, *, front: bool = False) -> None:
        items = pending.items
        chosen = range(len(items)) if indices is None else indices
        offset, keys = pending.route(items, indices)
        groups: dict[str, list[int]] = {}
        owner = self._owner
        for index, key in zip(chosen, keys, strict=True):
            shard = owner(key)
            group = groups.get(shard)
            if group is None:
                groups[shard] = [index]
            else:
                group.append(index)
        sizes = pending.sizes
        for shard, group in groups.items():
            size = sum(sizes[i] for i in group) if sizes is not None else 0
            self.workers[shard].put([_Unit(pending, group, offset, size)], front=front)

    def reroute(self, units: Sequence[_Unit], shard_offset: int) -> None:
        """A shard was at a newer config than these items were routed at: catch up, route them again,
        ahead of what is queued (so a shard still sees each stream's items in order)."""
        self.reroutes += 1
        try:
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
        route: _Router | None = None,
        *,
        sizes: Sequence[int] | None = None,
    ) -> _Pending:
        """Admit, route and queue a validated batch; the caller waits on ``pending.done``. ``route`` gives
        ``(config offset, shard keys)`` of the items at some indices (None: all); by default each item's
        metric tags, for items that start ``(quota type, user, client_id)``."""
        self.admit(len(items), wait_s)
        pending = _Pending(kind, items, route if route is not None else self._resolve_tags)
        if sizes is not None:
            if len(sizes) != len(items):
                raise ValueError(f"{len(items)} items but {len(sizes)} sizes")
            pending.sizes = list(sizes)
        try:
            self._route(pending)
        except Exception as e:
            self.finish(pending, error=e if isinstance(e, Unavailable) else Unavailable(str(e)))
        return pending

    def wait(self, pending: _Pending) -> tuple[int, list[Any]]:
        """Wait for a submitted batch: ``(config offset, results in the items' order)``, or its error."""
        if not pending.done.wait(self.config.shard_timeout_s + 5):
            raise Unavailable("the shards did not answer in time")
        if pending.error is not None:
            raise pending.error
        return pending.offset, pending.results

    def answer(self, pending: _Pending, batch_id: int) -> pb.ThrottleBatch:
        """Wait for a submitted batch; its ThrottleBatch, or its error raised."""
        offset, results = self.wait(pending)
        return pb.ThrottleBatch(batch_id=batch_id, throttle_time_ms=results, config_offset=offset)

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

    def stats(self) -> dict[str, Any]:
        return {
            "config_offset": self.replica.offset,
            "in_flight_items": self._in_flight,
            "reroutes": self.reroutes,
            "shards": {s: {"batches": w.batches, "items": w.items} for s, w in self.workers.items()},
        }


# --- servicers ---------------------------------------------------------------------------------------------
def _status_of(exc: BaseException) -> tuple[grpc.StatusCode, str, int]:
    if isinstance(exc, InvalidArgument):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc), 0
    if isinstance(exc, Exhausted):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), exc.retry_after_ms
    if isinstance(exc, Unavailable):
        return grpc.StatusCode.UNAVAILABLE, str(exc), 0
    return grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); see the gateway's log", 0


def unary(method: Callable[..., Any]) -> Callable[..., Any]:
    """Exceptions become a gRPC status with a one-line message (and the retry-after trailer)."""

    @functools.wraps(method)
    def handler(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as exc:
            code, message, retry_after_ms = _status_of(exc)
            if code is grpc.StatusCode.INTERNAL:
                log.exception("%s failed", method.__name__)
            if retry_after_ms:
                context.set_trailing_metadata(((RETRY_AFTER_TRAILER, str(retry_after_ms)),))
            context.abort(code, message.splitlines()[0] if message else code.name)

    return handler


class QuotaServicer(quota_pb2_grpc.QuotaServiceServicer):
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    @unary
    def RecordUsageBatch(self, request: pb.UsageBatch, context: grpc.ServicerContext) -> pb.ThrottleBatch:
        gateway = self.gateway
        items = gateway.usage_items(request, gateway.clock())
        return gateway.answer(gateway.submit("usage", items, 0.0), request.batch_id)

    def RecordUsage(
        self, request_iterator: Iterator[pb.UsageBatch], context: grpc.ServicerContext
    ) -> Iterator[pb.ThrottleBatch]:
        """Pipelined: a reader thread validates and submits batches as they come; answers are yielded in
        the order of the requests. Errors are answered in-band and the stream goes on."""
        gateway = self.gateway
        answers: queue.Queue[Any] = queue.Queue(maxsize=gateway.config.max_stream_in_flight)
        stop = threading.Event()

        def put(entry: Any) -> bool:
            while not stop.is_set():
                try:
                    answers.put(entry, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def read() -> None:
            try:
                for batch in request_iterator:
                    try:
                        items = gateway.usage_items(batch, gateway.clock())
                        entry: Any = (batch.batch_id, gateway.submit("usage", items, gateway.config.stream_wait_s))
                    except Exception as exc:
                        entry = (batch.batch_id, exc)
                    if not put(entry):
                        return
            except Exception as exc:  # the client went away or sent garbage
                log.debug("RecordUsage stream reader stopped: %s", exc)
            finally:
                put(None)

        reader = threading.Thread(target=read, name="gateway-stream-reader", daemon=True)
        reader.start()
        try:
            while True:
                entry = answers.get()
                if entry is None:
                    return
                batch_id, outcome = entry
                try:
                    if isinstance(outcome, Exception):
                        raise outcome
                    yield gateway.answer(outcome, batch_id)
                except Exception as exc:
                    code, message, retry_after_ms = _status_of(exc)
                    if code is grpc.StatusCode.INTERNAL:
                        log.error("RecordUsage batch %s failed: %r", batch_id, exc)
                    yield pb.ThrottleBatch(
                        batch_id=batch_id,
                        error=pb.BatchError(
                            code=code.value[0], message=message.splitlines()[0], retry_after_ms=retry_after_ms
                        ),
                    )
        finally:
            stop.set()

    @unary
    def UnrecordUsage(self, request: pb.UsageBatch, context: grpc.ServicerContext) -> pb.ThrottleBatch:
        gateway = self.gateway
        items = gateway.usage_items(request, gateway.clock())
        return gateway.answer(gateway.submit("unrecord", items, 0.0), request.batch_id)

    @unary
    def RecordRequestTime(self, request: pb.RequestTimeBatch, context: grpc.ServicerContext) -> pb.ThrottleBatch:
        gateway = self.gateway
        items, tags = gateway.request_items(request, gateway.clock())
        route = gateway.resolve_by(tags, [item[4] for item in items])
        return gateway.answer(gateway.submit("request", items, 0.0, route), request.batch_id)

    @unary
    def RecordMutations(self, request: pb.MutationBatch, context: grpc.ServicerContext) -> pb.MutationResults:
        gateway = self.gateway
        items, tags = gateway.mutation_items(request, gateway.clock())
        offset, results = gateway.wait(gateway.submit("mutation", items, 0.0, gateway.resolve_by(tags)))
        return pb.MutationResults(
            batch_id=request.batch_id,
            results=[pb.MutationResult(throttle_time_ms=t, accepted=accepted) for t, accepted in results],
            config_offset=offset,
        )

    @unary
    def CheckReplication(self, request: pb.ReplicationBatch, context: grpc.ServicerContext) -> pb.ReplicationResults:
        gateway = self.gateway
        items, keys = gateway.replication_items(request, gateway.clock())
        offset, results = gateway.dispatch("replication", items, keys)
        return pb.ReplicationResults(
            batch_id=request.batch_id,
            results=[pb.ReplicationResult(throttled=t, quota_exceeded=e) for t, e in results],
            config_offset=offset,
        )


class ProducerIdServicer(quota_pb2_grpc.ProducerIdServiceServicer):
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    @unary
    def RecordProducerIds(self, request: pb.ProducerIdBatch, context: grpc.ServicerContext) -> pb.ThrottleBatch:
        gateway = self.gateway
        items = gateway.producer_id_items(request, gateway.clock())
        offset, results = gateway.dispatch("producer_ids", items, [item[0] for item in items])
        return pb.ThrottleBatch(batch_id=request.batch_id, throttle_time_ms=results, config_offset=offset)


class _Server:
    """The gRPC server and its gateway: ``stop`` stops both (as ``grpc.Server.stop`` is called)."""

    def __init__(self, server: grpc.Server, gateway: Gateway) -> None:
        self.server = server
        self.gateway = gateway

    def stop(self, grace: float | None) -> threading.Event:
        event = self.server.stop(grace)
        self.gateway.close()
        return event

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        return self.server.wait_for_termination(timeout)


def serve_gateway(
    controller: Any,
    shards: Mapping[str, Any],
    address: str = "127.0.0.1:0",
    *,
    config: GatewayConfig | None = None,
    max_workers: int = 32,
    clock: Callable[[], int] = wall_clock_ms,
    security: ServerSecurity | None = None,
) -> tuple[_Server, int, Gateway]:
    """Start a gateway (config replica loaded before it listens) with QuotaService, ProducerIdService,
    health and reflection; return the server (``stop(grace)``), its port and the gateway.

    Must run in a Ray driver connected to the cluster of ``controller`` and ``shards`` (shard id ->
    ShardActor handle; every gateway of a fleet must be given the same ids). ``max_workers`` bounds the
    concurrent RPCs: each open stream holds one. ``SO_REUSEPORT`` is off, as for the admin service.
    """
    gateway = Gateway(controller, shards, config=config, clock=clock)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="gateway-grpc"),
        # a PushTelemetry batch carries several pushes of up to telemetry.max.bytes (1 MiB) each
        options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
    )
    quota_pb2_grpc.add_QuotaServiceServicer_to_server(QuotaServicer(gateway), server)
    quota_pb2_grpc.add_ProducerIdServiceServicer_to_server(ProducerIdServicer(gateway), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    from .connection_service import add_connection_service  # these import this module
    from .telemetry_service import add_telemetry_service

    extra = [*add_telemetry_service(server, gateway), *add_connection_service(server, gateway)]
    reflection.enable_server_reflection(
        (
            QUOTA_SERVICE_NAME,
            PRODUCER_ID_SERVICE_NAME,
            *extra,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    served = ("", QUOTA_SERVICE_NAME, PRODUCER_ID_SERVICE_NAME, *extra)

    def set_health(serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in served:
            health_servicer.set(service, status)

    set_health(True)
    gateway.on_config_health = set_health
    try:
        port = bind_port(server, address, security)  # TLS / mutual TLS when configured; no operator check here
    except OSError:
        gateway.close()
        raise
    server.start()
    return _Server(server, gateway), port, gateway
