"""export_usage / import_usage: a manager exported mid-workload and imported into a fresh one (same config)
answers the rest of the workload exactly as the manager that never stopped."""

from __future__ import annotations

import itertools
import json
import pickle
import sys
import zlib
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.metrics import Avg, MetricName, Rate
from quotaplane.quota import (
    DEFAULT,
    TAGS_PART,
    USAGE_STATE_VERSION,
    ClientQuotaEntity,
    QuotaConfig,
    QuotaManagers,
    QuotaType,
    TagsMemo,
    UsageSnapshot,
    _compiled,
    build_quota_managers,
    export_usage,
    forget_usage,
    import_usage,
    usage_key,
)

USERS = ("alice", "bob", "carol")
CLIENTS = ("c1", "c2", "")
START_MS = 1_700_000_000_000

#: a quota entity (user, client id) with None for "not set" and "<default>" for Kafka's default entity
_entity_part = st.sampled_from([None, DEFAULT, "alice", "bob", "c1", "c2"])


def _entity(user: object, client_id: object) -> ClientQuotaEntity | None:
    if user is None and client_id is None:
        return None
    user = user if user in (None, DEFAULT, "alice", "bob") else "alice"
    client_id = client_id if client_id in (None, DEFAULT, "c1", "c2") else "c1"
    return ClientQuotaEntity(user=user, client_id=client_id)


quotas_strategy = st.lists(
    st.tuples(
        st.sampled_from([QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST]),
        _entity_part,
        _entity_part,
        st.floats(min_value=1.0, max_value=5000.0),
    ),
    min_size=1,
    max_size=4,
)

#: (kind, user, client id, value, ms since the previous operation)
op_strategy = st.tuples(
    st.sampled_from(["produce", "fetch", "unrecord", "request", "network"]),
    st.sampled_from(USERS),
    st.sampled_from(CLIENTS),
    st.integers(min_value=0, max_value=20_000),
    st.one_of(st.integers(min_value=0, max_value=300), st.integers(min_value=0, max_value=15_000)),
)


def _build(config: QuotaConfig, quotas: list[tuple[QuotaType, object, object, float]]) -> QuotaManagers:
    managers = build_quota_managers(config, now_ms=START_MS)
    for quota_type, user, client_id, bound in quotas:
        entity = _entity(user, client_id)
        if entity is not None:
            managers.client_manager(quota_type).update_quota(entity, bound)
    return managers


def _run(managers: QuotaManagers, op: tuple[str, str, str, int, int], now_ms: int) -> int:
    kind, user, client_id, value, _ = op
    if kind == "produce":
        return managers.produce.record_batch([(user, client_id, float(value), now_ms)], now_ms)[0]
    if kind == "fetch":
        return managers.fetch.maybe_record_and_get_throttle_time_ms(user, client_id, float(value), now_ms)
    if kind == "unrecord":
        managers.fetch.unrecord_quota_sensor(user, client_id, float(value) / 3, now_ms)
        return 0
    if kind == "request":
        return managers.request.maybe_record_request_time(
            user, client_id, request_thread_time_nanos=value * 50_000, now_ms=now_ms
        )
    managers.request.record_network_thread_time(user, client_id, time_nanos=value * 10_000, now_ms=now_ms)
    return 0


@settings(max_examples=150, deadline=None)
@given(
    quotas=quotas_strategy,
    ops=st.lists(op_strategy, min_size=1, max_size=60),
    split=st.integers(min_value=0, max_value=60),
    window=st.sampled_from([(11, 1), (3, 2), (2, 1)]),
    through_bytes=st.booleans(),
)
def test_export_import_continues_exactly(
    quotas: list[tuple[QuotaType, object, object, float]],
    ops: list[tuple[str, str, str, int, int]],
    split: int,
    window: tuple[int, int],
    through_bytes: bool,
) -> None:
    config = QuotaConfig(quota_window_num=window[0], quota_window_size_seconds=window[1])
    split = min(split, len(ops))
    times = []
    now = START_MS
    for op in ops:
        now += op[4]
        times.append(now)

    reference = _build(config, quotas)
    expected = [_run(reference, op, t) for op, t in zip(ops, times, strict=True)]

    first = _build(config, quotas)
    got = [_run(first, op, t) for op, t in zip(ops[:split], times[:split], strict=True)]
    state = export_usage(first)
    if through_bytes:
        state = UsageSnapshot.from_bytes(state.to_bytes())
    restart_ms = times[split - 1] if split else START_MS
    second = _build(config, quotas)
    import_usage(second, state, restart_ms)
    got += [_run(second, op, t) for op, t in zip(ops[split:], times[split:], strict=True)]

    assert got == expected
    assert export_usage(second) == export_usage(reference)


