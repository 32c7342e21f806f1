"""Fixtures for the KIP-714 telemetry tests, after Kafka's ``ClientMetricsTestUtils``.

Kafka's fixture is a subscription over two producer metric prefixes, pushed every 30 s, for Java
clients 3.5.x; a request context of client ``producer-1`` (apache-kafka-java 3.5.2) on port 56078; and
a manager built with ``telemetry.max.bytes`` 100 and a cache expiry of 100 ms. Kafka's tests push the
bytes ``"test-data"`` to a receiver that never parses them; quotaplane decodes every payload, so the
ports push a real, small OTLP ``MetricsData`` instead (``metrics_data_payload``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from quotaplane.kafka_uuid import ZERO_UUID, Uuid
from quotaplane.telemetry import (
    ClientMetricsManager,
    ClientMetricsManagerConfig,
    ClientTelemetryContext,
    ClientTelemetryPayload,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
    RequestContext,
)

#: A realistic wall clock, as Kafka's ``MockTime``: instances start with 0 as "never requested".
START_MS = 1_700_000_000_000

DEFAULT_METRICS = "org.apache.kafka.client.producer.partition.queue.,org.apache.kafka.client.producer.partition.latency"
DEFAULT_PUSH_INTERVAL_MS = 30_000
DEFAULT_CLIENT_MATCH_PATTERNS = ("client_software_name=apache-kafka-java", "client_software_version=3.5.*")
#: Kafka's ``ClientMetricsConfigs.DEFAULT_INTERVAL_MS`` (5 minutes): the interval without a subscription.
DEFAULT_INTERVAL_MS = 300_000

CLIENT_ID = "producer-1"
CLIENT_SOFTWARE_NAME = "apache-kafka-java"
CLIENT_SOFTWARE_VERSION = "3.5.2"
CLIENT_ADDRESS = "127.0.0.1"
CLIENT_PORT = 56078

#: Kafka's test manager: ``new ClientMetricsManager(plugin, 100, time, 100, metrics)``.
TELEMETRY_MAX_BYTES = 100
CACHE_EXPIRY_MS = 100

#: The metric the fixture payload carries: under the first of DEFAULT_METRICS' prefixes.
PAYLOAD_METRIC = "org.apache.kafka.client.producer.partition.queue.bytes"


def default_properties() -> dict[str, str]:
    """Kafka's ``ClientMetricsTestUtils.defaultProperties()``: the configs of one subscription."""
    return {
        "metrics": DEFAULT_METRICS,
        "interval.ms": str(DEFAULT_PUSH_INTERVAL_MS),
        "match": ",".join(DEFAULT_CLIENT_MATCH_PATTERNS),
    }


def request_context(connection_id: str = "conn-1", **overrides: object) -> RequestContext:
    """Kafka's ``requestContext()``; Kafka draws a random connection id, here it is fixed unless given."""
    fields: dict[str, object] = {
        "connection_id": connection_id,
        "client_id": CLIENT_ID,
        "client_software_name": CLIENT_SOFTWARE_NAME,
        "client_software_version": CLIENT_SOFTWARE_VERSION,
        "client_source_address": CLIENT_ADDRESS,
        "client_source_port": CLIENT_PORT,
    }
    fields.update(overrides)
    return RequestContext(**fields)  # type: ignore[arg-type]


def request_context_with_null_client_info(connection_id: str = "1") -> RequestContext:
    """Kafka's ``requestContextWithNullClientInfo()``: the client sent no software name or version."""
    return request_context(connection_id, client_software_name=None, client_software_version=None)


def metrics_data(*, client_id_attribute: str | None = "fake", metric_name: str = PAYLOAD_METRIC) -> MetricsData:
    """One resource with one gauge point; the resource says ``client_id`` as a client may, to be overridden."""
    data = MetricsData()
    resource_metrics = data.resource_metrics.add()
    if client_id_attribute is not None:
        resource_metrics.resource.attributes.add(key="client_id", value=AnyValue(string_value=client_id_attribute))
    metric = resource_metrics.scope_metrics.add().metrics.add(name=metric_name)
    metric.gauge.data_points.add(as_int=42)
    return data


