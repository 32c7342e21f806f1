"""OtlpGrpcForwarder against a real gRPC collector on loopback: batching, retries, partial success, headers, close.

No grpc mocks and no timing asserts: the collector is an in-process ``grpc.server`` on 127.0.0.1:0, tests
wait with ``flush`` or by polling with generous deadlines, and backoffs are made tiny through config.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsPartialSuccess,
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import (
    MetricsServiceServicer,
    add_MetricsServiceServicer_to_server,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from quotaplane.exporters.otlp_grpc import OtlpGrpcForwarder, OtlpGrpcForwarderConfig
from quotaplane.kafka_uuid import random_uuid
from quotaplane.telemetry._exporter import (
    OTLP_CONTENT_TYPE,
    ClientTelemetryContext,
    ClientTelemetryExporter,
    ClientTelemetryPayload,
    RequestContext,
)

CONTEXT = ClientTelemetryContext(
    push_interval_ms=30_000,
    request_context=RequestContext(connection_id="127.0.0.1:9092-127.0.0.1:50000-0", client_id="producer-1"),
    received_ms=1_700_000_000_000,
    node_id=1,
)
#: Tests never wait on these: flush ends the batch delay, and backoffs are a few ms.
FAST = {"max_batch_delay_ms": 5_000, "initial_backoff_ms": 1, "max_backoff_ms": 20}

# -- payloads --------------------------------------------------------------------------------------


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def make_push(index: int) -> ClientTelemetryPayload:
    """A push as the manager hands it on: the client's MetricsData and a copy with the broker labels merged."""
    instance = random_uuid()
    client_data = MetricsData(
        resource_metrics=[
            ResourceMetrics(
                resource=Resource(attributes=[_kv("client_rack", "rack-a")]),
                scope_metrics=[
                    ScopeMetrics(
                        metrics=[
                            Metric(
                                name="org.apache.kafka.producer.record.send.rate",
                                gauge=Gauge(data_points=[NumberDataPoint(as_double=float(index))]),
                            )
                        ]
                    )
                ],
            )
        ]
    )
    data = client_data.SerializeToString()
    labels = {"client_instance_id": str(instance), "client_id": f"producer-{index}", "node_id": "1"}
    merged = MetricsData()
    merged.CopyFrom(client_data)
    for resource_metrics in merged.resource_metrics:
        resource_metrics.resource.attributes.extend(_kv(k, v) for k, v in labels.items())
    return ClientTelemetryPayload(
        client_instance_id=instance,
        is_terminating=False,
        content_type=OTLP_CONTENT_TYPE,
        compression_type=0,
        compressed_size=len(data),
        data=data,
        resource_attributes=labels,
        metrics_data=merged,
    )


def attributes(resource_metrics: ResourceMetrics) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in resource_metrics.resource.attributes}


# -- the collector ---------------------------------------------------------------------------------

#: How the collector answers call number ``index``: return a response, or ``context.abort``.
Answer = Callable[[int, ExportMetricsServiceRequest, grpc.ServicerContext], ExportMetricsServiceResponse]


def accept(
    index: int, request: ExportMetricsServiceRequest, context: grpc.ServicerContext
) -> ExportMetricsServiceResponse:
    return ExportMetricsServiceResponse()


@dataclass
class Collector(MetricsServiceServicer):
    """Records every call's metadata, and the requests its ``answer`` accepted."""

    answer: Answer = accept
    calls: int = 0
    accepted: list[ExportMetricsServiceRequest] = field(default_factory=list)
    metadata: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def Export(
        self, request: ExportMetricsServiceRequest, context: grpc.ServicerContext
    ) -> ExportMetricsServiceResponse:
        with self.lock:
            index = self.calls
            self.calls += 1
            self.metadata.append(dict(context.invocation_metadata()))
        response = self.answer(index, request, context)  # may abort: then nothing is accepted
        with self.lock:
            self.accepted.append(request)
        return response

    def resource_metrics(self) -> list[ResourceMetrics]:
        with self.lock:
            return [rm for request in self.accepted for rm in request.resource_metrics]


