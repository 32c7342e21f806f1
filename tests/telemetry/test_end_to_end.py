"""The whole push path with real parts: manager, every codec, the archive on disk, a real collector.

Clients handshake and push librdkafka-shaped OTLP payloads compressed with each accepted codec; the
telemetry archive writes them to real files (read back with the documented reader) and the OTLP/gRPC
forwarder sends them to a real ``MetricsService`` server on loopback. Both must see every accepted
push exactly once, with the broker's resource attributes; rejected pushes reach neither.
"""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import (
    MetricsServiceServicer,
    add_MetricsServiceServicer_to_server,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from quotaplane.archive import ArchiveReader
from quotaplane.exporters.archive import TelemetryArchiveExporter
from quotaplane.exporters.otlp_grpc import OtlpGrpcForwarder, OtlpGrpcForwarderConfig
from quotaplane.telemetry import (
    SUPPORTED_COMPRESSION_TYPES,
    ClientMetricsManager,
    ClientMetricsManagerConfig,
    CompressionType,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
    RequestContext,
    compress,
    decode_metrics_data,
)

START_MS = 1_700_000_000_000


class _Collector(MetricsServiceServicer):
    def __init__(self) -> None:
        self.resource_metrics: list = []
        self.lock = threading.Lock()

    def Export(self, request, context):  # the gRPC method name
        with self.lock:
            self.resource_metrics.extend(request.resource_metrics)
        return ExportMetricsServiceResponse()


def _payload(client: int, seq: int) -> bytes:
    data = metrics_pb2.MetricsData()
    rm = data.resource_metrics.add()
    rm.resource.attributes.append(KeyValue(key="client_id", value=AnyValue(string_value="spoofed")))
    sm = rm.scope_metrics.add()
    metric = sm.metrics.add(name="org.apache.kafka.producer.record.queue.time.max")
    metric.gauge.data_points.add(as_double=float(client * 1000 + seq), time_unix_nano=(START_MS + seq) * 10**6)
    return data.SerializeToString()


def _attrs(resource) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in resource.attributes}


def test_accepted_pushes_reach_the_archive_and_the_collector(tmp_path) -> None:
    collector = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add_MetricsServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    archive = TelemetryArchiveExporter(tmp_path, flush_max_records=7, flush_max_ms=50)
    forwarder = OtlpGrpcForwarder(OtlpGrpcForwarderConfig(target=f"127.0.0.1:{port}", max_batch_delay_ms=20))
    manager = ClientMetricsManager(ClientMetricsManagerConfig(node_id=3), [archive, forwarder], now_ms=START_MS)
    manager.update_subscription(
        "producers",
        {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000", "match": "client_software_name=librdkafka"},
    )
    try:
        codecs = [CompressionType.NONE, *SUPPORTED_COMPRESSION_TYPES]
        expected: dict[tuple[str, float], dict[str, str]] = {}
        for client in range(10):
            ctx = RequestContext(f"c{client}", f"producer-{client}", "librdkafka", "2.16.0", "10.0.0.9", 40000 + client)
            sub = manager.process_get_telemetry_subscriptions_request(GetTelemetrySubscriptionsRequest(), ctx, START_MS)
            assert sub.requested_metrics == ("org.apache.kafka.producer.",)
            for seq in range(3):
                now = START_MS + seq * 1000
                codec = codecs[(client + seq) % len(codecs)]
                request = PushTelemetryRequest(
                    sub.client_instance_id, sub.subscription_id, seq == 2, codec, compress(codec, _payload(client, seq))
                )
                assert manager.process_push_telemetry_request(request, ctx, now).error_code == 0
                expected[(str(sub.client_instance_id), float(client * 1000 + seq))] = {
                    "client_id": f"producer-{client}",
                    "client_source_port": str(40000 + client),
                    "node_id": "3",
                    "principal": "User:ANONYMOUS",
                    "compression_type": str(codec),
                    "terminating": "true" if seq == 2 else "false",
                }
            # After the terminating push nothing is accepted, and nothing is exported.
            late = PushTelemetryRequest(sub.client_instance_id, sub.subscription_id, False, 0, _payload(client, 9))
            assert manager.process_push_telemetry_request(late, ctx, START_MS + 10_000).error_code == 42
    finally:
        manager.close()  # closes both exporters: they drain and flush
        server.stop(grace=None)

    records = ArchiveReader().read(tmp_path, "telemetry")
    archived = {}
    for record in records:
        value = decode_metrics_data(record.body).resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points[0]
        archived[(record.labels["client_instance_id"], value.as_double)] = record.labels
    assert archived.keys() == expected.keys()
    for key, labels in archived.items():
        assert expected[key].items() <= labels.items()

    forwarded = {}
    for rm in collector.resource_metrics:
        attrs = _attrs(rm.resource)
        value = rm.scope_metrics[0].metrics[0].gauge.data_points[0].as_double
        forwarded[(attrs["client_instance_id"], value)] = attrs
    assert forwarded.keys() == expected.keys()
    for key, attrs in forwarded.items():
        # The broker's client_id replaced the one the client claimed.
        assert attrs["client_id"] == expected[key]["client_id"]
        assert attrs["client_software_name"] == "librdkafka"
        assert attrs["node_id"] == "3"
    assert archive.dropped == 0
    assert forwarder.dropped == 0
