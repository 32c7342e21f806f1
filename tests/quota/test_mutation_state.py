"""export_mutations / forget_mutations / import_mutations: controller-mutation token buckets handed from one
manager to another at a random point of a random workload continue exactly as one manager that served it all."""

from __future__ import annotations

import itertools
import math
import pickle
import random
import zlib
from array import array
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.metrics import Metrics
from quotaplane.quota import (
    DEFAULT,
    MUTATION_STATE_VERSION,
    ClientQuotaEntity,
    ClientQuotaManagerConfig,
    ControllerMutationQuotaManager,
    MutationSnapshot,
    ThrottlingQuotaExceededError,
    export_mutations,
    forget_mutations,
    import_mutations,
    mutation_key,
)
from quotaplane.quota._mutation_state import SampledState

USERS = ("alice", "bob", "carol")
CLIENTS = ("c1", "c2", "")
#: a user only the receiver serves (its own keys, which no hand-over may touch)
OTHER = "zed"
START_MS = 1_700_000_000_000

_entity_part = st.sampled_from([None, DEFAULT, "alice", "bob", "c1", "c2"])

quotas_strategy = st.lists(
    st.tuples(_entity_part, _entity_part, st.floats(min_value=0.5, max_value=8.0)), min_size=1, max_size=4
)

#: (kind, user, client id, permits, ms since the previous operation)
op_strategy = st.tuples(
    st.sampled_from(["strict", "strict", "permissive", "record", "throttle", "expire"]),
    st.sampled_from(USERS),
    st.sampled_from(CLIENTS),
    st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=3),
    st.one_of(
        st.integers(min_value=0, max_value=300),
        st.integers(min_value=0, max_value=15_000),
        st.sampled_from([3_600_000, 3_600_001]),  # Kafka's one-hour sensor expiry
    ),
)

Op = tuple[str, str, str, list[int], int]


def _dense_ops(rng: random.Random, size: int) -> list[Op]:
    """A seeded workload busier than hypothesis' short lists: buckets driven below zero, refused strict
    requests, throttles reported, now and then an hour of silence (sensors expire, separately)."""
    ops = []
    for _ in range(size):
        roll = rng.random()
        gap = (
            rng.randrange(300) if roll < 0.7 else rng.randrange(15_000) if roll < 0.98 else 3_600_000 + rng.randrange(2)
        )
        kind = rng.choice(["strict", "strict", "strict", "permissive", "record", "throttle", "throttle", "expire"])
        permits = [rng.randrange(31) for _ in range(rng.randint(1, 3))]
        ops.append((kind, rng.choice(USERS), rng.choice(CLIENTS), permits, gap))
    return ops


def _entity(user: object, client_id: object) -> ClientQuotaEntity | None:
    if user is None and client_id is None:
        return None
    user = user if user in (None, DEFAULT, "alice", "bob") else "alice"
    client_id = client_id if client_id in (None, DEFAULT, "c1", "c2") else "c1"
    return ClientQuotaEntity(user=user, client_id=client_id)


def _build(
    config: ClientQuotaManagerConfig, quotas: list[tuple[object, object, float]]
) -> ControllerMutationQuotaManager:
    manager = ControllerMutationQuotaManager(config, metrics=Metrics())
    for user, client_id, bound in quotas:
        entity = _entity(user, client_id)
        if entity is not None:
            manager.update_quota(entity, bound)
    manager.update_quota(ClientQuotaEntity(user=OTHER, client_id=None), 3.0)
    return manager


def _run(manager: ControllerMutationQuotaManager, op: Op, now_ms: int) -> object:
    """One request as the shard serves it; the answer, including every topic's acceptance and the throttle."""
    kind, user, client_id, permits, _ = op
    if kind in ("strict", "permissive"):
        make = manager.new_strict_quota_for if kind == "strict" else manager.new_permissive_quota_for
        quota = make(user, client_id, now_ms)
        accepted: list[object] = []
        for value in permits:
            try:
                quota.record(float(value), now_ms)
                accepted.append(True)
            except ThrottlingQuotaExceededError as e:
                accepted.append(e.throttle_time_ms)
        return accepted, quota.throttle_time(now_ms), quota.throttle_time(now_ms + 250), quota.is_exceeded()
    if kind == "record":
        return manager.record_and_get_throttle_time_ms(user, client_id, float(sum(permits)), now_ms)
    if kind == "throttle":
        manager.throttle(user, client_id, 7 * sum(permits), now_ms)
        return None
    return sorted(name for name in manager.expire_sensors(now_ms) if f"{OTHER}:" not in name)


