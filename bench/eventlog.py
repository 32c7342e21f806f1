"""Benchmark of the config event log (``quotaplane.config.EventLog``) and snapshot files, beside the raw disk.

What it measures, in one run on one temporary directory (``--dir``, default the system's temp dir):

``disk``
    The raw speed of that file system, for scale: sequential write of 256 MiB in 1 MiB chunks then
    fsync (MB/s, 10^6 bytes), sequential read of the same file after evicting it from the page cache
    (``posix_fadvise(POSIX_FADV_DONTNEED)`` after the fsync; a hypervisor's cache may still serve it),
    and the latency of appending 4 KiB then ``fdatasync`` (p50 / p99, ms): the floor of a durable append.
``appends``
    ``EventLog.append`` of one event (a client-quota change with principal and request id) with
    fsync, from 1 thread and from 16 threads: appends/s, the frames (fsyncs) written, and each
    append's latency. With 16 threads group commit shares frames: appends per frame says how much.
    Then what a writer that hands the log more than one event per fsync gets, as events/s:
    ``sixteen_threads_ten_events`` (each append carries 10 events, as an admin request altering 10
    quotas does) and ``sixteen_threads_pipelined`` (each thread keeps up to 8 one-event appends in
    flight with ``EventLog.submit``, waiting for the oldest before submitting more: a controller that
    decides the next change before the previous one is durable and answers each when it is).
    Then the admin path above the log: ``store_one_thread`` and ``store_sixteen_threads``, changes/s
    through ``ConfigStore.alter_client_quotas`` (one client-quota alteration per call, each with its
    request id, fsync), the frames written and each call's latency: the store decides a change on its
    working state, submits it and answers once it is durable, so concurrent calls share fsyncs.
``read``
    ``--events`` events (default 1,000,000) appended with ``fsync=False`` in batches of 1000 (one
    frame each), then a fresh ``EventLog.open`` (the recovery scan of a clean log: every CRC) and
    ``read_batches`` over all of it: events/s decoded (one zstd decompress and one ``EventColumns``
    parse per frame), best of 3: the baseline of the replay. ``read()`` (one ``Event`` per event) for
    comparison.
``snapshot``
    The same events as (offset, event) entries written to one snapshot file, then read back:
    ``read_snapshot_batches`` (verify and decode) and ``read_snapshot`` iterated to the last entry.
``replay``
    The image replay (``ConfigImage.replay_columns``) of the ``read`` log: events/s with the garbage
    collector paused (as ``ConfigStore.open`` replays) and running, beside the ``read_batches``
    baseline of the same run; the replay of the ``snapshot`` figure's file (every event an entry).
    Then the image's own snapshot (one entry per live key:
    15,000 entities here) and ``ConfigStore.open`` of the log with and without it (newest snapshot
    plus the tail versus every event), and the images compared.
``recovery``
    A child process appends with group commit (4 threads, fsync) to the ``read`` log and is killed
    with SIGKILL; the time of the next ``EventLog.open`` (scan and verify everything, cut a torn tail
    if the kill left one), with the page cache warm and after evicting the segments from it; and the
    same warm open with ``full_recovery=True`` (every frame verified, the recovery point ignored).
``reopen_vs_size``
    Reopen time as the log grows (10k, 100k, 500k events; ``--quick`` 2k, 10k), at 1 MiB (the default)
    and at 16 MiB segments (the default before the recovery point): small frames (2 events each, as
    group commit of a few admin changes writes them), the writer dropped without a close (as a kill: the
    recovery point is what the rolls wrote) and half a frame left torn at the end. Each size is opened
    for writing alternately with the recovery point and with ``full_recovery=True`` (best and median of
    3 each): reopen time should stay flat with the recovery point (bounded by the active segment) and
    grow with the log without it.

``--figures a,b`` runs only those figures (those they depend on first: ``read`` for the later ones).

Output: one JSON object on stdout. Run: ``.venv/bin/python bench/eventlog.py [--events N] [--quick]
[--dir PATH]``. ``--quick`` uses small sizes (a smoke run; its figures mean little).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine

from quotaplane.config import ClientQuotaAlteration, ConfigImage, ConfigStore
from quotaplane.config._log import EventLog
from quotaplane.config._snapshot_file import read_snapshot, read_snapshot_batches, write_snapshot
from quotaplane.config._store import gc_paused
from quotaplane.v1 import config_events_pb2 as pb

REPO = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000
MB = 1_000_000
MIB = 1024 * 1024


@dataclass
class Bench:
    """What the figures share: sizes, the scratch directory, and the artefacts earlier figures built.

    ``log_dir`` holds ``events`` events once ``read`` ran, ``snapshot_path`` a snapshot of them once
    ``snapshot`` ran: later figures (the image replay, see ``FIGURES``) replay those.
    """

    root: Path
    quick: bool
    events: int
    log_dir: Path | None = None
    snapshot_path: Path | None = None
    notes: list[str] = field(default_factory=list)


def client_quota_event(i: int) -> pb.Event:
    """A realistic change: a user/client-id produce quota set by an admin, with a request id."""
    return pb.Event(
        commit_time_ms=T0 + i,
        principal=f"User:admin-{i % 7}",
        request_id=str(uuid.UUID(bytes=hashlib.blake2b(i.to_bytes(8, "big"), digest_size=16).digest())),
        client_quota=pb.ClientQuotaRecord(
            entity=[
                pb.EntityData(entity_type="user", entity_name=f"tenant-{i % 5000}"),
                pb.EntityData(entity_type="client-id", entity_name=f"producer-{i % 300}"),
            ],
            key="producer_byte_rate",
            value=1_048_576.0 * (1 + i % 10),
        ),
    )


def percentiles_ms(samples_s: list[float]) -> dict[str, float]:
    samples = sorted(samples_s)
    return {
        "p50_ms": round(samples[len(samples) // 2] * 1000, 3),
        "p99_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1000, 3),
    }


# --- figures -------------------------------------------------------------------------------------------
def disk(b: Bench) -> dict:
    size = (16 if b.quick else 256) * MIB
    path = b.root / "raw-disk.bin"
    chunk = os.urandom(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t = time.perf_counter()
        for _ in range(size // MIB):
            os.write(fd, chunk)
        os.fsync(fd)
        write_s = time.perf_counter() - t
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        t = time.perf_counter()
        while os.read(fd, MIB):
            pass
        read_s = time.perf_counter() - t
    finally:
        os.close(fd)
    path.unlink()

    n = 50 if b.quick else 500
    block = os.urandom(4096)
    latencies = []
    fd = os.open(b.root / "fsync.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        (b.root / "fsync.bin").unlink()
    return {
        "write_bytes": size,
        "sequential_write_mb_per_s": round(size / write_s / MB, 1),
        "sequential_read_mb_per_s": round(size / read_s / MB, 1),
        "append_4k_fdatasync": {"samples": n, **percentiles_ms(latencies)},
    }


def _race(threads: int, work: Callable[[int], list[float]]) -> tuple[float, list[float]]:
    """``work(t)`` on ``threads`` threads released together: the wall time from the release until the last one
    is done, and every latency they returned."""
    barrier = threading.Barrier(threads + 1)
    latencies: list[float] = []

    def worker(t: int) -> None:
        barrier.wait()
        latencies.extend(work(t))

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    return time.perf_counter() - t0, latencies


def _frames(log: EventLog) -> int:
    return sum(len(s.load_index().bases) for s in log._segments)


def _appends(b: Bench, threads: int, per_thread: int) -> dict:
    directory = b.root / f"appends-{threads}"
    events = [[client_quota_event(t * per_thread + j) for j in range(per_thread)] for t in range(threads)]
    with EventLog.open(directory) as log:

        def work(t: int) -> list[float]:
            own = []
            for e in events[t]:
                start = time.perf_counter()
                log.append([e])
                own.append(time.perf_counter() - start)
            return own

        elapsed, latencies = _race(threads, work)
        frames = _frames(log)
    shutil.rmtree(directory)
    total = threads * per_thread
    return {
        "threads": threads,
        "appends": total,
        "appends_per_s": round(total / elapsed),
        "frames_fsynced": frames,
        "appends_per_frame": round(total / frames, 2),
        "latency": percentiles_ms(latencies),
    }


def _pipelined(b: Bench, threads: int, per_thread: int, window: int) -> dict:
    """``threads`` threads each keep up to ``window`` one-event appends in flight (``submit``, then ``wait``
    for the oldest); an event counts once ``wait`` returned, i.e. once it is durable."""
    directory = b.root / f"pipelined-{threads}"
    events = [[client_quota_event(t * per_thread + j) for j in range(per_thread)] for t in range(threads)]
    with EventLog.open(directory) as log:

        def work(t: int) -> list[float]:
            own = []
            in_flight: collections.deque = collections.deque()
            for e in events[t]:
                if len(in_flight) == window:
                    start, pending = in_flight.popleft()
                    pending.wait()
                    own.append(time.perf_counter() - start)
                in_flight.append((time.perf_counter(), log.submit([e])))
            for start, pending in in_flight:
                pending.wait()
                own.append(time.perf_counter() - start)
            return own

        elapsed, latencies = _race(threads, work)
        frames = _frames(log)
        assert log.end_offset == threads * per_thread
    shutil.rmtree(directory)
    total = threads * per_thread
    return {
        "threads": threads,
        "in_flight_per_thread": window,
        "events": total,
        "events_per_s": round(total / elapsed),
        "frames_fsynced": frames,
        "events_per_frame": round(total / frames, 2),
        "latency_submit_to_durable": percentiles_ms(latencies),
    }


def _batched(b: Bench, threads: int, per_thread: int, batch: int) -> dict:
    """``threads`` threads each appending ``batch`` events per call (one admin request's records)."""
    directory = b.root / f"batched-{threads}"
    calls = [
        [[client_quota_event((t * per_thread + j) * batch + k) for k in range(batch)] for j in range(per_thread)]
        for t in range(threads)
    ]
    with EventLog.open(directory) as log:

        def work(t: int) -> list[float]:
            for events in calls[t]:
                log.append(events)
            return []

        elapsed, _ = _race(threads, work)
        frames = _frames(log)
    shutil.rmtree(directory)
    total = threads * per_thread * batch
    return {
        "threads": threads,
        "events_per_append": batch,
        "events": total,
        "events_per_s": round(total / elapsed),
        "appends_per_s": round(threads * per_thread / elapsed),
        "frames_fsynced": frames,
        "events_per_frame": round(total / frames, 2),
    }


def _store_changes(b: Bench, threads: int, per_thread: int) -> dict:
    """``threads`` threads each making ``per_thread`` admin changes through ``ConfigStore``, one client-quota
    alteration per ``alter_client_quotas`` call (its own entity and request id), with fsync: what the
    controller's admin path sustains. A change counts once its call returned, i.e. once it is durable."""
    directory = b.root / f"store-{threads}"
    calls = [
        [
            ClientQuotaAlteration(
                {"user": f"tenant-{t}", "client-id": f"producer-{j}"}, [("producer_byte_rate", 1e6 + j)]
            )
            for j in range(per_thread)
        ]
        for t in range(threads)
    ]
    with ConfigStore.open(directory) as store:

        def work(t: int) -> list[float]:
            own = []
            for j, alteration in enumerate(calls[t]):
                start = time.perf_counter()
                [result] = store.alter_client_quotas(
                    [alteration], now_ms=T0 + j, principal="User:admin", request_id=f"bench-{t}-{j}"
                )
                own.append(time.perf_counter() - start)
                assert result.ok, result
            return own

        elapsed, latencies = _race(threads, work)
        frames = _frames(store.log)
        assert store.end_offset == threads * per_thread
    shutil.rmtree(directory)
    total = threads * per_thread
    return {
        "threads": threads,
        "changes": total,
        "changes_per_s": round(total / elapsed),
        "frames_fsynced": frames,
        "changes_per_frame": round(total / frames, 2),
        "latency": percentiles_ms(latencies),
    }


def appends(b: Bench) -> dict:
    return {
        "events_per_append": 1,
        "fsync": True,
        "one_thread": _appends(b, 1, 100 if b.quick else 2000),
        "sixteen_threads": _appends(b, 16, 20 if b.quick else 500),
        "sixteen_threads_ten_events": _batched(b, 16, 5 if b.quick else 100, 10),
        "sixteen_threads_pipelined": _pipelined(b, 16, 20 if b.quick else 1000, 8),
        "store_one_thread": _store_changes(b, 1, 100 if b.quick else 1000),
        "store_sixteen_threads": _store_changes(b, 16, 20 if b.quick else 250),
    }


def read(b: Bench) -> dict:
    directory = b.root / "log"
    batch = 1000
    t = time.perf_counter()
    with EventLog.open(directory, fsync=False) as log:
        for start in range(0, b.events, batch):
            log.append([client_quota_event(i) for i in range(start, min(start + batch, b.events))])
    build_s = time.perf_counter() - t
    b.log_dir = directory
    size = sum(p.stat().st_size for p in directory.glob("*.log"))
    t = time.perf_counter()
    log = EventLog.open(directory)
    open_s = time.perf_counter() - t
    try:
        best = float("inf")
        for _ in range(3):
            gc.collect()
            t = time.perf_counter()
            n = 0
            for _base, events in log.read_batches():
                n += len(events.kind)
            best = min(best, time.perf_counter() - t)
            assert n == b.events
        t = time.perf_counter()
        m = sum(1 for _ in log.read())
        per_event_s = time.perf_counter() - t
        assert m == b.events
        segments = len(log.segments())
    finally:
        log.close()
    return {
        "events": b.events,
        "events_per_frame": batch,
        "segments": segments,
        "bytes_on_disk": size,
        "bytes_per_event": round(size / b.events, 1),
        "write_fsync_false_events_per_s": round(b.events / build_s),
        "open_scan_s": round(open_s, 4),
        "read_batches_events_per_s": round(b.events / best),
        "read_events_per_s": round(b.events / per_event_s),
    }


def snapshot(b: Bench) -> dict:
    assert b.log_dir is not None
    directory = b.root / "snapshots"
    directory.mkdir()
    with EventLog.open(b.log_dir, read_only=True) as log:
        entries = log.read()  # every event as an entry: a snapshot file as large as the log
        header = pb.SnapshotHeader(end_offset=log.end_offset, last_commit_time_ms=T0 + b.events - 1)
        t = time.perf_counter()
        path = write_snapshot(directory, header, entries)
        write_s = time.perf_counter() - t
    b.snapshot_path = path
    gc.collect()
    t = time.perf_counter()
    head, batches = read_snapshot_batches(path)
    batches_s = time.perf_counter() - t
    del batches
    gc.collect()
    t = time.perf_counter()
    head, entries_iter = read_snapshot(path)
    n = sum(1 for _ in entries_iter)
    iterate_s = time.perf_counter() - t
    assert n == head.entry_count == b.events
    return {
        "entries": n,
        "bytes": path.stat().st_size,
        "write_s_including_log_read": round(write_s, 3),
        "read_snapshot_batches_s": round(batches_s, 3),
        "read_snapshot_iterated_s": round(iterate_s, 3),
        "read_snapshot_entries_per_s": round(n / iterate_s),
    }


def replay(b: Bench) -> dict:
    assert b.log_dir is not None
    with EventLog.open(b.log_dir, read_only=True) as log:
        best = {True: float("inf"), False: float("inf")}
        image = ConfigImage()
        for _ in range(3):
            for paused in (True, False):
                gc.collect()
                t = time.perf_counter()
                with gc_paused() if paused else contextlib.nullcontext():
                    image = ConfigImage()
                    for base, columns in log.read_batches():
                        image.replay_columns(base, columns)
                best[paused] = min(best[paused], time.perf_counter() - t)
        assert image.end_offset == b.events
        gc.collect()
        t = time.perf_counter()
        n = sum(len(columns.kind) for _, columns in log.read_batches())
        decode_s = time.perf_counter() - t
        assert n == b.events
    # the snapshot of the ``snapshot`` figure holds every event as an entry: the worst case for a snapshot
    assert b.snapshot_path is not None
    gc.collect()
    t = time.perf_counter()
    with gc_paused():
        header, frames = read_snapshot_batches(b.snapshot_path)
        from_entries = ConfigImage.from_snapshot(header, frames)
    every_entry_s = time.perf_counter() - t
    assert from_entries.client_quotas() == image.client_quotas()
    directory = b.root / "replay"
    shutil.copytree(b.log_dir, directory, ignore=shutil.ignore_patterns(".lock", "*.torn-*"))
    t = time.perf_counter()
    with ConfigStore.open(directory) as store:
        full_open_s = time.perf_counter() - t
        assert store.image == image
        t = time.perf_counter()
        path = store.write_snapshot()
        snapshot_write_s = time.perf_counter() - t
    t = time.perf_counter()
    with ConfigStore.open(directory) as store:
        snapshot_open_s = time.perf_counter() - t
        identical = store.image == image
    return {
        "events": b.events,
        "live_config_keys": len(image),
        "read_batches_baseline_events_per_s": round(b.events / decode_s),
        "replay_events_per_s": round(b.events / best[True]),
        "replay_events_per_s_gc_running": round(b.events / best[False]),
        "replay_from_snapshot_of_every_event_entries_per_s": round(b.events / every_entry_s),
        "store_open_full_replay_s": round(full_open_s, 3),
        "snapshot_write_s": round(snapshot_write_s, 3),
        "snapshot_bytes": path.stat().st_size,
        "store_open_from_snapshot_s": round(snapshot_open_s, 4),
        "events_covered_per_s_from_snapshot": round(b.events / snapshot_open_s),
        "image_from_snapshot_identical": identical,
    }


RECOVERY_CHILD = textwrap.dedent(
    """
    import sys, threading, uuid
    from quotaplane.config._log import EventLog
    from quotaplane.v1 import config_events_pb2 as pb

    log = EventLog.open(sys.argv[1])
    base = log.end_offset

    def worker(t):
        i = 0
        while True:
            n = base + t * 10**9 + i
            log.append([pb.Event(commit_time_ms=n, principal="User:admin", request_id=str(uuid.UUID(int=n)),
                                 client_quota=pb.ClientQuotaRecord(
                                     entity=[pb.EntityData(entity_type="user", entity_name=f"tenant-{i}")],
                                     key="producer_byte_rate", value=1e6))])
            i += 1

    for t in range(4):
        threading.Thread(target=worker, args=(t,), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()
    """
)


def recovery(b: Bench) -> dict:
    assert b.log_dir is not None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen(
        [sys.executable, "-c", RECOVERY_CHILD, str(b.log_dir)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(0.3 if b.quick else 1.0)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        child.kill()
        child.communicate(timeout=30)
    torn_before = len(list(b.log_dir.glob("*.torn-*")))
    t = time.perf_counter()
    with EventLog.open(b.log_dir) as log:
        warm_s = time.perf_counter() - t
        end = log.end_offset
        frames = sum(len(s.load_index().bases) for s in log._segments)
        paths = log.segments()
    for p in paths:  # clean pages (everything was fsynced), so they can be dropped
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    t = time.perf_counter()
    with EventLog.open(b.log_dir):
        cold_s = time.perf_counter() - t
    t = time.perf_counter()
    with EventLog.open(b.log_dir, full_recovery=True):
        full_s = time.perf_counter() - t
    return {
        "events_after_kill": end,
        "appended_by_child_before_kill": end - b.events,
        "frames": frames,
        "segments": len(paths),
        "bytes": sum(p.stat().st_size for p in paths),
        "torn_tail_cut": len(list(b.log_dir.glob("*.torn-*"))) > torn_before,
        "open_after_sigkill_s": round(warm_s, 4),
        "open_cold_cache_s": round(cold_s, 4),
        "open_full_recovery_s": round(full_s, 4),
    }


def _timed_open(directory: Path, segment_bytes: int, full_recovery: bool) -> tuple[float, int, int]:
    """One writable open, timed; then the log is dropped as a killed writer's is (no clean close, so the
    checkpoint stays what the rolls wrote). (seconds, end offset, segments scanned)."""
    t = time.perf_counter()
    log = EventLog.open(directory, segment_bytes=segment_bytes, fsync=False, full_recovery=full_recovery)
    elapsed = time.perf_counter() - t
    end, scanned = log.end_offset, sum(s.indexed for s in log._segments)
    log._release()
    return elapsed, end, scanned


def reopen_vs_size(b: Bench) -> dict:
    sizes = [2_000, 10_000] if b.quick else [10_000, 100_000, 500_000]
    out: dict[str, dict] = {}
    for segment_bytes in (1 * MIB, 16 * MIB):
        directory = b.root / f"reopen-{segment_bytes}"
        end = 0
        rows = {}
        for size in sizes:
            log = EventLog.open(directory, segment_bytes=segment_bytes, fsync=False)
            assert log.end_offset == end
            while end < size:
                end = log.append([client_quota_event(end), client_quota_event(end + 1)]) + 1
            active = log.segments()[-1]
            log._release()  # a kill: no clean close
            with active.open("ab") as f:  # and a torn last frame
                f.write(b"\xe7\x01" + bytes(30))
            times: dict[bool, list[float]] = {True: [], False: []}
            scanned: dict[bool, int] = {}
            for _ in range(3):
                for full in (True, False):
                    elapsed, opened_end, scanned[full] = _timed_open(directory, segment_bytes, full)
                    assert opened_end == end
                    times[full].append(elapsed)
            segments = len(list(directory.glob("*.log")))
            rows[str(size)] = {
                "events": end,
                "segments": segments,
                "bytes": sum(p.stat().st_size for p in directory.glob("*.log")),
                "reopen_recovery_point_ms": {
                    "best": round(min(times[False]) * 1000, 2),
                    "median": round(sorted(times[False])[1] * 1000, 2),
                },
                "reopen_full_scan_ms": {
                    "best": round(min(times[True]) * 1000, 2),
                    "median": round(sorted(times[True])[1] * 1000, 2),
                },
                "segments_scanned_recovery_point": scanned[False],
            }
        out[f"segment_bytes_{segment_bytes}"] = rows
        shutil.rmtree(directory, ignore_errors=True)
    return out


#: The figures, in order; each takes the Bench and returns its part of "results".
FIGURES: list[tuple[str, Callable[[Bench], dict]]] = [
    ("disk", disk),
    ("appends", appends),
    ("read", read),
    ("snapshot", snapshot),
    ("replay", replay),
    ("recovery", recovery),
    ("reopen_vs_size", reopen_vs_size),
]
#: Figures that need an earlier one's artefacts (``Bench.log_dir``, ``Bench.snapshot_path``).
_NEEDS = {"snapshot": ["read"], "replay": ["read", "snapshot"], "recovery": ["read"]}


def filesystem(path: Path) -> dict:
    """The file system type and mount point holding ``path`` (from /proc/self/mounts; no device names)."""
    real = os.path.realpath(path)
    best = ("", "unknown")
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                mount, fstype = parts[1].replace("\\040", " "), parts[2]
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best[0]):
                    best = (mount, fstype)
    except OSError:
        pass
    return {"type": best[1], "mount_point": best[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=None, help="events to write and read (default 1000000)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--dir", default=None, help="where to create the scratch directory (default: temp dir)")
    parser.add_argument("--figures", default=None, help="comma-separated figures to run (default: all)")
    args = parser.parse_args()
    wanted = None
    if args.figures:
        wanted = set()
        for name in args.figures.split(","):
            if name not in dict(FIGURES):
                parser.error(f"unknown figure {name!r} (known: {', '.join(n for n, _ in FIGURES)})")
            wanted.update([name, *_NEEDS.get(name, [])])
    events = args.events or (20_000 if args.quick else 1_000_000)
    root = Path(tempfile.mkdtemp(prefix="eventlog-bench-", dir=args.dir))
    try:
        b = Bench(root=root, quick=args.quick, events=events)
        results = {name: figure(b) for name, figure in FIGURES if wanted is None or name in wanted}
        report = {
            "benchmark": "eventlog",
            "workload": {
                "event": "client-quota change (user + client-id entity, producer_byte_rate) with principal and "
                "request id",
                "event_bytes_serialized": len(client_quota_event(123_456).SerializeToString()),
                "events": events,
                "quick": args.quick,
            },
            "results": results,
            "machine": {**machine(), "filesystem": filesystem(root)},
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
