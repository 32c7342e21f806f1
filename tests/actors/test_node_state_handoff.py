"""The hosts' hand-over of per-node and per-instance state, without Ray: ConnectionHost and ReplicationHost move
whole nodes (``export_nodes`` / ``forget_nodes`` / ``import_nodes``), TelemetryHost moves client instances.

Three hosts follow one real ConfigStore: a reference that serves every item, and a giver A and a receiver B
that split the nodes. At a random point the nodes A gives up move to B, and every later item goes to its
node's owner. Every answer, and at the end every metric of every node, must be the reference's.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.actors._connection_host import ConnectionHost, ConnectionNodesSnapshot, connection_node_key
from quotaplane.actors._replication_host import ReplicationHost, ReplicationNodesSnapshot, replication_node_key
from quotaplane.actors._telemetry_host import TelemetryHost
from quotaplane.config import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    OpType,
    startup_configs,
)
from quotaplane.errors import Errors
from quotaplane.kafka_uuid import Uuid
from quotaplane.metrics import Metrics
from quotaplane.telemetry import InstanceSnapshot, instance_key

T0 = 1_700_000_000_000
NODES = 3
LISTENERS = ("EXTERNAL", "INTERNAL")
IPS = ("10.0.0.1", "10.0.0.2", "192.168.1.7")
TOPICS = ("orders", "clicks")


def _no_dns(host: str) -> str:
    raise OSError(host)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConfigStore]:
    """One log with connection limits, an IP rate quota, replication rates and throttled replicas."""
    store = ConfigStore.open(tmp_path_factory.mktemp("handoff") / "log", fsync=False)
    broker = ConfigResource(ConfigResourceType.BROKER, "")
    sets = [
        ("quota.window.num", "2"),
        ("max.connections.per.ip", "3"),
        ("max.connections", "6"),
        ("max.connection.creation.rate", "4"),
        ("listener.name.external.max.connection.creation.rate", "2"),
        ("leader.replication.throttled.rate", "3000"),
        ("follower.replication.throttled.rate", "1500"),
    ]
    results = store.incremental_alter_configs(
        [(broker, [AlterConfigOp(name, OpType.SET, value) for name, value in sets])], now_ms=T0
    )
    assert all(r.ok for r in results), results
    topic = [
        AlterConfigOp("leader.replication.throttled.replicas", OpType.SET, "*"),
        AlterConfigOp("follower.replication.throttled.replicas", OpType.SET, "0:1,1:2,0:0"),
    ]
    results = store.incremental_alter_configs([(ConfigResource(ConfigResourceType.TOPIC, TOPICS[0]), topic)], now_ms=T0)
    assert all(r.ok for r in results), results
    alteration = ClientQuotaAlteration({"ip": IPS[0]}, [("connection_creation_rate", 3.0)])
    assert all(r.ok for r in store.alter_client_quotas([alteration], now_ms=T0))
    try:
        yield store
    finally:
        store.close()


def _rows(rows: list[tuple[Any, ...]], node_id: int) -> dict[tuple[Any, ...], float]:
    return {(r[0], r[1], tuple(sorted(r[3].items()))): r[4] for r in rows if r[3].get("node") == str(node_id)}


# === connections ==========================================================================================
connection_op = st.tuples(
    st.sampled_from(["admit", "admit", "admit", "retry", "release", "abandon", "housekeeping"]),
    st.integers(0, NODES - 1),
    st.integers(0, len(LISTENERS) - 1),
    st.integers(0, len(IPS) - 1),
    st.integers(0, 7),
    st.one_of(st.integers(0, 150), st.integers(0, 3_000), st.integers(0, 200_000)),
)


class ConnectionPair:
    """The reference host and the pair, with each side's outstanding wire attempt ids."""

    def __init__(self, store: ConfigStore) -> None:
        self.reference, self.a, self.b = (
            ConnectionHost(lambda: store.image, resolver=_no_dns, attempt_idle_ms=5_000) for _ in range(3)
        )
        self.owner: dict[int, ConnectionHost] = {}
        #: reference wire id -> (node, listener, ip, the pair's wire id for the same attempt)
        self.wire: dict[int, tuple[int, str, str, int]] = {}

    def run(self, op: tuple[Any, ...], now_ms: int) -> None:
        kind, node, li, ii, pick, _ = op
        listener, ip = LISTENERS[li], IPS[ii]
        owner = self.owner[node]
        if kind == "housekeeping":
            assert owner.housekeeping(now_ms) + self._other(owner).housekeeping(now_ms) == self.reference.housekeeping(
                now_ms
            )
            return
        if kind in ("retry", "abandon"):
            if not self.wire:
                return
            ref_id = list(self.wire)[pick % len(self.wire)]  # in the order handed out (ids are random)
            node, listener, ip, pair_id = self.wire[ref_id]
            owner = self.owner[node]
            if kind == "abandon":
                ref_item, item = ("abandon", node, ref_id, now_ms), ("abandon", node, pair_id, now_ms)
            else:
                ref_item = ("admit", node, listener, ip, ref_id, now_ms)
                item = ("admit", node, listener, ip, pair_id, now_ms)
        elif kind == "admit":
            ref_item = item = ("admit", node, listener, ip, None, now_ms)
        else:
            ref_item = item = ("release", node, listener, ip, now_ms)
        expected = self.reference.serve([ref_item])[0]
        got = owner.serve([item])[0]
        if kind in ("admit", "retry") and expected[4]:
            # a THROTTLE: the wire ids differ by each host's random base, the core's attempt ids do not
            ref_base, base = self.reference._nodes[node].id_base, owner._nodes[node].id_base
            assert got[4] - base == expected[4] - ref_base
            self.wire[expected[4]] = (node, listener, ip, got[4])
            got = (*got[:4], expected[4], got[5])
        assert got == expected, (op, got, expected)

    def _other(self, host: ConnectionHost) -> ConnectionHost:
        return self.b if host is self.a else self.a


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first_owner_b=st.lists(st.booleans(), min_size=NODES, max_size=NODES),
    moves=st.lists(st.booleans(), min_size=NODES, max_size=NODES),
    ops=st.lists(connection_op, min_size=20, max_size=80),
    split=st.integers(5, 80),
    through_pickle=st.booleans(),
)
def test_connection_nodes_hand_over_exactly(
    store: ConfigStore,
    first_owner_b: list[bool],
    moves: list[bool],
    ops: list[tuple[Any, ...]],
    split: int,
    through_pickle: bool,
) -> None:
    pair = ConnectionPair(store)
    pair.owner = {n: pair.b if first_owner_b[n] else pair.a for n in range(NODES)}
    moved = {connection_node_key(n) for n in range(NODES) if moves[n] and not first_owner_b[n]}
    now = T0
    for index, op in enumerate(ops):
        if index == min(split, len(ops) - 1):
            kept = pair.a.export_nodes(lambda key: key not in moved)
            snapshot = pair.a.export_nodes(moved.__contains__)
            assert {connection_node_key(n.node_id) for n in snapshot.nodes} == {
                connection_node_key(n) for n in pair.a.nodes if connection_node_key(n) in moved
            }
            if through_pickle:
                snapshot = pickle.loads(pickle.dumps(snapshot, protocol=5))
            assert pair.a.forget_nodes(moved.__contains__) == len(snapshot)
            assert not any(connection_node_key(n) in moved for n in pair.a.nodes)
            assert pair.a.export_nodes(lambda key: True) == kept
            b_before = pair.b.export_nodes(lambda key: True)
            assert pair.b.import_nodes(snapshot, now) == len(snapshot)
            assert pair.b.export_nodes(lambda key: key not in moved) == b_before
            for n in range(NODES):
                if connection_node_key(n) in moved:
                    pair.owner[n] = pair.b
        now += op[5]
        pair.run(op, now)
    for n in range(NODES):
        owner = pair.owner[n]
        assert _rows(owner.metrics_snapshot(now), n) == _rows(pair.reference.metrics_snapshot(now), n)
        assert (n in owner.nodes) == (n in pair.reference.nodes)


