"""ConnectionQuotas: Kafka's acceptor-side connection admission (``ConnectionQuotas`` in ``SocketServer.scala``).

Kafka's acceptor thread calls ``inc`` before it hands a new socket to a processor and *blocks* inside
it while a broker or listener creation rate is over quota or no connection slot is free. A service
cannot block its caller, so ``inc`` here answers a ``ConnectionDecision`` instead:

* ``ADMIT``: the connection is counted; call ``dec`` when the socket closes.
* ``THROTTLE``: Kafka's acceptor would wait. ``throttle_ms > 0`` is the rest of a broker/listener
  rate delay; ``throttle_ms == 0`` means a broker- or listener-wide ``max.connections`` is reached
  and the caller waits for a ``dec`` or a limit change (``wake_epoch`` moves on each). The caller
  asks again with ``inc(..., attempt=decision.attempt)``: a retried attempt is *not* recorded
  again on the broker and listener rate sensors (Kafka records a blocked connection once, before
  it waits), and an attempt token is single use.
* ``REJECT``: ``IP_CONNECTIONS`` (``max.connections.per.ip``, the count stays incremented and the
  caller closes the socket and calls ``dec``, as Kafka's acceptor does) or ``IP_CONNECTION_RATE``
  (nothing is counted; Kafka keeps the socket open ``throttle_ms`` and then closes it, so the
  client does not reconnect at once; do not call ``dec``).

Every call takes ``now_ms``; nothing here reads a clock or starts a thread.
"""

from __future__ import annotations

import enum
import ipaddress
import itertools
import math
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..metrics import Avg, MetricConfig, MetricName, Metrics, Quota, QuotaViolationError, Rate, Sensor
from .throttle import INT_MAX_VALUE, bounded_throttle_time

__all__ = [
    "CONNECTION_RATE_METRIC_NAME",
    "CONNECTION_RATE_SENSOR_NAME",
    "IP_CONNECTION_RATE_DEFAULT",
    "IP_CONNECTION_RATE_OVERRIDE_CONFIG",
    "MAX_CONNECTIONS_CONFIG",
    "MAX_CONNECTIONS_PER_IP_CONFIG",
    "MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG",
    "MAX_CONNECTION_CREATION_RATE_CONFIG",
    "SOCKET_SERVER_METRICS_GROUP",
    "Admission",
    "ConnectionAttempt",
    "ConnectionDecision",
    "ConnectionLimit",
    "ConnectionQuotas",
    "ConnectionQuotasConfig",
    "Resolver",
    "default_resolver",
    "parse_max_connections_per_ip_overrides",
]

# --- Kafka's names ----------------------------------------------------------------------------------
#: Kafka's ``SocketServer.MetricsGroup``.
SOCKET_SERVER_METRICS_GROUP = "socket-server-metrics"
#: Kafka's ``ConnectionQuotaEntity`` names: sensors are this, ``-<listener>`` or ``-<ip>``.
CONNECTION_RATE_SENSOR_NAME = "Connection-Accept-Rate"
CONNECTION_RATE_METRIC_NAME = "connection-accept-rate"
BROKER_CONNECTION_RATE_METRIC_NAME = "broker-" + CONNECTION_RATE_METRIC_NAME
LISTENER_METRIC_TAG = "listener"
IP_METRIC_TAG = "ip"
LISTENER_THROTTLE_PREFIX = ""
IP_THROTTLE_PREFIX = "ip-"
_RATE_DESCRIPTION = "Tracking rate of accepting new connections (per second)"
_THROTTLE_DESCRIPTION = "Tracking average throttle-time, out of non-zero throttle times, per listener"
#: An IP's rate sensor is dropped after an hour without connections; broker and listener ones never.
IP_SENSOR_EXPIRATION_SECONDS = 3600

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
_LISTENER_CONFIGS = (MAX_CONNECTIONS_CONFIG, MAX_CONNECTION_CREATION_RATE_CONFIG)
_STATIC_CONFIGS = frozenset(
    {INTER_BROKER_LISTENER_NAME_CONFIG, NUM_QUOTA_SAMPLES_CONFIG, QUOTA_WINDOW_SIZE_SECONDS_CONFIG}
)

# --- addresses ---------------------------------------------------------------------------------------
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
#: Turns a host name into one IP address literal (Java's ``InetAddress.getByName``). Raise OSError
#: (or ValueError) when the name does not resolve.
Resolver = Callable[[str], str]

#: Kafka's ``Utils.validHostPattern`` (host names and IP literals of ``max.connections.per.ip.overrides``).
_VALID_HOST = re.compile(r"[0-9a-zA-Z\-%._:]+")
_CSV_SPLIT = re.compile(r"\s*,\s*")


def default_resolver(host: str) -> str:
    """The first address ``socket.getaddrinfo`` gives for ``host`` (Java's ``InetAddress.getByName``)."""
    return socket.getaddrinfo(host, None)[0][4][0]


def _ip_literal(value: object) -> Address | None:
    """``value`` as an address if it is an IP literal (or address object), else None.

    An IPv4-mapped IPv6 address is the IPv4 address, as Java's ``InetAddress`` makes it.
    """
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        address = value
    elif isinstance(value, str):
        try:
            address = ipaddress.ip_address(value.strip())
        except ValueError:
            return None
    else:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None and not address.scope_id:
        return address.ipv4_mapped
    return address


