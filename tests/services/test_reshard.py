"""Live resharding on a real Ray cluster: 2 -> 4 -> 3 shards while two gateways stream usage, every decision
equal to one in-process Kafka core's (``ClientQuotaManager``) that saw the same items, so no moved key lost
its usage window, and no item was decided by two owners or by none.

Each load thread has its own users (the ``<default>`` user quota gives each user its own sensor), so the
core can be fed each thread's items in that thread's order, as the owning shard saw them.
"""

from __future__ import annotations

import itertools
import random
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence

import grpc
import pytest
import ray

from quotaplane.quota import DEFAULT, ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from quotaplane.services.gateway import serve_gateway
from quotaplane.services.launcher import Cluster
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc, quota_pb2_grpc
from quotaplane.v1 import quota_pb2 as pb

from .conftest import COMMAND, entity, wait_propagated

Item = tuple[str, str, float, int]  # (user, client id, bytes, now_ms): PRODUCE usage
BOUND = 10_000.0  # bytes/s of the <default> user quota: each user sends ~80 kB/s of simulated time


def _set_default_quota(admin: admin_pb2_grpc.AdminServiceStub) -> None:
    op = admin_pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=BOUND)
    entry = admin_pb.AlterClientQuotasRequest.EntryData(entity=entity(DEFAULT, None), ops=[op])
    assert [
        e.error_code for e in admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry])).entries
    ] == [0]


def _workload(prefix: str, size: int, start_ms: int, seed: int) -> Iterator[list[Item]]:
    """Batches of PRODUCE items over 60 users x 2 clients, 4 ms of simulated time per batch, without end."""
    rng = random.Random(seed)
    users = [f"{prefix}{i}" for i in range(60)]
    for b in itertools.count():
        now = start_ms + b * 4
        yield [(rng.choice(users), rng.choice(("c1", "c2")), float(rng.randint(100, 900)), now) for _ in range(size)]


def _core(items: Sequence[Item]) -> list[int]:
    manager = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    manager.update_quota(ClientQuotaEntity(user=DEFAULT, client_id=None), BOUND)
    return [manager.record_and_get_throttle_time_ms(u, c, v, n) for u, c, v, n in items]


class Load(threading.Thread):
    """Sends its batches one after another (each answer awaited: one order per sensor) through a gateway."""

    def __init__(self, address: str, batches: Iterator[list[Item]]) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.workload = batches
        self.batches: list[list[Item]] = []
        self.stop = threading.Event()
        self.answers: list[int] = []
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with grpc.insecure_channel(self.address) as channel:
                quota = quota_pb2_grpc.QuotaServiceStub(channel)
                for i, items in enumerate(self.workload):
                    if self.stop.is_set():
                        return
                    self.batches.append(items)
                    request = pb.UsageBatch(
                        batch_id=i,
                        items=[
                            pb.UsageItem(quota_type=pb.PRODUCE, user=u, client_id=c, value=v, now_ms=n)
                            for u, c, v, n in items
                        ],
                    )
                    self.answers.extend(quota.RecordUsageBatch(request, timeout=60).throttle_time_ms)
                    self.sent += 1
        except BaseException as e:  # reported by the test
            self.error = e


def _wait_sent(loads: Sequence[Load], at_least: int) -> None:
    deadline = time.monotonic() + 120
    while min(load.sent for load in loads) < at_least and all(load.is_alive() for load in loads):
        assert time.monotonic() < deadline, "the load stalled"
        time.sleep(0.01)


def _reshard(admin: admin_pb2_grpc.AdminServiceStub, count: int) -> admin_pb.AlterShardCountResponse:
    return admin.AlterShardCount(admin_pb.AlterShardCountRequest(shard_count=count), timeout=120)