@pytest.fixture
def collector() -> Iterator[tuple[Collector, str]]:
    """A running collector and its target; set ``collector.answer`` before exporting."""
    servicer = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    add_MetricsServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(grace=None)


@pytest.fixture
def forwarders() -> Iterator[Callable[..., OtlpGrpcForwarder]]:
    """Builds forwarders with FAST settings and closes them all at teardown."""
    made: list[OtlpGrpcForwarder] = []

    def build(target: str, **overrides: object) -> OtlpGrpcForwarder:
        forwarder = OtlpGrpcForwarder(OtlpGrpcForwarderConfig(target=target, **{**FAST, **overrides}))
        made.append(forwarder)
        return forwarder

    yield build
    for forwarder in made:
        forwarder.close(timeout_s=2.0)


def abort_with(code: grpc.StatusCode, first: int | None = None) -> Answer:
    """Fail the first ``first`` calls (all if None) with ``code``, then accept."""

    def answer(index: int, request: ExportMetricsServiceRequest, context: grpc.ServicerContext):
        if first is None or index < first:
            context.abort(code, f"test collector: {code.name}")
        return ExportMetricsServiceResponse()

    return answer


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def export_all(forwarder: OtlpGrpcForwarder, pushes: list[ClientTelemetryPayload]) -> None:
    for push in pushes:
        forwarder.export_metrics(CONTEXT, push)


# -- delivery and batching -------------------------------------------------------------------------


def test_every_push_arrives_once_with_its_attributes_in_fewer_requests(collector, forwarders) -> None:
    servicer, target = collector
    forwarder = forwarders(target, max_batch_pushes=10)
    assert isinstance(forwarder, ClientTelemetryExporter)
    pushes = [make_push(i) for i in range(50)]
    before = [push.metrics_data.SerializeToString() for push in pushes]

    export_all(forwarder, pushes)
    assert forwarder.flush(timeout_s=10)

    received = {attributes(rm)["client_instance_id"]: rm for rm in servicer.resource_metrics()}
    assert len(servicer.resource_metrics()) == len(received) == 50
    for i, push in enumerate(pushes):
        rm = received[str(push.client_instance_id)]
        assert attributes(rm) == {"client_rack": "rack-a", **push.resource_attributes}
        assert rm.scope_metrics[0].metrics[0].gauge.data_points[0].as_double == float(i)
    assert 1 <= len(servicer.accepted) < 50
    assert all(len(request.resource_metrics) <= 10 for request in servicer.accepted)
    assert (forwarder.enqueued, forwarder.sent_pushes, forwarder.sent_batches) == (50, 50, len(servicer.accepted))
    assert (forwarder.dropped, forwarder.failed_batches, forwarder.failed_pushes, forwarder.retries) == (0, 0, 0, 0)
    # the payloads are shared with other exporters: untouched
    assert [push.metrics_data.SerializeToString() for push in pushes] == before


def test_a_batch_stays_under_max_batch_bytes(collector, forwarders) -> None:
    servicer, target = collector
    pushes = [make_push(i) for i in range(9)]
    largest = max(len(push.data) for push in pushes)
    forwarder = forwarders(target, max_batch_pushes=9, max_batch_bytes=2 * largest)

    export_all(forwarder, pushes)
    assert forwarder.flush(timeout_s=10)

    assert len(servicer.resource_metrics()) == 9
    assert all(len(request.resource_metrics) <= 2 for request in servicer.accepted)


def test_headers_reach_the_collector_and_gzip_is_transparent(collector, forwarders) -> None:
    servicer, target = collector
    headers = (("authorization", "Bearer t0ken"), ("x-tenant", "acme"))
    forwarder = forwarders(target, headers=headers, compression="gzip")

    export_all(forwarder, [make_push(i) for i in range(3)])
    assert forwarder.flush(timeout_s=10)

    assert len(servicer.resource_metrics()) == 3
    assert servicer.metadata
    for metadata in servicer.metadata:
        assert metadata["authorization"] == "Bearer t0ken"
        assert metadata["x-tenant"] == "acme"


