"""export_instances / forget_instances / import_instances: client instances handed from one manager to another
mid-workload answer the rest of it exactly as one manager that saw every request.

Two managers A and B split the clients (a placement); at a random point the clients A gives up move to B
(export, forget, import), and the rest of the workload goes to each client's owner. A reference manager
gets every request. Every answer (error codes, subscription ids, intervals, metrics), every disconnect,
every expiry sweep and the final state of every instance must be the reference's.
"""

from __future__ import annotations

import pickle
from array import array
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.errors import Errors
from quotaplane.kafka_uuid import ONE_UUID, Uuid
from quotaplane.telemetry import (
    ClientMetricsManager,
    ClientMetricsManagerConfig,
    GetTelemetrySubscriptionsRequest,
    InstanceSnapshot,
    PushTelemetryRequest,
    RequestContext,
    export_instances,
    forget_instances,
    import_instances,
    instance_key,
)

START_MS = 1_700_000_000_000
CLIENTS = 6
IDS = [Uuid.from_parts(0x1000 + k, -77 * (k + 1)) for k in range(CLIENTS)]
SOFTWARE = ("librdkafka", "apache-kafka-java", "kafka-python")

#: client-metrics resources, by the name a workload op sets or deletes
SUBSCRIPTIONS: dict[str, dict[str, str]] = {
    "producers": {
        "metrics": "org.apache.kafka.producer.",
        "interval.ms": "4000",
        "match": "client_software_name=librdkafka",
    },
    "java": {
        "metrics": "org.apache.kafka.consumer.,org.apache.kafka.producer.",
        "interval.ms": "9000",
        "match": "client_software_name=apache-kafka-java",
    },
    "everything": {"metrics": "*", "interval.ms": "15000"},
    "fast": {"metrics": "org.apache.kafka.", "interval.ms": "1000", "match": "client_id=c-[02].*"},
}


def _manager(cache_expiry_ms: int, subscriptions: list[str]) -> ClientMetricsManager:
    manager = ClientMetricsManager(
        ClientMetricsManagerConfig(cache_expiry_ms=cache_expiry_ms), now_ms=START_MS, new_client_instance_id=_no_ids
    )
    for name in subscriptions:
        manager.update_subscription(name, SUBSCRIPTIONS[name])
    return manager


def _no_ids() -> Uuid:
    raise AssertionError("the workload always names its client instance id")


def _context(k: int, connection: int) -> RequestContext:
    return RequestContext(
        f"conn-{k}-{connection}", f"c-{k}", SOFTWARE[k % 3], "2.16.0", f"10.0.0.{k}", 40_000 + k, "User:alice"
    )