def _host_address(address: Address) -> str:
    """Java's ``InetAddress.getHostAddress``: IPv6 as eight uncompressed hex groups (``0:0:0:0:0:0:0:1``)."""
    if address.version == 4:
        return str(address)
    packed = address.packed
    text = ":".join(f"{int.from_bytes(packed[i : i + 2], 'big'):x}" for i in range(0, 16, 2))
    return f"{text}%{address.scope_id}" if address.scope_id else text


def _peer_address(ip: object) -> Address:
    address = _ip_literal(ip)
    if address is None:
        raise ValueError(f"{ip!r} is not an IP address; a connection's peer address must be an IPv4 or IPv6 literal")
    return address


# --- value checks ------------------------------------------------------------------------------------
def _check_now(now_ms: object) -> int:
    if isinstance(now_ms, bool) or not isinstance(now_ms, int):
        raise ValueError(f"now_ms must be an integer of milliseconds, got {now_ms!r}")
    return now_ms


def _int_value(name: str, value: object, minimum: int, *, allow_integral_float: bool = False) -> int:
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


def _check_listener_name(listener: object) -> str:
    if not isinstance(listener, str) or not listener or listener != listener.strip():
        raise ValueError(f"a listener name must be a non-empty string without surrounding spaces, got {listener!r}")
    if _ip_literal(listener) is not None:
        # its sensor would be named like an IP's (Connection-Accept-Rate-<name>)
        raise ValueError(f"a listener name cannot be an IP address, got {listener!r}")
    return listener


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
        if not isinstance(host, str) or not _VALID_HOST.fullmatch(host):
            invalid.append(repr(host))
            continue
        overrides[host] = _int_value(f"{MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG} of {host}", count, 0)
    if invalid:
        raise ValueError(f"{MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG} contains invalid addresses : {','.join(invalid)}")
    return overrides


# --- decisions ---------------------------------------------------------------------------------------
class Admission(enum.Enum):
    """What ``inc`` decided."""

    ADMIT = "admit"
    THROTTLE = "throttle"
    REJECT = "reject"


class ConnectionLimit(enum.Enum):
    """The limit behind a THROTTLE or REJECT; values are Kafka's config names."""

    BROKER_CONNECTIONS = MAX_CONNECTIONS_CONFIG
    LISTENER_CONNECTIONS = LISTENER_CONFIG_PREFIX + "<listener>." + MAX_CONNECTIONS_CONFIG
    IP_CONNECTIONS = MAX_CONNECTIONS_PER_IP_CONFIG
    BROKER_CONNECTION_RATE = MAX_CONNECTION_CREATION_RATE_CONFIG
    LISTENER_CONNECTION_RATE = LISTENER_CONFIG_PREFIX + "<listener>." + MAX_CONNECTION_CREATION_RATE_CONFIG
    IP_CONNECTION_RATE = IP_CONNECTION_RATE_OVERRIDE_CONFIG


@dataclass(frozen=True, slots=True)
class ConnectionAttempt:
    """A connection that Kafka's acceptor would be blocked on; pass it back to ``inc`` to ask again.

    It was recorded once, on the broker and listener rate sensors, when it first arrived
    (``started_ms``); asking again with it records nothing more there. ``throttle_end_ms`` is when
    its rate delay ends (``started_ms`` if it only waits for a slot). ``rate_limit`` names the rate
    limit that set the delay. A token is valid until ``inc`` admits or rejects it, ``abandon`` drops
    it, or its listener is removed.
    """

    attempt_id: int
    listener: str
    ip: str
    started_ms: int
    throttle_end_ms: int
    rate_limit: ConnectionLimit | None = None


@dataclass(frozen=True, slots=True)
class ConnectionDecision:
    """The answer to ``inc``.

    ============== ===========================================================================
    ``kind``       ADMIT, THROTTLE or REJECT
    ``throttle_ms`` THROTTLE: ms left of a rate delay (0: waiting for a free slot).
                   REJECT by ``IP_CONNECTION_RATE``: ms to hold the socket before closing it.
    ``limit``      the limit behind a THROTTLE or REJECT
    ``max_connections`` the count limit named by ``limit`` (count limits only)
    ``attempt``    THROTTLE only: the token to ask again with
    ============== ===========================================================================
    """

    kind: Admission
    listener: str
    ip: str
    throttle_ms: int = 0
    limit: ConnectionLimit | None = None
    max_connections: int | None = None
    attempt: ConnectionAttempt | None = None

    @property
    def admitted(self) -> bool:
        return self.kind is Admission.ADMIT

    @property
    def throttled(self) -> bool:
        return self.kind is Admission.THROTTLE

    @property
    def rejected(self) -> bool:
        return self.kind is Admission.REJECT

    @property
    def waiting_for_slot(self) -> bool:
        """THROTTLE with no rate delay left: a broker or listener ``max.connections`` is reached."""
        return self.kind is Admission.THROTTLE and self.throttle_ms == 0

    @property
    def counted(self) -> bool:
        """True if the connection is in the counts, so the caller must call ``dec`` when it closes.

        True for ADMIT and for a ``max.connections.per.ip`` REJECT (Kafka counts it, then closes it).
        """
        return self.kind is Admission.ADMIT or self.limit is ConnectionLimit.IP_CONNECTIONS


