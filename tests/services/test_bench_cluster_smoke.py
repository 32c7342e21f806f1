"""``bench/cluster_quota.py --quick`` runs end to end and prints its JSON report (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cluster_quota.py"


def test_cluster_quota_bench_quick_prints_its_report(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--items", "3000"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert set(report) >= {"workload", "figures", "machine"}
    assert set(report["figures"]) == {"core_in_process", "cluster"}
    [cluster] = report["figures"]["cluster"]
    assert set(cluster) >= {"shards", "decisions_per_s", "batch_p50_ms", "batch_p99_ms", "decisions_equal_core"}
    assert cluster["decisions_equal_core"] is True and cluster["errors"] == 0
    assert report["figures"]["core_in_process"]["decisions_per_s"] > 0
    sustained = cluster["half_load_sustained"]  # the --quick run's 3,000 items, paced at half the measured rate
    assert sustained["batches_timed"] > 0 and sustained["errors"] == 0
    assert sustained["batch_p50_ms"] <= sustained["batch_p99_ms"] <= sustained["batch_max_ms"]
    assert "half_load_sustained" in report["figures"]["core_in_process"]["phases"]
