"""The controller and shards on a real local Ray cluster: the config stream, the hot path, crashes."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import ray

from quotaplane.actors import (
    ImageSnapshot,
    NamedActor,
    OffsetOutOfRangeError,
    UsageColumns,
    pack_usage,
    start_controller,
    start_shard,
)
from quotaplane.config import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ConfigImage,
    ConfigResource,
    ConfigResourceType,
    OpType,
)
from quotaplane.quota import (
    DEFAULT,
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ProducerIdQuotaManager,
    ProducerIdQuotaManagerConfig,
    QuotaType,
)
from tests.support import short_temp_dir

from .conftest import wait_for

pytestmark = pytest.mark.usefixtures("ray_cluster")

NOW = 1_700_000_000_000
_names = itertools.count()


class Cluster:
    """A controller and its shards, under names unique to one test."""

    def __init__(self, data_dir: Path, shards: int = 2, **controller_options: Any) -> None:
        prefix = f"t{next(_names)}"
        self.controller = start_controller(data_dir, name=f"{prefix}-controller", **controller_options)
        self.shard_names = [f"{prefix}-shard-{i}" for i in range(shards)]
        self.shards = [start_shard(i, self.controller, name=name) for i, name in enumerate(self.shard_names)]

    def set_quotas(self, entity: dict[str, str | None], *ops: tuple[str, float | None], now_ms: int = NOW) -> int:
        results = ray.get(
            self.controller.alter_client_quotas.remote([ClientQuotaAlteration(entity, list(ops))], now_ms=now_ms)
        )
        assert all(r.ok for r in results), results
        return ray.get(self.controller.end_offset.remote())

    def wait_applied(self, offset: int | None = None, shards: list[Any] | None = None) -> None:
        target = ray.get(self.controller.end_offset.remote()) if offset is None else offset
        for shard in shards or self.shards:
            wait_for(lambda s=shard: ray.get(s.applied_offset.remote()), until=lambda v: v == target)

    def shutdown(self) -> None:
        for handle in [*self.shards, self.controller]:
            ray.kill(handle, no_restart=True)


@pytest.fixture
def cluster(data_dir: Path) -> Any:
    c = Cluster(data_dir)
    yield c
    c.shutdown()


@pytest.fixture(scope="module")
def shared_cluster(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One controller and shard for the bad-input cases: each case checks the shard still serves."""
    c = Cluster(tmp_path_factory.mktemp("shared") / "config-log", shards=1)
    yield c
    c.shutdown()


def _core(
    quotas: dict[ClientQuotaEntity, float],
    quota_type: QuotaType = QuotaType.PRODUCE,
    config: ClientQuotaManagerConfig | None = None,
) -> ClientQuotaManager:
    manager = ClientQuotaManager(config or ClientQuotaManagerConfig(), quota_type)
    for entity, bound in quotas.items():
        manager.update_quota(entity, bound)
    return manager


# --- (a) the config stream ---------------------------------------------------------------------------
def test_a_quota_set_through_the_controller_reaches_every_shard(cluster: Cluster) -> None:
    end = cluster.set_quotas({"user": "alice"}, ("producer_byte_rate", 1024.0), ("consumer_byte_rate", 2048.0))
    cluster.set_quotas({"user": None}, ("producer_byte_rate", 512.0))
    cluster.wait_applied()
    assert end == 2
    for shard in cluster.shards:
        quotas = ray.get(shard.client_quotas.remote())
        assert quotas[repr((("user", "alice"),))] == {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}
        assert quotas[repr((("user", None),))] == {"producer_byte_rate": 512.0}
    described = ray.get(
        cluster.controller.describe_client_quotas.remote([ClientQuotaFilterComponent.of_entity("user", "alice")])
    )
    assert described == [({"user": "alice"}, {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0})]


