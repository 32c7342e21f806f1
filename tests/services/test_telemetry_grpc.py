"""KIP-714 through gRPC ``TelemetryService``: frontend-shaped batches in, Kafka's answers out, pushes archived.

Every test runs against two backends, module-scoped:

- ``cluster``: the real thing, ``launch()`` on a local Ray with 2 shards; subscriptions are set through
  AdminService IncrementalAlterConfigs and reach the shards through the config log.
- ``inproc``: the same servicer over a stand-in gateway (``dispatch`` routing by the gateway's
  rendezvous placement to two in-process ``TelemetryHost`` s bound to a ConfigStore), so the servicer,
  the proto and the hosts are checked without Ray.

Payloads are real OTLP ``MetricsData`` compressed as clients compress them. Where a push landed is read
back from the archive files with the archive's reader; which shard wrote a segment is in its writer id,
so routing is checked too: every instance's pushes must be on the shard owning its id.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from quotaplane.actors import RendezvousPlacement
from quotaplane.actors._telemetry_host import TelemetryHost
from quotaplane.archive import ArchiveReader, iter_segments, parse_segment_name
from quotaplane.config import ConfigStore, ManagerBinding, startup_configs
from quotaplane.errors import Errors
from quotaplane.exporters.archive import TELEMETRY_STREAM
from quotaplane.kafka_uuid import ONE_UUID, RESERVED, ZERO_UUID, Uuid
from quotaplane.metrics import Metrics
from quotaplane.services.gateway import (
    TELEMETRY_KIND,
    TELEMETRY_SERVICE_NAME,
    GatewayConfig,
    InvalidArgument,
    add_telemetry_service,
)
from quotaplane.telemetry import SUPPORTED_COMPRESSION_TYPES, CompressionType, compress, compute_subscription_id
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc, telemetry_pb2_grpc
from quotaplane.v1 import telemetry_pb2 as pb

PREFIX = "org.apache.kafka.producer."
INTERVAL_MS = 30_000
SHARDS = ("0", "1")
ARCHIVE_WAIT_S = 20.0  # the archive flushes within ~1 s; generous for a loaded machine
_ids = itertools.count(1)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# --- backends --------------------------------------------------------------------------------------------
class Backend:
    """What a test needs of a deployment: the stub, the placement, subscriptions, archives, metrics."""

    stub: telemetry_pb2_grpc.TelemetryServiceStub
    channel: grpc.Channel
    data_dir: Path
    placement = RendezvousPlacement(SHARDS)  # the gateway's: shard ids as strings

    def owner(self, raw: bytes) -> str:
        return self.placement.owner(str(Uuid(raw)))

    def subscribe(self, name: str, metrics: str, interval_ms: int, match: str | None = None) -> None:
        raise NotImplementedError

    def metrics(self) -> list[tuple[str, str, float]]:
        raise NotImplementedError

    def archived(self) -> list[tuple[str, Any]]:
        """``(shard id of the writer, record)`` of every archived push under the data dir."""
        out = []
        reader = ArchiveReader()
        for stream_dir in sorted(p for p in self.data_dir.rglob(TELEMETRY_STREAM) if p.is_dir()):
            if "ray" in stream_dir.relative_to(self.data_dir).parts:
                continue
            for path in iter_segments(stream_dir.parent, TELEMETRY_STREAM):
                name = parse_segment_name(path.name)
                assert name is not None and name.writer_id.startswith("shard_")
                shard = name.writer_id[len("shard_") :].rsplit("_", 1)[0]
                out.extend((shard, record) for record in reader.read_segment(path))
        return out


class _StandInGateway:
    """``dispatch`` as the gateway's contract says: route by key, one ``serve`` per shard, results in order;
    a shard's ValueError is InvalidArgument."""

    def __init__(self, hosts: dict[str, TelemetryHost], store: ConfigStore) -> None:
        self.config = GatewayConfig()
        self.hosts = hosts
        self.store = store
        self.placement = RendezvousPlacement(list(hosts))
        self.lock = threading.Lock()  # a shard serves one call at a time
        self.calls = 0

    def clock(self) -> int:
        return wall_ms()

    def dispatch(
        self,
        kind: str,
        items: list,
        keys: list[str],
        *,
        fenced: bool = False,
        wait_s: float = 0.0,
        sizes: list[int] | None = None,
    ):
        assert kind == TELEMETRY_KIND and not fenced and len(items) == len(keys)
        assert sizes is None or len(sizes) == len(items)
        groups: dict[str, list[int]] = {}
        for index, key in enumerate(keys):
            groups.setdefault(self.placement.owner(key), []).append(index)
        results: list[Any] = [None] * len(items)
        with self.lock:
            self.calls += 1
            for shard, indices in groups.items():
                try:
                    answered = self.hosts[shard].serve([items[i] for i in indices])
                except ValueError as e:
                    raise InvalidArgument(str(e)) from None
                for index, result in zip(indices, answered, strict=True):
                    results[index] = result
        return self.store.image.end_offset, results


