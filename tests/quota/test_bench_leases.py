"""``bench/leases.py --quick``: the simulation on the real core and lease code, in simulated time (deterministic:
a seed, no clock), so its accuracy figures are results of the code, not of the machine. They must stay within
what docs/scaling.md states for leased mode (over-admission at most 2 % of exact mode per entity, under-admission
at most 10 %), with most decisions local; no timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "leases.py"


def test_leased_mode_admits_what_exact_mode_admits_within_the_stated_accuracy(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert set(report) >= {"workload", "results", "machine"}
    results = report["results"]
    for phase in ("steady", "after_demand_moved"):
        figures = results[phase]
        assert figures["entities"] == report["workload"]["entities"]
        assert figures["over_admission_max"] <= 0.02, figures
        assert figures["under_admission_max"] <= 0.10, figures
    assert results["admitted_over_quota_exact"] > 0.9  # the overload reached the quota: the comparison means something
    assert results["local_decision_fraction"] > 0.9
    assert results["shard_calls_per_simulated_s"]["leased"] < results["shard_calls_per_simulated_s"]["exact"] / 10
