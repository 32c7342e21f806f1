"""Replication throttles of the nodes a shard owns: Kafka's ReplicationQuotaManagers, one set per node.

Replication quotas are per broker in Kafka: ``leader.replication.throttled.rate`` (and the follower and
alter-log-dirs rates) bound one broker's replication traffic, and a topic's
``leader.replication.throttled.replicas`` names the partitions throttled *on a given broker*. So the
state is keyed by node id: a shard owns all of a node's replication state (the gateway routes by
``replication:<node id>``) and keeps, per node it has been asked about, the three
``ReplicationQuotaManager`` s built from ``startup_configs(image, node_id)`` and kept in step by their own
``ManagerBinding(node_id=...)`` (cluster default, then the node's override, as in Kafka).

A node's managers are built on its first item, from the image the shard holds then; every later config
event reaches them through :meth:`apply` (the shard fans its events out), so rates and throttled replicas
change in place and the recorded rate survives the change.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from quotaplane.config import ConfigDelta, ConfigImage, ManagerBinding, startup_configs
from quotaplane.quota import (
    QuotaManagers,
    QuotaType,
    ReplicationState,
    build_quota_managers,
    export_replication_state,
    import_replication_state,
)

from ._metric_rows import MetricRow, metric_rows

__all__ = [
    "REPLICATION_TYPES",
    "ReplicationHost",
    "ReplicationItem",
    "ReplicationNodesSnapshot",
    "replication_node_key",
]

#: Item types, by the names the wire's ReplicationType maps to.
REPLICATION_TYPES = {
    "LEADER_REPLICATION": "leader",
    "FOLLOWER_REPLICATION": "follower",
    "ALTER_LOG_DIRS_REPLICATION": "alter_log_dirs",
}
_MAX_INT32 = 2**31 - 1

#: ``(node_id, type name, topic, partition, record_bytes, now_ms)``
ReplicationItem = tuple[int, str, str, int, float, int]


def replication_node_key(node_id: int) -> str:
    """The routing key of a node's replication state, as the gateway computes it (one shard owns all of it)."""
    return f"replication:{node_id}"


@dataclass(frozen=True, slots=True)
class ReplicationNodesSnapshot:
    """The replication windows of some nodes (:meth:`ReplicationHost.export_nodes`): plain data, it pickles."""

    nodes: tuple[tuple[int, ReplicationState], ...] = ()

    def __len__(self) -> int:
        return len(self.nodes)


