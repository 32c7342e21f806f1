"""The usage path end to end: gRPC QuotaService -> gateway -> shard actors on a real local Ray (``launch``).

The cluster is shared with other modules (conftest's ``session_cluster``: 2 shards, admin and gateway on free
ports). Every decision is compared with the in-process core (``ClientQuotaManager`` fed the same quotas, items
and ``now_ms``): the fleet must answer exactly as one Kafka broker that saw all the traffic would. The core
starts with any quota already on the cluster (``session_cluster`` removes each module's when it ends).
"""

from __future__ import annotations

import math
import pickle
import queue
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from unittest import mock

import grpc
import pytest
import ray
from grpc_health.v1 import health_pb2, health_pb2_grpc

from quotaplane.quota import DEFAULT, ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from quotaplane.services.gateway import (
    QUOTA_SERVICE_NAME,
    RETRY_AFTER_TRAILER,
    GatewayConfig,
    serve_gateway,
)
from quotaplane.services.gateway._shard_channel import ShardChannel
from quotaplane.services.launcher import Cluster, launch
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc, quota_pb2_grpc
from quotaplane.v1 import quota_pb2 as pb

from .conftest import client_quotas, entity, wait_propagated

T0 = 1_700_000_000_000
_TYPES = {pb.PRODUCE: QuotaType.PRODUCE, pb.FETCH: QuotaType.FETCH}
_KEYS = {pb.PRODUCE: "producer_byte_rate", pb.FETCH: "consumer_byte_rate"}

Item = tuple[int, str, str, float, int]  # (pb quota type, user, client id, value, now_ms)


#: Every quota set on the module's cluster, in order: a Core starts with all of them, since which sensor an
#: item shares depends on every configured entity (Kafka's resolution ladder), not only the test's own; first
#: any byte-rate quota already on the shared cluster (``quotas_on_the_cluster``).
_QUOTAS: list[tuple[int, object, object, float | None]] = []


@pytest.fixture(scope="module")
def cluster(session_cluster: Cluster) -> Cluster:
    return session_cluster


@pytest.fixture(scope="module", autouse=True)
def quotas_on_the_cluster(admin: admin_pb2_grpc.AdminServiceStub) -> None:
    """The Core starts with the byte-rate quotas already on the shared cluster (none, unless a module that ran
    before failed to take its own back): which sensor an item shares depends on every configured entity."""
    before = client_quotas(admin)
    types = {key: quota_type for quota_type, key in _KEYS.items()}
    for (components, key), bound in before.items():
        names = dict(components)
        if key in types and set(names) <= {"user", "client-id"}:
            user, client_id = (
                (DEFAULT if names[kind] is None else names[kind]) if kind in names else None
                for kind in ("user", "client-id")
            )
            _QUOTAS.append((types[key], user, client_id, bound))


class Core:
    """The in-process reference: one ClientQuotaManager per quota type, as one broker, with every quota set
    so far. Each test uses its own span of ``now_ms`` (far more than the 11 s quota window apart), so the
    usage of earlier tests is outside every window, as in a fresh core."""

    def __init__(self) -> None:
        self.managers = {t: ClientQuotaManager(ClientQuotaManagerConfig(), q) for t, q in _TYPES.items()}
        for quota_type, user, client_id, bound in _QUOTAS:
            self.set(quota_type, user, client_id, bound)

    def set(self, quota_type: int, user: object, client_id: object, bound: float | None) -> None:
        self.managers[quota_type].update_quota(ClientQuotaEntity(user=user, client_id=client_id), bound)

    def record(self, items: Sequence[Item]) -> list[int]:
        return [self.managers[t].record_and_get_throttle_time_ms(u, c, v, n) for t, u, c, v, n in items]


def set_quota(
    admin: admin_pb2_grpc.AdminServiceStub,
    core: Core | None,
    quota_type: int,
    user: object,
    client_id: object,
    bound: float | None,
) -> None:
    op = admin_pb.AlterClientQuotasRequest.OpData(key=_KEYS[quota_type])
    if bound is not None:
        op.value = bound
    entry = admin_pb.AlterClientQuotasRequest.EntryData(entity=entity(user, client_id), ops=[op])
    response = admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry]))
    assert [e.error_code for e in response.entries] == [0], response
    _QUOTAS.append((quota_type, user, client_id, bound))
    if core is not None:
        core.set(quota_type, user, client_id, bound)