def _key(manager: ControllerMutationQuotaManager, op: Op) -> str:
    """The key a gateway routes the op by: the metric tags its client resolves to."""
    return mutation_key(manager.quota_metric(op[1], op[2]).tags)


def _state(manager: ControllerMutationQuotaManager, keep: object) -> dict[str, object]:
    """Every controller-mutation sensor whose routing key ``keep`` accepts, exactly: its last recording, and
    per metric its name, the exact repr of its stat (tokens and refill time, every sample) and its bound."""
    state = {}
    for name, sensor in manager.metrics.sensors.items():
        tags = sensor.metrics[0].metric_name.tags
        if keep(mutation_key(tags)):  # type: ignore[operator]
            state[name] = (
                sensor.last_record_time_ms,
                sorted((str(m.metric_name), repr(m.stat), repr(m.config.quota)) for m in sensor.metrics),
            )
    return state


def _values(manager: ControllerMutationQuotaManager, keep: object, now_ms: int) -> dict[str, float]:
    """The value each kept metric reports at ``now_ms`` (what a metrics endpoint scrapes)."""
    values = {}
    for name, metric in manager.metrics.metrics.items():
        if name.group == "ControllerMutation" and keep(mutation_key(name.tags)):  # type: ignore[operator]
            values[str(name)] = metric.measurable_value(now_ms)
    return values


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


@settings(max_examples=300, deadline=None)
@given(
    quotas=quotas_strategy,
    ops=st.lists(op_strategy, max_size=20),
    dense=st.tuples(st.integers(0, 2**32), st.integers(0, 80)),
    split=st.integers(min_value=0, max_value=100),
    seed=st.integers(min_value=0, max_value=2**16),
    share=st.sampled_from([0, 2, 4, 4, 6, 6, 8]),  # eighths of the keys that move (in expectation)
    receiver_ops=st.lists(op_strategy, max_size=6),
    window=st.sampled_from([(11, 1), (3, 2), (2, 1)]),
    through_pickle=st.booleans(),
)
def test_a_hand_over_of_some_keys_continues_exactly(
    quotas: list[tuple[object, object, float]],
    ops: list[Op],
    dense: tuple[int, int],
    split: int,
    seed: int,
    share: int,
    receiver_ops: list[Op],
    window: tuple[int, int],
    through_pickle: bool,
) -> None:
    """A reshard: at the split the giver exports the clients whose key ``owns`` accepts, forgets them, and the
    receiver (serving its own clients, and maybe an old copy of a moved one) imports them; each op then goes to
    its key's owner. Every answer, every sensor's state and every metric's value are those of one manager."""
    config = ClientQuotaManagerConfig(num_quota_samples=window[0], quota_window_size_seconds=window[1])
    ops = _dense_ops(random.Random(dense[0]), dense[1]) + ops
    split %= len(ops) + 1
    times = list(itertools.accumulate((op[4] for op in ops), initial=START_MS))[1:]
    split_ms = times[split - 1] if split else START_MS

    def owns(key: str) -> bool:
        return zlib.crc32(f"{seed}:{key}".encode()) % 8 < share

    reference = _build(config, quotas)
    expected = [_run(reference, op, t) for op, t in zip(ops, times, strict=True)]

    giver, receiver = _build(config, quotas), _build(config, quotas)
    got = [_run(giver, op, t) for op, t in zip(ops[:split], times[:split], strict=True)]
    untouched = _state(giver, lambda key: not owns(key))
    moved = export_mutations(giver, owns)
    assert {client.key for client in moved.clients} == {key for key in map(mutation_key, _tags(giver)) if owns(key)}
    if through_pickle:
        moved = pickle.loads(pickle.dumps(moved, protocol=5))
    assert forget_mutations(giver, owns) == len(moved.clients)
    assert _state(giver, owns) == {}  # forgotten: nothing owned is left in the giver's registry
    assert _state(giver, lambda key: not owns(key)) == untouched

    # the receiver's own clients, and stale copies of moved ones (which the import replaces)
    moved_keys = {client.key for client in moved.clients}
    for op in receiver_ops:
        if _key(reference, op) in moved_keys:
            _run(receiver, op, split_ms)
        _run(receiver, (op[0], OTHER, op[2], op[3], 0), split_ms)
    own = _state(receiver, lambda key: key not in moved_keys)
    assert import_mutations(receiver, moved, split_ms) == len(moved.clients)
    assert _state(receiver, lambda key: key not in moved_keys) == own

    for op, t in zip(ops[split:], times[split:], strict=True):
        if op[0] == "expire":  # every shard expires its own sensors
            got.append(sorted(_run(giver, op, t) + _run(receiver, op, t)))  # type: ignore[operator]
        else:
            got.append(_run(receiver if owns(_key(reference, op)) else giver, op, t))

    assert got == expected
    mine = lambda key: owns(key) and OTHER not in key  # noqa: E731
    theirs = lambda key: not owns(key)  # noqa: E731
    assert _state(receiver, mine) == _state(reference, mine)
    assert _state(giver, theirs) == _state(reference, theirs)
    end = (times[-1] if times else START_MS) + 1234
    assert _same(_values(receiver, mine, end), _values(reference, mine, end))
    assert _same(_values(giver, theirs, end), _values(reference, theirs, end))


