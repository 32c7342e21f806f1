"""TelemetryHost without Ray: the tuple interface a shard serves, against the core's own answers.

Subscriptions come from a real ConfigStore through a ManagerBinding (as on a shard); pushes carry real
OTLP ``MetricsData``, compressed as clients compress them, and are read back from the archive on disk
with the archive's own reader. Every answer is also checked against a reference ``ClientMetricsManager``
fed the same subscriptions and requests: the host must answer exactly as the core does.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from quotaplane.actors._telemetry_host import NO_NODE_ID, TelemetryHost, check_items
from quotaplane.archive import ArchiveReader
from quotaplane.config import (
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    ManagerBinding,
    OpType,
    startup_configs,
)
from quotaplane.errors import Errors
from quotaplane.exporters.archive import TELEMETRY_STREAM
from quotaplane.kafka_uuid import ONE_UUID, RESERVED, ZERO_UUID, Uuid
from quotaplane.metrics import Metrics
from quotaplane.telemetry import (
    SUPPORTED_COMPRESSION_TYPES,
    ClientMetricsManager,
    ClientMetricsManagerConfig,
    CompressionType,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
    RequestContext,
    compress,
    compute_subscription_id,
)

T0 = 1_700_000_000_000
INTERVAL_MS = 30_000
PREFIX = "org.apache.kafka.producer."
CTX = ("conn-1", "producer-1", "librdkafka", "2.16.0", "10.0.0.7", 51234, "User:alice")
OTHER_CTX = ("conn-2", "consumer-1", "apache-kafka-java", "3.9.0", "10.0.0.8", 40000, "User:ANONYMOUS")
CLIENT = Uuid.from_parts(0x1234_5678_9ABC_4DEF, -0x7EDC_BA98_7654_3211)


def payload(seq: int) -> bytes:
    """A librdkafka-shaped OTLP MetricsData: one gauge under the subscribed prefix."""
    data = metrics_pb2.MetricsData()
    rm = data.resource_metrics.add()
    rm.resource.attributes.append(KeyValue(key="client_rack", value=AnyValue(string_value="rack-1")))
    metric = rm.scope_metrics.add().metrics.add(name=PREFIX + "record.queue.time.max")
    metric.gauge.data_points.add(as_double=float(seq), time_unix_nano=(T0 + seq) * 10**6)
    return data.SerializeToString()


class Fleet:
    """A config store, a host bound to it as a shard binds its managers, and the reference core."""

    def __init__(self, root: Path, *, node_id: int | None = None, archive: bool = True) -> None:
        self.root = root
        self.store = ConfigStore.open(root / "config", fsync=False)
        self.metrics = Metrics()
        self.reference = ClientMetricsManager(ClientMetricsManagerConfig(node_id=node_id or 0), now_ms=T0)
        self.host: TelemetryHost | None = None
        self.node_id = node_id
        self.archive = archive

    def start(self) -> TelemetryHost:
        """Build the host from the store's image (start-up configs), then follow the log."""
        image = self.store.image
        self.host = TelemetryHost(
            shard_id="0",
            node_id=self.node_id,
            data_dir=self.root / "data" if self.archive else None,
            metrics=self.metrics,
            startup=startup_configs(image, self.node_id),
            now_ms=T0,
        )
        binding = ManagerBinding(telemetry=self.host.manager, node_id=self.node_id)
        binding.load(image)
        self.store.subscribe(lambda delta: binding.apply(delta, self.store.image))
        return self.host

    def subscribe(self, name: str, metrics: str = PREFIX, interval_ms: int = INTERVAL_MS, match: Any = None) -> None:
        result = self.store.alter_client_metrics(name, metrics=metrics, interval_ms=interval_ms, match=match, now_ms=T0)
        assert result.ok, result
        configs = {"metrics": metrics, "interval.ms": str(interval_ms)}
        if match is not None:
            configs["match"] = match
        self.reference.update_subscription(name, configs)

    def expected(self, items: list[tuple]) -> list[Any]:
        """What the reference core answers for the same items (in the host's result formats)."""
        out: list[Any] = []
        for item in items:
            if item[0] == "get":
                raw = Uuid(item[1]) if item[1] else ZERO_UUID
                r = self.reference.process_get_telemetry_subscriptions_request(
                    GetTelemetrySubscriptionsRequest(raw), RequestContext(*item[2]), item[3]
                )
                out.append(
                    (
                        r.error_code,
                        r.error_message,
                        bytes(r.client_instance_id),
                        r.subscription_id,
                        tuple(r.accepted_compression_types),
                        r.push_interval_ms,
                        r.telemetry_max_bytes,
                        r.delta_temporality,
                        tuple(r.requested_metrics),
                    )
                )
            elif item[0] == "push":
                _, raw_id, sid, terminating, ctype, metrics, context, now_ms = item
                raw = Uuid(raw_id) if raw_id else ZERO_UUID
                r = self.reference.process_push_telemetry_request(
                    PushTelemetryRequest(raw, sid, terminating, ctype, metrics), RequestContext(*context), now_ms
                )
                out.append((r.error_code, r.error_message))
            else:
                out.append(self.reference.on_disconnect(item[1]))
        return out

    def serve(self, items: list[tuple]) -> list[Any]:
        """Serve on the host, check the answers equal the reference's (messages included), return them."""
        assert self.host is not None
        got = self.host.serve(items)
        assert got == self.expected(items)
        assert pickle.loads(pickle.dumps(got)) == got  # what Ray sends back
        return got

    def metrics_value(self, name: str) -> float:
        """A ``client-metrics`` metric read from the registry the host was given (what the shard exports)."""
        for metric_name, metric in self.metrics.metrics.items():
            if metric_name.group == "client-metrics" and metric_name.name == name:
                return metric.measurable_value(T0)
        raise KeyError(name)

    def close(self) -> None:
        if self.host is not None:
            self.host.close()
        self.reference.close()
        self.store.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path)
    f.start()
    f.subscribe("producers", match="client_software_name=librdkafka")
    try:
        yield f
    finally:
        f.close()


