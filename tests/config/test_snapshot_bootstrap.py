"""A directory holding snapshots and no segment (a restore from backup, segments deleted after compaction)
opens at the newest valid snapshot, as KRaft bootstraps a node from one; events missing from both the
segments and the snapshots refuse to open, loudly. Real files throughout."""

from __future__ import annotations

import logging
import pickle
import shutil
from pathlib import Path

import pytest

from quotaplane.config import (
    ClientQuotaAlteration,
    ConfigStore,
    EventLog,
    HistoryCompactedError,
    OffsetOutOfRangeError,
)
from quotaplane.config._log_errors import LogGapError
from quotaplane.config._segments import list_segments
from quotaplane.config._snapshot_file import list_snapshots

T0 = 1_700_000_000_000


def _quota(user: str, value: float | None) -> ClientQuotaAlteration:
    return ClientQuotaAlteration({"user": user}, [("producer_byte_rate", value)])


def _write_quotas(directory: Path, n: int, *, start: int = 0, segment_bytes: int = 16 * 1024 * 1024) -> None:
    with ConfigStore.open(directory, segment_bytes=segment_bytes) as store:
        for i in range(start, start + n):
            store.alter_client_quotas([_quota(f"user-{i}", float(1000 + i))], now_ms=T0 + i, request_id=f"r{i}")


def _delete_segments(directory: Path) -> list[Path]:
    paths = [path for _, path in list_segments(directory)]
    for path in paths:
        path.unlink()
    return paths


def _quotas(store: ConfigStore) -> dict[str, float]:
    return {
        entity["user"]: quotas["producer_byte_rate"]
        for entity, quotas in store.describe_client_quotas([], strict=False)
    }


def test_snapshot_only_directory_opens_at_the_snapshot_and_continues_from_its_end(tmp_path: Path) -> None:
    _write_quotas(tmp_path, 5)
    with ConfigStore.open(tmp_path) as store:
        store.alter_client_quotas([_quota("user-0", None)], now_ms=T0 + 10, request_id="remove-0")
        snapshot = store.write_snapshot()
        expected = store.image.copy()
    assert snapshot.name == f"{6:020d}.snapshot"
    assert _delete_segments(tmp_path)

    with ConfigStore.open(tmp_path) as store:
        assert store.image == expected  # every quota, the removal, the request-id window
        assert _quotas(store) == {f"user-{i}": float(1000 + i) for i in range(1, 5)}
        assert (store.start_offset, store.end_offset, store.log.end_offset) == (6, 6, 6)
        assert store.log.segments() == []
        # retrying a request the snapshot's window holds is answered again and appends nothing
        [retry] = store.alter_client_quotas([_quota("user-1", 1.0)], now_ms=T0 + 20, request_id="r1")
        assert retry.ok and store.end_offset == 6
        # offsets below the start are in the snapshot only; the end reads as empty
        with pytest.raises(OffsetOutOfRangeError):
            store.log.read_batches(5)
        assert list(store.log.read(6)) == []
        assert store.log.offset_for_time(T0) == 6

        [result] = store.alter_client_quotas([_quota("new", 7.0)], now_ms=T0 + 30, request_id="after")
        assert result.ok
        assert store.end_offset == 7
        [(offset, event)] = list(store.log.read(6))
        assert (offset, event.request_id, event.commit_time_ms) == (6, "after", T0 + 30)
        assert [p.name for p in store.log.segments()] == [f"{6:020d}.log"]
        assert [h.offset for h in store.history(entity={"user": "new"})] == [6]

    with ConfigStore.open(tmp_path) as store:  # both the snapshot's quotas and the new change
        assert (store.start_offset, store.end_offset) == (6, 7)
        assert _quotas(store) == {**{f"user-{i}": float(1000 + i) for i in range(1, 5)}, "new": 7.0}
        [result] = store.alter_client_quotas([_quota("newer", 8.0)], now_ms=T0 + 40)
        assert result.ok and store.end_offset == 8


