"""The machine a benchmark ran on, for its JSON report (no host name)."""

from __future__ import annotations

import os
import platform


def _processor() -> str:
    processor = platform.processor()
    if processor:
        return processor
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (a container's cpuset) where Linux has one, else all."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def machine() -> dict:
    info = {
        "python_version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),  # no hostname in it
        "machine": platform.machine(),
        "processor": _processor(),
        "cpu_count": os.cpu_count(),
    }
    if hasattr(os, "sched_getaffinity"):
        info["cpus_available"] = usable_cpus()
    if hasattr(os, "getloadavg"):
        # when the report is written: what else ran meanwhile (a 2-core machine at load 4 halves every figure)
        info["load_average_1_5_15m"] = [round(x, 2) for x in os.getloadavg()]
    return info