class InProcess(Backend):
    def __init__(self, root: Path) -> None:
        self.data_dir = root
        self.store = ConfigStore.open(root / "config", fsync=False)
        self.registries = {s: Metrics() for s in SHARDS}
        self.hosts = {
            s: TelemetryHost(
                shard_id=s,
                node_id=None,
                data_dir=str(root / "shards" / s),
                metrics=self.registries[s],
                startup=startup_configs(self.store.image),
            )
            for s in SHARDS
        }
        for host in self.hosts.values():
            binding = ManagerBinding(telemetry=host.manager)
            binding.load(self.store.image)
            self.store.subscribe(lambda delta, b=binding: b.apply(delta, self.store.image))
        self.gateway = _StandInGateway(self.hosts, self.store)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        names = add_telemetry_service(self.server, self.gateway)
        assert names == [TELEMETRY_SERVICE_NAME]
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = telemetry_pb2_grpc.TelemetryServiceStub(self.channel)

    def subscribe(self, name: str, metrics: str, interval_ms: int, match: str | None = None) -> None:
        assert self.store.alter_client_metrics(
            name, metrics=metrics, interval_ms=interval_ms, match=match, now_ms=wall_ms()
        ).ok

    def metrics(self) -> list[tuple[str, str, float]]:
        now = wall_ms()
        return [
            (name.name, name.group, metric.measurable_value(now))
            for registry in self.registries.values()
            for name, metric in registry.metrics.items()
        ]

    def close(self) -> None:
        self.channel.close()
        self.server.stop(None).wait()
        for host in self.hosts.values():
            host.close()
        self.store.close()


class OnCluster(Backend):
    def __init__(self, root: Path) -> None:
        from quotaplane.services.launcher import launch

        self.data_dir = root
        self.cluster = launch(root, shards=2, admin_port=0, gateway_port=0, metrics_port=0, fsync=False, num_cpus=2)
        assert set(self.cluster.shards) == set(SHARDS)
        assert self.cluster.gateway_address is not None
        self.admin_channel = grpc.insecure_channel(self.cluster.admin_address)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.admin_channel)
        self.channel = grpc.insecure_channel(self.cluster.gateway_address)
        self.stub = telemetry_pb2_grpc.TelemetryServiceStub(self.channel)

    def subscribe(self, name: str, metrics: str, interval_ms: int, match: str | None = None) -> None:
        Config = admin_pb.IncrementalAlterConfigsRequest.AlterableConfig
        set_ = admin_pb.ALTER_CONFIG_OP_TYPE_SET
        configs = [
            Config(name="metrics", config_operation=set_, value=metrics),
            Config(name="interval.ms", config_operation=set_, value=str(interval_ms)),
        ]
        if match is not None:
            configs.append(Config(name="match", config_operation=set_, value=match))
        response = self.admin.IncrementalAlterConfigs(
            admin_pb.IncrementalAlterConfigsRequest(
                resources=[
                    admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
                        resource_type=admin_pb.RESOURCE_TYPE_CLIENT_METRICS, resource_name=name, configs=configs
                    )
                ]
            )
        )
        assert [r.error_code for r in response.responses] == [0], response
        self.cluster.wait_caught_up(timeout_s=30)

    def metrics(self) -> list[tuple[str, str, float]]:
        import ray

        snapshots = ray.get([shard.metrics_snapshot.remote() for shard in self.cluster.shards.values()], timeout=30)
        return [(name, group, value) for snapshot in snapshots for name, group, _d, _t, value in snapshot]

    def close(self) -> None:
        self.channel.close()
        self.admin_channel.close()
        self.cluster.close()


