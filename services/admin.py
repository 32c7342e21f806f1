"""The gRPC AdminService: Kafka's admin APIs and the config log's audits, over a config backend.

The servicer only translates: protobuf requests into the ``quotaplane.config`` request types, and
results back into Kafka-shaped responses. Validation and the write path belong to the backend (a
``ConfigStore`` in-process, or the ConfigController actor through :class:`ControllerBackend`), so every
admin door (this service, the CLI through it, the Kafka-wire frontend) gives the same answers.

Errors follow Kafka's split. A Kafka error about one entity or resource is an entry of the response and
the other entries still apply, exactly as an AdminClient sees it. A request that cannot be processed at
all is a gRPC status with a one-line message, never a traceback: INVALID_ARGUMENT for bad input (an
invalid describe filter, a missing field, a bad time; the Kafka error code rides in the
``x-kafka-error-code`` trailer when there is one), UNAVAILABLE when the log is closed or has failed,
OUT_OF_RANGE / FAILED_PRECONDITION when the events asked about were deleted, INTERNAL otherwise (logged
here, with its traceback, not sent).

The caller's principal is the ``x-quotaplane-principal`` call metadata (default ``User:ANONYMOUS``): it
is recorded in the log with every change it makes, so ``EntityHistory`` says who did what. Who may call at
all is decided before the servicer runs (``services/_security.py``, the ``security`` argument of
:func:`serve`): TLS or mutual TLS on the listener, and, once operator tokens or certificate subjects are
configured, an operator credential on every AdminService RPC (UNAUTHENTICATED / PERMISSION_DENIED
otherwise, nothing changed). The recorded principal is still the caller's own claim, not derived from that
credential.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent import futures
from typing import Any, Protocol, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from quotaplane.v1 import admin_pb2 as pb
from quotaplane.v1 import admin_pb2_grpc
from quotaplane.v1 import config_events_pb2 as events_pb

from quotaplane.config import (
    ANONYMOUS,
    AlterConfigOp,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ConfigEntry,
    ConfigImage,
    ConfigResource,
    HistoryCompactedError,
    HistoryEntry,
    MatchType,
    Result,
    client_metrics_event,
    describe_client_quotas,
    entity_data,
    validate_entity,
)
from quotaplane.config._log import EventLogClosedError, EventLogFailedError, OffsetOutOfRangeError
from quotaplane.errors import ApiError, Errors

from ._security import ServerSecurity, bind_port

__all__ = [
    "KAFKA_ERROR_CODE_TRAILER",
    "PRINCIPAL_METADATA",
    "SERVICE_NAME",
    "AdminBackend",
    "AdminServicer",
    "BackendUnavailableError",
    "ControllerBackend",
    "serve",
]

log = logging.getLogger(__name__)

#: The call metadata naming the caller's principal ("User:alice").
PRINCIPAL_METADATA = "x-quotaplane-principal"
#: The trailing metadata carrying the Kafka error code of a rejected request.
KAFKA_ERROR_CODE_TRAILER = "x-kafka-error-code"
#: The service's full name, as health checking and reflection know it.
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["AdminService"].full_name


class _LogOffsets(Protocol):
    @property
    def start_offset(self) -> int: ...


class AdminBackend(Protocol):
    """What the servicer needs of the config store: ``ConfigStore``'s own methods, so a store serves as is
    and the ConfigController actor's handle only has to offer the same calls."""

    @property
    def log(self) -> _LogOffsets: ...

    @property
    def end_offset(self) -> int: ...

    def alter_client_quotas(
        self,
        alterations: Sequence[ClientQuotaAlteration],
        *,
        validate_only: bool = ...,
        now_ms: int,
        principal: str = ...,
        request_id: str = ...,
    ) -> list[Result]: ...

    def describe_client_quotas(
        self, components: Iterable[ClientQuotaFilterComponent], *, strict: bool = ...
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]: ...

    def incremental_alter_configs(
        self,
        resources: Sequence[tuple[ConfigResource, Sequence[AlterConfigOp]]],
        *,
        validate_only: bool = ...,
        now_ms: int,
        principal: str = ...,
        request_id: str = ...,
    ) -> list[Result]: ...

    def describe_configs(self, resource: ConfigResource) -> list[ConfigEntry]: ...

    def list_client_metrics_resources(self) -> list[str]: ...

    def history(
        self,
        *,
        entity: Mapping[str, str | None] | None = ...,
        client_metrics: str | None = ...,
        resource: ConfigResource | None = ...,
        key: str | None = ...,
    ) -> list[HistoryEntry]: ...

    def image_at_time(self, time_ms: int) -> ConfigImage: ...


