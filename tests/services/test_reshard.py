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
import urllib.request
from collections.abc import Iterator, Sequence

import grpc
import pytest
import ray

from quotaplane.errors import ThrottlingQuotaExceededError
from quotaplane.quota import (
    DEFAULT,
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ProducerIdQuotaManager,
    ProducerIdQuotaManagerConfig,
    QuotaConfig,
    QuotaType,
    build_quota_managers,
)
from quotaplane.services.gateway import serve_gateway
from quotaplane.services.launcher import Cluster
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc, quota_pb2_grpc, telemetry_pb2_grpc
from quotaplane.v1 import quota_pb2 as pb
from quotaplane.v1 import telemetry_pb2 as telemetry_pb

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
    reshard_2_4_3_under_load(cluster, admin)


def reshard_2_4_3_under_load(cluster: Cluster, admin: admin_pb2_grpc.AdminServiceStub) -> None:
    """The test's body, shared with the run on several raylets (``test_reshard_nodes.py``)."""
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
    # the metrics endpoint scrapes the shards of the current placement
    assert cluster.metrics_url is not None
    with urllib.request.urlopen(cluster.metrics_url, timeout=30) as response:
        page = response.read().decode()
    assert {f'quotaplane_shard_up{{shard="{i}"}} 1.0' for i in range(3)} <= set(page.splitlines())
    assert 'shard="3"' not in page


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


def _set_user_default(admin: admin_pb2_grpc.AdminServiceStub, key: str, value: float) -> None:
    op = admin_pb.AlterClientQuotasRequest.OpData(key=key, value=value)
    entry = admin_pb.AlterClientQuotasRequest.EntryData(entity=entity(DEFAULT, None), ops=[op])
    answer = admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry]))
    assert [e.error_code for e in answer.entries] == [0]


def test_producer_id_filters_and_mutation_buckets_move_with_their_keys(
    cluster: Cluster, admin: admin_pb2_grpc.AdminServiceStub
) -> None:
    """KIP-936 filters and KIP-599 token buckets, not only usage windows: after a reshard the ids a user already
    registered are still known (not charged again) and a drained bucket is still drained, exactly as one
    uninterrupted broker's managers answer."""
    _set_user_default(admin, "producer_ids_rate", 0.0001)  # a burst of ~4 ids in the 11 h window
    _set_user_default(admin, "controller_mutation_rate", 2.0)
    wait_propagated(cluster, cluster.gateway)
    now = int(time.time() * 1000)
    users = [f"pid-{i}" for i in range(40)]
    pid_phases = [
        [(u, 1000 * i + k, now + 10 * k) for i, u in enumerate(users) for k in range(3)],  # new ids: buckets drain
        [(u, 1000 * i + k, now + 100 + 10 * k) for i, u in enumerate(users) for k in range(4)],  # 3 seen, 1 new
    ]
    mutation_phases = [
        [(u, "admin", [20.0, 20.0, 20.0], now + 50) for u in users],  # strict: 22 tokens go below zero
        [(u, "admin", [1.0], now + 150) for u in users],  # refused while the bucket is still negative
    ]
    core_pids = ProducerIdQuotaManager(ProducerIdQuotaManagerConfig())
    core_pids.update_quota(ClientQuotaEntity(user=DEFAULT), 0.0001)
    core_mutations = build_quota_managers(QuotaConfig(), now_ms=now).controller_mutation
    core_mutations.update_quota(ClientQuotaEntity(user=DEFAULT), 2.0)

    def core_mutation(user: str, client: str, permits: list[float], at: int) -> tuple[int, list[bool]]:
        quota = core_mutations.new_strict_quota_for(user, client, at)
        accepted = []
        for p in permits:
            try:
                quota.record(p, at)
                accepted.append(True)
            except ThrottlingQuotaExceededError:
                accepted.append(False)
        return quota.throttle_time(at), accepted

    count = admin_count(cluster)
    with grpc.insecure_channel(cluster.gateway_address) as channel:
        pids = quota_pb2_grpc.ProducerIdServiceStub(channel)
        quota = quota_pb2_grpc.QuotaServiceStub(channel)
        for phase, (pid_items, mutation_items) in enumerate(zip(pid_phases, mutation_phases, strict=True)):
            if phase == 1:
                moved = _reshard(admin, count + 2)
                assert all(h.failures == 0 for h in moved.hand_overs)
            answer = pids.RecordProducerIds(
                pb.ProducerIdBatch(items=[pb.ProducerIdItem(user=u, producer_id=p, now_ms=t) for u, p, t in pid_items])
            )
            expected = [core_pids.record_and_get_throttle_time_ms(*item) for item in pid_items]
            assert list(answer.throttle_time_ms) == expected
            results = quota.RecordMutations(
                pb.MutationBatch(
                    items=[
                        pb.MutationItem(user=u, client_id=c, mode=pb.STRICT, permits=p, now_ms=t)
                        for u, c, p, t in mutation_items
                    ]
                )
            ).results
            got = [(r.throttle_time_ms, list(r.accepted)) for r in results]
            assert got == [core_mutation(*item) for item in mutation_items]
            if phase == 1:  # the comparison means something: seen ids pass, new ones are throttled, drained
                assert 0 in expected and any(t > 0 for t in expected)  # buckets refuse
                assert any(False in accepted for _, accepted in got)


