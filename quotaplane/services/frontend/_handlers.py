"""The Kafka APIs the frontend answers (Kafka's ``KafkaApis``, for the calls quotaplane serves).

Each handler takes the connection's state and a decoded request and returns the response body; the
connection (``_connection.py``) encodes it, fills in ``throttle_time_ms`` from the request quota and
mutes itself while the throttle lasts. Telemetry goes to the gateway's TelemetryService in batches;
the admin APIs are translated field by field to the AdminService (its messages mirror Kafka's) and
back, so Kafka's validation and error codes come from the config controller unchanged.

**Authorization** is Kafka's ``AclAuthorizer`` reduced to what these APIs check: AlterClientQuotas and
IncrementalAlterConfigs need ALTER_CONFIGS on the CLUSTER, DescribeClientQuotas, DescribeConfigs and
ListClientMetricsResources need DESCRIBE_CONFIGS on the CLUSTER (TOPIC resources on the topic), and the
answer to a principal without it is Kafka's: CLUSTER_AUTHORIZATION_FAILED (TOPIC_AUTHORIZATION_FAILED
for a topic resource), per entry or per resource where the response has entries. The "ACL" is one
list of operator principals; with no authorizer configured (plaintext, no operator list) every call is
allowed, as on a Kafka broker without ``authorizer.class.name``. GetTelemetrySubscriptions and
PushTelemetry need no permission (KIP-714).

**Where this is not a broker**: Metadata lists the frontend as the only broker and controller and no
topics (a requested topic is UNKNOWN_TOPIC_OR_PARTITION): Kafka clients need a broker to talk to for
telemetry and admin calls, and there is no data plane behind it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import grpc

from quotaplane.errors import Errors
from quotaplane.kafka_uuid import ZERO_UUID, Uuid
from quotaplane.protocol import (
    AlterClientQuotasResponse,
    ApiKey,
    ApiVersionsResponse,
    DescribeClientQuotasResponse,
    DescribeConfigsResponse,
    GetTelemetrySubscriptionsResponse,
    IncrementalAlterConfigsResponse,
    ListClientMetricsResourcesResponse,
    MetadataResponse,
    PushTelemetryResponse,
)
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import config_events_pb2 as events_pb
from quotaplane.v1 import telemetry_pb2 as tele_pb

if TYPE_CHECKING:
    from ._connection import ConnectionState
    from .server import FrontendConfig, FrontendServer

__all__ = ["ADMIN_APIS", "SERVED_APIS", "KafkaApis", "gateway_safe", "valid_software_field"]

log = logging.getLogger(__name__)


#: Kafka's ConfigResource.Type of a topic (its authorization is per topic, not per cluster).
_TOPIC = 2
_BROKER = 4
_CLIENT_METRICS = 16
#: DescribeConfigsResponse.ConfigSource ids.
_DEFAULT_CONFIG = 5
_SOURCES = {_TOPIC: 1, _CLIENT_METRICS: 7}
_DYNAMIC_BROKER_CONFIG = 2
_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
#: The AdminService's trailer carrying the Kafka error of a refused request (services/admin.py).
_KAFKA_ERROR_TRAILER = "x-kafka-error-code"

#: The APIs that need an operator when an authorizer is configured.
ADMIN_APIS = frozenset(
    {
        ApiKey.ALTER_CLIENT_QUOTAS,
        ApiKey.DESCRIBE_CLIENT_QUOTAS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.DESCRIBE_CONFIGS,
        ApiKey.LIST_CLIENT_METRICS_RESOURCES,
    }
)
#: Every API the frontend answers itself (ApiVersions offers these, and in proxy mode the upstream's too).
SERVED_APIS = ADMIN_APIS | {
    ApiKey.API_VERSIONS,
    ApiKey.METADATA,
    ApiKey.SASL_HANDSHAKE,
    ApiKey.SASL_AUTHENTICATE,
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS,
    ApiKey.PUSH_TELEMETRY,
}

# Kafka's ApiVersionsRequest.isValid: client software name and version
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def valid_software_field(value: str) -> bool:
    return _SOFTWARE.fullmatch(value) is not None


#: The gateway's ``max_name_length`` (GatewayConfig): longer names make it refuse a whole batch.
GATEWAY_MAX_NAME = 1024


def gateway_safe(name: str) -> bool:
    """Whether the gateway accepts ``name`` as a client id / user. Kafka takes any client id, but the
    gateway refuses a *whole batch* holding a NUL or an over-long name, and a batch carries many
    connections' requests: one such client must not fail the others, so it is answered here."""
    return len(name) <= GATEWAY_MAX_NAME and "\x00" not in name