def get(raw: bytes, now_ms: int, context: tuple = CTX) -> tuple:
    return ("get", raw, context, now_ms)


def push(raw: bytes, sid: int, now_ms: int, *, data: bytes = b"", ctype: int = 0, terminating: bool = False) -> tuple:
    return ("push", raw, sid, terminating, ctype, data, CTX, now_ms)


def archived(root: Path) -> list:
    return list(ArchiveReader().read(root / "data", TELEMETRY_STREAM))


def test_first_get_assigns_an_instance_and_the_subscription_from_the_log(fleet: Fleet) -> None:
    assert fleet.host is not None
    [result] = fleet.host.serve([get(b"", T0)])
    error, message, raw, sid, accepted, interval, max_bytes, delta, requested = result
    instance_id = Uuid(raw)
    assert (error, message) == (0, None)
    assert instance_id not in RESERVED
    assert sid == compute_subscription_id([PREFIX], INTERVAL_MS, instance_id)
    assert accepted == SUPPORTED_COMPRESSION_TYPES == (4, 3, 1, 2)
    assert (interval, max_bytes, delta, requested) == (INTERVAL_MS, 1024 * 1024, True, (PREFIX,))
    assert fleet.host.manager.client_instance(instance_id) is not None


def test_a_client_the_subscription_does_not_match_gets_the_default_interval_and_no_metrics(fleet: Fleet) -> None:
    [result] = fleet.serve([get(bytes(CLIENT), T0, OTHER_CTX)])
    assert result[0] == 0
    assert (result[5], result[8]) == (300_000, ())  # Kafka's DEFAULT_INTERVAL_MS, nothing requested


def test_the_reserved_one_id_gets_a_fresh_id(fleet: Fleet) -> None:
    assert fleet.host is not None
    [result] = fleet.host.serve([get(bytes(ONE_UUID), T0)])
    assert result[0] == 0 and Uuid(result[2]) not in RESERVED


def test_an_accepted_push_is_archived_with_the_connection_labels(fleet: Fleet) -> None:
    raw = bytes(CLIENT)
    [got] = fleet.serve([get(raw, T0)])
    sid = got[3]
    data = payload(1)
    body = compress(CompressionType.ZSTD, data)
    assert fleet.serve([push(raw, sid, T0 + 10, data=body, ctype=CompressionType.ZSTD)]) == [(0, None)]
    assert fleet.host is not None and fleet.host.flush(10.0)
    [record] = archived(fleet.root)
    assert record.time_ms == T0 + 10
    assert record.body == data  # decompressed, exactly as the client sent it
    labels = dict(record.labels)
    assert labels["client_instance_id"] == str(CLIENT)
    assert labels["client_id"] == "producer-1"
    assert labels["client_software_name"] == "librdkafka"
    assert labels["client_source_address"] == "10.0.0.7"
    assert labels["client_source_port"] == "51234"
    assert labels["principal"] == "User:alice"
    assert labels["node_id"] == str(NO_NODE_ID)
    assert labels["compression_type"] == str(int(CompressionType.ZSTD))
    assert labels["push_interval_ms"] == str(INTERVAL_MS)
    assert labels["terminating"] == "false"


