"""Where the benchmarks' CPU goes: each part of the system under test, read from ``/proc`` (Linux only; ``{}`` or
None elsewhere).

``cpu_snapshot`` totals the CPU seconds each part used so far (the launching process's named Python threads, the
shard actors, Ray's raylet and GCS, any extra process), and ``cpu_us_per`` turns two snapshots into microseconds a
decision or a push. ``thread_schedules`` reads how each thread of a process spent its time: running, or runnable and
waiting for a CPU (the kernel's ``schedstat``), so a benchmark can tell a shard that is busy from one that is ready
to run but shares its core (``schedule_split``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from collections import Counter

from _machine import usable_cpus

__all__ = [
    "cpu_bound_per_s",
    "cpu_snapshot",
    "cpu_us_per",
    "descendants",
    "process_components",
    "ray_process_role",
    "schedule_split",
    "thread_schedules",
]

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if os.name == "posix" else None


def _process_cpu_s(pid: int) -> float:
    """CPU seconds of another process: its CPU-time clock (``clock_getcpuclockid``, nanoseconds), else utime +
    stime from ``/proc/<pid>/stat`` (clock ticks); 0 if it is gone."""
    try:
        clock = ctypes.c_int()
        if _LIBC is not None and _LIBC.clock_getcpuclockid(pid, ctypes.byref(clock)) == 0:
            return time.clock_gettime(clock.value)
    except (OSError, AttributeError):
        pass
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return 0.0


def _thread_component(name: str) -> str:
    if name.startswith("frontend-"):
        return "frontend_loop"
    if name.startswith("gateway-grpc"):
        return "gateway_grpc_threads"
    if name.startswith("gateway-shard"):
        return "gateway_shard_workers"
    return "launcher_other"  # the Ray driver, gRPC's own threads, the config poll, this script


def ray_process_role(pid: str) -> str | None:
    """What a process started by this one is, from its command line: ``shard``, ``controller``, ``raylet``,
    ``gcs_server``, or None (the binary's name for Ray's own, so a Python process naming one in an argument is
    not taken for it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ")
    except OSError:
        return None
    if b"ray::ShardActor" in cmd:
        return "shard"
    if b"ray::ConfigController" in cmd:
        return "controller"
    if cmd.split(b" ", 1)[0].endswith(b"/raylet"):
        return "raylet"
    if b"gcs_server" in cmd.split(b" ", 1)[0]:
        return "gcs_server"
    return None


#: ``cpu_snapshot``'s component of each role counted (the controller is idle in these benchmarks)
_CPU_COMPONENTS = {"shard": "shards", "raylet": "ray_system", "gcs_server": "ray_system"}


def process_components() -> dict[int, str]:
    """``pid -> component`` of the processes this one started that ``cpu_snapshot`` counts (shards, Ray's own)."""
    out = {}
    for pid in descendants():
        component = _CPU_COMPONENTS.get(ray_process_role(pid) or "")
        if component is not None:
            out[int(pid)] = component
    return out


def cpu_snapshot(extra: dict[str, int] | None = None, processes: dict[int, str] | None = None) -> dict[str, float]:
    """CPU seconds used so far by each part of the system under test (Linux; {} elsewhere): the Python threads
    of this process by name (``launcher_other``: the rest of the process, gRPC's C threads included), the
    shard actors and Ray's raylet / GCS by command line, and the ``extra`` processes (component -> pid).
    ``processes``: ``process_components()`` found once, for a caller sampling often (walking ``/proc`` for them
    costs milliseconds)."""
    if not os.path.isdir("/proc") or not hasattr(time, "pthread_getcpuclockid"):
        return {}
    out: Counter[str] = Counter()
    named = 0.0
    for thread in threading.enumerate():
        component = _thread_component(thread.name)
        if component == "launcher_other" or thread.ident is None:
            continue
        try:
            spent = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except OSError:  # it ended meanwhile
            continue
        out[component] += spent
        named += spent
    out["launcher_other"] = time.process_time() - named
    for pid, component in (process_components() if processes is None else processes).items():
        out[component] += _process_cpu_s(pid)
    for component, pid in (extra or {}).items():
        out[component] += _process_cpu_s(pid)
    return dict(out)


def descendants() -> list[str]:
    """The processes started by this one, directly or not (Ray's raylet, GCS and workers; not another
    cluster's on the same machine)."""
    parents: dict[str, str] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                    parents[pid] = f.read().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                continue
    me = str(os.getpid())
    out = []
    for pid in parents:
        seen, ancestor = 0, parents.get(pid)
        while ancestor not in (None, "0", "1", me) and seen < 64:
            ancestor, seen = parents.get(ancestor), seen + 1
        if ancestor == me:
            out.append(pid)
    return out


def cpu_us_per(before: dict[str, float], after: dict[str, float], clients_s: float, count: int) -> dict[str, float]:
    """Microseconds of CPU per operation by component (threads that ended in between count 0), and the total."""
    if not after or not count:
        return {}
    spent = {k: max(0.0, after[k] - before.get(k, 0.0)) for k in after}
    spent["load_clients"] = clients_s
    out = {k: round(v / count * 1e6, 1) for k, v in sorted(spent.items())}
    out["total"] = round(sum(spent.values()) / count * 1e6, 1)
    return out


def cpu_bound_per_s(cpu_us: dict[str, float], cpus: int | None = None) -> float | None:
    """The operations a second this machine's CPUs allow at ``cpu_us``'s total CPU an operation, every CPU used
    whole (``cpus``: ``_machine.usable_cpus()`` by default, the report's ``cpus_available``). A run's rate near it
    means the machine, not a wait, held it; well below it, waits did. The load's own clients count: on one machine
    they share its CPUs."""
    total = cpu_us.get("total")
    if not total:
        return None
    return round((usable_cpus() if cpus is None else cpus) * 1e6 / total, 1)


def thread_schedules(pid: int) -> dict[int, tuple[int, int]]:
    """``thread id -> (ns running, ns runnable and waiting for a CPU)`` of every thread of ``pid`` so far, from
    ``/proc/<pid>/task/<tid>/schedstat`` (the scheduler's own accounting; {} where the kernel has none)."""
    out: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                running, waiting, _slices = f.read().split()
        except (OSError, ValueError):
            continue
        out[int(tid)] = (int(running), int(waiting))
    return out


def schedule_split(
    before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], wall_s: float
) -> dict[str, float] | None:
    """How the busiest thread between two ``thread_schedules`` spent the ``wall_s`` seconds between them: the
    fractions ``on_cpu``, ``waiting_for_cpu`` (runnable: preempted, or woken and not yet run) and ``off_cpu``
    (blocked: on a socket, a lock, the GIL), and its ``thread_id``. None without a thread that ran."""
    deltas = {
        tid: (running - before.get(tid, (0, 0))[0], waiting - before.get(tid, (0, 0))[1])
        for tid, (running, waiting) in after.items()
    }
    if not deltas or wall_s <= 0:
        return None
    tid, (running, waiting) = max(deltas.items(), key=lambda entry: entry[1][0])
    if running <= 0:
        return None
    on_cpu, waiting_for_cpu = running / 1e9 / wall_s, waiting / 1e9 / wall_s
    return {
        "thread_id": tid,
        "on_cpu": round(on_cpu, 3),
        "waiting_for_cpu": round(waiting_for_cpu, 3),
        "off_cpu": round(max(0.0, 1.0 - on_cpu - waiting_for_cpu), 3),
    }
