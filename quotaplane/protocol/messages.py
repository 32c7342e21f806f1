"""The message schemas quotaplane speaks, transcribed from Kafka's JSON message definitions.

Source: apache/kafka ``clients/src/main/resources/common/message/<Name>.json`` (the tree of
October 2024, before Kafka 4.0 dropped old versions, so v0 of Metadata and DescribeConfigs are
still here for old clients). Field order, versions, nullable and tagged versions and defaults are
Kafka's; ``mapKey``, ``entityType``, ``ignorable`` and the documentation strings are left out
(they do not change the bytes). Each API: ``(request spec, response spec)`` in ``APIS``.

Header versions (Kafka's ``ApiMessageType.requestHeaderVersion`` / ``responseHeaderVersion``):
a request uses header v2 when its API version is flexible, v1 otherwise, and v0 only for
ControlledShutdown v0; a response uses header v1 when flexible, v0 otherwise, except ApiVersions,
whose response header is always v0: a client reads it before it knows which versions the server
speaks, and librdkafka aborts on a tag byte there.
"""

from __future__ import annotations

from .schema import MessageSpec
from .schema import field as f

__all__ = [
    "APIS",
    "API_NAMES",
    "CONTROLLED_SHUTDOWN_KEY",
    "REQUEST_HEADER",
    "RESPONSE_HEADER",
    "AlterClientQuotasRequest",
    "AlterClientQuotasResponse",
    "ApiKey",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeClientQuotasRequest",
    "DescribeClientQuotasResponse",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "GetTelemetrySubscriptionsRequest",
    "GetTelemetrySubscriptionsResponse",
    "IncrementalAlterConfigsRequest",
    "IncrementalAlterConfigsResponse",
    "ListClientMetricsResourcesRequest",
    "ListClientMetricsResourcesResponse",
    "MetadataRequest",
    "MetadataResponse",
    "ProduceRequest",
    "ProduceResponse",
    "PushTelemetryRequest",
    "PushTelemetryResponse",
    "RequestHeader",
    "ResponseHeader",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
    "request_header_version",
    "response_header_version",
]

_M = __name__


def _spec(name: str, kind: str, api_key: int | None, valid: str, flexible: str, *fields) -> MessageSpec:
    return MessageSpec(
        name, kind, api_key=api_key, valid_versions=valid, flexible_versions=flexible, fields=fields, module=_M
    )


class ApiKey:
    """The API keys of the messages below (Kafka's ``ApiKeys`` ids)."""

    PRODUCE = 0
    FETCH = 1
    METADATA = 3
    FIND_COORDINATOR = 10
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    CREATE_PARTITIONS = 37
    DESCRIBE_CLUSTER = 60
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    INCREMENTAL_ALTER_CONFIGS = 44
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    LIST_CLIENT_METRICS_RESOURCES = 74


#: The one API whose v0 request uses request header v0 (no client id).
CONTROLLED_SHUTDOWN_KEY = 7

# --- headers ---------------------------------------------------------------------------------

REQUEST_HEADER = _spec(
    "RequestHeader", "header", None, "0-2", "2+",
    f("RequestApiKey", "int16", "0+"),
    f("RequestApiVersion", "int16", "0+"),
    f("CorrelationId", "int32", "0+"),
    # int16 length even in the flexible v2: a broker must read the header of any ApiVersions
    # request, whatever version the client tries first
    f("ClientId", "string", "1+", nullable="1+", flexible="none"),
)  # fmt: skip

RESPONSE_HEADER = _spec(
    "ResponseHeader", "header", None, "0-1", "1+",
    f("CorrelationId", "int32", "0+"),
)  # fmt: skip

# --- ApiVersions (18) --------------------------------------------------------------------------

API_VERSIONS_REQUEST = _spec(
    "ApiVersionsRequest", "request", ApiKey.API_VERSIONS, "0-4", "3+",
    f("ClientSoftwareName", "string", "3+"),
    f("ClientSoftwareVersion", "string", "3+"),
)  # fmt: skip

