"""The Kafka wire-protocol codec of the Kafka-facing frontend.

Schemas are declared as data (``_messages.py``, transcribed from Kafka's JSON message
definitions) and one generic codec (``_schema.py``, over the primitives of ``_types.py``)
compiles each (message, version) once into a plan of closures. Messages are generated slotted
dataclasses with snake-case fields and Kafka's defaults.

>>> from quotaplane.services.frontend import ApiVersionsRequest, decode_request, encode_request
>>> wire = encode_request(18, 3, 1, ApiVersionsRequest("librdkafka", "2.16.0"), client_id="rdkafka")
>>> request = decode_request(wire[4:])  # the server strips the int32 size prefix
>>> request.api_key, request.api_version, request.header.client_id, request.body.client_software_name
(18, 3, 'rdkafka', 'librdkafka')

Covered: ApiVersions (18) v0-4, Metadata (3) v0-12, GetTelemetrySubscriptions (71) v0,
PushTelemetry (72) v0, ListClientMetricsResources (74) v0, DescribeClientQuotas (48) v0-1,
AlterClientQuotas (49) v0-1, DescribeConfigs (32) v0-4, IncrementalAlterConfigs (44) v0-1,
SaslHandshake (17) v0-1, SaslAuthenticate (36) v0-2; RequestHeader v0-2, ResponseHeader v0-1.
"""

from ._codec import (
    DecodedRequest,
    DecodedResponse,
    UnsupportedRequestError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    supported_versions,
)
from ._messages import (
    APIS,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListClientMetricsResourcesRequest,
    ListClientMetricsResourcesResponse,
    MetadataRequest,
    MetadataResponse,
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
from ._types import ProtocolError

__all__ = [
    "APIS",
    "AlterClientQuotasRequest",
    "AlterClientQuotasResponse",
    "ApiKey",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "DecodedRequest",
    "DecodedResponse",
    "DescribeClientQuotasRequest",
    "DescribeClientQuotasResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "GetTelemetrySubscriptionsRequest",
    "GetTelemetrySubscriptionsResponse",
    "IncrementalAlterConfigsRequest",
    "IncrementalAlterConfigsResponse",
    "ListClientMetricsResourcesRequest",
    "ListClientMetricsResourcesResponse",
    "MetadataRequest",
    "MetadataResponse",
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
    "request_header_version",
    "response_header_version",
    "supported_versions",
]
