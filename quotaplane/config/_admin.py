"""The admin operations, as Kafka's controller and brokers answer them, computed against an image.

Each ``plan_*`` function is pure: it validates a request against an image (an :class:`ImageReader`: the
``ConfigStore`` passes its working state, the committed image with the changes still in flight on top) and
returns the records to append and the per-entity (or per-resource) results, without changing anything.
The ``ConfigStore`` submits the records, and answers once they are durable. Describe calls read the
committed image.

Kafka's semantics carried over:

- ``AlterClientQuotas`` (``ClientQuotaControlManager.alterClientQuotas``): each entity succeeds or fails
  on its own, and a failing entity contributes no record (nothing of it is half-applied); a duplicate
  key or entity is INVALID_REQUEST; a value equal to the current one, or the removal of a key that is
  not set, produces no record.
- ``DescribeClientQuotas`` (``ClientQuotasImage.describe``): filter components EXACT / DEFAULT /
  SPECIFIED ("any name, default included"), ``strict`` requires the entity to have no other types.
- ``IncrementalAlterConfigs`` (``ConfigurationControlManager``): SET / DELETE / APPEND / SUBTRACT, APPEND
  and SUBTRACT only on LIST configs; every op but DELETE needs a value (INVALID_REQUEST); a resource
  named twice fails both times and neither is applied; the resulting configs of a resource are
  validated whole; BROKER records are emitted for every key a request names, even when the value does
  not change (KAFKA-14136, so nodes reload).
- ``DescribeConfigs`` for CLIENT_METRICS lists the configs as set (none for an unknown name).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

from ..errors import ApiError, Errors, InvalidConfigurationError, InvalidRequestError, UnsupportedVersionError
from ..telemetry import CONFIG_NAMES as CLIENT_METRICS_CONFIG_NAMES
from ..telemetry import INTERVAL_MS_CONFIG, MATCH_CONFIG, METRICS_CONFIG
from ..telemetry import validate as validate_client_metrics
from ..v1 import config_events_pb2 as pb
from ._client_quotas import (
    CLIENT_ID,
    IP,
    USER,
    EntityKey,
    Resolver,
    entity_map,
    format_entity,
    validate_entity,
    validate_quota_key_value,
)
from ._dynamic_configs import (
    BROKER_CONFIGS,
    SHARD_COUNT_CONFIG,
    TOPIC_CONFIGS,
    ConfigResourceType,
    ConfigType,
    broker_config_spec,
    validate_broker_name,
    validate_config_strings,
    validate_config_value,
    validate_resource_name,
    validate_topic_name,
)
from ._image import ConfigImage
from ._records import client_metrics_event, client_quota_event, config_event, record_entity
from ._working_image import ImageReader

__all__ = [
    "AlterConfigOp",
    "ClientQuotaAlteration",
    "ClientQuotaFilterComponent",
    "ConfigEntry",
    "ConfigResource",
    "MatchType",
    "OpType",
    "Plan",
    "Result",
    "describe_client_quotas",
    "describe_configs",
    "plan_alter_client_quotas",
    "plan_incremental_alter_configs",
]


# --- request and result types --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """One entity's changes: ``ops`` are (key, value), value None removes the key (Kafka's ``Op``)."""

    entity: Mapping[str, str | None] | Sequence[tuple[str, str | None]]
    ops: Sequence[tuple[str, float | None]]


class MatchType(IntEnum):
    """``DescribeClientQuotasRequest`` match types (Kafka's codes)."""

    EXACT = 0
    DEFAULT = 1
    SPECIFIED = 2  # "any": the entity has this type, with any name (the default included)


@dataclass(frozen=True, slots=True)
class ClientQuotaFilterComponent:
    """A describe filter component, as Kafka's ``ClientQuotaFilterComponent``."""

    entity_type: str
    match_type: MatchType
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, MatchType.EXACT, name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, MatchType.DEFAULT)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, MatchType.SPECIFIED)


class OpType(IntEnum):
    """``AlterConfigOp.OpType`` (Kafka's codes)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    name: str
    op: OpType
    value: str | None = None


@dataclass(frozen=True, slots=True)
class ConfigResource:
    type: ConfigResourceType
    name: str


@dataclass(frozen=True, slots=True)
class Result:
    """The outcome for one entity or resource: ``error`` NONE, or the Kafka error and its message."""

    error: Errors = Errors.NONE
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is Errors.NONE

    @classmethod
    def of(cls, exc: ApiError) -> Result:
        return cls(exc.error, str(exc))


OK: Final = Result()


@dataclass(slots=True)
class Plan:
    """What a request would do: the records to append (in order) and one result per entity/resource."""

    records: list[pb.Event] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config as DescribeConfigs reports it."""

    name: str
    value: str | None
    is_default: bool
    read_only: bool
    type: ConfigType
    documentation: str = ""