API_VERSIONS_RESPONSE = _spec(
    "ApiVersionsResponse", "response", ApiKey.API_VERSIONS, "0-4", "3+",
    f("ErrorCode", "int16", "0+"),
    f("ApiKeys", "[]ApiVersion", "0+", fields=[
        f("ApiKey", "int16", "0+"),
        f("MinVersion", "int16", "0+"),
        f("MaxVersion", "int16", "0+"),
    ]),
    f("ThrottleTimeMs", "int32", "1+"),
    f("SupportedFeatures", "[]SupportedFeatureKey", "3+", tag=0, tagged="3+", fields=[
        f("Name", "string", "3+"),
        f("MinVersion", "int16", "3+"),
        f("MaxVersion", "int16", "3+"),
    ]),
    f("FinalizedFeaturesEpoch", "int64", "3+", tag=1, tagged="3+", default=-1),
    f("FinalizedFeatures", "[]FinalizedFeatureKey", "3+", tag=2, tagged="3+", fields=[
        f("Name", "string", "3+"),
        f("MaxVersionLevel", "int16", "3+"),
        f("MinVersionLevel", "int16", "3+"),
    ]),
    f("ZkMigrationReady", "bool", "3+", tag=3, tagged="3+", default=False),
)  # fmt: skip

# --- Metadata (3) ----------------------------------------------------------------------------

METADATA_REQUEST = _spec(
    "MetadataRequest", "request", ApiKey.METADATA, "0-12", "9+",
    # v0: an empty array means all topics; v1+: null means all topics, empty means none
    f("Topics", "[]MetadataRequestTopic", "0+", nullable="1+", fields=[
        f("TopicId", "uuid", "10+"),
        f("Name", "string", "0+", nullable="10+"),
    ]),
    f("AllowAutoTopicCreation", "bool", "4+", default=True),
    f("IncludeClusterAuthorizedOperations", "bool", "8-10"),
    f("IncludeTopicAuthorizedOperations", "bool", "8+"),
)  # fmt: skip

METADATA_RESPONSE = _spec(
    "MetadataResponse", "response", ApiKey.METADATA, "0-12", "9+",
    f("ThrottleTimeMs", "int32", "3+"),
    f("Brokers", "[]MetadataResponseBroker", "0+", fields=[
        f("NodeId", "int32", "0+"),
        f("Host", "string", "0+"),
        f("Port", "int32", "0+"),
        f("Rack", "string", "1+", nullable="1+", default=None),
    ]),
    f("ClusterId", "string", "2+", nullable="2+", default=None),
    f("ControllerId", "int32", "1+", default=-1),
    f("Topics", "[]MetadataResponseTopic", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("Name", "string", "0+", nullable="12+"),
        f("TopicId", "uuid", "10+"),
        f("IsInternal", "bool", "1+", default=False),
        f("Partitions", "[]MetadataResponsePartition", "0+", fields=[
            f("ErrorCode", "int16", "0+"),
            f("PartitionIndex", "int32", "0+"),
            f("LeaderId", "int32", "0+"),
            f("LeaderEpoch", "int32", "7+", default=-1),
            f("ReplicaNodes", "[]int32", "0+"),
            f("IsrNodes", "[]int32", "0+"),
            f("OfflineReplicas", "[]int32", "5+"),
        ]),
        f("TopicAuthorizedOperations", "int32", "8+", default=-(2**31)),
    ]),
    f("ClusterAuthorizedOperations", "int32", "8-10", default=-(2**31)),
)  # fmt: skip

# --- Produce (0): v3-v9, the versions without broker addresses in the response (v10 adds NodeEndpoints) ---

PRODUCE_REQUEST = _spec(
    "ProduceRequest", "request", ApiKey.PRODUCE, "3-9", "9+",
    f("TransactionalId", "string", "3+", nullable="3+", default=None),
    f("Acks", "int16", "0+"),
    f("TimeoutMs", "int32", "0+"),
    f("TopicData", "[]TopicProduceData", "0+", fields=[
        f("Name", "string", "0+"),
        f("PartitionData", "[]PartitionProduceData", "0+", fields=[
            f("Index", "int32", "0+"),
            # Kafka's "records" type: a nullable bytes field holding whole record batches, never decompressed here
            f("Records", "bytes", "0+", nullable="0+", default=None),
        ]),
    ]),
)  # fmt: skip