def _tags(manager: ControllerMutationQuotaManager) -> list[dict[str, str]]:
    return [sensor.metrics[0].metric_name.tags for sensor in manager.metrics.sensors.values()]


def _recorded() -> tuple[ControllerMutationQuotaManager, MutationSnapshot]:
    manager = _build(ClientQuotaManagerConfig(), [("alice", None, 2.0)])
    manager.new_permissive_quota_for("alice", "c1", START_MS).record(50.0, START_MS)
    manager.throttle("alice", "c1", 1000, START_MS)
    manager.new_permissive_quota_for("bob", "c1", START_MS).record(1.0, START_MS)
    return manager, export_mutations(manager)


def test_a_strict_quota_refuses_on_the_receiver_as_on_the_giver() -> None:
    giver, moved = _recorded()
    receiver = _build(ClientQuotaManagerConfig(), [("alice", None, 2.0)])
    assert import_mutations(receiver, moved, START_MS + 10) == 2
    for manager in (giver, receiver):
        with pytest.raises(ThrottlingQuotaExceededError) as refused:
            manager.new_strict_quota_for("alice", "c1", START_MS + 1000).record(1.0, START_MS + 1000)
        # a full bucket (burst 11 windows x 1 s x 2/s = 22) less 50, plus 1 s of refill: -26 tokens, 13 s at 2/s
        assert refused.value.throttle_time_ms == 13_000
    fresh = _build(ClientQuotaManagerConfig(), [("alice", None, 2.0)])
    fresh.new_strict_quota_for("alice", "c1", START_MS + 1000).record(1.0, START_MS + 1000)  # no state: accepted


def test_forget_removes_the_sensors_and_their_metrics() -> None:
    manager, _ = _recorded()
    alice = mutation_key({"user": "alice", "client-id": ""})
    assert forget_mutations(manager, lambda key: key == alice) == 1
    assert not {"ControllerMutation-alice:", "ControllerMutationThrottleTime-alice:"} & set(manager.metrics.sensors)
    assert not [name for name in manager.metrics.metrics if name.tags.get("user") == "alice"]
    assert "ControllerMutation-bob:" in manager.metrics.sensors
    assert export_mutations(manager, lambda key: key == alice).clients == ()
    assert forget_mutations(manager, lambda key: key == alice) == 0
    # the manager's caches follow: alice starts over with a fresh bucket (full at its burst)
    assert manager.record_and_get_throttle_time_ms("alice", "c1", 1.0, START_MS + 1) == 0


def test_the_key_is_the_gateways() -> None:
    assert mutation_key({"user": "alice", "client-id": ""}) == "CONTROLLER_MUTATION\x00alice\x00"
    assert mutation_key({"user": "", "client-id": "c1"}) == "CONTROLLER_MUTATION\x00\x00c1"
    _, moved = _recorded()
    assert sorted(client.key for client in moved.clients) == [
        "CONTROLLER_MUTATION\x00alice\x00",
        "CONTROLLER_MUTATION\x00bob\x00",
    ]


def test_an_import_replaces_a_client_held_already() -> None:
    giver, moved = _recorded()
    receiver = _build(ClientQuotaManagerConfig(), [("alice", None, 2.0)])
    receiver.new_permissive_quota_for("alice", "c1", START_MS).record(1.0, START_MS)
    import_mutations(receiver, moved, START_MS)
    keep = lambda key: "alice" in key  # noqa: E731
    assert _state(receiver, keep) == _state(giver, keep)