# --- client quotas -------------------------------------------------------------------------------
def plan_alter_client_quotas(
    image: ImageReader, alterations: Sequence[ClientQuotaAlteration], *, resolver: Resolver | None = None
) -> Plan:
    """Kafka's ``alterClientQuotas``: one result per alteration, records for the valid ones."""
    plan = Plan()
    seen: dict[EntityKey, int] = {}
    for alteration in alterations:
        index = len(plan.results)
        try:
            checked = validate_entity(alteration.entity, resolver)
        except ApiError as e:
            plan.results.append(Result.of(e))
            continue
        if checked.key in seen:
            # Kafka keys results by entity: a repeated entity fails, and so does its first occurrence.
            message = f"Ignoring duplicate entity {format_entity(checked.key)}"
            plan.results[seen[checked.key]] = Result(Errors.INVALID_REQUEST, message)
            plan.records = [r for r in plan.records if record_entity(r.client_quota) != checked.key]
            plan.results.append(Result(Errors.INVALID_REQUEST, message))
            continue
        seen[checked.key] = index
        try:
            plan.records.extend(_alter_entity(image, checked.key, checked.config_keys, alteration.ops))
            plan.results.append(OK)
        except ApiError as e:
            plan.results.append(Result.of(e))
    return plan


def _alter_entity(
    image: ImageReader, entity: EntityKey, config_keys: Mapping, ops: Sequence[tuple[str, float | None]]
) -> list[pb.Event]:
    alterations: dict[str, float | None] = {}
    for key, value in _quota_ops(ops):
        if key in alterations:
            raise InvalidRequestError(
                f"Duplicate quota key {key} not updating quota for this entity {format_entity(entity)}"
            )
        alterations[key] = value
    current = image.client_quota(entity)
    records = []
    for key, value in alterations.items():
        if value is None:  # as Kafka: a removal is not validated, and removing an unset key is a no-op
            if key in current:
                records.append(client_quota_event(entity, key, None))
            continue
        checked = validate_quota_key_value(config_keys, key, value)
        if current.get(key) != checked:
            records.append(client_quota_event(entity, key, checked))
    return records


def _quota_ops(ops: object) -> list[tuple[str, float | None]]:
    """The (key, value) pairs of an alteration; INVALID_REQUEST if they are not pairs with hashable keys."""
    if isinstance(ops, str | bytes) or not isinstance(ops, Iterable):
        raise InvalidRequestError(f"Invalid quota alteration ops {ops!r}: expected (key, value) pairs")
    pairs = []
    for op in ops:
        if isinstance(op, str | bytes) or not isinstance(op, Sequence) or len(op) != 2:
            raise InvalidRequestError(f"Invalid quota alteration op {op!r}: expected (key, value)")
        key, value = op
        if key is not None and not isinstance(key, str):
            raise InvalidRequestError(f"Invalid configuration key {key!r}")
        pairs.append((key, value))
    return pairs


