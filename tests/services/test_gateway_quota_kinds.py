"""The other quota kinds through gateway -> shards on a real local Ray: request_percentage, controller
mutations (strict and permissive), fetch un-record and replication throttles.

Every answer is compared with the in-process core fed the same quotas and items (one Kafka broker that saw
all the traffic); each test uses its own span of ``now_ms`` and its own users, so tests do not share usage. The
cluster is shared with other modules (conftest's ``session_cluster``): the broker and topic configs set here are
deleted when the module ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from quotaplane.quota import (
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ClientRequestQuotaManager,
    ControllerMutationQuotaManager,
    QuotaType,
    ReplicationQuotaManager,
    ReplicationQuotaManagerConfig,
    ThrottlingQuotaExceededError,
)
from quotaplane.services.launcher import Cluster
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import quota_pb2 as pb

from .conftest import entity, wait_propagated

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def cluster(session_cluster: Cluster) -> Cluster:
    return session_cluster


@pytest.fixture(scope="module", autouse=True)
def configs_put_back(admin) -> Iterator[None]:
    """The replication configs are cluster-wide: deleted (back to their defaults) when the module ends."""
    yield
    for resource_type, name, key in [
        (admin_pb.RESOURCE_TYPE_BROKER, "1", "leader.replication.throttled.rate"),
        (admin_pb.RESOURCE_TYPE_TOPIC, "orders", "leader.replication.throttled.replicas"),
    ]:
        config = admin_pb.IncrementalAlterConfigsRequest.AlterableConfig(
            name=key, config_operation=admin_pb.ALTER_CONFIG_OP_TYPE_DELETE
        )
        resource = admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=resource_type, resource_name=name, configs=[config]
        )
        response = admin.IncrementalAlterConfigs(admin_pb.IncrementalAlterConfigsRequest(resources=[resource]))
        assert [r.error_code for r in response.responses] == [0], response


def alter_quota(admin, cluster: Cluster, user: str, client_id: str | None, key: str, value: float) -> None:
    entry = admin_pb.AlterClientQuotasRequest.EntryData(
        entity=entity(user, client_id), ops=[admin_pb.AlterClientQuotasRequest.OpData(key=key, value=value)]
    )
    response = admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry]))
    assert [e.error_code for e in response.entries] == [0], response
    wait_propagated(cluster, cluster.gateway)


def user_quota_on_both(admin, cluster: Cluster, core: ClientQuotaManager, user: str, key: str, bound: float) -> None:
    """``key`` = ``bound`` for ``user`` on the cluster (through AdminService, propagated) and on ``core``."""
    alter_quota(admin, cluster, user, None, key, bound)
    core.update_quota(ClientQuotaEntity(user=user, client_id=None), bound)


def alter_configs(admin, cluster: Cluster, resource_type: int, name: str, **configs: str) -> None:
    resource = admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=resource_type,
        resource_name=name,
        configs=[
            admin_pb.IncrementalAlterConfigsRequest.AlterableConfig(
                name=key.replace("_", "."), config_operation=admin_pb.ALTER_CONFIG_OP_TYPE_SET, value=value
            )
            for key, value in configs.items()
        ],
    )
    response = admin.IncrementalAlterConfigs(admin_pb.IncrementalAlterConfigsRequest(resources=[resource]))
    assert [r.error_code for r in response.responses] == [0], response
    wait_propagated(cluster, cluster.gateway)


def test_request_percentage_throttles_equal_the_core(cluster, admin, quota):
    core = ClientRequestQuotaManager(ClientQuotaManagerConfig())
    user_quota_on_both(admin, cluster, core, "req-user", "request_percentage", 40.0)
    items = []
    for i in range(120):
        # 20-180 ms of handler time per request, 40 requests/s (several handler threads busy: well over
        # 40 % of one thread even averaged over Kafka's 10 s minimum window); every third also reports
        # its response's network time
        nanos = (20 + (i * 7) % 161) * 1_000_000
        network = 2_000_000 if i % 3 == 0 else 0
        items.append(("req-user", f"c{i % 3}", nanos, network, i % 17 == 16, T0 + i * 25))
    answers = []
    for start in range(0, len(items), 40):
        chunk = items[start : start + 40]
        request = pb.RequestTimeBatch(
            batch_id=start,
            items=[
                pb.RequestTimeItem(
                    user=u, client_id=c, request_thread_time_nanos=r, network_thread_time_nanos=n, exempt=e, now_ms=t
                )
                for u, c, r, n, e, t in chunk
            ],
        )
        answer = quota.RecordRequestTime(request)
        assert answer.batch_id == start
        answers.extend(answer.throttle_time_ms)
    expected = []
    for user, client_id, nanos, network, exempt, now in items:
        if exempt:
            core.maybe_record_exempt(time_nanos=nanos + network, now_ms=now)
            expected.append(0)
            continue
        expected.append(core.maybe_record_request_time(user, client_id, request_thread_time_nanos=nanos, now_ms=now))
        if network:
            core.record_network_thread_time(user, client_id, time_nanos=network, now_ms=now)
    assert answers == expected
    assert any(t > 0 for t in expected)
    assert max(expected) <= 1000  # bounded by one quota window, as Kafka's request quota is


def _core_mutations(core: ControllerMutationQuotaManager, user, client_id, strict, permits, now):
    quota = (core.new_strict_quota_for if strict else core.new_permissive_quota_for)(user, client_id, now)
    accepted = []
    for p in permits:
        try:
            quota.record(p, now)
            accepted.append(True)
        except ThrottlingQuotaExceededError:
            accepted.append(False)
    return quota.throttle_time(now), accepted


def test_controller_mutations_strict_and_permissive_equal_the_core(cluster, admin, quota):
    core = ControllerMutationQuotaManager(ClientQuotaManagerConfig())
    user_quota_on_both(admin, cluster, core, "mut-user", "controller_mutation_rate", 10.0)
    requests = []
    for i in range(30):
        strict = i % 2 == 0
        permits = tuple(float(1 + (i + k) % 6) for k in range(1 + i % 3))
        requests.append(("mut-user", "admin-tool", strict, permits, T0 + 1_000_000 + i * 300))
    got = []
    for user, client_id, strict, permits, now in requests:
        item = pb.MutationItem(
            user=user, client_id=client_id, mode=pb.STRICT if strict else pb.PERMISSIVE, permits=permits, now_ms=now
        )
        (result,) = quota.RecordMutations(pb.MutationBatch(items=[item])).results
        got.append((result.throttle_time_ms, list(result.accepted)))
    expected = [_core_mutations(core, *r) for r in requests]
    assert got == expected
    assert any(not all(accepted) for _, accepted in expected)  # strict refusals happened
    assert any(t > 0 and all(accepted) for t, accepted in expected)  # permissive throttles without refusing


def test_fetch_unrecord_takes_usage_back_in_order(cluster, admin, quota):
    core = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.FETCH)
    user_quota_on_both(admin, cluster, core, "fetch-user", "consumer_byte_rate", 1000.0)
    now = T0 + 2_000_000
    answers, expected = [], []
    for i in range(40):
        t = now + i * 100
        item = pb.UsageItem(quota_type=pb.FETCH, user="fetch-user", client_id="c", value=900.0, now_ms=t)
        throttle = quota.RecordUsageBatch(pb.UsageBatch(items=[item])).throttle_time_ms[0]
        answers.append(throttle)
        core_throttle = core.record_and_get_throttle_time_ms("fetch-user", "c", 900.0, t)
        expected.append(core_throttle)
        if throttle > 0:  # Kafka answers a throttled fetch empty and takes its bytes back
            assert list(quota.UnrecordUsage(pb.UsageBatch(items=[item])).throttle_time_ms) == [0]
        if core_throttle > 0:
            core.unrecord_quota_sensor("fetch-user", "c", 900.0, t)
    assert answers == expected
    assert any(t > 0 for t in expected)
    # without un-recording, the same sequence throttles more: the un-record changed the decisions
    plain = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.FETCH)
    plain.update_quota(ClientQuotaEntity(user="fetch-user", client_id=None), 1000.0)
    without = [plain.record_and_get_throttle_time_ms("fetch-user", "c", 900.0, now + i * 100) for i in range(40)]
    assert without != expected


def test_replication_throttles_per_node_equal_the_core(cluster, admin, quota):
    alter_configs(admin, cluster, admin_pb.RESOURCE_TYPE_BROKER, "1", leader_replication_throttled_rate="5000")
    alter_configs(
        admin, cluster, admin_pb.RESOURCE_TYPE_TOPIC, "orders", leader_replication_throttled_replicas="0:1,1:2"
    )
    core = ReplicationQuotaManager(ReplicationQuotaManagerConfig(), "LeaderReplication")
    core.update_quota(5000.0)
    core.mark_throttled("orders", [0])
    now = T0 + 3_000_000
    items = [pb.ReplicationItem(node_id=1, type=pb.LEADER_REPLICATION, topic="orders", partition=0, now_ms=now)]
    items += [
        pb.ReplicationItem(
            node_id=1, type=pb.LEADER_REPLICATION, topic="orders", partition=0, record_bytes=4000.0, now_ms=now + i
        )
        for i in range(1, 20)
    ]
    got = quota.CheckReplication(pb.ReplicationBatch(batch_id=7, items=items))
    assert got.batch_id == 7
    expected = []
    for item in items:
        core.record(item.record_bytes, item.now_ms) if item.record_bytes else None
        expected.append((True, core.is_quota_exceeded(item.now_ms)))
    assert [(r.throttled, r.quota_exceeded) for r in got.results] == expected
    assert expected[0] == (True, False) and expected[-1] == (True, True)

    # partition 1 is throttled on node 2 (not node 1); node 2 has no rate set, so it is never exceeded;
    # a topic without throttled replicas is never throttled, and its bytes are not recorded
    others = [
        pb.ReplicationItem(node_id=1, type=pb.LEADER_REPLICATION, topic="orders", partition=1, record_bytes=1e9),
        pb.ReplicationItem(node_id=2, type=pb.LEADER_REPLICATION, topic="orders", partition=1, record_bytes=1e9),
        pb.ReplicationItem(node_id=1, type=pb.FOLLOWER_REPLICATION, topic="orders", partition=0),
        pb.ReplicationItem(node_id=1, type=pb.LEADER_REPLICATION, topic="other", partition=0, record_bytes=1.0),
    ]
    for item in others:
        item.now_ms = now + 30
    results = [
        (r.throttled, r.quota_exceeded) for r in quota.CheckReplication(pb.ReplicationBatch(items=others)).results
    ]
    assert results == [(False, True), (True, False), (False, False), (False, True)]


@pytest.mark.parametrize(
    ("call", "bad", "message"),
    [
        ("RecordRequestTime", pb.RequestTimeBatch(), "empty batch"),
        ("RecordRequestTime", pb.RequestTimeBatch(items=[pb.RequestTimeItem(client_id="c")]), "user"),
        (
            "RecordRequestTime",
            pb.RequestTimeBatch(items=[pb.RequestTimeItem(user="u", request_thread_time_nanos=-1)]),
            "thread times",
        ),
        ("RecordMutations", pb.MutationBatch(items=[pb.MutationItem(user="u", permits=[1.0])]), "STRICT"),
        ("RecordMutations", pb.MutationBatch(items=[pb.MutationItem(user="u", mode=pb.STRICT)]), "permits"),
        (
            "RecordMutations",
            pb.MutationBatch(items=[pb.MutationItem(user="u", mode=pb.STRICT, permits=[float("nan")])]),
            "finite",
        ),
        ("CheckReplication", pb.ReplicationBatch(items=[pb.ReplicationItem(node_id=1, topic="t")]), "type"),
        (
            "CheckReplication",
            pb.ReplicationBatch(items=[pb.ReplicationItem(node_id=-1, type=pb.LEADER_REPLICATION, topic="t")]),
            "node_id",
        ),
        (
            "CheckReplication",
            pb.ReplicationBatch(items=[pb.ReplicationItem(node_id=1, type=pb.LEADER_REPLICATION, topic="")]),
            "topic",
        ),
        ("UnrecordUsage", pb.UsageBatch(items=[pb.UsageItem(user="u", value=1.0)]), "quota type"),
    ],
)
def test_bad_requests_are_invalid_argument_and_the_gateway_keeps_serving(quota, call, bad, message):
    with pytest.raises(grpc.RpcError) as error:
        getattr(quota, call)(bad, timeout=10)
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in error.value.details()
    ok = pb.ReplicationItem(node_id=9, type=pb.FOLLOWER_REPLICATION, topic="t", partition=0, now_ms=T0)
    assert len(quota.CheckReplication(pb.ReplicationBatch(items=[ok]), timeout=10).results) == 1


def test_every_nonzero_throttle_is_archived_for_the_throttle_report(cluster, admin, quota):
    import ray

    from quotaplane.actors._throttle_archive import THROTTLE_STREAM
    from quotaplane.archive import ArchiveReader

    alter_quota(admin, cluster, "archived-user", None, "producer_byte_rate", 500.0)
    now = T0 + 4_000_000
    items = [
        pb.UsageItem(quota_type=pb.PRODUCE, user="archived-user", client_id="app", value=400.0, now_ms=now + i * 10)
        for i in range(40)
    ]
    throttles = list(quota.RecordUsageBatch(pb.UsageBatch(items=items)).throttle_time_ms)
    assert any(throttles)
    assert all(ray.get([s.flush_archives.remote() for s in cluster.shards.values()]))
    records = [
        r
        for root in (cluster.data_dir / "shards").iterdir()
        for r in ArchiveReader().read(root, THROTTLE_STREAM)
        if r.labels.get("user") == "archived-user"
    ]
    got = sorted((r.time_ms, int(r.labels["throttle_time_ms"])) for r in records)
    assert got == [(now + i * 10, t) for i, t in enumerate(throttles) if t > 0]
    assert {(r.labels["quota_type"], r.labels["client_id"]) for r in records} == {("Produce", "app")}


@pytest.mark.parametrize(("max_bytes", "most_calls"), [(1000, False), (8 << 20, True)])
def test_shard_calls_are_bounded_by_the_bytes_items_declare(cluster, max_bytes, most_calls):
    import threading

    from quotaplane.services.gateway import GatewayConfig, serve_gateway

    config = GatewayConfig(max_shard_batch_bytes=max_bytes, linger_s=0.2)
    server, _, gateway = serve_gateway(cluster.controller, cluster.shards, "127.0.0.1:0", config=config)
    try:
        item = (77, "FOLLOWER_REPLICATION", "sized", 0, 0.0, T0)
        callers = [
            threading.Thread(
                target=gateway.dispatch, args=("replication", [item], ["replication:77"]), kwargs={"sizes": [600]}
            )
            for _ in range(8)
        ]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(30)
        calls = sum(s["batches"] for s in gateway.stats()["shards"].values())
    finally:
        server.stop(0).wait()
    if most_calls:
        assert calls < 8  # 8 requests of 600 bytes share calls when 8 MiB may go in one
    else:
        assert calls == 8  # 600 + 600 > 1000: each request goes alone