@pytest.fixture(scope="module", params=["inproc", "cluster"])
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    root = Path(tmp_path_factory.mktemp(f"telemetry-{request.param}")) / "d"
    root.mkdir()
    b: InProcess | OnCluster = InProcess(root) if request.param == "inproc" else OnCluster(root)
    try:
        b.subscribe("producers", PREFIX, INTERVAL_MS, "client_software_name=librdkafka")
        yield b
    finally:
        b.close()


@pytest.fixture
def t0() -> int:
    """Each test's own clock origin: now, so the shards' housekeeping never sees time run far ahead."""
    return wall_ms()


# --- request helpers ---------------------------------------------------------------------------------------
def ctx(connection_id: str, client_id: str = "producer-1", software: str = "librdkafka") -> pb.RequestContext:
    return pb.RequestContext(
        connection_id=connection_id,
        client_id=client_id,
        client_software_name=software,
        client_software_version="2.16.0",
        client_source_address="10.0.0.7",
        client_source_port=51234,
        principal="User:alice",
    )


def connection() -> str:
    return f"frontend-1-conn-{next(_ids)}"


def payload(seq: int) -> bytes:
    data = metrics_pb2.MetricsData()
    rm = data.resource_metrics.add()
    rm.resource.attributes.append(KeyValue(key="client_rack", value=AnyValue(string_value="rack-1")))
    metric = rm.scope_metrics.add().metrics.add(name=PREFIX + "record.queue.time.max")
    metric.gauge.data_points.add(as_double=float(seq), time_unix_nano=seq * 10**6)
    return data.SerializeToString()


def get_req(raw: bytes, connection_id: str, now_ms: int, **kw: Any) -> pb.GetTelemetrySubscriptionsRequest:
    return pb.GetTelemetrySubscriptionsRequest(client_instance_id=raw, context=ctx(connection_id, **kw), now_ms=now_ms)


def push_req(
    raw: bytes, sid: int, connection_id: str, now_ms: int, data: bytes = b"", ctype: int = 0, terminating: bool = False
) -> pb.PushTelemetryRequest:
    return pb.PushTelemetryRequest(
        client_instance_id=raw,
        subscription_id=sid,
        terminating=terminating,
        compression_type=ctype,
        metrics=data,
        context=ctx(connection_id),
        now_ms=now_ms,
    )


def get(backend: Backend, *requests: pb.GetTelemetrySubscriptionsRequest) -> list[pb.GetTelemetrySubscriptionsResult]:
    answer = backend.stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsBatch(batch_id=7, requests=requests))
    assert answer.batch_id == 7 and len(answer.results) == len(requests)
    return list(answer.results)


def push(backend: Backend, *requests: pb.PushTelemetryRequest) -> list[tuple[int, str]]:
    answer = backend.stub.PushTelemetry(pb.PushTelemetryBatch(batch_id=8, requests=requests))
    assert answer.batch_id == 8 and len(answer.results) == len(requests)
    return [(r.error_code, r.error_message) for r in answer.results]


def subscribed(backend: Backend, t: int) -> tuple[bytes, int, str]:
    """A new client: its id, subscription id and connection, after one get at ``t``."""
    conn = connection()
    [result] = get(backend, get_req(b"", conn, t))
    assert result.error_code == 0, result
    return result.client_instance_id, result.subscription_id, conn


def wait_archived(backend: Backend, until: Callable[[list], bool]) -> list:
    deadline = time.monotonic() + ARCHIVE_WAIT_S
    while True:
        records = backend.archived()
        if until(records) or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