def batch(items: Sequence[Item], batch_id: int = 0) -> pb.UsageBatch:
    return pb.UsageBatch(
        batch_id=batch_id,
        items=[pb.UsageItem(quota_type=t, user=u, client_id=c, value=v, now_ms=n) for t, u, c, v, n in items],
    )


def workload(users: Sequence[str], clients: Sequence[str], count: int, start_ms: int, seed: int) -> list[Item]:
    """A deterministic mix of produce and fetch items over several users and client ids."""
    out = []
    for i in range(count):
        k = (i * 7919 + seed * 104_729) % 1_000_003
        quota_type = pb.PRODUCE if k % 3 else pb.FETCH
        out.append(
            (
                quota_type,
                users[k % len(users)],
                clients[(k // 7) % len(clients)],
                float(200 + k % 900),
                start_ms + i * 20,
            )
        )
    return out


def test_throttles_through_the_cluster_equal_the_in_process_core(cluster, admin, quota):
    core = Core()
    set_quota(admin, core, pb.PRODUCE, "alice", None, 2000.0)
    set_quota(admin, core, pb.PRODUCE, DEFAULT, None, 3000.0)
    set_quota(admin, core, pb.PRODUCE, "bob", DEFAULT, 1500.0)
    set_quota(admin, core, pb.FETCH, None, "shared", 2500.0)
    set_quota(admin, core, pb.FETCH, "alice", "c1", 1000.0)
    wait_propagated(cluster, cluster.gateway)
    users, clients = ["alice", "bob", "carol", "dave"], ["c1", "c2", "shared"]
    first = workload(users, clients, 600, T0, seed=1)
    answers: list[int] = []
    for i in range(0, len(first), 50):
        answer = quota.RecordUsageBatch(batch(first[i : i + 50], i))
        assert answer.batch_id == i
        answers.extend(answer.throttle_time_ms)
    expected = core.record(first)
    assert answers == expected
    assert sum(1 for t in expected if t > 0) > 50  # the quotas bite: the comparison means something

    # a quota change mid-way: usage is kept, the new bound applies from the next decision on
    set_quota(admin, core, pb.PRODUCE, "alice", None, 500.0)
    set_quota(admin, core, pb.FETCH, None, DEFAULT, 700.0)
    set_quota(admin, core, pb.PRODUCE, "bob", DEFAULT, None)
    wait_propagated(cluster, cluster.gateway)
    second = workload(users, clients, 600, T0 + 600 * 20, seed=2)
    answers = []
    for i in range(0, len(second), 100):
        answers.extend(quota.RecordUsageBatch(batch(second[i : i + 100], i)).throttle_time_ms)
    assert answers == core.record(second)

    # producer ids: KIP-936 through the ProducerIdService, keyed by user
    with grpc.insecure_channel(cluster.gateway_address) as channel:
        pids = quota_pb2_grpc.ProducerIdServiceStub(channel)
        entry = admin_pb.AlterClientQuotasRequest.EntryData(
            entity=entity("pid-user", None),
            ops=[admin_pb.AlterClientQuotasRequest.OpData(key="producer_ids_rate", value=0.001)],
        )
        assert [
            e.error_code for e in admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry])).entries
        ] == [0]
        wait_propagated(cluster, cluster.gateway)
        items = [pb.ProducerIdItem(user="pid-user", producer_id=i, now_ms=T0) for i in range(40)]
        throttles = pids.RecordProducerIds(pb.ProducerIdBatch(items=items)).throttle_time_ms
        assert len(throttles) == 40 and throttles[-1] > 0


