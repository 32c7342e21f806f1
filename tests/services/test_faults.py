"""Faults through the whole cluster (gRPC clients -> gateway / AdminService -> Ray actors): a killed shard
is restarted by Ray, replays and serves again through the same gateway (its usage windows come back from its
usage checkpoint, and the metrics endpoint counts the restart); a killed controller loses no acknowledged
change and the gateway follows it again; a gateway whose controller is gone reports NOT_SERVING on gRPC health.

Kills are real (``ray.kill``: the actor's process dies and Ray restarts it); nothing is mocked.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc
import pytest
import ray
from grpc_health.v1 import health_pb2, health_pb2_grpc

from quotaplane.quota import ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from quotaplane.services.gateway import GatewayConfig, serve_gateway
from quotaplane.services.launcher import Cluster
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import quota_pb2 as pb
from quotaplane.v1 import quota_pb2_grpc
from tests.support import wait_gone

from .conftest import entity, launched, wait_propagated

T0 = 1_700_000_000_000
T = TypeVar("T")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """conftest's cluster with fsync on: a killed controller must lose no acknowledged change."""
    with launched(tmp_path_factory, "faults", fsync=True) as c:
        yield c


def eventually(fn: Callable[[], T], *, timeout_s: float = 60.0) -> T:
    """``fn()`` once it stops raising gRPC UNAVAILABLE (a restarting actor), within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except grpc.RpcError as e:
            if e.code() is not grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def actor_info(handle, timeout_s: float = 60.0) -> dict:
    """``info()`` of an actor Ray may still be restarting (its handle answers ActorUnavailableError until then)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(handle.info.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def kill(handle, timeout_s: float = 30.0) -> int:
    """``ray.kill`` an actor (Ray restarts it) and wait until its process is gone, returning its pid: ``ray.kill``
    returns before that, and a call made meanwhile could still be answered by the old process (a restart test
    would then check the old incarnation). The cluster is local, so the pid is one of this host's."""
    pid = ray.get(handle.info.remote())["pid"]
    ray.kill(handle, no_restart=False)
    wait_gone(pid, timeout_s, why="ray.kill-ed")
    return pid


def set_produce_quota(admin, user: str, bound: float) -> None:
    op = admin_pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=bound)
    entry = admin_pb.AlterClientQuotasRequest.EntryData(entity=entity(user, None), ops=[op])
    response = eventually(
        lambda: admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry]), timeout=30)
    )
    assert [e.error_code for e in response.entries] == [0]


def produce(quota, user: str, values: list[float], start_ms: int) -> list[int]:
    items = [
        pb.UsageItem(quota_type=pb.PRODUCE, user=user, client_id="c", value=v, now_ms=start_ms + i * 10)
        for i, v in enumerate(values)
    ]
    return list(quota.RecordUsageBatch(pb.UsageBatch(items=items), timeout=30).throttle_time_ms)


def core_with(user: str, bound: float) -> ClientQuotaManager:
    core = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    core.update_quota(ClientQuotaEntity(user=user, client_id=None), bound)
    return core


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def owner_of(cluster: Cluster, user: str) -> str:
    offset, (key,) = cluster.gateway.replica.resolve([("PRODUCE", user, "c")])
    del offset
    return cluster.gateway.placement.owner(key)