class BackendUnavailableError(Exception):
    """The backend cannot be reached (the controller actor is dead, restarting or too slow): UNAVAILABLE, so
    a client retries instead of reading it as a bug of the server."""


class _ControllerLogOffsets:
    """``backend.log.start_offset`` for the servicer, read from the controller on each access."""

    def __init__(self, backend: ControllerBackend) -> None:
        self._backend = backend

    @property
    def start_offset(self) -> int:
        return self._backend.call("start_offset")


class ControllerBackend:
    """An :class:`AdminBackend` over a ConfigController actor handle: each call is a ``ray.get`` on it.

    The controller raises the store's own exceptions (ApiError, ValueError, the log's errors); Ray wraps them
    in ``RayTaskError``, so they are unwrapped here and the servicer maps them exactly as it maps a local
    store's. A dead or unresponsive controller becomes :class:`BackendUnavailableError` (UNAVAILABLE).
    ``now_ms`` is passed through from the servicer, i.e. the gRPC server's clock stamps the change.
    Ray is imported lazily so that importing this module (the CLI does) stays cheap.
    """

    def __init__(self, controller: Any, *, timeout_s: float = 30.0) -> None:
        self._controller = controller
        self._timeout_s = timeout_s
        self._log = _ControllerLogOffsets(self)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``ray.get(controller.<method>.remote(...))`` with the actor's exception re-raised as itself."""
        from quotaplane.actors import ray_get
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray_get(getattr(self._controller, method).remote(*args, **kwargs), self._timeout_s)
        except RayActorError as e:
            raise BackendUnavailableError(f"the config controller is unavailable: {str(e).splitlines()[0]}") from None
        except GetTimeoutError:
            raise BackendUnavailableError(
                f"the config controller did not answer {method} within {self._timeout_s:g} s"
            ) from None

    @property
    def log(self) -> _ControllerLogOffsets:
        return self._log

    @property
    def end_offset(self) -> int:
        return self.call("end_offset")

    def alter_client_quotas(
        self,
        alterations: Sequence[ClientQuotaAlteration],
        *,
        validate_only: bool = False,
        now_ms: int,
        principal: str = ANONYMOUS,
        request_id: str = "",
    ) -> list[Result]:
        return self.call(
            "alter_client_quotas",
            list(alterations),
            validate_only=validate_only,
            now_ms=now_ms,
            principal=principal,
            request_id=request_id,
        )

    def describe_client_quotas(
        self, components: Iterable[ClientQuotaFilterComponent], *, strict: bool = False
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        return self.call("describe_client_quotas", list(components), strict=strict)

    def incremental_alter_configs(
        self,
        resources: Sequence[tuple[ConfigResource, Sequence[AlterConfigOp]]],
        *,
        validate_only: bool = False,
        now_ms: int,
        principal: str = ANONYMOUS,
        request_id: str = "",
    ) -> list[Result]:
        return self.call(
            "incremental_alter_configs",
            [(resource, list(ops)) for resource, ops in resources],
            validate_only=validate_only,
            now_ms=now_ms,
            principal=principal,
            request_id=request_id,
        )

    def describe_configs(self, resource: ConfigResource) -> list[ConfigEntry]:
        return self.call("describe_configs", resource)

    def list_client_metrics_resources(self) -> list[str]:
        return self.call("list_client_metrics_resources")

    def history(
        self,
        *,
        entity: Mapping[str, str | None] | None = None,
        client_metrics: str | None = None,
        resource: ConfigResource | None = None,
        key: str | None = None,
    ) -> list[HistoryEntry]:
        return self.call(
            "history",
            entity=dict(entity) if entity is not None else None,
            client_metrics=client_metrics,
            resource=resource,
            key=key,
        )

    def image_at_time(self, time_ms: int) -> ConfigImage:
        """The controller sends the image as snapshot bytes (``ImageSnapshot``), rebuilt here."""
        return self.call("snapshot", time_ms=time_ms).to_image()


# --- errors ----------------------------------------------------------------------------------------------
class _BadRequest(Exception):
    """A request the servicer itself refuses (a missing or malformed field): INVALID_ARGUMENT."""


def _status_of(exc: BaseException) -> tuple[grpc.StatusCode, str, Errors | None]:
    """The gRPC status, message and Kafka error for an exception that stopped a whole request."""
    if isinstance(exc, ApiError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc) or exc.error.name, exc.error
    if isinstance(exc, _BadRequest | ValueError):  # ValueError: the store's contract for bad audit arguments
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc), Errors.INVALID_REQUEST
    if isinstance(exc, EventLogClosedError | EventLogFailedError):
        return grpc.StatusCode.UNAVAILABLE, f"the config log is unavailable: {exc}", None
    if isinstance(exc, BackendUnavailableError):
        return grpc.StatusCode.UNAVAILABLE, str(exc), None
    if isinstance(exc, OffsetOutOfRangeError):
        return grpc.StatusCode.OUT_OF_RANGE, str(exc), None
    if isinstance(exc, HistoryCompactedError):
        return grpc.StatusCode.FAILED_PRECONDITION, str(exc), None
    return grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); see the server's log", None


