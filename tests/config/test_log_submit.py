"""``EventLog.submit``: offsets at once, acknowledgement at ``wait``, group commit shared with ``append``."""

from __future__ import annotations

import collections
import errno
import os
import threading
import time
from pathlib import Path

import pytest

from quotaplane.config import EventLog, EventLogClosedError, EventLogFailedError
from quotaplane.config.logformat import iter_frames
from quotaplane.v1 import config_events_pb2 as pb

from .test_framing import event


def frame_counts(log: EventLog) -> list[int]:
    return [h.record_count for path in log.segments() for h in iter_frames(path.read_bytes())]


def test_submit_assigns_offsets_at_once_and_wait_acknowledges(tmp_path: Path):
    with EventLog.open(tmp_path) as log:
        log.append([event(0)])
        first = log.submit([event(1), event(2)])
        second = log.submit([event(3)])
        assert (first.first_offset, first.last_offset, second.first_offset, second.last_offset) == (1, 2, 3, 3)
        assert not first.durable and log.end_offset == 1  # queued, not written: nothing acknowledged
        assert second.wait() == 3  # leads one round holding both
        assert first.durable and first.wait() == 2
        assert frame_counts(log) == [1, 3]
        assert [e for _, e in log.read()] == [event(i) for i in range(4)]


def test_an_append_writes_what_was_submitted_before_it(tmp_path: Path):
    with EventLog.open(tmp_path) as log:
        pending = log.submit([event(0)])
        assert log.append([event(1)]) == 1
        assert pending.durable and "durable" in repr(pending)


def test_several_threads_may_wait_on_one_pending_append(tmp_path: Path):
    with EventLog.open(tmp_path) as log:
        pending = log.submit([event(0)])
        results: list[int] = []
        waiters = [threading.Thread(target=lambda: results.append(pending.wait())) for _ in range(4)]
        for w in waiters:
            w.start()
        for w in waiters:
            w.join(10)
        assert results == [0, 0, 0, 0]


def test_close_fails_what_was_submitted_and_not_written(tmp_path: Path):
    log = EventLog.open(tmp_path)
    pending = log.submit([event(0)])
    log.close()
    with pytest.raises(EventLogClosedError):
        pending.wait()
    with EventLog.open(tmp_path) as log:
        assert log.end_offset == 0  # never acknowledged, never written


def test_a_failed_fsync_fails_every_submitted_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = EventLog.open(tmp_path)
    log.append([event(0)])

    def failing_fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "injected I/O error")

    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    pending = [log.submit([event(i)]) for i in range(1, 4)]
    with pytest.raises(EventLogFailedError):
        pending[-1].wait()
    for p in pending:
        with pytest.raises(EventLogFailedError):
            p.wait()
    with pytest.raises(EventLogFailedError):
        log.submit([event(9)])
    log.close()
    with EventLog.open(tmp_path) as log:
        assert log.end_offset == 1


def test_pipelined_threads_keep_order_and_share_frames(tmp_path: Path):
    threads, per_thread, window = 8, 60, 5
    acknowledged: dict[int, list[tuple[int, pb.Event]]] = {t: [] for t in range(threads)}
    barrier = threading.Barrier(threads)

    def worker(log: EventLog, t: int) -> None:
        in_flight: collections.deque = collections.deque()
        barrier.wait()
        for j in range(per_thread):
            e = event(t * 1000 + j)
            if len(in_flight) == window:
                p, sent = in_flight.popleft()
                acknowledged[t].append((p.wait(), sent))
            in_flight.append((log.submit([e]), e))
            if j % 17 == 0:
                time.sleep(0.001)
        for p, sent in in_flight:
            acknowledged[t].append((p.wait(), sent))

    with EventLog.open(tmp_path) as log:
        workers = [threading.Thread(target=worker, args=(log, t)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        total = threads * per_thread
        assert log.end_offset == total
        offsets = sorted(o for acks in acknowledged.values() for o, _ in acks)
        assert offsets == list(range(total))
        for acks in acknowledged.values():
            assert [o for o, _ in acks] == sorted(o for o, _ in acks)  # each thread's order kept
        assert len(frame_counts(log)) < total
        on_disk = dict(log.read())
        for acks in acknowledged.values():
            for o, sent in acks:
                assert on_disk[o] == sent