def test_wrong_subscription_id_is_unknown_and_the_client_may_get_again_at_once(fleet: Fleet) -> None:
    raw = bytes(CLIENT)
    [got] = fleet.serve([get(raw, T0)])
    [(error, message)] = fleet.serve([push(raw, got[3] ^ 1, T0 + 10, data=payload(1))])
    assert error == Errors.UNKNOWN_SUBSCRIPTION_ID and message
    [again] = fleet.serve([get(raw, T0 + 20)])  # not throttled after UNKNOWN_SUBSCRIPTION_ID (Kafka)
    assert again[0] == 0 and again[3] == got[3]
    assert fleet.host is not None and fleet.host.flush(10.0)
    assert archived(fleet.root) == []


def test_push_before_the_interval_is_throttled(fleet: Fleet) -> None:
    raw = bytes(CLIENT)
    [got] = fleet.serve([get(raw, T0)])
    sid = got[3]
    assert fleet.serve([push(raw, sid, T0 + 10, data=payload(1))]) == [(0, None)]
    [(error, _)] = fleet.serve([push(raw, sid, T0 + 10 + INTERVAL_MS - 1, data=payload(2))])
    assert error == Errors.THROTTLING_QUOTA_EXCEEDED
    assert fleet.serve([get(raw, T0 + 20)])[0][0] == Errors.THROTTLING_QUOTA_EXCEEDED  # a second get, too
    assert fleet.serve([push(raw, sid, T0 + 10 + INTERVAL_MS, data=payload(3))]) == [(0, None)]
    assert fleet.metrics_value("throttle-count") == 2.0


def test_terminating_push_bypasses_the_gate_and_ends_the_instance(fleet: Fleet) -> None:
    raw = bytes(CLIENT)
    sid = fleet.serve([get(raw, T0)])[0][3]
    fleet.serve([push(raw, sid, T0 + 10, data=payload(1))])
    assert fleet.serve([push(raw, sid, T0 + 11, data=payload(2), terminating=True)]) == [(0, None)]
    [(error, _)] = fleet.serve([push(raw, sid, T0 + 10 + INTERVAL_MS, data=payload(3))])
    assert error == Errors.INVALID_REQUEST


def test_push_with_the_zero_id_is_invalid_request(fleet: Fleet) -> None:
    [(error, message)] = fleet.serve([push(b"", 0, T0, data=payload(1))])
    assert error == Errors.INVALID_REQUEST and "invalid client instance id" in (message or "")
    [(error, _)] = fleet.serve([push(bytes(ZERO_UUID), 0, T0)])
    assert error == Errors.INVALID_REQUEST


def test_get_and_push_of_one_instance_in_one_batch_are_applied_in_order(fleet: Fleet) -> None:
    raw = bytes(CLIENT)
    sid = compute_subscription_id([PREFIX], INTERVAL_MS, CLIENT)
    other = bytes(Uuid.from_parts(7, 8))
    results = fleet.serve(
        [
            get(raw, T0),
            push(raw, sid, T0 + 1, data=compress(CompressionType.LZ4, payload(1)), ctype=CompressionType.LZ4),
            get(other, T0 + 1, OTHER_CTX),
            push(raw, sid, T0 + 2, data=payload(2)),  # within the interval
        ]
    )
    assert [r[0] for r in results] == [0, 0, 0, Errors.THROTTLING_QUOTA_EXCEEDED]


def test_disconnect_evicts_the_instance_of_the_connection(fleet: Fleet) -> None:
    raw = bytes(CLIENT)
    fleet.serve([get(raw, T0)])
    assert fleet.metrics_value("instance-count") == 1.0
    assert fleet.serve([("disconnect", "conn-1", raw, T0 + 5)]) == [True]
    assert fleet.host is not None and fleet.host.manager.client_instance(CLIENT) is None
    assert fleet.metrics_value("instance-count") == 0.0
    assert fleet.serve([("disconnect", "conn-1", raw, T0 + 6), ("disconnect", "conn-9", raw, T0 + 6)]) == [
        False,
        False,
    ]


def test_expire_forgets_instances_idle_past_three_intervals(fleet: Fleet) -> None:
    assert fleet.host is not None
    fleet.serve([get(bytes(CLIENT), T0)])
    expiry = max(60_000, 3 * INTERVAL_MS)  # Kafka: max(cache expiry, 3 x push interval)
    assert fleet.host.expire(T0 + expiry - 1) == 0
    assert fleet.host.expire(T0 + expiry) == 1
    assert fleet.host.manager.client_instance(CLIENT) is None
    assert fleet.host.stats()["expirations"] == 1
    with pytest.raises(ValueError):
        fleet.host.expire(-1)