# --- (b) the hot path equals the core ----------------------------------------------------------------
def test_b_throttles_equal_the_in_process_core(data_dir: Path) -> None:
    cluster = Cluster(data_dir, shards=0)
    try:
        # start-up keys set before the shard starts: it builds its managers from them (startup_configs)
        window_ops = [
            AlterConfigOp("producer.id.quota.window.num", OpType.SET, "2"),
            AlterConfigOp("producer.id.quota.window.size.seconds", OpType.SET, "10"),
            AlterConfigOp("quota.window.num", OpType.SET, "5"),
        ]
        results = ray.get(
            cluster.controller.incremental_alter_configs.remote(
                [(ConfigResource(ConfigResourceType.BROKER, ""), window_ops)], now_ms=NOW
            )
        )
        assert all(r.ok for r in results), results
        cluster.set_quotas({"user": "alice", "client-id": None}, ("producer_byte_rate", 1024.0))
        cluster.set_quotas({"client-id": "c9"}, ("consumer_byte_rate", 4096.0))
        cluster.set_quotas({"user": "pat"}, ("producer_ids_rate", 1.0))
        shard = start_shard("b", cluster.controller, name=f"{id(cluster)}-b")
        cluster.shards.append(shard)
        cluster.wait_applied()
        config = ClientQuotaManagerConfig(num_quota_samples=5)
        produce = _core({ClientQuotaEntity(user="alice", client_id=DEFAULT): 1024.0}, config=config)
        fetch = _core({ClientQuotaEntity(client_id="c9"): 4096.0}, QuotaType.FETCH, config=config)
        items = [("alice", f"c{i % 3}", float(300 + 97 * i), NOW + 40 * i) for i in range(200)]
        items += [("bob", "c1", 5_000.0, NOW + 9_000), ("alice", "c1", 0.0)]
        fetch_items = [("u", "c9", 1500.0 * (i % 4), NOW + 25 * i) for i in range(200)]
        got = ray.get(shard.record_batch.remote("PRODUCE", items, NOW + 10_000))
        assert got == produce.record_batch(items, NOW + 10_000)
        assert any(got), "the sequence must throttle, or the comparison proves little"
        got_fetch = ray.get(shard.record_batch.remote(QuotaType.FETCH, fetch_items, NOW))
        assert got_fetch == fetch.record_batch(fetch_items, NOW)
        assert any(got_fetch)
        ids = ProducerIdQuotaManager(ProducerIdQuotaManagerConfig(num_quota_samples=2, quota_window_size_seconds=10))
        ids.update_quota(ClientQuotaEntity(user="pat"), 1.0)
        pid_items = [("pat", i % 40, NOW + 100 * i) for i in range(100)]
        got_ids = ray.get(shard.record_producer_ids.remote(pid_items, NOW))
        assert got_ids == ids.record_batch(pid_items, NOW)
        assert any(got_ids)
    finally:
        cluster.shutdown()


def test_a_shard_that_missed_pushes_catches_up_on_a_gap_or_a_notification(cluster: Cluster) -> None:
    cluster.set_quotas({"user": "alice"}, ("producer_byte_rate", 1024.0))
    cluster.wait_applied(1)
    shard, name = cluster.shards[0], cluster.shard_names[0]
    assert ray.get(cluster.controller.unsubscribe.remote(shard, name=name, namespace="quotaplane-tests"))
    for i in range(3):  # offsets 1, 2, 3: pushed to the other shard only
        cluster.set_quotas({"user": f"u{i}"}, ("consumer_byte_rate", 10.0 + i))
    cluster.wait_applied(4, shards=cluster.shards[1:])
    assert ray.get(shard.applied_offset.remote()) == 1
    [(base, payload)] = ray.get(cluster.controller.read_from.remote(3, 1))
    assert base == 3
    assert ray.get(shard.apply_batch.remote(base, payload)) == 4  # a gap: 1..2 pulled first, then 3
    assert ray.get(shard.apply_batch.remote(base, payload)) == 4  # already applied: skipped
    assert ray.get(shard.client_quotas.remote()) == ray.get(cluster.shards[1].client_quotas.remote())
    cluster.set_quotas({"user": "u9"}, ("consumer_byte_rate", 1.0))  # offset 4, not pushed to it
    assert ray.get(shard.notify_end_offset.remote(5)) == 5
    assert ray.get(shard.info.remote())["catch_ups"] == 2


# --- (c) a quota change never resets usage ------------------------------------------------------------
def test_c_usage_recorded_before_a_quota_change_counts_after_it(cluster: Cluster) -> None:
    cluster.set_quotas({"user": "alice"}, ("producer_byte_rate", 1_000_000.0))
    cluster.wait_applied()
    shard = cluster.shards[1]
    core = _core({ClientQuotaEntity(user="alice"): 1_000_000.0})
    before = [("alice", "c", 50_000.0, NOW + 100 * i) for i in range(10)]
    assert ray.get(shard.record_batch.remote("produce", before, NOW)) == core.record_batch(before, NOW) == [0] * 10
    cluster.set_quotas({"user": "alice"}, ("producer_byte_rate", 20_000.0))
    cluster.wait_applied()
    core.update_quota(ClientQuotaEntity(user="alice"), 20_000.0)
    after = [("alice", "c", 1.0, NOW + 1_000)]
    got = ray.get(shard.record_batch.remote("produce", after, NOW))
    assert got == core.record_batch(after, NOW)
    fresh = _core({ClientQuotaEntity(user="alice"): 20_000.0})
    assert fresh.record_batch(after, NOW) == [0]  # with the usage reset, nothing would be throttled
    assert got[0] > 0


