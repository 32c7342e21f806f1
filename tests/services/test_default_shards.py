"""The shard count a new cluster starts with when ``up`` is given none."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from quotaplane.services.launcher._common import default_shard_count


@pytest.mark.parametrize(("cpus", "shards"), [(1, 1), (2, 1), (3, 2), (4, 3), (16, 15)])
def test_one_shard_per_core_but_one_and_at_least_one(cpus: int, shards: int) -> None:
    """The process ``up`` runs in (gateway, frontends) keeps a core: on 2 cores two shards decided a third less
    than one (docs/performance.md, "The default shard count")."""
    assert default_shard_count(cpus) == shards


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="the affinity mask is Linux's")
def test_the_default_counts_the_cores_this_process_may_run_on() -> None:
    """A process confined to one core (as a container's cpuset confines it) counts one, not the machine's cores."""
    code = (
        "import os; from quotaplane.services.launcher import DEFAULT_SHARDS;"
        "from quotaplane.services.launcher._common import _usable_cpus;"
        "print(_usable_cpus(), os.cpu_count(), DEFAULT_SHARDS)"
    )
    one_core = min(os.sched_getaffinity(0))
    done = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: os.sched_setaffinity(0, {one_core}),
        capture_output=True,
        text=True,
        check=True,
    )
    usable, machine, shards = map(int, done.stdout.split())
    assert usable == 1 and shards == default_shard_count(1)
    assert machine == os.cpu_count()  # the machine's count was there to be (wrongly) taken