def test_commit_times_and_frame_maxima_continue_from_the_snapshot(tmp_path: Path) -> None:
    _write_quotas(tmp_path, 3)
    with ConfigStore.open(tmp_path) as store:
        store.write_snapshot()
    _delete_segments(tmp_path)
    with ConfigStore.open(tmp_path) as store:
        store.alter_client_quotas([_quota("late", 1.0)], now_ms=T0 - 10_000)  # a clock behind the snapshot
        [(_, event)] = list(store.log.read(3))
        assert event.commit_time_ms == T0 + 2  # commit times never decrease across the snapshot
    with EventLog.open(tmp_path, read_only=True) as log:
        assert log.offset_for_time(T0 + 1) == 3 and log.offset_for_time(T0 + 2) == 4


def test_the_newest_valid_snapshot_is_chosen_and_a_bad_newer_one_is_skipped_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _write_quotas(tmp_path, 3)
    with ConfigStore.open(tmp_path) as store:
        store.write_snapshot()
        older = store.image.copy()
    _write_quotas(tmp_path, 2, start=3)
    with ConfigStore.open(tmp_path) as store:
        newest = store.write_snapshot()
    _delete_segments(tmp_path)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01
    newest.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="quotaplane.config"), ConfigStore.open(tmp_path) as store:
        assert store.image == older and store.end_offset == 3
    messages = [r.getMessage() for r in caplog.records]
    assert any(newest.name in m and "does not verify" in m for m in messages)
    assert any("[3, 5)" in m for m in messages)  # the offsets only the bad snapshot held are said lost


def test_read_only_opens_of_a_snapshot_only_directory_start_at_the_snapshot(tmp_path: Path) -> None:
    _write_quotas(tmp_path, 4)
    with ConfigStore.open(tmp_path) as store:
        store.write_snapshot()
        expected = store.image.copy()
    _delete_segments(tmp_path)
    with EventLog.open(tmp_path, read_only=True) as log:
        assert (log.start_offset, log.end_offset, log.segments()) == (4, 4, [])
    with ConfigStore.open(tmp_path, read_only=True) as store:
        assert store.image == expected
    assert not (tmp_path / f"{4:020d}.log").exists()  # a reader created nothing


def test_a_directory_with_only_corrupt_snapshots_refuses_to_open(tmp_path: Path) -> None:
    _write_quotas(tmp_path, 3)
    with ConfigStore.open(tmp_path) as store:
        snapshot = store.write_snapshot()
    _delete_segments(tmp_path)
    snapshot.write_bytes(snapshot.read_bytes()[:-5])
    for opener in (
        lambda: ConfigStore.open(tmp_path),
        lambda: ConfigStore.open(tmp_path, read_only=True),
        lambda: EventLog.open(tmp_path),
    ):
        with pytest.raises(LogGapError) as raised:
            opener()
        assert (raised.value.missing_from, raised.value.missing_to) == (0, 3)
        assert snapshot.name in str(raised.value) and "no segment" in str(raised.value)
    assert list_segments(tmp_path) == []  # nothing was created, so the next open refuses again
    error = raised.value
    assert str(pickle.loads(pickle.dumps(error))) == str(error)  # crosses Ray intact


def test_segments_that_begin_after_the_snapshot_end_refuse_naming_the_files(tmp_path: Path) -> None:
    _write_quotas(tmp_path, 3, segment_bytes=1)  # one frame per segment
    with ConfigStore.open(tmp_path, segment_bytes=1) as store:
        snapshot = store.write_snapshot()  # at 3
    _write_quotas(tmp_path, 4, start=3, segment_bytes=1)  # offsets 3..6, segments 3, 4, 5, 6
    for base in (0, 1, 2, 3, 4):  # the segments holding [3, 5) are gone too
        (tmp_path / f"{base:020d}.log").unlink()
    with pytest.raises(LogGapError) as raised:
        ConfigStore.open(tmp_path, segment_bytes=1)
    message = str(raised.value)
    assert (raised.value.missing_from, raised.value.missing_to) == (3, 5)
    assert snapshot.name in message and f"{5:020d}.log" in message and "offset 3" in message
    assert "offset 5" in message
    with pytest.raises(LogGapError):
        ConfigStore.open(tmp_path, read_only=True)