def test_a_killed_shard_restarts_replays_and_serves_through_the_same_gateway(cluster, admin, quota):
    set_produce_quota(admin, "victim", 1000.0)
    wait_propagated(cluster, cluster.gateway)
    values = [800.0] * 30
    core = core_with("victim", 1000.0)
    # the wall clock's time: the metrics scrape below measures every sensor at the wall clock's now, which
    # would purge the windows of a simulated past (in the shard, and so in its checkpoint)
    start = int(time.time() * 1000)
    before = produce(quota, "victim", values, start)
    expected = [core.record_and_get_throttle_time_ms("victim", "c", v, start + i * 10) for i, v in enumerate(values)]
    assert before == expected
    assert before[-1] > 0  # throttled: the usage is there
    assert cluster.metrics_url is not None
    scrape(cluster.metrics_url)  # the endpoint sees the first incarnation

    name = owner_of(cluster, "victim")
    shard = cluster.shards[name]
    ray.get(shard.checkpoint_usage.remote())  # the usage windows as the shard writes them every second
    # usage after that checkpoint, of another user on the same shard: the restart loses it, and the gateway that
    # sent it counts it as the bound of the restart's over-admission
    bystander = next(u for u in (f"bystander-{i}" for i in range(1000)) if owner_of(cluster, u) == name)
    produce(quota, bystander, [4321.0], int(time.time() * 1000) + 5)
    pid = kill(shard)

    # the same gateway, the same channel: UNAVAILABLE while Ray restarts the shard, then served again
    later = start + 1_000
    after = eventually(lambda: produce(quota, "victim", [800.0], later))
    assert actor_info(shard)["pid"] != pid
    # the quota came back from the log and the usage from the shard's checkpoint: the answer is the
    # uninterrupted core's, not a fresh one's
    assert after == [core.record_and_get_throttle_time_ms("victim", "c", 800.0, later)]
    assert after != [core_with("victim", 1000.0).record_and_get_throttle_time_ms("victim", "c", 800.0, later)]
    page = scrape(cluster.metrics_url)
    assert f'quotaplane_shard_restarts_total{{shard="{name}"}} 1.0' in page
    # how old the restored windows were: the interval of usage the restart lost
    assert f'quotaplane_shard_restored_usage_age_seconds{{shard="{name}"}} ' in page
    assert "quotaplane_shard_restored_usage_age_seconds{" not in page.replace(f'{{shard="{name}"}}', "")
    assert 'quotaplane_over_admission_bound_bytes_total{cause="checkpoint"} 4321.0' in page
    assert 'quotaplane_over_admission_bound_bytes_total{cause="no_checkpoint"} 0.0' in page
    # and a change after the restart reaches it
    set_produce_quota(admin, "victim", 10.0)
    wait_propagated(cluster, cluster.gateway)
    cluster.wait_caught_up()
    assert produce(quota, "victim", [800.0, 800.0], start + 100_000)[-1] > 0


def test_a_killed_controller_loses_no_acknowledged_change(cluster, admin, quota):
    for i in range(5):
        set_produce_quota(admin, f"acked-{i}", 100.0 + i)
    controller = cluster.controller
    pid = kill(controller)

    described = eventually(
        lambda: admin.DescribeClientQuotas(
            admin_pb.DescribeClientQuotasRequest(
                components=[
                    admin_pb.DescribeClientQuotasRequest.ComponentData(
                        entity_type="user", match_type=admin_pb.MATCH_TYPE_SPECIFIED
                    )
                ]
            ),
            timeout=30,
        )
    )
    got = {e.entity[0].entity_name: {v.key: v.value for v in e.values}["producer_byte_rate"] for e in described.entries}
    assert {f"acked-{i}": 100.0 + i for i in range(5)}.items() <= got.items()
    assert actor_info(controller)["pid"] != pid
    # the gateway follows the restarted controller: a new change is enforced through it
    set_produce_quota(admin, "after-restart", 10.0)
    wait_propagated(cluster, cluster.gateway, timeout_s=30)
    assert produce(quota, "after-restart", [1000.0, 1000.0], T0 + 200_000)[-1] > 0


def test_a_gateway_whose_controller_is_gone_reports_not_serving_then_serving(cluster, tmp_path):
    from quotaplane.actors import start_controller, start_shard

    lonely = start_controller(tmp_path / "lonely", name="quotaplane-lonely-controller", fsync=False)
    ray.get(lonely.end_offset.remote())
    its_shard = start_shard("lonely", lonely, name="quotaplane-lonely-shard")
    ray.get(its_shard.info.remote())
    config = GatewayConfig(poll_interval_s=0.02, config_stale_s=0.3, shard_timeout_s=2.0)
    server, port, gateway = serve_gateway(lonely, {"lonely": its_shard}, "127.0.0.1:0", config=config)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)

            def status() -> int:
                return health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status

            assert status() == health_pb2.HealthCheckResponse.SERVING
            ray.kill(lonely, no_restart=True)
            deadline = time.monotonic() + 30
            while status() != health_pb2.HealthCheckResponse.NOT_SERVING:
                assert time.monotonic() < deadline, "still SERVING with its controller gone"
                time.sleep(0.05)
            assert gateway.poll_failures > 0
            # it keeps answering from its last image meanwhile
            answer = quota_pb2_grpc.QuotaServiceStub(channel).RecordUsageBatch(
                pb.UsageBatch(items=[pb.UsageItem(quota_type=pb.FETCH, user="u", value=1.0, now_ms=T0)]), timeout=30
            )
            assert list(answer.throttle_time_ms) == [0]
    finally:
        server.stop(0).wait()
        ray.kill(its_shard, no_restart=True)
