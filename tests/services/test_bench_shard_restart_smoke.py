"""``bench/shard_restart.py`` on a short run: a tenant over its quota, the shard SIGKILLed once with its usage
checkpoints and once without. The report has its sections, the restored windows were at most a few checkpoint
intervals old, and the run without a checkpoint admitted more after the kill than the one with (the point of
the checkpoint); no timing is asserted (the machine is shared)."""

from __future__ import annotations

from tests.support import run_bench


def test_shard_restart_bench_shows_what_the_checkpoint_saves(tmp_path):
    # 8 s of load at twice the quota before the kill (12 s with --quick alone): the tenant is over its quota at the
    # kill (Kafka's rate divides by at least 10 of the 11 one-second samples: 1.6 x the quota), so the restored
    # windows throttle it and empty ones do not, which is what the asserts compare
    report = run_bench("shard_restart.py", "--quick", "--warm-s", "8", "--after-s", "4", timeout=300, cwd=tmp_path)
    assert set(report) >= {"workload", "figures", "machine"}
    with_checkpoint, without = report["figures"]["checkpoint"], report["figures"]["no_checkpoint"]
    assert with_checkpoint["restored_sensors"] >= 1 and with_checkpoint["restored_usage_age_ms"] is not None
    assert without["restored_sensors"] == 0 and without["restored_usage_age_ms"] is None
    assert without["over_admission_bytes"] > with_checkpoint["over_admission_bytes"]
    # the bound the gateway exports covers what was measured (a restart without a checkpoint loses the window)
    assert without["over_admission_bound_bytes"] >= without["over_admission_bytes"] > 0