# -- failures --------------------------------------------------------------------------------------


def test_unavailable_is_retried_until_delivered(collector, forwarders) -> None:
    servicer, target = collector
    servicer.answer = abort_with(grpc.StatusCode.UNAVAILABLE, first=3)
    forwarder = forwarders(target, max_batch_pushes=5, max_retries=5)
    pushes = [make_push(i) for i in range(5)]

    export_all(forwarder, pushes)
    assert forwarder.flush(timeout_s=10)

    assert sorted(attributes(rm)["client_instance_id"] for rm in servicer.resource_metrics()) == sorted(
        str(push.client_instance_id) for push in pushes
    )
    assert forwarder.retries == 3
    assert servicer.calls == 3 + forwarder.sent_batches
    assert (forwarder.sent_pushes, forwarder.failed_batches) == (5, 0)


def test_retries_are_bounded(collector, forwarders) -> None:
    servicer, target = collector
    servicer.answer = abort_with(grpc.StatusCode.UNAVAILABLE)
    forwarder = forwarders(target, max_batch_pushes=1, max_retries=2)

    export_all(forwarder, [make_push(0)])
    assert forwarder.flush(timeout_s=10)

    assert (servicer.calls, forwarder.retries, forwarder.failed_batches, forwarder.failed_pushes) == (3, 2, 1, 1)
    assert forwarder.sent_batches == 0


def test_invalid_argument_drops_the_batch_at_once_and_logs_once(collector, forwarders, caplog) -> None:
    servicer, target = collector
    servicer.answer = abort_with(grpc.StatusCode.INVALID_ARGUMENT)
    forwarder = forwarders(target, max_batch_pushes=1, max_retries=5)

    with caplog.at_level(logging.WARNING, logger="quotaplane.exporters.otlp_grpc"):
        export_all(forwarder, [make_push(i) for i in range(5)])
        assert forwarder.flush(timeout_s=10)

    assert forwarder.retries == 0
    assert forwarder.failed_batches == servicer.calls == 5
    assert (forwarder.failed_pushes, forwarder.sent_pushes) == (5, 0)
    failures = [r for r in caplog.records if "INVALID_ARGUMENT" in r.getMessage()]
    assert len(failures) == 1  # rate-limited: one line per log_interval_ms, not one per batch


@pytest.mark.parametrize("with_retry_info", [True, False])
def test_resource_exhausted_is_retried_only_with_retry_info(collector, forwarders, with_retry_info: bool) -> None:
    from google.protobuf.duration_pb2 import Duration
    from google.rpc import error_details_pb2, status_pb2

    def answer(index: int, request: ExportMetricsServiceRequest, context: grpc.ServicerContext):
        if index == 0:
            status = status_pb2.Status(code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], message="slow down")
            if with_retry_info:
                status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=Duration(nanos=5_000_000)))
            context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down")
        return ExportMetricsServiceResponse()

    servicer, target = collector
    servicer.answer = answer
    forwarder = forwarders(target, max_batch_pushes=1)

    export_all(forwarder, [make_push(0)])
    assert forwarder.flush(timeout_s=10)

    if with_retry_info:
        assert (forwarder.retries, forwarder.sent_pushes, forwarder.failed_batches) == (1, 1, 0)
    else:
        assert (forwarder.retries, forwarder.sent_pushes, forwarder.failed_batches) == (0, 0, 1)


