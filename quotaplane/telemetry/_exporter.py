"""The exporter plug-in interface: what the manager hands on for every accepted push.

Kafka's ``ClientTelemetryExporter.exportMetrics(context, payload)`` in snake case. The manager calls
``export_metrics`` on the request path, so an exporter must return at once: real work (disk, network)
goes to the exporter's own queue and thread. An exporter that raises makes the push fail with
INVALID_RECORD and counts a plugin error, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

    from ..kafka_uuid import Uuid

__all__ = [
    "ANONYMOUS_PRINCIPAL",
    "OTLP_CONTENT_TYPE",
    "ClientTelemetryContext",
    "ClientTelemetryExporter",
    "ClientTelemetryPayload",
    "RequestContext",
]

ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"
#: KIP-714 payloads are OTLP protobuf ``MetricsData``.
OTLP_CONTENT_TYPE = "application/x-protobuf"


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What the frontend knows about the connection a request came on (Kafka's RequestContext subset).

    ``client_software_name``/``_version`` come from the ApiVersions v3+ request of that connection and
    are ``None`` when the client never sent them.
    """

    connection_id: str
    client_id: str
    client_software_name: str | None = None
    client_software_version: str | None = None
    client_source_address: str | None = None
    client_source_port: int | None = None
    principal: str = ANONYMOUS_PRINCIPAL


@dataclass(frozen=True, slots=True)
class ClientTelemetryContext:
    """Kafka's ClientTelemetryContext: the push interval the client was given and its request context."""

    push_interval_ms: int
    request_context: RequestContext
    received_ms: int
    node_id: int


@dataclass(frozen=True, slots=True)
class ClientTelemetryPayload:
    """One accepted push.

    ``data`` is the decompressed OTLP ``MetricsData`` exactly as the client sent it;
    ``resource_attributes`` are the broker-side labels (client_instance_id, client_id, ... node_id);
    ``metrics_data`` is ``data`` decoded with those labels merged into every resource (ours win on a
    clash). Exporters share one payload and must not modify it.
    """

    client_instance_id: Uuid
    is_terminating: bool
    content_type: str
    compression_type: int
    compressed_size: int
    data: bytes
    resource_attributes: Mapping[str, str]
    metrics_data: MetricsData


@runtime_checkable
class ClientTelemetryExporter(Protocol):
    """A destination for accepted pushes. ``export_metrics`` must not block; ``close`` drains and stops."""

    def export_metrics(self, context: ClientTelemetryContext, payload: ClientTelemetryPayload) -> None: ...

    def close(self) -> None: ...
