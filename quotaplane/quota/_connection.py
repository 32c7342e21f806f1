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

import itertools
from collections.abc import Mapping

from ..metrics import MetricName, Metrics
from ._connection_config import (
    IP_CONNECTION_RATE_DEFAULT,
    IP_CONNECTION_RATE_OVERRIDE_CONFIG,
    LISTENER_CONFIG_PREFIX,
    LISTENER_CONFIGS,
    MAX_CONNECTION_CREATION_RATE_CONFIG,
    MAX_CONNECTIONS_CONFIG,
    MAX_CONNECTIONS_PER_IP_CONFIG,
    MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG,
    STATIC_CONFIGS,
    VALID_HOST,
    ConnectionQuotasConfig,
    check_now,
    check_per_ip_zero,
    int_config,
    parse_max_connections_per_ip_overrides,
)
from ._connection_decision import Admission, ConnectionAttempt, ConnectionDecision, ConnectionLimit
from ._connection_sensors import ConnectionSensors, ListenerConnectionQuota
from ._normalise import Address, Resolver, check_listener_name, default_resolver, host_address, ip_literal, peer_address
from .throttle import INT_MAX_VALUE

__all__ = ["ConnectionQuotas"]


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
        now_ms = check_now(now_ms)
        self.config = config
        self.metrics = metrics if metrics is not None else Metrics()
        self._resolver: Resolver = resolver if resolver is not None else default_resolver
        self._sensors = ConnectionSensors(
            self.metrics, num_quota_samples=config.num_quota_samples, quota_window_ms=config.quota_window_ms
        )

        self._max_connections = config.max_connections
        self._max_connections_per_ip = config.max_connections_per_ip
        self._max_connections_per_ip_overrides = self._resolve_overrides(dict(config.max_connections_per_ip_overrides))
        self._max_connection_creation_rate = config.max_connection_creation_rate
        self._inter_broker_listener = config.inter_broker_listener

        self._counts: dict[Address, int] = {}
        self._total_count = 0
        self._listeners: dict[str, ListenerConnectionQuota] = {}
        self._retired_listeners: set[str] = set()

        self._default_connection_rate_per_ip = IP_CONNECTION_RATE_DEFAULT
        self._connection_rate_per_ip: dict[Address, int] = {}
        #: IP rate metrics created so far, so a default change reaches each (Kafka scans the registry)
        self._ip_rate_metric_names: dict[Address, MetricName] = {}

        self._pending: dict[int, ConnectionAttempt] = {}
        self._attempt_ids = itertools.count(1)
        #: Kafka's ``counts.notifyAll()``: moves whenever a caller waiting for a slot may now get one.
        self.wake_epoch = 0

        self._broker_rate_sensor, self._broker_rate_metric_name = self._sensors.broker_rate_sensor(
            self._max_connection_creation_rate, now_ms
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
        now_ms = check_now(now_ms)
        address = peer_address(ip)
        state = self._listener(listener)
        host = host_address(address)
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
        check_now(now_ms)
        address = peer_address(ip)
        if not isinstance(listener, str) or (
            listener not in self._listeners and listener not in self._retired_listeners
        ):
            raise ValueError(f"unknown listener {listener!r}; known listeners: {sorted(self._listeners)}")
        count = self._counts.get(address)
        if count is None:
            raise ValueError(
                "Attempted to decrease connection count for address with no connections, "
                f"address: {host_address(address)}"
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
        now_ms = check_now(now_ms)
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
        return self._counts.get(peer_address(ip), 0)

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
        return self._connection_rate_for(peer_address(ip))

    @property
    def max_connections(self) -> int:
        return self._max_connections

    @property
    def max_connections_per_ip(self) -> int:
        return self._max_connections_per_ip

    @property
    def max_connections_per_ip_overrides(self) -> dict[str, int]:
        """The overrides by resolved address (Java's host-address form)."""
        return {host_address(a): n for a, n in self._max_connections_per_ip_overrides.items()}

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
        name = check_listener_name(listener)
        now_ms = check_now(now_ms)
        max_conn, max_rate = self._listener_limits(name, max_connections, max_connection_creation_rate)
        if name in self._listeners:
            self.wake_epoch += 1
            return False
        self._listeners[name] = self._sensors.listener(name, max_conn, max_rate, now_ms)
        self._retired_listeners.discard(name)
        self.wake_epoch += 1
        return True

    def remove_listener(self, listener: str) -> None:
        """Stop tracking ``listener``: its count, sensors and pending attempts go; open connections still ``dec``."""
        state = self._listener(listener)
        del self._listeners[state.name]
        self._retired_listeners.add(state.name)
        self._sensors.remove_listener(state)
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
        self._max_connections = int_config(MAX_CONNECTIONS_CONFIG, max_connections, 0)
        self.wake_epoch += 1

    def update_max_connections_per_ip(self, max_connections_per_ip: int) -> None:
        """Default ``max.connections.per.ip`` (0 only with overrides, as Kafka requires)."""
        value = int_config(MAX_CONNECTIONS_PER_IP_CONFIG, max_connections_per_ip, 0)
        check_per_ip_zero(value, self._max_connections_per_ip_overrides)
        self._max_connections_per_ip = value

    def update_max_connections_per_ip_overrides(self, overrides: str | Mapping[str, object] | None) -> None:
        """Replace ``max.connections.per.ip.overrides`` (host names are resolved now, with the resolver)."""
        resolved = self._resolve_overrides(parse_max_connections_per_ip_overrides(overrides))
        check_per_ip_zero(self._max_connections_per_ip, resolved)
        self._max_connections_per_ip_overrides = resolved

    def update_broker_max_connection_rate(self, max_connection_creation_rate: int) -> None:
        """Broker-wide ``max.connection.creation.rate``; a waiting rate delay is kept, as in Kafka."""
        rate = int_config(MAX_CONNECTION_CREATION_RATE_CONFIG, max_connection_creation_rate, 0)
        self._max_connection_creation_rate = rate
        self._sensors.update_rate_quota(self._broker_rate_metric_name, rate)

    def update_ip_connection_rate_quota(self, ip: object | None, rate: int | None) -> None:
        """Set (``rate``) or remove (None) the ``connection_creation_rate`` of ``ip``, or of the default IP entity
        when ``ip`` is None (Kafka's ``updateIpConnectionRateQuota``).

        ``ip`` may be a host name (resolved with the resolver). The quota of every IP rate sensor that
        the change affects is updated in place; its samples stay.
        """
        address = None if ip is None else self._resolve(ip, what="IP quota entity")
        value = (
            None if rate is None else int_config(IP_CONNECTION_RATE_OVERRIDE_CONFIG, rate, 0, allow_integral_float=True)
        )
        if address is not None:
            if value is None:
                self._connection_rate_per_ip.pop(address, None)
            else:
                self._connection_rate_per_ip[address] = value
            name = self._ip_rate_metric_names.get(address)
            if name is not None:
                self._sensors.update_rate_quota(name, self._connection_rate_for(address))
            return
        self._default_connection_rate_per_ip = value if value is not None else IP_CONNECTION_RATE_DEFAULT
        for addr, name in list(self._ip_rate_metric_names.items()):
            metric = self.metrics.metric(name)
            if metric is None:  # its sensor expired
                del self._ip_rate_metric_names[addr]
                continue
            quota = self._connection_rate_for(addr)
            if metric.config.quota is None or metric.config.quota.bound != quota:
                metric.config = self._sensors.rate_config(quota)

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
            if key in STATIC_CONFIGS:
                raise ValueError(f"{key} cannot be changed at runtime")
            if key == MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG:
                overrides = self._resolve_overrides(parse_max_connections_per_ip_overrides(value))
            elif key == MAX_CONNECTIONS_CONFIG:
                max_connections = INT_MAX_VALUE if value is None else int_config(key, value, 0)
            elif key == MAX_CONNECTIONS_PER_IP_CONFIG:
                max_per_ip = INT_MAX_VALUE if value is None else int_config(key, value, 0)
            elif key == MAX_CONNECTION_CREATION_RATE_CONFIG:
                max_rate = INT_MAX_VALUE if value is None else int_config(key, value, 0)
            elif key.startswith(LISTENER_CONFIG_PREFIX):
                state, suffix = self._listener_config_key(key)
                limit = INT_MAX_VALUE if value is None else int_config(key, value, 1)
                listener_changes.setdefault(state.name, {})[suffix] = limit
            else:
                raise ValueError(
                    f"unknown connection quota config {key!r}; dynamic configs are {MAX_CONNECTIONS_CONFIG}, "
                    f"{MAX_CONNECTIONS_PER_IP_CONFIG}, {MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG}, "
                    f"{MAX_CONNECTION_CREATION_RATE_CONFIG} and {LISTENER_CONFIG_PREFIX}<listener>."
                    f"{{{','.join(LISTENER_CONFIGS)}}}"
                )
        check_per_ip_zero(
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
            self._sensors.update_rate_quota(self._broker_rate_metric_name, max_rate)
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
            self._sensors.remove_listener(state)

    # --- internals: limits -----------------------------------------------------------------------
    def _listener(self, listener: object) -> ListenerConnectionQuota:
        state = self._listeners.get(listener) if isinstance(listener, str) else None
        if state is None:
            raise ValueError(f"unknown listener {listener!r}; known listeners: {sorted(self._listeners)}")
        return state

    def _listener_config_key(self, key: str) -> tuple[ListenerConnectionQuota, str]:
        rest = key[len(LISTENER_CONFIG_PREFIX) :]
        for suffix in LISTENER_CONFIGS:
            if rest.endswith("." + suffix):
                prefix = rest[: -len(suffix) - 1]
                matches = [s for s in self._listeners.values() if s.name.lower() == prefix.lower()]
                if len(matches) == 1:
                    return matches[0], suffix
                raise ValueError(f"config {key!r} names unknown listener {prefix!r}; known: {sorted(self._listeners)}")
        raise ValueError(f"unknown listener config {key!r}; a listener takes only {', '.join(LISTENER_CONFIGS)}")

    @staticmethod
    def _listener_limits(name: str, max_connections: object, max_rate: object) -> tuple[int, int]:
        prefix = f"{LISTENER_CONFIG_PREFIX}{name.lower()}."
        max_conn = (
            INT_MAX_VALUE
            if max_connections is None
            else int_config(prefix + MAX_CONNECTIONS_CONFIG, max_connections, 1)
        )
        rate = (
            INT_MAX_VALUE if max_rate is None else int_config(prefix + MAX_CONNECTION_CREATION_RATE_CONFIG, max_rate, 1)
        )
        return max_conn, rate

    def _apply_listener_limits(self, state: ListenerConnectionQuota, max_connections: int, max_rate: int) -> None:
        state.max_connections = max_connections
        state.max_connection_creation_rate = max_rate
        self._sensors.update_rate_quota(state.rate_metric_name, max_rate)
        self.wake_epoch += 1

    def _resolve(self, value: object, *, what: str) -> Address:
        """An IP literal, or a host name resolved once with the resolver (Java's ``InetAddress.getByName``)."""
        address = ip_literal(value)
        if address is not None:
            return address
        if not isinstance(value, str) or not VALID_HOST.fullmatch(value):
            raise ValueError(f"{what} {value!r} is not a valid IP address or host name")
        try:
            resolved = self._resolver(value)
        except Exception as e:  # an injected resolver may fail its own way (KeyError, ...)
            raise ValueError(f"{what} {value!r}: unable to resolve address ({e!r})") from e
        address = ip_literal(resolved)
        if address is None:
            raise ValueError(f"{what} {value!r}: the resolver gave {resolved!r}, which is not an IP address")
        return address

    def _resolve_overrides(self, overrides: Mapping[str, int]) -> dict[Address, int]:
        return {self._resolve(host, what=MAX_CONNECTIONS_PER_IP_OVERRIDES_CONFIG): n for host, n in overrides.items()}

    def _connection_rate_for(self, address: Address) -> int:
        return self._connection_rate_per_ip.get(address, self._default_connection_rate_per_ip)

    def _protected_listener(self, name: str) -> bool:
        return name == self._inter_broker_listener and len(self._listeners) > 1

    def _connection_slot_available(self, state: ListenerConnectionQuota) -> bool:
        if state.count >= state.max_connections:
            return False
        if self._protected_listener(state.name):
            return True
        return self._total_count < self._max_connections

    def _wait_decision(
        self, attempt: ConnectionAttempt, state: ListenerConnectionQuota, now_ms: int
    ) -> ConnectionDecision:
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
    def _record_connection_and_get_throttle_time(
        self, state: ListenerConnectionQuota, now_ms: int
    ) -> tuple[int, ConnectionLimit | None]:
        """Kafka's ``recordConnectionAndGetThrottleTimeMs``: the longer of the broker and listener delays."""
        broker_ms = 0
        if not self._protected_listener(state.name):
            broker_ms = self._sensors.record_and_get_throttle_time(self._broker_rate_sensor, now_ms)
        listener_ms = self._sensors.record_and_get_throttle_time(state.rate_sensor, now_ms)
        throttle_ms = max(broker_ms, listener_ms)
        if throttle_ms <= 0:
            return 0, None
        state.throttle_sensor.record(float(throttle_ms), now_ms)
        if broker_ms >= listener_ms:
            return throttle_ms, ConnectionLimit.BROKER_CONNECTION_RATE
        return throttle_ms, ConnectionLimit.LISTENER_CONNECTION_RATE

    def _record_ip_connection_and_get_throttle_time(
        self, state: ListenerConnectionQuota, address: Address, host: str, now_ms: int
    ) -> int:
        """Kafka's ``recordIpConnectionMaybeThrottle``: a throttled connection is un-recorded from the IP,
        listener and (unless the listener is protected) broker rates."""
        quota = self._connection_rate_for(address)
        if quota == IP_CONNECTION_RATE_DEFAULT:
            return 0
        sensor, metric_name = self._sensors.ip_rate_sensor(host, quota, now_ms)
        self._ip_rate_metric_names[address] = metric_name
        throttle_ms = self._sensors.record_and_get_throttle_time(sensor, now_ms)
        if throttle_ms > 0:
            sensor.record(-1.0, now_ms, check_quotas=False)
            if not self._protected_listener(state.name):
                self._broker_rate_sensor.record(-1.0, now_ms, check_quotas=False)
            state.ip_throttle_sensor.record(float(throttle_ms), now_ms)
            state.rate_sensor.record(-1.0, now_ms, check_quotas=False)
        return throttle_ms