def _grpc_error(exc: BaseException) -> tuple[int, str]:
    """A failed AdminService call as Kafka's (error code, message)."""
    if isinstance(exc, grpc.aio.AioRpcError):
        for key, value in exc.trailing_metadata() or ():
            if key == _KAFKA_ERROR_TRAILER:
                try:
                    return int(value), exc.details() or ""
                except (TypeError, ValueError):
                    break
        return Errors.UNKNOWN_SERVER_ERROR, f"{exc.code().name}: {exc.details() or ''}"
    return Errors.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"


# A None passed to a protobuf constructor leaves that (optional) field unset: Kafka's null.
def _entity_data(entity: Iterable[Any]) -> list[events_pb.EntityData]:
    return [events_pb.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entity]


class KafkaApis:
    """The request handlers of one frontend (shared by all its connections)."""

    def __init__(self, server: FrontendServer) -> None:
        self.server = server
        self.config: FrontendConfig = server.config

    @property
    def _supported(self) -> list[Any]:
        return self.server.supported  # a proxy's are known once it has asked the upstream

    # --- authorization ---------------------------------------------------------------------------------
    async def _per_resource(self, state: ConnectionState, method: str, request: Any, field: str, count: int) -> list:
        """An AdminService call answering one result per resource asked: the ``field`` results, in order;
        RuntimeError if their number differs (the caller answers every resource with the error)."""
        response = await state.wait(self.server.backend.admin_call(method, request, state.principal))
        answers = list(getattr(response, field))
        if len(answers) != count:
            raise RuntimeError("the admin service answered a different number of resources")
        return answers

    def authorized(self, state: ConnectionState) -> bool:
        """Whether the connection's principal may use the admin APIs (see the module docstring)."""
        operators = self.config.operators
        if operators is None:
            return not self.config.sasl_enabled  # SASL on and no operator list: deny, as an authorizer does
        return state.principal in operators

    # --- ApiVersions, Metadata -------------------------------------------------------------------------
    def api_versions(self, state: ConnectionState, request: Any) -> Any:
        body = request.body
        if request.api_version >= 3:
            name, version = body.client_software_name, body.client_software_version
            if not (valid_software_field(name) and valid_software_field(version)):
                return ApiVersionsResponse(error_code=Errors.INVALID_REQUEST)
            state.client_software_name, state.client_software_version = name, version
        return ApiVersionsResponse(api_keys=self._supported)

    def metadata(self, state: ConnectionState, request: Any) -> Any:
        config = self.config
        host, port = self.server.advertised
        broker = MetadataResponse.MetadataResponseBroker(node_id=config.node_id, host=host, port=port, rack=None)
        topics = []
        for topic in request.body.topics or ():
            if topic.name is None:  # v10+: asked by id only
                topics.append(
                    MetadataResponse.MetadataResponseTopic(
                        error_code=Errors.UNKNOWN_TOPIC_ID, name=None, topic_id=topic.topic_id
                    )
                )
            else:
                topics.append(
                    MetadataResponse.MetadataResponseTopic(
                        error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION, name=topic.name, topic_id=ZERO_UUID
                    )
                )
        return MetadataResponse(
            brokers=[broker], cluster_id=config.cluster_id, controller_id=config.node_id, topics=topics
        )

    # --- KIP-714 telemetry -----------------------------------------------------------------------------
    async def get_telemetry_subscriptions(self, state: ConnectionState, request: Any, now_ms: int) -> Any:
        asked = request.body.client_instance_id
        if not gateway_safe(state.client_id):
            return GetTelemetrySubscriptionsResponse(error_code=Errors.INVALID_REQUEST, client_instance_id=asked)
        item = tele_pb.GetTelemetrySubscriptionsRequest(
            client_instance_id=bytes(asked), context=state.telemetry_context(), now_ms=now_ms
        )
        try:
            result = await state.wait(self.server.backend.get_batcher.submit(item))
        except Exception as e:
            self.server.note_backend_error("GetTelemetrySubscriptions", e)
            return GetTelemetrySubscriptionsResponse(error_code=Errors.UNKNOWN_SERVER_ERROR, client_instance_id=asked)
        raw = result.client_instance_id
        # always echo an id: librdkafka overwrites its own with whatever comes back
        uuid = Uuid(raw) if len(raw) == 16 and raw != bytes(16) else asked
        if result.error_code == 0:
            state.instances.add(bytes(uuid))
        elif result.HasField("error_message"):
            log.debug("GetTelemetrySubscriptions on %s: %s", state.connection_id, result.error_message)
        return GetTelemetrySubscriptionsResponse(
            error_code=result.error_code,
            client_instance_id=uuid,
            subscription_id=result.subscription_id,
            accepted_compression_types=list(result.accepted_compression_types),
            push_interval_ms=result.push_interval_ms,
            telemetry_max_bytes=result.telemetry_max_bytes,
            delta_temporality=result.delta_temporality,
            requested_metrics=list(result.requested_metrics),
        )

    async def push_telemetry(self, state: ConnectionState, request: Any, now_ms: int) -> Any:
        body = request.body
        uuid = body.client_instance_id
        if not gateway_safe(state.client_id):
            return PushTelemetryResponse(error_code=Errors.INVALID_REQUEST)
        item = tele_pb.PushTelemetryRequest(
            client_instance_id=bytes(uuid),
            subscription_id=body.subscription_id,
            terminating=body.terminating,
            compression_type=body.compression_type,
            metrics=bytes(body.metrics),
            context=state.telemetry_context(),
            now_ms=now_ms,
        )
        try:
            result = await state.wait(self.server.backend.push_batcher.submit(item))
        except Exception as e:
            self.server.note_backend_error("PushTelemetry", e)
            return PushTelemetryResponse(error_code=Errors.UNKNOWN_SERVER_ERROR)
        if uuid != ZERO_UUID and len(bytes(uuid)) == 16:
            state.instances.add(bytes(uuid))
        if result.error_code and result.HasField("error_message"):
            log.debug("PushTelemetry on %s: %s", state.connection_id, result.error_message)
        return PushTelemetryResponse(error_code=result.error_code)

    # --- client quotas ---------------------------------------------------------------------------------
    async def alter_client_quotas(self, state: ConnectionState, request: Any, now_ms: int) -> Any:
        entries = request.body.entries
        Entry = AlterClientQuotasResponse.EntryData

        def answer(code: int, message: str | None, results: list[tuple[int, str | None]] | None = None) -> Any:
            out = []
            for i, entry in enumerate(entries):
                error, text = results[i] if results is not None else (code, message)
                entity = [Entry.EntityData(e.entity_type, e.entity_name) for e in entry.entity]
                out.append(Entry(error_code=error, error_message=text, entity=entity))
            return AlterClientQuotasResponse(entries=out)

        if not self.authorized(state):
            return answer(Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        grpc_request = admin_pb.AlterClientQuotasRequest(
            entries=[
                admin_pb.AlterClientQuotasRequest.EntryData(
                    entity=_entity_data(entry.entity),
                    ops=[
                        admin_pb.AlterClientQuotasRequest.OpData(key=op.key, value=None if op.remove else op.value)
                        for op in entry.ops
                    ],
                )
                for entry in entries
            ],
            validate_only=request.body.validate_only,
        )
        try:
            response = await state.wait(
                self.server.backend.admin_call("AlterClientQuotas", grpc_request, state.principal)
            )
        except Exception as e:
            code, message = _grpc_error(e)
            return answer(code, message)
        results = [(r.error_code, r.error_message if r.HasField("error_message") else None) for r in response.entries]
        if len(results) != len(entries):
            return answer(Errors.UNKNOWN_SERVER_ERROR, "the admin service answered a different number of entries")
        return answer(0, None, results)

    async def describe_client_quotas(self, state: ConnectionState, request: Any, now_ms: int) -> Any:
        if not self.authorized(state):
            return DescribeClientQuotasResponse(
                error_code=Errors.CLUSTER_AUTHORIZATION_FAILED,
                error_message="Cluster authorization failed.",
                entries=None,
            )
        body = request.body
        components = [
            admin_pb.DescribeClientQuotasRequest.ComponentData(
                entity_type=c.entity_type, match_type=c.match_type, match=c.match
            )
            for c in body.components
        ]
        grpc_request = admin_pb.DescribeClientQuotasRequest(components=components, strict=body.strict)
        try:
            response = await state.wait(
                self.server.backend.admin_call("DescribeClientQuotas", grpc_request, state.principal)
            )
        except Exception as e:
            code, message = _grpc_error(e)
            return DescribeClientQuotasResponse(error_code=code, error_message=message, entries=None)
        Entry = DescribeClientQuotasResponse.EntryData
        return DescribeClientQuotasResponse(
            error_message=None,
            entries=[
                Entry(
                    entity=[
                        Entry.EntityData(e.entity_type, e.entity_name if e.HasField("entity_name") else None)
                        for e in entry.entity
                    ],
                    values=[Entry.ValueData(v.key, v.value) for v in entry.values],
                )
                for entry in response.entries
            ],
        )

    # --- configs ---------------------------------------------------------------------------------------
    def _resource_refusal(self, resource_type: int) -> tuple[int, str]:
        if resource_type == _TOPIC:
            return Errors.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."
        return Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."

    async def incremental_alter_configs(self, state: ConnectionState, request: Any, now_ms: int) -> Any:
        resources = request.body.resources
        Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
        if not self.authorized(state):
            return IncrementalAlterConfigsResponse(
                responses=[
                    Result(*self._resource_refusal(r.resource_type), r.resource_type, r.resource_name)
                    for r in resources
                ]
            )
        Resource = admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource
        Config = admin_pb.IncrementalAlterConfigsRequest.AlterableConfig
        grpc_request = admin_pb.IncrementalAlterConfigsRequest(
            resources=[
                Resource(
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    configs=[
                        Config(name=c.name, config_operation=c.config_operation, value=c.value) for c in r.configs
                    ],
                )
                for r in resources
            ],
            validate_only=request.body.validate_only,
        )
        try:
            answers = await self._per_resource(
                state, "IncrementalAlterConfigs", grpc_request, "responses", len(resources)
            )
        except Exception as e:
            code, message = _grpc_error(e)
            return IncrementalAlterConfigsResponse(
                responses=[Result(code, message, r.resource_type, r.resource_name) for r in resources]
            )
        return IncrementalAlterConfigsResponse(
            responses=[
                Result(
                    a.error_code,
                    a.error_message if a.HasField("error_message") else None,
                    r.resource_type,
                    r.resource_name,
                )
                for r, a in zip(resources, answers, strict=True)
            ]
        )

    async def describe_configs(self, state: ConnectionState, request: Any, now_ms: int) -> Any:
        body = request.body
        version = request.api_version
        resources = body.resources
        Result = DescribeConfigsResponse.DescribeConfigsResult
        Entry = Result.DescribeConfigsResourceResult
        if not self.authorized(state):
            return DescribeConfigsResponse(
                results=[
                    Result(*self._resource_refusal(r.resource_type), r.resource_type, r.resource_name, [])
                    for r in resources
                ]
            )
        if not resources:
            return DescribeConfigsResponse(results=[])
        grpc_request = admin_pb.DescribeConfigsRequest(
            resources=[
                admin_pb.DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    configuration_keys=r.configuration_keys or [],
                )
                for r in resources
            ],
            include_documentation=body.include_documentation,
        )
        try:
            answers = await self._per_resource(state, "DescribeConfigs", grpc_request, "results", len(resources))
        except Exception as e:
            code, message = _grpc_error(e)
            return DescribeConfigsResponse(
                results=[Result(code, message, r.resource_type, r.resource_name, []) for r in resources]
            )
        results = []
        for r, a in zip(resources, answers, strict=True):
            configs = []
            if r.configuration_keys != []:  # Kafka: null is every config, an empty list none
                for c in a.configs:
                    configs.append(
                        Entry(
                            name=c.name,
                            value=c.value if c.HasField("value") else None,
                            read_only=c.read_only,
                            is_default=c.is_default if version == 0 else False,
                            config_source=self._source(r.resource_type, r.resource_name, c.is_default),
                            is_sensitive=False,
                            synonyms=[],
                            config_type=c.config_type,
                            documentation=c.documentation if c.HasField("documentation") else None,
                        )
                    )
            results.append(
                Result(
                    a.error_code,
                    a.error_message if a.HasField("error_message") else None,
                    r.resource_type,
                    r.resource_name,
                    configs,
                )
            )
        return DescribeConfigsResponse(results=results)

    @staticmethod
    def _source(resource_type: int, resource_name: str, is_default: bool) -> int:
        if is_default:
            return _DEFAULT_CONFIG
        if resource_type == _BROKER:
            return _DYNAMIC_DEFAULT_BROKER_CONFIG if resource_name == "" else _DYNAMIC_BROKER_CONFIG
        return _SOURCES.get(resource_type, 0)

    async def list_client_metrics_resources(self, state: ConnectionState, request: Any, now_ms: int) -> Any:
        if not self.authorized(state):
            return ListClientMetricsResourcesResponse(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED)
        try:
            response = await state.wait(
                self.server.backend.admin_call(
                    "ListClientMetricsResources", admin_pb.ListClientMetricsResourcesRequest(), state.principal
                )
            )
        except Exception as e:
            code, _ = _grpc_error(e)
            return ListClientMetricsResourcesResponse(error_code=code)
        Resource = ListClientMetricsResourcesResponse.ClientMetricsResource
        return ListClientMetricsResourcesResponse(
            client_metrics_resources=[Resource(r.name) for r in response.client_metrics_resources]
        )
