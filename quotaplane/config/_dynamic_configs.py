"""The dynamic configs quotaplane keeps in its log: their names, types, ranges and when they apply.

Kafka splits these between dynamic broker configs (``max.connections``, replication throttled rates ...),
topic configs (``*.replication.throttled.replicas``) and static broker configs (quota windows,
``telemetry.max.bytes``). quotaplane keeps all of them in the one event log so the fleet agrees on them:

- a ``BROKER`` resource is named ``""`` (the cluster-wide default) or a node id (that node's override),
  as in Kafka; the value a node uses is its own, else the cluster default, else Kafka's default;
- a ``TOPIC`` resource holds a topic's throttled-replica lists;
- keys Kafka reads only at start-up (``dynamic=False`` here) are accepted and logged, and take effect
  when a shard (re)builds its managers: the image tells which changes wait for that.

Values are validated as Kafka's ``ConfigDef`` parses them (trimmed; ``Not a number of type INT``;
``Value must be at least 0``), and rejected with INVALID_CONFIG naming the config. Kafka's controller
leaves broker values to the brokers; quotaplane has no broker to reject a bad value later, so it checks
them at the controller (a documented difference).

Every resource name, config name and value must also be one Kafka can carry back (``validate_string``,
the same rule as for client-quota entity names): at most 32,767 bytes of valid UTF-8.
:func:`validate_resource_name` and :func:`validate_config_strings` are the checks every admin door calls;
a resource name that fails is INVALID_REQUEST (INVALID_TOPIC_EXCEPTION for a topic, as ``Topic.validate``
answers), a config name or value INVALID_CONFIG, as Kafka answers a config it cannot accept.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from ..errors import InvalidConfigurationError, InvalidRequestError, InvalidTopicError
from ..quota import (
    LISTENER_CONFIG_PREFIX,
    LISTENER_CONFIGS,
    parse_max_connections_per_ip_overrides,
    parse_throttled_replicas,
)
from ._client_quotas import _quoted, validate_string

__all__ = [
    "BROKER_CONFIGS",
    "LEASABLE_QUOTA_TYPES",
    "LEASE_MS_CONFIG",
    "LEASE_QUOTA_TYPES_CONFIG",
    "LISTENER_CONFIG_PREFIX",
    "MAX_SHARDS",
    "SHARD_COUNT_CONFIG",
    "TOPIC_CONFIGS",
    "ConfigKeySpec",
    "ConfigResourceType",
    "ConfigType",
    "broker_config_spec",
    "parse_config_value",
    "parse_lease_quota_types",
    "validate_broker_name",
    "validate_config_strings",
    "validate_config_value",
    "validate_resource_name",
    "validate_topic_name",
]


class ConfigResourceType(IntEnum):
    """Kafka's ``ConfigResource.Type`` ids (the ones quotaplane serves)."""

    TOPIC = 2
    BROKER = 4
    CLIENT_METRICS = 16


