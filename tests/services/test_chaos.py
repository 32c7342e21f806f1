"""Chaos under load, bounded: ``bench/chaos.py`` with one shard kill and then one controller kill (SIGKILL of
the actor's process, Ray restarts it) while usage streams through the gateway and admin changes go in every
100 ms, retried with their request id. Checked on what the clients saw and on the cluster afterwards:

- no acknowledged config change is lost: each is in the controller's image and in every shard's image, and the
  log's history holds its request id exactly once (a retry after a lost answer appended nothing);
- the shards reach the controller's end offset and their client quotas equal the controller's;
- usage answers resume within ``BOUND_S`` after each kill (the measured times are printed), and admin changes
  are acknowledged again within it after the controller's;
- clients saw no error but UNAVAILABLE, and none outside a fault's outage.

A second run takes a Ray node and a gateway host down instead, on a cluster of raylets on this machine: every
process of a worker node that hosts a shard gets SIGKILL (a machine dying; Ray's health checks run as the Helm
chart sets them, ``NODE_FAILURE_DETECTION``: the node's death is noticed in ~0.5 s instead of Ray's ~15 s), and
the ``quotaplane up --ray-address`` process the clients talk to gets SIGKILL and is started again.

The Kafka proxy's part (librdkafka producers and a consumer: exactly once through the faults) is the
benchmark's alone (``bench/chaos.py`` with Tansu installed): it adds Tansu and three client processes to a
suite that shares two cores. The runs are real: nothing is mocked; about 50 s and 70 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"
#: A generous bound on recovery. Measured on the shared 2-core machine: 3-6 s for a shard and 3-5 s for the
#: controller at a load average of ~15, up to 25 s at ~30 (most of it Ray starting a worker process and
#: importing it), hence the margin
BOUND_S = 30.0


def _chaos(tmp_path: Path, *flags: str, timeout_s: float) -> tuple[dict, subprocess.CompletedProcess[str]]:
    """``bench/chaos.py`` without the proxy, bounded by ``BOUND_S``: its JSON report and the finished process."""
    done = subprocess.run(
        [sys.executable, str(BENCH), "--no-proxy", "--recovery-bound-s", str(BOUND_S), *flags],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=tmp_path,
    )
    assert done.stdout, done.stderr[-3000:]
    return json.loads(done.stdout), done


def _assert_every_acknowledged_change_applied_once(config: dict) -> None:
    assert config["shards_converged"], config["applied_offsets"]
    assert set(config["applied_offsets"].values()) == {config["end_offset"]}
    assert config["acknowledged"] > 0 and config["acknowledged"] == config["changes_sent"]
    assert config["acknowledged_in_controller"] == config["acknowledged"]
    assert config["acknowledged_in_every_shard"] == config["acknowledged"]
    assert config["acknowledged_never_applied"] == 0
    assert config["request_ids_applied_more_than_once"] == 0, config["duplicated_request_ids"]
    assert all(config["shard_images_equal_controller"].values())


def test_a_shard_kill_and_a_controller_kill_under_load_lose_nothing(tmp_path):
    report, done = _chaos(
        tmp_path,
        *("--seconds", "30", "--faults", "shard,controller", "--fault-interval-s", "10", "--tail-s", "12"),
        *("--seed", "18"),
        timeout_s=240,
    )
    results = report["results"]
    print(json.dumps({k: results[k] for k in ("faults", "recovery_s", "usage_recovery_s", "usage", "admin")}))

    faults = results["faults"]
    assert [f["kind"] for f in faults] == ["shard", "controller"]
    assert all(f["new_pid"] != f["old_pid"] for f in faults), "a kill did not restart the process"
    shard, controller = faults
    assert shard["recovery_s"] is not None and shard["recovery_s"] <= BOUND_S, shard
    assert controller["recovery_s"] is not None and controller["recovery_s"] <= BOUND_S, controller
    assert controller["usage_recovery_s"] is not None and controller["usage_recovery_s"] <= BOUND_S, controller

    _assert_every_acknowledged_change_applied_once(results["config"])
    # the controller's outage made some change wait: it was retried with its request id and acknowledged once
    assert results["admin"]["retried_changes"] >= 1

    usage = results["usage"]
    assert usage["batches_answered"] > 0
    assert set(usage["errors"]) <= {"UNAVAILABLE"}, usage["error_samples"]
    assert results["non_unavailable_errors"] == {}
    assert results["errors_outside_outages_count"] == 0, results["errors_outside_outages"]
    assert report["failures"] == []
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_ray_node_kill_and_a_gateway_host_kill_under_load_lose_nothing(tmp_path):
    report, done = _chaos(
        tmp_path,
        *("--seconds", "36", "--faults", "node,host", "--fault-interval-s", "13", "--tail-s", "10"),
        *("--seed", "19"),
        timeout_s=300,
    )
    results = report["results"]
    print(json.dumps({k: results[k] for k in ("faults", "recovery_s", "usage")}))

    node, host = results["faults"]
    assert node["kind"] == "node" and host["kind"] == "host"
    # the node's shards came back in new processes on another node, and their streams were answered again
    assert node["shards"] and node["restarted_on_another_node"], node
    assert all(node["new_pid"][name] != node["old_pid"][name] for name in node["shards"])
    assert node["recovery_s"] is not None and node["recovery_s"] <= BOUND_S, node
    # the gateway host is a new process, and every usage stream came back through it
    assert host["new_pid"] != host["old_pid"]
    assert host["recovery_s"] is not None and host["recovery_s"] <= BOUND_S, host

    _assert_every_acknowledged_change_applied_once(results["config"])

    usage = results["usage"]
    assert usage["batches_answered"] > 0
    assert set(usage["errors"]) <= {"UNAVAILABLE", "STREAM_UNAVAILABLE"}, usage["error_samples"]
    assert results["errors_outside_outages_count"] == 0, results["errors_outside_outages"]
    assert report["failures"] == []
    assert done.returncode == 0, done.stderr[-3000:]
