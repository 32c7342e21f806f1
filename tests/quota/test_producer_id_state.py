"""export_producer_ids / forget_producer_ids / import_producer_ids: KIP-936 users handed from one manager to another
at a random point of a random workload continue exactly as one manager that served it all (the same ids seen, the
same throttles, the same cleanups)."""

from __future__ import annotations

import math
import pickle
import random
import zlib
from array import array
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rbloom import Bloom

from quotaplane.quota import (
    DEFAULT,
    PRODUCER_ID_STATE_VERSION,
    ClientQuotaEntity,
    ProducerIdQuotaManager,
    ProducerIdQuotaManagerConfig,
    ProducerIdSnapshot,
    TimedBloomFilter,
    export_producer_ids,
    forget_producer_ids,
    import_producer_ids,
    producer_id_key,
    sanitize,
)
from quotaplane.quota._bloom import make_id_hasher
from quotaplane.quota._mutation_state import SampledState

T0 = 1_700_000_000_000
USERS = ("alice", "bob", "carol", "CN=d e")
#: a user only the receiver serves (its own state, which no hand-over may touch)
OTHER = "zed"

_pids = st.integers(0, 12) | st.integers(0, 2**63 - 1)
_items = st.lists(
    st.tuples(st.sampled_from(USERS), _pids, st.one_of(st.none(), st.integers(-1_500, 1_500))), max_size=30
)
_bounds = st.one_of(st.none(), st.sampled_from([0.25, 1.0, 3.0]))
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("batch"), st.integers(0, 2_500), _items),
        st.tuples(st.just("one"), st.integers(0, 2_500), st.sampled_from(USERS), _pids),
        st.tuples(st.just("quota"), st.sampled_from([*USERS[:3], DEFAULT]), _bounds),
        st.tuples(st.just("cleanup"), st.integers(0, 2_500)),
        st.tuples(st.just("throttle"), st.integers(0, 2_500), st.sampled_from(USERS), st.integers(0, 3_000)),
    ),
    max_size=15,
)


def _dense_steps(rng: random.Random, size: int) -> list[tuple]:
    """A seeded workload busier than hypothesis' short lists: every user active, ids reused and new, item times
    spread over windows (so users hold two filters), throttles reported, cleanups, now and then a quota change."""
    steps: list[tuple] = []
    for _ in range(size):
        roll = rng.random()
        if roll < 0.6:
            items = [
                (
                    rng.choice(USERS),
                    rng.randrange(16) if rng.random() < 0.7 else rng.randrange(2**63),
                    None if rng.random() < 0.5 else rng.randrange(-1_500, 1_500),
                )
                for _ in range(rng.randint(1, 12))
            ]
            steps.append(("batch", rng.randrange(1_200), items))
        elif roll < 0.7:
            steps.append(("one", rng.randrange(1_200), rng.choice(USERS), rng.randrange(16)))
        elif roll < 0.8:
            steps.append(("throttle", rng.randrange(500), rng.choice(USERS), rng.randrange(3_000)))
        elif roll < 0.95:
            steps.append(("cleanup", rng.randrange(2_500)))
        else:
            steps.append(("quota", rng.choice([*USERS[:3], DEFAULT]), rng.choice([None, 0.25, 1.0, 3.0])))
    return steps


def _config(window: tuple[int, int], expected_items: int, fp: float, hash_key: bytes | None):
    return ProducerIdQuotaManagerConfig(
        num_quota_samples=window[0],
        quota_window_size_seconds=window[1],
        filter_expected_items=expected_items,
        filter_false_positive_rate=fp,
        hash_key=hash_key,
    )


def _fresh(config: ProducerIdQuotaManagerConfig, default: float | None) -> ProducerIdQuotaManager:
    manager = ProducerIdQuotaManager(config)
    manager.update_quota(ClientQuotaEntity(user=DEFAULT), default)
    manager.update_quota(ClientQuotaEntity(user="alice"), 0.5)
    manager.update_quota(ClientQuotaEntity(user=OTHER), 1.0)
    return manager