# --- tests -------------------------------------------------------------------------------------------------
def test_health_and_the_service_name(backend: Backend) -> None:
    if isinstance(backend, InProcess):
        assert TELEMETRY_SERVICE_NAME == "quotaplane.v1.TelemetryService"
        return
    health = health_pb2_grpc.HealthStub(backend.channel)
    status = health.Check(health_pb2.HealthCheckRequest(service=TELEMETRY_SERVICE_NAME), timeout=10).status
    assert status == health_pb2.HealthCheckResponse.SERVING


def test_first_gets_assign_ids_owned_by_the_shard_that_answers(backend: Backend, t0: int) -> None:
    conns = [connection() for _ in range(24)]
    results = get(backend, *(get_req(b"", c, t0) for c in conns))
    ids = [r.client_instance_id for r in results]
    assert len(set(ids)) == len(ids)
    assert {backend.owner(raw) for raw in ids} == set(SHARDS)  # 24 random ids spread over both shards
    for result in results:
        uuid = Uuid(result.client_instance_id)
        assert result.error_code == 0 and not result.HasField("error_message")
        assert uuid not in RESERVED
        assert result.subscription_id == compute_subscription_id([PREFIX], INTERVAL_MS, uuid)
        assert tuple(result.accepted_compression_types) == SUPPORTED_COMPRESSION_TYPES
        assert (result.push_interval_ms, result.telemetry_max_bytes) == (INTERVAL_MS, 1024 * 1024)
        assert result.delta_temporality and list(result.requested_metrics) == [PREFIX]
    # The instance lives where its id routes: a second get within the interval is Kafka's throttle. (Had
    # another shard created it, the owner would create a fresh instance and answer 0.)
    again = get(backend, *(get_req(raw, c, t0 + 1000) for raw, c in zip(ids, conns, strict=True)))
    assert {r.error_code for r in again} == {Errors.THROTTLING_QUOTA_EXCEEDED}
    assert all(r.client_instance_id == bytes(16) for r in again)


def test_the_reserved_one_id_gets_a_fresh_id_too(backend: Backend, t0: int) -> None:
    [result] = get(backend, get_req(bytes(ONE_UUID), connection(), t0))
    assert result.error_code == 0 and Uuid(result.client_instance_id) not in RESERVED


def test_a_client_the_subscription_does_not_match_gets_nothing_to_push(backend: Backend, t0: int) -> None:
    [result] = get(backend, get_req(b"", connection(), t0, software="apache-kafka-java"))
    assert result.error_code == 0
    assert (result.push_interval_ms, list(result.requested_metrics)) == (300_000, [])


@pytest.mark.parametrize("ctype", [CompressionType.NONE, CompressionType.ZSTD, CompressionType.LZ4])
def test_accepted_pushes_are_archived_on_the_owning_shard(backend: Backend, t0: int, ctype: CompressionType) -> None:
    clients = [subscribed(backend, t0) for _ in range(6)]
    seqs = {raw: next(_ids) for raw, _, _ in clients}
    bodies = {raw: payload(seqs[raw]) for raw in seqs}
    answers = push(
        backend,
        *(push_req(raw, sid, c, t0 + 10, compress(ctype, bodies[raw]), int(ctype)) for raw, sid, c in clients),
    )
    assert answers == [(0, "")] * len(clients)
    wanted = {str(Uuid(raw)) for raw in seqs}

    def mine(records: list) -> list:
        return [(s, r) for s, r in records if r.labels.get("client_instance_id") in wanted]

    records = mine(wait_archived(backend, lambda rs: len(mine(rs)) >= len(wanted)))
    assert len(records) == len(wanted)  # exactly once each
    for shard, record in records:
        raw = bytes(Uuid.from_string(record.labels["client_instance_id"]))
        assert shard == backend.owner(raw)
        assert record.body == bodies[raw]  # decompressed, as the client sent it
        assert record.time_ms == t0 + 10
        labels = dict(record.labels)
        assert labels["compression_type"] == str(int(ctype))
        assert labels["client_id"] == "producer-1" and labels["principal"] == "User:alice"
        assert labels["client_software_name"] == "librdkafka" and labels["client_source_port"] == "51234"
        assert labels["push_interval_ms"] == str(INTERVAL_MS) and labels["terminating"] == "false"