def test_without_import_a_restart_forgets_the_usage() -> None:
    """The point of the checkpoint: a fresh manager admits what the exported one throttles."""
    config = QuotaConfig()
    quotas = [(QuotaType.PRODUCE, "alice", None, 1000.0)]
    first = _build(config, quotas)
    assert first.produce.record_batch([("alice", "c1", 9_000.0)], START_MS) == [0]
    state = export_usage(first)
    restored, fresh = _build(config, quotas), _build(config, quotas)
    counts = import_usage(restored, state, START_MS + 500)
    assert counts["Produce"] == 1 and counts["skipped"] == 0
    assert restored.produce.record_batch([("alice", "c1", 1000.0)], START_MS + 500) == [
        first.produce.record_batch([("alice", "c1", 1000.0)], START_MS + 500)[0]
    ]
    assert restored.produce.record_batch([("alice", "c1", 1000.0)], START_MS + 600)[0] > 0
    assert fresh.produce.record_batch([("alice", "c1", 1000.0)], START_MS + 500) == [0]


def test_import_takes_the_current_quota() -> None:
    """Quotas come from the log, not the checkpoint: a sensor restored after a quota change has the new bound."""
    first = _build(QuotaConfig(), [(QuotaType.PRODUCE, "alice", None, 1000.0)])
    first.produce.record_batch([("alice", "c1", 15_000.0)], START_MS)
    second = _build(QuotaConfig(), [(QuotaType.PRODUCE, "alice", None, 99_000.0)])
    import_usage(second, export_usage(first), START_MS)
    assert second.produce.quota("alice", "c1").bound == 99_000.0
    assert second.produce.record_batch([("alice", "c1", 1.0)], START_MS + 1) == [0]
    assert first.produce.record_batch([("alice", "c1", 1.0)], START_MS + 1)[0] > 0


def test_changed_windows_are_skipped() -> None:
    first = _build(QuotaConfig(), [(QuotaType.PRODUCE, "alice", None, 1000.0)])
    first.produce.record_batch([("alice", "c1", 5000.0)], START_MS)
    second = _build(QuotaConfig(quota_window_num=5), [(QuotaType.PRODUCE, "alice", None, 1000.0)])
    counts = import_usage(second, export_usage(first), START_MS)
    assert counts["Produce"] == 0 and counts["skipped"] == 1
    assert second.metrics.get_sensor("Produce-alice:") is None


def _recorded() -> UsageSnapshot:
    first = _build(QuotaConfig(), [(QuotaType.PRODUCE, "alice", None, 1000.0)])
    first.produce.record_batch([("alice", "c1", 5000.0), ("alice", "c1", 7.0, START_MS + 1500)], START_MS)
    first.fetch.record_batch([("bob", "c1", 5000.0)], START_MS)
    return export_usage(first)


def _set(column: str, index: int, value: int) -> object:
    def mutate(snapshot: UsageSnapshot) -> None:
        getattr(snapshot.managers["Produce"], column)[index] = value

    return mutate


@pytest.mark.parametrize(
    "mutate",
    [
        _set("currents", 0, 2),  # outside its two samples
        _set("currents", 0, -1),
        _set("sizes", 0, 3),  # more samples than the columns hold
        _set("sizes", 0, 13),  # more than samples + 1 slots
        lambda s: s.managers["Produce"].starts.append(1),
        lambda s: s.managers["Fetch"].names.append(s.managers["Produce"].names[0]),
    ],
)
def test_a_bad_snapshot_raises_and_changes_nothing(mutate: object) -> None:
    snapshot = _recorded()
    mutate(snapshot)  # type: ignore[operator]
    second = _build(QuotaConfig(), [(QuotaType.PRODUCE, "alice", None, 1000.0)])
    before = export_usage(second)
    with pytest.raises(ValueError):
        import_usage(second, snapshot, START_MS)
    with pytest.raises(ValueError):
        UsageSnapshot.from_bytes(snapshot.to_bytes())
    assert export_usage(second) == before


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1],  # cut short
        lambda b: b + b"\x00",  # trailing bytes
        lambda b: b[:2],
        lambda b: b"\x00\x00\x00\x02{}",  # a header of no version
        lambda b: b.replace(f'"version":{USAGE_STATE_VERSION}'.encode(), b'"version":99'),
        lambda b: b.replace(b'"samples":11', b'"samples":"x"'),
        lambda b: b.replace(b'"total":', b'"tutal":'),
    ],
)
def test_damaged_bytes_are_refused(damage: object) -> None:
    with pytest.raises(ValueError):
        UsageSnapshot.from_bytes(damage(_recorded().to_bytes()))  # type: ignore[operator]