class Shards:
    """The reference manager, or a giver and a receiver serving the keys ``owns`` gives each (a gateway)."""

    def __init__(self, giver: ProducerIdQuotaManager, receiver: ProducerIdQuotaManager | None = None, owns=None):
        self.giver, self.receiver, self.owns = giver, receiver, owns

    def managers(self) -> list[ProducerIdQuotaManager]:
        return [self.giver] if self.receiver is None else [self.giver, self.receiver]

    def owner(self, user: str) -> ProducerIdQuotaManager:
        if self.receiver is not None and self.owns(producer_id_key(user)):
            return self.receiver
        return self.giver

    def step(self, step: tuple, now: int) -> object:
        kind = step[0]
        if kind == "batch":
            items = [(u, p) if off is None else (u, p, now + off) for u, p, off in step[2]]
            answers: list[int | None] = [None] * len(items)
            for manager in self.managers():  # each shard answers its items, in order; the gateway merges
                mine = [i for i, item in enumerate(items) if self.owner(item[0]) is manager]
                for i, answer in zip(mine, manager.record_batch([items[i] for i in mine], now), strict=True):
                    answers[i] = answer
            return answers
        if kind == "one":
            return self.owner(step[2]).record_and_get_throttle_time_ms(step[2], step[3], now)
        if kind == "quota":  # config reaches every shard
            for manager in self.managers():
                manager.update_quota(ClientQuotaEntity(user=step[1]), step[2])
            return None
        if kind == "throttle":
            self.owner(step[2]).throttle(step[2], step[3], now)
            return None
        # every shard cleans up its own users; the users forgotten, per owner, in each shard's order
        return {
            "giver": [u for u in self.giver.cleanup(now) if u != OTHER],
            "receiver": [] if self.receiver is None else [u for u in self.receiver.cleanup(now) if u != OTHER],
        }


def _split_cleanups(answer: object, owns) -> object:
    """The reference's cleanup answer as the two shards would give it (the order kept on each)."""
    if isinstance(answer, dict):
        forgotten = answer["giver"]
        return {"giver": [u for u in forgotten if not owns(u)], "receiver": [u for u in forgotten if owns(u)]}
    return answer


def _user_state(manager: ProducerIdQuotaManager, user: str) -> object:
    """Everything the manager keeps for a user, exactly: bound, filters (bits and starts), due time, sensors."""
    state = manager._users.get(user)
    names = {f"ProducerIds-{sanitize(user)}", f"ProducerIdsThrottleTime-{sanitize(user)}"}
    registered = sorted(names & set(manager.metrics.sensors))
    if state is None:
        return registered
    sensors = [state.quota_sensor] + ([state.throttle_sensor] if state.throttle_sensor is not None else [])
    return (
        state.bound,
        state.filter.export_state(),
        [(d, u) for d, _, u, s in manager._due if s is state],
        [
            (
                s.name,
                s.last_record_time_ms,
                sorted((str(m.metric_name), repr(m.stat), repr(m.config)) for m in s.metrics),
            )
            for s in sensors
        ],
        registered,
    )


def _values(manager: ProducerIdQuotaManager, users: list[str], now_ms: int) -> dict[str, float]:
    tags = {sanitize(u) for u in users}
    return {
        str(name): metric.measurable_value(now_ms)
        for name, metric in manager.metrics.metrics.items()
        if name.tags.get("user") in tags
    }


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