PRODUCE_RESPONSE = _spec(
    "ProduceResponse", "response", ApiKey.PRODUCE, "3-9", "9+",
    f("Responses", "[]TopicProduceResponse", "0+", fields=[
        f("Name", "string", "0+"),
        f("PartitionResponses", "[]PartitionProduceResponse", "0+", fields=[
            f("Index", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("BaseOffset", "int64", "0+"),
            f("LogAppendTimeMs", "int64", "2+", default=-1),
            f("LogStartOffset", "int64", "5+", default=-1),
            f("RecordErrors", "[]BatchIndexAndErrorMessage", "8+", fields=[
                f("BatchIndex", "int32", "8+"),
                f("BatchIndexErrorMessage", "string", "8+", nullable="8+", default=None),
            ]),
            f("ErrorMessage", "string", "8+", nullable="8+", default=None),
        ]),
    ]),
    f("ThrottleTimeMs", "int32", "1+"),
)  # fmt: skip

# --- FindCoordinator (10) and DescribeCluster (60): responses carrying broker addresses -------------------

FIND_COORDINATOR_REQUEST = _spec(
    "FindCoordinatorRequest", "request", ApiKey.FIND_COORDINATOR, "0-6", "3+",
    f("Key", "string", "0-3"),
    f("KeyType", "int8", "1+"),
    f("CoordinatorKeys", "[]string", "4+"),
)  # fmt: skip

FIND_COORDINATOR_RESPONSE = _spec(
    "FindCoordinatorResponse", "response", ApiKey.FIND_COORDINATOR, "0-6", "3+",
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0-3"),
    f("ErrorMessage", "string", "1-3", nullable="1-3", default=None),
    f("NodeId", "int32", "0-3"),
    f("Host", "string", "0-3"),
    f("Port", "int32", "0-3"),
    f("Coordinators", "[]Coordinator", "4+", fields=[
        f("Key", "string", "4+"),
        f("NodeId", "int32", "4+"),
        f("Host", "string", "4+"),
        f("Port", "int32", "4+"),
        f("ErrorCode", "int16", "4+"),
        f("ErrorMessage", "string", "4+", nullable="4+", default=None),
    ]),
)  # fmt: skip

DESCRIBE_CLUSTER_REQUEST = _spec(
    "DescribeClusterRequest", "request", ApiKey.DESCRIBE_CLUSTER, "0-2", "0+",
    f("IncludeClusterAuthorizedOperations", "bool", "0+"),
    f("EndpointType", "int8", "1+", default=1),
    f("IncludeFencedBrokers", "bool", "2+"),
)  # fmt: skip

DESCRIBE_CLUSTER_RESPONSE = _spec(
    "DescribeClusterResponse", "response", ApiKey.DESCRIBE_CLUSTER, "0-2", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+", default=None),
    f("EndpointType", "int8", "1+", default=1),
    f("ClusterId", "string", "0+"),
    f("ControllerId", "int32", "0+", default=-1),
    f("Brokers", "[]DescribeClusterBroker", "0+", fields=[
        f("BrokerId", "int32", "0+"),
        f("Host", "string", "0+"),
        f("Port", "int32", "0+"),
        f("Rack", "string", "0+", nullable="0+", default=None),
        f("IsFenced", "bool", "2+"),
    ]),
    f("ClusterAuthorizedOperations", "int32", "0+", default=-(2**31)),
)  # fmt: skip

# --- topic mutations (19, 20, 37): the controller mutation quota (KIP-599) -----------------------------------
# The versions of Kafka 4.0 (CreateTopics v0-1 and DeleteTopics v0 were removed there): every one carries
# ThrottleTimeMs first in its response, so the proxy can answer a mutation throttle in any of them.

CREATE_TOPICS_REQUEST = _spec(
    "CreateTopicsRequest", "request", ApiKey.CREATE_TOPICS, "2-7", "5+",
    f("Topics", "[]CreatableTopic", "0+", fields=[
        f("Name", "string", "0+"),
        f("NumPartitions", "int32", "0+"),
        f("ReplicationFactor", "int16", "0+"),
        f("Assignments", "[]CreatableReplicaAssignment", "0+", fields=[
            f("PartitionIndex", "int32", "0+"),
            f("BrokerIds", "[]int32", "0+"),
        ]),
        f("Configs", "[]CreatableTopicConfig", "0+", fields=[
            f("Name", "string", "0+"),
            f("Value", "string", "0+", nullable="0+"),
        ]),
    ]),
    f("timeoutMs", "int32", "0+", default=60000),
    f("validateOnly", "bool", "1+", default=False),
)  # fmt: skip

CREATE_TOPICS_RESPONSE = _spec(
    "CreateTopicsResponse", "response", ApiKey.CREATE_TOPICS, "2-7", "5+",
    f("ThrottleTimeMs", "int32", "2+"),
    f("Topics", "[]CreatableTopicResult", "0+", fields=[
        f("Name", "string", "0+"),
        f("TopicId", "uuid", "7+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "1+", nullable="0+"),
        f("TopicConfigErrorCode", "int16", "5+", tag=0, tagged="5+"),
        f("NumPartitions", "int32", "5+", default=-1),
        f("ReplicationFactor", "int16", "5+", default=-1),
        f("Configs", "[]CreatableTopicConfigs", "5+", nullable="5+", fields=[
            f("Name", "string", "5+"),
            f("Value", "string", "5+", nullable="5+"),
            f("ReadOnly", "bool", "5+"),
            f("ConfigSource", "int8", "5+", default=-1),
            f("IsSensitive", "bool", "5+"),
        ]),
    ]),
)  # fmt: skip

DELETE_TOPICS_REQUEST = _spec(
    "DeleteTopicsRequest", "request", ApiKey.DELETE_TOPICS, "1-6", "4+",
    # v6 names each topic by name or by id (the other null / the zero uuid)
    f("Topics", "[]DeleteTopicState", "6+", fields=[
        f("Name", "string", "6+", nullable="6+", default=None),
        f("TopicId", "uuid", "6+"),
    ]),
    f("TopicNames", "[]string", "0-5"),
    f("TimeoutMs", "int32", "0+"),
)  # fmt: skip

DELETE_TOPICS_RESPONSE = _spec(
    "DeleteTopicsResponse", "response", ApiKey.DELETE_TOPICS, "1-6", "4+",
    f("ThrottleTimeMs", "int32", "1+"),
    f("Responses", "[]DeletableTopicResult", "0+", fields=[
        f("Name", "string", "0+", nullable="6+"),
        f("TopicId", "uuid", "6+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "5+", nullable="5+", default=None),
    ]),
)  # fmt: skip

CREATE_PARTITIONS_REQUEST = _spec(
    "CreatePartitionsRequest", "request", ApiKey.CREATE_PARTITIONS, "0-3", "2+",
    f("Topics", "[]CreatePartitionsTopic", "0+", fields=[
        f("Name", "string", "0+"),
        f("Count", "int32", "0+"),
        f("Assignments", "[]CreatePartitionsAssignment", "0+", nullable="0+", fields=[
            f("BrokerIds", "[]int32", "0+"),
        ]),
    ]),
    f("TimeoutMs", "int32", "0+"),
    f("ValidateOnly", "bool", "0+"),
)  # fmt: skip

CREATE_PARTITIONS_RESPONSE = _spec(
    "CreatePartitionsResponse", "response", ApiKey.CREATE_PARTITIONS, "0-3", "2+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]CreatePartitionsTopicResult", "0+", fields=[
        f("Name", "string", "0+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+", default=None),
    ]),
)  # fmt: skip

# --- KIP-714 client telemetry (71, 72, 74) -------------------------------------------------------

GET_TELEMETRY_SUBSCRIPTIONS_REQUEST = _spec(
    "GetTelemetrySubscriptionsRequest", "request", ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, "0", "0+",
    f("ClientInstanceId", "uuid", "0+"),
)  # fmt: skip

GET_TELEMETRY_SUBSCRIPTIONS_RESPONSE = _spec(
    "GetTelemetrySubscriptionsResponse", "response", ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, "0", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ClientInstanceId", "uuid", "0+"),
    f("SubscriptionId", "int32", "0+"),
    f("AcceptedCompressionTypes", "[]int8", "0+"),
    f("PushIntervalMs", "int32", "0+"),
    f("TelemetryMaxBytes", "int32", "0+"),
    f("DeltaTemporality", "bool", "0+"),
    f("RequestedMetrics", "[]string", "0+"),
)  # fmt: skip

PUSH_TELEMETRY_REQUEST = _spec(
    "PushTelemetryRequest", "request", ApiKey.PUSH_TELEMETRY, "0", "0+",
    f("ClientInstanceId", "uuid", "0+"),
    f("SubscriptionId", "int32", "0+"),
    f("Terminating", "bool", "0+"),
    f("CompressionType", "int8", "0+"),
    f("Metrics", "bytes", "0+"),
)  # fmt: skip

PUSH_TELEMETRY_RESPONSE = _spec(
    "PushTelemetryResponse", "response", ApiKey.PUSH_TELEMETRY, "0", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
)  # fmt: skip

LIST_CLIENT_METRICS_RESOURCES_REQUEST = _spec(
    "ListClientMetricsResourcesRequest", "request", ApiKey.LIST_CLIENT_METRICS_RESOURCES, "0", "0+",
)  # fmt: skip

LIST_CLIENT_METRICS_RESOURCES_RESPONSE = _spec(
    "ListClientMetricsResourcesResponse", "response", ApiKey.LIST_CLIENT_METRICS_RESOURCES, "0", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ClientMetricsResources", "[]ClientMetricsResource", "0+", fields=[
        f("Name", "string", "0+"),
    ]),
)  # fmt: skip