# --- configuration -----------------------------------------------------------------------------------
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
        set_(self, "max_connections", _int_value(MAX_CONNECTIONS_CONFIG, self.max_connections, 0))
        set_(self, "max_connections_per_ip", _int_value(MAX_CONNECTIONS_PER_IP_CONFIG, self.max_connections_per_ip, 0))
        overrides = self.max_connections_per_ip_overrides
        if isinstance(overrides, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in overrides):
            overrides = dict(overrides)
        set_(self, "max_connections_per_ip_overrides", tuple(parse_max_connections_per_ip_overrides(overrides).items()))
        set_(
            self,
            "max_connection_creation_rate",
            _int_value(MAX_CONNECTION_CREATION_RATE_CONFIG, self.max_connection_creation_rate, 0),
        )
        if self.inter_broker_listener is not None:
            _check_listener_name(self.inter_broker_listener)
        set_(self, "num_quota_samples", _int_value(NUM_QUOTA_SAMPLES_CONFIG, self.num_quota_samples, 1))
        set_(
            self,
            "quota_window_size_seconds",
            _int_value(QUOTA_WINDOW_SIZE_SECONDS_CONFIG, self.quota_window_size_seconds, 1),
        )
        if self.max_connections_per_ip == 0 and not self.max_connections_per_ip_overrides:
            raise ValueError(
                f"{MAX_CONNECTIONS_PER_IP_CONFIG} can be set to zero only if "
                f"{MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG} property is set."
            )

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


# --- the manager -------------------------------------------------------------------------------------
class _Listener:
    """One listener's limits, count and sensors (Kafka's ``ListenerConnectionQuota``)."""

    __slots__ = (
        "count",
        "ip_throttle_sensor",
        "max_connection_creation_rate",
        "max_connections",
        "name",
        "rate_metric_name",
        "rate_sensor",
        "throttle_sensor",
    )

    def __init__(self, name: str, max_connections: int, max_connection_creation_rate: int) -> None:
        self.name = name
        self.max_connections = max_connections
        self.max_connection_creation_rate = max_connection_creation_rate
        self.count = 0
        self.rate_sensor: Sensor
        self.rate_metric_name: MetricName
        self.throttle_sensor: Sensor
        self.ip_throttle_sensor: Sensor


