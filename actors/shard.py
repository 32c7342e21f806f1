"""ShardActor: the Ray actor hosting the core quota managers for one slice of the entities.

A shard keeps a full :class:`~quotaplane.config.ConfigImage` (config is small; usage is what is
sharded) and the managers built from it: the client quota managers (``build_quota_managers``), the
KIP-936 ``ProducerIdQuotaManager`` and ``ConnectionQuotas``, all sharing one metrics registry, and a
``ManagerBinding`` that applies every config change to them in place, so a quota change never resets
the usage already recorded.

**Config stream.** At start the shard pulls the whole log from the controller (``read_from``; a
``snapshot()`` when the log no longer starts at 0), builds its managers from the image it reached
(``startup_configs``: quota windows and other start-up keys are read only here, as in Kafka), then
subscribes. Pushed batches are applied strictly in offset order: what it already has is skipped; a gap
(a lost push) makes it pull the missing events from the controller first. Every event goes through
``image.apply`` and ``binding.apply``.

**Hot path.** Batches only: ``record_batch(quota_type, items, now_ms)`` and
``record_producer_ids(items, now_ms)`` call the core's batch methods, which validate every item before
recording any, so a bad batch raises (through Ray, as the core's ValueError) and changes nothing.

**Restarts.** ``max_restarts=-1``: after a crash Ray starts the actor again with the same arguments and
it rebuilds from the log. **Usage is lost on a crash**: sensors live in the process only, so a restarted
shard answers as if its clients had been idle (quotas are rates over ~11 s windows by default, so this
forgives at most one window of overuse).

The actor runs one call at a time (Ray's default for a synchronous actor): the core is single-threaded
by design, and a catch-up pull blocks the shard's queue only for the time of that pull.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from typing import Any, TypeVar

import ray
from ray.exceptions import RayActorError

from quotaplane.config import ConfigImage, ManagerBinding, decode_columns, startup_configs
from quotaplane.quota import (
    ConnectionQuotas,
    ConnectionQuotasConfig,
    ProducerIdItem,
    ProducerIdQuotaManager,
    QuotaType,
    UsageItem,
    build_quota_managers,
)

from ._follower import ConfigFollower, ray_get
from .controller import wall_clock_ms

__all__ = ["ShardActor", "start_shard"]

_CLIENT_QUOTA_TYPES = (QuotaType.PRODUCE, QuotaType.FETCH)
T = TypeVar("T")


class ShardActor:
    """Managers for one shard, kept in step with the controller's log."""

    def __init__(
        self,
        shard_id: str | int,
        controller: Any,
        node_id: int | None = None,
        *,
        catch_up_events: int = 10_000,
        controller_timeout_s: float = 30.0,
    ) -> None:
        self.shard_id = shard_id
        self.node_id = node_id
        self._controller = controller
        self._controller_timeout_s = controller_timeout_s
        self._started_ms = wall_clock_ms()
        self.follower = ConfigFollower(self._call, max_events=catch_up_events)
        self.follower.start()
        self._build_managers(self._started_ms)
        self._subscribe()

    @property
    def image(self) -> ConfigImage:
        return self.follower.image

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
        self.connections = ConnectionQuotas(
            ConnectionQuotasConfig.from_configs(startup.connection_configs), now_ms=now_ms, metrics=metrics
        )
        self.binding = ManagerBinding(
            quotas=self.quotas, connections=self.connections, producer_ids=self.producer_ids, node_id=self.node_id
        )
        self.binding.load(self.image)
        self.follower.binding = self.binding

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
        self.follower.apply(base_offset, decode_columns(payload))
        return self.image.end_offset

    def notify_end_offset(self, end_offset: int) -> int:
        """The controller's log reaches ``end_offset``: pull whatever this shard is missing."""
        if end_offset > self.image.end_offset:
            self.follower.catch_up(end_offset)
        return self.image.end_offset

    def applied_offset(self) -> int:
        """The offset of the next event this shard expects (= events applied)."""
        return self.image.end_offset

    # --- the hot path ----------------------------------------------------------------------------------
    def record_batch(self, quota_type: str | QuotaType, items: Sequence[UsageItem], now_ms: int) -> list[int]:
        """Record produce or fetch usage ``(user, client_id, value[, now_ms])``; the throttle time of each
        item in ms, in order, exactly as one-by-one calls to the core would give."""
        parsed = QuotaType.parse(quota_type)
        if parsed not in _CLIENT_QUOTA_TYPES:
            raise ValueError(f"record_batch takes PRODUCE or FETCH usage, not {parsed.name}")
        _check_batch(items)
        return self._record(parsed, items, now_ms)

    def _record(self, quota_type: QuotaType, items: Sequence[UsageItem], now_ms: int) -> list[int]:
        """Record a batch and the throttle-time metric of each throttle answered: Kafka's broker reports
        each throttle back (``throttle()``); here the shard is the one that knows, so it records them."""
        manager = self.quotas.client_manager(quota_type)
        throttles = manager.record_batch(items, now_ms)
        for item, throttle_ms in zip(items, throttles, strict=True):
            if throttle_ms > 0:
                manager.throttle(item[0], item[1], throttle_ms, item[3] if len(item) > 3 else now_ms)
        return throttles

    def record_producer_ids(self, items: Sequence[ProducerIdItem], now_ms: int) -> list[int]:
        """KIP-936: ``(user, producer_id[, now_ms])`` items; the throttle time of each in ms."""
        _check_batch(items)
        return self.producer_ids.record_batch(items, now_ms)

    # --- the gateway's hot path: fenced by config offset ---------------------------------------------------
    def record_usage_at(
        self, config_offset: int, items: Sequence[tuple[str, str, str, float, int]]
    ) -> tuple[int, list[int] | None]:
        """Record mixed PRODUCE / FETCH items ``(quota type, user, client_id, value, now_ms)`` that a gateway
        routed here by metric tags it resolved on the image at ``config_offset``; ``(applied offset,
        throttle times in order)``.

        Why the offset: the gateway chose this shard by the sensor's metric tags, and the shard resolves
        the tags again from its own image; both must read the same image or the usage could land in a
        sensor this shard does not own (two budgets for one entity). A shard behind the gateway catches up
        to ``config_offset`` first; a shard ahead of it records nothing and answers ``(its offset, None)``:
        the gateway catches up, resolves and routes the items again, and resends them. Quota changes are
        rare, so the retry is too.
        """
        if isinstance(config_offset, bool) or not isinstance(config_offset, int) or config_offset < 0:
            raise ValueError(f"config_offset must be a non-negative int, got {config_offset!r}")
        _check_batch(items)
        if config_offset > self.image.end_offset:
            self.follower.catch_up(config_offset)
        if config_offset != self.image.end_offset:
            return self.image.end_offset, None
        by_type: dict[str, tuple[list[int], list[UsageItem]]] = {}
        for index, (quota_type, user, client_id, value, now_ms) in enumerate(items):
            group = by_type.get(quota_type)
            if group is None:
                group = by_type[quota_type] = ([], [])
            group[0].append(index)
            group[1].append((user, client_id, value, now_ms))
        parsed = {}
        for quota_type in by_type:  # validate every type before recording any item
            parsed[quota_type] = QuotaType.parse(quota_type)
            if parsed[quota_type] not in _CLIENT_QUOTA_TYPES:
                raise ValueError(f"record_usage_at takes PRODUCE or FETCH usage, not {parsed[quota_type].name}")
        throttles = [0] * len(items)
        for quota_type, (indices, group_items) in by_type.items():
            answered = self._record(parsed[quota_type], group_items, group_items[0][3])
            for index, throttle_ms in zip(indices, answered, strict=True):
                throttles[index] = throttle_ms
        return self.image.end_offset, throttles

    def record_producer_ids_at(
        self, config_offset: int, items: Sequence[ProducerIdItem], now_ms: int
    ) -> tuple[int, list[int]]:
        """KIP-936 items routed by user (no tag resolution, so a shard ahead of the gateway is fine): catch
        up to ``config_offset`` if behind, then ``(applied offset, throttle times)``."""
        if isinstance(config_offset, bool) or not isinstance(config_offset, int) or config_offset < 0:
            raise ValueError(f"config_offset must be a non-negative int, got {config_offset!r}")
        _check_batch(items)
        if config_offset > self.image.end_offset:
            self.follower.catch_up(config_offset)
        return self.image.end_offset, self.producer_ids.record_batch(items, now_ms)

    # --- introspection ---------------------------------------------------------------------------------
    def metrics_snapshot(self, now_ms: int | None = None) -> list[tuple[str, str, str, dict[str, str], float]]:
        """Every Kafka metric of this shard's registry, measured now: ``(name, group, description, tags,
        value)`` (``Produce`` byte-rate / throttle-time / quota-value per user and client id, ``Request``,
        ``ControllerMutation``, ``ProducerIds``, ``socket-server-metrics`` ...), for a metrics endpoint.
        Non-finite values are left out (Prometheus has no use for Kafka's NaN of an empty Avg)."""
        now = wall_clock_ms() if now_ms is None else now_ms
        snapshot = []
        for metric_name, metric in list(self.quotas.metrics.metrics.items()):
            value = metric.measurable_value(now)
            if math.isfinite(value):
                snapshot.append(
                    (metric_name.name, metric_name.group, metric_name.description, dict(metric_name.tags), value)
                )
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
        }

    def client_quotas(self) -> dict[str, dict[str, float]]:
        """The image's client quotas, keyed by the entity's string form (for checks and tools)."""
        return {repr(entity): dict(values) for entity, values in self.image.client_quotas().items()}


def _check_batch(items: object) -> None:
    if not isinstance(items, list | tuple):
        raise ValueError(f"a batch must be a list of items, got {type(items).__name__}")
    if not items:
        raise ValueError("empty batch: send at least one item (one actor call costs ~1 ms; batch items)")


def start_shard(
    shard_id: str | int,
    controller: Any,
    node_id: int | None = None,
    *,
    name: str | None = None,
    namespace: str | None = None,
    catch_up_events: int = 10_000,
) -> Any:
    """A ShardActor named ``name`` (default ``quotaplane-shard-<shard_id>``; the running one if it
    exists), restarted by Ray after a crash (``max_restarts=-1``). Its name is what lets a restarted
    controller find it again."""
    return _REMOTE_SHARD.options(
        name=name if name is not None else f"quotaplane-shard-{shard_id}",
        namespace=namespace,
        get_if_exists=True,
        max_restarts=-1,
        max_task_retries=0,
        num_cpus=0,
    ).remote(shard_id, controller, node_id, catch_up_events=catch_up_events)


_REMOTE_SHARD = ray.remote(ShardActor)
