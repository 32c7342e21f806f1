"""``bench/reshard.py`` on a short run: 2 -> 4 -> 3 shards under overload. The report has its sections, both
reshards moved usage windows with no hand-over failure, and every decision was the in-process core's (so no
byte was over-admitted); no timing is asserted (the machine is shared)."""

from __future__ import annotations

from tests.support import run_bench


def test_reshard_bench_moves_windows_and_decides_as_the_core(tmp_path):
    report = run_bench(
        "reshard.py",
        *("--tenants", "40", "--warm-s", "3", "--between-s", "1", "--after-s", "1"),
        timeout=300,
        cwd=tmp_path,
    )
    assert set(report) >= {"workload", "figures", "machine"}
    figures = report["figures"]
    assert [(r["from"], r["to"]) for r in figures["reshards"]] == [(2, 4), (4, 3)]
    assert all(r["sensors_moved"] > 0 and r["hand_over_failures"] == 0 for r in figures["reshards"])
    assert figures["decisions_equal_core"] is True and figures["items_failed"] == 0
    assert figures["over_admission_bytes_total"] == 0.0
    assert figures["phases"]["before"]["core_admitted_bytes"] > 0  # windows filled: the comparison means something