def test_a_quota_set_by_admin_is_enforced_by_every_gateway_within_one_round(cluster, admin):
    second_server, port, second = serve_gateway(cluster.controller, cluster.shards, "127.0.0.1:0")
    try:
        with (
            grpc.insecure_channel(cluster.gateway_address) as ch1,
            grpc.insecure_channel(f"127.0.0.1:{port}") as ch2,
        ):
            gateways = [quota_pb2_grpc.QuotaServiceStub(ch1), quota_pb2_grpc.QuotaServiceStub(ch2)]
            core = Core()
            set_quota(admin, core, pb.PRODUCE, "erin", None, 1000.0)
            set_quota(admin, core, pb.FETCH, "frank", DEFAULT, 800.0)
            took = wait_propagated(cluster, cluster.gateway, second)
            assert took < 1.0  # poll interval 50 ms + one controller call
            items = workload(["erin", "frank", "gina"], ["x", "y"], 400, T0 + 1_000_000, seed=3)
            answers = []
            for i, item in enumerate(items):  # alternate gateways: one budget per sensor across both
                answers.extend(gateways[i % 2].RecordUsageBatch(batch([item])).throttle_time_ms)
            assert answers == core.record(items)
            assert any(t > 0 for t in answers)

            # a change is picked up by both, and the two answer identically for identical fresh clients
            set_quota(admin, None, pb.PRODUCE, "henry", None, 100.0)
            set_quota(admin, None, pb.PRODUCE, "ivy", None, 100.0)
            assert wait_propagated(cluster, cluster.gateway, second) < 1.0
            a = gateways[0].RecordUsageBatch(batch([(pb.PRODUCE, "henry", "c", 5000.0, T0 + 2_000_000)]))
            b = gateways[1].RecordUsageBatch(batch([(pb.PRODUCE, "ivy", "c", 5000.0, T0 + 2_000_000)]))
            assert list(a.throttle_time_ms) == list(b.throttle_time_ms) and a.throttle_time_ms[0] > 0
            assert a.config_offset == b.config_offset == ray.get(cluster.controller.end_offset.remote())
            status = cluster.status()
            assert status.caught_up  # every shard is at the offset the gateways decided at
    finally:
        second_server.stop(0).wait()


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([], "empty batch"),
        ([pb.UsageItem(quota_type=pb.PRODUCE, user="u", client_id="c", value=1)] * 10_001, "over the limit of 10000"),
        ([pb.UsageItem(quota_type=pb.QUOTA_TYPE_UNSPECIFIED, user="u", value=1)], "item 0: unknown quota type 0"),
        ([pb.UsageItem(quota_type=7, user="u", value=1)], "unknown quota type 7"),
        (
            [
                pb.UsageItem(quota_type=pb.FETCH, user="u", value=1),
                pb.UsageItem(quota_type=pb.FETCH, user="u", value=-1),
            ],
            "item 1: value",
        ),
        ([pb.UsageItem(quota_type=pb.FETCH, user="u", value=math.nan)], "finite number"),
        ([pb.UsageItem(quota_type=pb.FETCH, user="u", value=math.inf)], "finite number"),
        ([pb.UsageItem(quota_type=pb.FETCH, user="", value=1)], "user must not be empty"),
        ([pb.UsageItem(quota_type=pb.FETCH, user="u", client_id="a\x00b", value=1)], "client_id contains a NUL"),
        ([pb.UsageItem(quota_type=pb.FETCH, user="u" * 1025, value=1)], "longer than 1024"),
        ([pb.UsageItem(quota_type=pb.FETCH, user="u", value=1, now_ms=-5)], "now_ms must be >= 0"),
    ],
)
def test_bad_batches_are_invalid_argument_and_the_server_keeps_serving(quota, items, message):
    with pytest.raises(grpc.RpcError) as error:
        quota.RecordUsageBatch(pb.UsageBatch(items=items))
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in error.value.details()
    good = quota.RecordUsageBatch(batch([(pb.PRODUCE, "ok", "c", 1.0, T0 + 30_000_000)]))
    assert list(good.throttle_time_ms) == [0]


def test_a_stream_answers_bad_batches_in_band_and_goes_on(quota):
    requests = [
        batch([(pb.PRODUCE, "s", "c", 1.0, T0 + 30_000_000)], 1),
        pb.UsageBatch(batch_id=2),
        pb.UsageBatch(batch_id=3, items=[pb.UsageItem(quota_type=9, user="s", value=1)]),
        batch([(pb.FETCH, "s", "c", 1.0, T0 + 30_000_000)], 4),
    ]
    answers = list(quota.RecordUsage(iter(requests)))
    assert [a.batch_id for a in answers] == [1, 2, 3, 4]
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert [a.error.code for a in answers] == [0, invalid, invalid, 0]
    assert "empty batch" in answers[1].error.message and list(answers[3].throttle_time_ms) == [0]