def test_a_subscription_change_reaches_the_host_through_the_binding(fleet: Fleet) -> None:
    raw = bytes(CLIENT)
    old = fleet.serve([get(raw, T0)])[0]
    fleet.subscribe("producers", metrics="*", interval_ms=10_000, match="client_software_name=librdkafka")
    [new] = fleet.serve([get(raw, T0 + 1)])  # the changed subscription is given at once, ungated
    assert new[0] == 0 and (new[5], new[8]) == (10_000, ("*",))
    assert new[3] != old[3] and new[3] == compute_subscription_id(["*"], 10_000, CLIENT)
    [(error, _)] = fleet.serve([push(raw, old[3], T0 + 2, data=payload(1))])
    assert error == Errors.UNKNOWN_SUBSCRIPTION_ID


BAD_ITEMS = [
    ("unknown op", ("fetch", bytes(CLIENT), CTX, T0)),
    ("not a tuple", ["get", bytes(CLIENT), CTX, T0]),
    ("short id", get(b"\x01" * 15, T0)),
    ("id not bytes", get(str(CLIENT), T0)),  # type: ignore[arg-type]
    ("negative now", get(bytes(CLIENT), -1)),
    ("float now", get(bytes(CLIENT), float(T0))),  # type: ignore[arg-type]
    ("bool now", get(bytes(CLIENT), True)),  # type: ignore[arg-type]
    ("context too short", ("get", bytes(CLIENT), CTX[:6], T0)),
    ("empty connection id", get(bytes(CLIENT), T0, ("", *CTX[1:]))),
    ("port out of range", get(bytes(CLIENT), T0, (*CTX[:5], 70_000, CTX[6]))),
    ("empty principal", get(bytes(CLIENT), T0, (*CTX[:6], ""))),
    ("subscription id over int32", push(bytes(CLIENT), 2**31, T0)),
    ("compression over int8", push(bytes(CLIENT), 1, T0, ctype=128)),
    ("terminating not bool", ("push", bytes(CLIENT), 1, 1, 0, b"", CTX, T0)),
    ("metrics not bytes", ("push", bytes(CLIENT), 1, False, 0, "x", CTX, T0)),
    ("push too short", ("push", bytes(CLIENT), 1, False, 0, b"", T0)),
    ("disconnect without connection", ("disconnect", "", bytes(CLIENT), T0)),
]


@pytest.mark.parametrize(("what", "bad"), BAD_ITEMS, ids=[w for w, _ in BAD_ITEMS])
def test_a_bad_item_changes_nothing_of_its_batch(fleet: Fleet, what: str, bad: tuple) -> None:
    assert fleet.host is not None
    raw = bytes(CLIENT)
    sid = compute_subscription_id([PREFIX], INTERVAL_MS, CLIENT)
    batch = [get(raw, T0), push(raw, sid, T0 + 1, data=payload(1)), bad]
    with pytest.raises(ValueError, match="item 2"):
        fleet.host.serve(batch)
    assert fleet.host.manager.client_instance(CLIENT) is None
    assert fleet.metrics_value("instance-count") == 0.0
    assert fleet.host.flush(10.0) and archived(fleet.root) == []
    # and the host goes on serving
    assert fleet.serve(batch[:2])[1] == (0, None)


KNOWN_PORT_1 = (*CTX[:5], 1, CTX[6])


@pytest.mark.parametrize(
    ("what", "context"),
    [
        ("port True, equal to the known port 1", (*CTX[:5], True, CTX[6])),
        ("port 1.0, equal to the known port 1", (*CTX[:5], 1.0, CTX[6])),
        ("unhashable", (*CTX[:5], 1, ["User:alice"])),
        ("a field short", KNOWN_PORT_1[:6]),
        ("a list", list(KNOWN_PORT_1)),
    ],
)
def test_a_push_context_equal_to_a_checked_one_is_still_checked(fleet: Fleet, what: str, context: Any) -> None:
    """The host skips the checks of a push context it has seen, by equality: a context equal to a checked one
    but not of its kinds is refused all the same."""
    assert fleet.host is not None
    raw = bytes(CLIENT)
    sid = fleet.serve([get(raw, T0, KNOWN_PORT_1)])[0][3]
    known = ("push", raw, sid, False, 0, b"", KNOWN_PORT_1, T0 + 1)
    assert fleet.serve([known]) == [(0, None)]
    assert KNOWN_PORT_1 in fleet.host._contexts
    with pytest.raises(ValueError, match="item 1"):
        fleet.host.serve([(*known[:7], T0 + 200), (*known[:6], context, T0 + 300)])