# --- client quotas (48, 49) ----------------------------------------------------------------------

#: The quota entity, the same in DescribeClientQuotasResponse and both AlterClientQuotas messages.
_ENTITY = f("Entity", "[]EntityData", "0+", fields=[
    f("EntityType", "string", "0+"),
    f("EntityName", "string", "0+", nullable="0+"),
])  # fmt: skip

DESCRIBE_CLIENT_QUOTAS_REQUEST = _spec(
    "DescribeClientQuotasRequest", "request", ApiKey.DESCRIBE_CLIENT_QUOTAS, "0-1", "1+",
    f("Components", "[]ComponentData", "0+", fields=[
        f("EntityType", "string", "0+"),
        f("MatchType", "int8", "0+"),
        f("Match", "string", "0+", nullable="0+"),
    ]),
    f("Strict", "bool", "0+"),
)  # fmt: skip

DESCRIBE_CLIENT_QUOTAS_RESPONSE = _spec(
    "DescribeClientQuotasResponse", "response", ApiKey.DESCRIBE_CLIENT_QUOTAS, "0-1", "1+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+"),
    f("Entries", "[]EntryData", "0+", nullable="0+", fields=[
        _ENTITY,
        f("Values", "[]ValueData", "0+", fields=[
            f("Key", "string", "0+"),
            f("Value", "float64", "0+"),
        ]),
    ]),
)  # fmt: skip

