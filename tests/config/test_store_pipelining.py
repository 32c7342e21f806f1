"""ConfigStore pipelining on real files with fsync: concurrent changes are decided in order on the working
state, share frames and fsyncs, are answered only once durable, are visible to readers only then, and all
fail together when the log fails. ``WorkingImage`` is checked against a full replay on random logs."""

from __future__ import annotations

import errno
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.config import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ConfigImage,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    EventLogFailedError,
    OpType,
    Result,
    record_entity,
)
from quotaplane.config import _log as log_module
from quotaplane.config._working_image import WorkingImage
from quotaplane.config.logformat import iter_frames
from quotaplane.v1 import config_events_pb2 as pb
from tests.support import run_threads

from .strategies import event_logs

T0 = 1_700_000_000_000
KEY = "producer_byte_rate"


def _quota(entity: dict[str, str | None], value: float | None) -> list[ClientQuotaAlteration]:
    return [ClientQuotaAlteration(entity, [(KEY, value)])]


def _described(store: ConfigStore, user: str) -> dict[str, float]:
    found = store.describe_client_quotas([ClientQuotaFilterComponent.of_entity("user", user)], strict=True)
    return found[0][1] if found else {}


def _frames(store: ConfigStore) -> list[int]:
    """Events per frame on disk (as bench/eventlog.py counts frames: the segments' own index)."""
    return [header.record_count for path in store.log.segments() for header in iter_frames(path.read_bytes())]


def _offsets_by_request(store: ConfigStore) -> dict[str, int]:
    return {event.request_id: offset for offset, event in store.log.read()}