def test_kafka_errors_are_per_request_results(backend: Backend, t0: int) -> None:
    a, b, c, d, e = (subscribed(backend, t0) for _ in range(5))
    answers = push(
        backend,
        push_req(a[0], a[1] ^ 1, a[2], t0 + 10, payload(1)),  # stale subscription id
        push_req(b[0], b[1], b[2], t0 + 10, payload(2)),  # fine
        push_req(b[0], b[1], b[2], t0 + 20, payload(3)),  # before the interval
        push_req(b"", 0, connection(), t0 + 10, payload(4)),  # the zero id
        push_req(c[0], c[1], c[2], t0 + 10, payload(5), ctype=7),  # not a Kafka compression type
        push_req(d[0], d[1], d[2], t0 + 10, b"\xff\xff\xff"),  # not OTLP
        push_req(e[0], e[1], e[2], t0 + 10, payload(6), terminating=True),
        push_req(e[0], e[1], e[2], t0 + 10 + INTERVAL_MS, payload(7)),  # after a terminating push
    )
    assert [code for code, _ in answers] == [
        Errors.UNKNOWN_SUBSCRIPTION_ID,
        0,
        Errors.THROTTLING_QUOTA_EXCEEDED,
        Errors.INVALID_REQUEST,
        Errors.UNSUPPORTED_COMPRESSION_TYPE,
        Errors.INVALID_RECORD,
        0,
        Errors.INVALID_REQUEST,
    ]
    assert all(message for code, message in answers if code)
    # UNKNOWN_SUBSCRIPTION_ID and UNSUPPORTED_COMPRESSION_TYPE let the client subscribe again at once.
    again = get(backend, get_req(a[0], a[2], t0 + 30), get_req(c[0], c[2], t0 + 30), get_req(d[0], d[2], t0 + 30))
    assert [r.error_code for r in again] == [0, 0, Errors.THROTTLING_QUOTA_EXCEEDED]
    assert again[0].subscription_id == a[1]


def test_a_subscription_change_reaches_the_instances(backend: Backend, t0: int) -> None:
    raw, sid, conn = subscribed(backend, t0)
    backend.subscribe("everything-for-kafka-python", "*", 5_000, "client_software_name=kafka-python")
    [same] = get(backend, get_req(raw, conn, t0 + 5))  # unrelated resource, but the subscriptions changed:
    assert same.error_code == 0 and same.subscription_id == sid  # re-resolved, ungated, same subscription
    [result] = get(backend, get_req(b"", connection(), t0, software="kafka-python"))
    assert (result.push_interval_ms, list(result.requested_metrics)) == (5_000, ["*"])


def test_disconnect_evicts_the_instance(backend: Backend, t0: int) -> None:
    raw, _, conn = subscribed(backend, t0)
    batch = pb.ClientDisconnectedBatch(
        batch_id=9, connections=[pb.ClientDisconnected(connection_id=conn, client_instance_id=raw, now_ms=t0 + 1)]
    )
    answer = backend.stub.ClientDisconnected(batch)
    assert answer.batch_id == 9 and [r.evicted for r in answer.results] == [True]
    assert [r.evicted for r in backend.stub.ClientDisconnected(batch).results] == [False]
    # gone: a get within what would have been the interval is a new instance, not a throttle
    [result] = get(backend, get_req(raw, connection(), t0 + 2))
    assert result.error_code == 0 and result.client_instance_id == raw


def test_unset_now_ms_is_the_gateways_clock(backend: Backend) -> None:
    [result] = backend.stub.GetTelemetrySubscriptions(
        pb.GetTelemetrySubscriptionsBatch(
            requests=[pb.GetTelemetrySubscriptionsRequest(context=pb.RequestContext(connection_id=connection()))]
        )
    ).results
    assert result.error_code == 0  # empty principal: User:ANONYMOUS; no software: no match
    assert list(result.requested_metrics) == []


