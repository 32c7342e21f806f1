"""The KIP-714 request and response bodies, field for field as Kafka's message schemas (v0).

GetTelemetrySubscriptions is API key 71 and PushTelemetry is 72. The Kafka-wire frontend and the gRPC
gateway both translate to and from these.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..kafka_uuid import ZERO_UUID, Uuid

__all__ = [
    "GetTelemetrySubscriptionsRequest",
    "GetTelemetrySubscriptionsResponse",
    "PushTelemetryRequest",
    "PushTelemetryResponse",
]


@dataclass(frozen=True, slots=True)
class GetTelemetrySubscriptionsRequest:
    #: The client's id, or ZERO_UUID on its first request (the broker then assigns one).
    client_instance_id: Uuid = ZERO_UUID


@dataclass(frozen=True, slots=True)
class GetTelemetrySubscriptionsResponse:
    throttle_time_ms: int = 0
    error_code: int = 0
    client_instance_id: Uuid = ZERO_UUID
    subscription_id: int = 0
    accepted_compression_types: tuple[int, ...] = ()
    push_interval_ms: int = 0
    telemetry_max_bytes: int = 0
    delta_temporality: bool = False
    requested_metrics: tuple[str, ...] = ()
    #: Not on the wire: why the request failed, for logs and the gRPC status message.
    error_message: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class PushTelemetryRequest:
    client_instance_id: Uuid
    subscription_id: int
    terminating: bool = False
    compression_type: int = 0
    metrics: bytes = b""


@dataclass(frozen=True, slots=True)
class PushTelemetryResponse:
    throttle_time_ms: int = 0
    error_code: int = 0
    error_message: str | None = field(default=None, compare=False)
