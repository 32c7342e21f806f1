"""Where Ray places the controller and the shards: custom resources and SPREAD, on a real multi-raylet cluster.

``ray.cluster_utils.Cluster``, in a process of its own (tests/actors/placement_probe.py), runs four raylets on
this machine, shaped like the Kubernetes deployment: a head with no custom resources, two Ray workers offering
``quotaplane_shard`` (one also ``quotaplane_controller``: it has the event-log volume) and a 0-CPU "gateway"
raylet offering nothing. Actors that ask for no CPU and no custom resource may land on any of them (Ray's GCS
picks among all feasible nodes); with the resources they may only run, and be restarted, where those are offered.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quotaplane.actors import start_controller, start_shard
from tests.support import short_temp_dir

ROOT = Path(__file__).resolve().parents[2]
SHARD = "quotaplane_shard"


@pytest.fixture(scope="module")
def placement() -> dict[str, Any]:
    """tests/actors/placement_probe.py's answer (its own process: see its docstring)."""
    with short_temp_dir("qpr-") as root:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
        env |= {"RAY_TMPDIR": str(root), "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        done = subprocess.run(
            [sys.executable, "-m", "tests.actors.placement_probe", str(root)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        return json.loads(done.stdout.strip().splitlines()[-1])


def test_controller_runs_and_restarts_only_where_its_resource_is_offered(placement: dict[str, Any]) -> None:
    # unpinned 0-CPU actors land on any node (head, gateway raylet ...): three on the one offering it is no chance
    assert placement["controllers"] == ["worker_a"] * 3
    assert placement["restarted_controller"] == "worker_a"  # Ray restarted the killed one with the same request


def test_shards_spread_over_the_nodes_offering_the_shard_resource(placement: dict[str, Any]) -> None:
    # never the head or the gateway; both workers (without SPREAD, Ray packs all four on one of them)
    assert sorted(placement["shards"]) == ["worker_a", "worker_a", "worker_b", "worker_b"], placement
    # placed shards serve: subscribed and caught up with the controller's log
    assert placement["applied"] == [placement["end_offset"]] * 4


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"": 1}, "a resource name must be a non-empty string"),
        ({" qp": 1}, "leading or trailing spaces"),
        ({"CPU": 1}, "one of Ray's predefined resources"),
        ({SHARD: 0}, "must be > 0"),
        ({SHARD: -1}, "must be > 0"),
        ({SHARD: float("nan")}, "must be > 0"),
        ({SHARD: "1"}, "must be a number"),
        ({SHARD: True}, "must be a number"),
        ({SHARD: 0.00001}, "at least 0.0001"),
    ],
)
def test_bad_resources_are_a_value_error_before_anything_starts(resources, message, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"^shard resources: .*{message}"):
        start_shard(0, None, resources=resources)
    with pytest.raises(ValueError, match=f"^controller resources: .*{message}"):
        start_controller(tmp_path / "log", resources=resources)