ALTER_CLIENT_QUOTAS_REQUEST = _spec(
    "AlterClientQuotasRequest", "request", ApiKey.ALTER_CLIENT_QUOTAS, "0-1", "1+",
    f("Entries", "[]EntryData", "0+", fields=[
        _ENTITY,
        f("Ops", "[]OpData", "0+", fields=[
            f("Key", "string", "0+"),
            f("Value", "float64", "0+"),
            f("Remove", "bool", "0+"),
        ]),
    ]),
    f("ValidateOnly", "bool", "0+"),
)  # fmt: skip

ALTER_CLIENT_QUOTAS_RESPONSE = _spec(
    "AlterClientQuotasResponse", "response", ApiKey.ALTER_CLIENT_QUOTAS, "0-1", "1+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Entries", "[]EntryData", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        _ENTITY,
    ]),
)  # fmt: skip

# --- configs (32, 44) ------------------------------------------------------------------------

DESCRIBE_CONFIGS_REQUEST = _spec(
    "DescribeConfigsRequest", "request", ApiKey.DESCRIBE_CONFIGS, "0-4", "4+",
    f("Resources", "[]DescribeConfigsResource", "0+", fields=[
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("ConfigurationKeys", "[]string", "0+", nullable="0+"),
    ]),
    f("IncludeSynonyms", "bool", "1+", default=False),
    f("IncludeDocumentation", "bool", "3+", default=False),
)  # fmt: skip

