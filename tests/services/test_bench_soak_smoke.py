"""``bench/soak.py`` on a tiny load for a few seconds: its JSON report has every section and series, no
request failed, and the plot was written (no flatness or timing asserts: too short, the machine is shared)."""

from __future__ import annotations

import json

from tests.support import run_bench


def test_soak_bench_tiny_run_writes_its_report_and_plot(tmp_path):
    out = tmp_path / "out"
    printed = run_bench(
        "soak.py",
        # 9 s sampled every 1.5 s: 6 samples (the asserts need 4, and thirds of them to judge a trend)
        *("--minutes", "0.15", "--sample-s", "1.5", "--decisions-per-s", "3000", "--kafka-clients", "10"),
        *("--admin-every-s", "1", "--shards", "1", "--out", str(out)),
        timeout=240,
        cwd=tmp_path,
        exit_codes=(0, 1),  # 1: a series not flat, possible in 9 s
    )
    report = json.loads((out / "soak.json").read_text())
    assert {k: v for k, v in report.items() if k != "samples"} == printed
    assert set(report) >= {"workload", "run", "summary", "samples", "machine", "outputs"}
    assert (out / "soak.png").stat().st_size > 10_000 and report["outputs"]["png"] == str(out / "soak.png")
    samples = report["samples"]
    assert len(samples) >= 4
    assert [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples)
    for sample in samples:
        assert {"launcher", "controller", "shard-0"} <= set(sample["processes"])
        for figures in sample["processes"].values():
            assert figures["rss_kb"] > 0 and figures["fds"] > 0 and figures["threads"] > 0
    assert sum(s["usage"]["batches"] for s in samples) > 0
    assert sum(s["push"]["pushes"] for s in samples) > 0
    assert sum(s["admin"]["calls"] for s in samples) > 0
    summary = report["summary"]
    assert summary["errors"] == {"usage": 0, "push": 0, "admin": 0, "frontend_unexpected": 0}
    assert summary["restarts"] == {}
    for name in ("launcher", "controller", "shard-0"):
        for metric in ("rss_kb", "fds", "threads"):
            series = summary["series"][f"{name}.{metric}"]
            assert series["judged"] is True and series["flat"] in (True, False)
    assert {"usage.p99_ms", "push.p99_ms"} <= set(summary["series"])
    assert summary["flat"] == (not summary["not_flat"] and not summary["undecided"])
    assert report["workload"]["usage"]["offered_decisions_per_s"] == 3000
