"""``bench/eventlog.py --quick`` runs and reports every figure (its timings are not checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_eventlog_bench_quick(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "eventlog.py"), "--quick", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["benchmark"] == "eventlog"
    assert {"event", "events", "quick"} <= report["workload"].keys()
    assert {"processor", "cpu_count", "python_version", "filesystem"} <= report["machine"].keys()
    results = report["results"]
    assert set(results) == {"disk", "appends", "read", "snapshot", "replay", "recovery", "reopen_vs_size"}
    assert {"sequential_write_mb_per_s", "sequential_read_mb_per_s", "append_4k_fdatasync"} <= results["disk"].keys()
    assert {"p50_ms", "p99_ms"} <= results["disk"]["append_4k_fdatasync"].keys()
    for threads in ("one_thread", "sixteen_threads"):
        assert {"appends_per_s", "frames_fsynced", "latency"} <= results["appends"][threads].keys()
    assert {"read_batches_events_per_s", "open_scan_s"} <= results["read"].keys()
    assert results["read"]["events"] == results["snapshot"]["entries"] == report["workload"]["events"]
    assert {"read_snapshot_entries_per_s"} <= results["snapshot"].keys()
    assert {"open_after_sigkill_s", "open_cold_cache_s", "open_full_recovery_s"} <= results["recovery"].keys()
    for rows in results["reopen_vs_size"].values():
        for row in rows.values():
            assert {"events", "segments", "reopen_recovery_point_ms", "reopen_full_scan_ms"} <= row.keys()
    replay = results["replay"]
    assert {"replay_events_per_s", "read_batches_baseline_events_per_s", "store_open_from_snapshot_s"} <= replay.keys()
    assert replay["image_from_snapshot_identical"] is True
    assert 0 < replay["live_config_keys"] <= replay["events"]
    assert list(tmp_path.iterdir()) == []  # the scratch directory is removed