class ConnectionQuotas:
    """Connection counts and creation rates per broker, listener and IP, with Kafka's semantics.

    >>> now = 1_700_000_000_000
    >>> quotas = ConnectionQuotas(ConnectionQuotasConfig(max_connections_per_ip=1), now_ms=now)
    >>> quotas.add_listener("EXTERNAL", now_ms=now)
    True
    >>> quotas.inc("EXTERNAL", "10.0.0.1", now).kind
    <Admission.ADMIT: 'admit'>
    >>> d = quotas.inc("EXTERNAL", "10.0.0.1", now)
    >>> d.kind, d.limit, d.counted
    (<Admission.REJECT: 'reject'>, <ConnectionLimit.IP_CONNECTIONS: 'max.connections.per.ip'>, True)
    >>> quotas.dec("EXTERNAL", "10.0.0.1", now); quotas.get("10.0.0.1")
    1
    """

    def __init__(
        self,
        config: ConnectionQuotasConfig | None = None,
        *,
        now_ms: int,
        metrics: Metrics | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        config = config if config is not None else ConnectionQuotasConfig()
        if not isinstance(config, ConnectionQuotasConfig):
            raise ValueError(f"config must be a ConnectionQuotasConfig, got {type(config).__name__}")
        now_ms = _check_now(now_ms)
        self.config = config
        self.metrics = metrics if metrics is not None else Metrics()
        self._resolver: Resolver = resolver if resolver is not None else default_resolver
        self._max_throttle_ms = config.quota_window_size_seconds * 1000

        self._max_connections = config.max_connections
        self._max_connections_per_ip = config.max_connections_per_ip
        self._max_connections_per_ip_overrides = self._resolve_overrides(dict(config.max_connections_per_ip_overrides))
        self._max_connection_creation_rate = config.max_connection_creation_rate
        self._inter_broker_listener = config.inter_broker_listener

        self._counts: dict[Address, int] = {}
        self._total_count = 0
        self._listeners: dict[str, _Listener] = {}
        self._retired_listeners: set[str] = set()

        self._default_connection_rate_per_ip = IP_CONNECTION_RATE_DEFAULT
        self._connection_rate_per_ip: dict[Address, int] = {}
        #: IP rate metrics created so far, so a default change reaches each (Kafka scans the registry)
        self._ip_rate_metric_names: dict[Address, MetricName] = {}

        self._pending: dict[int, ConnectionAttempt] = {}
        self._attempt_ids = itertools.count(1)
        #: Kafka's ``counts.notifyAll()``: moves whenever a caller waiting for a slot may now get one.
        self.wake_epoch = 0

        self._broker_rate_metric_name = self.metrics.metric_name(
            BROKER_CONNECTION_RATE_METRIC_NAME, SOCKET_SERVER_METRICS_GROUP, _RATE_DESCRIPTION
        )
        self._broker_rate_sensor = self._rate_sensor(
            CONNECTION_RATE_SENSOR_NAME,
            self._broker_rate_metric_name,
            self._max_connection_creation_rate,
            now_ms,
            expiration_seconds=math.inf,
        )

    # --- admission -------------------------------------------------------------------------------
    def inc(
        self, listener: str, ip: object, now_ms: int, *, attempt: ConnectionAttempt | None = None
    ) -> ConnectionDecision:
        """Decide on a new connection from ``ip`` on ``listener`` (Kafka's ``ConnectionQuotas.inc``).

        Without ``attempt`` this is a new connection: it is recorded on the broker (unless the
        listener is protected) and listener rate sensors. If either rate is over quota, or no slot
        is free, the answer is THROTTLE with an ``attempt`` to ask again with once
        ``throttle_ms`` has passed (or, for a slot, after a ``dec`` or a limit change).
        Then the IP creation rate is checked (REJECT, un-recorded everywhere, if over), the counts
        are incremented, and the per-IP count is checked on the count before the increment.
        """
        now_ms = _check_now(now_ms)
        address = _peer_address(ip)
        state = self._listener(listener)
        host = _host_address(address)
        if attempt is None:
            throttle_ms, rate_limit = self._record_connection_and_get_throttle_time(state, now_ms)
            if throttle_ms > 0 or not self._connection_slot_available(state):
                attempt = ConnectionAttempt(
                    next(self._attempt_ids), state.name, host, now_ms, now_ms + throttle_ms, rate_limit
                )
                self._pending[attempt.attempt_id] = attempt
                return self._wait_decision(attempt, state, now_ms)
        else:
            self._check_attempt(attempt, state.name, host)
            if now_ms < attempt.throttle_end_ms or not self._connection_slot_available(state):
                return self._wait_decision(attempt, state, now_ms)
            del self._pending[attempt.attempt_id]

        ip_throttle_ms = self._record_ip_connection_and_get_throttle_time(state, address, host, now_ms)
        if ip_throttle_ms > 0:
            return ConnectionDecision(
                Admission.REJECT, state.name, host, throttle_ms=ip_throttle_ms, limit=ConnectionLimit.IP_CONNECTION_RATE
            )

        count_before = self._counts.get(address, 0)
        self._counts[address] = count_before + 1
        self._total_count += 1
        state.count += 1
        max_for_ip = self._max_connections_per_ip_overrides.get(address, self._max_connections_per_ip)
        if count_before >= max_for_ip:
            return ConnectionDecision(
                Admission.REJECT, state.name, host, limit=ConnectionLimit.IP_CONNECTIONS, max_connections=max_for_ip
            )
        return ConnectionDecision(Admission.ADMIT, state.name, host)

    def dec(self, listener: str, ip: object, now_ms: int) -> None:
        """A counted connection closed (Kafka's ``dec``). ValueError if ``ip`` has no connections.

        A removed listener is accepted (its connections close after it is gone): the IP and broker
        counts drop, as in Kafka. A listener never added is a ValueError.
        """
        _check_now(now_ms)
        address = _peer_address(ip)
        if not isinstance(listener, str) or (
            listener not in self._listeners and listener not in self._retired_listeners
        ):
            raise ValueError(f"unknown listener {listener!r}; known listeners: {sorted(self._listeners)}")
        count = self._counts.get(address)
        if count is None:
            raise ValueError(
                "Attempted to decrease connection count for address with no connections, "
                f"address: {_host_address(address)}"
            )
        if count == 1:
            del self._counts[address]
        else:
            self._counts[address] = count - 1
        self._total_count -= 1
        state = self._listeners.get(listener)
        if state is not None and state.count > 0:  # Kafka logs an error and leaves a zero count alone
            state.count -= 1
        self.wake_epoch += 1

    def abandon(self, attempt: ConnectionAttempt) -> bool:
        """Forget a THROTTLEd attempt whose client went away; its rate recordings stay (as in Kafka).

        True if it was pending.
        """
        if not isinstance(attempt, ConnectionAttempt):
            raise ValueError(f"expected a ConnectionAttempt, got {type(attempt).__name__}")
        if self._pending.get(attempt.attempt_id) == attempt:
            del self._pending[attempt.attempt_id]
            return True
        return False

    def abandon_attempts_older_than(self, now_ms: int, max_wait_ms: int) -> list[ConnectionAttempt]:
        """Drop, and return, pending attempts that started more than ``max_wait_ms`` before ``now_ms``."""
        now_ms = _check_now(now_ms)
        if isinstance(max_wait_ms, bool) or not isinstance(max_wait_ms, int) or max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be an integer ≥ 0, got {max_wait_ms!r}")
        stale = [a for a in self._pending.values() if now_ms - a.started_ms > max_wait_ms]
        for a in stale:
            del self._pending[a.attempt_id]
        return stale

    @property
    def pending_attempts(self) -> list[ConnectionAttempt]:
        """Attempts answered THROTTLE and not yet admitted, rejected or abandoned, oldest first."""
        return list(self._pending.values())

    def max_connections_exceeded(self, listener: str) -> bool:
        """Kafka's ``maxConnectionsExceeded``: more than ``max.connections`` (strictly) and not protected.

        Kafka's processors then close their least recently used connection.
        """
        state = self._listener(listener)
        return self._total_count > self._max_connections and not self._protected_listener(state.name)

    def connection_slot_available(self, listener: str) -> bool:
        """True if a new connection on ``listener`` would not wait for a broker or listener slot."""
        return self._connection_slot_available(self._listener(listener))

    # --- reads -----------------------------------------------------------------------------------
    def get(self, ip: object) -> int:
        """Open (counted) connections from ``ip`` (Kafka's ``get``)."""
        return self._counts.get(_peer_address(ip), 0)

    @property
    def total_count(self) -> int:
        return self._total_count

    def listener_count(self, listener: str) -> int:
        return self._listener(listener).count

    @property
    def listeners(self) -> list[str]:
        return list(self._listeners)

    def has_listener(self, listener: str) -> bool:
        """Whether ``listener`` is tracked (added and not removed); no copy of :attr:`listeners`."""
        return listener in self._listeners

    def protected_listener(self, listener: str) -> bool:
        """The inter-broker listener, when more than one listener exists."""
        return self._protected_listener(self._listener(listener).name)

    def connection_rate_for_ip(self, ip: object) -> int:
        """The creation-rate quota for ``ip``: its override, else the default (Kafka's ``connectionRateForIp``)."""
        return self._connection_rate_for(_peer_address(ip))

    @property
    def max_connections(self) -> int:
        return self._max_connections

    @property
    def max_connections_per_ip(self) -> int:
        return self._max_connections_per_ip

    @property
    def max_connections_per_ip_overrides(self) -> dict[str, int]:
        """The overrides by resolved address (Java's host-address form)."""
        return {_host_address(a): n for a, n in self._max_connections_per_ip_overrides.items()}

    @property
    def max_connection_creation_rate(self) -> int:
        return self._max_connection_creation_rate

    @property
    def default_connection_rate_per_ip(self) -> int:
        return self._default_connection_rate_per_ip

    def listener_limits(self, listener: str) -> tuple[int, int]:
        """``(max.connections, max.connection.creation.rate)`` of ``listener``."""
        state = self._listener(listener)
        return state.max_connections, state.max_connection_creation_rate

    # --- listeners -------------------------------------------------------------------------------
    def add_listener(
        self,
        listener: str,
        *,
        now_ms: int,
        max_connections: int | None = None,
        max_connection_creation_rate: int | None = None,
    ) -> bool:
        """Start tracking ``listener`` with its own limits (None: no limit). False if it already exists.

        As in Kafka, adding an existing listener changes nothing (use ``update_listener_config``).
        """
        name = _check_listener_name(listener)
        now_ms = _check_now(now_ms)
        max_conn, max_rate = self._listener_limits(name, max_connections, max_connection_creation_rate)
        if name in self._listeners:
            self.wake_epoch += 1
            return False
        state = _Listener(name, max_conn, max_rate)
        state.rate_metric_name = self.metrics.metric_name(
            CONNECTION_RATE_METRIC_NAME, SOCKET_SERVER_METRICS_GROUP, _RATE_DESCRIPTION, {LISTENER_METRIC_TAG: name}
        )
        state.rate_sensor = self._rate_sensor(
            f"{CONNECTION_RATE_SENSOR_NAME}-{name}",
            state.rate_metric_name,
            max_rate,
            now_ms,
            expiration_seconds=math.inf,
        )
        state.throttle_sensor = self._throttle_sensor(LISTENER_THROTTLE_PREFIX, name, now_ms)
        state.ip_throttle_sensor = self._throttle_sensor(IP_THROTTLE_PREFIX, name, now_ms)
        self._listeners[name] = state
        self._retired_listeners.discard(name)
        self.wake_epoch += 1
        return True

    def remove_listener(self, listener: str) -> None:
        """Stop tracking ``listener``: its count, sensors and pending attempts go; open connections still ``dec``."""
        state = self._listener(listener)
        del self._listeners[state.name]
        self._retired_listeners.add(state.name)
        for sensor in (state.rate_sensor, state.throttle_sensor, state.ip_throttle_sensor):
            self.metrics.remove_sensor(sensor.name)
        for attempt_id in [a.attempt_id for a in self._pending.values() if a.listener == state.name]:
            del self._pending[attempt_id]
        self.wake_epoch += 1

    def update_listener_config(
        self, listener: str, *, max_connections: int | None = None, max_connection_creation_rate: int | None = None
    ) -> None:
        """Replace a listener's limits (Kafka's ``ListenerConnectionQuota.reconfigure``: an absent one is no limit).

        A waiting rate delay is kept (Kafka lets it run out); a raised ``max.connections`` lets
        slot waiters through at their next ask.
        """
        state = self._listener(listener)
        max_conn, max_rate = self._listener_limits(state.name, max_connections, max_connection_creation_rate)
        self._apply_listener_limits(state, max_conn, max_rate)

    # --- broker-wide limits ----------------------------------------------------------------------
    def update_max_connections(self, max_connections: int) -> None:
        """Broker-wide ``max.connections``."""
        self._max_connections = _int_value(MAX_CONNECTIONS_CONFIG, max_connections, 0)
        self.wake_epoch += 1

    def update_max_connections_per_ip(self, max_connections_per_ip: int) -> None:
        """Default ``max.connections.per.ip`` (0 only with overrides, as Kafka requires)."""
        value = _int_value(MAX_CONNECTIONS_PER_IP_CONFIG, max_connections_per_ip, 0)
        self._check_per_ip_zero(value, self._max_connections_per_ip_overrides)
        self._max_connections_per_ip = value

    def update_max_connections_per_ip_overrides(self, overrides: str | Mapping[str, object] | None) -> None:
        """Replace ``max.connections.per.ip.overrides`` (host names are resolved now, with the resolver)."""
        resolved = self._resolve_overrides(parse_max_connections_per_ip_overrides(overrides))
        self._check_per_ip_zero(self._max_connections_per_ip, resolved)
        self._max_connections_per_ip_overrides = resolved

    def update_broker_max_connection_rate(self, max_connection_creation_rate: int) -> None:
        """Broker-wide ``max.connection.creation.rate``; a waiting rate delay is kept, as in Kafka."""
        rate = _int_value(MAX_CONNECTION_CREATION_RATE_CONFIG, max_connection_creation_rate, 0)
        self._max_connection_creation_rate = rate
        self._update_rate_quota(self._broker_rate_metric_name, rate)

    def update_ip_connection_rate_quota(self, ip: object | None, rate: int | None) -> None:
        """Set (``rate``) or remove (None) the ``connection_creation_rate`` of ``ip``, or of the default IP entity
        when ``ip`` is None (Kafka's ``updateIpConnectionRateQuota``).

        ``ip`` may be a host name (resolved with the resolver). The quota of every IP rate sensor that
        the change affects is updated in place; its samples stay.
        """
        address = None if ip is None else self._resolve(ip, what="IP quota entity")
        value = (
            None if rate is None else _int_value(IP_CONNECTION_RATE_OVERRIDE_CONFIG, rate, 0, allow_integral_float=True)
        )
        if address is not None:
            if value is None:
                self._connection_rate_per_ip.pop(address, None)
            else:
                self._connection_rate_per_ip[address] = value
            name = self._ip_rate_metric_names.get(address)
            if name is not None:
                self._update_rate_quota(name, self._connection_rate_for(address))
            return
        self._default_connection_rate_per_ip = value if value is not None else IP_CONNECTION_RATE_DEFAULT
        for addr, name in list(self._ip_rate_metric_names.items()):
            metric = self.metrics.metric(name)
            if metric is None:  # its sensor expired
                del self._ip_rate_metric_names[addr]
                continue
            quota = self._connection_rate_for(addr)
            if metric.config.quota is None or metric.config.quota.bound != quota:
                metric.config = self._rate_config(quota)

    def reconfigure(self, configs: Mapping[str, object]) -> None:
        """Apply dynamic broker configs by Kafka's names; all are validated before any is applied.

        Keys: ``max.connections``, ``max.connections.per.ip``, ``max.connections.per.ip.overrides``,
        ``max.connection.creation.rate`` and ``listener.name.<listener>.max.connections`` /
        ``listener.name.<listener>.max.connection.creation.rate`` (listener in lower case, as
        Kafka's prefix). Absent keys keep their value; a key mapped to None returns to Kafka's
        default (no limit, no overrides). An unknown or static key is a ValueError.
        """
        if not isinstance(configs, Mapping):
            raise ValueError(f"configs must be a mapping of config names to values, got {type(configs).__name__}")
        max_connections: int | None = None
        max_per_ip: int | None = None
        overrides: dict[Address, int] | None = None
        max_rate: int | None = None
        listener_changes: dict[str, dict[str, int]] = {}
        for key, value in configs.items():
            if not isinstance(key, str):
                raise ValueError(f"config names are strings, got {key!r}")
            if key in _STATIC_CONFIGS:
                raise ValueError(f"{key} cannot be changed at runtime")
            if key == MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG:
                overrides = self._resolve_overrides(parse_max_connections_per_ip_overrides(value))
            elif key == MAX_CONNECTIONS_CONFIG:
                max_connections = INT_MAX_VALUE if value is None else _int_value(key, value, 0)
            elif key == MAX_CONNECTIONS_PER_IP_CONFIG:
                max_per_ip = INT_MAX_VALUE if value is None else _int_value(key, value, 0)
            elif key == MAX_CONNECTION_CREATION_RATE_CONFIG:
                max_rate = INT_MAX_VALUE if value is None else _int_value(key, value, 0)
            elif key.startswith(LISTENER_CONFIG_PREFIX):
                state, suffix = self._listener_config_key(key)
                limit = INT_MAX_VALUE if value is None else _int_value(key, value, 1)
                listener_changes.setdefault(state.name, {})[suffix] = limit
            else:
                raise ValueError(
                    f"unknown connection quota config {key!r}; dynamic configs are {MAX_CONNECTIONS_CONFIG}, "
                    f"{MAX_CONNECTIONS_PER_IP_CONFIG}, {MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG}, "
                    f"{MAX_CONNECTION_CREATION_RATE_CONFIG} and {LISTENER_CONFIG_PREFIX}<listener>."
                    f"{{{','.join(_LISTENER_CONFIGS)}}}"
                )
        self._check_per_ip_zero(
            self._max_connections_per_ip if max_per_ip is None else max_per_ip,
            self._max_connections_per_ip_overrides if overrides is None else overrides,
        )

        # everything is valid: apply
        if max_per_ip is not None:
            self._max_connections_per_ip = max_per_ip
        if overrides is not None:
            self._max_connections_per_ip_overrides = overrides
        if max_rate is not None:
            self._max_connection_creation_rate = max_rate
            self._update_rate_quota(self._broker_rate_metric_name, max_rate)
        if max_connections is not None:
            self._max_connections = max_connections
            self.wake_epoch += 1
        for name, changes in listener_changes.items():
            state = self._listeners[name]
            self._apply_listener_limits(
                state,
                changes.get(MAX_CONNECTIONS_CONFIG, state.max_connections),
                changes.get(MAX_CONNECTION_CREATION_RATE_CONFIG, state.max_connection_creation_rate),
            )

    def close(self) -> None:
        """Remove the broker and listener sensors (Kafka's ``close``); IP sensors expire on their own."""
        self.metrics.remove_sensor(self._broker_rate_sensor.name)
        for state in self._listeners.values():
            for sensor in (state.rate_sensor, state.throttle_sensor, state.ip_throttle_sensor):
                self.metrics.remove_sensor(sensor.name)

    # --- internals: limits -----------------------------------------------------------------------
    def _listener(self, listener: object) -> _Listener:
        state = self._listeners.get(listener) if isinstance(listener, str) else None
        if state is None:
            raise ValueError(f"unknown listener {listener!r}; known listeners: {sorted(self._listeners)}")
        return state

    def _listener_config_key(self, key: str) -> tuple[_Listener, str]:
        rest = key[len(LISTENER_CONFIG_PREFIX) :]
        for suffix in _LISTENER_CONFIGS:
            if rest.endswith("." + suffix):
                prefix = rest[: -len(suffix) - 1]
                matches = [s for s in self._listeners.values() if s.name.lower() == prefix.lower()]
                if len(matches) == 1:
                    return matches[0], suffix
                raise ValueError(f"config {key!r} names unknown listener {prefix!r}; known: {sorted(self._listeners)}")
        raise ValueError(f"unknown listener config {key!r}; a listener takes only {', '.join(_LISTENER_CONFIGS)}")

    @staticmethod
    def _listener_limits(name: str, max_connections: object, max_rate: object) -> tuple[int, int]:
        prefix = f"{LISTENER_CONFIG_PREFIX}{name.lower()}."
        max_conn = (
            INT_MAX_VALUE
            if max_connections is None
            else _int_value(prefix + MAX_CONNECTIONS_CONFIG, max_connections, 1)
        )
        rate = (
            INT_MAX_VALUE if max_rate is None else _int_value(prefix + MAX_CONNECTION_CREATION_RATE_CONFIG, max_rate, 1)
        )
        return max_conn, rate

    def _apply_listener_limits(self, state: _Listener, max_connections: int, max_rate: int) -> None:
        state.max_connections = max_connections
        state.max_connection_creation_rate = max_rate
        self._update_rate_quota(state.rate_metric_name, max_rate)
        self.wake_epoch += 1

    @staticmethod
    def _check_per_ip_zero(per_ip: int, overrides: Mapping[Address, int]) -> None:
        if per_ip == 0 and not overrides:
            raise ValueError(
                f"{MAX_CONNECTIONS_PER_IP_CONFIG} can be set to zero only if "
                f"{MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG} property is set."
            )

    def _resolve(self, value: object, *, what: str) -> Address:
        """An IP literal, or a host name resolved once with the resolver (Java's ``InetAddress.getByName``)."""
        address = _ip_literal(value)
        if address is not None:
            return address
        if not isinstance(value, str) or not _VALID_HOST.fullmatch(value):
            raise ValueError(f"{what} {value!r} is not a valid IP address or host name")
        try:
            resolved = self._resolver(value)
        except Exception as e:  # an injected resolver may fail its own way (KeyError, ...)
            raise ValueError(f"{what} {value!r}: unable to resolve address ({e!r})") from e
        address = _ip_literal(resolved)
        if address is None:
            raise ValueError(f"{what} {value!r}: the resolver gave {resolved!r}, which is not an IP address")
        return address

    def _resolve_overrides(self, overrides: Mapping[str, int]) -> dict[Address, int]:
        return {self._resolve(host, what=MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG): n for host, n in overrides.items()}

    def _connection_rate_for(self, address: Address) -> int:
        return self._connection_rate_per_ip.get(address, self._default_connection_rate_per_ip)

    def _protected_listener(self, name: str) -> bool:
        return name == self._inter_broker_listener and len(self._listeners) > 1

    def _connection_slot_available(self, state: _Listener) -> bool:
        if state.count >= state.max_connections:
            return False
        if self._protected_listener(state.name):
            return True
        return self._total_count < self._max_connections

    def _wait_decision(self, attempt: ConnectionAttempt, state: _Listener, now_ms: int) -> ConnectionDecision:
        remaining = attempt.throttle_end_ms - now_ms
        if remaining > 0:
            return ConnectionDecision(
                Admission.THROTTLE,
                state.name,
                attempt.ip,
                throttle_ms=remaining,
                limit=attempt.rate_limit,
                attempt=attempt,
            )
        if state.count >= state.max_connections:
            limit, maximum = ConnectionLimit.LISTENER_CONNECTIONS, state.max_connections
        else:
            limit, maximum = ConnectionLimit.BROKER_CONNECTIONS, self._max_connections
        return ConnectionDecision(
            Admission.THROTTLE, state.name, attempt.ip, limit=limit, max_connections=maximum, attempt=attempt
        )

    def _check_attempt(self, attempt: object, listener: str, host: str) -> None:
        if not isinstance(attempt, ConnectionAttempt):
            raise ValueError(
                f"attempt must be the ConnectionAttempt of a THROTTLE decision, got {type(attempt).__name__}"
            )
        if self._pending.get(attempt.attempt_id) != attempt:
            raise ValueError(
                f"connection attempt {attempt.attempt_id} is not pending (already admitted, rejected or abandoned)"
            )
        if attempt.listener != listener or attempt.ip != host:
            raise ValueError(
                f"connection attempt {attempt.attempt_id} is for {attempt.ip} on {attempt.listener}, "
                f"not {host} on {listener}"
            )

    # --- internals: rates ------------------------------------------------------------------------
    def _rate_config(self, quota_limit: int) -> MetricConfig:
        return MetricConfig(
            samples=self.config.num_quota_samples,
            time_window_ms=self.config.quota_window_ms,
            quota=Quota.upper_bound(quota_limit),
        )

    def _rate_sensor(
        self, sensor_name: str, metric_name: MetricName, quota_limit: int, now_ms: int, *, expiration_seconds: float
    ) -> Sensor:
        sensor = self.metrics.get_sensor(sensor_name)
        if sensor is None:
            sensor = self.metrics.sensor(
                sensor_name,
                self._rate_config(quota_limit),
                now_ms=now_ms,
                inactive_sensor_expiration_time_seconds=expiration_seconds,
            )
            sensor.add(metric_name, Rate())
        return sensor

    def _throttle_sensor(self, prefix: str, listener: str, now_ms: int) -> Sensor:
        sensor = self.metrics.sensor(f"{prefix}ConnectionRateThrottleTime-{listener}", now_ms=now_ms)
        sensor.add(
            self.metrics.metric_name(
                f"{prefix}connection-accept-throttle-time",
                SOCKET_SERVER_METRICS_GROUP,
                _THROTTLE_DESCRIPTION,
                {LISTENER_METRIC_TAG: listener},
            ),
            Avg(),
        )
        return sensor

    def _update_rate_quota(self, metric_name: MetricName, quota_limit: int) -> None:
        metric = self.metrics.metric(metric_name)
        if metric is not None:
            metric.config = self._rate_config(quota_limit)

    def _record_and_get_throttle_time(self, sensor: Sensor, now_ms: int) -> int:
        try:
            sensor.record(1.0, now_ms)
        except QuotaViolationError as e:
            if e.bound <= 0:
                # a zero quota: Java's (v - 0) / 0 is +Infinity, Math.round gives Long.MAX_VALUE, then the cap
                return self._max_throttle_ms
            return bounded_throttle_time(e, self._max_throttle_ms, now_ms)
        return 0

    def _record_connection_and_get_throttle_time(
        self, state: _Listener, now_ms: int
    ) -> tuple[int, ConnectionLimit | None]:
        """Kafka's ``recordConnectionAndGetThrottleTimeMs``: the longer of the broker and listener delays."""
        broker_ms = 0
        if not self._protected_listener(state.name):
            broker_ms = self._record_and_get_throttle_time(self._broker_rate_sensor, now_ms)
        listener_ms = self._record_and_get_throttle_time(state.rate_sensor, now_ms)
        throttle_ms = max(broker_ms, listener_ms)
        if throttle_ms <= 0:
            return 0, None
        state.throttle_sensor.record(float(throttle_ms), now_ms)
        if broker_ms >= listener_ms:
            return throttle_ms, ConnectionLimit.BROKER_CONNECTION_RATE
        return throttle_ms, ConnectionLimit.LISTENER_CONNECTION_RATE

    def _record_ip_connection_and_get_throttle_time(
        self, state: _Listener, address: Address, host: str, now_ms: int
    ) -> int:
        """Kafka's ``recordIpConnectionMaybeThrottle``: a throttled connection is un-recorded from the IP,
        listener and (unless the listener is protected) broker rates."""
        quota = self._connection_rate_for(address)
        if quota == IP_CONNECTION_RATE_DEFAULT:
            return 0
        sensor_name = f"{CONNECTION_RATE_SENSOR_NAME}-{host}"
        metric_name = self.metrics.metric_name(
            CONNECTION_RATE_METRIC_NAME, SOCKET_SERVER_METRICS_GROUP, _RATE_DESCRIPTION, {IP_METRIC_TAG: host}
        )
        sensor = self._rate_sensor(
            sensor_name, metric_name, quota, now_ms, expiration_seconds=IP_SENSOR_EXPIRATION_SECONDS
        )
        self._ip_rate_metric_names[address] = metric_name
        throttle_ms = self._record_and_get_throttle_time(sensor, now_ms)
        if throttle_ms > 0:
            sensor.record(-1.0, now_ms, check_quotas=False)
            if not self._protected_listener(state.name):
                self._broker_rate_sensor.record(-1.0, now_ms, check_quotas=False)
            state.ip_throttle_sensor.record(float(throttle_ms), now_ms)
            state.rate_sensor.record(-1.0, now_ms, check_quotas=False)
        return throttle_ms