def test_segments_covering_the_snapshot_open_as_before(tmp_path: Path) -> None:
    _write_quotas(tmp_path, 3, segment_bytes=1)
    with ConfigStore.open(tmp_path, segment_bytes=1) as store:
        store.write_snapshot()
    _write_quotas(tmp_path, 2, start=3, segment_bytes=1)
    with ConfigStore.open(tmp_path, segment_bytes=1) as store:
        assert store.delete_segments_covered_by_snapshot()
        expected = store.image.copy()
    with ConfigStore.open(tmp_path, segment_bytes=1) as store:
        assert (store.start_offset, store.end_offset) == (3, 5)
        assert store.image == expected


def test_no_snapshot_at_all_for_segments_above_zero_stays_history_compacted(tmp_path: Path) -> None:
    _write_quotas(tmp_path, 3, segment_bytes=1)
    (tmp_path / f"{0:020d}.log").unlink()
    with pytest.raises(HistoryCompactedError, match="starts at offset 1"):
        ConfigStore.open(tmp_path, segment_bytes=1)
    with EventLog.open(tmp_path, segment_bytes=1) as log:  # the log alone has no such rule (retention)
        assert (log.start_offset, log.end_offset) == (1, 3)


def test_a_valid_snapshot_beyond_the_last_segment_refuses_the_writer(tmp_path: Path) -> None:
    _write_quotas(tmp_path, 2)
    backup = tmp_path / "backup"
    backup.mkdir()
    for _, path in list_segments(tmp_path):
        shutil.copy(path, backup / path.name)
    _write_quotas(tmp_path, 2, start=2)
    with ConfigStore.open(tmp_path) as store:
        snapshot = store.write_snapshot()  # at 4
    for _, path in list_segments(tmp_path):  # restore the older segments beside the newer snapshot
        shutil.copy(backup / path.name, path)
    shutil.rmtree(backup)
    with pytest.raises(LogGapError) as raised:
        ConfigStore.open(tmp_path)
    assert (raised.value.missing_from, raised.value.missing_to) == (2, 4)
    assert snapshot.name in str(raised.value) and f"{0:020d}.log" in str(raised.value)
    # moving the snapshot aside is the documented way to open at the segments' end
    snapshot.rename(tmp_path / "aside")
    with ConfigStore.open(tmp_path) as store:
        assert store.end_offset == 2


def test_a_corrupt_snapshot_beyond_the_last_segment_is_skipped(tmp_path: Path) -> None:
    _write_quotas(tmp_path, 2)
    (tmp_path / f"{9:020d}.snapshot").write_bytes(b"not a snapshot")
    with ConfigStore.open(tmp_path) as store:
        assert store.end_offset == 2


def test_a_snapshot_only_directory_holding_an_empty_image_opens_at_its_offset(tmp_path: Path) -> None:
    with ConfigStore.open(tmp_path) as store:
        store.alter_client_quotas([_quota("a", 1.0)], now_ms=T0)
        store.alter_client_quotas([_quota("a", None)], now_ms=T0 + 1)
        store.write_snapshot()
    _delete_segments(tmp_path)
    assert [end for end, _ in list_snapshots(tmp_path)] == [2]
    with ConfigStore.open(tmp_path) as store:
        assert _quotas(store) == {} and store.end_offset == 2  # empty, but at offset 2, not a new log
        [result] = store.alter_client_quotas([_quota("b", 2.0)], now_ms=T0 + 2)
        assert result.ok and store.end_offset == 3
