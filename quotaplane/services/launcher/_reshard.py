"""A reshard, orchestrated: start the new shards, log the count, wait for the hand-overs, stop the removed ones.

The state moves between the shards themselves (``quotaplane.actors._reshard``): a receiver pulls the keys it
wins from the givers while it applies the reshard's event. What needs someone outside the shards is the
shards' lifecycle around that event, in this order:

1. **Grow:** the new shards are started and caught up with the log *before* the event, so that a gateway
   that applies it can route to them at once, and each can pull from the givers as it applies it.
2. The event: ``ConfigController.alter_shard_count(count, expected=current)``, durable and audited (principal,
   time, request id); a reshard that raced another one is refused instead of moving state from a count it
   did not see.
3. Every shard of the new count has applied it: its hand-overs are done (they run inside that apply).
4. **Shrink:** the removed shards refuse everything from the event on; after ``retire_grace_s`` (gateways
   re-route what they had queued for them) they are unsubscribed from the controller, stopped, and their
   usage checkpoint deleted (a later grow must not restore windows they handed over).

One reshard at a time per process (a lock); the controller's expected-count check orders reshards across
processes (several ``up`` processes, the CLI).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quotaplane.errors import Errors, InvalidConfigurationError, InvalidRequestError

from ._cluster import Cluster
from ._common import NAMESPACE

__all__ = ["ReshardOutcome", "ShardFleet"]


@dataclass(frozen=True, slots=True)
class ReshardOutcome:
    previous: int
    count: int
    config_offset: int
    elapsed_ms: int
    #: shard id -> (sensors received, failures, ms) for the shards that received keys
    hand_overs: dict[str, tuple[int, int, float]] = field(default_factory=dict)


class ShardFleet:
    """The shards of one cluster as a resizable set (the AdminService's AlterShardCount / DescribeShards)."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        shard_options: dict[str, Any] | None = None,
        ready_timeout_s: float = 60.0,
        retire_grace_s: float = 2.0,
        standby: bool | None = None,
    ) -> None:
        self.cluster = cluster
        self.shard_options = dict(shard_options or {})
        #: every shard gets a warm standby (``quotaplane.actors._standby``): a node loss is served again once Ray
        #: declares the node dead, not once a new shard process has started and imported everything. None (auto):
        #: only where the pair can be placed on two nodes (:func:`pair_placement`); on one node a standby would
        #: only cover a crash of the primary's process, which Ray restarts there in about a second, at the cost of
        #: a second shard process per shard
        self.standby = standby
        #: primaries placed per node id (pairs only), so the next pair's primary goes to the emptier node
        self._primaries_on: dict[str, int] = {}
        self.ready_timeout_s = ready_timeout_s
        self.retire_grace_s = retire_grace_s
        self._lock = threading.Lock()

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        from quotaplane.actors import ray_get

        return ray_get(getattr(self.cluster.controller, method).remote(*args, **kwargs), self.ready_timeout_s)

    def logged_count(self) -> tuple[int, int]:
        """``(shard count, config offset)`` of the controller's log (the started count if none is logged)."""
        count, offset = self.count_in_log()
        return (len(self.cluster.shards) if count is None else count), offset

    def count_in_log(self) -> tuple[int | None, int]:
        """``(shard count or None if none is logged, config offset)`` of the controller's log."""
        from quotaplane.config import shard_count

        image = self._call("snapshot").to_image()
        return shard_count(image), image.end_offset

    def seed(self, count: int, *, principal: str) -> None:
        """Log the count a new cluster starts with (nothing moves), so that every process that joins it, and
        every later reshard, reads the count from the log. Another process that seeded first wins."""
        self._call("alter_shard_count", count, expected=None, default=None, principal=principal)

    def create(self, shard_id: str) -> Any:
        """Shard ``shard_id``'s actor as ``up`` creates its shards (the running one if it exists), not awaited:
        its data under ``DATA_DIR/shards/<id>``, the launch's placement options, the controller by name. With
        ``standby``, its warm standby too (``Cluster.standbys``), on another node when the placement allows
        (:func:`pair_placement`)."""
        from quotaplane.actors import DEFAULT_CONTROLLER_NAME, NamedActor, start_shard

        options = dict(self.shard_options)
        strategies: tuple[Any, Any] = (None, None)
        if self.standby is not False:
            new_pair = not _pair_exists(shard_id)  # an existing pair (a joining up) keeps its members where they are
            strategies = pair_placement(shard_id, options.get("resources"), detached=bool(options.get("detached")))
            if strategies[0] is not None and new_pair:
                strategies = self._primary_first(strategies)
        with_standby = self.standby is True or (self.standby is None and strategies[0] is not None)

        def start(standby: bool, strategy: Any) -> Any:
            return start_shard(
                int(shard_id),
                NamedActor(DEFAULT_CONTROLLER_NAME, NAMESPACE),  # not the handle: see quotaplane.actors._named
                namespace=NAMESPACE,
                data_dir=str(self.cluster.data_dir.absolute() / "shards" / shard_id),
                standby=standby,
                scheduling_strategy=strategy,
                **options,
            )

        primary = start(False, strategies[0])
        if with_standby:
            self.cluster.standbys[shard_id] = start(True, strategies[1])
        return primary

    def _primary_first(self, strategies: tuple[Any, Any]) -> tuple[Any, Any]:
        """The pair's bundles ordered (primary's, standby's) so that primaries spread over the nodes: the primary
        takes the bundle on the node holding fewer of this fleet's primaries. (Ray places every group's bundle 0
        on the same node when it can, so a fixed choice would put all primaries, which do the work, on one node and
        all the idle standbys on the other.)"""
        import ray
        from ray.util import placement_group_table

        group = strategies[0].placement_group
        try:
            ray.get(group.ready(), timeout=min(self.ready_timeout_s, 10.0))
            nodes = placement_group_table(group)["bundles_to_node_id"]
        except Exception:  # not placed yet (or a Ray without the table): Ray's choice stands
            return strategies
        first = 0 if self._primaries_on.get(nodes[0], 0) <= self._primaries_on.get(nodes[1], 0) else 1
        self._primaries_on[nodes[first]] = self._primaries_on.get(nodes[first], 0) + 1
        return (strategies[first], strategies[1 - first])

    def start(self, shard_id: str) -> Any:
        """:meth:`create`, once the shard answers."""
        import ray

        handle = self.create(shard_id)
        ray.get(handle.info.remote(), timeout=self.ready_timeout_s)
        standby = self.cluster.standbys.get(shard_id)
        if standby is not None:
            ray.get(standby.info.remote(), timeout=self.ready_timeout_s)
        return handle

    def alter(self, count: int, *, principal: str, request_id: str = "") -> ReshardOutcome:
        """Reshard to ``count`` shards; the outcome once every shard of ``count`` applied it. ApiError when the
        controller refuses it (a bad count, another reshard first)."""
        from quotaplane.config import check_shard_count

        check_shard_count(count)
        started = time.monotonic()
        with self._lock:
            previous, _ = self.logged_count()
            if previous == count:
                return ReshardOutcome(previous, count, self._call("end_offset"), _elapsed_ms(started))
            shards = self.cluster.shards
            added = [str(i) for i in range(previous, count)]
            for shard_id in added:
                shards[shard_id] = self.start(shard_id)
            result = self._call(
                "alter_shard_count",
                count,
                expected=previous,
                default=previous,
                principal=principal,
                request_id=request_id,
            )
            if not result.ok:
                now, _ = self.logged_count()
                if now == count:  # another process made the same reshard first (two ups with one --shards value)
                    return ReshardOutcome(previous, count, self._call("end_offset"), _elapsed_ms(started))
                for shard_id in added:
                    if int(shard_id) >= now:  # started for nothing: no count runs it
                        self._stop(shard_id)
                refused = InvalidConfigurationError if result.error is Errors.INVALID_CONFIG else InvalidRequestError
                raise refused(result.message)
            end_offset = self._call("end_offset")
            self._wait_applied([str(i) for i in range(count)], end_offset)
            hand_overs = self._hand_overs(count, end_offset)
            removed = [str(i) for i in range(count, previous)]
            if removed:
                time.sleep(self.retire_grace_s)
                for shard_id in removed:
                    self._stop(shard_id)
        return ReshardOutcome(previous, count, end_offset, _elapsed_ms(started), hand_overs)

    def _wait_applied(self, shard_ids: list[str], end_offset: int) -> None:
        import ray

        deadline = time.monotonic() + self.ready_timeout_s
        waiting = list(shard_ids)
        while waiting:
            offsets = ray.get(
                [self.cluster.shards[s].applied_offset.remote() for s in waiting],
                timeout=max(0.1, deadline - time.monotonic()),
            )
            waiting = [s for s, offset in zip(waiting, offsets, strict=True) if offset < end_offset]
            if waiting:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"shards {', '.join(waiting)} did not apply the reshard at {end_offset} in time")
                time.sleep(0.02)

    def _hand_overs(self, count: int, end_offset: int) -> dict[str, tuple[int, int, float]]:
        """What each shard received in the reshard that ended at ``end_offset`` (from its own record)."""
        import ray

        infos = ray.get([self.cluster.shards[str(i)].info.remote() for i in range(count)], timeout=self.ready_timeout_s)
        found = {}
        for info in infos:
            for record in info["reshard"]["history"]:
                if record["offset"] == end_offset:
                    received = sum(record["received"].values())
                    found[str(info["shard_id"])] = (received, len(record["failed"]), record["ms"])
        return found

    def _stop(self, shard_id: str) -> None:
        """Unsubscribe, stop and forget a shard no count includes, and delete its usage checkpoint."""
        import ray

        from quotaplane.actors import CHECKPOINT_FILE, STANDBY_SUFFIX

        handle = self.cluster.shards.pop(shard_id, None)
        if handle is None:
            return
        # best effort: the controller drops a dead subscriber on its own, and stopping the shard matters more
        with contextlib.suppress(Exception):
            self._call("unsubscribe", handle, name=f"quotaplane-shard-{shard_id}", namespace=NAMESPACE)
        with contextlib.suppress(Exception):  # its archives drained
            ray.get(handle.close.remote(), timeout=10)
        ray.kill(handle, no_restart=True)
        standby = self.cluster.standbys.pop(shard_id, None)
        if standby is not None:
            name = f"quotaplane-shard-{shard_id}{STANDBY_SUFFIX}"
            with contextlib.suppress(Exception):
                self._call("unsubscribe", standby, name=name, namespace=NAMESPACE)
            with contextlib.suppress(Exception):
                ray.get(standby.close.remote(), timeout=10)
            ray.kill(standby, no_restart=True)
        with contextlib.suppress(Exception):
            self._call("forget_shard", f"quotaplane-shard-{shard_id}", NAMESPACE)
        with contextlib.suppress(ValueError):  # the pair's placement group, if it had one
            ray.util.remove_placement_group(ray.util.get_placement_group(_pair_group_name(shard_id)))
        checkpoint = Path(self.cluster.data_dir) / "shards" / shard_id / CHECKPOINT_FILE
        checkpoint.unlink(missing_ok=True)

    def describe(self) -> tuple[int, int, list[dict[str, Any]]]:
        """``(logged shard count, config offset, per running shard: id, applied and placement offsets, node)``."""
        import ray

        count, offset = self.logged_count()
        shards = sorted(self.cluster.shards.items(), key=lambda item: int(item[0]))
        progress = ray.get([handle.progress.remote() for _, handle in shards], timeout=self.ready_timeout_s)
        nodes = ray.get([handle.node.remote() for _, handle in shards], timeout=self.ready_timeout_s)
        return (
            count,
            offset,
            [
                {
                    "shard_id": shard_id,
                    "applied_offset": p["applied_offset"],
                    "placement_offset": p["placement_offset"],
                    "node": node,
                }
                for (shard_id, _), p, node in zip(shards, progress, nodes, strict=True)
            ],
        )