# --- (d) a shard crash ----------------------------------------------------------------------------------
def test_d_a_killed_shard_comes_back_caught_up_and_serves(cluster: Cluster) -> None:
    cluster.set_quotas({"user": "alice"}, ("producer_byte_rate", 1024.0))
    cluster.wait_applied()
    shard = cluster.shards[0]
    pid = ray.get(shard.info.remote())["pid"]
    ray.kill(shard, no_restart=False)
    info = wait_for(lambda: ray.get(shard.info.remote(), timeout=5), until=lambda i: i["pid"] != pid)
    assert info["applied_offset"] == 1
    cluster.set_quotas({"user": "alice"}, ("producer_byte_rate", 2048.0))
    cluster.wait_applied(2)
    core = _core({ClientQuotaEntity(user="alice"): 2048.0})
    items = [("alice", "c", 4096.0, NOW + i) for i in range(5)]
    # usage is lost on a crash: the restarted shard answers as a fresh core would
    assert ray.get(shard.record_batch.remote("produce", items, NOW)) == core.record_batch(items, NOW)


def test_a_started_shard_keeps_what_it_started_with_out_of_its_collections(cluster: Cluster) -> None:
    info = ray.get(cluster.shards[0].info.remote())
    assert info["gc_frozen_objects"] > 10_000  # its imports alone are tens of thousands of objects
    assert "gc_freeze" in info["start_phases_ms"]


# --- (e) a controller crash ---------------------------------------------------------------------------
def test_e_a_killed_controller_reopens_its_log_and_keeps_streaming(cluster: Cluster) -> None:
    for i in range(5):
        cluster.set_quotas({"user": f"u{i}"}, ("producer_byte_rate", 1000.0 + i))
    cluster.wait_applied(5)
    controller = cluster.controller
    pid = ray.get(controller.info.remote())["pid"]
    ray.kill(controller, no_restart=False)
    info = wait_for(lambda: ray.get(controller.info.remote(), timeout=5), until=lambda i: i["pid"] != pid)
    assert info["end_offset"] == 5  # nothing acknowledged is lost
    assert info["subscribers"] == 2  # re-attached by name
    described = ray.get(controller.describe_client_quotas.remote([ClientQuotaFilterComponent.of_entity("user", "u3")]))
    assert described == [({"user": "u3"}, {"producer_byte_rate": 1003.0})]
    cluster.set_quotas({"user": "u0"}, ("producer_byte_rate", 1.0))
    cluster.wait_applied(6)
    for shard in cluster.shards:
        assert ray.get(shard.client_quotas.remote())[repr((("user", "u0"),))] == {"producer_byte_rate": 1.0}


# --- (f) bad input --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "args", "message"),
    [
        ("record_batch", ("BOGUS", [("u", "c", 1.0)], NOW), "unknown quota type"),
        ("record_batch", ("REQUEST", [("u", "c", 1.0)], NOW), "PRODUCE or FETCH"),
        ("record_batch", ("PRODUCE", [("u", "c", -1.0)], NOW), "0"),
        ("record_batch", ("PRODUCE", [("u", "c", 1.0), ("u", 7, 1.0)], NOW), "1"),
        ("record_batch", ("PRODUCE", [("u",)], NOW), "0"),
        ("record_batch", ("PRODUCE", [], NOW), "empty batch"),
        ("record_batch", ("PRODUCE", "uc1", NOW), "list"),
        ("record_producer_ids", ([("u", "not-an-id")], NOW), "0"),
        # a gateway's usage columns: only for usage and un-record, and checked whole before anything is recorded
        ("serve_at", ("request", 0, pack_usage([("PRODUCE", "u", "c", 1.0, NOW)])), "come as a list"),
        ("serve_at", ("usage", 0, UsageColumns(1, b"\x07", "u", "c", b"\x00" * 8, b"\x00" * 8)), "quota_types"),
        ("serve_at", ("unrecord", 0, UsageColumns(2, b"\x00\x00", "u", "c", b"\x00" * 16, b"\x00" * 16)), "1 users"),
        ("record_producer_ids", ([], NOW), "empty batch"),
        ("apply_batch", (0, b"\xff\xff garbage"), "EventColumns"),
        ("apply_batch", (-1, b""), "base_offset"),
    ],
)
def test_f_bad_input_raises_a_clear_error_and_the_shard_keeps_serving(
    shared_cluster: Cluster, method: str, args: tuple[Any, ...], message: str
) -> None:
    shard = shared_cluster.shards[0]
    with pytest.raises(ValueError, match=message):
        ray.get(getattr(shard, method).remote(*args))
    assert ray.get(shard.record_batch.remote("PRODUCE", [("u", "c", 1.0)], NOW)) == [0]
    assert ray.get(shard.applied_offset.remote()) == 0


