"""A Ray node with a shard's primary is killed on a cluster of several raylets on this host (shaped like the
Kubernetes deployment: a head offering ``quotaplane_controller``, two workers offering ``quotaplane_shard``): the
shard's warm standby, on the other node, decides its keys again from the primary's usage checkpoint, and hands
them back to the primary Ray restarts; every decision before, during and after equals one in-process Kafka
core's that saw the same items, so no item was decided by two owners (their windows would split) or by none,
and nothing checkpointed was lost. Timings are bench/chaos.py's (``--faults node``), not asserted here."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
import pytest
import ray

from quotaplane.quota import DEFAULT, ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from quotaplane.services.launcher import NODE_FAILURE_DETECTION, Cluster, launch
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc, quota_pb2_grpc
from quotaplane.v1 import quota_pb2 as pb
from tests.support import ray_nodes

from .conftest import entity

SHARD_RESOURCE = "quotaplane_shard"
CONTROLLER_RESOURCE = "quotaplane_controller"
BOUND = 10_000.0  # bytes/s of the <default> user quota: every user has a sensor of its own
Item = tuple[str, str, float, int]


def _add_shard_node(raylets: object) -> object:
    return raylets.add_node(num_cpus=0, resources={SHARD_RESOURCE: 100})  # type: ignore[attr-defined]


@pytest.fixture
def nodes() -> Iterator[object]:
    head = {
        "num_cpus": 2,
        "resources": {CONTROLLER_RESOURCE: 1},
        "include_dashboard": False,
        "_system_config": dict(NODE_FAILURE_DETECTION),
    }
    with ray_nodes(head, [{"num_cpus": 0, "resources": {SHARD_RESOURCE: 100}}] * 2) as raylets:
        yield raylets


@pytest.fixture
def cluster(nodes: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with launch(
        tmp_path_factory.mktemp("sbd") / "d",
        shards=2,
        admin_port=0,
        gateway_port=0,
        metrics_port=None,
        fsync=False,
        ray_address=nodes.address,  # type: ignore[attr-defined]
        shard_resources={SHARD_RESOURCE: 1},
        controller_resources={CONTROLLER_RESOURCE: 1},
        spread_shards=True,
    ) as c:
        yield c


class Tenant:
    """Usage of some users through the gateway, one batch at a time (each answer awaited: one order per sensor),
    every batch retried whole on UNAVAILABLE (a batch of one shard's users is served whole or not at all), and
    the same items fed to one uninterrupted Kafka core."""

    def __init__(self, address: str, users: Sequence[str], core: ClientQuotaManager | None = None) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = quota_pb2_grpc.QuotaServiceStub(self.channel)
        self.users = list(users)
        self.rng = random.Random(19)
        if core is None:
            core = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
            core.update_quota(ClientQuotaEntity(user=DEFAULT, client_id=None), BOUND)
        self.core = core
        self.batches = 0
        self.unavailable = 0
        self.throttled = 0

    def send(self, batches: int) -> None:
        for _ in range(batches):
            now = int(time.time() * 1000)
            items: list[Item] = [
                (self.rng.choice(self.users), "c", float(self.rng.randint(1_000, 9_000)), now) for _ in range(10)
            ]
            request = pb.UsageBatch(
                batch_id=self.batches,
                items=[
                    pb.UsageItem(quota_type=pb.PRODUCE, user=u, client_id=c, value=v, now_ms=n) for u, c, v, n in items
                ],
            )
            deadline = time.monotonic() + 60
            while True:
                try:
                    answer = list(self.stub.RecordUsageBatch(request, timeout=30).throttle_time_ms)
                    break
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.UNAVAILABLE, e
                    assert time.monotonic() < deadline, "the shard's keys were not served again"
                    self.unavailable += 1
                    time.sleep(0.01)
            expected = [self.core.record_and_get_throttle_time_ms(u, c, v, n) for u, c, v, n in items]
            assert answer == expected, f"batch {self.batches}: not the core's decisions"
            self.throttled += sum(1 for t in answer if t > 0)
            self.batches += 1


def _users_of(shard: object) -> list[str]:
    """The load users whose Produce sensor lives on ``shard`` (the gateway's placement put them there)."""
    rows = ray.get(shard.metrics_snapshot.remote(), timeout=30)  # type: ignore[attr-defined]
    return sorted({row[3]["user"] for row in rows if row[1] == "Produce" and row[3].get("user", "").startswith("u")})


def _kill_node(nodes: object, node_id: str) -> None:
    """SIGKILL every process of the worker node ``node_id`` (its raylet, store, workers: a dead machine), then
    a replacement node joins, as Kubernetes would start a new pod."""
    node = next(n for n in nodes.worker_nodes if n.node_id == node_id)  # type: ignore[attr-defined]
    started = [info.process.pid for infos in node.all_processes.values() for info in infos]
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
    doomed, todo = [], list(started)
    while todo:
        for child in children.get(todo.pop(), ()):
            doomed.append(child)
            todo.append(child)
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    nodes.remove_node(node, allow_graceful=False)  # type: ignore[attr-defined]
    _add_shard_node(nodes)


def test_a_node_kill_hands_the_shard_to_its_standby_and_back_with_one_owner(nodes: object, cluster: Cluster) -> None:
    assert set(cluster.standbys) == {"0", "1"}
    where = {
        shard: (
            ray.get(cluster.shards[shard].node.remote(), timeout=30),
            ray.get(cluster.standbys[shard].node.remote(), timeout=30),
        )
        for shard in cluster.shards
    }
    assert all(primary != standby for primary, standby in where.values()), where  # one node loss never takes both

    with grpc.insecure_channel(cluster.admin_address) as channel:
        op = admin_pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=BOUND)
        entry = admin_pb.AlterClientQuotasRequest.EntryData(entity=entity(DEFAULT, None), ops=[op])
        answer = admin_pb2_grpc.AdminServiceStub(channel).AlterClientQuotas(
            admin_pb.AlterClientQuotasRequest(entries=[entry])
        )
        assert [e.error_code for e in answer.entries] == [0]
    cluster.wait_caught_up(timeout_s=30)
    deadline = time.monotonic() + 10
    while cluster.gateway.config_offset < ray.get(cluster.controller.end_offset.remote()):
        assert time.monotonic() < deadline
        time.sleep(0.01)

    warm = Tenant(cluster.gateway_address, [f"u{i}" for i in range(40)])
    warm.send(20)
    victim = "0"
    users = _users_of(cluster.shards[victim])
    assert users, "no load user on shard 0"
    tenant = Tenant(cluster.gateway_address, users[:3], warm.core)  # the core saw the warm-up's items too
    tenant.send(150)  # the users' windows fill: they are throttled from here on
    assert tenant.throttled > 0
    primary, standby = cluster.shards[victim], cluster.standbys[victim]
    old_pid = ray.get(primary.info.remote(), timeout=30)["pid"]
    # nothing is sent after this checkpoint, so a takeover from it must decide exactly as the uninterrupted core
    ray.get(primary.checkpoint_usage.remote(), timeout=30)

    _kill_node(nodes, where[victim][0])
    throttled = tenant.throttled
    tenant.send(60)  # served again: by the standby, from the checkpoint (else the core's answers differ)
    assert tenant.unavailable > 0  # the kill was seen
    assert tenant.throttled > throttled  # the windows came back, not empty ones
    info = ray.get(standby.info.remote(), timeout=30)
    assert info["takeovers"] == 1 and info["usage_checkpoint"]["restored_age_ms"] is not None

    # Ray restarts the primary on a live node: it takes the shard back (and what the standby decided) before it
    # serves, so the same users go on being decided as the core decides them
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            if ray.get(primary.info.remote(), timeout=5)["pid"] != old_pid:
                break
        assert time.monotonic() < deadline, "the primary was not restarted"
        time.sleep(0.1)
    tenant.send(60)
    progress = {name: ray.get(h.progress.remote(), timeout=30) for name, h in (("p", primary), ("s", standby))}
    assert progress["p"]["serving"] and not progress["s"]["serving"]
    assert ray.get(standby.info.remote(), timeout=30)["releases"] == 1
    owner = ray.get(cluster.controller.shard_owner.remote("quotaplane-shard-0", "quotaplane"), timeout=30)
    assert owner["owner"] == "primary"
    assert ray.get(primary.node.remote(), timeout=30) != where[victim][0]
