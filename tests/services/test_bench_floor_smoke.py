"""``bench/floor.py --quick`` runs end to end and prints its JSON report (no timing asserts): every server of the
echo answered every batch (the bench raises on a wrong answer), and the floor is the sum of its parts."""

from __future__ import annotations

import math
import subprocess
import sys

from tests.support import BENCH, run_bench


def test_floor_bench_quick_prints_its_report(tmp_path):
    report = run_bench("floor.py", "--quick", "--batches", "20", "--batch", "300", timeout=180, cwd=tmp_path)
    assert set(report) >= {"workload", "figures", "machine"}
    assert report["workload"]["batch_items"] == 300
    for name, aim in (("one_batch", 3.0), ("one_item", 1.0)):
        figures = report["figures"][name]
        echo = figures["grpc_echo"]
        assert set(echo) == {"threads", "sync", "aio"}
        # 20 batches, the first 2 a warm-up
        assert {e["batches_timed"] for e in echo.values()} == {18} == {figures["direct_hop"]["batches_timed"]}
        assert all(0 < e["p50_ms"] <= e["p99_ms"] for e in (*echo.values(), figures["direct_hop"]))
        floor = figures["floor"]
        fastest = min(echo, key=lambda kind: echo[kind]["p50_ms"])
        assert floor["fastest_server"] == fastest and floor["grpc_echo_p50_ms"] == echo[fastest]["p50_ms"]
        parts = echo[fastest]["p50_ms"] + figures["direct_hop"]["p50_ms"] + figures["core"]["batch_p50_ms"]
        assert math.isclose(floor["floor_p50_ms"], parts, abs_tol=0.002)
        assert floor["aim_p50_ms"] == aim
        assert math.isclose(floor["left_for_gateway_and_shard_work_ms"], aim - floor["floor_p50_ms"], abs_tol=0.002)


def test_floor_bench_refuses_bad_flags(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCH / "floor.py"), "--batches", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "--batches must be >= 2" in done.stderr.strip().splitlines()[-1]
