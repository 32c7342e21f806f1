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
list of operator principals; with no authorizer configured (no operator list, and a listener that authenticates
no one: no SASL, no client certificates) every call is allowed, as on a Kafka broker without
``authorizer.class.name``. GetTelemetrySubscriptions and
PushTelemetry need no permission (KIP-714).

**Where this is not a broker** (a frontend without ``--upstream-bootstrap``): Metadata lists the frontend as
the only broker and controller and no topics (a requested topic is UNKNOWN_TOPIC_OR_PARTITION): Kafka clients
need a broker to talk to for telemetry and admin calls, and there is no data plane behind it (Produce and
Fetch are refused at once, ``_no_upstream.py``). In proxy mode Metadata is the upstream's, forwarded
(``_forward.py``); the handlers here serve only quotaplane's own APIs.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any

from quotaplane.errors import Errors
from quotaplane.kafka_uuid import ZERO_UUID, Uuid
from quotaplane.protocol import (
    ApiKey,
    ApiVersionsResponse,
    GetTelemetrySubscriptionsResponse,
    MetadataResponse,
    PushTelemetryResponse,
)
from quotaplane.v1 import telemetry_pb2 as tele_pb

from ._admin_apis import AdminApis

if TYPE_CHECKING:
    from ._connection import ConnectionState
    from .server import FrontendConfig, FrontendServer

__all__ = ["ADMIN_APIS", "SERVED_APIS", "KafkaApis", "gateway_safe", "valid_software_field"]

log = logging.getLogger(__name__)

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


class KafkaApis(AdminApis):
    """The request handlers of one frontend (shared by all its connections)."""

    def __init__(self, server: FrontendServer) -> None:
        self.server = server
        self.config: FrontendConfig = server.config

    @property
    def _supported(self) -> list[Any]:
        return self.server.supported  # a proxy's are known once it has asked the upstream

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
        item = (
            bytes(uuid),
            body.subscription_id,
            body.terminating,
            body.compression_type,
            bytes(body.metrics),
            state.telemetry_context_wire(),
            now_ms,
        )
        started = time.perf_counter_ns()  # state.wait, inlined: one coroutine less to resume per push
        try:
            result = await self.server.backend.push_batcher.submit(item)
        except BaseException as e:
            state.waited_ns += time.perf_counter_ns() - started
            if not isinstance(e, Exception):
                raise
            self.server.note_backend_error("PushTelemetry", e)
            return PushTelemetryResponse(error_code=Errors.UNKNOWN_SERVER_ERROR)
        state.waited_ns += time.perf_counter_ns() - started
        if uuid != ZERO_UUID and len(bytes(uuid)) == 16:
            state.instances.add(bytes(uuid))
        if result.error_code and result.HasField("error_message"):
            log.debug("PushTelemetry on %s: %s", state.connection_id, result.error_message)
        return PushTelemetryResponse(error_code=result.error_code)