class FsyncGate:
    """Makes the log's fsyncs wait at a gate (then fsync for real, or fail once): a round can be held
    while more changes are decided and submitted behind it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()
        self._fail = fail
        self._real = log_module._sync_data
        monkeypatch.setattr(log_module, "_sync_data", self)

    def __call__(self, fd: int) -> None:
        self.entered.set()
        assert self.open.wait(30)
        if self._fail:
            self._fail = False
            raise OSError(errno.EIO, "injected I/O error")
        self._real(fd)


def _wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.002)


def _background(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as e:  # the test inspects it
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


# --- concurrency -----------------------------------------------------------------------------------
def test_sixteen_threads_share_fsyncs_and_every_acknowledged_change_survives_reopen(tmp_path: Path) -> None:
    threads, per_thread = 16, 20
    acknowledged: dict[int, list[tuple[str, float]]] = {t: [] for t in range(threads)}
    barrier = threading.Barrier(threads)
    with ConfigStore.open(tmp_path) as store:

        def worker(t: int) -> None:
            barrier.wait()
            for j in range(per_thread):
                value = float(t * 1000 + j + 1)
                [result] = store.alter_client_quotas(
                    _quota({"user": f"user-{t}", "client-id": f"app-{j}"}, value),
                    now_ms=T0 + j,
                    request_id=f"req-{t}-{j}",
                )
                assert result.ok
                acknowledged[t].append((f"req-{t}-{j}", value))

        run_threads(worker, threads)
        total = threads * per_thread
        assert store.end_offset == store.log.end_offset == total
        frames = _frames(store)
        assert sum(frames) == total
        assert len(frames) < total  # concurrent changes shared frames, so fsyncs
        offsets = _offsets_by_request(store)
        for acks in acknowledged.values():  # each thread's changes are in the log in the order it made them
            assert [offsets[request_id] for request_id, _ in acks] == sorted(offsets[r] for r, _ in acks)
    with ConfigStore.open(tmp_path) as store:
        for t, acks in acknowledged.items():
            for j, (_, value) in enumerate(acks):
                entity = {"user": f"user-{t}", "client-id": f"app-{j}"}
                assert store.image.client_quota(entity) == {KEY: value}
        assert len(store.image.client_quotas()) == total


def test_two_threads_altering_one_key_keep_the_order_their_answers_imply(tmp_path: Path) -> None:
    per_thread = 40
    calls: list[tuple[float, float, str, float]] = []  # (started, answered, request id, value)
    lock = threading.Lock()
    with ConfigStore.open(tmp_path) as store:

        def worker(t: int) -> None:
            for j in range(per_thread):
                value, request_id = float((t + 1) * 1000 + j), f"t{t}-{j}"
                started = time.monotonic()
                [result] = store.alter_client_quotas(_quota({"user": "alice"}, value), now_ms=T0, request_id=request_id)
                answered = time.monotonic()
                assert result.ok
                # answered means durable and visible: the value is this one or a later change's
                assert (
                    _described(store, "alice") != {} and store.image.end_offset > _offsets_by_request(store)[request_id]
                )
                with lock:
                    calls.append((started, answered, request_id, value))

        run_threads(worker, 2)
        offsets = _offsets_by_request(store)
        assert len(offsets) == 2 * per_thread  # every change had a record (the values all differ)
        for a in calls:
            for b in calls:
                if a[1] < b[0]:  # a was answered before b was asked: a is before b in the log
                    assert offsets[a[2]] < offsets[b[2]]
        values = {event.request_id: event.client_quota.value for _, event in store.log.read()}
        last = max(offsets, key=offsets.__getitem__)
        assert _described(store, "alice") == {KEY: values[last]}
    with ConfigStore.open(tmp_path) as store:
        assert _described(store, "alice") == {KEY: values[last]}


def test_concurrent_appends_to_one_list_config_are_decided_in_order_and_none_is_lost(tmp_path: Path) -> None:
    """APPEND reads the current value: each change must be decided on the changes before it, durable or not."""
    topic = ConfigResource(ConfigResourceType.TOPIC, "orders")
    name = "leader.replication.throttled.replicas"
    threads, per_thread = 8, 6
    with ConfigStore.open(tmp_path) as store:

        def worker(t: int) -> None:
            for j in range(per_thread):
                op = AlterConfigOp(name, OpType.APPEND, f"{t}:{j}")
                [result] = store.incremental_alter_configs([(topic, [op])], now_ms=T0)
                assert result.ok

        run_threads(worker, threads)
        values = [event.config.value.split(",") for _, event in store.log.read()]
        assert len(values) == threads * per_thread
        for before, after in itertools.pairwise(values):
            assert after[: len(before)] == before and len(after) == len(before) + 1
        expected = {f"{t}:{j}" for t in range(threads) for j in range(per_thread)}
        assert set(store.image.configs(ConfigResourceType.TOPIC, "orders")[name].split(",")) == expected


def test_a_change_is_decided_at_once_but_visible_and_answered_only_when_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    with ConfigStore.open(tmp_path) as store:
        store.subscribe(lambda delta: seen.append(delta.offset))
        gate = FsyncGate(monkeypatch)
        first, first_outcome = _background(
            lambda: store.alter_client_quotas(_quota({"user": "alice"}, 1.0), now_ms=T0, request_id="a")
        )
        assert gate.entered.wait(30)
        # submitted and on the working state; not durable: no reader sees it, the caller has no answer
        second, second_outcome = _background(
            lambda: store.alter_client_quotas(_quota({"user": "alice"}, 2.0), now_ms=T0, request_id="b")
        )
        _wait_until(lambda: store.log._next_offset == 2)  # decided on the working state (1.0), submitted
        noop, noop_outcome = _background(
            lambda: store.alter_client_quotas(_quota({"user": "alice"}, 2.0), now_ms=T0, request_id="c")
        )
        time.sleep(0.05)
        assert _described(store, "alice") == {}
        assert store.end_offset == 0 and store.image_copy().end_offset == 0 and seen == []
        assert store.write_snapshot().name.startswith(f"{0:020d}")
        assert all(t.is_alive() for t in (first, second, noop))  # nobody is answered yet
        gate.open.set()
        for thread in (first, second, noop):
            thread.join(30)
        assert [r.ok for r in first_outcome["value"] + second_outcome["value"] + noop_outcome["value"]] == [True] * 3
        assert _described(store, "alice") == {KEY: 2.0}
        assert [event.request_id for _, event in store.log.read()] == ["a", "b"]  # "c" changed nothing
        assert seen == [0, 1]


# --- failure ---------------------------------------------------------------------------------------
def test_a_failed_fsync_fails_every_pending_change_and_the_store_refuses_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ConfigStore.open(tmp_path)
    seen: list[int] = []
    store.subscribe(lambda delta: seen.append(delta.offset))
    store.alter_client_quotas(_quota({"user": "durable"}, 1.0), now_ms=T0, request_id="durable")
    gate = FsyncGate(monkeypatch, fail=True)
    pending = [
        _background(
            lambda i=i: store.alter_client_quotas(_quota({"user": f"user-{i}"}, 2.0), now_ms=T0, request_id=f"r{i}")
        )
        for i in range(6)
    ]
    assert gate.entered.wait(30)  # one round is in its (failing) fsync, the rest queue behind it
    _wait_until(lambda: store.log._next_offset == 7)
    retry = _background(lambda: store.alter_client_quotas(_quota({"user": "user-0"}, 2.0), now_ms=T0, request_id="r0"))
    validate = _background(
        lambda: store.alter_client_quotas(_quota({"user": "user-1"}, 3.0), now_ms=T0, validate_only=True)
    )
    time.sleep(0.05)
    gate.open.set()
    for thread, outcome in [*pending, retry, validate]:
        thread.join(30)
        assert isinstance(outcome.get("error"), EventLogFailedError), outcome
    for i in range(6):
        assert _described(store, f"user-{i}") == {}
    assert store.end_offset == 1 and seen == [0]
    assert _described(store, "durable") == {KEY: 1.0}
    with pytest.raises(EventLogFailedError, match="config store takes no more changes"):
        store.alter_client_quotas(_quota({"user": "later"}, 1.0), now_ms=T0)
    with pytest.raises(EventLogFailedError, match="config store takes no more changes"):
        store.alter_client_metrics("sub", metrics="*", now_ms=T0)
    store.close()
    with ConfigStore.open(tmp_path) as store:  # the fsync works again: only the durable change is there
        assert store.end_offset == 1
        assert list(store.image.client_quotas()) == [(("user", "durable"),)]
        assert store.alter_client_quotas(_quota({"user": "later"}, 1.0), now_ms=T0)[0].ok
    with ConfigStore.open(tmp_path) as store:
        assert store.end_offset == 2 and _described(store, "later") == {KEY: 1.0}


# --- request ids -----------------------------------------------------------------------------------
def test_one_request_sent_by_sixteen_threads_at_once_is_applied_once(tmp_path: Path) -> None:
    results: list[list[Result]] = []
    barrier = threading.Barrier(16)
    with ConfigStore.open(tmp_path) as store:

        def send(_: int) -> None:
            barrier.wait()
            answer = store.alter_client_quotas(
                [
                    ClientQuotaAlteration({"user": "alice"}, [(KEY, 5.0)]),
                    ClientQuotaAlteration({"user": "bob"}, [(KEY, 6.0)]),
                ],
                now_ms=T0,
                request_id="the-request",
            )
            assert store.image.applied_request("the-request") == (0, 1)  # answered once durable
            results.append(answer)

        run_threads(send, 16)
        assert all([r.ok for r in answer] == [True, True] for answer in results)
        assert [event.request_id for _, event in store.log.read()] == ["the-request"] * 2
    with ConfigStore.open(tmp_path) as store:
        assert store.image.applied_request("the-request") == (0, 1)
        assert store.alter_client_quotas(_quota({"user": "alice"}, 9.0), now_ms=T0, request_id="the-request")[0].ok
        assert _described(store, "alice") == {KEY: 5.0} and store.end_offset == 2


def test_a_retry_of_a_pending_request_is_answered_when_the_original_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ConfigStore.open(tmp_path) as store:
        gate = FsyncGate(monkeypatch)
        original = _background(lambda: store.alter_client_quotas(_quota({"user": "a"}, 1.0), now_ms=T0, request_id="r"))
        assert gate.entered.wait(30)
        retry = _background(lambda: store.alter_client_quotas(_quota({"user": "a"}, 7.0), now_ms=T0, request_id="r"))
        time.sleep(0.05)
        assert retry[0].is_alive() and store.log._next_offset == 1  # the retry submitted nothing, and waits
        gate.open.set()
        for thread, outcome in (original, retry):
            thread.join(30)
            assert outcome["value"][0].ok
        assert _described(store, "a") == {KEY: 1.0} and store.end_offset == 1


# --- the working state against a full replay ----------------------------------------------------------
def _reads(image: ConfigImage | WorkingImage, events: list[pb.Event]) -> dict[str, object]:
    """Everything the planners and the store read of an image, for every entity and resource in ``events``."""
    out: dict[str, object] = {"end": image.end_offset, "time": image.last_commit_time_ms}
    for event in events:
        kind = event.WhichOneof("record")
        if kind == "client_quota":
            entity = record_entity(event.client_quota)
            out[f"q{entity}"] = image.client_quota(entity)
        elif kind == "client_metrics":
            out[f"m{event.client_metrics.name}"] = image.client_metrics_resource(event.client_metrics.name)
        else:
            rtype, rname = ConfigResourceType(event.config.resource_type), event.config.resource_name
            out[f"c{rtype}{rname}"] = image.configs(rtype, rname)
        out[f"r{event.request_id}"] = image.applied_request(event.request_id) if event.request_id else None
    return out


@settings(max_examples=150, deadline=None)
@given(event_logs(max_size=40), st.data())
def test_the_working_state_reads_as_the_committed_image_with_the_pending_events_applied(
    events: list[pb.Event], data: st.DataObject
) -> None:
    committed_count = data.draw(st.integers(0, len(events)))
    committed = ConfigImage()
    committed.replay(0, events[:committed_count])
    working = WorkingImage(committed)
    for offset in range(committed_count, len(events)):
        working.apply(offset, events[offset])
    reference = ConfigImage.replayed(events)
    assert _reads(working, events) == _reads(reference, events)
    # the committed image catches up in steps; the working state keeps reading the same throughout
    while committed.end_offset < len(events):
        step = data.draw(st.integers(1, len(events) - committed.end_offset))
        for offset in range(committed.end_offset, committed.end_offset + step):
            committed.apply(offset, events[offset])
        working.forget_committed()
        assert _reads(working, events) == _reads(reference, events)
    assert not working.pending
    assert (working._quotas, working._client_metrics, working._configs, working._requests) == ({}, {}, {}, {})
    working.reset()
    assert _reads(working, events) == _reads(reference, events)


def test_a_listener_that_raises_is_logged_and_the_store_stays_consistent(tmp_path: Path, caplog) -> None:
    seen: list[int] = []

    def flaky(delta: object) -> None:
        seen.append(delta.offset)  # type: ignore[attr-defined]
        if len(seen) == 1:
            raise ValueError("listener bug")

    with ConfigStore.open(tmp_path) as store:
        store.subscribe(flaky)
        assert store.alter_client_quotas(_quota({"user": "a"}, 1.0), now_ms=T0)[0].ok
        assert store.alter_client_quotas(_quota({"user": "b"}, 2.0), now_ms=T0)[0].ok
        assert seen == [0, 1] and store.end_offset == 2
        assert store.image == ConfigImage.replayed([event for _, event in store.log.read()])
    assert any("listener bug" in (r.exc_text or "") or "failed on the event" in r.getMessage() for r in caplog.records)
