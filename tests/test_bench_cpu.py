"""``bench/_cpu.py``: the benchmarks' reading of where CPU goes, on this process's own threads (real ``/proc``)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _cpu import cpu_bound_per_s, cpu_snapshot, cpu_us_per, schedule_split, thread_schedules

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc")


def _spin(stop: threading.Event, native: list[int]) -> None:
    native.append(threading.get_native_id())
    while not stop.is_set():
        sum(range(1000))


def test_the_busiest_thread_and_how_it_spent_the_window():
    if not Path(f"/proc/self/task/{threading.get_native_id()}/schedstat").exists():
        pytest.skip("this kernel keeps no schedstat")
    stop, native = threading.Event(), []
    spinner = threading.Thread(target=_spin, args=(stop, native))
    spinner.start()
    try:
        while not native:
            time.sleep(0.001)
        before, t0 = thread_schedules(os.getpid()), time.perf_counter()
        time.sleep(0.4)  # this thread blocked: the spinner is the busiest
        after, wall = thread_schedules(os.getpid()), time.perf_counter() - t0
    finally:
        stop.set()
        spinner.join()
    split = schedule_split(before, after, wall)
    assert split is not None and split["thread_id"] == native[0]
    assert split["on_cpu"] > 0.2  # it spun, sharing the GIL with nothing else busy in this process
    assert 0.0 <= split["waiting_for_cpu"] <= 1.0 and 0.0 <= split["off_cpu"] <= 1.0
    # fractions of the window: the kernel's nanoseconds over the wall seconds (a unit slip would be 1e9 off); the
    # two reads are not atomic, hence the slack
    assert split["on_cpu"] + split["waiting_for_cpu"] <= 1.05
    # each thread's own running time only grows between the two reads (the same thread ids, the same field)
    assert all(after[tid][0] >= running for tid, (running, _) in before.items() if tid in after)


def test_no_thread_that_ran_is_no_split():
    assert schedule_split({}, {}, 1.0) is None
    assert schedule_split({7: (5, 0)}, {7: (5, 3)}, 1.0) is None  # it did not run in the window
    assert schedule_split({7: (0, 0)}, {7: (10**8, 10**8)}, 0.0) is None


def test_the_split_of_given_counters():
    # 0.5 s running and 0.25 s waiting for a CPU out of 1 s: a quarter blocked; the busier thread is taken
    split = schedule_split({1: (0, 0), 2: (0, 0)}, {1: (5 * 10**8, 25 * 10**7), 2: (10**8, 0)}, 1.0)
    assert split == {"thread_id": 1, "on_cpu": 0.5, "waiting_for_cpu": 0.25, "off_cpu": 0.25}


def test_cpu_a_decision_by_component():
    stop, native = threading.Event(), []
    before = cpu_snapshot(processes={})
    spinner = threading.Thread(target=_spin, args=(stop, native), name="gateway-shard-test")
    spinner.start()
    time.sleep(0.2)
    after = cpu_snapshot(processes={})  # read while the thread lives: an ended thread's time is not counted
    stop.set()
    spinner.join()
    per = cpu_us_per(before, after, 0.5, 1000)
    assert per["gateway_shard_workers"] > 0  # the spinner's CPU, under its thread name's component
    assert per["load_clients"] == 500.0  # 0.5 s of the load's own CPU over 1000 decisions
    assert per["total"] >= per["gateway_shard_workers"] + per["load_clients"]


def test_what_the_cpus_allow_at_a_runs_cpu_an_operation():
    assert cpu_bound_per_s({"shards": 2.5, "total": 4.0}, cpus=2) == 500_000.0  # 2 CPU-seconds a second / 4 us
    assert cpu_bound_per_s({"total": 100.0}, cpus=2) == 20_000.0
    # by default the CPUs this process may run on (a container's cpuset), not the machine's count
    assert cpu_bound_per_s({"total": 1.0}) == len(os.sched_getaffinity(0)) * 1e6
    assert cpu_bound_per_s({}) is None  # no reading: no bound
    assert cpu_bound_per_s({"total": 0.0}, cpus=2) is None