def test_reshard_2_4_3_under_load_decides_as_the_core(cluster: Cluster, admin: admin_pb2_grpc.AdminServiceStub) -> None:
    _set_default_quota(admin)
    second_server, port, second = serve_gateway(
        cluster.controller,
        cluster.shards,
        "127.0.0.1:0",
        shard_lookup=lambda shard: ray.get_actor(f"quotaplane-shard-{shard}", namespace="quotaplane"),
    )
    try:
        wait_propagated(cluster, cluster.gateway, second)
        start = int(time.time() * 1000)
        loads = [
            Load(cluster.gateway_address, _workload("a", 40, start, seed=1)),
            Load(f"127.0.0.1:{port}", _workload("b", 40, start, seed=2)),
        ]
        for load in loads:
            load.start()
        _wait_sent(loads, 150)  # windows filled: the users are throttled before the first reshard
        grown = _reshard(admin, 4)
        _wait_sent(loads, max(load.sent for load in loads) + 150)
        shrunk = _reshard(admin, 3)
        _wait_sent(loads, max(load.sent for load in loads) + 150)
        for load in loads:
            load.stop.set()
            load.join(60)
            assert load.error is None, load.error
            assert not load.is_alive()
    finally:
        second_server.stop(None)

    for load in loads:
        items = [item for batch in load.batches for item in batch]
        expected = _core(items)
        assert load.answers == expected  # every decision as one broker's: no window reset, no double owner
        throttled_late = sum(1 for t in expected[len(expected) // 2 :] if t > 0)
        assert throttled_late > 100  # the quota bites after the reshards: equality means something

    assert (grown.previous_shard_count, grown.shard_count) == (2, 4)
    assert (shrunk.previous_shard_count, shrunk.shard_count) == (4, 3)
    # the receivers got usage windows: the new shards from the old ones, then the others from shard 3
    assert {h.shard_id for h in grown.hand_overs} == {"2", "3"}
    assert {h.shard_id for h in shrunk.hand_overs} == {"0", "1", "2"}
    assert all(h.failures == 0 for h in [*grown.hand_overs, *shrunk.hand_overs])
    assert sum(h.sensors_received for h in grown.hand_overs) > 0
    assert sum(h.sensors_received for h in shrunk.hand_overs) > 0

    # both gateways follow the log's count, and shard 3 is gone with its checkpoint
    assert cluster.gateway.stats()["shards"].keys() == {"0", "1", "2"}
    assert cluster.gateway.reshards == 2 and set(cluster.gateway.retired) == {"3"}
    assert set(cluster.shards) == {"0", "1", "2"}
    with pytest.raises(ValueError):
        ray.get_actor("quotaplane-shard-3", namespace="quotaplane")
    assert not (cluster.data_dir / "shards" / "3" / "usage-checkpoint.bin").exists()
    described = admin.DescribeShards(admin_pb.DescribeShardsRequest())
    assert described.shard_count == 3 and [s.shard_id for s in described.shards] == ["0", "1", "2"]


def test_a_bad_count_is_invalid_argument_and_changes_nothing(admin: admin_pb2_grpc.AdminServiceStub) -> None:
    before = admin.DescribeShards(admin_pb.DescribeShardsRequest())
    for count in (0, -1, 1025):
        with pytest.raises(grpc.RpcError) as raised:
            _reshard(admin, count)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "shard count" in raised.value.details()
    after = admin.DescribeShards(admin_pb.DescribeShardsRequest())
    assert (after.shard_count, after.config_offset) == (before.shard_count, before.config_offset)


def test_the_count_cannot_be_set_as_a_plain_config(admin: admin_pb2_grpc.AdminServiceStub) -> None:
    """IncrementalAlterConfigs refuses the key: a count logged without its orchestration would route keys to
    shards that do not run, or leave state behind."""
    resource = admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=4,
        resource_name="",
        configs=[admin_pb.IncrementalAlterConfigsRequest.AlterableConfig(name="quotaplane.shard.count", value="7")],
    )
    answer = admin.IncrementalAlterConfigs(admin_pb.IncrementalAlterConfigsRequest(resources=[resource]))
    assert answer.responses[0].error_code == 40  # INVALID_CONFIG
    assert "reshard" in answer.responses[0].error_message


def _cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args, "--bootstrap-server", cluster.admin_address],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_cli_reshards_and_describes(cluster: Cluster) -> None:
    """``quotaplane shards --set N`` as an operator runs it: one line for the reshard and one per receiving shard;
    ``quotaplane shards`` lists the count and every shard; a bad count is one error line and exit 1."""
    before = admin_count(cluster)
    target = 2 if before != 2 else 3
    done = _cli(cluster, "shards", "--set", str(target))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"Resharded {before} -> {target} shards at config offset ")
    assert all(line.startswith("Shard ") and "quota sensors" in line for line in lines[1:])
    described = _cli(cluster, "shards")
    assert described.returncode == 0, described.stderr
    assert described.stdout.splitlines()[0].startswith(f"Shards: {target} (config offset ")
    assert [line.split("\t")[0] for line in described.stdout.splitlines()[1:]] == [f"Shard {i}" for i in range(target)]
    refused = _cli(cluster, "shards", "--set", "0")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.strip() == "Error: Invalid shard count 0: expected an integer from 1 to 1024"


def admin_count(cluster: Cluster) -> int:
    with grpc.insecure_channel(cluster.admin_address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        return stub.DescribeShards(admin_pb.DescribeShardsRequest()).shard_count
