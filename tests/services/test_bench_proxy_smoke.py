"""``bench/proxy.py --quick`` runs end to end against a real Tansu and prints its JSON report (no timing
asserts: the figures depend on the machine, only their presence and the counts are checked)."""

from __future__ import annotations

from tests.support import run_bench


def test_proxy_bench_quick_prints_its_report(tmp_path):
    report = run_bench(
        "proxy.py",
        *("--quick", "--messages", "2000", "--latency-messages", "50"),
        # each fleet-budget run: 2 s of load, its second counted as after the warm-up (the keys asserted below)
        *("--budget-seconds", "2", "--warmup-seconds", "1"),
        timeout=300,
        cwd=tmp_path,
    )
    assert report["benchmark"] == "proxy"
    assert set(report) >= {"workload", "results", "machine"}
    assert set(report["results"]) >= {"unthrottled", "fleet_budget"}
    unthrottled = report["results"]["unthrottled"]
    assert set(unthrottled) >= {"direct", "proxy", "ratios", "added_p99_ms"}
    for target in ("direct", "proxy"):
        assert set(unthrottled[target]) == {"produce", "consume", "latency"}
        assert unthrottled[target]["produce"]["messages_acked"] == 2000
        assert unthrottled[target]["consume"]["messages"] == 2000
        assert set(unthrottled[target]["produce"]) >= {"mb_per_s", "msgs_per_s", "delivery_p50_ms", "delivery_p99_ms"}
        assert set(unthrottled[target]["latency"]) >= {"p50_ms", "p99_ms"}
    assert set(unthrottled["ratios"]) >= {"produce_mb_per_s", "consume_mb_per_s"}
    budget = report["results"]["fleet_budget"]
    assert set(budget) >= {
        "quota_bytes_per_s",
        "one_proxy",
        "two_proxies",
        "two_over_one_whole_run",
        "two_producers_one_proxy",
    }
    for run, proxies in (("one_proxy", 1), ("two_proxies", 2)):
        assert budget[run]["proxies"] == proxies
        assert budget[run]["errors"] == 0 and budget[run]["acked_bytes"] > 0
        assert set(budget[run]) >= {
            "whole_run_bytes_per_s",
            "whole_run_ratio",
            "after_warmup_bytes_per_s",
            "after_warmup_ratio",
            "client_throttle_max_ms",
        }