def test_the_snapshot_pickles_and_holds_no_live_object() -> None:
    _, moved = _recorded()
    data = pickle.dumps(moved, protocol=5)
    assert pickle.loads(data) == moved
    assert b"quotaplane.metrics" not in data  # no sensor, stat or registry inside


def _samples(**changes: object) -> object:
    def mutate(snapshot: MutationSnapshot) -> MutationSnapshot:
        first = snapshot.clients[0]
        client = replace(first, mutation_rate=replace(first.mutation_rate, **changes))  # type: ignore[arg-type]
        return replace(snapshot, clients=(client, *snapshot.clients[1:]))

    return mutate


def _client(**changes: object) -> object:
    def mutate(snapshot: MutationSnapshot) -> MutationSnapshot:
        return replace(snapshot, clients=(replace(snapshot.clients[0], **changes), *snapshot.clients[1:]))

    return mutate


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: replace(s, version=MUTATION_STATE_VERSION + 1),
        lambda s: replace(s, samples=5),
        lambda s: replace(s, registry_window_ms=1),
        lambda s: replace(s, clients=list(s.clients)),
        lambda s: replace(s, clients=(*s.clients, s.clients[0])),  # a client twice
        lambda s: replace(s, clients=(s.clients[0], "x")),
        lambda s: "not a snapshot",
        _client(tokens=math.nan),
        _client(tokens=1),  # an int is not the bucket's float
        _client(last_update_ms=1.5),
        _client(last_record_ms=None, throttle_last_record_ms=None),
        _client(mutation_rate=None),
        _client(throttle_time=None),
        _client(tags=(("user", 1),)),
        _samples(current=5),
        _samples(starts=array("q", [1, 2, 3, 4, 5])),
        _samples(values=array("q", [1])),
        _samples(
            current=0,
            starts=array("q", range(20)),
            lasts=array("q", range(20)),
            values=array("d", range(20)),
            counts=array("q", range(20)),
        ),
    ],
)
def test_a_bad_snapshot_raises_and_changes_nothing(mutate: object) -> None:
    _, moved = _recorded()
    bad = mutate(moved)  # type: ignore[operator]
    receiver = _build(ClientQuotaManagerConfig(), [("alice", None, 2.0)])
    receiver.new_permissive_quota_for("bob", "c1", START_MS).record(3.0, START_MS)
    before = _state(receiver, lambda key: True)
    with pytest.raises(ValueError):
        import_mutations(receiver, bad, START_MS)  # type: ignore[arg-type]
    assert _state(receiver, lambda key: True) == before


def test_sampled_state_round_trips() -> None:
    manager, moved = _recorded()
    rate = moved.clients[0].mutation_rate
    assert isinstance(rate, SampledState)
    rate.check(manager.metrics.config.samples)


def test_a_client_whose_quota_sensor_expired_moves_its_throttle_sensor_alone() -> None:
    """Kafka expires the two sensors separately: a client refused for an hour (refusals record nothing) keeps
    only the throttle-time sensor the shard feeds. It moves alone; the receiver makes a fresh bucket later."""
    config = ClientQuotaManagerConfig()
    giver = _build(config, [("alice", None, 1.0)])
    giver.new_permissive_quota_for("alice", "c1", START_MS).record(100.0, START_MS)
    giver.throttle("alice", "c1", 500, START_MS + 3_000_000)
    later = START_MS + 3_600_001
    assert giver.expire_sensors(later) == ["ControllerMutation-alice:"]
    moved = export_mutations(giver)
    assert [(c.last_record_ms, c.throttle_last_record_ms) for c in moved.clients] == [(None, START_MS + 3_000_000)]
    receiver = _build(config, [("alice", None, 1.0)])
    assert import_mutations(receiver, moved, later) == 1
    assert forget_mutations(giver, lambda key: True) == 1
    assert set(receiver.metrics.sensors) == {"ControllerMutationThrottleTime-alice:"}
    keep = lambda key: True  # noqa: E731
    reference = _build(config, [("alice", None, 1.0)])
    reference.new_permissive_quota_for("alice", "c1", START_MS).record(100.0, START_MS)
    reference.throttle("alice", "c1", 500, START_MS + 3_000_000)
    reference.expire_sensors(later)
    for manager in (reference, receiver):
        manager.throttle("alice", "c1", 700, later + 5)
    assert _state(receiver, keep) == _state(reference, keep)
