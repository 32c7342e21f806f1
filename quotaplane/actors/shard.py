"""ShardActor: the Ray actor hosting the core quota managers for one slice of the entities.

A shard keeps a full :class:`~quotaplane.config.ConfigImage` (config is small; usage is what is
sharded) and the managers built from it, all in one metrics registry: the client quota managers
(``build_quota_managers``: produce, fetch, request, controller mutation), the KIP-936
``ProducerIdQuotaManager`` and the KIP-714 ``ClientMetricsManager`` (``TelemetryHost``, with the
shard's telemetry archive), bound by a ``ManagerBinding`` that applies every config change to them in
place, so a quota change never resets the usage already recorded. Per-broker state (Kafka's
``ConnectionQuotas`` and replication throttles) is kept per node id it is asked about
(``ConnectionHost``, ``ReplicationHost``), each node bound to the log the same way.

**Config stream.** At start the shard pulls the whole log from the controller (``read_from``; a
``snapshot()`` when the log no longer starts at 0), builds its managers from the image it reached
(``startup_configs``: quota windows and other start-up keys are read only here, as in Kafka), then
subscribes. Pushed batches are applied strictly in offset order: what it already has is skipped; a gap
(a lost push) makes it pull the missing events from the controller first. Every event goes through
``image.apply`` and ``binding.apply``. The last events applied (up to 10,000 or 4 MiB: the follower's tail)
are kept to hand to a gateway behind this shard (``serve_at``), so the gateway needs no controller to catch up.

**Hot path.** Batches only, through one entry point: ``serve_at(kind, config_offset, items)`` (see
``SERVE_KINDS``; the gateway's micro-batches, which arrive pickled through ``serve_packed``). Every item of a
batch is validated before any is served, so a bad batch raises (through Ray, as the core's ValueError) and
changes nothing. Housekeeping (sensor expiry, idle client instances, abandoned connection attempts) runs every
30 s of the callers' clock.

**Direct channel.** The gateway's micro-batches come over a plain TCP connection to the shard (``_direct``:
~20 µs a round trip where a Ray actor call costs ~0.5–0.9 ms), its address and token from the
``direct_address`` actor call; ``serve_packed`` is the same through Ray. Every public method runs under one
re-entrant lock (``serialized``), so the core still sees one call at a time.

**Restarts.** ``max_restarts=-1``: after a crash Ray starts the actor again with the same arguments and
it rebuilds from the log. Sensors live in the process; with a data directory the shard checkpoints the
usage windows of its produce, fetch and request quota sensors there every ``checkpoint_interval_s``
(``_usage_checkpoint``) and a restarted shard puts them back after the config replay, so it forgives only
what was recorded after the last checkpoint. Without one (or with a checkpoint older than a quota window)
it answers as if its clients had been idle: at most one window (~11 s by default) of overuse.
``progress()["restored_usage_age_ms"]`` says how old the restored windows were.

**Warm standby** (``_standby``; ``standby=True``): the same class as a second actor per shard, on another node,
following the log but serving nothing (``NotServingError``) until a gateway that lost the primary asks it to
``take_over``; the controller grants that only once Ray says the primary's incarnation is gone, and the standby
then serves from the primary's last usage checkpoint. A primary claims the shard in ``__init__`` before it
serves, and if the standby was serving, ``release``s it first and goes on from the usage windows it hands back.
A node loss is so served again after Ray's death detection plus the takeover (~0.1 s), not after a new worker
process and its imports (1-2 s: ``info()["start_phases_ms"]`` shows where a start goes).

The actor runs one call at a time (Ray's default for a synchronous actor): the core is single-threaded
by design, and a catch-up pull blocks the shard's queue only for the time of that pull.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import operator
import os
import pickle
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import ray
from ray.exceptions import RayActorError

from quotaplane.config import ConfigImage, ManagerBinding, decode_columns, startup_configs
from quotaplane.gc_pause import freeze_long_lived
from quotaplane.quota import (
    ProducerIdItem,
    ProducerIdQuotaManager,
    QuotaType,
    TagsMemo,
    ThrottlingQuotaExceededError,
    UsageItem,
    UsageSnapshot,
    build_quota_managers,
    export_usage,
    import_usage,
)

from ._connection_host import ConnectionHost
from ._direct import DirectAddress, DirectChannelServer, serialized
from ._follower import Bindings, ConfigFollower, ray_get
from ._lease_host import LeaseHost
from ._metric_rows import MetricRow, metric_rows
from ._named import resolve_actor
from ._replication_host import ReplicationHost
from ._reshard import HandOver, ReshardHost
from ._resources import check_resources
from ._shard_checks import _check_batch, _check_usage_items, _is_client_item
from ._standby import STANDBY_SUFFIX
from ._standby_member import StandbyMember
from ._start_phases import StartPhases
from ._telemetry_host import TelemetryHost, archive_writer_id
from ._throttle_archive import ThrottleArchive, record_throttles
from ._usage_checkpoint import CHECKPOINT_FILE, UsageCheckpointer, load_checkpoint
from ._usage_columns import COLUMN_KINDS, UsageColumns, last_time_ms, unpack_usage
from .controller import wall_clock_ms

__all__ = ["FENCED_KINDS", "HOUSEKEEPING_INTERVAL_MS", "SERVE_KINDS", "ShardActor", "start_shard"]

logger = logging.getLogger(__name__)
_CLIENT_QUOTA_TYPES = (QuotaType.PRODUCE, QuotaType.FETCH)
T = TypeVar("T")

#: What ``serve_at`` serves. The first four resolve Kafka metric tags (the sensor an item shares depends
#: on every configured quota entity), so gateway and shard must read the same image: they are fenced.
SERVE_KINDS = (
    "usage", "unrecord", "request", "mutation", "lease", "throttle",
    "producer_ids", "replication", "telemetry", "connection",
)  # fmt: skip
FENCED_KINDS = frozenset({"usage", "unrecord", "request", "mutation", "throttle"})  # "lease" is routed by its key
#: Kafka expires inactive sensors from a background task every 30 s (ExpireSensorTask); a shard does it
#: on the first call past each interval of its callers' clock.
HOUSEKEEPING_INTERVAL_MS = 30_000


@serialized
class ShardActor(StandbyMember):
    """Managers for one shard, kept in step with the controller's log."""

    def __init__(
        self,
        shard_id: str | int,
        controller: Any,
        node_id: int | None = None,
        *,
        catch_up_events: int = 10_000,
        controller_timeout_s: float = 30.0,
        data_dir: str | None = None,
        checkpoint_interval_s: float | None = 1.0,
        standby: bool = False,
    ) -> None:
        #: every public method runs under it (``serialized``): Ray's thread and the direct channel's take turns
        self.serving_lock = threading.RLock()
        self.shard_id = shard_id
        self.node_id = node_id
        #: where this shard writes (the telemetry archive); None: nothing on disk
        self.data_dir = data_dir
        self._controller = resolve_actor(controller)
        self._controller_timeout_s = controller_timeout_s
        self._started_ms = wall_clock_ms()
        context = ray.get_runtime_context()
        self._reconstructed = bool(context.was_current_actor_reconstructed)
        self._actor_name = context.get_actor_name() or None
        self._namespace = context.namespace
        phases = StartPhases()
        #: a warm standby (``_standby``): follows the log, serves only between ``take_over`` and ``release``
        self.standby = standby
        #: whether this member decides the shard's keys now (a primary: always once started)
        self.serving = not standby
        self.took_over_ms: int | None = None
        #: the controller's epoch of this standby's last grant
        self.epoch: int | None = None
        #: the Ray actor id of the primary (the same across its restarts): a standby starts after it
        self._primary_id: str | None = self._find_primary_id() if standby else None
        #: until when ``take_over`` answers None at once (``time.monotonic``): the primary outlived a whole wait
        self._refused_until = 0.0
        self.takeovers = 0
        self.releases = 0
        self._checkpoint_interval_s = checkpoint_interval_s
        self.follower = ConfigFollower(self._call, max_events=catch_up_events)
        self.follower.start()
        phases.mark("config_replay")
        self._build_managers(self._started_ms)
        phases.mark("build_managers")
        # a primary claims the shard before it serves; the standby hands back what it decided meanwhile
        handed = None if standby else self._claim()
        phases.mark("claim")
        self.restored_usage_age_ms: int | None = None
        self.restored_sensors = 0
        if not standby:
            self._restore_usage(handed, self._started_ms)
        phases.mark("checkpoint_load")
        self._subscribe()
        phases.mark("subscribe")
        self._direct = DirectChannelServer(self.serve_at, ray.util.get_node_ip_address())
        phases.mark("direct_channel")
        self._checkpointer: UsageCheckpointer | None = None
        if not standby:
            self._start_checkpointer()
        #: the objects this process made until now (imports, the replayed image, the managers): frozen, so the
        #: full collections between decisions do not walk them (``freeze_long_lived``)
        self.gc_frozen_objects = freeze_long_lived()
        phases.mark("gc_freeze")
        #: where this incarnation's start went (ms): its process' start to ``__init__`` (the worker's own start,
        #: Ray's and quotaplane's imports), then each step of ``__init__`` (``info()["start_phases_ms"]``)
        self.start_phases_ms = phases.done(self._started_ms)

    @property
    def image(self) -> ConfigImage:
        return self.follower.image

    def _start_checkpointer(self) -> None:
        """Write the usage windows to the data directory every ``checkpoint_interval_s`` (while serving)."""
        if self.data_dir is None or not self._checkpoint_interval_s:
            return
        self._checkpointer = UsageCheckpointer(
            Path(self.data_dir) / CHECKPOINT_FILE,
            lambda hold: export_usage(self.quotas, hold=hold),
            functools.partial(UsageSnapshot.to_chunks, tags=TagsMemo()),  # each sensor's tags encoded once
            self.serving_lock,
            wall_clock_ms,
            interval_s=self._checkpoint_interval_s,
        )
        self._checkpointer.start()

    # --- start ---------------------------------------------------------------------------------------
    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A call to the controller, retried while Ray restarts it (its own errors are raised at once)."""
        deadline = time.monotonic() + self._controller_timeout_s
        delay = 0.05
        while True:
            try:
                remote = getattr(self._controller, method).remote
                return ray_get(remote(*args, **kwargs), self._controller_timeout_s)
            except RayActorError:
                if time.monotonic() + delay >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _build_managers(self, now_ms: int) -> None:
        startup = startup_configs(self.image, self.node_id)
        self.quotas = build_quota_managers(startup.quota, now_ms=now_ms)
        metrics = self.quotas.metrics
        self.producer_ids = ProducerIdQuotaManager(startup.producer_ids, metrics=metrics)
        self.telemetry = TelemetryHost(
            shard_id=self.shard_id,
            node_id=self.node_id,
            data_dir=self.data_dir,
            metrics=metrics,
            startup=startup,
            now_ms=now_ms,
        )
        self.binding = ManagerBinding(
            quotas=self.quotas,
            producer_ids=self.producer_ids,
            telemetry=self.telemetry.manager,
            node_id=self.node_id,
        )
        self.binding.load(self.image)
        #: every non-zero throttle this shard answers, for the Spark throttle report (None: no data dir)
        self.throttles = (
            None
            if self.data_dir is None
            else ThrottleArchive(self.data_dir, writer_id=archive_writer_id(self.shard_id))
        )
        # per-node state (Kafka's per-broker limits), each node bound to the log on its first item
        self.replication = ReplicationHost(lambda: self.image)
        self.connections = ConnectionHost(lambda: self.image)
        #: leased budgets: the shares of the keys this shard owns that gateways decide with (``_lease_host``)
        self.leases = LeaseHost(lambda: self.quotas, lambda: self.image, lambda: self.throttles)
        #: the keys this shard owns at its offset; a reshard's hand-over of moved state (``_reshard``)
        # a standby that does not serve must not pull a reshard's moved state: the hand-over takes it from the giver
        self.reshard = ReshardHost(
            str(self.shard_id), self, self._peer, lambda: self.latest_ms, receives=lambda: self.serving
        )
        self.follower.binding = Bindings(self.binding, self.replication, self.connections, self.reshard)
        self._handlers = {
            "usage": self._serve_usage,
            "unrecord": self._serve_unrecord,
            "request": self._serve_request,
            "mutation": self._serve_mutation,
            "lease": self.leases.serve,
            "throttle": self.leases.serve_throttles,
            "producer_ids": self._serve_producer_ids,
            "replication": self.replication.serve,
            "telemetry": self.telemetry.serve,
            "connection": self.connections.serve,
        }
        #: the latest now_ms callers have given: the shard's clock for housekeeping (the core reads none)
        self.latest_ms = now_ms
        self._next_housekeeping_ms = now_ms + HOUSEKEEPING_INTERVAL_MS
        self.expired_sensors = 0

    def _peer(self, shard_id: str) -> Any:
        """Another shard of this cluster, by id: named as this one is (``quotaplane-shard-<id>`` by default),
        in the same namespace."""
        own, suffix = self._primary_name(), str(self.shard_id)
        prefix = own[: -len(suffix)] if own and own.endswith(suffix) else "quotaplane-shard-"
        return ray.get_actor(f"{prefix}{shard_id}", namespace=self._namespace)

    def _restore_usage(self, handed: bytes | None, now_ms: int) -> None:
        """Put back the usage windows a released standby ``handed`` over (exact: age 0), else those of the last
        checkpoint, if it is younger than the largest quota window (``_usage_checkpoint``);
        ``restored_usage_age_ms`` (how old the restored windows were, ms) stays None when nothing was restored."""
        self.restored_usage_age_ms = None
        self.restored_sensors = 0
        if handed is not None:
            age_ms, snapshot = 0, UsageSnapshot.from_bytes(handed)
        else:
            if self.data_dir is None:
                return
            config = self.quotas.produce.config
            loaded = load_checkpoint(
                Path(self.data_dir) / CHECKPOINT_FILE, now_ms, config.num_quota_samples * config.quota_window_ms
            )
            if loaded is None:
                return
            age_ms, snapshot = loaded
        try:
            restored = import_usage(self.quotas, snapshot, now_ms)
        except ValueError as exc:  # checked whole before anything is restored: the shard starts empty
            logger.warning("usage checkpoint of shard %s ignored: %s", self.shard_id, exc)
            return
        self.restored_usage_age_ms = age_ms
        self.restored_sensors = sum(n for kind, n in restored.items() if kind != "skipped")

    def _subscribe(self) -> None:
        context = ray.get_runtime_context()
        name = context.get_actor_name() or None
        namespace = context.namespace if name else None
        self._call("subscribe", context.current_actor, self.image.end_offset, name=name, namespace=namespace)

    # --- the config stream ---------------------------------------------------------------------------
    def apply_batch(self, base_offset: int, payload: bytes) -> int:
        """Apply a pushed batch (events at ``base_offset``, ``base_offset + 1``, ...) in offset order and
        return the applied offset. Events already applied are skipped; on a gap the missing events are
        pulled from the controller first."""
        if isinstance(base_offset, bool) or not isinstance(base_offset, int) or base_offset < 0:
            raise ValueError(f"base_offset must be a non-negative int, got {base_offset!r}")
        if not isinstance(payload, bytes):
            raise ValueError(f"payload must be EventColumns bytes, got {type(payload).__name__}")
        self.follower.apply(base_offset, decode_columns(payload), payload)
        return self.image.end_offset

    def notify_end_offset(self, end_offset: int) -> int:
        """The controller's log reaches ``end_offset``: pull whatever this shard is missing."""
        if end_offset > self.image.end_offset:
            self.follower.catch_up(end_offset)
        return self.image.end_offset

    def applied_offset(self) -> int:
        """The offset of the next event this shard expects (= events applied)."""
        return self.image.end_offset

    def progress(self) -> dict[str, Any]:
        """Applied offset and incarnation, for the metrics endpoint: ``incarnation`` changes when Ray
        restarts the actor, ``reconstructed`` is true in a restarted one (its usage windows started over)."""
        return {
            "applied_offset": self.image.end_offset,
            # a standby's incarnation starts again at each takeover: the usage it decides begins there
            "incarnation": (os.getpid(), self.took_over_ms or self._started_ms),
            "standby": self.standby,
            "serving": self.serving,
            "reconstructed": self._reconstructed,
            "throttle_archive_dropped": 0 if self.throttles is None else self._throttles_dropped(),
            "restored_usage_age_ms": self.restored_usage_age_ms,
            "placement_offset": self.reshard.placement_offset,
            "hand_over_failures": self.reshard.stats.hand_over_failures,
        }

    def _throttles_dropped(self) -> int:
        assert self.throttles is not None
        stats = self.throttles.stats()
        return int(stats.get("dropped_by_rate", 0)) + int(stats.get("dropped", 0))

    # --- the hot path ----------------------------------------------------------------------------------
    def record_batch(self, quota_type: str | QuotaType, items: Sequence[UsageItem], now_ms: int) -> list[int]:
        """Record produce or fetch usage ``(user, client_id, value[, now_ms])``; the throttle time of each
        item in ms, in order, exactly as one-by-one calls to the core would give."""
        parsed = QuotaType.parse(quota_type)
        if parsed not in _CLIENT_QUOTA_TYPES:
            raise ValueError(f"record_batch takes PRODUCE or FETCH usage, not {parsed.name}")
        _check_batch(items)
        self._check_serving()
        return self._record(parsed, items, now_ms)

    def _record(self, quota_type: QuotaType, items: Sequence[UsageItem], now_ms: int) -> list[int]:
        """Record a batch and the throttle-time metric of each throttle answered: Kafka's broker reports
        each throttle back (``throttle()``); here the shard is the one that knows, so it records them."""
        manager = self.quotas.client_manager(quota_type)
        throttles = manager.record_batch(items, now_ms)
        if any(throttles):
            # one list and one call per batch: a method call per throttled item cost as much as deciding it
            # (Ray wraps every method of an actor class, private ones too, in a tracing shim)
            # only the throttled items are walked (a C loop finds them): most items are not throttled
            throttled = [
                (item[0], item[1], throttles[index], item[3] if len(item) > 3 else now_ms)
                for index in itertools.compress(itertools.count(), throttles)
                for item in (items[index],)
            ]
            record_throttles(manager, self.throttles, quota_type, throttled)
        return throttles

    def _throttle(self, manager: Any, quota_type: QuotaType, user: str, client_id: str, ms: int, now_ms: int) -> None:
        """A non-zero throttle answered: the manager's throttle-time metric, and the throttle archive."""
        manager.throttle(user, client_id, ms, now_ms)
        self._archive_throttle(now_ms, quota_type, user, client_id, ms)

    def _archive_throttle(self, now_ms: int, quota_type: QuotaType | str, user: str, client_id: str, ms: int) -> None:
        if self.throttles is not None:
            self.throttles.record(now_ms, str(quota_type), user, client_id, ms)

    def record_producer_ids(self, items: Sequence[ProducerIdItem], now_ms: int) -> list[int]:
        """KIP-936: ``(user, producer_id[, now_ms])`` items; the throttle time of each in ms."""
        _check_batch(items)
        self._check_serving()
        return self._record_producer_ids(items, now_ms)

    # --- the gateway's path: one entry point, fenced by config offset ------------------------------------
    def serve_at(
        self, kind: str, config_offset: int, items: Sequence[Any]
    ) -> tuple[int, list[Any]] | tuple[int, None, tuple[tuple[int, bytes], ...]]:
        """Serve a micro-batch of ``kind`` (see ``SERVE_KINDS``) that a gateway routed here with its config
        replica at ``config_offset``; ``(applied offset, one result per item in order)``.

        Why the offset: for the fenced kinds the gateway chose this shard by the sensor's metric tags, and
        the shard resolves the tags again from its own image; both must read the same image or the usage
        could land in a sensor this shard does not own (two budgets for one entity). A shard behind the
        gateway catches up to ``config_offset`` first; a shard ahead of it serves nothing and answers
        ``(its offset, None, events)``, ``events`` being the log batches ``(base offset, EventColumns
        payload)`` it applied from ``config_offset`` on (``ConfigFollower.events_after``; empty when its tail
        no longer reaches back that far): the gateway applies them (or, without them, reads the controller),
        resolves and routes the items again, and resends them. Quota changes are rare, so the retry is too.
        Why the events: the shard holds exactly what the gateway misses, so the gateway needs no controller
        call to pass the fence, and a controller that Ray is restarting (seconds) does not fail usage.
        Other kinds are routed by a key that needs no config (user, node id, client instance id): a shard
        behind catches up, one ahead just serves. Every other answer is the pair ``(offset, results)``.

        Every item is validated before any is served: a bad one raises ValueError and changes nothing.
        """
        self._check_serving()
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(self._handlers)}")
        if isinstance(config_offset, bool) or not isinstance(config_offset, int) or config_offset < 0:
            raise ValueError(f"config_offset must be a non-negative int, got {config_offset!r}")
        columns = isinstance(items, UsageColumns)
        if columns and kind not in COLUMN_KINDS:
            raise ValueError(f"{kind} items come as a list, not as usage columns")
        if not columns:
            _check_batch(items)
        if config_offset > self.image.end_offset:
            self.follower.catch_up(config_offset)
        if config_offset != self.image.end_offset and (
            kind in FENCED_KINDS or config_offset < self.reshard.placement_offset
        ):  # resolved at another image, or placed over another shard count: the gateway routes them again
            return self.image.end_offset, None, self.follower.events_after(config_offset)
        results = handler(items)
        last = last_time_ms(items) if columns else items[-1][-1]
        if type(last) is int and last > self.latest_ms:
            self.latest_ms = last
            if last >= self._next_housekeeping_ms:
                self.housekeeping(last)
        return self.image.end_offset, results

    def serve_packed(self, kind: str, config_offset: int, payload: bytes) -> bytes:
        """``serve_at`` with the items pickled by the caller and its answer pickled here.

        Why: Ray's own serializer walks an argument of a thousand small tuples item by item (measured: a
        1000-item usage micro-batch costs 3.2 ms as a list, 0.8 ms as one ``bytes``, on a 2-core machine),
        and a shard spends as long on that as on the quota decisions themselves. The gateway is the only
        caller; it and the shard are parts of one trusted cluster, as Ray's own pickled arguments are.
        """
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise ValueError(f"payload must be the pickled items, got {type(payload).__name__}")
        try:
            items = pickle.loads(payload)
        except Exception as e:
            raise ValueError(f"payload is not a pickled list of items: {e}") from None
        return pickle.dumps(self.serve_at(kind, config_offset, items), protocol=pickle.HIGHEST_PROTOCOL)

    def _serve_usage(self, items: Sequence[tuple[str, str, str, float, int]] | UsageColumns) -> list[int]:
        """Mixed PRODUCE / FETCH items ``(quota type, user, client_id, value, now_ms)`` (or the same as
        ``UsageColumns``, a gateway's form): throttle times."""
        groups = _group_by_type(items)
        if len(groups) == 1:
            [(quota_type, (_, group_items))] = groups.items()
            return self._record(quota_type, group_items, group_items[0][3])
        throttles = [0] * len(items)
        for quota_type, (indices, group_items) in groups.items():
            answered = self._record(quota_type, group_items, group_items[0][3])
            for index, throttle_ms in zip(indices, answered, strict=True):
                throttles[index] = throttle_ms
        return throttles

    def _serve_unrecord(self, items: Sequence[tuple[str, str, str, float, int]] | UsageColumns) -> list[int]:
        """Kafka's ``unrecordQuotaSensor`` for each item (a throttled fetch answered empty): all 0."""
        groups = _group_by_type(items)  # all checked before any is taken
        for quota_type, (_, group_items) in groups.items():
            manager = self.quotas.client_manager(quota_type)
            for user, client_id, value, now_ms in group_items:
                manager.unrecord_quota_sensor(user, client_id, value, now_ms)
        return [0] * len(items)

    def _serve_request(self, items: Sequence[tuple[str, str, int, int, bool, int]]) -> list[int]:
        """``(user, client_id, request_thread_nanos, network_thread_nanos, exempt, now_ms)``: the
        request_percentage throttle of each (ClientRequestQuotaManager; exempt requests feed the shared
        exempt sensor and are never throttled; network time is recorded without a throttle)."""
        for index, item in enumerate(items):
            if not (
                _is_client_item(item, 6)
                and all(type(v) is int and v >= 0 for v in (item[2], item[3], item[5]))
                and type(item[4]) is bool
            ):
                raise ValueError(f"item {index}: expected (user, client_id, nanos >= 0, nanos >= 0, exempt, now_ms)")
        manager = self.quotas.request
        throttles = []
        for user, client_id, request_nanos, network_nanos, exempt, now_ms in items:
            if exempt:
                manager.maybe_record_exempt(time_nanos=request_nanos + network_nanos, now_ms=now_ms)
                throttles.append(0)
                continue
            throttle_ms = manager.maybe_record_request_time(
                user, client_id, request_thread_time_nanos=request_nanos, now_ms=now_ms
            )
            if network_nanos:
                manager.record_network_thread_time(user, client_id, time_nanos=network_nanos, now_ms=now_ms)
            if throttle_ms > 0:
                self._throttle(manager, QuotaType.REQUEST, user, client_id, throttle_ms, now_ms)
            throttles.append(throttle_ms)
        return throttles

    def _serve_mutation(
        self, items: Sequence[tuple[str, str, bool, tuple[float, ...], int]]
    ) -> list[tuple[int, list[bool]]]:
        """``(user, client_id, strict, permits per topic, now_ms)``: ``(throttle_time_ms, accepted per
        topic)`` as Kafka's controller answers one CreateTopics / CreatePartitions / DeleteTopics request:
        one ControllerMutationQuota per request, ``record`` per topic (STRICT refuses a topic once the
        bucket is below zero), the request's throttle time at its end."""
        for index, item in enumerate(items):
            if not (
                _is_client_item(item, 5)
                and type(item[2]) is bool
                and isinstance(item[3], tuple | list)
                and all(type(p) in (int, float) and 0 <= p < math.inf for p in item[3])
                and type(item[4]) is int
                and item[4] >= 0
            ):
                raise ValueError(f"item {index}: expected (user, client_id, strict, permits >= 0, now_ms)")
        manager = self.quotas.controller_mutation
        results = []
        for user, client_id, strict, permits, now_ms in items:
            quota = (manager.new_strict_quota_for if strict else manager.new_permissive_quota_for)(
                user, client_id, now_ms
            )
            accepted = []
            for value in permits:
                try:
                    quota.record(float(value), now_ms)
                    accepted.append(True)
                except ThrottlingQuotaExceededError:
                    accepted.append(False)
            throttle_ms = quota.throttle_time(now_ms)
            if throttle_ms > 0:
                self._throttle(manager, QuotaType.CONTROLLER_MUTATION, user, client_id, throttle_ms, now_ms)
            results.append((throttle_ms, accepted))
        return results

    def _serve_producer_ids(self, items: Sequence[tuple[str, int, int]]) -> list[int]:
        """KIP-936 ``(user, producer_id, now_ms)`` items from the gateway (each carries its time; the core
        checks every item, this only needs the first to have one)."""
        first = items[0]
        if type(first) is not tuple or len(first) != 3:
            raise ValueError(f"item 0: expected (user, producer_id, now_ms), got {first!r}")
        return self._record_producer_ids(items, first[2])

    def _record_producer_ids(self, items: Sequence[ProducerIdItem], now_ms: int) -> list[int]:
        """The core's batch, and each non-zero throttle archived (one path for both entry points)."""
        throttles = self.producer_ids.record_batch(items, now_ms)
        for item, throttle_ms in zip(items, throttles, strict=True):
            if throttle_ms > 0:
                at = item[2] if len(item) == 3 else now_ms
                self._archive_throttle(at, "ProducerIds", item[0], "", throttle_ms)
        return throttles

    def housekeeping(self, now_ms: int) -> dict[str, int]:
        """What Kafka's background tasks do, at the callers' clock ``now_ms``: expire sensors inactive past
        their expiration (client quotas: one hour), so a churn of client ids never grows a shard without
        bound. Called by ``serve_at`` once per ``HOUSEKEEPING_INTERVAL_MS``; callable remotely."""
        self._next_housekeeping_ms = now_ms + HOUSEKEEPING_INTERVAL_MS
        expired = len(self.quotas.expire_sensors(now_ms))
        self.expired_sensors += expired
        return {
            "expired_sensors": expired,
            "expired_client_instances": self.telemetry.expire(now_ms),
            "abandoned_connection_attempts": self.connections.housekeeping(now_ms),
            "expired_lease_keys": self.leases.expire(now_ms),
        }

    def hand_over(self, end_offset: int, receiver: str, shard_count: int) -> HandOver:
        """A reshard's receiver asks for the state of the keys it now owns (``_reshard``): this shard first
        applies the log up to ``end_offset`` (the reshard's event included, so it stops deciding those keys),
        then exports and forgets them. Idempotent: asked again, it hands over nothing more."""
        for name, value in (("end_offset", end_offset), ("shard_count", shard_count)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(receiver, str) or not receiver.isdigit() or int(receiver) >= shard_count:
            raise ValueError(f"receiver must be a shard id below {shard_count}, got {receiver!r}")
        if end_offset > self.image.end_offset:
            self.follower.catch_up(end_offset)
        return self.reshard.hand_over(receiver, shard_count)

    def checkpoint_usage(self) -> dict[str, Any]:
        """Write a usage checkpoint now (tests, and before a planned stop); the checkpointer's stats."""
        if self._checkpointer is None:
            raise ValueError("this shard has no data directory or checkpoints disabled: no usage checkpoint")
        self._checkpointer.write_now()
        return self._checkpointer.stats()

    def direct_address(self) -> DirectAddress:
        """``(host, port, token)`` of this shard's direct channel (``_direct``): a gateway sends its
        micro-batches there instead of through ``serve_packed``. Changes when the actor restarts."""
        return self._direct.address

    def close(self) -> None:
        """Drain the telemetry and throttle archives (what was accepted reaches disk) before the actor goes
        away."""
        self._direct.close()
        if self._checkpointer is not None:
            self._checkpointer.stop()
        self.telemetry.close()
        if self.throttles is not None:
            self.throttles.close()

    def flush_archives(self, timeout_s: float = 10.0) -> bool:
        """Make every archived record so far durable (for tests and for a job that reads the archives)."""
        ok = self.telemetry.flush(timeout_s)
        if self.throttles is not None:
            ok = self.throttles.flush(timeout_s) and ok
        return ok

    def __ray_shutdown__(self) -> None:  # Ray calls it when the actor is terminated gracefully
        self.close()

    # --- introspection ---------------------------------------------------------------------------------
    def metrics_snapshot(self, now_ms: int | None = None) -> list[MetricRow]:
        """Every Kafka metric of this shard's registry, measured now: ``(name, group, description, tags,
        value)`` (``Produce`` byte-rate / throttle-time / quota-value per user and client id, ``Request``,
        ``ControllerMutation``, ``ProducerIds``, ``socket-server-metrics`` ...), for a metrics endpoint.
        Non-finite values are left out (Prometheus has no use for Kafka's NaN of an empty Avg)."""
        now = wall_clock_ms() if now_ms is None else now_ms
        snapshot = metric_rows(self.quotas.metrics, now)
        snapshot.extend(self.replication.metrics_snapshot(now))
        snapshot.extend(self.connections.metrics_snapshot(now))
        return snapshot

    def info(self) -> dict[str, Any]:
        """Identity and progress: ``pid`` and ``started_ms`` change when Ray restarts the shard."""
        return {
            "shard_id": self.shard_id,
            "node_id": self.node_id,
            "pid": os.getpid(),
            "started_ms": self._started_ms,
            "applied_offset": self.image.end_offset,
            "catch_ups": self.follower.catch_ups,
            "snapshot_loads": self.follower.snapshot_loads,
            "restart_required": sorted(self.binding.restart_required),
            "expired_sensors": self.expired_sensors,
            "replication_nodes": self.replication.nodes,
            "throttle_archive": None if self.throttles is None else self.throttles.stats(),
            "telemetry": self.telemetry.stats(),
            "leases": self.leases.stats(),
            "reshard": self.reshard.info(),
            "start_phases_ms": self.start_phases_ms,
            "gc_frozen_objects": self.gc_frozen_objects,
            "standby": self.standby,
            "serving": self.serving,
            "takeovers": self.takeovers,
            "releases": self.releases,
            "took_over_ms": self.took_over_ms,
            "usage_checkpoint": {
                "restored_age_ms": self.restored_usage_age_ms,
                "restored_sensors": self.restored_sensors,
                **({} if self._checkpointer is None else self._checkpointer.stats()),
            },
        }

    def node(self) -> str:
        """The id (hex) of the Ray node this shard runs on (``ray.util.state`` and ``ray.nodes()`` use it)."""
        return ray.get_runtime_context().get_node_id()

    def client_quotas(self) -> dict[str, dict[str, float]]:
        """The image's client quotas, keyed by the entity's string form (for checks and tools)."""
        return {repr(entity): dict(values) for entity, values in self.image.client_quotas().items()}


def _group_by_type(
    items: Sequence[tuple[str, str, str, float, int]] | UsageColumns,
) -> dict[QuotaType, tuple[list[int] | None, list[UsageItem]]]:
    """Items by quota type: ``(indices or None for all, core items (user, client_id, value, now_ms))``.

    Every item of every type is checked first, so a bad item raises before any group is recorded. The checks
    and the split run a column at a time (``zip``, ``map``, ``set``: C loops): a shard spent as long walking
    its items one by one as deciding them. A gateway sends columns (``_usage_columns``), already apart.
    """
    if isinstance(items, UsageColumns):
        return unpack_usage(items)
    if set(map(type, items)) != {tuple} or set(map(len, items)) != {5}:
        _check_usage_items(items)
    types, users, client_ids, values, times = zip(*items, strict=True)
    if not (
        set(map(type, types)) == {str}
        and set(map(type, users)) == {str}
        and set(map(type, client_ids)) == {str}
        and set(map(type, values)) <= {float, int}
        and min(values) >= 0
        and math.isfinite(sum(values))
        and set(map(type, times)) == {int}
        and min(times) >= 0
    ):
        _check_usage_items(items)
    kinds = {name: QuotaType.parse(name) for name in set(types)}
    for kind in kinds.values():
        if kind not in _CLIENT_QUOTA_TYPES:
            raise ValueError(f"usage items are PRODUCE or FETCH, not {kind.name}")
    if len(set(kinds.values())) == 1:
        return {next(iter(kinds.values())): (None, list(zip(users, client_ids, values, times, strict=True)))}
    groups: dict[QuotaType, tuple[list[int] | None, list[UsageItem]]] = {}
    for kind in set(kinds.values()):
        names = {name for name, parsed in kinds.items() if parsed is kind}
        indices = list(itertools.compress(itertools.count(), map(names.__contains__, types)))
        groups[kind] = (indices, list(map(_CORE_FIELDS, map(items.__getitem__, indices))))
    return groups


#: ``(type, user, client_id, value, now_ms)`` -> the core's ``(user, client_id, value, now_ms)``
_CORE_FIELDS = operator.itemgetter(1, 2, 3, 4)


def start_shard(
    shard_id: str | int,
    controller: Any,
    node_id: int | None = None,
    *,
    name: str | None = None,
    namespace: str | None = None,
    catch_up_events: int = 10_000,
    data_dir: str | None = None,
    checkpoint_interval_s: float | None = 1.0,
    detached: bool = False,
    resources: Mapping[str, float] | None = None,
    spread: bool = False,
    standby: bool = False,
    scheduling_strategy: Any = None,
) -> Any:
    """A ShardActor named ``name`` (default ``quotaplane-shard-<shard_id>``; the running one if it
    exists), restarted by Ray after a crash (``max_restarts=-1``). Its name is what lets a restarted
    controller find it again. ``controller``: its handle, or better a ``NamedActor`` (what ``up`` passes),
    which the shard looks up when it starts: a handle argument would sit in Ray's object store, and a
    restart fails if it is lost there (see ``_named``).

    Placement: the shard asks for no CPU, so by default Ray puts it on the node that creates it.
    ``resources`` (Ray custom resources, e.g. ``{"quotaplane_shard": 1}``) limits it, and its restarts, to
    raylets that offer them; ``spread=True`` spreads shards over those nodes (``scheduling_strategy=
    "SPREAD"``). A bad name or amount is a ValueError. Ignored for a shard that runs already.
    ``checkpoint_interval_s``: how often the usage windows go to ``data_dir`` (None or 0: never).

    ``standby=True`` starts the shard's warm standby instead (``_standby``): named ``<the primary's name>-standby``,
    the same ``data_dir`` (it takes over from the primary's usage checkpoint). ``scheduling_strategy`` (e.g. a
    ``PlacementGroupSchedulingStrategy`` keeping primary and standby on two nodes) replaces ``spread``."""
    checked = check_resources(resources, "shard resources")
    options: dict[str, Any] = {}
    if checked is not None:
        options["resources"] = checked
    if scheduling_strategy is not None:
        options["scheduling_strategy"] = scheduling_strategy
    elif spread:
        options["scheduling_strategy"] = "SPREAD"
    if name is None:
        name = f"quotaplane-shard-{shard_id}{STANDBY_SUFFIX if standby else ''}"
    return _REMOTE_SHARD.options(
        name=name,
        namespace=namespace,
        get_if_exists=True,
        lifetime="detached" if detached else None,
        max_restarts=-1,
        max_task_retries=0,
        num_cpus=0,
        # Ray's GCS keeps an event per actor call for its dashboard: at a shard's call rate it grew ~3 MB/min
        enable_task_events=False,
        **options,
    ).remote(
        shard_id,
        controller,
        node_id,
        catch_up_events=catch_up_events,
        data_dir=data_dir,
        checkpoint_interval_s=checkpoint_interval_s,
        standby=standby,
    )


_REMOTE_SHARD = ray.remote(ShardActor)