def test_a_bad_connection_snapshot_changes_nothing(store: ConfigStore) -> None:
    giver = ConnectionHost(lambda: store.image, resolver=_no_dns)
    giver.serve([("admit", 0, "EXTERNAL", f"10.1.0.{i % 4}", None, T0 + i) for i in range(12)])
    snapshot = giver.export_nodes(lambda key: True)
    receiver = ConnectionHost(lambda: store.image, resolver=_no_dns)
    receiver.serve([("admit", 0, "INTERNAL", IPS[2], None, T0)])
    before = receiver.export_nodes(lambda key: True)
    node = snapshot.nodes[0]
    bad = [
        ConnectionNodesSnapshot((node, node)),
        ConnectionNodesSnapshot((type(node)(node.node_id, node.id_base + 1, node.attempts, node.quotas),)),
        ConnectionNodesSnapshot((type(node)(-1, node.id_base, node.attempts, node.quotas),)),
        ConnectionNodesSnapshot(
            (
                type(node)(
                    node.node_id, node.id_base, node.attempts, type(node.quotas)(**_fields(node.quotas, version=9))
                ),
            )
        ),
    ]
    assert node.attempts, "the giver must have THROTTLEd attempts for the id_base case"
    for snap in bad:
        with pytest.raises(ValueError):
            receiver.import_nodes(snap, T0 + 10)
        assert receiver.export_nodes(lambda key: True) == before
    with pytest.raises(ValueError):
        receiver.import_nodes("nodes", T0)  # type: ignore[arg-type]