def test_client_metrics_reach_the_shards_metrics_registry(backend: Backend, t0: int) -> None:
    subscribed(backend, t0)
    values = {(name, group): value for name, group, value in backend.metrics() if group == "client-metrics"}
    assert ("instance-count", "client-metrics") in values and ("throttle-count", "client-metrics") in values
    counts = [
        value for name, group, value in backend.metrics() if (name, group) == ("instance-count", "client-metrics")
    ]
    assert len(counts) == len(SHARDS) and sum(counts) >= 1


def _long(n: int) -> str:
    return "x" * n


BAD = [
    ("get", pb.GetTelemetrySubscriptionsBatch(), "empty batch"),
    ("get", pb.GetTelemetrySubscriptionsBatch(requests=[get_req(b"\x01" * 5, "c", 1)]), "requests[0]: client_instance"),
    ("get", pb.GetTelemetrySubscriptionsBatch(requests=[get_req(b"", "", 1)]), "requests[0]: context.connection_id"),
    (
        "get",
        pb.GetTelemetrySubscriptionsBatch(requests=[get_req(b"", "c", 1), get_req(b"", "c", 1, client_id="a\x00b")]),
        "requests[1]: context.client_id contains a NUL",
    ),
    (
        "get",
        pb.GetTelemetrySubscriptionsBatch(requests=[get_req(b"", "c", 1, client_id=_long(1025))]),
        "longer than 1024",
    ),
    ("get", pb.GetTelemetrySubscriptionsBatch(requests=[get_req(b"", "c", -1)]), "requests[0]: now_ms must be >= 0"),
    (
        "get",
        pb.GetTelemetrySubscriptionsBatch(
            requests=[
                pb.GetTelemetrySubscriptionsRequest(
                    context=pb.RequestContext(connection_id="c", client_source_port=70_000)
                )
            ]
        ),
        "client_source_port",
    ),
    (
        "get",
        pb.GetTelemetrySubscriptionsBatch(requests=[get_req(b"", "c", 1)] * 10_001),
        "over the limit of 10000",
    ),
    ("push", pb.PushTelemetryBatch(requests=[push_req(bytes(16), 0, "c", 1, ctype=300)]), "not a Kafka int8"),
    ("push", pb.PushTelemetryBatch(requests=[push_req(b"\x01" * 17, 0, "c", 1)]), "16 bytes"),
    (
        "disconnect",
        pb.ClientDisconnectedBatch(connections=[pb.ClientDisconnected(connection_id="c", client_instance_id=b"")]),
        "connections[0]: client_instance_id must be a client's id",
    ),
    (
        "disconnect",
        pb.ClientDisconnectedBatch(connections=[pb.ClientDisconnected(client_instance_id=bytes(ONE_UUID))]),
        "connections[0]: connection_id must not be empty",
    ),
    ("disconnect", pb.ClientDisconnectedBatch(), "empty batch"),
]


@pytest.mark.parametrize(("rpc", "batch", "message"), BAD, ids=[f"{r}-{m}" for r, _, m in BAD])
def test_bad_batches_are_invalid_argument_and_the_server_keeps_serving(
    backend: Backend, rpc: str, batch: Any, message: str
) -> None:
    method = {
        "get": backend.stub.GetTelemetrySubscriptions,
        "push": backend.stub.PushTelemetry,
        "disconnect": backend.stub.ClientDisconnected,
    }[rpc]
    with pytest.raises(grpc.RpcError) as error:
        method(batch)
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in (error.value.details() or "")
    assert get(backend, get_req(b"", connection(), wall_ms()))[0].error_code == 0


def test_a_bad_batch_applies_nothing(backend: Backend, t0: int) -> None:
    raw = bytes(Uuid.from_parts(next(_ids), 0x0123_4567))
    conn = connection()
    bad = pb.GetTelemetrySubscriptionsBatch(requests=[get_req(raw, conn, t0), get_req(b"", conn, -5)])
    with pytest.raises(grpc.RpcError) as error:
        backend.stub.GetTelemetrySubscriptions(bad)
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    # had the first get been applied, this one (within the interval) would be throttled
    [result] = get(backend, get_req(raw, conn, t0 + 10))
    assert result.error_code == 0 and result.client_instance_id == raw
    assert Uuid(raw) != ZERO_UUID