@settings(max_examples=300, deadline=None)
@given(
    steps=_steps,
    dense=st.tuples(st.integers(0, 2**32), st.integers(0, 60)),
    split=st.integers(0, 80),
    seed=st.integers(0, 2**16),
    share=st.sampled_from([0, 1, 2, 2, 3, 3, 4]),  # quarters of the users that move (in expectation)
    receiver_items=_items,
    default=_bounds,
    window=st.sampled_from([(3, 2), (2, 1), (11, 1)]),
    expected_items=st.sampled_from([1, 4, 64]),
    false_positive_rate=st.sampled_from([0.01, 0.3]),
    hash_key=st.sampled_from([None, b"shard-key"]),
    through_pickle=st.booleans(),
)
def test_a_hand_over_of_some_users_continues_exactly(
    steps, dense, split, seed, share, receiver_items, default, window, expected_items, false_positive_rate, hash_key,
    through_pickle,
) -> None:  # fmt: skip
    """A reshard: at the split the giver exports the users ``owns`` accepts, forgets them, and the receiver
    (serving its own user, and maybe an old copy of a moved one) imports them; each item then goes to its user's
    owner. Every answer, every user's state (filter bits, bucket, sensors, cleanup schedule) and every metric's
    value are those of one manager that served everything."""
    config = _config(window, expected_items, false_positive_rate, hash_key)
    steps = _dense_steps(random.Random(dense[0]), dense[1]) + steps
    split %= len(steps) + 1

    def owns(key: str) -> bool:
        return zlib.crc32(f"{seed}:{key}".encode()) % 4 < share

    reference = Shards(_fresh(config, default))
    giver, receiver = _fresh(config, default), _fresh(config, default)
    now = T0
    expected, got = [], []
    first = Shards(giver, receiver, lambda key: False)  # config reaches both; every item goes to the giver
    for index in range(len(steps) + 1):
        if index == split:
            untouched = {u: _user_state(giver, u) for u in USERS if not owns(u)}
            moved = export_producer_ids(giver, owns)
            assert [u.user for u in moved.users] == [entry[2] for entry in sorted(giver._due) if owns(entry[2])]
            if through_pickle:
                moved = pickle.loads(pickle.dumps(moved, protocol=5))
            assert forget_producer_ids(giver, owns) == len(moved.users)
            assert not [u for u in giver.tracked_users if owns(u)]
            assert all(_user_state(giver, u) == [] for u in USERS if owns(u))  # no sensor left in the registry
            assert len(giver._due) == len(giver.tracked_users)  # no heap entry (holding filters) left behind
            assert {u: _user_state(giver, u) for u in USERS if not owns(u)} == untouched
            # the receiver's own user, and stale copies of moved users (which the import replaces)
            moved_users = {u.user for u in moved.users}
            receiver.record_batch([(OTHER, p) for _, p, _ in receiver_items], now)
            receiver.record_batch([(u, p) for u, p, _ in receiver_items if u in moved_users], now)
            own = _user_state(receiver, OTHER)
            assert import_producer_ids(receiver, moved, now) == len(moved.users)
            assert _user_state(receiver, OTHER) == own
            first.owns = owns
        if index == len(steps):
            break
        step = steps[index]
        if step[0] in ("batch", "one", "cleanup", "throttle"):
            now += step[1]
        expected.append(_split_cleanups(reference.step(step, now), first.owns))
        got.append(first.step(step, now))
    assert got == expected

    end = now + 1234
    for user in USERS:
        owner = first.owner(user)
        assert _user_state(owner, user) == _user_state(reference.giver, user), user
        assert _user_state(receiver if owner is giver else giver, user) == []  # on one side only
    mine = [u for u in USERS if first.owner(u) is receiver]
    theirs = [u for u in USERS if first.owner(u) is giver]
    assert _same(_values(receiver, mine, end), _values(reference.giver, mine, end))
    assert _same(_values(giver, theirs, end), _values(reference.giver, theirs, end))
    # the schedule moved: far in the future every cleanup forgets the same users at the same calls
    for later in (end + 1_000, end + 3_000, end + 10_000, end + 60_000):
        forgotten = reference.giver.cleanup(later)
        assert [u for u in giver.cleanup(later) if u != OTHER] == [u for u in forgotten if first.owner(u) is giver]
        assert [u for u in receiver.cleanup(later) if u != OTHER] == [u for u in forgotten if owns(u)]


# --- examples -----------------------------------------------------------------------------------------
CONFIG = _config((2, 1), 64, 0.01, None)


def _recorded() -> tuple[ProducerIdQuotaManager, ProducerIdSnapshot]:
    manager = _fresh(CONFIG, 1.0)
    assert manager.record_batch([("alice", pid) for pid in (1, 2, 3)], T0) == [0, 2000, 4000]
    manager.throttle("alice", 4000, T0)
    manager.record_batch([("bob", 7), ("bob", 8, T0 + 1_200)], T0)  # bob has two filters
    return manager, export_producer_ids(manager)