DESCRIBE_CONFIGS_RESPONSE = _spec(
    "DescribeConfigsResponse", "response", ApiKey.DESCRIBE_CONFIGS, "0-4", "4+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]DescribeConfigsResult", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("Configs", "[]DescribeConfigsResourceResult", "0+", fields=[
            f("Name", "string", "0+"),
            f("Value", "string", "0+", nullable="0+"),
            f("ReadOnly", "bool", "0+"),
            f("IsDefault", "bool", "0"),
            # v0 has no source; Kafka's placeholder is -1 (the meaningful v0 default depends on
            # the resource)
            f("ConfigSource", "int8", "1+", default=-1),
            f("IsSensitive", "bool", "0+"),
            f("Synonyms", "[]DescribeConfigsSynonym", "1+", fields=[
                f("Name", "string", "1+"),
                f("Value", "string", "1+", nullable="0+"),
                f("Source", "int8", "1+"),
            ]),
            f("ConfigType", "int8", "3+", default=0),
            f("Documentation", "string", "3+", nullable="0+"),
        ]),
    ]),
)  # fmt: skip

INCREMENTAL_ALTER_CONFIGS_REQUEST = _spec(
    "IncrementalAlterConfigsRequest", "request", ApiKey.INCREMENTAL_ALTER_CONFIGS, "0-1", "1+",
    f("Resources", "[]AlterConfigsResource", "0+", fields=[
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("Configs", "[]AlterableConfig", "0+", fields=[
            f("Name", "string", "0+"),
            f("ConfigOperation", "int8", "0+"),
            f("Value", "string", "0+", nullable="0+"),
        ]),
    ]),
    f("ValidateOnly", "bool", "0+"),
)  # fmt: skip

INCREMENTAL_ALTER_CONFIGS_RESPONSE = _spec(
    "IncrementalAlterConfigsResponse", "response", ApiKey.INCREMENTAL_ALTER_CONFIGS, "0-1", "1+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Responses", "[]AlterConfigsResourceResponse", "0+", fields=[
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
    ]),
)  # fmt: skip

# --- SASL (17, 36) ---------------------------------------------------------------------------

SASL_HANDSHAKE_REQUEST = _spec(
    "SaslHandshakeRequest", "request", ApiKey.SASL_HANDSHAKE, "0-1", "none",
    f("Mechanism", "string", "0+"),
)  # fmt: skip

SASL_HANDSHAKE_RESPONSE = _spec(
    "SaslHandshakeResponse", "response", ApiKey.SASL_HANDSHAKE, "0-1", "none",
    f("ErrorCode", "int16", "0+"),
    f("Mechanisms", "[]string", "0+"),
)  # fmt: skip

SASL_AUTHENTICATE_REQUEST = _spec(
    "SaslAuthenticateRequest", "request", ApiKey.SASL_AUTHENTICATE, "0-2", "2+",
    f("AuthBytes", "bytes", "0+"),
)  # fmt: skip

SASL_AUTHENTICATE_RESPONSE = _spec(
    "SaslAuthenticateResponse", "response", ApiKey.SASL_AUTHENTICATE, "0-2", "2+",
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+"),
    f("AuthBytes", "bytes", "0+"),
    f("SessionLifetimeMs", "int64", "1+", default=0),
)  # fmt: skip

# --- registry --------------------------------------------------------------------------------

#: api key -> (request spec, response spec)
APIS: dict[int, tuple[MessageSpec, MessageSpec]] = {
    req.api_key: (req, resp)  # type: ignore[misc]
    for req, resp in [
        (API_VERSIONS_REQUEST, API_VERSIONS_RESPONSE),
        (METADATA_REQUEST, METADATA_RESPONSE),
        (GET_TELEMETRY_SUBSCRIPTIONS_REQUEST, GET_TELEMETRY_SUBSCRIPTIONS_RESPONSE),
        (PUSH_TELEMETRY_REQUEST, PUSH_TELEMETRY_RESPONSE),
        (LIST_CLIENT_METRICS_RESOURCES_REQUEST, LIST_CLIENT_METRICS_RESOURCES_RESPONSE),
        (DESCRIBE_CLIENT_QUOTAS_REQUEST, DESCRIBE_CLIENT_QUOTAS_RESPONSE),
        (ALTER_CLIENT_QUOTAS_REQUEST, ALTER_CLIENT_QUOTAS_RESPONSE),
        (DESCRIBE_CONFIGS_REQUEST, DESCRIBE_CONFIGS_RESPONSE),
        (INCREMENTAL_ALTER_CONFIGS_REQUEST, INCREMENTAL_ALTER_CONFIGS_RESPONSE),
        (SASL_HANDSHAKE_REQUEST, SASL_HANDSHAKE_RESPONSE),
        (SASL_AUTHENTICATE_REQUEST, SASL_AUTHENTICATE_RESPONSE),
        (PRODUCE_REQUEST, PRODUCE_RESPONSE),
        (FIND_COORDINATOR_REQUEST, FIND_COORDINATOR_RESPONSE),
        (DESCRIBE_CLUSTER_REQUEST, DESCRIBE_CLUSTER_RESPONSE),
        (CREATE_TOPICS_REQUEST, CREATE_TOPICS_RESPONSE),
        (DELETE_TOPICS_REQUEST, DELETE_TOPICS_RESPONSE),
        (CREATE_PARTITIONS_REQUEST, CREATE_PARTITIONS_RESPONSE),
    ]
}
API_NAMES: dict[int, str] = {key: req.name.removesuffix("Request") for key, (req, _) in APIS.items()}

