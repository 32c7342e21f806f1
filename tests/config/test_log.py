"""EventLog on real files: offsets, reads, segments, retention, the lock, group commit and a failing fsync."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from quotaplane.config import (
    CorruptLogError,
    EventLog,
    EventLogClosedError,
    EventLogError,
    EventLogFailedError,
    EventLogLockedError,
    OffsetOutOfRangeError,
    _log,
)
from quotaplane.config._columns import encoded_size_bound
from quotaplane.config.logformat import encode_events, events_of, iter_frames, parse_segment_name, segment_name
from quotaplane.v1 import config_events_pb2 as pb

REPO = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000


def event(i: int, time_ms: int | None = None, principal: str = "User:admin") -> pb.Event:
    return pb.Event(
        commit_time_ms=T0 + i if time_ms is None else time_ms,
        principal=principal,
        request_id=f"req-{i}",
        client_quota=pb.ClientQuotaRecord(
            entity=[pb.EntityData(entity_type="user", entity_name=f"user-{i % 5}")],
            key="producer_byte_rate",
            value=1024.0 * i,
        ),
    )


def events(n: int, start: int = 0) -> list[pb.Event]:
    return [event(i) for i in range(start, start + n)]


def frame_counts(log: EventLog) -> list[int]:
    """The record count of every frame on disk, scanned with the framing functions."""
    return [h.record_count for path in log.segments() for h in iter_frames(path.read_bytes())]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


# --- appending and reading -----------------------------------------------------------------------------
def test_new_log_is_empty(tmp_path: Path):
    with EventLog.open(tmp_path / "new" / "log") as log:
        assert (log.start_offset, log.end_offset, log.segments()) == (0, 0, [])
        assert list(log.read()) == [] and list(log.read_batches()) == []
        assert log.offset_for_time(T0) == 0
        assert log.directory == tmp_path / "new" / "log"


def test_append_returns_the_last_offset_and_reads_back(tmp_path: Path):
    with EventLog.open(tmp_path) as log:
        assert log.append(events(3)) == 2
        assert log.append([event(3)]) == 3
        assert log.append(tuple(events(2, start=4))) == 5
        assert (log.start_offset, log.end_offset) == (0, 6)
        assert list(log.read()) == list(enumerate(events(6)))
        assert log.segments() == [tmp_path / segment_name(0)]
        assert frame_counts(log) == [3, 1, 2]


def test_read_ranges(tmp_path: Path):
    with EventLog.open(tmp_path) as log:
        for start, n in [(0, 3), (3, 4), (7, 2), (9, 1)]:
            log.append(events(n, start))
        everything = events(10)
        for lo in range(11):
            for hi in range(lo, 13):
                assert list(log.read(lo, hi)) == list(enumerate(everything))[lo:hi], (lo, hi)
        assert list(log.read(4)) == list(enumerate(everything))[4:]
        with pytest.raises(ValueError, match="below from_offset"):
            log.read(5, 4)
        with pytest.raises(OffsetOutOfRangeError, match="above the log end offset 10"):
            log.read(11)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(-1)


def test_read_batches_are_trimmed_to_the_range(tmp_path: Path):
    with EventLog.open(tmp_path) as log:
        for start, n in [(0, 3), (3, 4), (7, 2)]:
            log.append(events(n, start))
        got = [(base, events_of(batch)) for base, batch in log.read_batches(1, 8)]
        assert got == [(1, events(2, 1)), (3, events(4, 3)), (7, events(1, 7))]
        assert [(b, len(x.kind)) for b, x in log.read_batches()] == [(0, 3), (3, 4), (7, 2)]
        assert [(b, len(x.kind)) for b, x in log.read_batches(4, 5)] == [(4, 1)]
        assert list(log.read_batches(9)) == []


def test_events_are_appended_as_given(tmp_path: Path):
    odd = [
        pb.Event(
            commit_time_ms=5, principal="User:ops", request_id="r1", client_metrics=pb.ClientMetricsRecord(name="m")
        ),
        pb.Event(commit_time_ms=5, config=pb.ConfigRecord(resource_type=pb.CONFIG_RESOURCE_TYPE_BROKER, name="x")),
    ]  # the log validates no record's content: that is the controller's job
    with EventLog.open(tmp_path) as log:
        log.append(odd)
        assert [e for _, e in log.read()] == odd
        with pytest.raises(ValueError, match="must carry a record"):  # but a batch column needs a kind
            log.append([pb.Event(commit_time_ms=6)])
        assert log.end_offset == 2


def test_bad_appends_change_nothing(tmp_path: Path):
    with EventLog.open(tmp_path) as log:
        with pytest.raises(ValueError, match="at least one event"):
            log.append([])
        with pytest.raises(TypeError):
            log.append([event(0), "not an event"])  # type: ignore[list-item]
        assert log.end_offset == 0 and log.segments() == []
        assert log.append([event(0)]) == 0


def test_segments_roll_by_size(tmp_path: Path):
    with EventLog.open(tmp_path, segment_bytes=500) as log:
        for i in range(60):
            log.append(events(1 + i % 3, start=i * 3))
        paths = log.segments()
        assert len(paths) > 5
        for path in paths:
            frames = list(iter_frames(path.read_bytes()))
            assert parse_segment_name(path.name) == frames[0].base_offset
        for path in paths[:-1]:
            frames = list(iter_frames(path.read_bytes()))
            size = path.stat().st_size
            assert size >= 500 and frames[-1].position < 500  # rolled before the frame after the limit
        expected = [e for i in range(60) for e in events(1 + i % 3, start=i * 3)]
        assert [e for _, e in log.read()] == expected
        assert list(log.read(30, 40)) == list(enumerate(expected))[30:40]


def test_reopen_keeps_everything_and_continues(tmp_path: Path):
    with EventLog.open(tmp_path, segment_bytes=300) as log:
        for i in range(20):
            log.append(events(2, start=2 * i))
        before = log.segments()
    with EventLog.open(tmp_path, segment_bytes=300) as log:
        assert (log.start_offset, log.end_offset, log.segments()) == (0, 40, before)
        assert [e for _, e in log.read()] == events(40)
        assert log.append([event(40)]) == 40
    with EventLog.open(tmp_path, read_only=True) as log:
        assert [e for _, e in log.read()] == events(41)


def test_offset_for_time(tmp_path: Path):
    times = [10, 10, 20, 30, 30, 30, 40, 40, 50]
    with EventLog.open(tmp_path, segment_bytes=200) as log:
        assert log.offset_for_time(10) == 0
        groups = [(0, 2), (2, 1), (3, 4), (7, 1), (8, 1)]
        for start, n in groups:
            log.append([event(i, times[i]) for i in range(start, start + n)])
        assert len(log.segments()) > 1
        for t in range(0, 60):
            assert log.offset_for_time(t) == sum(1 for x in times if x <= t), t


def test_offset_for_time_is_the_longest_prefix_even_if_times_go_back(tmp_path: Path):
    rng = random.Random(5)
    times = [rng.randrange(0, 50) + i // 4 for i in range(120)]  # mostly rising, with steps back
    with EventLog.open(tmp_path, segment_bytes=400) as log:
        i = 0
        while i < len(times):
            n = rng.randint(1, 5)
            log.append([event(j, times[j]) for j in range(i, min(i + n, len(times)))])
            i += n
        for t in range(-1, 90):
            prefix = next((k for k, x in enumerate(times) if x > t), len(times))
            assert log.offset_for_time(t) == prefix, t


def test_delete_segments_before(tmp_path: Path):
    with EventLog.open(tmp_path, segment_bytes=300) as log:
        for i in range(30):
            log.append(events(2, start=2 * i))
        paths = log.segments()
        bases = [parse_segment_name(p.name) for p in paths]
        assert len(paths) >= 4
        assert log.delete_segments_before(bases[1]) == [paths[0]]  # every offset of segment 0 is below
        assert log.delete_segments_before(bases[2] - 1) == []  # segment 1 holds bases[2] - 1
        assert log.start_offset == bases[1] and not paths[0].exists()
        with pytest.raises(OffsetOutOfRangeError, match=f"below the log start offset {bases[1]}"):
            log.read(bases[1] - 1)
        assert [o for o, _ in log.read(bases[1], bases[1] + 2)] == [bases[1], bases[1] + 1]
        assert log.offset_for_time(T0 + 1_000) == 60
        deleted = log.delete_segments_before(10**9)  # never the active segment
        assert deleted == paths[1:-1] and log.segments() == [paths[-1]]
        assert log.start_offset == bases[-1] and log.end_offset == 60
        assert [e for _, e in log.read(bases[-1])] == events(60 - bases[-1], start=bases[-1])
    with EventLog.open(tmp_path, segment_bytes=300) as log:  # the start offset survives a reopen
        assert (log.start_offset, log.end_offset) == (bases[-1], 60)
        assert log.append([event(60)]) == 60


def test_closed_and_read_only_logs(tmp_path: Path):
    log = EventLog.open(tmp_path)
    log.append(events(2))
    log.close()
    log.close()  # idempotent
    with pytest.raises(EventLogClosedError):
        log.append([event(2)])
    with pytest.raises(EventLogClosedError):
        log.read()
    with EventLog.open(tmp_path, read_only=True) as ro:
        assert [e for _, e in ro.read()] == events(2)
        with pytest.raises(EventLogError, match="read-only"):
            ro.append([event(2)])
        with pytest.raises(EventLogError, match="read-only"):
            ro.delete_segments_before(10)
    assert not (tmp_path / "missing").exists()
    with pytest.raises(FileNotFoundError):
        EventLog.open(tmp_path / "missing", read_only=True)
    assert "closed" in repr(log)


def test_reads_reverify_frames(tmp_path: Path):
    with EventLog.open(tmp_path) as log:
        log.append(events(3))
        log.append(events(3, start=3))
        path = log.segments()[0]
        data = bytearray(path.read_bytes())
        data[-5] ^= 0x01  # damage after open
        path.write_bytes(bytes(data))
        assert [o for o, _ in log.read(0, 3)] == [0, 1, 2]
        with pytest.raises(CorruptLogError, match="payload CRC32C mismatch") as info:
            list(log.read(3))
        assert info.value.path == str(path) and info.value.offset == 3


def test_readers_run_beside_appenders(tmp_path: Path):
    with EventLog.open(tmp_path, segment_bytes=2000, fsync=False) as log:
        stop = threading.Event()
        errors: list[BaseException] = []

        def reader() -> None:
            try:
                while not stop.is_set():
                    seen = [e for _, e in log.read()]
                    assert seen == events(len(seen))
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=reader)
        t.start()
        for i in range(300):
            log.append([event(i)])
        stop.set()
        t.join()
        assert errors == []


# --- the lock ------------------------------------------------------------------------------------------
LOCK_CHILD = textwrap.dedent(
    """
    import sys
    from quotaplane.config import EventLog, EventLogLockedError
    try:
        EventLog.open(sys.argv[1])
    except EventLogLockedError as exc:
        print("locked", exc)
    else:
        print("opened")
    """
)


def test_lock_excludes_a_second_writer(tmp_path: Path):
    with EventLog.open(tmp_path) as log:
        log.append(events(1))
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(EventLogLockedError) as info:
            EventLog.open(tmp_path)  # same process, another open file description
        message = str(info.value)
        assert str(tmp_path) in message and f"pid {os.getpid()}" in message and "\n" not in message
        assert isinstance(info.value, EventLogError)
        child = subprocess.run(
            [sys.executable, "-c", LOCK_CHILD, str(tmp_path)],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=60,
        )
        assert child.stdout.startswith("locked "), child.stdout + child.stderr
        assert f"pid {os.getpid()}" in child.stdout
        with EventLog.open(tmp_path, read_only=True) as ro:  # readers take no lock
            assert ro.end_offset == 1
    child = subprocess.run(
        [sys.executable, "-c", LOCK_CHILD, str(tmp_path)], capture_output=True, text=True, env=child_env(), timeout=60
    )
    assert child.stdout == "opened\n", child.stderr
    with EventLog.open(tmp_path) as log:  # released by close, and by the child's exit
        assert log.end_offset == 1


# --- group commit --------------------------------------------------------------------------------------
def test_group_commit_shares_frames_and_keeps_each_callers_events_together(tmp_path: Path):
    threads, appends = 16, 40
    results: dict[int, list[tuple[int, list[pb.Event]]]] = {t: [] for t in range(threads)}
    barrier = threading.Barrier(threads)

    def worker(log: EventLog, t: int) -> None:
        barrier.wait()
        for j in range(appends):
            batch = [event(j * 10 + k, principal=f"User:t{t}") for k in range(1 + (t + j) % 3)]
            results[t].append((log.append(batch), batch))

    with EventLog.open(tmp_path, segment_bytes=64 * 1024) as log:
        workers = [threading.Thread(target=worker, args=(log, t)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        total = sum(len(b) for r in results.values() for _, b in r)
        offsets = [last - len(b) + 1 + k for r in results.values() for last, b in r for k in range(len(b))]
        assert sorted(offsets) == list(range(total)) and log.end_offset == total  # distinct and dense
        for r in results.values():
            lasts = [last for last, _ in r]
            assert lasts == sorted(lasts)  # each thread's appends in its order
        frames = frame_counts(log)
        assert sum(frames) == total
        assert len(frames) < threads * appends  # appends shared frames (and fsyncs)
    with EventLog.open(tmp_path, read_only=True) as log:
        for r in results.values():
            for last, batch in r:
                assert [e for _, e in log.read(last - len(batch) + 1, last + 1)] == batch


def test_a_failed_fsync_fails_its_round_and_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = EventLog.open(tmp_path)
    log.append(events(2))
    real = os.fdatasync
    entered = threading.Event()
    release = threading.Event()

    def failing_fdatasync(fd: int) -> None:
        entered.set()
        release.wait(10)  # let more appends queue behind this round
        raise OSError(errno.EIO, "injected I/O error")

    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    outcomes: dict[int, object] = {}

    def appender(i: int) -> None:
        try:
            outcomes[i] = log.append([event(100 + i)])
        except BaseException as exc:
            outcomes[i] = exc

    first = threading.Thread(target=appender, args=(0,))
    first.start()
    assert entered.wait(10)
    others = [threading.Thread(target=appender, args=(i,)) for i in range(1, 6)]
    for t in others:
        t.start()
    time.sleep(0.2)
    release.set()
    for t in [first, *others]:
        t.join()
    assert all(isinstance(o, EventLogFailedError) for o in outcomes.values()), outcomes  # none acknowledged
    assert isinstance(outcomes[0].__cause__, OSError) and outcomes[0].__cause__.errno == errno.EIO
    monkeypatch.setattr(os, "fdatasync", real)
    with pytest.raises(EventLogFailedError, match="reopened"):
        log.append([event(9)])  # unusable even though fsync works again
    assert log.end_offset == 2 and [e for _, e in log.read()] == events(2)
    log.close()
    with EventLog.open(tmp_path) as log:  # the failed round was cut back; the log goes on
        assert log.end_offset == 2
        assert log.append([event(2)]) == 2


@pytest.mark.parametrize("encoded", ["at_submit", "by_the_round"])
def test_a_round_takes_at_most_max_frame_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoded: str):
    """Appends encoded at ``submit`` (their size bound passes the frame) are cut into rounds by their bytes, appends
    waiting for their round to encode them by their size bound: either way no frame holds more than fits."""
    if encoded == "at_submit":
        one = len(encode_events([event(10)]))
    else:
        one = max(encoded_size_bound([event(i)]) for i in range(10, 100))
    monkeypatch.setattr(_log, "MAX_FRAME_BYTES", 2 * one)
    with EventLog.open(tmp_path) as log:
        if encoded == "at_submit":
            with pytest.raises(ValueError, match="exceeds MAX_FRAME_BYTES"):
                log.append(events(3, start=10))
        barrier = threading.Barrier(8)

        def worker(t: int) -> None:
            barrier.wait()
            for j in range(20):
                log.append([event(10 + (t * 20 + j) % 90)])

        workers = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        counts = frame_counts(log)
        assert sum(counts) == 160 and max(counts) <= 2