def test_the_receiver_knows_the_ids_seen_and_the_bucket() -> None:
    giver, moved = _recorded()
    receiver = _fresh(CONFIG, 1.0)
    assert import_producer_ids(receiver, moved, T0 + 10) == 2
    for manager in (giver, receiver):
        # ids 1-3 are seen (free); a new id takes a bucket at -2 + 0.1 s x 0.5/s to -2.95: 5.9 s at 0.5/s
        assert manager.record_batch([("alice", 2), ("alice", 9)], T0 + 100) == [0, 5900]
        assert manager.record_batch([("bob", 7), ("bob", 8), ("bob", 9)], T0 + 1_300) == [0, 0, 0]
    fresh = _fresh(CONFIG, 1.0)
    assert fresh.record_batch([("alice", 2), ("alice", 9)], T0 + 100) == [0, 2000]  # a lost state: 2 is new


def test_forget_drops_state_sensors_and_schedule() -> None:
    manager, _ = _recorded()
    assert forget_producer_ids(manager, lambda key: key == "alice") == 1
    assert manager.tracked_users == ["bob"]
    assert not [name for name in manager.metrics.sensors if "alice" in name]
    assert not [name for name in manager.metrics.metrics if name.tags.get("user") == "alice"]
    assert [entry[2] for entry in manager._due] == ["bob"]
    assert export_producer_ids(manager, lambda key: key == "alice").users == ()
    assert forget_producer_ids(manager, lambda key: key == "alice") == 0
    # alice starts over: a fresh bucket at its burst (1 id), no id seen (with her state both were seen: [0, 0])
    assert manager.record_batch([("alice", 1), ("alice", 2)], T0 + 1) == [0, 2000]


def test_the_key_is_the_user_as_given() -> None:
    assert producer_id_key("CN=d e") == "CN=d e"
    manager = _fresh(CONFIG, 1.0)
    manager.record_batch([("CN=d e", 1)], T0)
    assert [u.user for u in export_producer_ids(manager, lambda key: key == "CN=d e").users] == ["CN=d e"]


def test_an_import_replaces_a_user_tracked_already() -> None:
    giver, moved = _recorded()
    receiver = _fresh(CONFIG, 1.0)
    receiver.record_batch([("alice", 40), ("alice", 41)], T0)
    receiver.throttle("alice", 10, T0)
    import_producer_ids(receiver, moved, T0)
    assert _user_state(receiver, "alice") == _user_state(giver, "alice")
    assert len(receiver._due) == len(receiver.tracked_users)
    assert receiver.record_batch([("alice", 40)], T0 + 1) == giver.record_batch([("alice", 40)], T0 + 1)


def test_the_snapshot_pickles_and_holds_no_live_object() -> None:
    _, moved = _recorded()
    data = pickle.dumps(moved, protocol=5)
    assert pickle.loads(data) == moved
    assert b"rbloom" not in data and b"quotaplane.metrics" not in data
    assert CONFIG.hash_key is None or CONFIG.hash_key not in data


def test_the_hash_key_is_not_in_the_snapshot_but_must_match() -> None:
    keyed = _config((2, 1), 64, 0.01, b"secret-shard-key")
    giver = _fresh(keyed, 1.0)
    giver.record_batch([("alice", 1)], T0)
    moved = export_producer_ids(giver)
    assert b"secret-shard-key" not in pickle.dumps(moved, protocol=5)
    with pytest.raises(ValueError, match="hash key"):
        import_producer_ids(_fresh(_config((2, 1), 64, 0.01, b"other"), 1.0), moved, T0)
    assert import_producer_ids(_fresh(keyed, 1.0), moved, T0) == 1


def _user(**changes: object):
    def mutate(snapshot: ProducerIdSnapshot) -> ProducerIdSnapshot:
        return replace(snapshot, users=(replace(snapshot.users[0], **changes), *snapshot.users[1:]))

    return mutate