def test_client_instances_move_with_their_ids(cluster: Cluster, admin: admin_pb2_grpc.AdminServiceStub) -> None:
    """KIP-714 instances move too: a client that pushed just before a reshard and pushes again too soon after it
    is told THROTTLING_QUOTA_EXCEEDED by its new owner (which knows its last push), as by one broker."""
    configs = [
        admin_pb.IncrementalAlterConfigsRequest.AlterableConfig(name="metrics", value="org.apache.kafka.producer."),
        admin_pb.IncrementalAlterConfigsRequest.AlterableConfig(name="interval.ms", value="60000"),
    ]
    resource = admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=16, resource_name="reshard-producers", configs=configs
    )
    answer = admin.IncrementalAlterConfigs(admin_pb.IncrementalAlterConfigsRequest(resources=[resource]))
    assert answer.responses[0].error_code == 0, answer
    wait_propagated(cluster, cluster.gateway)
    now = int(time.time() * 1000)

    def context(i: int) -> telemetry_pb.RequestContext:
        return telemetry_pb.RequestContext(
            connection_id=f"reshard-conn-{i}",
            client_id=f"producer-{i}",
            client_software_name="librdkafka",
            client_software_version="2.16.0",
            client_source_address="10.0.0.7",
            client_source_port=40000 + i,
        )

    with grpc.insecure_channel(cluster.gateway_address) as channel:
        stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)

        def push(clients: list[tuple[bytes, int]], at: int) -> list[int]:
            requests = [
                telemetry_pb.PushTelemetryRequest(
                    client_instance_id=raw, subscription_id=sid, context=context(i), now_ms=at
                )
                for i, (raw, sid) in enumerate(clients)
            ]
            return [
                r.error_code for r in stub.PushTelemetry(telemetry_pb.PushTelemetryBatch(requests=requests)).results
            ]

        gets = [
            telemetry_pb.GetTelemetrySubscriptionsRequest(client_instance_id=b"", context=context(i), now_ms=now)
            for i in range(40)
        ]
        results = stub.GetTelemetrySubscriptions(telemetry_pb.GetTelemetrySubscriptionsBatch(requests=gets)).results
        clients = [(r.client_instance_id, r.subscription_id) for r in results]
        assert all(r.error_code == 0 for r in results)
        assert push(clients, now + 60_000) == [0] * 40  # on time: accepted
        moved = _reshard(admin, admin_count(cluster) + 1)
        assert all(h.failures == 0 for h in moved.hand_overs)
        assert sum(h.sensors_received for h in moved.hand_overs) > 0  # some instances moved
        # too soon after the last push, on every shard, moved or not: the new owner knows that push
        assert push(clients, now + 60_010) == [89] * 40  # THROTTLING_QUOTA_EXCEEDED
