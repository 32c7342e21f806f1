"""The recovery point checkpoint: reopen indexes segments below it without reading them, and finds what a
full scan finds (torn tails, gaps, corruption), whatever state the checkpoint is in."""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.config import CorruptLogError, EventLog, LogGapError
from quotaplane.config._framing import encode_event_batch
from quotaplane.config._recovery_point import (
    CHECKPOINT_FILE,
    CorruptCheckpointError,
    RecoveryPoint,
    SegmentRecord,
    decode_checkpoint,
    encode_checkpoint,
    read_checkpoint,
)
from quotaplane.config._snapshot_file import write_snapshot
from quotaplane.config.logformat import FRAME_HEADER_SIZE, iter_frames
from quotaplane.v1 import config_events_pb2 as pb

from .test_log_crash import event, events

T0 = 1_700_000_000_000


def build(directory: Path, groups: list[int], *, segment_bytes: int = 300, clean: bool = True, start: int = 0) -> int:
    """Append one frame per group; close cleanly, or drop the log as a killed writer would (no close: the
    checkpoint holds what the rolls wrote). The end offset."""
    log = EventLog.open(directory, segment_bytes=segment_bytes, fsync=False)
    offset = start
    for n in groups:
        offset = log.append(events(n, offset)) + 1
    if clean:
        log.close()
    else:
        log._release()  # the lock and descriptors go, as at a kill; nothing else runs
    return offset


def state(directory: Path, *, full_recovery: bool) -> tuple:
    """Everything a reader can observe of the log, opened read-only."""
    with EventLog.open(directory, read_only=True, full_recovery=full_recovery) as log:
        times = [T0 - 1, T0, T0 + 3, T0 + 17, T0 + 10**6]
        return (
            log.start_offset,
            log.end_offset,
            [(o, e.SerializeToString()) for o, e in log.read(log.start_offset)],
            [log.offset_for_time(t) for t in times],
            [(s.path.name, s.size, s.end_offset) for s in log._segments],
            [(list(s.bases), list(s.positions), list(s.max_times)) for s in (x.load_index() for x in log._segments)],
        )


def trusted(directory: Path) -> int:
    with EventLog.open(directory, read_only=True) as log:
        return sum(not s.indexed for s in log._segments)


# --- the file ------------------------------------------------------------------------------------------
def test_checkpoint_round_trip_and_refusals():
    point = RecoveryPoint(9, (SegmentRecord(0, 4, 300, 200, T0 + 3), SegmentRecord(4, 9, 280, 190, T0 + 8)))
    data = encode_checkpoint(point)
    assert decode_checkpoint(data) == point
    assert decode_checkpoint(encode_checkpoint(RecoveryPoint(0, ()))) == RecoveryPoint(0, ())
    for i in range(len(data)):  # every flipped byte is refused (CRC, or the length, or the magic)
        damaged = bytearray(data)
        damaged[i] ^= 0x10
        with pytest.raises(CorruptCheckpointError):
            decode_checkpoint(bytes(damaged))
    for n in range(len(data)):  # every torn prefix too
        with pytest.raises(CorruptCheckpointError):
            decode_checkpoint(data[:n])
    bad = [
        RecoveryPoint(10, point.segments),  # not the end of the last record
        RecoveryPoint(9, (SegmentRecord(0, 4, 300, 200, T0), SegmentRecord(5, 9, 280, 190, T0))),  # a gap
        RecoveryPoint(4, (SegmentRecord(0, 4, 300, 300, T0),)),  # last frame at the end of the file
        RecoveryPoint(9, (SegmentRecord(0, 4, 300, 200, T0 + 5), SegmentRecord(4, 9, 280, 190, T0))),  # max drops
    ]
    for p in bad:
        with pytest.raises(CorruptCheckpointError):
            decode_checkpoint(encode_checkpoint(p))


