"""The admin APIs the frontend answers (client quotas, configs, client-metrics resources), translated field by
field to the AdminService (its messages mirror Kafka's) and back, so Kafka's validation and error codes come
from the config controller unchanged; and their authorization (see ``_handlers.py``'s docstring).

``AdminApis`` is the part of ``KafkaApis`` that serves them: it needs ``self.server`` and ``self.config``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import grpc

from quotaplane.errors import Errors
from quotaplane.protocol import (
    AlterClientQuotasResponse,
    DescribeClientQuotasResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
    ListClientMetricsResourcesResponse,
)
from quotaplane.services.admin import KAFKA_ERROR_CODE_TRAILER
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import config_events_pb2 as events_pb

if TYPE_CHECKING:
    from ._connection import ConnectionState
    from .server import FrontendConfig, FrontendServer

__all__ = ["AdminApis"]

#: Kafka's ConfigResource.Type of a topic (its authorization is per topic, not per cluster).
_TOPIC = 2
_BROKER = 4
_CLIENT_METRICS = 16
#: DescribeConfigsResponse.ConfigSource ids.
_DEFAULT_CONFIG = 5
_SOURCES = {_TOPIC: 1, _CLIENT_METRICS: 7}
_DYNAMIC_BROKER_CONFIG = 2
_DYNAMIC_DEFAULT_BROKER_CONFIG = 3


def _grpc_error(exc: BaseException) -> tuple[int, str]:
    """A failed AdminService call as Kafka's (error code, message)."""
    if isinstance(exc, grpc.aio.AioRpcError):
        for key, value in exc.trailing_metadata() or ():
            if key == KAFKA_ERROR_CODE_TRAILER:
                try:
                    return int(value), exc.details() or ""
                except (TypeError, ValueError):
                    break
        return Errors.UNKNOWN_SERVER_ERROR, f"{exc.code().name}: {exc.details() or ''}"
    return Errors.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"


# A None passed to a protobuf constructor leaves that (optional) field unset: Kafka's null.
def _entity_data(entity: Iterable[Any]) -> list[events_pb.EntityData]:
    return [events_pb.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entity]


class AdminApis:
    """Kafka's admin handlers of one frontend; mixed into ``KafkaApis``."""

    server: FrontendServer
    config: FrontendConfig

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