_F = TypeVar("_F", bound=Callable[..., Any])


def _rpc(method: _F) -> _F:
    """Turn an exception that escapes a handler into a gRPC status with a message (no traceback leaves)."""

    @functools.wraps(method)
    def handler(self: AdminServicer, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as exc:
            code, message, error = _status_of(exc)
            if code is grpc.StatusCode.INTERNAL:
                log.exception("AdminService.%s failed", method.__name__)
            if error is not None:
                context.set_trailing_metadata(((KAFKA_ERROR_CODE_TRAILER, str(int(error))),))
            context.abort(code, message.splitlines()[0] if message else code.name)

    return handler  # type: ignore[return-value]


# --- conversions -----------------------------------------------------------------------------------------
def _entity_pairs(entity: Iterable[events_pb.EntityData]) -> list[tuple[str, str | None]]:
    return [(e.entity_type, e.entity_name if e.HasField("entity_name") else None) for e in entity]


def _components(components: Iterable[pb.DescribeClientQuotasRequest.ComponentData]) -> list[ClientQuotaFilterComponent]:
    out = []
    for c in components:
        # an unknown code goes through as is: the describe refuses it with Kafka's message
        match_type = MatchType(c.match_type) if c.match_type in tuple(MatchType) else c.match_type
        out.append(ClientQuotaFilterComponent(c.entity_type, match_type, c.match if c.HasField("match") else None))
    return out


def _quota_entries(
    found: Iterable[tuple[Mapping[str, str | None], Mapping[str, float]]],
) -> list[pb.DescribeClientQuotasResponse.EntryData]:
    entry_type = pb.DescribeClientQuotasResponse.EntryData
    value_type = pb.DescribeClientQuotasResponse.ValueData
    return [
        entry_type(
            entity=entity_data(sorted(entity.items())),
            values=[value_type(key=k, value=v) for k, v in sorted(quotas.items())],
        )
        for entity, quotas in found
    ]


def _result_fields(result: Result) -> dict[str, Any]:
    fields: dict[str, Any] = {"error_code": int(result.error)}
    if not result.ok:
        fields["error_message"] = result.message or result.error.name
    return fields


def _history_value(value: object, kind: str, name: str) -> pb.HistoryValue:
    if value is None:
        return pb.HistoryValue()
    if kind == "entity":
        return pb.HistoryValue(quota_value=float(value))  # type: ignore[arg-type]
    if kind == "client_metrics":
        assert isinstance(value, Mapping)
        return pb.HistoryValue(client_metrics=client_metrics_event(name, value).client_metrics)
    return pb.HistoryValue(config_value=str(value))


# --- the servicer ----------------------------------------------------------------------------------------
class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    """AdminService over an :class:`AdminBackend`; ``clock`` gives ``now_ms`` (the server's clock, as the
    design's services stamp what they record)."""

    def __init__(self, backend: AdminBackend, *, clock: Callable[[], int] | None = None) -> None:
        self._backend = backend
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)

    @staticmethod
    def _principal(context: grpc.ServicerContext) -> str:
        for key, value in context.invocation_metadata() or ():
            if key == PRINCIPAL_METADATA and isinstance(value, str) and value.strip():
                return value.strip()
        return ANONYMOUS

    @_rpc
    def AlterClientQuotas(
        self, request: pb.AlterClientQuotasRequest, context: grpc.ServicerContext
    ) -> pb.AlterClientQuotasResponse:
        alterations = [
            ClientQuotaAlteration(
                _entity_pairs(entry.entity),
                [(op.key, op.value if op.HasField("value") else None) for op in entry.ops],
            )
            for entry in request.entries
        ]
        results = self._backend.alter_client_quotas(
            alterations,
            validate_only=request.validate_only,
            now_ms=self._clock(),
            principal=self._principal(context),
            request_id=request.request_id,
        )
        return pb.AlterClientQuotasResponse(
            entries=[
                pb.AlterClientQuotasResponse.EntryData(entity=entry.entity, **_result_fields(result))
                for entry, result in zip(request.entries, results, strict=True)
            ]
        )

    @_rpc
    def DescribeClientQuotas(
        self, request: pb.DescribeClientQuotasRequest, context: grpc.ServicerContext
    ) -> pb.DescribeClientQuotasResponse:
        found = self._backend.describe_client_quotas(_components(request.components), strict=request.strict)
        return pb.DescribeClientQuotasResponse(entries=_quota_entries(found))

    @_rpc
    def IncrementalAlterConfigs(
        self, request: pb.IncrementalAlterConfigsRequest, context: grpc.ServicerContext
    ) -> pb.IncrementalAlterConfigsResponse:
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
            principal=self._principal(context),
            request_id=request.request_id,
        )
        response_type = pb.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
        return pb.IncrementalAlterConfigsResponse(
            responses=[
                response_type(resource_type=r.resource_type, resource_name=r.resource_name, **_result_fields(result))
                for r, result in zip(request.resources, results, strict=True)
            ]
        )

    @_rpc
    def DescribeConfigs(
        self, request: pb.DescribeConfigsRequest, context: grpc.ServicerContext
    ) -> pb.DescribeConfigsResponse:
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

    @_rpc
    def ListClientMetricsResources(
        self, request: pb.ListClientMetricsResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListClientMetricsResourcesResponse:
        resource_type = pb.ListClientMetricsResourcesResponse.ClientMetricsResource
        return pb.ListClientMetricsResourcesResponse(
            client_metrics_resources=[
                resource_type(name=name) for name in sorted(self._backend.list_client_metrics_resources())
            ]
        )

    @_rpc
    def GetLogOffsets(
        self, request: pb.GetLogOffsetsRequest, context: grpc.ServicerContext
    ) -> pb.GetLogOffsetsResponse:
        return pb.GetLogOffsetsResponse(
            start_offset=self._backend.log.start_offset, end_offset=self._backend.end_offset
        )

    @_rpc
    def EntityHistory(
        self, request: pb.EntityHistoryRequest, context: grpc.ServicerContext
    ) -> pb.EntityHistoryResponse:
        kind = request.WhichOneof("target")
        key = request.key if request.HasField("key") else None
        if kind == "entity":
            entity = dict(validate_entity(_entity_pairs(request.entity.entity)).key)
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
                    old_value=_history_value(e.old, kind, e.key),
                    new_value=_history_value(e.new, kind, e.key),
                )
                for e in entries
            ]
        )

    @_rpc
    def DescribeClientQuotasAt(
        self, request: pb.DescribeClientQuotasAtRequest, context: grpc.ServicerContext
    ) -> pb.DescribeClientQuotasAtResponse:
        if request.time_ms < 0:
            raise _BadRequest(f"time_ms must be >= 0 (ms since the epoch), got {request.time_ms}")
        components = _components(request.components)
        image = self._backend.image_at_time(request.time_ms)
        found = describe_client_quotas(image, components, strict=request.strict)
        return pb.DescribeClientQuotasAtResponse(
            end_offset=image.end_offset, last_commit_time_ms=image.last_commit_time_ms, entries=_quota_entries(found)
        )


def serve(
    store: AdminBackend,
    address: str = "127.0.0.1:0",
    *,
    max_workers: int = 8,
    clock: Callable[[], int] | None = None,
    security: ServerSecurity | None = None,
) -> tuple[grpc.Server, int]:
    """Start a gRPC server with the AdminService, health checking and reflection; return it and its port.

    Health reports SERVING for the server ("") and for ``quotaplane.v1.AdminService``; the caller stops the
    server (``server.stop(grace)``) and then closes the store.

    ``security`` (None: plaintext, every RPC open) puts TLS or mutual TLS on the listener and, when it has
    operator credentials, requires one on every AdminService RPC; health and reflection stay open.

    ``SO_REUSEPORT`` is off (gRPC turns it on by default on Linux): with it, a second server on the same
    port would bind without error and share the connections with the first.
    """
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="admin-grpc"),
        options=[("grpc.so_reuseport", 0)],
        interceptors=[security.operator_interceptor(SERVICE_NAME)] if security and security.operator_auth else None,
    )
    admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(store, clock=clock), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
    )
    for service in ("", SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    port = bind_port(server, address, security)
    server.start()
    return server, port
