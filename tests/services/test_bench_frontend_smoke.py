"""``bench/frontend.py --quick`` runs end to end and prints its JSON report: the frontend before the cluster, the
gateway-only path, and the frontend alone before an echo gateway (no timing asserts)."""

from __future__ import annotations

import os

from tests.support import run_bench

CLIENTS = 60


def test_frontend_bench_quick_prints_its_three_runs(tmp_path):
    report = run_bench(
        "frontend.py",
        "--quick",
        "--clients",
        str(CLIENTS),
        "--seconds",
        "1.5",
        "--shards",
        "1",
        timeout=300,
        cwd=tmp_path,
    )
    assert set(report) >= {"workload", "figures", "machine"}
    figures = report["figures"]
    assert set(figures) == {"frontend", "gateway_only", "frontend_alone"}
    for name in ("frontend", "frontend_alone"):
        run = figures[name]
        assert run["concurrent_connections"] == CLIENTS, name
        assert run["server"]["unexpected_errors"] == 0, name
        assert run["pushes_accepted"] > 0, name
        # every push answered without an error: "72:<error code>"
        assert set(run["response_codes"]) == {"71:0", "72:0"}, (name, run["response_codes"])
        assert run["push_latency_p50_ms"] <= run["push_latency_p99_ms"], name
        assert 0 < run["pacing_bound_pushes_per_s"] < run["offered_pushes_per_s"], name
        assert run["cpu_us_per_push"]["frontend_loop"] > 0, name
        # what the CPUs this run may use allow at its CPU a push (the load's clients counted: they share them)
        cpus = len(os.sched_getaffinity(0))
        assert run["cpu_bound_pushes_per_s"] == round(cpus * 1e6 / run["cpu_us_per_push"]["total"], 1), name
    alone = figures["frontend_alone"]["cpu_us_per_push"]
    assert alone["gateway_echo"] > 0  # the echo's process is measured, and nothing of the cluster is
    assert "shards" not in alone
    assert figures["gateway_only"]["pushes_per_s"] > 0