class ConfigType(IntEnum):
    """``ConfigDef.Type`` (ids as DescribeConfigs v3+ reports them)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7


@dataclass(frozen=True, slots=True)
class ConfigKeySpec:
    name: str
    type: ConfigType
    default: str | None
    minimum: float | None = None
    dynamic: bool = True
    #: an extra check of the parsed value; raises ValueError with Kafka's message
    check: Callable[[str], object] | None = None
    doc: str = ""


_INT_MAX: Final = 2**31 - 1
_LONG_MAX: Final = 2**63 - 1
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))  # String.trim(): every char <= U+0020
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
# Java's Double.parseDouble: decimal (optional exponent, optional f/d suffix), hex floats, NaN, Infinity.
# Python's float() also takes "inf", "nan", "1_000" and non-ASCII digits, which Kafka refuses.
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?"
    r"|(?P<hex>0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)"
)
#: A listener in a config key, lower case (Kafka's ``ListenerName.configPrefix``). Deliberately not
#: ``quota.check_listener_name``: its 64-character cap bounds the connection path's per-node memory,
#: and the config validation the tests pin has no length limit.
_LISTENER_NAME = re.compile(r"[a-z0-9_\-]+")


def _specs(*specs: ConfigKeySpec) -> dict[str, ConfigKeySpec]:
    return {spec.name: spec for spec in specs}


def _int(name: str, default: int | None, minimum: int, *, dynamic: bool = True, doc: str = "") -> ConfigKeySpec:
    return ConfigKeySpec(name, ConfigType.INT, None if default is None else str(default), minimum, dynamic, doc=doc)


def _long(name: str, default: int, minimum: int, *, dynamic: bool = True, doc: str = "") -> ConfigKeySpec:
    return ConfigKeySpec(name, ConfigType.LONG, str(default), minimum, dynamic, doc=doc)


#: quotaplane's own cluster-wide key: how many shards own the entities (rendezvous placement over the ids
#: ``"0"`` .. ``str(count - 1)``). Set only by a reshard (``ConfigStore.alter_shard_count``), which moves the
#: state with it; IncrementalAlterConfigs refuses it. Absent: the count ``quotaplane up`` was started with.
SHARD_COUNT_CONFIG: Final = "quotaplane.shard.count"
#: The most shards a cluster may have (each is a Ray actor with its own threads and direct channel).
MAX_SHARDS: Final = 1024


#: quotaplane's own cluster-wide keys of leased budgets (``quotaplane.config.lease_settings`` reads them).
LEASE_QUOTA_TYPES_CONFIG: Final = "quotaplane.lease.quota.types"
LEASE_MS_CONFIG: Final = "quotaplane.lease.ms"
#: The client quota types a gateway can decide within a lease: byte rates, whose throttle is Kafka's
#: ``(rate - bound) / bound * window`` of one sensor (the request and mutation quotas stay exact).
LEASABLE_QUOTA_TYPES: Final = ("PRODUCE", "FETCH")


def parse_lease_quota_types(value: str) -> frozenset[str]:
    """The quota types of ``quotaplane.lease.quota.types`` (comma-separated, case-insensitive, blanks ignored)."""
    names = [name.strip(_JAVA_TRIM).upper() for name in value.split(",")]
    unknown = [name for name in names if name and name not in LEASABLE_QUOTA_TYPES]
    if unknown:
        raise ValueError(f"{unknown[0]} cannot be leased; expected any of {', '.join(LEASABLE_QUOTA_TYPES)}")
    return frozenset(name for name in names if name)


def _check_shard_count(value: str) -> None:
    if int(value.strip(_JAVA_TRIM)) > MAX_SHARDS:
        raise ValueError(f"Value must be no more than {MAX_SHARDS}")


BROKER_CONFIGS: Final[Mapping[str, ConfigKeySpec]] = _specs(
    # connection quotas (SocketServer's ConnectionQuotas; dynamic in Kafka)
    _int("max.connections", _INT_MAX, 0, doc="connections a node accepts in total"),
    _int("max.connections.per.ip", _INT_MAX, 0, doc="connections from one IP, fleet-wide"),
    ConfigKeySpec(
        "max.connections.per.ip.overrides",
        ConfigType.STRING,
        "",
        check=parse_max_connections_per_ip_overrides,
        doc="per-IP or per-host overrides, 'host:100,127.0.0.1:200'",
    ),
    _int("max.connection.creation.rate", _INT_MAX, 0, doc="new connections per second a node accepts"),
    # replication quotas (dynamic in Kafka)
    _long("leader.replication.throttled.rate", _LONG_MAX, 0),
    _long("follower.replication.throttled.rate", _LONG_MAX, 0),
    _long("replica.alter.log.dirs.io.max.bytes.per.second", _LONG_MAX, 0),
    # quota sampling (read-only in Kafka: applies when a shard builds its managers)
    _int("quota.window.num", 11, 1, dynamic=False),
    _int("quota.window.size.seconds", 1, 1, dynamic=False),
    _int("controller.quota.window.num", 11, 1, dynamic=False),
    _int("controller.quota.window.size.seconds", 1, 1, dynamic=False),
    _int("replication.quota.window.num", 11, 1, dynamic=False),
    _int("replication.quota.window.size.seconds", 1, 1, dynamic=False),
    _int("alter.log.dirs.replication.quota.window.num", 11, 1, dynamic=False),
    _int("alter.log.dirs.replication.quota.window.size.seconds", 1, 1, dynamic=False),
    # KIP-786: read-only and off by default in Kafka; on by default and dynamic in quotaplane (turning it off
    # removes the quota-value series of live sensors at once, turning it on adds them)
    ConfigKeySpec(
        "client.quota.value.metric.enable",
        ConfigType.BOOLEAN,
        "true",
        doc="KIP-786 quota-value metric per entity (on by default in quotaplane, off in Kafka; dynamic)",
    ),
    # KIP-714
    _int("telemetry.max.bytes", 1024 * 1024, 1, dynamic=False),
    # KIP-936 producer-id quota (the filter shape is quotaplane's)
    _int("producer.id.quota.window.num", 11, 1, dynamic=False),
    _int("producer.id.quota.window.size.seconds", 3600, 1, dynamic=False),
    _int("producer.id.quota.cache.cleanup.scheduler.interval.ms", 10, 1, dynamic=False),
    _int("producer.id.quota.filter.expected.items", 10_000, 1, dynamic=False),
    ConfigKeySpec(
        "producer.id.quota.filter.false.positive.rate",
        ConfigType.DOUBLE,
        "0.01",
        dynamic=False,
        check=lambda value: _check_false_positive_rate(value),
    ),
    # leased budgets (issue 19; quotaplane's own, cluster-wide): which client quotas the gateways decide
    # locally within a leased share, and how long a lease lives
    ConfigKeySpec(
        LEASE_QUOTA_TYPES_CONFIG,
        ConfigType.LIST,
        "",
        check=lambda value: parse_lease_quota_types(value),
        doc="client quota types decided by the gateways within leased shares: PRODUCE, FETCH (empty: exact mode)",
    ),
    _int(LEASE_MS_CONFIG, 1000, 100, doc="how long a leased share lives (gateways renew every half of it)"),
    ConfigKeySpec(
        SHARD_COUNT_CONFIG,
        ConfigType.INT,
        None,
        1,
        check=lambda value: _check_shard_count(value),
        doc="the shards owning the entities (changed by a reshard: quotaplane shards --set N)",
    ),
)


def _check_false_positive_rate(value: str) -> None:
    """The Bloom filter's false-positive rate is a probability strictly between 0 and 1."""
    if not 0.0 < _parse_java_double(value) < 1.0:
        raise ValueError("Value must be greater than 0 and less than 1")