def test_a_full_gateway_is_resource_exhausted_with_retry_after(cluster, quota):
    gateway = cluster.gateway
    with gateway._room:
        saved = gateway._in_flight
        gateway._in_flight = gateway.config.max_in_flight_items  # as if that many items were queued
    try:
        with pytest.raises(grpc.RpcError) as error:
            quota.RecordUsageBatch(batch([(pb.PRODUCE, "full", "c", 1.0, T0 + 30_000_000)]))
    finally:
        with gateway._room:
            gateway._in_flight -= gateway.config.max_in_flight_items - saved
    assert error.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(error.value.trailing_metadata())
    assert int(trailers[RETRY_AFTER_TRAILER]) >= 1
    assert list(quota.RecordUsageBatch(batch([(pb.PRODUCE, "full", "c", 1.0, T0 + 30_000_000)])).throttle_time_ms) == [
        0
    ]


def test_a_dead_shard_is_unavailable(cluster):
    from quotaplane.actors import start_shard

    doomed = start_shard("doomed", cluster.controller, namespace="quotaplane")
    ray.get(doomed.info.remote())
    server, port, _ = serve_gateway(cluster.controller, {"doomed": doomed}, "127.0.0.1:0", config=GatewayConfig())
    try:
        ray.kill(doomed, no_restart=True)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = quota_pb2_grpc.QuotaServiceStub(channel)
            with pytest.raises(grpc.RpcError) as error:
                stub.RecordUsageBatch(batch([(pb.PRODUCE, "u", "c", 1.0, T0)]))
    finally:
        server.stop(0).wait()
        ray.get(cluster.controller.unsubscribe.remote(doomed, name="quotaplane-shard-doomed", namespace="quotaplane"))
    assert error.value.code() is grpc.StatusCode.UNAVAILABLE


def test_a_stream_preserves_order_with_many_batches_in_flight(cluster, admin, quota):
    core = Core()
    set_quota(admin, core, pb.PRODUCE, "streamer", None, 5000.0)
    set_quota(admin, core, pb.FETCH, "streamer", "f", 3000.0)
    wait_propagated(cluster, cluster.gateway)
    items = workload(["streamer"], ["p", "f", "g"], 3000, T0 + 10_000_000, seed=4)
    sizes = [1, 7, 50, 200, 3, 500, 13, 1000]
    batches, i, n = [], 0, 0
    while i < len(items):
        size = sizes[n % len(sizes)]
        batches.append(batch(items[i : i + size], n))
        i, n = i + size, n + 1
    sent: queue.Queue[pb.UsageBatch | None] = queue.Queue()

    def requests() -> Iterator[pb.UsageBatch]:
        while (b := sent.get()) is not None:
            yield b

    for b in batches:  # all of them queued before the first answer is read: many in flight
        sent.put(b)
    sent.put(None)
    answers = list(quota.RecordUsage(requests()))
    assert [a.batch_id for a in answers] == list(range(len(batches)))
    assert [len(a.throttle_time_ms) for a in answers] == [len(b.items) for b in batches]
    flat = [t for a in answers for t in a.throttle_time_ms]
    assert flat == core.record(items)
    assert any(t > 0 for t in flat)


def test_health_and_reflection(cluster):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(cluster.gateway_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(service=QUOTA_SERVICE_NAME)).status == 1
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        [response] = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name for s in response.list_services_response.service}
    assert {"quotaplane.v1.QuotaService", "quotaplane.v1.ProducerIdService"} <= names


def test_concurrent_streams_share_the_budget(cluster, admin, quota):
    """Two streams at once for one user: together they are throttled as one client would be."""
    set_quota(admin, None, pb.PRODUCE, "twin", None, 1000.0)
    wait_propagated(cluster, cluster.gateway)
    results: dict[int, list[int]] = {}

    def run(k: int) -> None:
        reqs = [batch([(pb.PRODUCE, "twin", f"c{k}", 2000.0, T0 + 20_000_000)], j) for j in range(5)]
        results[k] = [a.throttle_time_ms[0] for a in quota.RecordUsage(iter(reqs))]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    core = Core()
    expected = core.record([(pb.PRODUCE, "twin", "c", 2000.0, T0 + 20_000_000)] * 10)
    assert sorted(results[0] + results[1]) == sorted(expected)