def test_partial_success_counts_rejected_data_points_and_is_not_retried(collector, forwarders) -> None:
    def reject_one_point_per_resource(index: int, request: ExportMetricsServiceRequest, context: grpc.ServicerContext):
        rejected = len(request.resource_metrics)
        return ExportMetricsServiceResponse(
            partial_success=ExportMetricsPartialSuccess(rejected_data_points=rejected, error_message="bad unit")
        )

    servicer, target = collector
    servicer.answer = reject_one_point_per_resource
    forwarder = forwarders(target, max_batch_pushes=4)

    export_all(forwarder, [make_push(i) for i in range(7)])
    assert forwarder.flush(timeout_s=10)

    assert forwarder.rejected_data_points == 7
    assert (forwarder.sent_pushes, forwarder.retries, forwarder.failed_batches) == (7, 0, 0)
    assert servicer.calls == forwarder.sent_batches


# -- a collector that is down or stuck -------------------------------------------------------------


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_collector_down_drops_on_overflow_and_close_is_bounded(forwarders) -> None:
    forwarder = forwarders(
        f"127.0.0.1:{unused_port()}",
        queue_size=8,
        max_batch_pushes=4,
        max_retries=3,
        initial_backoff_ms=200,
        max_backoff_ms=1_000,
    )

    export_all(forwarder, [make_push(i) for i in range(500)])  # returns: nothing on this path waits

    assert forwarder.dropped > 0
    assert forwarder.enqueued + forwarder.dropped == 500
    forwarder.close(timeout_s=1.0)
    assert not forwarder.running
    assert forwarder.sent_pushes == 0
    assert forwarder.failed_pushes == forwarder.enqueued  # every accepted push is accounted for
    assert forwarder.flush(timeout_s=0)

    forwarder.export_metrics(CONTEXT, make_push(500))  # after close: refused, counted
    assert forwarder.dropped + forwarder.enqueued == 501
    forwarder.close(timeout_s=1.0)  # idempotent


def test_close_cancels_a_call_stuck_in_flight(collector, forwarders) -> None:
    release = threading.Event()

    def hang(index: int, request: ExportMetricsServiceRequest, context: grpc.ServicerContext):
        release.wait(30)
        return ExportMetricsServiceResponse()

    servicer, target = collector
    servicer.answer = hang
    forwarder = forwarders(target, max_batch_pushes=1, timeout_ms=60_000)
    try:
        export_all(forwarder, [make_push(0)])
        wait_until(lambda: servicer.calls == 1)

        forwarder.close(timeout_s=1.0)

        assert not forwarder.running
        assert (forwarder.failed_batches, forwarder.failed_pushes, forwarder.sent_pushes) == (1, 1, 0)
    finally:
        release.set()


# -- TLS -------------------------------------------------------------------------------------------


def _self_signed_certificate() -> tuple[bytes, bytes]:
    """A key and certificate for 127.0.0.1 (EC, so generating it is instant)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test collector")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, certificate.public_bytes(serialization.Encoding.PEM)


def test_tls_with_configured_roots(forwarders) -> None:
    key_pem, cert_pem = _self_signed_certificate()
    servicer = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add_MetricsServiceServicer_to_server(servicer, server)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key_pem, cert_pem)]))
    server.start()
    try:
        forwarder = forwarders(f"127.0.0.1:{port}", insecure=False, root_certificates=cert_pem)
        export_all(forwarder, [make_push(i) for i in range(3)])
        assert forwarder.flush(timeout_s=10)
        assert len(servicer.resource_metrics()) == 3
    finally:
        server.stop(grace=None)


# -- config ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"target": ""},
        {"root_certificates": b"pem"},  # needs insecure=False
        {"compression": "zstd"},
        {"headers": (("Authorization", "x"),)},
        {"headers": (("trace-bin", "x"),)},
        {"queue_size": 0},
        {"queue_size": 4, "max_batch_pushes": 8},
        {"timeout_ms": 0},
        {"max_retries": -1},
        {"backoff_multiplier": 0.5},
        {"jitter": 1.5},
    ],
)
def test_config_rejects(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        OtlpGrpcForwarderConfig(**{"target": "collector:4317", **overrides})