def _parse_java_double(trimmed: str) -> float:
    """``Double.parseDouble`` of a trimmed string; ValueError if Java would refuse it."""
    match = _JAVA_DOUBLE.fullmatch(trimmed)
    if match is None:
        raise ValueError(trimmed)
    sign = -1.0 if trimmed.startswith("-") else 1.0
    if match.group("hex") is not None:
        return sign * float.fromhex(match.group("hex"))
    if match.group("dec") is not None:
        return sign * float(match.group("dec"))
    return sign * float(trimmed.lstrip("+-"))  # NaN, Infinity


def _check_replicas(name: str) -> Callable[[str], object]:
    return lambda value: parse_throttled_replicas(value, name=name)


TOPIC_CONFIGS: Final[Mapping[str, ConfigKeySpec]] = _specs(
    ConfigKeySpec(
        "leader.replication.throttled.replicas",
        ConfigType.LIST,
        "",
        check=_check_replicas("leader.replication.throttled.replicas"),
    ),
    ConfigKeySpec(
        "follower.replication.throttled.replicas",
        ConfigType.LIST,
        "",
        check=_check_replicas("follower.replication.throttled.replicas"),
    ),
)


def broker_config_spec(name: str) -> ConfigKeySpec | None:
    """The spec of a broker config, including ``listener.name.<listener>.max.connections`` and
    ``listener.name.<listener>.max.connection.creation.rate`` (listener names in lower case)."""
    spec = BROKER_CONFIGS.get(name)
    if spec is not None or not name.startswith(LISTENER_CONFIG_PREFIX):
        return spec
    rest = name[len(LISTENER_CONFIG_PREFIX) :]
    for suffix in LISTENER_CONFIGS:
        listener = rest[: -len(suffix) - 1] if rest.endswith("." + suffix) else ""
        if listener and _LISTENER_NAME.fullmatch(listener):
            return _int(name, _INT_MAX, 1)  # Kafka: a listener limit must be > 0
    return None


def _invalid(name: str, value: str, reason: str) -> InvalidConfigurationError:
    return InvalidConfigurationError(f"Invalid value {value} for configuration {name}: {reason}")


def parse_config_value(spec: ConfigKeySpec, value: str) -> object:
    """Parse a config string as Kafka's ``ConfigDef.parseType`` does (trimmed), then check its range."""
    if not isinstance(value, str):
        raise InvalidConfigurationError(f"Invalid value {value!r} for configuration {spec.name}: expected a string")
    trimmed = value.strip(_JAVA_TRIM)
    parsed: object
    if spec.type is ConfigType.BOOLEAN:
        if trimmed.lower() not in ("true", "false"):
            raise _invalid(spec.name, trimmed, "Expected value to be either true or false")
        parsed = trimmed.lower() == "true"
    elif spec.type in (ConfigType.INT, ConfigType.LONG):
        limit = _INT_MAX if spec.type is ConfigType.INT else _LONG_MAX
        if not _JAVA_INTEGER.fullmatch(trimmed) or not -limit - 1 <= int(trimmed) <= limit:
            raise _invalid(spec.name, trimmed, f"Not a number of type {spec.type.name}")
        parsed = int(trimmed)
    elif spec.type is ConfigType.DOUBLE:
        try:
            parsed = _parse_java_double(trimmed)
        except ValueError:
            raise _invalid(spec.name, trimmed, "Not a number of type DOUBLE") from None
        if math.isnan(parsed):
            raise _invalid(spec.name, trimmed, "Not a number of type DOUBLE")
    else:
        parsed = trimmed
    if spec.minimum is not None and isinstance(parsed, int | float) and parsed < spec.minimum:
        minimum = int(spec.minimum) if float(spec.minimum).is_integer() else spec.minimum
        raise _invalid(spec.name, trimmed, f"Value must be at least {minimum}")
    if spec.check is not None:
        try:
            spec.check(trimmed)
        except ValueError as e:
            message = str(e)
            if not message.startswith("Invalid value"):
                message = f"Invalid value {trimmed} for configuration {spec.name}: {message}"
            raise InvalidConfigurationError(message) from None
    return parsed