def test_bytes_of_the_other_byte_order_read_the_same() -> None:
    snapshot = _recorded()
    data = snapshot.to_bytes()
    other = "big" if sys.byteorder == "little" else "little"
    length = int.from_bytes(data[:4], "big")
    header = data[4 : 4 + length].replace(f'"byteorder":"{sys.byteorder}"'.encode(), f'"byteorder":"{other}"'.encode())
    swapped = []
    at = 4 + length
    for c in snapshot.managers.values():
        for column in ("last_records", "currents", "sizes", "starts", "lasts", "counts", "values"):
            values = array(getattr(c, column).typecode, getattr(c, column))
            values.byteswap()
            swapped.append(values.tobytes())
            at += len(values.tobytes())
    assert at == len(data)
    foreign = len(header).to_bytes(4, "big") + header + b"".join(swapped)
    assert UsageSnapshot.from_bytes(foreign) == snapshot


def test_export_is_a_copy() -> None:
    managers = _build(QuotaConfig(), [(QuotaType.PRODUCE, "alice", None, 1000.0)])
    managers.produce.record_batch([("alice", "c1", 5.0)], START_MS)
    snapshot = export_usage(managers)
    managers.produce.record_batch([("alice", "c1", 5.0)], START_MS + 1)
    produce = snapshot.managers["Produce"]
    assert [name.tags for name in produce.names] == [{"user": "alice", "client-id": ""}]
    assert list(produce.values) == [5.0] and list(produce.counts) == [1]


_KIND_TYPES = {
    "produce": QuotaType.PRODUCE,
    "fetch": QuotaType.FETCH,
    "unrecord": QuotaType.FETCH,
    "request": QuotaType.REQUEST,
    "network": QuotaType.REQUEST,
}


def _routing_key(managers: QuotaManagers, op: tuple[str, str, str, int, int]) -> str:
    """The key a gateway routes the op by: its quota type and the metric tags it resolves to."""
    quota_type = _KIND_TYPES[op[0]]
    return usage_key(quota_type, managers.client_manager(quota_type).quota_metric(op[1], op[2]).tags)


@settings(max_examples=150, deadline=None)
@given(
    quotas=quotas_strategy,
    ops=st.lists(op_strategy, min_size=1, max_size=60),
    split=st.integers(min_value=0, max_value=60),
    seed=st.integers(min_value=0, max_value=7),
    through_pickle=st.booleans(),
)
def test_a_hand_over_of_some_keys_continues_exactly(
    quotas: list[tuple[QuotaType, object, object, float]],
    ops: list[tuple[str, str, str, int, int]],
    split: int,
    seed: int,
    through_pickle: bool,
) -> None:
    """A reshard: at the split the giver exports the sensors of the keys a new owner wins, forgets them, and
    the receiver imports them; each op then goes to its key's owner. Every answer, and every sensor's windows,
    are those of one manager that served everything."""
    config = QuotaConfig()
    split = min(split, len(ops))
    times = list(itertools.accumulate((op[4] for op in ops), initial=START_MS))[1:]

    def owns(key: str) -> bool:
        return zlib.crc32(key.encode()) % 8 < seed

    reference = _build(config, quotas)
    expected = [_run(reference, op, t) for op, t in zip(ops, times, strict=True)]

    giver, receiver = _build(config, quotas), _build(config, quotas)
    got = [_run(giver, op, t) for op, t in zip(ops[:split], times[:split], strict=True)]
    moved = export_usage(giver, owns)
    assert all(
        owns(usage_key(QuotaType.parse(kind), name.tags)) for kind, c in moved.managers.items() for name in c.names
    )
    if through_pickle:
        moved = pickle.loads(pickle.dumps(moved, protocol=5))
    forget_usage(giver, moved)
    assert export_usage(giver, owns) == export_usage(receiver, owns)  # nothing owned is left behind
    import_usage(receiver, moved, times[split - 1] if split else START_MS)
    for op, t in zip(ops[split:], times[split:], strict=True):
        got.append(_run(receiver if owns(_routing_key(reference, op)) else giver, op, t))

    assert got == expected
    kept = export_usage(giver, lambda key: not owns(key))
    assert export_usage(receiver, owns) == export_usage(reference, owns)
    assert kept == export_usage(reference, lambda key: not owns(key))


