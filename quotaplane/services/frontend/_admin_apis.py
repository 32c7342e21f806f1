"""The admin APIs the frontend answers (client quotas, configs, client-metrics resources), translated field by
field to the AdminService (its messages mirror Kafka's) and back, so Kafka's validation and error codes come
from the config controller unchanged; and their authorization (see ``_handlers.py``'s docstring).

``AdminApis`` is the part of ``KafkaApis`` that serves them: it needs ``self.server`` and ``self.config``.

Every name and value must be one Kafka can carry back (``quotaplane.config.validate_string``: at most 32,767
bytes of valid UTF-8). The codec already refuses a longer string on the wire (the connection is closed, as
a Kafka broker closes it on a request it cannot parse), but a string that arrives as malformed UTF-8 is
decoded as Java decodes it, each bad byte a 3-byte U+FFFD, so it can come out longer than it went in. Such
an entry is refused here, before the AdminService, with the code Kafka answers for that field (an entity
name, a quota key or a resource name: INVALID_REQUEST; a config name or value: INVALID_CONFIG), and the
request's other entries still apply, as Kafka answers each entry on its own. The names echoed in a response
and every error message are kept carriable too (``_carriable``), so the response itself always encodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import grpc

from quotaplane.config import shown, string_problem, validate_config_strings, validate_string
from quotaplane.errors import ApiError, Errors
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


def _carriable(text: str | None) -> str | None:
    """``text`` if a Kafka response can carry it, else escaped and cut (a message quoting an odd name)."""
    if text is None or string_problem(text) is None:
        return text
    return shown(text, limit=1024)


def _first_refusal(checks: Iterable[tuple[Any, str]]) -> tuple[int, str] | None:
    """The Kafka (error, message) of the first ``(value, what)`` that is not a carriable Kafka string."""
    for value, what in checks:
        if value is None:
            continue
        try:
            validate_string(value, what)
        except ApiError as e:
            return int(e.error), str(e)
    return None


def _carried(result: tuple[int, str | None]) -> tuple[int, str | None]:
    """An (error, message) pair with the message made carriable."""
    return result[0], _carriable(result[1])


def _config_refusal(configs: Iterable[Any]) -> tuple[int, str] | None:
    """INVALID_CONFIG for the first config whose name or value Kafka could not carry, as the controller says."""
    for config in configs:
        try:
            validate_config_strings(config.name, config.value)
        except ApiError as e:
            return int(e.error), str(e)
    return None


def _entity_checks(entity: Any) -> tuple[tuple[str | None, str], ...]:
    """An AlterClientQuotas entity component's strings and what each is (its name may be null: the default)."""
    return (entity.entity_type, "entity type"), (entity.entity_name, f"{_carriable(entity.entity_type)} name")


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
        """Whether the connection's principal may use the admin APIs: it is in the operator list; with no list,
        only on a listener that authenticates no one (``FrontendConfig.authenticates_clients``: no SASL, no
        client certificates), as on a broker without an authorizer. A listener that authenticates its clients
        (SASL, or mutual TLS) with no list denies every principal, as Kafka's authorizer does without an ACL
        granting the operation: an authenticated identity is not a permission."""
        operators = self.config.operators
        if operators is None:
            return not self.config.authenticates_clients
        return state.principal in operators

    # --- client quotas ---------------------------------------------------------------------------------
    async def alter_client_quotas(self, state: ConnectionState, request: Any, now_ms: int) -> Any:
        entries = request.body.entries
        Entry = AlterClientQuotasResponse.EntryData

        def answer(code: int, message: str | None, results: list[tuple[int, str | None]] | None = None) -> Any:
            out = []
            for i, entry in enumerate(entries):
                error, text = results[i] if results is not None else (code, message)
                entity = [Entry.EntityData(_carriable(e.entity_type), _carriable(e.entity_name)) for e in entry.entity]
                out.append(Entry(error_code=error, error_message=_carriable(text), entity=entity))
            return AlterClientQuotasResponse(entries=out)

        if not self.authorized(state):
            return answer(Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        refusals = [
            _first_refusal(
                [
                    *((x, what) for e in entry.entity for x, what in _entity_checks(e)),
                    *((op.key, "quota key") for op in entry.ops),
                ]
            )
            for entry in entries
        ]
        admitted = [entry for entry, refusal in zip(entries, refusals, strict=True) if refusal is None]
        if not admitted:
            return answer(0, None, refusals)  # type: ignore[arg-type]
        grpc_request = admin_pb.AlterClientQuotasRequest(
            entries=[
                admin_pb.AlterClientQuotasRequest.EntryData(
                    entity=_entity_data(entry.entity),
                    ops=[
                        admin_pb.AlterClientQuotasRequest.OpData(key=op.key, value=None if op.remove else op.value)
                        for op in entry.ops
                    ],
                )
                for entry in admitted
            ],
            validate_only=request.body.validate_only,
        )
        try:
            response = await state.wait(
                self.server.backend.admin_call("AlterClientQuotas", grpc_request, state.principal)
            )
        except Exception as e:
            code, message = _grpc_error(e)
            return answer(0, None, [refusal or (code, message) for refusal in refusals])
        answered = [(r.error_code, r.error_message if r.HasField("error_message") else None) for r in response.entries]
        if len(answered) != len(admitted):
            return answer(Errors.UNKNOWN_SERVER_ERROR, "the admin service answered a different number of entries")
        results = iter(answered)
        return answer(0, None, [refusal or next(results) for refusal in refusals])

    async def describe_client_quotas(self, state: ConnectionState, request: Any, now_ms: int) -> Any:
        if not self.authorized(state):
            return DescribeClientQuotasResponse(
                error_code=Errors.CLUSTER_AUTHORIZATION_FAILED,
                error_message="Cluster authorization failed.",
                entries=None,
            )
        body = request.body
        refusal = _first_refusal(
            (x, what) for c in body.components for x, what in ((c.entity_type, "entity type"), (c.match, "match"))
        )
        if refusal is not None:
            return DescribeClientQuotasResponse(error_code=refusal[0], error_message=refusal[1], entries=None)
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
            return DescribeClientQuotasResponse(error_code=code, error_message=_carriable(message), entries=None)
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
        refusals = [
            _first_refusal([(r.resource_name, "resource name")]) or _config_refusal(r.configs) for r in resources
        ]
        admitted = [r for r, refusal in zip(resources, refusals, strict=True) if refusal is None]

        def respond(answered: list[tuple[int, str | None]]) -> Any:
            results = iter(answered)
            return IncrementalAlterConfigsResponse(
                responses=[
                    Result(*_carried(refusal or next(results)), r.resource_type, _carriable(r.resource_name))
                    for r, refusal in zip(resources, refusals, strict=True)
                ]
            )

        if not admitted:
            return respond([])
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
                for r in admitted
            ],
            validate_only=request.body.validate_only,
        )
        try:
            answers = await self._per_resource(
                state, "IncrementalAlterConfigs", grpc_request, "responses", len(admitted)
            )
        except Exception as e:
            return respond([_grpc_error(e)] * len(admitted))
        return respond([(a.error_code, a.error_message if a.HasField("error_message") else None) for a in answers])

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
        # a name Kafka could not carry back is that resource's error; the others are described
        refusals = [
            _first_refusal(
                [(r.resource_name, "resource name"), *((k, "config name") for k in r.configuration_keys or ())]
            )
            for r in resources
        ]
        admitted = [r for r, refusal in zip(resources, refusals, strict=True) if refusal is None]
        answers: list[Any] = []
        if admitted:
            grpc_request = admin_pb.DescribeConfigsRequest(
                resources=[
                    admin_pb.DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                        configuration_keys=r.configuration_keys or [],
                    )
                    for r in admitted
                ],
                include_documentation=body.include_documentation,
            )
            try:
                answers = await self._per_resource(state, "DescribeConfigs", grpc_request, "results", len(admitted))
            except Exception as e:
                code, message = _grpc_error(e)
                return DescribeConfigsResponse(
                    results=[
                        Result(
                            *(refusal or (code, _carriable(message))), r.resource_type, _carriable(r.resource_name), []
                        )
                        for r, refusal in zip(resources, refusals, strict=True)
                    ]
                )
        described = iter(answers)
        results = []
        for r, refusal in zip(resources, refusals, strict=True):
            if refusal is not None:
                results.append(Result(*refusal, r.resource_type, _carriable(r.resource_name), []))
                continue
            a = next(described)
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
                    _carriable(a.error_message) if a.HasField("error_message") else None,
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
