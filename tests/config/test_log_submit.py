"""``EventLog.submit``: offsets at once, acknowledgement at ``wait``, group commit shared with ``append``."""

from __future__ import annotations

import collections
import errno
import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaplane.config import EventLog, EventLogClosedError, EventLogFailedError, _log
from quotaplane.config._columns import encode_events, encoded_size_bound
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


# --- appends encoded by their round ------------------------------------------------------------------------------
def test_an_append_is_written_as_it_was_when_submitted(tmp_path: Path):
    """``submit`` keeps copies for the round to encode: what the caller changes afterwards is not what is written."""
    submitted = event(0)
    expected = pb.Event()
    expected.CopyFrom(submitted)
    with EventLog.open(tmp_path) as log:
        pending = log.submit([submitted])
        submitted.client_quota.value = 1.0
        submitted.principal = "User:mallory"
        assert pending.wait() == 0
        assert [e for _, e in log.read()] == [expected]


def test_appends_encoded_at_submit_and_by_their_round_share_a_frame_in_order(tmp_path: Path, monkeypatch):
    """An append whose size bound passes a frame is encoded at ``submit`` (and refused there if it really does
    not fit); the small ones around it wait for their round. One round writes them all, in submission order."""
    small = encoded_size_bound([event(1)])
    monkeypatch.setattr(_log, "MAX_FRAME_BYTES", 4 * small)
    big = event(2)
    big.request_id = "r" * small  # its bound passes the frame, its bytes fit
    assert encoded_size_bound([big]) > 4 * small >= len(encode_events([big])) + 2 * small
    with EventLog.open(tmp_path) as log:
        first = log.submit([event(1)])
        middle = log.submit([big])
        last = log.submit([event(3)])
        assert (first.payload, middle.events, last.payload) == (None, None, None)  # which path each took
        assert last.wait() == 2 and first.durable and middle.durable
        assert (first.events, middle.payload) == (None, None)  # the round let its copies and bytes go
        assert frame_counts(log) == [3]
        assert [e for _, e in log.read()] == [event(1), big, event(3)]
        huge = event(4)
        huge.request_id = "r" * (4 * small)
        with pytest.raises(ValueError, match="exceeds MAX_FRAME_BYTES"):
            log.submit([huge])
        assert log.end_offset == 3


_ANY_TEXT = st.text(max_size=40)  # control characters, quotes and astral-plane characters included


@st.composite
def _any_event(draw: st.DrawFn) -> pb.Event:
    """Events with any strings and numbers the messages take, zeros included (left out of the event's bytes)."""
    event_ = pb.Event(
        commit_time_ms=draw(st.integers(0, 2**63 - 1)), principal=draw(_ANY_TEXT), request_id=draw(_ANY_TEXT)
    )
    kind = draw(st.sampled_from(["client_quota", "client_metrics", "config"]))
    if kind == "client_quota":
        record = event_.client_quota
        for entity_type, name in draw(st.lists(st.tuples(_ANY_TEXT, st.none() | _ANY_TEXT), max_size=3)):
            pair = record.entity.add(entity_type=entity_type)
            if name is not None:
                pair.entity_name = name
        record.key = draw(_ANY_TEXT)
        record.value = draw(st.floats(allow_nan=False) | st.just(0.0))
        record.remove = draw(st.booleans())
    elif kind == "client_metrics":
        event_.client_metrics.name = draw(_ANY_TEXT)
        event_.client_metrics.delete = draw(st.booleans())
    else:
        event_.config.resource_name = draw(_ANY_TEXT)
        event_.config.name = draw(_ANY_TEXT)
    return event_


@given(st.lists(_any_event(), min_size=1, max_size=5))
def test_the_size_bound_is_never_below_the_encoding(events_: list[pb.Event]):
    assert encoded_size_bound(events_) >= len(encode_events(events_))