def describe_client_quotas(
    image: ConfigImage, components: Iterable[ClientQuotaFilterComponent], *, strict: bool = False
) -> list[tuple[dict[str, str | None], dict[str, float]]]:
    """Kafka's ``ClientQuotasImage.describe``: (entity, quotas) for every matching entity.

    Raises InvalidRequestError or UnsupportedVersionError (unknown entity type) as Kafka does.
    """
    exact: dict[str, str | None] = {}
    any_name: set[str] = set()
    for component in components:
        entity_type = component.entity_type
        if not entity_type:
            raise InvalidRequestError("Invalid empty entity type.")
        if entity_type in exact or entity_type in any_name:
            raise InvalidRequestError(f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in (IP, USER, CLIENT_ID):
            raise UnsupportedVersionError(f"Unsupported entity type {entity_type}")
        match_type = component.match_type
        if match_type == MatchType.EXACT:
            if component.match is None:
                raise InvalidRequestError("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = component.match
        elif match_type == MatchType.DEFAULT:
            if component.match is not None:
                raise InvalidRequestError("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif match_type == MatchType.SPECIFIED:
            if component.match is not None:
                raise InvalidRequestError("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            any_name.add(entity_type)
        else:
            raise InvalidRequestError(f"Unknown match type {match_type}")
    if (IP in exact or IP in any_name) and (
        USER in exact or USER in any_name or CLIENT_ID in exact or CLIENT_ID in any_name
    ):
        raise InvalidRequestError(
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component."
        )
    found = []
    for entity, quotas in image.client_quotas().items():
        names = dict(entity)
        if strict and len(names) != len(exact) + len(any_name):
            continue
        if all(t in names and names[t] == n for t, n in exact.items()) and all(t in names for t in any_name):
            found.append((entity_map(entity), quotas))
    return found


# --- configs (BROKER, TOPIC, CLIENT_METRICS) ------------------------------------------------------
def plan_incremental_alter_configs(
    image: ImageReader, resources: Sequence[tuple[ConfigResource, Sequence[AlterConfigOp]]]
) -> Plan:
    """Kafka's ``incrementalAlterConfigs``: one result per resource, records for the valid ones."""
    plan = Plan()
    seen: dict[tuple[object, object], int] = {}
    records: list[list[pb.Event]] = []
    for resource, ops in resources:
        index = len(plan.results)
        records.append([])
        key = _resource_key(resource)
        if key is not None and key in seen:
            # Kafka (ConfigAdminManager, ControllerApis): a repeated resource fails, and so does its first
            # occurrence, and neither is applied.
            message = (
                f"Duplicate resource {_type_name(resource.type)} {resource.name!r}: "
                "each resource must appear at most once"
            )
            plan.results[seen[key]] = Result(Errors.INVALID_REQUEST, message)
            records[seen[key]] = []
            plan.results.append(Result(Errors.INVALID_REQUEST, message))
            continue
        if key is not None:
            seen[key] = index
        try:
            records[index] = _alter_resource(image, resource, ops)
            plan.results.append(OK)
        except ApiError as e:
            plan.results.append(Result.of(e))
    plan.records = [event for resource_records in records for event in resource_records]
    return plan


def _resource_key(resource: object) -> tuple[object, object] | None:
    """(type, name) of a resource, or None if it is not a hashable ConfigResource (it fails on its own)."""
    if not isinstance(resource, ConfigResource):
        return None
    key = (int(resource.type) if isinstance(resource.type, int) else resource.type, resource.name)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _type_name(resource_type: object) -> str:
    try:
        return ConfigResourceType(resource_type).name
    except (ValueError, TypeError):
        return repr(resource_type)


def _resource_type(resource: ConfigResource) -> ConfigResourceType:
    if not isinstance(resource, ConfigResource):
        raise InvalidRequestError(f"Invalid config resource {resource!r}: expected a ConfigResource")
    try:
        return ConfigResourceType(resource.type)
    except (ValueError, TypeError):
        raise InvalidRequestError(f"Unknown resource type {resource.type}") from None


def _current_configs(image: ImageReader, rtype: ConfigResourceType, name: str) -> dict[str, str]:
    if rtype is ConfigResourceType.CLIENT_METRICS:
        return image.client_metrics_resource(name) or {}
    return image.configs(rtype, name)


def _is_list(rtype: ConfigResourceType, key: str) -> bool:
    if rtype is ConfigResourceType.CLIENT_METRICS:
        return key in (METRICS_CONFIG, MATCH_CONFIG)
    spec = TOPIC_CONFIGS.get(key) if rtype is ConfigResourceType.TOPIC else broker_config_spec(key)
    return spec is not None and spec.type is ConfigType.LIST


def _list_parts(value: str | None, rtype: ConfigResourceType, key: str) -> list[str]:
    """Kafka's ``getParts``: the current (else default) value split on ',' without empty parts."""
    if value is None:
        spec = TOPIC_CONFIGS.get(key) if rtype is ConfigResourceType.TOPIC else None
        value = spec.default if spec is not None else None
    if value is None:
        return []
    return [part for part in value.split(",") if part]


def _java_split(value: str) -> list[str]:
    """Java's ``value.split(",")``: trailing empty strings are dropped (but ``""`` is ``[""]``)."""
    if "," not in value:
        return [value]
    parts = value.split(",")
    while parts and not parts[-1]:
        parts.pop()
    return parts


def _alter_resource(image: ImageReader, resource: ConfigResource, ops: Sequence[AlterConfigOp]) -> list[pb.Event]:
    rtype = _resource_type(resource)
    name = resource.name
    if not isinstance(name, str):
        raise InvalidRequestError(f"Invalid resource name {name!r}: expected a string")
    name = validate_resource_name(rtype, name)  # a broker id, a topic, or a non-empty Kafka string
    if isinstance(ops, str | bytes) or not isinstance(ops, Iterable):
        raise InvalidRequestError(f"Invalid config ops {ops!r} for resource {name!r}: expected AlterConfigOps")
    current = _current_configs(image, rtype, name)
    changed: dict[str, str | None] = {}
    for op in ops:
        if not isinstance(op, AlterConfigOp):
            raise InvalidRequestError(f"Invalid config op {op!r} for resource {name!r}: expected an AlterConfigOp")
        if not isinstance(op.name, str):
            raise InvalidRequestError(f"Invalid config name {op.name!r} for resource {name!r}: expected a string")
        validate_config_strings(op.name, op.value if isinstance(op.value, str) else None)
        if op.name in changed:
            raise InvalidRequestError(f"Duplicate config key {op.name} for resource {name!r}")
        if op.name == SHARD_COUNT_CONFIG and rtype is ConfigResourceType.BROKER:
            # as Kafka refuses a config it cannot update dynamically: INVALID_CONFIG naming it
            raise InvalidConfigurationError(
                f"{SHARD_COUNT_CONFIG} is changed by a reshard, which moves the shards' state with it: "
                "quotaplane shards --set N (AdminService.AlterShardCount)"
            )
        if op.op != OpType.DELETE and op.op in tuple(OpType):
            if op.value is None:  # Kafka (ConfigAdminManager): every op but DELETE needs a value
                raise InvalidRequestError(f"Null value not supported for {op.name}")
            if not isinstance(op.value, str):
                raise InvalidConfigurationError(
                    f"Invalid value {op.value!r} for configuration {op.name}: expected a string"
                )
        old = current.get(op.name)
        if op.op == OpType.SET:
            new: str | None = op.value
        elif op.op == OpType.DELETE:
            new = None
        elif op.op in (OpType.APPEND, OpType.SUBTRACT):
            if not _is_list(rtype, op.name):
                raise InvalidConfigurationError(
                    f"Can't {OpType(op.op).name} to key {op.name} because its type is not LIST."
                )
            parts = _list_parts(old, rtype, op.name)
            for value in _java_split(op.value):
                if op.op == OpType.APPEND:
                    if value not in parts:
                        parts.append(value)
                elif value in parts:
                    parts.remove(value)
            new = ",".join(parts)
        else:
            raise InvalidRequestError(f"Unknown operation type {op.op} for {op.name}")
        changed[op.name] = new
    after = dict(current)
    for key, value in changed.items():
        if value is None:
            after.pop(key, None)
        else:
            after[key] = value
    if rtype is ConfigResourceType.CLIENT_METRICS:
        validate_client_metrics(name, after, current)
        if after == current:
            return []
        return [client_metrics_event(name, after)]
    for key, value in changed.items():
        validate_config_value(rtype, key, value)
    # KAFKA-14136: a BROKER resource gets a record for every key the request names, changed or not (a
    # deletion of an unset key included), so nodes reload; other resources only for actual changes.
    return [
        config_event(rtype, name, key, value)
        for key, value in changed.items()
        if value != current.get(key) or rtype is ConfigResourceType.BROKER
    ]


def describe_configs(image: ConfigImage, resource: ConfigResource) -> list[ConfigEntry]:
    """DescribeConfigs: CLIENT_METRICS lists the configs as set; BROKER and TOPIC list every config
    quotaplane keeps, with its value (the resource's own, then for a node the cluster default, then
    Kafka's default) and whether it is a default."""
    rtype = _resource_type(resource)
    if rtype is ConfigResourceType.CLIENT_METRICS:
        if not resource.name:
            raise InvalidRequestError("Client metrics subscription name must not be empty")
        configs = image.client_metrics_resource(resource.name) or {}
        types = {METRICS_CONFIG: ConfigType.LIST, INTERVAL_MS_CONFIG: ConfigType.INT, MATCH_CONFIG: ConfigType.LIST}
        return [
            ConfigEntry(key, configs[key], False, False, types[key])
            for key in sorted(CLIENT_METRICS_CONFIG_NAMES)
            if key in configs
        ]
    if rtype is ConfigResourceType.TOPIC:
        validate_topic_name(resource.name)
        own = image.configs(rtype, resource.name)
        return [
            ConfigEntry(key, own.get(key, spec.default), key not in own, False, spec.type, spec.doc)
            for key, spec in TOPIC_CONFIGS.items()
        ]
    own = image.configs(rtype, validate_broker_name(resource.name))
    cluster = image.configs(rtype, "")
    entries = []
    names = list(BROKER_CONFIGS) + sorted(k for k in {*own, *cluster} if k not in BROKER_CONFIGS)
    for key in names:
        spec = broker_config_spec(key)
        if spec is None:  # pragma: no cover - the log only holds validated keys
            continue
        value = own.get(key, cluster.get(key, spec.default))
        entries.append(ConfigEntry(key, value, key not in own and key not in cluster, False, spec.type, spec.doc))
    return entries