def test_forget_removes_every_sensor_of_a_moved_client() -> None:
    managers = _build(QuotaConfig(client_quota_value_metric_enable=True), [(QuotaType.PRODUCE, "alice", None, 10.0)])
    managers.produce.record_batch([("alice", "c1", 5000.0), ("bob", "c1", 1.0)], START_MS)
    managers.produce.throttle("alice", "c1", 100, START_MS)
    moved = export_usage(managers, lambda key: key == usage_key(QuotaType.PRODUCE, {"user": "alice", "client-id": ""}))
    assert [name.tags for name in moved.managers["Produce"].names] == [{"user": "alice", "client-id": ""}]
    assert forget_usage(managers, moved) == 1
    names = set(managers.metrics.sensors)
    assert not {"Produce-alice:", "ProduceThrottleTime-alice:", "ProduceQuotaValue-alice:"} & names
    assert "Produce-bob:" in names  # the other client stays (its tags resolve at the user level)
    # the manager's caches follow: alice starts over with an empty window
    assert managers.produce.record_batch([("alice", "c1", 1.0)], START_MS + 1) == [0]


class _CountingHold:
    """A ``hold`` for ``export_usage`` that counts its entries and runs ``between`` (a recording, a removal)
    after the first entry: what a shard serves between the parts of a checkpoint's copy."""

    def __init__(self, between: Callable[[], object] = lambda: None) -> None:
        self.entries = 0
        self.between = between

    @contextmanager
    def __call__(self) -> Iterator[None]:
        if self.entries == 1:
            self.between()
        self.entries += 1
        yield


