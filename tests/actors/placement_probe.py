"""Places the controller and shards on a four-raylet Ray cluster and prints where they ran, as JSON.

Run by tests/actors/test_placement_resources.py in a process of its own (``python -m
tests.actors.placement_probe``): a ``ray.cluster_utils.Cluster`` started in a pytest process that already
ran and shut down another Ray session saw its first actor cancelled as unreferenced, so the multi-raylet
cluster gets a fresh driver process.

The cluster is shaped like the Kubernetes deployment: a head with no custom resources (the driver attaches
there, as the bootstrap ``up`` does in the head pod), two Ray workers offering ``quotaplane_shard`` (one also
``quotaplane_controller``: it has the event-log volume) and a 0-CPU "gateway" raylet offering nothing.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import ray

from quotaplane.actors import start_controller, start_shard

SHARD = "quotaplane_shard"
CONTROLLER = "quotaplane_controller"


def _wait_for_restart(handle, pid: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ray.get(handle.info.remote(), timeout=5)["pid"] != pid:
                return
        except Exception:  # restarting
            pass
        time.sleep(0.2)
    raise AssertionError(f"the controller was not restarted in {timeout_s:g} s")


def main() -> None:
    from ray.cluster_utils import Cluster

    root = Path(sys.argv[1])
    temp_dir = root / "ray"  # Ray writes ray_current_cluster to $RAY_TMPDIR/ray
    temp_dir.mkdir(parents=True)
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "temp_dir": str(temp_dir), "include_dashboard": False}
    )
    try:
        nodes = {
            cluster.add_node(num_cpus=0, resources={SHARD: 100, CONTROLLER: 1}).node_id: "worker_a",
            cluster.add_node(num_cpus=0, resources={SHARD: 100}).node_id: "worker_b",
            cluster.add_node(num_cpus=0).node_id: "gateway",
            cluster.head_node.node_id: "head",
        }
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="quotaplane-placement", log_to_driver=False)
        logs = Path(tempfile.mkdtemp(prefix="log-", dir=root))
        # three controllers asking for 0.3 each all fit on worker_a only
        controllers = [
            start_controller(logs / str(i), name=f"pinned-controller-{i}", fsync=False, resources={CONTROLLER: 0.3})
            for i in range(3)
        ]
        placed_controllers = [nodes[n] for n in ray.get([c.node.remote() for c in controllers], timeout=60)]
        victim = controllers[-1]
        pid = ray.get(victim.info.remote(), timeout=30)["pid"]
        ray.kill(victim, no_restart=False)  # a crash: Ray restarts it, with the same resource request
        _wait_for_restart(victim, pid)
        restarted_on = nodes[ray.get(victim.node.remote(), timeout=30)]

        controller = controllers[0]
        shards = [
            start_shard(i, controller, name=f"spread-shard-{i}", resources={SHARD: 1}, spread=True) for i in range(4)
        ]
        placed_shards = [nodes[n] for n in ray.get([s.node.remote() for s in shards], timeout=60)]
        end = ray.get(controller.end_offset.remote(), timeout=30)
        applied = [ray.get(s.progress.remote(), timeout=30)["applied_offset"] for s in shards]
        print(
            json.dumps(
                {
                    "controllers": placed_controllers,
                    "restarted_controller": restarted_on,
                    "shards": placed_shards,
                    "end_offset": end,
                    "applied": applied,
                }
            )
        )
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
