"""The broker configs Kafka's ``ConnectionQuotas`` reads, by Kafka's names, parsed and validated as ``KafkaConfig``.

Kept apart from the manager because the config layer needs the same parsing without a manager: the
dynamic-config checks validate ``max.connections.per.ip.overrides`` with
:func:`parse_max_connections_per_ip_overrides` before a value is ever applied. Host names in the
overrides stay names here; ``ConnectionQuotas`` resolves them (with its resolver) when it applies them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._normalise import check_listener_name
from .throttle import INT_MAX_VALUE

__all__ = [
    "INTER_BROKER_LISTENER_NAME_CONFIG",
    "IP_CONNECTION_RATE_DEFAULT",
    "IP_CONNECTION_RATE_OVERRIDE_CONFIG",
    "LISTENER_CONFIGS",
    "LISTENER_CONFIG_PREFIX",
    "MAX_CONNECTIONS_CONFIG",
    "MAX_CONNECTIONS_PER_IP_CONFIG",
    "MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG",
    "MAX_CONNECTION_CREATION_RATE_CONFIG",
    "NUM_QUOTA_SAMPLES_CONFIG",
    "QUOTA_WINDOW_SIZE_SECONDS_CONFIG",
    "STATIC_CONFIGS",
    "VALID_HOST",
    "ConnectionQuotasConfig",
    "check_now",
    "check_per_ip_zero",
    "int_config",
    "parse_max_connections_per_ip_overrides",
]

#: Kafka's ``QuotaConfig.IP_CONNECTION_RATE_DEFAULT``: no per-IP creation-rate limit.
IP_CONNECTION_RATE_DEFAULT = INT_MAX_VALUE

# broker config names (Kafka's SocketServerConfigs / QuotaConfig)
MAX_CONNECTIONS_CONFIG = "max.connections"
MAX_CONNECTIONS_PER_IP_CONFIG = "max.connections.per.ip"
MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG = "max.connections.per.ip.overrides"
MAX_CONNECTION_CREATION_RATE_CONFIG = "max.connection.creation.rate"
INTER_BROKER_LISTENER_NAME_CONFIG = "inter.broker.listener.name"
NUM_QUOTA_SAMPLES_CONFIG = "quota.window.num"
QUOTA_WINDOW_SIZE_SECONDS_CONFIG = "quota.window.size.seconds"
IP_CONNECTION_RATE_OVERRIDE_CONFIG = "connection_creation_rate"
LISTENER_CONFIG_PREFIX = "listener.name."
#: The configs a listener takes under ``listener.name.<listener in lower case>.``.
LISTENER_CONFIGS = (MAX_CONNECTIONS_CONFIG, MAX_CONNECTION_CREATION_RATE_CONFIG)
#: Read at start-up only (Kafka's are not dynamic).
STATIC_CONFIGS = frozenset(
    {INTER_BROKER_LISTENER_NAME_CONFIG, NUM_QUOTA_SAMPLES_CONFIG, QUOTA_WINDOW_SIZE_SECONDS_CONFIG}
)

#: Kafka's ``Utils.validHostPattern`` (host names and IP literals of ``max.connections.per.ip.overrides``).
VALID_HOST = re.compile(r"[0-9a-zA-Z\-%._:]+")
_CSV_SPLIT = re.compile(r"\s*,\s*")


def check_now(now_ms: object) -> int:
    """``now_ms`` if it is an int of milliseconds (never a float: the core's times are exact)."""
    if isinstance(now_ms, bool) or not isinstance(now_ms, int):
        raise ValueError(f"now_ms must be an integer of milliseconds, got {now_ms!r}")
    return now_ms


def int_config(name: str, value: object, minimum: int, *, allow_integral_float: bool = False) -> int:
    """An int config value (an int, or a string of one as Kafka's ConfigDef parses) in [minimum, Integer.MAX_VALUE]."""
    integral = (
        (isinstance(value, int) and not isinstance(value, bool))
        or (isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value) is not None)
        or (allow_integral_float and isinstance(value, float) and math.isfinite(value) and value.is_integer())
    )
    if not integral:
        raise ValueError(f"Invalid value {value!r} for {name}: expected an integer")
    parsed = int(value)  # type: ignore[arg-type]
    if not minimum <= parsed <= INT_MAX_VALUE:
        raise ValueError(f"Invalid value {parsed} for {name}: must be between {minimum} and {INT_MAX_VALUE}")
    return parsed


def check_per_ip_zero(per_ip: int, overrides: Mapping[object, int]) -> None:
    """``KafkaConfig.validateValues``: ``max.connections.per.ip`` may be 0 only with overrides."""
    if per_ip == 0 and not overrides:
        raise ValueError(
            f"{MAX_CONNECTIONS_PER_IP_CONFIG} can be set to zero only if "
            f"{MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG} property is set."
        )