def test_a_gateway_behind_the_shards_catches_up_and_routes_again(cluster, admin):
    """The offset fence: a gateway that has not polled a change that moves sensors gets "ahead" answers from
    the shards, catches up, resolves and routes the items again; the decisions still equal the core's."""
    slow_server, port, slow = serve_gateway(
        cluster.controller, cluster.shards, "127.0.0.1:0", config=GatewayConfig(poll_interval_s=3600.0)
    )
    try:
        users, clients = [f"late{i}" for i in range(6)], ["k1", "k2", "k3"]
        # user/client-id quotas for every pair: a new level, so the tags of every late* item change
        for user in users:
            set_quota(admin, None, pb.PRODUCE, user, DEFAULT, 1200.0)
        cluster.wait_caught_up(timeout_s=10)
        assert slow.config_offset < ray.get(cluster.controller.end_offset.remote())
        core = Core()
        items = workload(users, clients, 300, T0 + 40_000_000, seed=5)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = quota_pb2_grpc.QuotaServiceStub(channel)
            answers = [
                t for i in range(0, 300, 60) for t in stub.RecordUsageBatch(batch(items[i : i + 60])).throttle_time_ms
            ]
        assert answers == core.record(items)
        assert slow.reroutes > 0  # the fence was hit, and handled
        assert slow.config_offset == ray.get(cluster.controller.end_offset.remote())
    finally:
        slow_server.stop(0).wait()


def test_direct_channel_and_ray_calls_decide_alike_and_share_the_budget(cluster, admin, quota):
    """Batches through a gateway on the shards' direct channels (the default) and through one making Ray actor
    calls (``direct_shard_calls=False``), interleaved: one budget, the core's decisions."""
    core = Core()
    for user in ("dc-a", "dc-b"):
        set_quota(admin, core, pb.PRODUCE, user, None, 1500.0)
    wait_propagated(cluster, cluster.gateway)
    ray_server, ray_port, via_ray = serve_gateway(
        cluster.controller, cluster.shards, "127.0.0.1:0", config=GatewayConfig(direct_shard_calls=False)
    )
    try:
        items = workload(["dc-a", "dc-b"], ["k1", "k2"], 400, T0 + 50_000_000, seed=9)
        answers: list[int] = []
        with grpc.insecure_channel(f"127.0.0.1:{ray_port}") as channel:
            stubs = [quota_pb2_grpc.QuotaServiceStub(channel), quota]
            for n, i in enumerate(range(0, 400, 40)):
                answers.extend(stubs[n % 2].RecordUsageBatch(batch(items[i : i + 40])).throttle_time_ms)
        assert answers == core.record(items)
        assert sum(1 for t in answers if t > 0) > 20
        assert all(w.channel.connects == 0 for w in via_ray.workers.values())
        assert sum(w.channel.connects for w in cluster.gateway.workers.values()) >= 1
    finally:
        ray_server.stop(0).wait()


def test_a_gateway_of_one_shard_routes_without_resolving_the_items_tags(cluster, admin, quota):
    """With one shard in the placement every key is its own, so the gateway sends a batch there without resolving
    the items' metric tags (~0.4-0.7 ms a 1000 items); the shard resolves them itself, and decides as the core.
    A gateway of two shards does resolve them (the control)."""
    core = Core()
    set_quota(admin, core, pb.PRODUCE, "solo-a", None, 1500.0)
    wait_propagated(cluster, cluster.gateway)
    server, port, solo = serve_gateway(cluster.controller, {"solo": cluster.shards["0"]}, "127.0.0.1:0")
    replicas = (solo.replica, cluster.gateway.replica)
    try:
        with (
            mock.patch.object(replicas[0], "resolve", wraps=replicas[0].resolve) as solo_resolve,
            mock.patch.object(replicas[1], "resolve", wraps=replicas[1].resolve) as pair_resolve,
        ):
            wait_propagated(cluster, solo)
            items = workload(["solo-a", "solo-b"], ["k1", "k2"], 300, T0 + 60_000_000, seed=11)
            answers: list[int] = []
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = quota_pb2_grpc.QuotaServiceStub(channel)
                for i in range(0, 300, 50):
                    answers.extend(stub.RecordUsageBatch(batch(items[i : i + 50])).throttle_time_ms)
            assert answers == core.record(items)
            assert sum(1 for t in answers if t > 0) > 10
            assert solo_resolve.call_count == 0
            quota.RecordUsageBatch(batch(workload(["solo-c"], ["k1"], 5, T0 + 61_000_000, seed=12)))
            assert pair_resolve.call_count >= 1
    finally:
        server.stop(0).wait()