def validate_config_value(resource_type: ConfigResourceType, name: str, value: str | None) -> None:
    """Check one broker or topic config (None = deleted); INVALID_CONFIG with the config's name."""
    validate_config_strings(name, value)
    specs = TOPIC_CONFIGS if resource_type is ConfigResourceType.TOPIC else None
    spec = specs.get(name) if specs is not None else broker_config_spec(name)
    if spec is None:
        kind = "topic" if resource_type is ConfigResourceType.TOPIC else "broker"
        raise InvalidConfigurationError(
            f"Unknown {kind} config {_quoted(name)}: quotaplane keeps {_known(resource_type)}"
        )
    if value is not None:
        parse_config_value(spec, value)


def validate_config_strings(name: object, value: object) -> None:
    """A config name, and its value unless None (a deletion), as Kafka strings: INVALID_CONFIG naming them.

    The string rule only; :func:`validate_config_value` (broker and topic configs) and the client-metrics
    validation check the names and values themselves.
    """
    if not isinstance(name, str):
        raise InvalidRequestError(f"Invalid config name {name!r}: expected a string")
    validate_string(name, "config name", InvalidConfigurationError)
    if value is not None:
        validate_string(value, f"value for configuration {_quoted(name)}", InvalidConfigurationError)


def validate_resource_name(resource_type: ConfigResourceType, name: object) -> str:
    """A config resource's name as Kafka validates it for its type; the name in canonical form.

    BROKER: ``validate_broker_name``; TOPIC: ``validate_topic_name`` (INVALID_TOPIC_EXCEPTION); CLIENT_METRICS:
    non-empty (Kafka's ``ClientMetricsConfigs.validate``) and a Kafka string (INVALID_REQUEST).
    """
    if resource_type is ConfigResourceType.BROKER:
        return validate_broker_name(name)  # type: ignore[arg-type]
    if resource_type is ConfigResourceType.TOPIC:
        validate_topic_name(name)  # type: ignore[arg-type]
        return name  # type: ignore[return-value]
    if not isinstance(name, str):
        raise InvalidRequestError(f"Invalid resource name {name!r}: expected a string")
    if not name:
        raise InvalidRequestError("Subscription name can't be empty")
    return validate_string(name, "client metrics resource name")


def _known(resource_type: ConfigResourceType) -> str:
    if resource_type is ConfigResourceType.TOPIC:
        return ", ".join(TOPIC_CONFIGS)
    return ", ".join([*BROKER_CONFIGS, f"{LISTENER_CONFIG_PREFIX}<listener>.{{{','.join(LISTENER_CONFIGS)}}}"])


def validate_broker_name(name: str) -> str:
    """Kafka's ``validateBrokerName``: ``""`` (cluster default) or a non-negative base-10 node id.

    Returns the name in canonical form (``"+1"`` and ``"01"`` are node ``"1"``, which Kafka also
    accepts), so an override is stored under the name a node looks it up by.
    """
    if not isinstance(name, str):
        raise InvalidRequestError(f"Invalid broker name {name!r}: expected a string")
    if name:
        if not _JAVA_INTEGER.fullmatch(name) or not -(2**31) <= int(name) < 2**31:
            raise InvalidRequestError("Unable to parse broker name as a base 10 number.")
        if int(name) < 0:
            raise InvalidRequestError("Invalid negative broker ID.")
        return str(int(name))
    return name


_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")  # ASCII only, as Kafka


def validate_topic_name(name: str) -> None:
    """Kafka's ``validateTopicName`` (``Topic.validate``)."""
    if not isinstance(name, str):
        raise InvalidRequestError(f"Invalid topic name {name!r}: expected a string")
    if not name:
        raise InvalidRequestError("Default topic resources are not allowed.")
    reason = None
    named = _quoted(name)  # Kafka's messages quote the name; one Kafka could not carry is escaped and cut
    if name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > 249:
        reason = f"the length of '{named}' is longer than the max allowed length 249"
    elif not _LEGAL_TOPIC.fullmatch(name):
        reason = f"'{named}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if reason is not None:
        raise InvalidTopicError(f"Topic name is invalid: {reason}")  # Kafka's Topic.validate
