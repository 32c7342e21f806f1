"""``bench/cluster_quota.py --quick`` runs end to end and prints its JSON report (no timing asserts)."""

from __future__ import annotations

import os

from tests.support import run_bench


def test_cluster_quota_bench_quick_prints_its_report(tmp_path):
    # readings every 5 ms, so the short main phase holds several (the full run reads every 100 ms)
    report = run_bench(
        "cluster_quota.py", "--quick", "--items", "20000", "--cpu-sample-ms", "5", timeout=180, cwd=tmp_path
    )
    assert set(report) >= {"workload", "figures", "machine"}
    assert set(report["figures"]) == {"core_in_process", "cluster"}
    [cluster] = report["figures"]["cluster"]
    assert set(cluster) >= {"shards", "decisions_per_s", "batch_p50_ms", "batch_p99_ms", "decisions_equal_core"}
    assert cluster["decisions_equal_core"] is True and cluster["errors"] == 0
    assert report["figures"]["core_in_process"]["decisions_per_s"] > 0
    sustained = cluster["half_load_sustained"]  # --quick's 6,000 items, paced at half the measured rate
    assert sustained["batches_timed"] > 0 and sustained["errors"] == 0
    # the cluster runs the phase's --sustained-items (capped by --quick), not its full-run default
    workload = report["workload"]
    most_batches = -(-workload["sustained_items"] // workload["batch_items"]) + workload["streams"]
    assert sustained["batches_timed"] <= most_batches
    assert sustained["batch_p50_ms"] <= sustained["batch_p99_ms"] <= sustained["batch_max_ms"]
    assert "half_load_sustained" in report["figures"]["core_in_process"]["phases"]
    # where the main phase's time went: each part's CPU a decision, and the one shard's serving thread
    cpu = cluster["cpu_us_per_decision"]
    assert {"shards", "gateway_shard_workers", "load_clients", "total"} <= set(cpu)
    assert cpu["shards"] > 0 and cpu["total"] >= cpu["shards"] + cpu["load_clients"]
    cpus = len(os.sched_getaffinity(0))  # the bound every CPU this run may use gives at that CPU a decision
    assert cluster["cpu_bound_decisions_per_s"] == round(cpus * 1e6 / cpu["total"], 1)
    [serving] = cluster["shard_serving_threads"]
    assert serving["on_cpu"] > 0
    assert serving["on_cpu"] + serving["waiting_for_cpu"] <= 1.05  # fractions of the window, the reads' skew aside
    # the core measured again right after the cluster: the ratio against the two around it
    before, after = cluster["core_decisions_per_s_around"]
    assert before == report["figures"]["core_in_process"]["decisions_per_s"] and after > 0
    assert cluster["of_core_around"] == round(cluster["decisions_per_s"] / ((before + after) / 2), 3)