def _pair_group_name(shard_id: str) -> str:
    return f"quotaplane-shard-{shard_id}"


def _pair_exists(shard_id: str) -> bool:
    from ray.util.placement_group import get_placement_group

    try:
        get_placement_group(_pair_group_name(shard_id))
    except ValueError:
        return False
    return True


def pair_placement(shard_id: str, resources: dict[str, float] | None, *, detached: bool) -> tuple[Any, Any]:
    """Scheduling strategies ``(primary's, standby's)`` keeping a shard's primary and warm standby on two nodes:
    bundles 0 and 1 of one ``STRICT_SPREAD`` placement group of two ``resources`` bundles (named after the shard,
    found again if it exists). Ray re-places the bundle of a dead node on a node that does not hold the other, so
    the pair stays apart across node losses, and restarts the member in it. Measured against ``SPREAD`` (soft): Ray
    re-places a dead node's bundle at once, on the surviving node if the replacement has not joined yet, and the
    pair then stays together, so the next node loss takes both (recovery 4-5 s instead of 0.5 s). The cost of
    strict: while fewer than two live nodes offer the resources, the member of a dead node is not restarted (the
    other one serves meanwhile; if both nodes are lost the shard waits for a node to join). ``(None, None)`` (the
    launch's usual placement, both on one node possibly) without shard resources or when fewer than two live nodes
    offer them at creation: the standby then still covers a crash of the primary's process."""
    import ray
    from ray.util.placement_group import get_placement_group, placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if not resources:
        return None, None
    name = _pair_group_name(shard_id)
    try:
        group = get_placement_group(name)
    except ValueError:
        offering = [
            node
            for node in ray.nodes()
            if node.get("Alive") and all(node.get("Resources", {}).get(k, 0.0) >= v for k, v in resources.items())
        ]
        if len(offering) < 2:
            return None, None
        group = placement_group(
            [dict(resources), dict(resources)],
            strategy="STRICT_SPREAD",
            name=name,
            lifetime="detached" if detached else None,
        )
    return (
        PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0),
        PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=1),
    )


def _elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