#: an op, then the ms since the previous one
op_strategy = st.one_of(
    st.tuples(st.just("get"), st.integers(0, CLIENTS - 1)),
    st.tuples(
        st.just("push"),
        st.integers(0, CLIENTS - 1),
        st.sampled_from(["ok", "ok", "ok", "wrong-id", "bad-compression"]),
    ),
    st.tuples(st.just("terminate"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("reconnect"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("disconnect"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("expire")),
    st.tuples(st.just("subscribe"), st.sampled_from(sorted(SUBSCRIPTIONS))),
    st.tuples(st.just("unsubscribe"), st.sampled_from(sorted(SUBSCRIPTIONS))),
).flatmap(lambda op: st.tuples(st.just(op), st.one_of(st.integers(0, 1500), st.integers(0, 40_000))))


class Workload:
    """One reference manager and the sharded pair; ``owner[k]`` is the manager serving client ``k`` now."""

    def __init__(self, reference: ClientMetricsManager, a: ClientMetricsManager, b: ClientMetricsManager) -> None:
        self.reference, self.a, self.b = reference, a, b
        self.connection = [0] * CLIENTS
        #: the subscription id each client last got (from the reference's answers)
        self.subscription_id = [0] * CLIENTS
        self.owner: list[ClientMetricsManager] = []

    def run(self, op: tuple[Any, ...], now_ms: int) -> list[Any]:
        """The op on the reference and on the owner; both answers."""
        kind = op[0]
        if kind in ("subscribe", "unsubscribe"):  # config: every manager applies the log
            for manager in (self.reference, self.a, self.b):
                if kind == "subscribe":
                    manager.update_subscription(op[1], SUBSCRIPTIONS[op[1]])
                else:
                    manager.delete_subscription(op[1])
            return []
        if kind == "expire":  # every shard sweeps; the reference's sweep removes what the pair's sweeps remove
            removed = sorted(str(r.client_instance_id) for r in self.a.expire(now_ms) + self.b.expire(now_ms))
            return [sorted(str(r.client_instance_id) for r in self.reference.expire(now_ms)), removed]
        k = op[1]
        if kind == "reconnect":
            self.connection[k] += 1
            return []
        context = _context(k, self.connection[k])
        if kind == "disconnect":
            return [m.on_disconnect(context.connection_id) for m in (self.reference, self.owner[k])]
        answers = []
        for manager in (self.reference, self.owner[k]):
            if kind == "get":
                got = manager.process_get_telemetry_subscriptions_request(
                    GetTelemetrySubscriptionsRequest(IDS[k]), context, now_ms
                )
                answers.append(
                    (
                        got.error_code,
                        got.client_instance_id,
                        got.subscription_id,
                        got.push_interval_ms,
                        got.requested_metrics,
                    )
                )
            else:
                subscription_id = self.subscription_id[k] + (1 if kind == "push" and op[2] == "wrong-id" else 0)
                compression = 9 if kind == "push" and op[2] == "bad-compression" else 0
                request = PushTelemetryRequest(IDS[k], subscription_id, kind == "terminate", compression, b"")
                answers.append(manager.process_push_telemetry_request(request, context, now_ms).error_code)
        if kind == "get" and answers[0][0] == Errors.NONE:
            self.subscription_id[k] = answers[0][2]
        return answers


def _state(manager: ClientMetricsManager, uuid: Uuid) -> tuple[Any, ...] | None:
    instance = manager.client_instance(uuid)
    if instance is None:
        return None
    return (
        instance.subscription_id,
        instance.push_interval_ms,
        instance.metrics,
        instance.last_get_request_ms,
        instance.last_push_request_ms,
        instance.terminating,
        instance.last_known_error,
        instance.expires_at_ms,
        instance.connection_id,
        manager.instances.connection_instance(instance.connection_id) == uuid,
    )


def _everything(_: str) -> bool:
    return True


@settings(max_examples=250, deadline=None)
@given(
    subscriptions=st.lists(st.sampled_from(sorted(SUBSCRIPTIONS)), unique=True, max_size=3),
    cache_expiry_ms=st.sampled_from([1_000, 10_000, 60_000]),
    first_owner_b=st.lists(st.booleans(), min_size=CLIENTS, max_size=CLIENTS),
    moves=st.lists(st.booleans(), min_size=CLIENTS, max_size=CLIENTS),
    ops=st.lists(op_strategy, min_size=1, max_size=70),
    split=st.integers(min_value=0, max_value=70),
    receiver_history=st.booleans(),
    through_pickle=st.booleans(),
)
def test_hand_over_continues_exactly(
    subscriptions: list[str],
    cache_expiry_ms: int,
    first_owner_b: list[bool],
    moves: list[bool],
    ops: list[tuple[tuple[Any, ...], int]],
    split: int,
    receiver_history: bool,
    through_pickle: bool,
) -> None:
    reference, a, b = (_manager(cache_expiry_ms, subscriptions) for _ in range(3))
    if receiver_history:  # the receiver's subscription version is not the giver's: it must not matter
        b.update_subscription("extra", {"metrics": "x.", "interval.ms": "1000"})
        b.delete_subscription("extra")
    work = Workload(reference, a, b)
    work.owner = [b if first_owner_b[k] else a for k in range(CLIENTS)]
    moved = {instance_key(IDS[k]) for k in range(CLIENTS) if moves[k] and not first_owner_b[k]}
    now = START_MS
    for index, (op, elapsed) in enumerate(ops):
        if index == min(split, len(ops) - 1):
            _hand_over(a, b, moved, now, through_pickle)
            work.owner = [b if instance_key(IDS[k]) in moved else work.owner[k] for k in range(CLIENTS)]
        now += elapsed
        answers = work.run(op, now)
        if answers:
            assert answers[0] == answers[1], (op, answers)
    for k, uuid in enumerate(IDS):
        other = a if work.owner[k] is b else b
        assert _state(work.owner[k], uuid) == _state(reference, uuid)
        assert other.client_instance(uuid) is None
    assert len(a.instances) + len(b.instances) == len(reference.instances)
    assert a.instances.bytes_used + b.instances.bytes_used == reference.instances.bytes_used


def _hand_over(
    a: ClientMetricsManager, b: ClientMetricsManager, moved: set[str], now: int, through_pickle: bool
) -> None:
    owns: Callable[[str], bool] = moved.__contains__
    kept_before = export_instances(a, lambda key: not owns(key))
    b_before = export_instances(b, _everything)
    snapshot = export_instances(a, owns)
    assert {instance_key(u) for u in snapshot.client_instance_ids()} == {
        instance_key(i.client_instance_id) for i in a.instances if owns(instance_key(i.client_instance_id))
    }
    if through_pickle:
        copied = pickle.loads(pickle.dumps(snapshot, protocol=5))
        assert copied == snapshot
        snapshot = copied
    assert forget_instances(a, owns) == len(snapshot)
    assert export_instances(a, owns) == export_instances(a, _never)
    assert export_instances(a, _everything) == kept_before  # the keys A keeps are untouched
    assert import_instances(b, snapshot, now) == len(snapshot)
    # B's own clients are untouched (queue order included)
    mine = {instance_key(u) for u in b_before.client_instance_ids()}
    assert export_instances(b, mine.__contains__) == b_before


def _never(_: str) -> bool:
    return False


def _giver() -> tuple[ClientMetricsManager, InstanceSnapshot]:
    manager = _manager(10_000, ["producers", "everything"])
    for k in range(3):
        manager.process_get_telemetry_subscriptions_request(
            GetTelemetrySubscriptionsRequest(IDS[k]), _context(k, 0), START_MS + k
        )
    return manager, export_instances(manager, _everything)


def test_imported_instance_throttles_and_keeps_its_subscription_id() -> None:
    giver, snapshot = _giver()
    receiver = _manager(10_000, ["producers", "everything"])
    assert import_instances(receiver, snapshot, START_MS + 10) == 3
    got = receiver.process_get_telemetry_subscriptions_request(
        GetTelemetrySubscriptionsRequest(IDS[0]), _context(0, 0), START_MS + 100
    )
    assert got.error_code == Errors.THROTTLING_QUOTA_EXCEEDED
    instance = receiver.client_instance(IDS[0])
    original = giver.client_instance(IDS[0])
    assert instance is not None and original is not None
    assert instance.subscription_id == original.subscription_id
    push = PushTelemetryRequest(IDS[0], original.subscription_id + 1, False, 0, b"")
    assert (
        receiver.process_push_telemetry_request(push, _context(0, 0), START_MS + 200).error_code
        == Errors.UNKNOWN_SUBSCRIPTION_ID
    )
    # the same expiry: gone at the same sweep as on the giver
    assert [r.client_instance_id for r in receiver.expire(original.expires_at_ms - 1)] == []
    assert IDS[1] in [r.client_instance_id for r in receiver.expire(START_MS + 1 + 3 * 15_000)]


def test_without_import_the_gating_state_is_lost() -> None:
    """What the hand-over is for: a fresh manager accepts the get the giver throttles."""
    giver, _ = _giver()
    fresh = _manager(10_000, ["producers", "everything"])
    request = GetTelemetrySubscriptionsRequest(IDS[0])
    assert fresh.process_get_telemetry_subscriptions_request(request, _context(0, 0), START_MS + 50).error_code == 0
    assert (
        giver.process_get_telemetry_subscriptions_request(request, _context(0, 0), START_MS + 50).error_code
        == Errors.THROTTLING_QUOTA_EXCEEDED
    )


def test_changed_subscriptions_resolve_again() -> None:
    """A receiver whose subscriptions differ treats the import as a subscription change: the next get is
    answered afresh with the receiver's subscription, as Kafka does after a change."""
    _, snapshot = _giver()
    receiver = _manager(10_000, ["producers"])
    import_instances(receiver, snapshot, START_MS + 10)
    got = receiver.process_get_telemetry_subscriptions_request(
        GetTelemetrySubscriptionsRequest(IDS[1]), _context(1, 0), START_MS + 20
    )
    assert got.error_code == 0 and got.push_interval_ms == 300_000


def test_an_instance_out_of_date_on_the_giver_is_resolved_again_on_the_receiver() -> None:
    """A subscription change the giver's instance has not seen yet (no request since) still applies to it."""
    giver, _ = _giver()
    receiver = _manager(10_000, ["producers", "everything"])
    for manager in (giver, receiver):
        manager.update_subscription("fast", SUBSCRIPTIONS["fast"])
    import_instances(receiver, export_instances(giver, _everything), START_MS + 10)
    request = GetTelemetrySubscriptionsRequest(IDS[0])
    answers = [
        m.process_get_telemetry_subscriptions_request(request, _context(0, 0), START_MS + 20) for m in (giver, receiver)
    ]
    assert answers[0] == answers[1] and answers[0].error_code == 0 and answers[0].push_interval_ms == 1000


def test_imported_instances_take_their_place_in_the_expiry_order() -> None:
    """Merged by last request time into the receiver's queue: an imported instance older than the receiver's
    own expires first, at its own time (appended behind a newer one, the sweep would stop before it)."""
    giver, receiver = _manager(10_000, []), _manager(10_000, [])
    for manager, k, at in ((giver, 0, START_MS), (receiver, 1, START_MS + 1_000), (giver, 2, START_MS + 2_000)):
        manager.process_get_telemetry_subscriptions_request(
            GetTelemetrySubscriptionsRequest(IDS[k]), _context(k, 0), at
        )
    import_instances(receiver, export_instances(giver, _everything), START_MS + 3_000)
    expiry = 3 * 300_000
    assert [r.client_instance_id for r in receiver.expire(START_MS + expiry)] == [IDS[0]]
    assert [r.client_instance_id for r in receiver.expire(START_MS + 1_000 + expiry)] == [IDS[1]]
    assert [r.client_instance_id for r in receiver.expire(START_MS + 2_000 + expiry)] == [IDS[2]]


def test_an_import_replaces_the_receivers_instance() -> None:
    _, snapshot = _giver()
    receiver = _manager(10_000, ["producers", "everything"])
    receiver.process_get_telemetry_subscriptions_request(
        GetTelemetrySubscriptionsRequest(IDS[0]), _context(0, 7), START_MS - 50_000
    )
    import_instances(receiver, snapshot, START_MS + 10)
    instance = receiver.client_instance(IDS[0])
    assert instance is not None and instance.connection_id == "conn-0-0"
    assert receiver.instances.connection_instance("conn-0-7") is None
    assert len(receiver.instances) == 3
    assert receiver.on_disconnect("conn-0-0") and receiver.client_instance(IDS[0]) is None


def _column(name: str, value: Any) -> Callable[[InstanceSnapshot], InstanceSnapshot]:
    def mutate(snapshot: InstanceSnapshot) -> InstanceSnapshot:
        fields = {f: getattr(snapshot, f) for f in InstanceSnapshot.__dataclass_fields__}
        fields[name] = value(fields[name]) if callable(value) else value
        return InstanceSnapshot(**fields)

    return mutate


@pytest.mark.parametrize(
    "mutate",
    [
        _column("version", 99),
        _column("cache_expiry_ms", 60_000),
        _column("ids", lambda ids: ids[:-1]),
        _column("ids", lambda ids: ids[:16] + ids[:16] + ids[32:]),  # a repeated id
        _column("ids", lambda ids: bytes(ONE_UUID) + ids[16:]),
        _column("touched", lambda c: c[:-1]),
        _column("last_get", lambda c: array("d", c)),
        _column("resolutions", lambda c: array("q", [len(c) + 5] * len(c))),
        _column("errors", lambda c: array("q", [12345] * len(c))),
        _column("flags", lambda c: array("q", [64] * len(c))),
        _column("connection_ids", lambda c: ["", *c[1:]]),
        _column("principals", lambda c: [b"x", *c[1:]]),
        _column("resolved", lambda r: ((r[0][0], 0, r[0][2], r[0][3]), *r[1:])),
        _column("resolved", lambda r: ((r[0][0], r[0][1], 2**40, r[0][3]), *r[1:])),
    ],
)
def test_a_bad_snapshot_raises_and_changes_nothing(mutate: Callable[[InstanceSnapshot], InstanceSnapshot]) -> None:
    _, snapshot = _giver()
    receiver = _manager(10_000, ["producers", "everything"])
    receiver.process_get_telemetry_subscriptions_request(
        GetTelemetrySubscriptionsRequest(IDS[0]), _context(0, 3), START_MS
    )
    before = export_instances(receiver, _everything)
    with pytest.raises(ValueError):
        import_instances(receiver, mutate(snapshot), START_MS)
    assert export_instances(receiver, _everything) == before
    with pytest.raises(ValueError):
        import_instances(receiver, "not a snapshot", START_MS)  # type: ignore[arg-type]
