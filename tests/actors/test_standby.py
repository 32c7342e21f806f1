"""A shard's warm standby (``quotaplane.actors._standby``) on real Ray: it serves nothing while the primary lives,
takes the shard over from the primary's usage checkpoint once Ray restarts the primary, and hands it back
(with what it decided) before the restarted primary serves: one owner at a time, decisions the core's."""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from quotaplane.actors import NotServingError, start_controller, start_shard
from quotaplane.actors.controller import wall_clock_ms
from quotaplane.config import ClientQuotaAlteration
from quotaplane.quota import ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType

from .conftest import wait_for

pytestmark = pytest.mark.usefixtures("ray_cluster")

_names = itertools.count()


def _core() -> ClientQuotaManager:
    core = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    core.update_quota(ClientQuotaEntity(user="alice"), 1000.0)
    return core


def _serving(handle: Any) -> bool:
    return bool(ray.get(handle.progress.remote(), timeout=30)["serving"])


def test_the_standby_serves_only_between_the_primarys_death_and_its_restart(tmp_path: Path) -> None:
    prefix = f"standby{next(_names)}-{os.getpid()}"
    controller = start_controller(tmp_path / "log", name=f"{prefix}-controller")
    shard_dir = str(tmp_path / "shards" / "0")
    # a long interval: the only checkpoint is the one this test asks for, so the takeover's state is known
    options: dict[str, Any] = {"data_dir": shard_dir, "checkpoint_interval_s": 3600.0}
    primary = start_shard(0, controller, name=f"{prefix}-shard", **options)
    ray.get(primary.info.remote())
    standby = start_shard(0, controller, name=f"{prefix}-shard-standby", standby=True, **options)
    try:
        alteration = ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 1000.0)])
        assert all(r.ok for r in ray.get(controller.alter_client_quotas.remote([alteration], now_ms=wall_clock_ms())))
        for member in (primary, standby):
            wait_for(lambda m=member: ray.get(m.applied_offset.remote()), until=lambda v: v == 1)
        assert _serving(primary) and not _serving(standby)
        t0 = wall_clock_ms()
        core = _core()
        burst = [("alice", "c", 6_000.0, t0 + 100 * i) for i in range(3)]
        assert ray.get(primary.record_batch.remote("produce", burst, t0)) == core.record_batch(burst, t0)
        ray.get(primary.checkpoint_usage.remote())
        with pytest.raises(NotServingError):  # a standby decides nothing while it is not the owner
            ray.get(standby.record_batch.remote("produce", [("alice", "c", 1.0, t0 + 300)], t0))
        # the primary lives: the controller refuses the standby for as long as it asks (and other gateways asking
        # right after are answered at once, for as long again)
        assert ray.get(standby.take_over.remote(0.3)) is None
        assert ray.get(standby.take_over.remote(30.0), timeout=5) is None
        assert not _serving(standby)
        time.sleep(0.4)

        pid = ray.get(primary.info.remote())["pid"]
        os.kill(pid, signal.SIGKILL)
        address = ray.get(standby.take_over.remote(20.0), timeout=60)
        assert address is not None and address == ray.get(standby.direct_address.remote())
        progress = ray.get(standby.progress.remote())
        assert progress["serving"] and progress["restored_usage_age_ms"] is not None
        # decided from the primary's checkpoint: throttled as the uninterrupted core throttles
        after = [("alice", "c", 500.0, t0 + 1_000)]
        got = ray.get(standby.record_batch.remote("produce", after, t0))
        assert got == core.record_batch(after, t0)
        assert got[0] > 0
        assert _core().record_batch(after, t0) == [0]  # what a shard with empty windows would have answered

        # Ray's restart of the primary claims the shard and releases the standby before it serves
        info = wait_for(
            lambda: ray.get(primary.info.remote(), timeout=5), until=lambda i: i["pid"] != pid, timeout_s=60
        )
        assert info["usage_checkpoint"]["restored_age_ms"] == 0  # handed over by the standby, not read from disk
        assert _serving(primary) and not _serving(standby)
        standby_info = ray.get(standby.info.remote())
        assert (standby_info["takeovers"], standby_info["releases"]) == (1, 1)
        with pytest.raises(NotServingError):
            ray.get(standby.record_batch.remote("produce", [("alice", "c", 1.0, t0 + 1_100)], t0))
        # the primary goes on from everything decided: before the kill (checkpoint) and by the standby
        later = [("alice", "c", 500.0, t0 + 1_200)]
        assert ray.get(primary.record_batch.remote("produce", later, t0)) == core.record_batch(later, t0)
        owner = ray.get(controller.shard_owner.remote(f"{prefix}-shard", "quotaplane-tests"))
        assert owner["owner"] == "primary" and owner["epoch"] == 3  # claim, grant, claim
        # the standby forgot the windows it handed back: a second takeover starts from the checkpoint alone
        rows = ray.get(standby.metrics_snapshot.remote())
        assert not [row for row in rows if row[1] == "Produce" and row[3].get("user") == "alice"]
        assert [row for row in ray.get(primary.metrics_snapshot.remote()) if row[1] == "Produce"]
    finally:
        for handle in (standby, primary, controller):
            ray.kill(handle, no_restart=True)