def _fields(value: Any, **changes: Any) -> dict[str, Any]:
    fields = {name: getattr(value, name) for name in type(value).__dataclass_fields__}
    fields.update(changes)
    return fields


# === replication ==========================================================================================
replication_op = st.tuples(
    st.integers(0, NODES - 1),
    st.sampled_from(["LEADER_REPLICATION", "FOLLOWER_REPLICATION", "ALTER_LOG_DIRS_REPLICATION"]),
    st.sampled_from(TOPICS),
    st.integers(0, 2),
    st.sampled_from([0.0, 100.0, 900.0, 2500.0]),
    st.one_of(st.integers(0, 300), st.integers(0, 5_000), st.integers(0, 4_000_000)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first_owner_b=st.lists(st.booleans(), min_size=NODES, max_size=NODES),
    moves=st.lists(st.booleans(), min_size=NODES, max_size=NODES),
    ops=st.lists(replication_op, min_size=10, max_size=60),
    split=st.integers(3, 60),
    through_pickle=st.booleans(),
)
def test_replication_nodes_hand_over_exactly(
    store: ConfigStore,
    first_owner_b: list[bool],
    moves: list[bool],
    ops: list[tuple[Any, ...]],
    split: int,
    through_pickle: bool,
) -> None:
    reference, a, b = (ReplicationHost(lambda: store.image) for _ in range(3))
    owner = {n: b if first_owner_b[n] else a for n in range(NODES)}
    moved = {replication_node_key(n) for n in range(NODES) if moves[n] and not first_owner_b[n]}
    now = T0
    for index, op in enumerate(ops):
        if index == min(split, len(ops) - 1):
            kept = a.export_nodes(lambda key: key not in moved)
            snapshot = a.export_nodes(moved.__contains__)
            if through_pickle:
                snapshot = pickle.loads(pickle.dumps(snapshot, protocol=5))
            assert a.forget_nodes(moved.__contains__) == len(snapshot)
            assert a.export_nodes(lambda key: True) == kept
            b_before = b.export_nodes(lambda key: True)
            assert b.import_nodes(snapshot, now) == len(snapshot)
            assert b.export_nodes(lambda key: key not in moved) == b_before
            owner = {n: b if replication_node_key(n) in moved else owner[n] for n in range(NODES)}
        node, kind, topic, partition, size, elapsed = op
        now += elapsed
        item = (node, kind, topic, partition, size, now)
        assert owner[node].serve([item]) == reference.serve([item]), op
    for n in range(NODES):
        assert _rows(owner[n].metrics_snapshot(now), n) == _rows(reference.metrics_snapshot(now), n)


def test_a_bad_replication_snapshot_changes_nothing(store: ConfigStore) -> None:
    giver = ReplicationHost(lambda: store.image)
    giver.serve([(1, "LEADER_REPLICATION", TOPICS[0], 0, 500.0, T0)])
    snapshot = giver.export_nodes(lambda key: True)
    ((node_id, state),) = snapshot.nodes
    receiver = ReplicationHost(lambda: store.image)
    receiver.serve([(2, "FOLLOWER_REPLICATION", TOPICS[0], 0, 70.0, T0)])
    before = receiver.export_nodes(lambda key: True)
    bad = [
        ReplicationNodesSnapshot(((node_id, state), (node_id, state))),
        ReplicationNodesSnapshot(((-3, state),)),
        ReplicationNodesSnapshot(((node_id, type(state)(**_fields(state, version=7))),)),
        ReplicationNodesSnapshot(((node_id, type(state)(**_fields(state, windows=((state.windows[0][0], 2, 1),)))),)),
    ]
    for snap in bad:
        with pytest.raises(ValueError):
            receiver.import_nodes(snap, T0 + 10)
        assert receiver.export_nodes(lambda key: True) == before


# === telemetry: the host's wrappers ========================================================================
def test_telemetry_host_hands_instances_over(tmp_path: Path, store: ConfigStore) -> None:
    def host() -> TelemetryHost:
        made = TelemetryHost(
            shard_id="0",
            node_id=None,
            data_dir=None,
            metrics=Metrics(),
            startup=startup_configs(store.image),
            now_ms=T0,
        )
        made.manager.update_subscription("p", {"metrics": "org.apache.kafka.producer.", "interval.ms": "30000"})
        return made

    giver, receiver = host(), host()
    ids = [Uuid.from_parts(7, k) for k in range(1, 4)]
    context = ("conn-1", "producer-1", "librdkafka", "2.16.0", "10.0.0.7", 51234, "User:alice")
    got = giver.serve([("get", bytes(uuid), (f"conn-{i}", *context[1:]), T0) for i, uuid in enumerate(ids)])
    moved = {instance_key(ids[0]), instance_key(ids[2])}
    snapshot = giver.export_instances(moved.__contains__)
    assert isinstance(snapshot, InstanceSnapshot) and len(snapshot) == 2
    snapshot = pickle.loads(pickle.dumps(snapshot, protocol=5))
    assert giver.forget_instances(moved.__contains__) == 2
    assert giver.stats()["instances"] == 1
    assert receiver.import_instances(snapshot, T0 + 5) == 2
    push = ("push", bytes(ids[0]), got[0][3], False, 0, b"", ("conn-0", *context[1:]), T0 + 10)
    again = ("get", bytes(ids[2]), ("conn-2", *context[1:]), T0 + 10)
    reference = host()
    reference.serve([("get", bytes(uuid), (f"conn-{i}", *context[1:]), T0) for i, uuid in enumerate(ids)])
    answers = receiver.serve([push, push, again])
    assert answers == reference.serve([push, push, again])
    assert [a[0] for a in answers] == [0, Errors.THROTTLING_QUOTA_EXCEEDED, Errors.THROTTLING_QUOTA_EXCEEDED]