class FakeShard:
    """A shard handle whose direct channel is at ``address`` and whose Ray call answers ``via-ray``."""

    def __init__(self, address: tuple[str, int, bytes]) -> None:
        self.address = address
        self.asked = 0
        self.options: list[dict] = []

    @property
    def direct_address(self) -> SimpleNamespace:
        def remote() -> ray.ObjectRef:
            self.asked += 1
            return ray.put(self.address)

        def options(**given: object) -> SimpleNamespace:
            self.options.append(given)
            return SimpleNamespace(remote=remote)

        return SimpleNamespace(remote=remote, options=options)

    @property
    def serve_packed(self) -> SimpleNamespace:
        return SimpleNamespace(remote=lambda kind, offset, payload: ray.put(pickle.dumps((offset, ["via-ray"]))))


def test_an_unreachable_direct_channel_falls_back_to_ray_calls_for_a_while(cluster):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    shard = FakeShard(("127.0.0.1", port, b"t" * 32))
    channel = ShardChannel("fake", shard, timeout_s=5.0)
    assert channel.call("usage", 3, [("PRODUCE", "u", "c", 1.0, T0)]) == (3, ["via-ray"])
    assert channel.call("usage", 4, [("PRODUCE", "u", "c", 1.0, T0)]) == (4, ["via-ray"])
    assert (shard.asked, channel.connects) == (1, 0)  # not asked again within RETRY_DIRECT_S
    # the address is a read: Ray retries it on a restarted shard, so a reconnect waits for the new process
    # instead of failing with "the actor is restarting" (the serving calls are never retried)
    assert shard.options == [{"max_task_retries": -1}]


def test_a_busy_gateway_port_fails_before_ray_starts(tmp_path):
    import socket

    from quotaplane.services.launcher import LaunchError

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(LaunchError) as error:
            launch(tmp_path / "d", admin_port=0, gateway_port=port, metrics_port=None)
    assert str(error.value) == f"cannot listen on 127.0.0.1:{port} for the usage gateway: the port is in use"
    assert time.monotonic() - started < 5
    assert not (tmp_path / "d" / "ray").exists()
    with pytest.raises(LaunchError, match=r"--gateway-port must be in 0\.\.65535"):
        launch(tmp_path / "d", admin_port=0, gateway_port=70000, metrics_port=None)


def test_items_without_now_ms_get_the_gateway_clock_and_bad_producer_ids_are_refused(cluster, admin):
    now = T0 + 50_000_000
    set_quota(admin, None, pb.PRODUCE, "clocked", None, 1000.0)
    server, port, stamped = serve_gateway(cluster.controller, cluster.shards, "127.0.0.1:0", clock=lambda: now)
    try:
        wait_propagated(cluster, stamped)
        core = Core()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = quota_pb2_grpc.QuotaServiceStub(channel)
            unstamped = pb.UsageBatch(items=[pb.UsageItem(quota_type=pb.PRODUCE, user="clocked", value=8000.0)] * 3)
            assert list(stub.RecordUsageBatch(unstamped).throttle_time_ms) == core.record(
                [(pb.PRODUCE, "clocked", "", 8000.0, now)] * 3
            )
            pids = quota_pb2_grpc.ProducerIdServiceStub(channel)
            for items, message in [
                ([], "empty batch"),
                ([pb.ProducerIdItem(user="", producer_id=1)], "user must not be empty"),
                ([pb.ProducerIdItem(user="p", producer_id=-1)], "producer_id must be >= 0"),
            ]:
                with pytest.raises(grpc.RpcError) as error:
                    pids.RecordProducerIds(pb.ProducerIdBatch(items=items))
                assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert message in error.value.details()
            assert list(
                pids.RecordProducerIds(
                    pb.ProducerIdBatch(items=[pb.ProducerIdItem(user="p", producer_id=1)])
                ).throttle_time_ms
            ) == [0]
    finally:
        server.stop(0).wait()
