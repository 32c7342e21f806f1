"""The usage checkpoint file (no Ray): framing, CRC, age, atomic replace, the writer thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from quotaplane.actors._usage_checkpoint import (
    CHECKPOINT_FILE,
    UsageCheckpointer,
    decode_checkpoint,
    encode_checkpoint,
    load_checkpoint,
    write_checkpoint,
)
from quotaplane.quota import ClientQuotaEntity, UsageSnapshot, build_quota_managers, export_usage, import_usage

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
