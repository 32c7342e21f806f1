"""A SIGKILLed shard restarted by Ray keeps its usage windows through its checkpoint (real Ray)."""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import ray

from quotaplane.actors import start_controller, start_shard
from quotaplane.actors.controller import wall_clock_ms
from quotaplane.config import ClientQuotaAlteration
from quotaplane.quota import ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType

from .conftest import wait_for

pytestmark = pytest.mark.usefixtures("ray_cluster")

_names = itertools.count()
CHECKPOINT = "usage-checkpoint.bin"


def _setup(tmp_path: Path, interval_s: float) -> tuple[Any, Any, Path]:
    prefix = f"ckpt{next(_names)}-{os.getpid()}"
    controller = start_controller(tmp_path / "log", name=f"{prefix}-controller")
    shard_dir = tmp_path / "shards" / "0"
    shard = start_shard(
        0, controller, name=f"{prefix}-shard", data_dir=str(shard_dir), checkpoint_interval_s=interval_s
    )
    alteration = ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 1000.0)])
    assert all(r.ok for r in ray.get(controller.alter_client_quotas.remote([alteration], now_ms=wall_clock_ms())))
    wait_for(lambda: ray.get(shard.applied_offset.remote()), until=lambda v: v == 1)
    return controller, shard, shard_dir


def _kill(shard: Any) -> dict[str, Any]:
    """SIGKILL the shard's process; the info of the incarnation Ray starts instead."""
    pid = ray.get(shard.info.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    return wait_for(lambda: ray.get(shard.info.remote(), timeout=5), until=lambda i: i["pid"] != pid, timeout_s=60)


def _core() -> ClientQuotaManager:
    core = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    core.update_quota(ClientQuotaEntity(user="alice"), 1000.0)
    return core


def test_a_killed_shard_restores_its_windows_from_the_checkpoint(tmp_path: Path) -> None:
    controller, shard, _ = _setup(tmp_path, interval_s=0.2)
    try:
        t0 = wall_clock_ms()
        burst = [("alice", "c", 6_000.0, t0 + 100 * i) for i in range(3)]
        core, fresh = _core(), _core()
        assert ray.get(shard.record_batch.remote("produce", burst, t0)) == core.record_batch(burst, t0)
        assert core.record_batch([("alice", "c", 0.0, t0 + 300)], t0)[0] > 0  # the tenant is throttled
        written = wall_clock_ms()
        wait_for(
            lambda: ray.get(shard.info.remote())["usage_checkpoint"]["last_written_ms"] or 0,
            until=lambda ms: ms > written,
        )
        info = _kill(shard)
        assert info["applied_offset"] == 1
        restored = info["usage_checkpoint"]
        assert restored["restored_sensors"] == 1
        assert 0 <= restored["restored_age_ms"] < 11_000
        assert ray.get(shard.progress.remote())["restored_usage_age_ms"] == restored["restored_age_ms"]
        after = [("alice", "c", 500.0, t0 + 2_000)]
        got = ray.get(shard.record_batch.remote("produce", after, t0))
        assert got == core.record_batch(after, t0)
        assert got[0] > 0
        assert fresh.record_batch(after, t0) == [0]  # what the shard would answer with empty windows
    finally:
        for handle in (shard, controller):
            ray.kill(handle, no_restart=True)


def test_without_a_checkpoint_or_with_a_corrupt_one_the_shard_starts_empty(tmp_path: Path) -> None:
    # a long interval: the only checkpoints are the ones this test asks for
    controller, shard, shard_dir = _setup(tmp_path, interval_s=3600.0)
    try:
        t0 = wall_clock_ms()
        burst = [("alice", "c", 6_000.0, t0 + 100 * i) for i in range(3)]
        assert ray.get(shard.record_batch.remote("produce", burst, t0))[-1] > 0
        ray.get(shard.checkpoint_usage.remote())
        (shard_dir / CHECKPOINT).unlink()
        info = _kill(shard)
        assert info["usage_checkpoint"]["restored_age_ms"] is None
        after = [("alice", "c", 500.0, t0 + 2_000)]
        assert ray.get(shard.record_batch.remote("produce", after, t0)) == [0]  # the windows started over

        again = [("alice", "c", 6_000.0, t0 + 2_100 + 100 * i) for i in range(3)]
        assert ray.get(shard.record_batch.remote("produce", again, t0))[-1] > 0
        ray.get(shard.checkpoint_usage.remote())
        data = bytearray((shard_dir / CHECKPOINT).read_bytes())
        data[-3] ^= 0xFF
        (shard_dir / CHECKPOINT).write_bytes(bytes(data))
        info = _kill(shard)  # a corrupt checkpoint is ignored with a warning: no crash loop
        assert info["usage_checkpoint"]["restored_age_ms"] is None
        later = [("alice", "c", 500.0, t0 + 4_000)]
        assert ray.get(shard.record_batch.remote("produce", later, t0)) == [0]
    finally:
        for handle in (shard, controller):
            ray.kill(handle, no_restart=True)
