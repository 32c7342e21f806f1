"""The ConfigController (in process) when its log fails, and on a log that starts at a snapshot: a failed
write or fsync shows in ``health()`` / ``info()``; a snapshot-only directory serves shards from the
snapshot's end offset (reads, catch-ups, pushes)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from quotaplane.actors.controller import ConfigController
from quotaplane.config import ClientQuotaAlteration, EventLogFailedError, OffsetOutOfRangeError, decode_columns
from quotaplane.config import _log as log_module
from quotaplane.config._log import LogIO
from quotaplane.config._segments import list_segments
from tests.actors.test_controller_pipelining import RecordingShard

NOW = 1_700_000_000_000


def _alter(controller: ConfigController, user: str, value: float) -> None:
    [result] = controller.alter_client_quotas(
        [ClientQuotaAlteration({"user": user}, [("producer_byte_rate", value)])], now_ms=NOW
    )
    assert result.ok


class _FullDisk(LogIO):
    def write(self, fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failed_log_shows_in_health_and_info_until_the_controller_reopens_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller = ConfigController(tmp_path)
    try:
        _alter(controller, "alice", 1.0)
        assert controller.health() == {"serving": True, "log_error": None}
        monkeypatch.setattr(log_module, "_io", _FullDisk())
        with pytest.raises(EventLogFailedError, match="No space left on device"):
            _alter(controller, "bob", 2.0)
        health = controller.health()
        assert health["serving"] is False and "No space left on device" in health["log_error"]
        info = controller.info()
        assert info["serving"] is False and info["log_error"] == health["log_error"]
        assert info["end_offset"] == 1
        assert controller.describe_client_quotas([]) == [({"user": "alice"}, {"producer_byte_rate": 1.0})]
    finally:
        controller._store.close()
    monkeypatch.setattr(log_module, "_io", LogIO())  # space returns; a new process reopens the log
    reopened = ConfigController(tmp_path)
    try:
        assert reopened.health() == {"serving": True, "log_error": None}
        _alter(reopened, "carol", 3.0)
        assert reopened.end_offset() == 2
    finally:
        reopened._store.close()


def test_a_controller_on_a_snapshot_only_directory_serves_shards_from_the_snapshot_end(tmp_path: Path) -> None:
    controller = ConfigController(tmp_path)
    try:
        for i in range(4):
            _alter(controller, f"user-{i}", float(i + 1))
        controller.write_snapshot()
        expected = controller.snapshot()
    finally:
        controller._store.close()
    for _, path in list_segments(tmp_path):
        path.unlink()

    controller = ConfigController(tmp_path)
    try:
        assert (controller.start_offset(), controller.end_offset()) == (4, 4)
        assert controller.info()["start_offset"] == 4
        assert controller.read_from(4) == []  # the end: nothing yet
        with pytest.raises(OffsetOutOfRangeError):
            controller.read_from(0)  # below the start: the shard loads snapshot() instead
        snapshot = controller.snapshot()
        assert snapshot.end_offset == 4 and snapshot.to_image() == expected.to_image()

        behind, current = RecordingShard(), RecordingShard()
        assert controller.subscribe(behind, 0) == 4
        assert behind.calls == [("notify_end_offset", 4)]  # told to catch up from a snapshot
        assert controller.subscribe(current, 4) == 4 and current.calls == []
        _alter(controller, "new", 9.0)
        [(name, base, payload)] = current.calls
        assert (name, base) == ("apply_batch", 4)
        assert list(decode_columns(payload).quota_entity) == ['[["user","new"]]']
        assert [b for b, _ in controller.read_from(4)] == [4]
    finally:
        controller._store.close()