def _filters(index: int, value: object):
    def mutate(snapshot: ProducerIdSnapshot) -> ProducerIdSnapshot:
        bob = snapshot.users[1]
        filters = list(bob.filters)
        filters[index] = value(filters[index]) if callable(value) else value
        return replace(snapshot, users=(snapshot.users[0], replace(bob, filters=tuple(filters))))

    return mutate


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: replace(s, version=PRODUCER_ID_STATE_VERSION + 1),
        lambda s: replace(s, samples=3),
        lambda s: replace(s, window_ms=2_000),
        lambda s: replace(s, expected_items=65),
        lambda s: replace(s, false_positive_rate=0.02),
        lambda s: replace(s, hash_fingerprint=s.hash_fingerprint + 1),
        lambda s: replace(s, registry_samples=7),
        lambda s: replace(s, users=list(s.users)),
        lambda s: replace(s, users=(*s.users, s.users[0])),  # a user twice
        lambda s: replace(s, users=(s.users[0], "bob")),
        lambda s: object(),
        _user(user=1),
        _user(due_ms=1.0),
        _user(tokens=math.inf),
        _user(tokens=0),
        _user(rate=None),
        _user(
            rate=SampledState(0, array("q", range(5)), array("q", range(5)), array("d", [0.0] * 5), array("q", [0] * 5))
        ),
        _user(throttle_time=None),
        _user(filters=(T0, None, T0)),
        _filters(1, lambda b: b[:-1]),  # cut short
        _filters(1, lambda b: b[:8]),
        _filters(1, lambda b: (7).to_bytes(8, "little") + b[8:]),  # another number of probes
        _filters(1, "not bytes"),
        _filters(1, None),  # an older filter beside no current one
        _filters(2, lambda t: t + 1),  # the older filter must start one window before
        _filters(0, 1.5),
    ],
)
def test_a_bad_snapshot_raises_and_changes_nothing(mutate) -> None:
    _, moved = _recorded()
    receiver = _fresh(CONFIG, 1.0)
    receiver.record_batch([("alice", 5), (OTHER, 6)], T0)
    before = ({u: _user_state(receiver, u) for u in ("alice", "bob", OTHER)}, list(receiver._due))
    with pytest.raises(ValueError):
        import_producer_ids(receiver, mutate(moved), T0)
    assert ({u: _user_state(receiver, u) for u in ("alice", "bob", OTHER)}, list(receiver._due)) == before


# --- the filters' hand-over -----------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.integers(0, 2**63 - 1), max_size=60),
    steps=st.lists(st.integers(0, 1_500), min_size=1, max_size=60),
    expected_items=st.sampled_from([1, 8, 100]),
)
def test_a_restored_filter_continues_exactly(ids: list[int], steps: list[int], expected_items: int) -> None:
    original = TimedBloomFilter(expected_items, 0.05, window_ms=1_000)
    now = T0
    for pid, step in zip(ids, steps * len(ids), strict=False):
        now += step
        original.add(pid, now)
    copy = TimedBloomFilter(expected_items, 0.05, window_ms=1_000)
    copy.restore_state(*original.export_state())
    assert copy.export_state() == original.export_state()
    assert copy.filter_starts_ms() == original.filter_starts_ms()
    rng = random.Random(len(ids))
    probes = [rng.randrange(2**63) for _ in range(200)] + ids
    for pid in probes:
        now += rng.randrange(0, 300)
        assert copy.add(pid, now) == original.add(pid, now)
    assert copy.export_state() == original.export_state()


def test_the_filters_hold_the_bits_of_rbloom_s_default_hash() -> None:
    """``int.__hash__`` as rbloom's hash function (so filters can be saved) sets the very bits its default
    hash sets: a tiny filter answers every probe, false positives included, as a default one does."""
    timed = TimedBloomFilter(4, 0.3, window_ms=1_000)
    default = Bloom(4, 0.3)
    hash_id = make_id_hasher()
    rng = random.Random(7)
    for pid in (rng.randrange(2**63) for _ in range(6)):
        timed.add(pid, T0)
        default.add(hash_id(pid))
    probes = [rng.randrange(2**63) for _ in range(5_000)]
    answers = [timed.contains(pid, T0) for pid in probes]
    assert answers == [hash_id(pid) in default for pid in probes]
    assert 0 < sum(answers) < len(answers)  # false positives and true negatives both occur: the bits are tested
