"""The ConfigController under concurrent admin writes: they share fsyncs, each is answered once durable,
and every committed event is pushed to the subscribers once, in order, whoever pushes it."""

from __future__ import annotations

import inspect
import itertools
import threading
from pathlib import Path
from typing import Any

import pytest
import ray

from quotaplane.actors import controller as controller_module
from quotaplane.actors import start_controller
from quotaplane.actors.controller import DEFAULT_MAX_CONCURRENCY, ConfigController
from quotaplane.config import ClientQuotaAlteration, decode_columns
from quotaplane.config.logformat import iter_frames
from tests.support import run_threads

NOW = 1_700_000_000_000
_names = itertools.count()


def _frames(data_dir: Path) -> list[int]:
    return [h.record_count for path in sorted(data_dir.glob("*.log")) for h in iter_frames(path.read_bytes())]


def _alteration(t: int, j: int) -> list[ClientQuotaAlteration]:
    return [ClientQuotaAlteration({"user": f"user-{t}", "client-id": f"app-{j}"}, [("producer_byte_rate", 1e6 + j)])]


class _Method:
    def __init__(self, calls: list[tuple[Any, ...]], name: str, lock: threading.Lock) -> None:
        self._calls, self._name, self._lock = calls, name, lock

    def remote(self, *args: Any) -> None:
        with self._lock:
            self._calls.append((self._name, *args))


class RecordingShard:
    """What the controller pushes to a subscribed shard (``apply_batch`` / ``notify_end_offset``), kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        lock = threading.Lock()
        self.apply_batch = _Method(self.calls, "apply_batch", lock)
        self.notify_end_offset = _Method(self.calls, "notify_end_offset", lock)


def test_sixteen_concurrent_writes_share_fsyncs_and_each_event_is_pushed_once_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "log"
    controller = ConfigController(data_dir)
    shard = RecordingShard()
    try:
        assert controller.subscribe(shard, 0) == 0
        durable_when_pushed: list[bool] = []
        real_read = controller._read

        def read(from_offset: int, to_offset: int) -> list[tuple[int, bytes]]:
            # the controller pushes only what the committed image holds, which only ever is durable
            durable_when_pushed.append(to_offset <= controller._store.log.end_offset)
            return real_read(from_offset, to_offset)

        monkeypatch.setattr(controller, "_read", read)
        threads, per_thread = 16, 10
        barrier = threading.Barrier(threads)

        def writer(t: int) -> None:
            barrier.wait()
            for j in range(per_thread):
                [result] = controller.alter_client_quotas(_alteration(t, j), request_id=f"r-{t}-{j}")
                assert result.ok

        run_threads(writer, threads)
        total = threads * per_thread
        assert controller.end_offset() == total
        assert len(_frames(data_dir)) < total  # fsyncs were shared
        assert all(durable_when_pushed)
        # every event pushed exactly once, in offset order (a writer that found a push under way left
        # its events to that push)
        pushed = [(call[1], len(decode_columns(call[2]).kind)) for call in shard.calls if call[0] == "apply_batch"]
        offsets = [base + i for base, n in pushed for i in range(n)]
        assert offsets == list(range(total))
    finally:
        controller._store.close()


def test_a_write_answered_while_another_thread_pushes_leaves_its_events_to_that_push(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller = ConfigController(tmp_path / "log")
    shard = RecordingShard()
    try:
        controller.subscribe(shard, 0)
        entered, release = threading.Event(), threading.Event()
        real_read = controller._read

        def slow_first_read(from_offset: int, to_offset: int) -> list[tuple[int, bytes]]:
            if not entered.is_set():
                entered.set()
                assert release.wait(30)
            return real_read(from_offset, to_offset)

        monkeypatch.setattr(controller, "_read", slow_first_read)
        pusher = threading.Thread(target=lambda: controller.alter_client_quotas(_alteration(0, 0)))
        pusher.start()
        assert entered.wait(30)  # the first write is durable, answered but for its push, which is under way
        other = threading.Thread(target=lambda: controller.alter_client_quotas(_alteration(1, 0)))
        other.start()
        other.join(30)
        assert not other.is_alive()  # answered without waiting for the push in progress
        release.set()
        pusher.join(30)
        pushed = [(call[1], len(decode_columns(call[2]).kind)) for call in shard.calls if call[0] == "apply_batch"]
        assert [base + i for base, n in pushed for i in range(n)] == [0, 1]  # the pusher pushed the other's too
    finally:
        controller._store.close()


def test_the_actor_takes_enough_concurrent_calls_for_writes_to_share_fsyncs() -> None:
    assert DEFAULT_MAX_CONCURRENCY >= 16
    default = inspect.signature(controller_module.start_controller).parameters["max_concurrency"].default
    assert default == DEFAULT_MAX_CONCURRENCY


@pytest.mark.usefixtures("ray_cluster")
def test_concurrent_remote_writes_are_all_durable_and_share_frames(data_dir: Path) -> None:
    controller = start_controller(data_dir, name=f"pipelining-{next(_names)}")
    try:
        refs = [controller.alter_client_quotas.remote(_alteration(t, 0), now_ms=NOW) for t in range(32)]
        assert all(result.ok for results in ray.get(refs) for result in results)
        assert ray.get(controller.end_offset.remote()) == 32
        frames = _frames(data_dir)
        assert sum(frames) == 32 and len(frames) < 32
    finally:
        ray.kill(controller, no_restart=True)
