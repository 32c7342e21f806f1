"""The shard count a new cluster starts with when ``up`` is given none."""

from __future__ import annotations

import os

import pytest

from quotaplane.services.launcher import DEFAULT_SHARDS
from quotaplane.services.launcher._common import default_shard_count


@pytest.mark.parametrize(("cpus", "shards"), [(1, 1), (2, 1), (3, 2), (4, 3), (16, 15)])
def test_one_shard_per_core_but_one_and_at_least_one(cpus: int, shards: int) -> None:
    """The process ``up`` runs in (gateway, frontends) keeps a core: on 2 cores two shards decided a third less
    than one (docs/performance.md, "The default shard count")."""
    assert default_shard_count(cpus) == shards


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="the affinity mask is Linux's")
def test_the_default_counts_the_cores_this_process_may_run_on() -> None:
    assert default_shard_count(len(os.sched_getaffinity(0))) == DEFAULT_SHARDS
