"""The usage checkpoint file (no Ray): framing, CRC, age, atomic replace, the writer thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from quotaplane.actors import _usage_checkpoint as checkpoint
from quotaplane.actors._usage_checkpoint import (
    CHECKPOINT_FILE,
    UsageCheckpointer,
    decode_checkpoint,
    encode_checkpoint,
    load_checkpoint,
    write_checkpoint,
)
from quotaplane.quota import (
    ClientQuotaEntity,
    TagsMemo,
    UsageSnapshot,
    build_quota_managers,
    export_usage,
    import_usage,
)

NOW = 1_700_000_000_000


def _state() -> UsageSnapshot:
    managers = build_quota_managers()
    managers.produce.update_quota(ClientQuotaEntity(user="alice"), 1000.0)
    managers.produce.record_batch([("alice", "c", 0.1 + 0.2, NOW), ("alice", "c", 1e-300, NOW + 1500)], NOW)
    return export_usage(managers)


def test_round_trip_is_exact() -> None:
    state = _state()
    written_ms, payload = decode_checkpoint(encode_checkpoint(state.to_bytes(), NOW))
    decoded = UsageSnapshot.from_bytes(payload)
    assert written_ms == NOW and decoded == state
    restored = build_quota_managers()
    restored.produce.update_quota(ClientQuotaEntity(user="alice"), 1000.0)
    import_usage(restored, decoded, NOW)
    assert export_usage(restored) == state


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:10],  # shorter than the header
        lambda b: b"XXXX" + b[4:],  # magic
        lambda b: b[:4] + b"\x00\x09" + b[6:],  # format version
        lambda b: b[:-1],  # truncated payload
        lambda b: b[:-2] + bytes([b[-2] ^ 1]) + b[-1:],  # one bit flipped: CRC
    ],
)
def test_a_damaged_file_is_refused(damage: object) -> None:
    data = encode_checkpoint(_state().to_bytes(), NOW)
    with pytest.raises(ValueError):
        decode_checkpoint(damage(data))  # type: ignore[operator]


def test_load_ignores_missing_old_and_corrupt_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / CHECKPOINT_FILE
    assert load_checkpoint(path, NOW, 11_000) is None
    write_checkpoint(path, encode_checkpoint(_state().to_bytes(), NOW))
    age, state = load_checkpoint(path, NOW + 700, 11_000)  # type: ignore[misc]
    assert age == 700 and state == _state()
    assert load_checkpoint(path, NOW + 11_000, 11_000) is None  # every sample obsolete by now
    path.write_bytes(b"garbage" * 10)
    assert load_checkpoint(path, NOW, 11_000) is None
    write_checkpoint(path, encode_checkpoint(b"an intact frame around a payload that is no snapshot", NOW))
    assert load_checkpoint(path, NOW, 11_000) is None
    assert "ignored" in caplog.text


def test_write_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "sub" / CHECKPOINT_FILE
    write_checkpoint(path, b"one")
    write_checkpoint(path, b"two", fsync=True)
    assert path.read_bytes() == b"two"
    assert [p.name for p in path.parent.iterdir()] == [CHECKPOINT_FILE]  # no temporary left behind


def test_the_thread_writes_every_interval_and_copies_each_part_under_the_lock(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    lock = threading.RLock()
    held = []

    def export(hold: Callable[[], Any]) -> UsageSnapshot:
        held.append(lock._is_owned())  # type: ignore[attr-defined]
        with hold():  # each part of the copy is taken under the lock, and only those
            held.append(lock._is_owned())  # type: ignore[attr-defined]
        held.append(lock._is_owned())  # type: ignore[attr-defined]
        return _state()

    writer = UsageCheckpointer(path, export, UsageSnapshot.to_bytes, lock, lambda: NOW, interval_s=0.05)
    writer.start()
    deadline = time.monotonic() + 10
    while writer.writes < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    with lock:  # a stop from a thread that holds the lock (the shard's close) does not wait for the thread
        writer.stop()
    assert writer.writes >= 3 and held[:3] == [False, True, False]
    assert writer.last_longest_hold_ms > 0.0 and "last_longest_hold_ms" in writer.stats()  # the hold was timed
    assert decode_checkpoint(path.read_bytes()) == (NOW, _state().to_bytes())
    assert writer.stats()["last_bytes"] == path.stat().st_size


def test_a_checkpoint_written_from_chunks_is_the_one_written_from_bytes(tmp_path: Path) -> None:
    """The shard's checkpointer hands the writer the snapshot's chunks (views of its arrays, the tags kept in a
    ``TagsMemo``): the file, its header's length and CRC included, is byte for byte the one of the joined bytes."""
    state = _state()
    chunks = checkpoint.checkpoint_chunks(state.to_chunks(None, TagsMemo()), NOW)
    assert any(isinstance(chunk, memoryview) for chunk in chunks)  # the columns are not copied
    assert b"".join(chunks) == encode_checkpoint(state.to_bytes(), NOW)
    path = tmp_path / CHECKPOINT_FILE
    memo = TagsMemo()
    writer = UsageCheckpointer(
        path, lambda hold: state, lambda s, pause: s.to_chunks(pause, memo), threading.Lock(), lambda: NOW
    )
    for _ in range(2):  # the second one from the memo
        writer.write_now()
        assert path.read_bytes() == encode_checkpoint(state.to_bytes(), NOW)
        assert writer.last_bytes == path.stat().st_size
    assert len(memo) == 1


