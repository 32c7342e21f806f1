"""The AdminService servicer: protobuf requests into ``quotaplane.config`` calls, results back into
Kafka-shaped responses, over any :class:`~quotaplane.config.ConfigAdmin`.

Errors follow Kafka's split. A Kafka error about one entity or resource is an entry of the response and the
other entries still apply, exactly as an AdminClient sees it. A request that cannot be processed at all is
a gRPC status with a one-line message (:data:`ADMIN_ERRORS`): INVALID_ARGUMENT for bad input (the Kafka
error code in the ``x-kafka-error-code`` trailer), UNAVAILABLE when the log is closed or has failed or the
controller cannot be reached, OUT_OF_RANGE / FAILED_PRECONDITION when the events asked about were deleted,
INTERNAL otherwise (logged here, with its traceback, not sent).

Before anything else, every string of a request (and the caller's principal) must be one Kafka can carry
back (``_limits``): a request holding one that is not is INVALID_ARGUMENT naming the field, and nothing is
written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from quotaplane.config import (
    ANONYMOUS,
    AlterConfigOp,
    ClientQuotaAlteration,
    ConfigAdmin,
    ConfigResource,
    EventLogClosedError,
    EventLogFailedError,
    HistoryCompactedError,
    OffsetOutOfRangeError,
    describe_client_quotas,
    shown,
    string_problem,
    validate_entity,
)
from quotaplane.errors import ApiError, Errors
from quotaplane.v1 import admin_pb2 as pb
from quotaplane.v1 import admin_pb2_grpc

from .._security import ServerSecurity
from ..grpcutil import ErrorStatus, StatusRule, Trailers, start_server
from ._backend import BackendUnavailableError
from ._convert import entity_pairs, filter_components, history_value, quota_entries, result_fields
from ._health import DEFAULT_HEALTH_POLL_S, log_error_probe, watch_log_health
from ._limits import lenient, request_problem

__all__ = [
    "ADMIN_ERRORS",
    "CLUSTER_ID_TRAILER",
    "KAFKA_ERROR_CODE_TRAILER",
    "PRINCIPAL_BIN_METADATA",
    "PRINCIPAL_METADATA",
    "SERVICE_NAME",
    "AdminServicer",
    "add_admin_service",
    "principal_metadata",
    "serve",
]

#: The call metadata naming the principal a change is made for ("User:alice"): honoured only from a caller
#: whose credential may act for others (a Kafka frontend's token), or when no credential is configured at all.
PRINCIPAL_METADATA = "x-quotaplane-principal"
#: The same claim as the UTF-8 bytes of the principal (gRPC's binary metadata): what carries a principal that
#: plain metadata cannot (HTTP/2 header values are printable ASCII), e.g. a SASL/PLAIN user ``User:jörg``. It
#: wins over ``x-quotaplane-principal`` when a call carries both. Build the pair with :func:`principal_metadata`.
PRINCIPAL_BIN_METADATA = PRINCIPAL_METADATA + "-bin"
#: The trailing metadata of every AdminService answer naming the cluster it comes from (its data directory's id).
CLUSTER_ID_TRAILER = "x-quotaplane-cluster-id"
#: The trailing metadata carrying the Kafka error code of a rejected request.
KAFKA_ERROR_CODE_TRAILER = "x-kafka-error-code"
#: The service's full name, as health checking and reflection know it.
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["AdminService"].full_name


class _BadRequest(Exception):
    """A request the servicer itself refuses (a missing or malformed field): INVALID_ARGUMENT."""


class _NoShards(Exception):
    """AlterShardCount / DescribeShards on an AdminService that manages no shards (over a plain ConfigStore)."""


class _Unauthenticated(Exception):
    """A client certificate no ``ssl.principal.mapping.rules`` rule maps: UNAUTHENTICATED, as Kafka fails
    such a connection's authentication."""


def _kafka_error(error: Errors) -> Trailers:
    return ((KAFKA_ERROR_CODE_TRAILER, str(int(error))),)