class ReplicationHost:
    """Per-node replication quota managers, built on first use and bound to the config log."""

    def __init__(self, image_of: Callable[[], ConfigImage]) -> None:
        self._image_of = image_of
        self._nodes: dict[int, tuple[QuotaManagers, ManagerBinding]] = {}

    def _node(self, node_id: int, now_ms: int) -> QuotaManagers:
        entry = self._nodes.get(node_id)
        if entry is None:
            entry = self._nodes[node_id] = self._build(node_id, now_ms)
        return entry[0]

    def _build(self, node_id: int, now_ms: int) -> tuple[QuotaManagers, ManagerBinding]:
        image = self._image_of()
        managers = build_quota_managers(startup_configs(image, node_id).quota, now_ms=now_ms)
        binding = ManagerBinding(quotas=managers, node_id=node_id)
        binding.load(image)
        return managers, binding

    # --- hand-over (a reshard moves whole nodes) -----------------------------------------------------------
    def export_nodes(self, owns: Callable[[str], bool]) -> ReplicationNodesSnapshot:
        """A copy of the rate windows of every node whose key (:func:`replication_node_key`) ``owns`` accepts."""
        return ReplicationNodesSnapshot(
            tuple(
                (node_id, export_replication_state(managers))
                for node_id, (managers, _) in self._nodes.items()
                if owns(replication_node_key(node_id))
            )
        )

    def forget_nodes(self, owns: Callable[[str], bool]) -> int:
        """Drop every node whose key ``owns`` accepts (its managers, binding and metrics); how many."""
        doomed = [node_id for node_id in self._nodes if owns(replication_node_key(node_id))]
        for node_id in doomed:
            del self._nodes[node_id]
        return len(doomed)

    def import_nodes(self, snapshot: ReplicationNodesSnapshot, now_ms: int) -> int:
        """Install the snapshot's nodes, each built from the image held now (its quotas and throttled replicas
        from the log) with the exported windows; a node held already is replaced. ValueError, before any
        change, if a node's state does not fit. The number of nodes imported."""
        if not isinstance(snapshot, ReplicationNodesSnapshot):
            raise ValueError(f"expected a ReplicationNodesSnapshot, got {type(snapshot).__name__}")
        if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < 0:
            raise ValueError(f"now_ms must be an int >= 0, got {now_ms!r}")
        built = {}
        for entry in snapshot.nodes:
            if not isinstance(entry, tuple) or len(entry) != 2 or not isinstance(entry[1], ReplicationState):
                raise ValueError(f"a node's entry must be (node_id, ReplicationState), got {entry!r}")
            node_id, state = entry
            if isinstance(node_id, bool) or not isinstance(node_id, int) or not 0 <= node_id <= _MAX_INT32:
                raise ValueError(f"node_id must be an int in [0, 2^31), got {node_id!r}")
            if node_id in built:
                raise ValueError(f"node {node_id} appears twice")
            built[node_id] = self._build(node_id, now_ms)
            state.check(built[node_id][0])
        for node_id, state in snapshot.nodes:
            import_replication_state(built[node_id][0], state, now_ms, check=False)
        self._nodes.update(built)
        return len(built)

    # --- the config stream: the shard fans every event out to us -----------------------------------------
    def apply(self, delta: ConfigDelta, image: ConfigImage) -> None:
        for _, binding in self._nodes.values():
            binding.apply(delta, image)

    def apply_changes(self, changes: Iterable[Any], image: ConfigImage) -> None:
        changes = list(changes)
        for _, binding in self._nodes.values():
            binding.apply_changes(changes, image)

    # --- requests ------------------------------------------------------------------------------------------
    @staticmethod
    def check(items: Sequence[Any]) -> None:
        """Every item valid, or ValueError naming the first bad one (nothing is recorded then)."""
        for index, item in enumerate(items):
            if not isinstance(item, tuple) or len(item) != 6:
                raise ValueError(f"item {index}: expected (node_id, type, topic, partition, bytes, now_ms)")
            node_id, type_name, topic, partition, record_bytes, now_ms = item
            if isinstance(node_id, bool) or not isinstance(node_id, int) or not 0 <= node_id <= _MAX_INT32:
                raise ValueError(f"item {index}: node_id must be an int in [0, 2^31), got {node_id!r}")
            if type_name not in REPLICATION_TYPES:
                raise ValueError(f"item {index}: unknown replication type {type_name!r}")
            if not isinstance(topic, str) or not topic:
                raise ValueError(f"item {index}: topic must be a non-empty string")
            if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= _MAX_INT32:
                raise ValueError(f"item {index}: partition must be an int in [0, 2^31), got {partition!r}")
            if isinstance(record_bytes, bool) or not isinstance(record_bytes, int | float):
                raise ValueError(f"item {index}: record_bytes must be a number")
            if not 0 <= record_bytes < math.inf:
                raise ValueError(f"item {index}: record_bytes must be finite and >= 0, got {record_bytes!r}")
            if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < 0:
                raise ValueError(f"item {index}: now_ms must be an int >= 0, got {now_ms!r}")

    def serve(self, items: Sequence[ReplicationItem]) -> list[tuple[bool, bool]]:
        """``(throttled, quota_exceeded)`` per item, in order. A throttled partition's bytes are recorded
        first (Kafka's fetchers record only throttled partitions), so ``quota_exceeded`` includes them."""
        self.check(items)
        results = []
        for node_id, type_name, topic, partition, record_bytes, now_ms in items:
            manager = getattr(self._node(node_id, now_ms), REPLICATION_TYPES[type_name])
            throttled = manager.is_throttled(topic, partition)
            if throttled and record_bytes > 0:
                manager.record(record_bytes, now_ms)
            results.append((throttled, manager.is_quota_exceeded(now_ms)))
        return results

    def metrics_snapshot(self, now_ms: int) -> list[MetricRow]:
        """Each node's replication byte-rate metrics, tagged with ``node`` (Kafka's have no tags: one
        broker, one set)."""
        rows = []
        for node_id, (managers, _) in sorted(self._nodes.items()):
            rows += metric_rows(managers.metrics, now_ms, node_id=node_id, groups=_REPLICATION_GROUPS)
        return rows

    @property
    def nodes(self) -> list[int]:
        return sorted(self._nodes)


_REPLICATION_GROUPS = frozenset(
    str(t) for t in (QuotaType.LEADER_REPLICATION, QuotaType.FOLLOWER_REPLICATION, QuotaType.ALTER_LOG_DIRS_REPLICATION)
)