def parse_max_connections_per_ip_overrides(value: str | Mapping[str, object] | None) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` as ``{host or ip: max}``, validated as Kafka's KafkaConfig does.

    The string form is Kafka's: ``"hostName:100,127.0.0.1:200"``; each entry splits at its last
    ``:``, so ``"::1:5"`` is the IPv6 loopback with 5. Counts are integers ≥ 0 and hosts match
    Kafka's ``Utils.validHostPattern``.

    >>> parse_max_connections_per_ip_overrides("broker1:100, 127.0.0.1:200,::1:5")
    {'broker1': 100, '127.0.0.1': 200, '::1': 5}
    """
    if value is None:
        return {}
    entries: list[tuple[object, object]]
    if isinstance(value, str):
        parts = _CSV_SPLIT.split(value.strip()) if value.strip() else []
        while parts and not parts[-1]:  # Java's String.split drops trailing empty strings
            parts.pop()
        entries = []
        for part in parts:
            host, sep, count = part.rpartition(":")
            if not sep:
                raise ValueError(
                    f"Error parsing configuration property '{MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG}': "
                    f"entry {part!r} is not host:count"
                )
            entries.append((host.strip(), count.strip()))
    elif isinstance(value, Mapping):
        entries = list(value.items())
    else:
        raise ValueError(
            f"{MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG} must be a 'host:count,...' string or a mapping, "
            f"got {type(value).__name__}"
        )
    overrides: dict[str, int] = {}
    invalid: list[str] = []
    for host, count in entries:
        if not isinstance(host, str) or not VALID_HOST.fullmatch(host):
            invalid.append(repr(host))
            continue
        overrides[host] = int_config(f"{MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG} of {host}", count, 0)
    if invalid:
        raise ValueError(f"{MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG} contains invalid addresses : {','.join(invalid)}")
    return overrides


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionQuotasConfig:
    """The broker configs ``ConnectionQuotas`` reads (Kafka's defaults: no limits, 11 windows of 1 s).

    ``max_connections_per_ip_overrides`` takes Kafka's string (``"host:100,127.0.0.1:200"``) or a
    mapping; it is stored as a tuple of ``(host, max)`` pairs. Host names are resolved by
    ``ConnectionQuotas`` (with its resolver), once, when the config is applied.

    >>> ConnectionQuotasConfig.from_configs({"max.connections": "100", "quota.window.num": 2}).max_connections
    100
    """

    max_connections: int = INT_MAX_VALUE
    max_connections_per_ip: int = INT_MAX_VALUE
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = field(default=())
    max_connection_creation_rate: int = INT_MAX_VALUE
    inter_broker_listener: str | None = None
    num_quota_samples: int = 11
    quota_window_size_seconds: int = 1

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "max_connections", int_config(MAX_CONNECTIONS_CONFIG, self.max_connections, 0))
        set_(self, "max_connections_per_ip", int_config(MAX_CONNECTIONS_PER_IP_CONFIG, self.max_connections_per_ip, 0))
        overrides = self.max_connections_per_ip_overrides
        if isinstance(overrides, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in overrides):
            overrides = dict(overrides)
        set_(self, "max_connections_per_ip_overrides", tuple(parse_max_connections_per_ip_overrides(overrides).items()))
        set_(
            self,
            "max_connection_creation_rate",
            int_config(MAX_CONNECTION_CREATION_RATE_CONFIG, self.max_connection_creation_rate, 0),
        )
        if self.inter_broker_listener is not None:
            check_listener_name(self.inter_broker_listener)
        set_(self, "num_quota_samples", int_config(NUM_QUOTA_SAMPLES_CONFIG, self.num_quota_samples, 1))
        set_(
            self,
            "quota_window_size_seconds",
            int_config(QUOTA_WINDOW_SIZE_SECONDS_CONFIG, self.quota_window_size_seconds, 1),
        )
        check_per_ip_zero(self.max_connections_per_ip, dict(self.max_connections_per_ip_overrides))

    @classmethod
    def from_configs(cls, configs: Mapping[str, object]) -> ConnectionQuotasConfig:
        """Build from Kafka's broker config names; an unknown name is a ValueError."""
        names = {
            MAX_CONNECTIONS_CONFIG: "max_connections",
            MAX_CONNECTIONS_PER_IP_CONFIG: "max_connections_per_ip",
            MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG: "max_connections_per_ip_overrides",
            MAX_CONNECTION_CREATION_RATE_CONFIG: "max_connection_creation_rate",
            INTER_BROKER_LISTENER_NAME_CONFIG: "inter_broker_listener",
            NUM_QUOTA_SAMPLES_CONFIG: "num_quota_samples",
            QUOTA_WINDOW_SIZE_SECONDS_CONFIG: "quota_window_size_seconds",
        }
        unknown = sorted(str(k) for k in configs if k not in names)
        if unknown:
            raise ValueError(f"unknown connection quota configs {unknown}; expected some of {sorted(names)}")
        return cls(**{names[k]: v for k, v in configs.items() if v is not None})

    @property
    def quota_window_ms(self) -> int:
        return self.quota_window_size_seconds * 1000