RequestHeader = REQUEST_HEADER.cls
ResponseHeader = RESPONSE_HEADER.cls
ApiVersionsRequest = API_VERSIONS_REQUEST.cls
ApiVersionsResponse = API_VERSIONS_RESPONSE.cls
ProduceRequest = PRODUCE_REQUEST.cls
ProduceResponse = PRODUCE_RESPONSE.cls
FindCoordinatorRequest = FIND_COORDINATOR_REQUEST.cls
FindCoordinatorResponse = FIND_COORDINATOR_RESPONSE.cls
DescribeClusterRequest = DESCRIBE_CLUSTER_REQUEST.cls
DescribeClusterResponse = DESCRIBE_CLUSTER_RESPONSE.cls
CreateTopicsRequest = CREATE_TOPICS_REQUEST.cls
CreateTopicsResponse = CREATE_TOPICS_RESPONSE.cls
DeleteTopicsRequest = DELETE_TOPICS_REQUEST.cls
DeleteTopicsResponse = DELETE_TOPICS_RESPONSE.cls
CreatePartitionsRequest = CREATE_PARTITIONS_REQUEST.cls
CreatePartitionsResponse = CREATE_PARTITIONS_RESPONSE.cls
MetadataRequest = METADATA_REQUEST.cls
MetadataResponse = METADATA_RESPONSE.cls
GetTelemetrySubscriptionsRequest = GET_TELEMETRY_SUBSCRIPTIONS_REQUEST.cls
GetTelemetrySubscriptionsResponse = GET_TELEMETRY_SUBSCRIPTIONS_RESPONSE.cls
PushTelemetryRequest = PUSH_TELEMETRY_REQUEST.cls
PushTelemetryResponse = PUSH_TELEMETRY_RESPONSE.cls
ListClientMetricsResourcesRequest = LIST_CLIENT_METRICS_RESOURCES_REQUEST.cls
ListClientMetricsResourcesResponse = LIST_CLIENT_METRICS_RESOURCES_RESPONSE.cls
DescribeClientQuotasRequest = DESCRIBE_CLIENT_QUOTAS_REQUEST.cls
DescribeClientQuotasResponse = DESCRIBE_CLIENT_QUOTAS_RESPONSE.cls
AlterClientQuotasRequest = ALTER_CLIENT_QUOTAS_REQUEST.cls
AlterClientQuotasResponse = ALTER_CLIENT_QUOTAS_RESPONSE.cls
DescribeConfigsRequest = DESCRIBE_CONFIGS_REQUEST.cls
DescribeConfigsResponse = DESCRIBE_CONFIGS_RESPONSE.cls
IncrementalAlterConfigsRequest = INCREMENTAL_ALTER_CONFIGS_REQUEST.cls
IncrementalAlterConfigsResponse = INCREMENTAL_ALTER_CONFIGS_RESPONSE.cls
SaslHandshakeRequest = SASL_HANDSHAKE_REQUEST.cls
SaslHandshakeResponse = SASL_HANDSHAKE_RESPONSE.cls
SaslAuthenticateRequest = SASL_AUTHENTICATE_REQUEST.cls
SaslAuthenticateResponse = SASL_AUTHENTICATE_RESPONSE.cls


def request_header_version(api_key: int, api_version: int, flexible: bool) -> int:
    """The request header version of a request whose body is (or is not) ``flexible``."""
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 2 if flexible else 1


def response_header_version(api_key: int, flexible: bool) -> int:
    """The response header version; always 0 for ApiVersions (see the module docstring)."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if flexible else 0