def test_f_bad_admin_input_and_reads(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    results = ray.get(
        cluster.controller.alter_client_quotas.remote(
            [ClientQuotaAlteration({"user": "a"}, [("no_such_quota", 1.0)])], now_ms=NOW
        )
    )
    assert not results[0].ok
    assert ray.get(cluster.controller.end_offset.remote()) == 0
    with pytest.raises(OffsetOutOfRangeError, match="above the log end offset"):
        ray.get(cluster.controller.read_from.remote(5))
    with pytest.raises(ValueError, match="max_events"):
        ray.get(cluster.controller.read_from.remote(0, 0))
    assert ray.get(cluster.controller.read_from.remote(0)) == []


# --- catch-up from a snapshot when the log's beginning is gone ----------------------------------------
def test_a_new_shard_catches_up_from_a_snapshot_when_segments_were_deleted(data_dir: Path) -> None:
    cluster = Cluster(data_dir, shards=1, segment_bytes=512)
    try:
        for i in range(40):
            cluster.set_quotas({"user": f"u{i}"}, ("producer_byte_rate", 100.0 + i))
        ray.get(cluster.controller.write_snapshot.remote())
        assert ray.get(cluster.controller.delete_segments_covered_by_snapshot.remote())
        start = ray.get(cluster.controller.start_offset.remote())
        assert start > 0
        with pytest.raises(OffsetOutOfRangeError, match="below the log start offset"):
            ray.get(cluster.controller.read_from.remote(0))
        snapshot: ImageSnapshot = ray.get(cluster.controller.snapshot.remote())
        assert snapshot.end_offset == 40
        late = start_shard("late", cluster.controller, name=f"{id(cluster)}-late")
        cluster.shards.append(late)
        cluster.set_quotas({"user": "u0"}, ("producer_byte_rate", 7.0))
        cluster.wait_applied(41)
        info = ray.get(late.info.remote())
        assert info["snapshot_loads"] == 1
        assert ray.get(late.client_quotas.remote()) == ray.get(cluster.shards[0].client_quotas.remote())
        image: ConfigImage = ray.get(cluster.controller.snapshot.remote(offset=40)).to_image()
        assert image.end_offset == 40 and len(image.client_quotas()) == 40
    finally:
        cluster.shutdown()


def test_a_running_shard_behind_the_log_start_jumps_to_a_snapshot_and_keeps_its_usage(data_dir: Path) -> None:
    cluster = Cluster(data_dir, shards=1, segment_bytes=512)
    try:
        cluster.set_quotas({"user": "alice"}, ("producer_byte_rate", 1_000_000.0))
        cluster.wait_applied(1)
        shard, name = cluster.shards[0], cluster.shard_names[0]
        core = _core({ClientQuotaEntity(user="alice"): 1_000_000.0})
        before = [("alice", "c", 50_000.0, NOW + 100 * i) for i in range(10)]
        assert ray.get(shard.record_batch.remote("produce", before, NOW)) == core.record_batch(before, NOW)
        assert ray.get(cluster.controller.unsubscribe.remote(shard, name=name, namespace="quotaplane-tests"))
        cluster.set_quotas({"user": "alice"}, ("producer_byte_rate", 20_000.0))
        for i in range(40):
            cluster.set_quotas({"user": f"u{i}"}, ("producer_byte_rate", 100.0 + i))
        ray.get(cluster.controller.write_snapshot.remote())
        assert ray.get(cluster.controller.delete_segments_covered_by_snapshot.remote())
        assert ray.get(cluster.controller.start_offset.remote()) > 1
        assert ray.get(shard.notify_end_offset.remote(42)) == 42
        info = ray.get(shard.info.remote())
        assert info["snapshot_loads"] == 1
        core.update_quota(ClientQuotaEntity(user="alice"), 20_000.0)
        after = [("alice", "c", 1.0, NOW + 1_000)]
        got = ray.get(shard.record_batch.remote("produce", after, NOW))
        assert got == core.record_batch(after, NOW)
        assert got[0] > 0  # the usage recorded before the jump still counts
        assert len(ray.get(shard.client_quotas.remote())) == 41
    finally:
        cluster.shutdown()


def test_a_shard_exposes_its_kafka_metrics(data_dir: Path) -> None:
    """The metrics endpoint's source: Kafka's metric names, groups and tags, measured by the shard."""
    cluster = Cluster(data_dir, shards=1)
    cluster.set_quotas({"user": "alice"}, ("producer_byte_rate", 1000.0))
    cluster.wait_applied()
    [shard] = cluster.shards
    [throttle] = ray.get(shard.record_batch.remote("PRODUCE", [("alice", "c1", 50_000.0)], NOW))
    assert throttle > 0
    snapshot = ray.get(shard.metrics_snapshot.remote(NOW + 1000))
    by_name = {(name, group, tuple(sorted(tags.items()))): value for name, group, _, tags, value in snapshot}
    alice = (("client-id", ""), ("user", "alice"))
    # one recording, measured 1 s later: Kafka pads the window to (samples - 1) whole windows = 10 s
    assert by_name[("byte-rate", "Produce", alice)] == pytest.approx(50_000.0 / 10)
    assert ("throttle-time", "Produce", alice) in by_name


_BY_NAME_SCRIPT = """
import sys, tempfile, ray
from quotaplane.actors import NamedActor, start_controller, start_shard
ray.init(num_cpus=1, include_dashboard=False)
with tempfile.TemporaryDirectory() as tmp:
    controller = start_controller(tmp, name="by-name-controller")
    ray.get(controller.info.remote())
    print("controller up", file=sys.stderr, flush=True)
    by_name = start_shard("n", NamedActor("by-name-controller"), name="by-name-shard")
    ray.get(by_name.info.remote())
    print("by name up", file=sys.stderr, flush=True)
    by_handle = start_shard("h", controller, name="by-handle-shard")
    ray.get(by_handle.info.remote())
    print("by handle up", file=sys.stderr, flush=True)
    ray.shutdown()
"""


def test_a_shard_given_its_controller_by_name_has_nothing_in_the_object_store() -> None:
    """Ray keeps an actor handle given to a constructor in its object store and logs that a restart of a
    ``max_restarts`` actor fails once it is lost (ray-project/ray#53727). By name, the shard needs nothing
    there. The handle form is the control: the same check sees the error. A fresh driver process, since
    Ray logs the error once per driver."""
    with short_temp_dir("qpc-") as temp_dir:
        env = {**os.environ, "RAY_TMPDIR": str(temp_dir)}
        done = subprocess.run(
            [sys.executable, "-c", _BY_NAME_SCRIPT], env=env, capture_output=True, text=True, timeout=120, check=False
        )
    assert done.returncode == 0, done.stderr[-2000:]
    _, after_controller = done.stderr.split("controller up\n", 1)
    by_name, by_handle = after_controller.split("by name up\n", 1)
    warning = "has constructor arguments in the object store"
    assert warning not in by_name
    assert warning in by_handle.split("by handle up\n", 1)[0]


def test_a_shard_follows_a_controller_given_by_name(tmp_path: Path) -> None:
    prefix = f"t{next(_names)}"
    controller = start_controller(tmp_path, name=f"{prefix}-controller")
    shard = start_shard("n", NamedActor(f"{prefix}-controller"), name=f"{prefix}-by-name")
    results = ray.get(
        controller.alter_client_quotas.remote(
            [ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 1024.0)])], now_ms=NOW
        )
    )
    assert all(r.ok for r in results)
    end = ray.get(controller.end_offset.remote())
    wait_for(lambda: ray.get(shard.applied_offset.remote()), until=lambda offset: offset == end)
    for actor in (shard, controller):
        ray.kill(actor)


def test_a_named_actor_needs_a_name() -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        NamedActor("")