def metrics_data_payload(**kwargs: object) -> bytes:
    """``metrics_data(...)`` serialized: what a client compresses and pushes."""
    return metrics_data(**kwargs).SerializeToString()  # type: ignore[arg-type]


class RecordingExporter:
    """A ``ClientTelemetryExporter`` that keeps what it is given, or raises ``fail_with`` if set."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.fail_with = fail_with
        self.exports: list[tuple[ClientTelemetryContext, ClientTelemetryPayload]] = []
        self.closed = False

    def export_metrics(self, context: ClientTelemetryContext, payload: ClientTelemetryPayload) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.exports.append((context, payload))

    def close(self) -> None:
        self.closed = True

    @property
    def payloads(self) -> list[ClientTelemetryPayload]:
        return [payload for _, payload in self.exports]


class SteppingClock:
    """A hi-res clock for the export timer that moves ``step_ms`` on every read: export time is ``step_ms``."""

    def __init__(self, step_ms: float = 1.0) -> None:
        self.now_ms = 0.0
        self.step_ms = step_ms

    def __call__(self) -> float:
        self.now_ms += self.step_ms
        return self.now_ms


def build_manager(
    exporters: list | tuple = (),
    *,
    telemetry_max_bytes: int = TELEMETRY_MAX_BYTES,
    cache_expiry_ms: int = CACHE_EXPIRY_MS,
    **config: object,
) -> ClientMetricsManager:
    """A manager as Kafka's tests build one, on the fixture clock."""
    return ClientMetricsManager(
        ClientMetricsManagerConfig(
            telemetry_max_bytes=telemetry_max_bytes,
            cache_expiry_ms=cache_expiry_ms,
            **config,  # type: ignore[arg-type]
        ),
        exporters,
        now_ms=START_MS,
        hi_res_clock_ms=SteppingClock(),
    )


def get_subscriptions(
    manager: ClientMetricsManager,
    now_ms: int = START_MS,
    client_instance_id: Uuid = ZERO_UUID,
    context: RequestContext | None = None,
) -> GetTelemetrySubscriptionsResponse:
    return manager.process_get_telemetry_subscriptions_request(
        GetTelemetrySubscriptionsRequest(client_instance_id), context or request_context(), now_ms
    )


def push(
    manager: ClientMetricsManager,
    client_instance_id: Uuid | None,
    subscription_id: int,
    now_ms: int = START_MS,
    *,
    metrics: bytes = b"",
    compression_type: int = 0,
    terminating: bool = False,
    context: RequestContext | None = None,
) -> PushTelemetryResponse:
    request = PushTelemetryRequest(
        client_instance_id,  # type: ignore[arg-type]  # None is what a malformed request decodes to
        subscription_id,
        terminating=terminating,
        compression_type=compression_type,
        metrics=metrics,
    )
    return manager.process_push_telemetry_request(request, context or request_context(), now_ms)


@pytest.fixture
def exporter() -> RecordingExporter:
    return RecordingExporter()


@pytest.fixture
def manager(exporter: RecordingExporter) -> Iterator[ClientMetricsManager]:
    """Kafka's ``setUp``: telemetry_max_bytes 100 and cache expiry 100 ms, exporting to ``exporter``."""
    mgr = build_manager([exporter])
    yield mgr
    mgr.close()


@pytest.fixture
def context() -> RequestContext:
    return request_context()


@pytest.fixture
def otlp_payload() -> bytes:
    """A real OTLP MetricsData of one gauge, small enough for the 100-byte limit uncompressed."""
    payload = metrics_data_payload()
    assert len(payload) <= TELEMETRY_MAX_BYTES
    return payload


@pytest.fixture
def make_manager() -> Iterator[Callable[..., ClientMetricsManager]]:
    """Builds more managers (Kafka's "new server" cases, other limits); closes them after the test."""
    built: list[ClientMetricsManager] = []

    def make(*args: object, **kwargs: object) -> ClientMetricsManager:
        mgr = build_manager(*args, **kwargs)  # type: ignore[arg-type]
        built.append(mgr)
        return mgr

    yield make
    for mgr in built:
        mgr.close()