#: The AdminService's statuses for an exception that stopped a whole request.
ADMIN_ERRORS = ErrorStatus(
    [
        StatusRule(
            ApiError,
            grpc.StatusCode.INVALID_ARGUMENT,
            message=lambda e: str(e) or e.error.name,
            trailers=lambda e: _kafka_error(e.error),
        ),
        # ValueError: the store's contract for bad audit arguments
        StatusRule(
            (_BadRequest, ValueError),
            grpc.StatusCode.INVALID_ARGUMENT,
            trailers=lambda e: _kafka_error(Errors.INVALID_REQUEST),
        ),
        StatusRule(
            (EventLogClosedError, EventLogFailedError),
            grpc.StatusCode.UNAVAILABLE,
            message=lambda e: f"the config log is unavailable: {e}",
        ),
        StatusRule(BackendUnavailableError, grpc.StatusCode.UNAVAILABLE),
        StatusRule(_Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
        StatusRule(OffsetOutOfRangeError, grpc.StatusCode.OUT_OF_RANGE),
        StatusRule(HistoryCompactedError, grpc.StatusCode.FAILED_PRECONDITION),
        StatusRule(_NoShards, grpc.StatusCode.UNIMPLEMENTED),
        StatusRule(TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
    ],
    log=logging.getLogger("quotaplane.services.admin"),
    server="the server",
)


def principal_metadata(principal: str) -> tuple[str, str | bytes]:
    """The call metadata claiming ``principal``: ``x-quotaplane-principal`` when plain metadata carries it as
    it is (printable ASCII, no surrounding space: what every AdminService understands), else
    ``x-quotaplane-principal-bin`` with its UTF-8 bytes, so any principal Kafka can name arrives intact."""
    if principal.isascii() and principal.isprintable() and principal == principal.strip():
        return PRINCIPAL_METADATA, principal
    return PRINCIPAL_BIN_METADATA, principal.encode()


def _claimed(context: grpc.ServicerContext) -> str | None:
    """The principal the call claims (binary metadata first, then plain), stripped; None when it claims none.
    Binary metadata that is not UTF-8 is INVALID_ARGUMENT: no principal is recorded from a guess."""
    plain = None
    for key, value in context.invocation_metadata() or ():
        if key == PRINCIPAL_BIN_METADATA and isinstance(value, bytes):
            try:
                text = value.decode()
            except UnicodeDecodeError:
                raise _BadRequest(f"{PRINCIPAL_BIN_METADATA} is not UTF-8 ({len(value)} bytes)") from None
            if text.strip():
                return text.strip()
        elif key == PRINCIPAL_METADATA and isinstance(value, str) and value.strip() and plain is None:
            plain = value.strip()
    return plain


def _claims(context: grpc.ServicerContext) -> bool:
    """Whether the call carries a non-empty principal claim (``x-quotaplane-principal[-bin]``)."""
    return _claimed(context) is not None


class ShardAdmin(Protocol):
    """The shards of a cluster, resizable (``quotaplane up``'s ``ShardFleet``): what AlterShardCount and
    DescribeShards ask. ``alter`` returns an outcome with ``previous``, ``count``, ``config_offset``,
    ``elapsed_ms`` and ``hand_overs`` (shard id -> (sensors received, failures, ms))."""

    def alter(self, count: int, *, principal: str, request_id: str = "") -> Any: ...

    def describe(self) -> tuple[int, int, list[dict[str, Any]]]: ...


# --- the servicer ----------------------------------------------------------------------------------------
class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    """AdminService over a :class:`~quotaplane.config.ConfigAdmin`; ``clock`` gives ``now_ms`` (the server's
    clock, as the design's services stamp what they record); ``security`` derives the principal recorded
    with a change from the caller's credential (:meth:`_recorded_principal`)."""

    def __init__(
        self,
        backend: ConfigAdmin,
        *,
        clock: Callable[[], int] | None = None,
        security: ServerSecurity | None = None,
        shards: ShardAdmin | None = None,
    ) -> None:
        self._backend = backend
        self._shards = shards
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._security = security

    def _recorded_principal(self, context: grpc.ServicerContext) -> str:
        """The principal recorded with a change: the one the caller's credential authenticates (a token's
        name, a client certificate's mapped subject), never a claim of the caller's own. Only a credential
        that may act for others (a Kafka frontend's token, forwarding a SASL-authenticated client's request)
        has its ``x-quotaplane-principal`` recorded instead. With no credential presented and none needed
        (an AdminService with no operator authentication and no mutual TLS: anyone may do anything) the
        claim is all there is, and is recorded as given (default ``User:ANONYMOUS``)."""
        identity = None
        if self._security is not None:
            try:
                identity = self._security.identity(context.invocation_metadata() or (), context.auth_context() or {})
            except ValueError as e:
                raise _Unauthenticated(str(e)) from None
        if identity is None:
            return self._principal(context)
        if identity.on_behalf_of:
            return self._principal(context) if _claims(context) else identity.principal
        problem = string_problem(identity.principal)
        if problem is not None:
            raise _Unauthenticated(f"the authenticated principal '{shown(identity.principal)}': {problem}")
        return identity.principal

    @staticmethod
    def _principal(context: grpc.ServicerContext) -> str:
        """The principal the caller claims (``x-quotaplane-principal[-bin]``); INVALID_ARGUMENT if it is not
        one Kafka could carry (it is logged)."""
        principal = _claimed(context)
        if principal is None:
            return ANONYMOUS
        problem = string_problem(principal)
        if problem is not None:
            raise _BadRequest(f"{PRINCIPAL_METADATA} '{shown(principal)}': {problem}")
        return principal

    @staticmethod
    def _admit(request: object) -> None:
        """Refuse a request holding a string Kafka could not carry back (INVALID_ARGUMENT naming it)."""
        problem = request_problem(request)  # type: ignore[arg-type]
        if problem is not None:
            raise _BadRequest(problem)

    @ADMIN_ERRORS.unary
    def AlterClientQuotas(
        self, request: pb.AlterClientQuotasRequest, context: grpc.ServicerContext
    ) -> pb.AlterClientQuotasResponse:
        self._admit(request)
        alterations = [
            ClientQuotaAlteration(
                entity_pairs(entry.entity),
                [(op.key, op.value if op.HasField("value") else None) for op in entry.ops],
            )
            for entry in request.entries
        ]
        results = self._backend.alter_client_quotas(
            alterations,
            validate_only=request.validate_only,
            now_ms=self._clock(),
            principal=self._recorded_principal(context),
            request_id=request.request_id,
        )
        return pb.AlterClientQuotasResponse(
            entries=[
                pb.AlterClientQuotasResponse.EntryData(entity=entry.entity, **result_fields(result))
                for entry, result in zip(request.entries, results, strict=True)
            ]
        )

    @ADMIN_ERRORS.unary
    def DescribeClientQuotas(
        self, request: pb.DescribeClientQuotasRequest, context: grpc.ServicerContext
    ) -> pb.DescribeClientQuotasResponse:
        self._admit(request)
        found = self._backend.describe_client_quotas(filter_components(request.components), strict=request.strict)
        return pb.DescribeClientQuotasResponse(entries=quota_entries(found))

    @ADMIN_ERRORS.unary
    def IncrementalAlterConfigs(
        self, request: pb.IncrementalAlterConfigsRequest, context: grpc.ServicerContext
    ) -> pb.IncrementalAlterConfigsResponse:
        self._admit(request)
        resources = []
        for r in request.resources:
            # codes go to the backend as they are (OpType is an IntEnum): an unknown operation fails its
            # resource, not the request, as in Kafka
            ops = [
                AlterConfigOp(c.name, c.config_operation, c.value if c.HasField("value") else None)  # type: ignore[arg-type]
                for c in r.configs
            ]
            resources.append((ConfigResource(r.resource_type, r.resource_name), ops))  # type: ignore[arg-type]
        results = self._backend.incremental_alter_configs(
            resources,
            validate_only=request.validate_only,
            now_ms=self._clock(),
            principal=self._recorded_principal(context),
            request_id=request.request_id,
        )
        response_type = pb.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
        return pb.IncrementalAlterConfigsResponse(
            responses=[
                response_type(resource_type=r.resource_type, resource_name=r.resource_name, **result_fields(result))
                for r, result in zip(request.resources, results, strict=True)
            ]
        )

    @ADMIN_ERRORS.unary
    def DescribeConfigs(
        self, request: pb.DescribeConfigsRequest, context: grpc.ServicerContext
    ) -> pb.DescribeConfigsResponse:
        self._admit(request)
        result_type = pb.DescribeConfigsResponse.DescribeConfigsResult
        entry_type = pb.DescribeConfigsResponse.DescribeConfigsResourceResult
        results = []
        for r in request.resources:
            result = result_type(resource_type=r.resource_type, resource_name=r.resource_name)
            try:
                entries = self._backend.describe_configs(ConfigResource(r.resource_type, r.resource_name))  # type: ignore[arg-type]
            except ApiError as e:  # as Kafka: a bad resource is that resource's error
                result.error_code = int(e.error)
                result.error_message = str(e) or e.error.name
                results.append(result)
                continue
            wanted = set(r.configuration_keys)
            for entry in entries:
                if wanted and entry.name not in wanted:
                    continue
                config = entry_type(
                    name=entry.name, read_only=entry.read_only, is_default=entry.is_default, config_type=int(entry.type)
                )
                if entry.value is not None:
                    config.value = entry.value
                if request.include_documentation:
                    config.documentation = entry.documentation
                result.configs.append(config)
            results.append(result)
        return pb.DescribeConfigsResponse(results=results)

    @ADMIN_ERRORS.unary
    def ListClientMetricsResources(
        self, request: pb.ListClientMetricsResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListClientMetricsResourcesResponse:
        self._admit(request)
        resource_type = pb.ListClientMetricsResourcesResponse.ClientMetricsResource
        return pb.ListClientMetricsResourcesResponse(
            client_metrics_resources=[
                resource_type(name=name) for name in sorted(self._backend.list_client_metrics_resources())
            ]
        )

    @ADMIN_ERRORS.unary
    def GetLogOffsets(
        self, request: pb.GetLogOffsetsRequest, context: grpc.ServicerContext
    ) -> pb.GetLogOffsetsResponse:
        self._admit(request)
        return pb.GetLogOffsetsResponse(start_offset=self._backend.start_offset, end_offset=self._backend.end_offset)

    @ADMIN_ERRORS.unary
    def EntityHistory(
        self, request: pb.EntityHistoryRequest, context: grpc.ServicerContext
    ) -> pb.EntityHistoryResponse:
        self._admit(request)
        kind = request.WhichOneof("target")
        key = request.key if request.HasField("key") else None
        if kind == "entity":
            entity = dict(validate_entity(entity_pairs(request.entity.entity)).key)
            entries = self._backend.history(entity=entity, key=key)
        elif kind == "client_metrics":
            if not request.client_metrics:
                raise _BadRequest("Client metrics resource name must not be empty")
            entries = self._backend.history(client_metrics=request.client_metrics, key=key)
        elif kind == "resource":
            resource_type = request.resource.resource_type
            if resource_type not in (pb.RESOURCE_TYPE_BROKER, pb.RESOURCE_TYPE_TOPIC):
                raise _BadRequest(
                    f"Unsupported resource type {resource_type} for history: BROKER (4) or TOPIC (2); "
                    "client-metrics resources are named by client_metrics"
                )
            resource = ConfigResource(resource_type, request.resource.resource_name)  # type: ignore[arg-type]
            entries = self._backend.history(resource=resource, key=key)
        else:
            raise _BadRequest("EntityHistory needs one of entity, client_metrics or resource")
        entry_type = pb.EntityHistoryResponse.HistoryEntry
        return pb.EntityHistoryResponse(
            entries=[
                entry_type(
                    offset=e.offset,
                    commit_time_ms=e.commit_time_ms,
                    principal=e.principal,
                    request_id=e.request_id,
                    key=e.key,
                    old_value=history_value(e.old, kind, e.key),
                    new_value=history_value(e.new, kind, e.key),
                )
                for e in entries
            ]
        )

    @ADMIN_ERRORS.unary
    def DescribeClientQuotasAt(
        self, request: pb.DescribeClientQuotasAtRequest, context: grpc.ServicerContext
    ) -> pb.DescribeClientQuotasAtResponse:
        self._admit(request)
        if request.time_ms < 0:
            raise _BadRequest(f"time_ms must be >= 0 (ms since the epoch), got {request.time_ms}")
        components = filter_components(request.components)
        image = self._backend.image_at_time(request.time_ms)
        found = describe_client_quotas(image, components, strict=request.strict)
        return pb.DescribeClientQuotasAtResponse(
            end_offset=image.end_offset, last_commit_time_ms=image.last_commit_time_ms, entries=quota_entries(found)
        )

    # --- shards ------------------------------------------------------------------------------------------
    def _fleet(self) -> ShardAdmin:
        if self._shards is None:
            raise _NoShards("this AdminService manages no shards (it serves a config store without a cluster)")
        return self._shards

    @ADMIN_ERRORS.unary
    def AlterShardCount(
        self, request: pb.AlterShardCountRequest, context: grpc.ServicerContext
    ) -> pb.AlterShardCountResponse:
        self._admit(request)
        fleet = self._fleet()
        outcome = fleet.alter(
            request.shard_count, principal=self._recorded_principal(context), request_id=request.request_id
        )
        return pb.AlterShardCountResponse(
            previous_shard_count=outcome.previous,
            shard_count=outcome.count,
            config_offset=outcome.config_offset,
            elapsed_ms=outcome.elapsed_ms,
            hand_overs=[
                pb.ShardHandOver(shard_id=shard, sensors_received=received, failures=failures, elapsed_ms=ms)
                for shard, (received, failures, ms) in sorted(outcome.hand_overs.items(), key=lambda kv: int(kv[0]))
            ],
        )

    @ADMIN_ERRORS.unary
    def DescribeShards(
        self, request: pb.DescribeShardsRequest, context: grpc.ServicerContext
    ) -> pb.DescribeShardsResponse:
        count, offset, shards = self._fleet().describe()
        return pb.DescribeShardsResponse(
            shard_count=count,
            config_offset=offset,
            shards=[pb.DescribeShardsResponse.Shard(**shard) for shard in shards],
        )


def add_admin_service(
    server: grpc.Server,
    backend: ConfigAdmin,
    *,
    clock: Callable[[], int] | None = None,
    security: ServerSecurity | None = None,
    shards: ShardAdmin | None = None,
) -> list[str]:
    """Register the AdminService on ``server`` over ``backend``; the full service names.

    As the generated ``add_AdminServiceServicer_to_server``, but each request is parsed by ``_limits.lenient``:
    a string field that is not valid UTF-8 reaches the servicer as an ``Undecodable`` request, refused with
    INVALID_ARGUMENT naming the field, instead of gRPC's bare INTERNAL.
    """
    servicer = AdminServicer(backend, clock=clock, security=security, shards=shards)
    handlers = {}
    for method in pb.DESCRIPTOR.services_by_name["AdminService"].methods:
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method.name),
            request_deserializer=lenient(getattr(pb, method.input_type.name)),
            response_serializer=getattr(pb, method.output_type.name).SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
    return [SERVICE_NAME]


def serve(
    store: ConfigAdmin,
    address: str = "127.0.0.1:0",
    *,
    max_workers: int = 8,
    clock: Callable[[], int] | None = None,
    security: ServerSecurity | None = None,
    cluster_id: str | None = None,
    health_poll_s: float = DEFAULT_HEALTH_POLL_S,
    shards: ShardAdmin | None = None,
) -> tuple[grpc.Server, int]:
    """Start a gRPC server with the AdminService, health checking and reflection; return it and its port.

    Health reports SERVING for the server ("") and for ``quotaplane.v1.AdminService``, except that the
    AdminService's is NOT_SERVING while the store's log has failed (a disk fault: the controller's
    ``health()``, or a ``ConfigStore``'s ``failure``), polled every ``health_poll_s`` (``_health.py``). The
    caller stops the server (``server.stop(grace)``; the poll ends with it) and then closes the store.

    ``security`` (None: plaintext, every RPC open) puts TLS or mutual TLS on the listener and, when it has
    operator credentials, requires one on every AdminService RPC; health and reflection stay open.
    ``SO_REUSEPORT`` is off, as on every quotaplane server (``grpcutil.start_server``). ``security`` also
    decides the principal recorded with a change (``AdminServicer._recorded_principal``).

    ``cluster_id`` (``quotaplane up`` passes its data directory's) rides in the trailing metadata of every
    AdminService answer, refusals included (``x-quotaplane-cluster-id``), so a client that expects one
    cluster notices when it reached another.
    """
    running = start_server(
        [lambda server: add_admin_service(server, store, clock=clock, security=security, shards=shards)],
        address,
        max_workers=max_workers,
        thread_name_prefix="admin-grpc",
        security=security,
        operator_services=[SERVICE_NAME],
        service_trailers={SERVICE_NAME: ((CLUSTER_ID_TRAILER, cluster_id),)} if cluster_id else None,
    )
    probe = log_error_probe(store)
    if probe is not None:
        watch_log_health(running.server, running.health, SERVICE_NAME, probe, health_poll_s)
    return running.server, running.port
