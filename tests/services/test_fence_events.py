"""Config events handed over at the offset fence, without Ray: a shard's follower keeps the tail of what it
applied (``events_after``) and a gateway's replica applies it (``apply_handed``) exactly as it would apply the
controller's events, or refuses it whole.

The reference is the path the handover replaces: the replica reading the same offsets from the controller
(``catch_up``). On random logs, split into pushes at random (some straddling what the shard already has),
both must give the same image and, what the fence needs, the same shard key for every item.
"""

from __future__ import annotations

import itertools
import logging
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from quotaplane.actors import ConfigFollower
from quotaplane.actors.controller import ConfigController
from quotaplane.config import ClientQuotaAlteration, decode_columns, encode_events, events_of
from quotaplane.services.gateway._replica import ConfigReplica

NOW_MS = 1_700_000_000_000
ABSENT, DEFAULT = "<absent>", "<default>"  # the component left out; its default entity (name None)
USERS = ["alice", "bob", ABSENT, DEFAULT]
CLIENTS = ["c1", "c2", ABSENT, DEFAULT]
KEYS = ["producer_byte_rate", "consumer_byte_rate", "request_percentage"]
#: every (type, user, client id) an item of the tests can have
ITEMS = [
    (quota_type, user, client_id)
    for quota_type in ("PRODUCE", "FETCH", "REQUEST")
    for user in ("alice", "bob", "carol")
    for client_id in ("c1", "c2", "c3")
]


class LocalReplica(ConfigReplica):
    """The gateway's replica with its controller calls made in-process (and counted)."""

    def __init__(self, controller: ConfigController) -> None:
        self.local = controller
        self.controller_calls = 0
        super().__init__(controller)

    def _call(self, method: str, *args: Any) -> Any:
        self.controller_calls += 1
        return getattr(self.local, method)(*args)


def follower_of(controller: ConfigController, **options: Any) -> ConfigFollower:
    follower = ConfigFollower(lambda method, *args: getattr(controller, method)(*args), **options)
    follower.start()
    return follower


def alter(controller: ConfigController, user: str, client_id: str | None, key: str, value: float | None) -> None:
    """Set (or, value None, remove) ``key`` of the entity ``user`` / ``client_id`` (None or ABSENT: left out;
    DEFAULT: the default entity), as AlterClientQuotas does."""
    names = (("user", user), ("client-id", client_id))
    entity = {k: None if v == DEFAULT else v for k, v in names if v not in (None, ABSENT)} or {"user": "alice"}
    [result] = controller.alter_client_quotas([ClientQuotaAlteration(entity, [(key, value)])], now_ms=NOW_MS)
    assert result.ok, result


def events_between(controller: ConfigController, start: int, stop: int) -> list[Any]:
    events: list[Any] = []
    if stop <= start:
        return events
    for base, payload in controller.read_from(start, stop - start):
        events.extend(events_of(decode_columns(payload))[start - base if base < start else 0 :])
    return events[: stop - start]


def push(follower: ConfigFollower, controller: ConfigController, start: int, stop: int, cuts: list[int]) -> None:
    """The log's events [start, stop) applied as pushes from ``start`` to each cut in turn, then to ``stop``: a
    cut below the one before makes the next push straddle what the follower has, one past its end a gap (the
    follower pulls the missing events), as the controller's pushes reach a shard."""
    events = events_between(controller, 0, stop)
    bounds = [start, *cuts, stop, start, stop]
    for a, b in itertools.pairwise(bounds):
        a, b = max(0, min(a, stop)), min(b, stop)
        if b <= a:
            continue
        payload = encode_events(events[a:b])
        follower.apply(a, decode_columns(payload), payload)


def keys_of(replica: ConfigReplica) -> tuple[int, list[str]]:
    return replica.resolve(ITEMS)