def test_an_unknown_compression_type_within_int8_is_kafkas_unsupported_compression(fleet: Fleet) -> None:
    raw = bytes(CLIENT)
    sid = fleet.serve([get(raw, T0)])[0][3]
    check_items([push(raw, sid, T0, ctype=-128), push(raw, sid, T0, ctype=127)])
    [(error, _)] = fleet.serve([push(raw, sid, T0 + 1, data=payload(1), ctype=7)])
    assert error == Errors.UNSUPPORTED_COMPRESSION_TYPE
    assert fleet.serve([get(raw, T0 + 2)])[0][0] == 0  # the client may re-subscribe at once


def test_a_payload_that_is_not_otlp_is_invalid_record(fleet: Fleet) -> None:
    raw = bytes(CLIENT)
    sid = fleet.serve([get(raw, T0)])[0][3]
    [(error, _)] = fleet.serve([push(raw, sid, T0 + 1, data=b"\xff\xff\xff", ctype=0)])
    assert error == Errors.INVALID_RECORD
    assert fleet.metrics_value("plugin-error-count") == 1.0


def test_telemetry_max_bytes_comes_from_the_start_up_configs(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, node_id=3)
    try:
        results = fleet.store.incremental_alter_configs(
            [
                (
                    ConfigResource(ConfigResourceType.BROKER, ""),
                    [AlterConfigOp("telemetry.max.bytes", OpType.SET, "200")],
                )
            ],
            now_ms=T0,
        )
        assert all(r.ok for r in results)
        fleet.reference.close()
        fleet.reference = ClientMetricsManager(
            ClientMetricsManagerConfig(telemetry_max_bytes=200, node_id=3), now_ms=T0
        )
        fleet.start()
        fleet.subscribe("all", metrics="*")
        raw = bytes(CLIENT)
        [got] = fleet.serve([get(raw, T0)])
        assert got[6] == 200
        big = bytes(range(256)) * 2  # incompressible enough at none
        [(error, _)] = fleet.serve([push(raw, got[3], T0 + 1, data=big)])
        assert error == Errors.TELEMETRY_TOO_LARGE
        [(error, _)] = fleet.serve([push(raw, got[3], T0 + 1 + INTERVAL_MS, data=payload(1))])
        assert error == 0
        assert fleet.host is not None and fleet.host.flush(10.0)
        [record] = archived(fleet.root)
        assert record.labels["node_id"] == "3"
    finally:
        fleet.close()


def test_a_restarted_host_accepts_the_subscription_id_its_client_already_has(fleet: Fleet, tmp_path: Path) -> None:
    raw = bytes(CLIENT)
    sid = fleet.serve([get(raw, T0)])[0][3]
    assert fleet.serve([push(raw, sid, T0 + 1, data=payload(1))]) == [(0, None)]
    assert fleet.host is not None
    fleet.host.close()
    restarted = TelemetryHost(
        shard_id="0", node_id=None, data_dir=None, metrics=Metrics(), startup=startup_configs(fleet.store.image)
    )
    try:
        ManagerBinding(telemetry=restarted.manager).load(fleet.store.image)
        # within the interval of the last push, but the restarted shard has no gating state (as Kafka)
        assert restarted.serve([push(raw, sid, T0 + 2, data=payload(2))]) == [(0, None)]
        [(error, _)] = restarted.serve([push(raw, sid ^ 1, T0 + 3 + INTERVAL_MS, data=payload(3))])
        assert error == Errors.UNKNOWN_SUBSCRIPTION_ID
    finally:
        restarted.close()


def test_close_drains_the_archive_and_is_idempotent(fleet: Fleet) -> None:
    assert fleet.host is not None
    raw = bytes(CLIENT)
    sid = fleet.serve([get(raw, T0)])[0][3]
    fleet.serve([push(raw, sid, T0 + 1, data=payload(1))])
    fleet.host.close()
    fleet.host.close()
    assert [r.body for r in archived(fleet.root)] == [payload(1)]
    assert not any(m.group == "client-metrics" for m in fleet.metrics.metrics)  # unregistered


def test_no_data_dir_means_no_archive(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, archive=False)
    try:
        host = fleet.start()
        fleet.subscribe("all", metrics="*")
        raw = bytes(CLIENT)
        sid = fleet.serve([get(raw, T0)])[0][3]
        assert fleet.serve([push(raw, sid, T0 + 1, data=payload(1))]) == [(0, None)]
        assert host.archive is None and host.flush() and "archive" not in host.stats()
        assert not (tmp_path / "data").exists()
    finally:
        fleet.close()