@settings(max_examples=60, deadline=None)
@given(clients=st.integers(min_value=0, max_value=40), part=st.integers(min_value=1, max_value=50))
def test_an_export_in_parts_equals_the_whole_copy(clients: int, part: int) -> None:
    """With nothing served between the parts, a copy taken a part at a time is the one-cut copy, and the hold
    was entered once for the list and once per part of the registry's sensors."""
    managers = _build(QuotaConfig(), [(QuotaType.PRODUCE, DEFAULT, None, 1000.0)])
    managers.produce.record_batch([(f"u{i}", "c", 10.0 * i) for i in range(clients)], START_MS)
    managers.fetch.record_batch([(f"u{i}", "c", 1.0) for i in range(0, clients, 3)], START_MS + 7)
    hold = _CountingHold()
    assert export_usage(managers, hold=hold, part=part) == export_usage(managers)
    assert hold.entries == 1 + -(-len(managers.metrics.sensors) // part)
    with pytest.raises(ValueError, match="part must be >= 1"):
        export_usage(managers, hold=hold, part=0)


def test_a_sensor_removed_between_the_parts_is_not_copied_and_a_recording_between_them_is_whole() -> None:
    managers = _build(QuotaConfig(), [(QuotaType.PRODUCE, DEFAULT, None, 1000.0)])
    managers.produce.record_batch([("alice", "c", 5.0), ("bob", "c", 6.0), ("carol", "c", 7.0)], START_MS)

    def served_meanwhile() -> None:
        forget_usage(managers, export_usage(managers, lambda key: "bob" in key))
        managers.produce.record_batch([("alice", "c", 100.0), ("carol", "c", 200.0)], START_MS + 1)

    snapshot = export_usage(managers, hold=_CountingHold(served_meanwhile), part=1)
    produce = snapshot.managers["Produce"]
    assert [name.tags["user"] for name in produce.names] == ["alice", "carol"]
    assert list(produce.values) == [105.0, 207.0]  # each sensor's samples as they were when it was copied
    assert snapshot == export_usage(managers)


def _header_in_one_dumps(snapshot: UsageSnapshot) -> bytes:
    """The header as one ``json.dumps`` of it writes it (the format spelled out)."""
    header = {
        "version": USAGE_STATE_VERSION,
        "byteorder": sys.byteorder,
        "managers": [
            {
                "kind": kind,
                "samples": c.samples,
                "window_ms": c.window_ms,
                "metric": [c.names[0].name, c.names[0].group] if c.names else None,
                "tags": [[list(pair) for pair in name.tag_items] for name in c.names],
                "total": len(c.starts),
            }
            for kind, c in snapshot.managers.items()
        ],
    }
    return json.dumps(header, separators=(",", ":")).encode()


@pytest.mark.parametrize(("produce", "fetch"), [(0, 0), (1, 0), (TAGS_PART, 1), (2 * TAGS_PART + 1, TAGS_PART + 1)])
def test_the_bytes_encoded_with_pauses_between_the_tags_parts_are_the_same(produce: int, fetch: int) -> None:
    """A checkpoint encodes the header's tags a part at a time and lets the shard serve between the parts; the
    bytes are the same, and the pause runs once between every two parts of a manager's sensors."""
    managers = _build(QuotaConfig(), [(QuotaType.PRODUCE, DEFAULT, None, 1000.0)])
    managers.produce.record_batch([(f"u{i}", "c", 10.0 * i) for i in range(produce)], START_MS)
    managers.fetch.record_batch([(f"u{i}", f"c{i}", 1.0) for i in range(fetch)], START_MS + 7)
    snapshot = export_usage(managers)
    pauses: list[int] = []
    with_pauses = snapshot.to_bytes(lambda: pauses.append(1))
    assert with_pauses == snapshot.to_bytes()
    header = _header_in_one_dumps(snapshot)
    assert with_pauses[:4] == len(header).to_bytes(4, "big") and with_pauses[4 : 4 + len(header)] == header
    assert len(pauses) == sum(max(0, -(-n // TAGS_PART) - 1) for n in (produce, fetch))
    assert UsageSnapshot.from_bytes(with_pauses) == snapshot


# --- the compiled copy against the reference ----------------------------------------------------------------------
def _reference_export(managers: QuotaManagers, **kwargs: Any) -> UsageSnapshot:
    with mock.patch.object(_compiled, "record_compiled", None):
        return export_usage(managers, **kwargs)


@settings(max_examples=120, deadline=None)
@given(
    quotas=quotas_strategy,
    ops=st.lists(op_strategy, max_size=60),
    part=st.one_of(st.none(), st.integers(min_value=1, max_value=40)),
)
def test_the_compiled_copy_equals_the_reference(
    quotas: list[tuple[QuotaType, object, object, float]], ops: list[tuple[str, str, str, int, int]], part: int | None
) -> None:
    """A checkpoint's copy runs compiled (``copy_quota_sensors``); on the same sensors, whole or in parts, it
    copies exactly what the pure ``_copy_sensors`` copies (names, times, current indexes, every sample)."""
    assert _compiled.record_compiled is not None, "the compiled core is not built"
    managers = _build(QuotaConfig(), quotas)
    now = START_MS
    for op in ops:
        now += op[4]
        _run(managers, op, now)
    compiled = export_usage(managers, hold=_CountingHold(), part=part)
    assert compiled == _reference_export(managers, hold=_CountingHold(), part=part)
    assert compiled == export_usage(managers) == _reference_export(managers)


def _odd_sensor(managers: QuotaManagers, user: str, *stats: object) -> None:
    """A sensor in the produce managers' name space that the managers would not build: ``stats`` as its metrics,
    the first named as the quota metric."""
    sensor = managers.metrics.sensor(f"Produce-{user}:", now_ms=START_MS)
    for index, stat in enumerate(stats):
        name = managers.produce.quota_metric_name if index == 0 else f"other-{index}"
        sensor.add(MetricName(name, "Produce", "", {"user": user, "client-id": ""}), stat)
    sensor.record(7.0, START_MS + 3)


def test_sensors_of_another_shape_are_copied_by_the_reference_and_nothing_twice() -> None:
    """What the C copy cannot take exactly (an int among the float samples, a metric that is not a Rate over a
    WindowedSum after one it had already appended) goes whole to the reference: the snapshot is the reference's,
    with no sensor's samples appended twice."""
    managers = _build(QuotaConfig(), [(QuotaType.PRODUCE, DEFAULT, None, 1000.0)])
    managers.produce.record_batch([("alice", "c", 5.0), ("bob", "c", 6.0)], START_MS)
    _odd_sensor(managers, "int-sample", Rate())
    int_sample = managers.metrics.get_sensor("Produce-int-sample:")
    next(iter(int_sample.metrics)).stat.stat._values[0] = 7  # an int where the managers keep floats
    _odd_sensor(managers, "rate-then-avg", Rate(), Rate(Avg()))
    _odd_sensor(managers, "not-a-rate", Avg())
    snapshot = export_usage(managers)
    assert snapshot == _reference_export(managers)
    produce = snapshot.managers["Produce"]
    assert [name.tags["user"] for name in produce.names] == ["alice", "bob", "int-sample", "rate-then-avg"]
    assert len(produce.starts) == sum(produce.sizes)
    assert produce.values[sum(produce.sizes[:2])] == 7.0  # the int sample, as the reference's fromlist takes it


def test_a_time_no_c_long_holds_raises_as_in_the_reference() -> None:
    managers = _build(QuotaConfig(), [(QuotaType.PRODUCE, DEFAULT, None, 1000.0)])
    managers.produce.record_batch([("alice", "c", 5.0)], START_MS)
    stat = next(iter(managers.metrics.get_sensor("Produce-alice:").metrics)).stat.stat
    stat._starts[0] = 2**63
    with pytest.raises(OverflowError):
        _reference_export(managers)
    with pytest.raises(OverflowError):
        export_usage(managers)


# --- the tags' JSON kept between checkpoints ---------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    rounds=st.lists(st.tuples(st.sets(st.integers(0, 30)), st.sets(st.integers(0, 30))), min_size=1, max_size=4),
    odd=st.text(max_size=6),
)
def test_chunks_with_the_tags_memo_are_the_bytes(rounds: list[tuple[set[int], set[int]]], odd: str) -> None:
    """Snapshot after snapshot, with sensors added and removed between them, ``to_chunks`` with a ``TagsMemo``
    joins to ``to_bytes``' bytes (tags of any text, quotes and non-ASCII included), and the memo then holds
    exactly the last snapshot's sensors."""
    quotas = [(QuotaType.PRODUCE, DEFAULT, None, 1000.0), (QuotaType.FETCH, None, DEFAULT, 1000.0)]
    managers = _build(QuotaConfig(), quotas)  # produce sensors by user, fetch sensors by client id
    memo = TagsMemo()
    now = START_MS
    for produce, fetch in rounds:
        for sensor in list(managers.metrics.sensors):
            managers.metrics.remove_sensor(sensor)
        now += 1
        managers.produce.record_batch([(f"u{i}{odd}", "c", 1.0) for i in sorted(produce)], now)
        managers.fetch.record_batch([(f"u{i}", f'c{i}"{odd}\\', 1.0) for i in sorted(fetch)], now)
        snapshot = export_usage(managers)
        chunks = snapshot.to_chunks(lambda: None, memo)
        assert b"".join(chunks) == snapshot.to_bytes()
        assert len(memo) == len(produce) + len(fetch)
        assert UsageSnapshot.from_bytes(b"".join(chunks)) == snapshot


def test_the_memo_pauses_per_part_of_tags_encoded_and_per_larger_part_of_tags_kept() -> None:
    managers = _build(QuotaConfig(), [(QuotaType.PRODUCE, DEFAULT, None, 1000.0)])
    managers.produce.record_batch([(f"u{i}", "c", 1.0) for i in range(2 * TAGS_PART)], START_MS)
    snapshot = export_usage(managers)
    memo = TagsMemo()
    pauses: list[int] = []
    snapshot.to_chunks(lambda: pauses.append(1), memo)
    assert len(pauses) == 2  # after each TAGS_PART encoded anew
    pauses.clear()
    snapshot.to_chunks(lambda: pauses.append(1), memo)
    assert pauses == []  # 2 * TAGS_PART kept: fewer than KEPT_PART
    assert TagsMemo.KEPT_PART > 2 * TAGS_PART
