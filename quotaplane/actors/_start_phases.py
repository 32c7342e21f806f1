"""Where a shard's start goes: its process' start, its module's import, and each step of ``__init__``.

Why: a shard restarted by Ray after its node died is served again only once a worker process was started,
Ray and quotaplane imported, the log replayed and the usage checkpoint loaded; issue 19 asks for that within
2 s, so each part is measured in the process itself (``ShardActor.info()["start_phases_ms"]``, bench/chaos.py
reports it per fault) instead of guessed from outside.

The process' start is read from ``/proc/self/stat`` (clock ticks since boot, 10 ms resolution) against
``/proc/uptime``; elsewhere than Linux it is left out.
"""

from __future__ import annotations

import os
import time

__all__ = ["MODULE_IMPORTED_MS", "StartPhases", "process_started_ms"]


def _wall_ms() -> float:
    return time.time_ns() / 1_000_000


def process_started_ms() -> float | None:
    """Wall-clock ms when this process started, or None where ``/proc`` does not say."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
        now = _wall_ms()
        # fields after "pid (comm)": state is field 3, starttime field 22
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        return now - (uptime_s - start_ticks / os.sysconf("SC_CLK_TCK")) * 1000
    except (OSError, ValueError, IndexError):
        return None


#: when the module importing this one (the shard's) had its imports done: Ray, the quota core, the config
MODULE_IMPORTED_MS = _wall_ms()


class StartPhases:
    """Marks the end of each step of a start; ``done`` gives the ms of each, in order."""

    def __init__(self) -> None:
        self._marks: list[tuple[str, float]] = [("init_entered", _wall_ms())]

    def mark(self, name: str) -> None:
        self._marks.append((name, _wall_ms()))

    def done(self, init_started_ms: float) -> dict[str, float]:
        """``{"process_to_imported", "imported_to_init", <each step>...: ms}`` (``process_to_imported`` left out
        when the process' start is unknown; ``imported_to_init`` is Ray fetching the class and calling it)."""
        phases: dict[str, float] = {}
        started = process_started_ms()
        if started is not None:
            phases["process_to_imported"] = round(max(MODULE_IMPORTED_MS - started, 0.0), 1)
        phases["imported_to_init"] = round(max(min(init_started_ms, self._marks[0][1]) - MODULE_IMPORTED_MS, 0.0), 1)
        previous = self._marks[0][1]
        for name, at in self._marks[1:]:
            phases[name] = round(at - previous, 1)
            previous = at
        return phases