changes = st.lists(
    st.tuples(
        st.sampled_from(USERS),
        st.sampled_from(CLIENTS),
        st.sampled_from(KEYS),
        st.none() | st.integers(1, 10**6).map(float),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=changes,
    after=changes,
    cuts=st.lists(st.floats(-0.3, 1.0), max_size=8),  # where pushes end, as a fraction of the new events
    tail_events=st.just(10_000) | st.integers(1, 12),
)
@example(  # pushes of [s, s+3), then [s+1, s+6) straddling the shard's end, then a gap to [s+8, s+10)
    before=[("alice", ABSENT, "producer_byte_rate", 1.0)],
    after=[(u, c, "producer_byte_rate", 2.0) for u in ("alice", "bob") for c in ("c1", "c2", ABSENT, DEFAULT)],
    cuts=[0.375, 0.125, 0.75, 1.0],
    tail_events=10_000,
)
def test_handed_events_give_the_image_and_keys_the_controller_would(before, after, cuts, tail_events):
    with tempfile.TemporaryDirectory() as d:
        controller = ConfigController(Path(d) / "log", fsync=False)
        try:
            for change in before:
                alter(controller, *change)
            gateway = LocalReplica(controller)  # the gateway's replica stops here (its polls are late)
            reference = LocalReplica(controller)
            shard = follower_of(controller, tail_events=tail_events)
            start = controller.end_offset()
            for change in after:
                alter(controller, *change)
            end = controller.end_offset()
            push(shard, controller, start, end, [start + round(c * (end - start)) for c in cuts])
            assert shard.offset == end

            handed = shard.events_after(gateway.offset)
            calls = gateway.controller_calls
            if handed:
                assert gateway.apply_handed(handed, end)
                assert gateway.controller_calls == calls  # the controller was not asked
                assert gateway.follower.handed_events == end - start
            else:  # no change at all, or older than the tail: nothing handed, the controller is asked (as before)
                assert end == start or end - start > tail_events
                gateway.catch_up(end)
                assert gateway.controller_calls > calls or end == start
            reference.catch_up(end)
            assert gateway.offset == reference.offset == end
            assert gateway.image.client_quotas() == reference.image.client_quotas() == shard.image.client_quotas()
            assert keys_of(gateway) == keys_of(reference)
            assert gateway.max_values_in_quota_window([i for i in ITEMS if i[0] != "REQUEST"]) == (
                reference.max_values_in_quota_window([i for i in ITEMS if i[0] != "REQUEST"])
            )
        finally:
            controller._store.close()


@pytest.fixture
def log(tmp_path: Path) -> Any:
    controller = ConfigController(tmp_path / "log", fsync=False)
    yield controller
    controller._store.close()  # the controller has no close of its own: Ray kills its process


def test_a_shard_hands_over_exactly_what_it_applied_since_an_offset(log):
    alter(log, "alice", None, "producer_byte_rate", 1000.0)
    shard = follower_of(log)
    for i in range(5):
        alter(log, "bob", f"c{i}", "producer_byte_rate", 100.0 + i)
    shard.catch_up()
    end = log.end_offset()
    assert shard.events_after(end) == ()  # nothing is missing at the shard's own offset
    assert shard.events_after(end + 3) == ()  # nor past it
    for offset in range(end):
        handed = shard.events_after(offset)
        assert handed[0][0] <= offset
        events = [e for _, payload in handed for e in events_of(decode_columns(payload))]
        assert events[offset - handed[0][0] :] == events_between(log, offset, end)


def test_the_tail_is_bounded_by_events_and_bytes(log):
    shard = follower_of(log, tail_events=3)
    for i in range(6):
        alter(log, "alice", f"c{i}", "producer_byte_rate", 10.0 + i)
        shard.catch_up()  # one event at a time, as pushes come
    assert shard.events_after(2) == ()  # older than the last 3 events: the controller must be asked
    assert [base for base, _ in shard.events_after(3)] == [3, 4, 5]
    small = follower_of(log, tail_bytes=1)
    alter(log, "alice", "c9", "producer_byte_rate", 1.0)
    small.catch_up()
    assert small.events_after(small.offset - 1) == ()
    none = follower_of(log, tail_events=0)
    alter(log, "alice", "c10", "producer_byte_rate", 1.0)
    none.catch_up()
    assert none.events_after(none.offset - 1) == ()


def test_a_snapshot_jump_forgets_the_tail(tmp_path):
    log = ConfigController(tmp_path / "small", fsync=False, segment_bytes=512)  # segments roll: some are deleted
    shard = follower_of(log)
    late = follower_of(log)  # stays behind
    for i in range(20):
        alter(log, "alice", f"c{i}", "producer_byte_rate", 10.0 + i)
    log.write_snapshot()
    log.delete_segments_covered_by_snapshot()
    alter(log, "bob", None, "producer_byte_rate", 5.0)
    jumped = follower_of(log)  # started from the snapshot: it never saw the events before it
    assert jumped.snapshot_loads == 1
    assert jumped.events_after(late.offset) == ()
    shard.catch_up()  # its events were deleted: it jumps to the snapshot too
    assert shard.snapshot_loads == 1
    assert shard.events_after(late.offset) == ()
    assert shard.offset == log.end_offset()  # the controller's snapshot is its image as of now
    alter(log, "bob", "c1", "producer_byte_rate", 6.0)
    shard.catch_up()  # the tail starts again after the jump
    assert [base for base, _ in shard.events_after(shard.offset - 1)] == [shard.offset - 1]
    assert shard.events_after(shard.offset - 2) == ()
    log._store.close()


def handed_from(log: ConfigController, start: int) -> tuple[tuple[int, bytes], ...]:
    """The log's events from ``start`` as one-event batches (what a shard's tail looks like after pushes)."""
    return tuple(
        (offset, encode_events([event]))
        for offset, event in enumerate(events_between(log, start, log.end_offset()), start)
    )


@pytest.fixture
def behind(log):
    """A replica at offset 1 and the log 4 events further."""
    alter(log, "alice", None, "producer_byte_rate", 1000.0)
    replica = LocalReplica(log)
    for i in range(4):
        alter(log, "alice", f"c{i}", "producer_byte_rate", 100.0 + i)
    return replica


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda b: b[:1] + b[2:], "not where the one before ended"),  # a gap inside
        (lambda b: (b[1], b[0], *b[2:]), "not where the one before ended"),  # out of order
        (lambda b: (b[0], b[0], *b[1:]), "not where the one before ended"),  # overlapping
        (lambda b: b[:-1], "end at 4, not at the offset 5"),  # short of the shard's offset
        (lambda b: ((b[0][0], b"\xff\xff"), *b[1:]), "not an EventColumns message"),
        (lambda b: ((b[0][0], encode_events([])), *b), "holds no events"),
        (lambda b: ((-1, b[0][1]), *b[1:]), "base offset >= 0"),
        (lambda b: (list(b[0]), *b[1:]), "expected (base offset, payload)"),
        (lambda b: (), "non-empty sequence"),
    ],
)
def test_malformed_handovers_are_refused_whole(log, behind, caplog, mangle, message):
    batches = mangle(handed_from(log, 1))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        behind.follower.apply_handed(batches, 5)
    assert behind.offset == 1  # nothing of it was applied
    with caplog.at_level(logging.WARNING):
        assert not behind.apply_handed(batches, 5)
    assert "were refused" in caplog.text
    assert behind.offset == 1
    calls = behind.controller_calls
    behind.catch_up(5)  # the gateway falls back to the controller
    assert (behind.offset, behind.controller_calls) == (5, calls + 1 + 1)  # one read, one empty read


def test_a_handover_starting_past_the_replica_is_a_gap_not_applied(log, behind):
    assert not behind.apply_handed(handed_from(log, 2), 5)
    assert behind.offset == 1
    assert behind.apply_handed(handed_from(log, 1), 5)
    assert behind.offset == 5


def test_a_replica_that_moved_meanwhile_skips_what_it_has(log, behind):
    handed = handed_from(log, 1)
    behind.catch_up(3)  # a poll got some of the events first
    assert behind.offset == 5  # (the poll reads everything there is)
    keys = keys_of(behind)
    assert behind.apply_handed(handed, 5)
    assert behind.follower.handed_events == 0
    assert keys_of(behind) == keys
    # two shards at different offsets: the first one's events, then the second's (a superset) apply in turn
    alter(log, "carol", None, "producer_byte_rate", 7.0)
    alter(log, "carol", "c1", "producer_byte_rate", 8.0)
    first, second = handed_from(log, 5)[:1], handed_from(log, 5)
    assert behind.apply_handed(first, 6)
    assert behind.apply_handed(second, 7)
    assert behind.follower.handed_events == 2
    assert behind.offset == 7
    assert keys_of(behind)[1] == keys_of(LocalReplica(log))[1]