def test_a_failing_write_is_counted_and_the_thread_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    writer = UsageCheckpointer(
        blocker / CHECKPOINT_FILE,
        lambda hold: _state(),
        UsageSnapshot.to_bytes,
        threading.RLock(),
        lambda: NOW,
        interval_s=0.02,
    )
    writer.start()
    deadline = time.monotonic() + 10
    while writer.failures < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    writer.stop(final=False)
    assert writer.failures >= 2 and writer.writes == 0


def test_a_server_waiting_for_the_lock_goes_between_two_parts_of_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPython's locks are not fair: without the hand-over the writer, holding the GIL, takes the lock back for
    its next part before the woken server runs, and a batch waits for the whole copy."""
    monkeypatch.setattr(checkpoint, "HANDOFF_S", 0.05)  # ample for the woken thread, even on a loaded machine
    lock = threading.RLock()
    order: list[str] = []
    server_started = threading.Event()

    def serve() -> None:
        server_started.set()
        with lock:
            order.append("served")

    def export(hold: Callable[[], Any]) -> UsageSnapshot:
        with hold():
            order.append("part 1")
            server = threading.Thread(target=serve)
            server.start()
            server_started.wait()
            time.sleep(0.05)  # the server is blocked on the lock by now
        with hold():
            order.append("part 2")
        server.join()
        return _state()

    handed: list[Any] = []

    def to_bytes(snapshot: UsageSnapshot, pause: Callable[[], None]) -> bytes:
        handed.append(pause)
        return snapshot.to_bytes(pause)

    UsageCheckpointer(tmp_path / CHECKPOINT_FILE, export, to_bytes, lock, lambda: NOW).write_now()
    assert order == ["part 1", "served", "part 2"]
    assert handed == [checkpoint.hand_over]  # the encoding pauses between its parts too


class _Waits:
    """The writer thread's ``_stop``: records how long each wait was to be, and stops it at the third."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        return len(self.timeouts) == 3

    def is_set(self) -> bool:
        return False


def test_the_interval_runs_from_one_checkpoint_start_to_the_next(tmp_path: Path) -> None:
    """A checkpoint that serves between its parts takes a fair part of its interval; the next one starts one
    interval after it started, so what a restart forgives stays bounded by the interval."""

    def slow_export(hold: Callable[[], Any]) -> UsageSnapshot:
        time.sleep(0.2)
        return _state()

    writer = UsageCheckpointer(
        tmp_path / CHECKPOINT_FILE, slow_export, UsageSnapshot.to_bytes, threading.RLock(), lambda: NOW, interval_s=1.0
    )
    writer._stop = _Waits()  # type: ignore[assignment]
    writer._run()
    first, second, third = writer._stop.timeouts  # type: ignore[attr-defined]
    assert first == 1.0 and 0.0 <= second <= 0.8 and 0.0 <= third <= 0.8 and writer.writes == 2