def test_rolls_and_a_clean_close_advance_the_recovery_point(tmp_path: Path):
    log = EventLog.open(tmp_path, segment_bytes=300)
    assert read_checkpoint(tmp_path) is None
    end = 0
    for n in [2, 3, 1, 4, 2, 2, 3]:
        end = log.append(events(n, end)) + 1
    segments = log.segments()
    assert len(segments) >= 3
    point = read_checkpoint(tmp_path)
    assert point is not None  # written at the rolls: every segment but the active one
    assert point.recovery_point == log._segments[-1].base_offset
    assert [r.base_offset for r in point.segments] == [s.base_offset for s in log._segments[:-1]]
    log.close()
    point = read_checkpoint(tmp_path)
    assert point.recovery_point == end  # clean close: everything
    assert [(r.base_offset, r.end_offset, r.size) for r in point.segments] == [
        (s.base_offset, s.end_offset, s.path.stat().st_size) for s in log._segments
    ]
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
    with EventLog.open(tmp_path, segment_bytes=300) as log:
        assert [s.indexed for s in log._segments] == [False] * (len(segments) - 1) + [True]  # last: scanned


# --- reopen after a kill -------------------------------------------------------------------------------
def test_reopen_after_a_kill_with_a_torn_tail_trusts_the_rolled_segments(tmp_path: Path, caplog):
    end = build(tmp_path, [2, 3, 1, 4, 2, 2, 3, 1, 1], clean=False)
    active = sorted(tmp_path.glob("*.log"))[-1]
    size = active.stat().st_size
    frame = encode_event_batch(events(3, end), end)
    with active.open("ab") as f:
        f.write(frame[: len(frame) // 2])  # the write the kill cut
    expected = state(tmp_path, full_recovery=True)
    assert trusted(tmp_path) == len(list(tmp_path.glob("*.log"))) - 1
    assert state(tmp_path, full_recovery=False) == expected
    with caplog.at_level(logging.WARNING, "quotaplane.config"), EventLog.open(tmp_path, segment_bytes=300) as log:
        assert log.end_offset == end and active.stat().st_size == size
        assert sum(not s.indexed for s in log._segments) == len(log._segments) - 1
        assert [r.getMessage() for r in caplog.records if "torn tail" in r.getMessage()]
        assert not [r for r in caplog.records if "checkpoint" in r.getMessage()]
        assert log.append(events(2, end)) == end + 1
    assert [e for _, e in EventLog.open(tmp_path, read_only=True).read(0)] == events(end + 2)


def _killed_writer(directory: Path) -> None:  # pragma: no cover - runs in the child
    """Writes the log and ends the process at once (no close, no atexit), as a kill leaves it."""
    try:
        build(directory, [1, 2, 3] * 10, clean=False)
    except BaseException:
        os._exit(1)
    os._exit(0)


def test_a_killed_writer_in_another_process(tmp_path: Path):
    # a fresh interpreter, not a fork: a fork of this process while an earlier test's gRPC or Ray threads
    # are busy can crash or deadlock the child
    writer = multiprocessing.get_context("spawn").Process(target=_killed_writer, args=(tmp_path,))
    writer.start()
    writer.join(timeout=120)
    assert writer.exitcode == 0
    assert trusted(tmp_path) > 1
    assert state(tmp_path, full_recovery=False) == state(tmp_path, full_recovery=True)


def test_a_scan_of_segments_the_checkpoint_missed_advances_it(tmp_path: Path):
    build(tmp_path, [2, 3, 1, 4, 2, 2, 3])
    (tmp_path / CHECKPOINT_FILE).unlink()
    assert trusted(tmp_path) == 0
    EventLog.open(tmp_path, segment_bytes=300).close()
    assert trusted(tmp_path) == len(list(tmp_path.glob("*.log"))) - 1


# --- a damaged or wrong checkpoint -------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["empty", "torn", "flipped", "garbage"])
def test_a_damaged_checkpoint_means_a_full_scan_with_the_same_result(tmp_path: Path, damage: str, caplog):
    build(tmp_path, [2, 3, 1, 4, 2, 2, 3])
    expected = state(tmp_path, full_recovery=True)
    path = tmp_path / CHECKPOINT_FILE
    data = path.read_bytes()
    path.write_bytes(
        {"empty": b"", "torn": data[: len(data) // 2], "flipped": data[:30] + bytes([data[30] ^ 1]) + data[31:]}.get(
            damage, os.urandom(len(data))
        )
    )
    with caplog.at_level(logging.WARNING, "quotaplane.config"):
        assert trusted(tmp_path) == 0
        assert state(tmp_path, full_recovery=False) == expected
    assert any("checkpoint ignored" in r.getMessage() for r in caplog.records)
    EventLog.open(tmp_path, segment_bytes=300).close()  # the writer replaces it
    assert read_checkpoint(tmp_path) is not None and trusted(tmp_path) > 0
    assert state(tmp_path, full_recovery=False) == expected


def test_a_checkpoint_past_the_log_end(tmp_path: Path):
    """The checkpoint of a longer log: the later segments were deleted, or the earlier ones restored."""
    build(tmp_path, [2, 3, 1, 4])
    shorter = tmp_path / "shorter"
    shutil.copytree(tmp_path, shorter)
    build(tmp_path, [2, 2, 3, 1, 1, 2], start=10)
    (shorter / CHECKPOINT_FILE).write_bytes((tmp_path / CHECKPOINT_FILE).read_bytes())
    point = read_checkpoint(shorter)
    assert point.recovery_point > 10
    expected = state(shorter, full_recovery=True)
    assert expected[1] == 10
    assert state(shorter, full_recovery=False) == expected
    with EventLog.open(shorter, segment_bytes=300) as log:
        assert log.end_offset == 10
    # segments deleted from the end by hand: the log ends where its segments do, as with a full scan
    names = sorted(tmp_path.glob("*.log"))
    for path in names[-2:]:
        path.unlink()
    expected = state(tmp_path, full_recovery=True)
    assert state(tmp_path, full_recovery=False) == expected
    # a gap in the middle is still a gap
    names[1].unlink()
    with pytest.raises(CorruptLogError, match="offset gap"):
        EventLog.open(tmp_path, read_only=True)


def test_a_checkpoint_of_another_log_is_not_trusted(tmp_path: Path):
    one, other = tmp_path / "one", tmp_path / "other"
    build(one, [2, 3, 1, 4, 2, 2, 3])
    build(other, [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1])
    (other / CHECKPOINT_FILE).write_bytes((one / CHECKPOINT_FILE).read_bytes())
    assert trusted(other) == 0
    assert state(other, full_recovery=False) == state(other, full_recovery=True)


def test_retention_and_a_snapshot_only_directory(tmp_path: Path):
    build(tmp_path, [2, 3, 1, 4, 2, 2, 3])
    with EventLog.open(tmp_path, segment_bytes=300) as log:
        assert log.delete_segments_before(8)
        start, end = log.start_offset, log.end_offset
    assert state(tmp_path, full_recovery=False)[:2] == (start, end)
    assert state(tmp_path, full_recovery=False) == state(tmp_path, full_recovery=True)
    # only a snapshot left beside a stale checkpoint: the log starts at the snapshot
    for path in tmp_path.glob("*.log"):
        path.unlink()
    write_snapshot(tmp_path, pb.SnapshotHeader(end_offset=end, last_commit_time_ms=T0 + end), [(0, event(0))])
    with EventLog.open(tmp_path, segment_bytes=300) as log:
        assert (log.start_offset, log.end_offset) == (end, end)
        assert log.append(events(1, end)) == end
    # no snapshot and no segment, with a checkpoint: still a gap, never an empty log
    for path in [*tmp_path.glob("*.log"), *tmp_path.glob("*.snapshot")]:
        path.unlink()
    write_snapshot(tmp_path, pb.SnapshotHeader(end_offset=end, last_commit_time_ms=T0), [(0, event(0))])
    snapshot = next(tmp_path.glob("*.snapshot"))
    snapshot.write_bytes(snapshot.read_bytes()[:-1])
    with pytest.raises(LogGapError):
        EventLog.open(tmp_path)


# --- corruption of a trusted segment is found when it is read ------------------------------------------
@pytest.mark.parametrize("where", ["middle header", "payload"])
def test_corruption_in_a_trusted_segment_is_raised_by_the_read(tmp_path: Path, where: str):
    build(tmp_path, [1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2], segment_bytes=600)
    first = sorted(tmp_path.glob("*.log"))[0]
    frames = list(iter_frames(first.read_bytes()))
    assert len(frames) >= 3
    bad = frames[1]
    data = bytearray(first.read_bytes())
    data[bad.position + (20 if where == "middle header" else FRAME_HEADER_SIZE + 1)] ^= 0x04
    first.write_bytes(bytes(data))
    with EventLog.open(tmp_path) as log:  # size, first and last headers as recorded: trusted, not read
        assert not log._segments[0].indexed
        match = "indexed at its first read" if where == "middle header" else "re-read after open"
        with pytest.raises(CorruptLogError, match=match) as info:
            list(log.read(0))
        assert info.value.path == str(first) and info.value.position == bad.position
        assert list(log.read(first.stat().st_size and log._segments[1].base_offset))  # later segments read
    with pytest.raises(CorruptLogError):
        EventLog.open(tmp_path, read_only=True, full_recovery=True)


def test_a_trusted_segment_changed_after_open_is_refused_at_its_first_read(tmp_path: Path):
    build(tmp_path, [2, 3, 1, 4, 2, 2, 3])
    first = sorted(tmp_path.glob("*.log"))[0]
    with EventLog.open(tmp_path, read_only=True) as log:
        first.write_bytes(first.read_bytes()[:-1])
        with pytest.raises(CorruptLogError, match="changed since open"):
            list(log.read(0))


# --- the property: open with the checkpoint = a full scan ------------------------------------------------
_groups = st.lists(st.integers(1, 4), min_size=1, max_size=12)
_step = st.tuples(_groups, st.sampled_from(["clean", "kill", "kill-torn"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(_step, min_size=1, max_size=5),
    segment_bytes=st.sampled_from([1, 150, 400, 4096]),
    retention=st.one_of(st.none(), st.integers(0, 40)),
    checkpoint=st.sampled_from(["kept", "stale", "deleted", "flipped"]),
)
def test_open_with_the_checkpoint_equals_a_full_scan(steps, segment_bytes, retention, checkpoint):
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d)
        end = 0
        saved = None
        for i, (groups, how) in enumerate(steps):
            log = EventLog.open(directory, segment_bytes=segment_bytes, fsync=False)
            assert log.end_offset == end
            for n in groups:
                end = log.append(events(n, end)) + 1
            if how == "clean":
                log.close()
            else:
                log._release()
                if how == "kill-torn":
                    with log.segments()[-1].open("ab") as f:
                        f.write(encode_event_batch(events(2, end), end)[:50])
            if i == 0 and (directory / CHECKPOINT_FILE).exists():
                saved = (directory / CHECKPOINT_FILE).read_bytes()
        if retention is not None:
            with EventLog.open(directory, segment_bytes=segment_bytes, fsync=False) as log:
                log.delete_segments_before(retention)
        path = directory / CHECKPOINT_FILE
        if checkpoint == "stale" and saved is not None:
            path.write_bytes(saved)
        elif checkpoint == "deleted":
            path.unlink(missing_ok=True)
        elif checkpoint == "flipped" and path.exists():
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0x01
            path.write_bytes(bytes(data))
        expected = state(directory, full_recovery=True)
        assert expected[1] == end
        assert state(directory, full_recovery=False) == expected
        with EventLog.open(directory, segment_bytes=segment_bytes, fsync=False) as log:
            assert log.end_offset == end
        assert state(directory, full_recovery=False) == expected


def test_a_stale_checkpoint_of_a_segment_that_grew_since(tmp_path: Path):
    """A clean close records the active segment; it then grows and rolls. An older checkpoint (the roll's
    write lost) must not vouch for the grown segment: its size differs, so it is scanned."""
    build(tmp_path, [2, 3], segment_bytes=4096)
    stale = (tmp_path / CHECKPOINT_FILE).read_bytes()
    assert decode_checkpoint(stale).recovery_point == 5
    end = build(tmp_path, [4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4], segment_bytes=600, start=5)
    assert len(list(tmp_path.glob("*.log"))) > 2
    (tmp_path / CHECKPOINT_FILE).write_bytes(stale)
    assert trusted(tmp_path) == 0
    expected = state(tmp_path, full_recovery=True)
    assert expected[1] == end
    assert state(tmp_path, full_recovery=False) == expected


def test_a_segment_replaced_by_another_of_the_same_size_is_not_trusted(tmp_path: Path):
    build(tmp_path, [1, 1, 1, 1, 1, 1, 1, 1], segment_bytes=300)
    first = sorted(tmp_path.glob("*.log"))[0]
    frames = list(iter_frames(first.read_bytes()))
    data = bytearray(first.read_bytes())
    last = frames[-1]
    data[last.position + FRAME_HEADER_SIZE :] = bytes(len(data) - last.position - FRAME_HEADER_SIZE)
    data[last.position + 19] ^= 0x01  # the last frame's record count: header CRC no longer matches
    first.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="not the last segment"):  # scanned, so refused at open
        EventLog.open(tmp_path, read_only=True)
