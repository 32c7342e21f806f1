"""The Kafka wire protocol: message schemas as data, one generic codec, whole requests and responses.

Part of the core (pure: it depends only on :mod:`quotaplane.kafka_uuid`), so every Kafka-facing adapter
builds on the same codec: the frontend (``quotaplane.services.frontend``) and the proxy.

- :mod:`~quotaplane.protocol.types`: the primitives (varints, strings, arrays, uuids), bounds-checked.
- :mod:`~quotaplane.protocol.schema`: ``MessageSpec`` / ``Field`` (Kafka's JSON schema shape) compiled once per
  (message, version) into a plan of closures.
- :mod:`~quotaplane.protocol.messages`: the transcriptions of Kafka's message definitions, and the header rules.
- :mod:`~quotaplane.protocol.codec`: header + body framing for requests and responses.

Messages are generated slotted dataclasses with snake-case fields and Kafka's defaults.

>>> from quotaplane.protocol import ApiVersionsRequest, decode_request, encode_request
>>> wire = encode_request(18, 3, 1, ApiVersionsRequest("librdkafka", "2.16.0"), client_id="rdkafka")
>>> request = decode_request(wire[4:])  # the server strips the int32 size prefix
>>> request.api_key, request.api_version, request.header.client_id, request.body.client_software_name
(18, 3, 'rdkafka', 'librdkafka')

Covered: ApiVersions (18) v0-4, Metadata (3) v0-12, GetTelemetrySubscriptions (71) v0,
PushTelemetry (72) v0, ListClientMetricsResources (74) v0, DescribeClientQuotas (48) v0-1,
AlterClientQuotas (49) v0-1, DescribeConfigs (32) v0-4, IncrementalAlterConfigs (44) v0-1,
SaslHandshake (17) v0-1, SaslAuthenticate (36) v0-2, and for the proxy Produce (0) v3-9,
FindCoordinator (10) v0-6, DescribeCluster (60) v0-2, and the topic mutations CreateTopics (19) v2-7,
DeleteTopics (20) v1-6, CreatePartitions (37) v0-3; RequestHeader v0-2, ResponseHeader v0-1.
"""

from .codec import (
    DecodedRequest,
    DecodedResponse,
    UnsupportedRequestError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    supported_versions,
)
from .messages import (
    APIS,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListClientMetricsResourcesRequest,
    ListClientMetricsResourcesResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
    RequestHeader,
    ResponseHeader,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    request_header_version,
    response_header_version,
)
from .schema import Field, MessageSpec, field
from .types import ProtocolError

__all__ = [
    "APIS",
    "AlterClientQuotasRequest",
    "AlterClientQuotasResponse",
    "ApiKey",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DecodedRequest",
    "DecodedResponse",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeClientQuotasRequest",
    "DescribeClientQuotasResponse",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "Field",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "GetTelemetrySubscriptionsRequest",
    "GetTelemetrySubscriptionsResponse",
    "IncrementalAlterConfigsRequest",
    "IncrementalAlterConfigsResponse",
    "ListClientMetricsResourcesRequest",
    "ListClientMetricsResourcesResponse",
    "MessageSpec",
    "MetadataRequest",
    "MetadataResponse",
    "ProduceRequest",
    "ProduceResponse",
    "ProtocolError",
    "PushTelemetryRequest",
    "PushTelemetryResponse",
    "RequestHeader",
    "ResponseHeader",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
    "UnsupportedRequestError",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "field",
    "request_header_version",
    "response_header_version",
    "supported_versions",
]
