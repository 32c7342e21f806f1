"""The whole state of one ``ConnectionQuotas`` copied out and into another (a reshard moves a node's state).

Connection state is per node (one Kafka broker's ``ConnectionQuotas``), so a reshard moves it whole: the
counts per IP and per listener, the listeners removed while connections on them are still open (their
``dec`` is still accepted), the attempts answered THROTTLE and not yet decided, the attempt id counter (so
the next attempt gets the id the giver would have given) and every sampled sensor: the broker, listener and
IP creation-rate sensors (the windows a rate delay is computed from) and the listeners' accept throttle-time
sensors (reported only). Each sensor is copied with its samples exactly as ``SampledStat`` keeps them and
the time of its last recording (an IP sensor expires an hour after it), so a receiver continues bit for
bit: same decisions, same throttle times, same metric values.

Limits are config: the receiver's ``ConnectionQuotas`` is built from the same config, and its own limits
(broker, per IP, overrides, IP rate quotas) stand. A listener the receiver does not have yet is added with
the limits the giver had for it (the same config gives the same); a sensor is created through the
receiver's own path, so it carries the quota the receiver's config gives it, then gets the samples.

Import **replaces** the receiver's state (the key is the whole node): listeners not in the snapshot are
dropped with their sensors, IP sensors likewise. A snapshot that does not fit (another layout version,
other quota windows, columns that do not fit together, a bad address, name or count) raises ValueError
before anything changes.

:class:`SampledSensors` (sensors with one sampled stat each, as columns) serves the replication state too.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..metrics import Rate, SampledStat, Sensor
from ._connection import ConnectionQuotas
from ._connection_decision import ConnectionAttempt, ConnectionLimit
from ._connection_sensors import CONNECTION_RATE_SENSOR_NAME, IP_THROTTLE_PREFIX, LISTENER_THROTTLE_PREFIX
from ._normalise import check_listener_name, host_address, peer_address
from .throttle import INT_MAX_VALUE

__all__ = [
    "CONNECTION_STATE_VERSION",
    "ConnectionState",
    "SampledSensors",
    "attempt_from_tuple",
    "attempt_tuple",
    "export_connection_state",
    "import_connection_state",
    "sampled_stat",
]

#: Bumped on any change of the layout; a state of another version is a ValueError.
CONNECTION_STATE_VERSION = 1
_LONG = 2**63 - 1

#: ``(attempt_id, listener, ip, started_ms, throttle_end_ms, rate limit name or None)``
AttemptTuple = tuple[int, str, str, int, int, str | None]


def sampled_stat(sensor: Sensor) -> SampledStat | None:
    """The sampled stat of a sensor with one metric (a ``Rate``'s samples, or the stat itself), else None."""
    metrics = sensor.metrics
    if len(metrics) != 1:
        return None
    stat = metrics[0].stat
    if isinstance(stat, Rate):
        stat = stat.stat
    return stat if isinstance(stat, SampledStat) else None


@dataclass(slots=True)
class SampledSensors:
    """Sensors of one sampled stat each, as columns: sensor ``k`` is ``names[k]``, ``last_records[k]``,
    ``currents[k]`` and ``sizes[k]`` consecutive entries of ``starts`` / ``lasts`` / ``counts`` / ``values``."""

    names: list[str] = field(default_factory=list)
    last_records: array = field(default_factory=lambda: array("q"))
    currents: array = field(default_factory=lambda: array("q"))
    sizes: array = field(default_factory=lambda: array("q"))
    starts: array = field(default_factory=lambda: array("q"))
    lasts: array = field(default_factory=lambda: array("q"))
    counts: array = field(default_factory=lambda: array("q"))
    values: array = field(default_factory=lambda: array("d"))

    def add(self, sensor: Sensor) -> None:
        """Copy ``sensor`` (ValueError if it does not hold exactly one sampled stat)."""
        stat = sampled_stat(sensor)
        if stat is None:
            raise ValueError(f"sensor {sensor.name!r} does not hold one sampled stat")
        current, size = stat.export_samples_into(self.starts, self.lasts, self.values, self.counts)
        self.names.append(sensor.name)
        self.last_records.append(int(sensor.last_record_time_ms))
        self.currents.append(current)
        self.sizes.append(size)

    def check(self, max_samples: Callable[[str], int]) -> None:
        """ValueError unless the columns fit together and sensor ``name`` fits ``max_samples(name) + 1`` slots."""
        typecodes = {"last_records": "q", "currents": "q", "sizes": "q", "starts": "q", "lasts": "q", "counts": "q"}
        for column, code in (*typecodes.items(), ("values", "d")):
            values = getattr(self, column)
            if not isinstance(values, array) or values.typecode != code:
                raise ValueError(f"sensor state: column {column} must be an array of {code!r}")
        n = len(self.names)
        if not (len(self.last_records) == len(self.currents) == len(self.sizes) == n):
            raise ValueError("sensor state: per-sensor columns of different lengths")
        if not (len(self.starts) == len(self.lasts) == len(self.counts) == len(self.values) == sum(self.sizes)):
            raise ValueError("sensor state: sample columns do not hold the sensors' samples")
        if len(set(self.names)) != n:
            raise ValueError("sensor state: a sensor appears twice")
        for name, size, current in zip(self.names, self.sizes, self.currents, strict=True):
            limit = max_samples(name) + 1
            if not 0 <= size <= limit:
                raise ValueError(f"sensor state: {size} samples of {name!r} do not fit {limit} slots")
            if not (0 <= current < size or current == size == 0):
                raise ValueError(f"sensor state: current sample {current} of {name!r} outside {size} samples")

    def entries(self) -> Iterator[tuple[str, int, int, list[list[Any]]]]:
        """``(name, last record ms, current, [starts, lasts, values, counts])`` per sensor, in order."""
        at = 0
        for name, last_record, current, size in zip(
            self.names, self.last_records, self.currents, self.sizes, strict=True
        ):
            end = at + size
            columns = [column[at:end].tolist() for column in (self.starts, self.lasts, self.values, self.counts)]
            yield name, last_record, current, columns
            at = end

    def restore(self, sensors: dict[str, Sensor]) -> None:
        """Put each sensor's samples and last recording time into the sensor of that name (all present)."""
        for name, last_record, current, columns in self.entries():
            sensor = sensors[name]
            stat = sampled_stat(sensor)
            assert stat is not None  # checked by the caller before any change
            stat.restore_samples(current, *columns, max_samples=sensor.metrics[0].config.samples)
            sensor.last_record_time_ms = last_record


@dataclass(frozen=True, slots=True)
class ConnectionState:
    """One ``ConnectionQuotas``' state (see the module docstring). Plain data: it pickles."""

    #: ``(quota.window.num, quota window ms, the registry's default samples, its window ms)``
    windows: tuple[int, int, int, int]
    #: per IP (Java's host-address form), its open connections
    counts: tuple[tuple[str, int], ...]
    #: per listener, in order: ``(name, count, max.connections, max.connection.creation.rate)``
    listeners: tuple[tuple[str, int, int, int], ...]
    retired_listeners: tuple[str, ...]
    pending: tuple[AttemptTuple, ...]
    next_attempt_id: int
    wake_epoch: int
    #: the IPs with a creation-rate sensor, in the order their sensors follow the others in ``sensors``
    ip_hosts: tuple[str, ...]
    #: the broker's rate sensor, each listener's rate, throttle and ip-throttle sensors, then the IPs' ones
    sensors: SampledSensors
    version: int = CONNECTION_STATE_VERSION

    def sensor_names(self) -> list[str]:
        """The sensor names ``sensors`` must hold, in order."""
        names = [CONNECTION_RATE_SENSOR_NAME]
        for listener, *_ in self.listeners:
            names += _listener_sensor_names(listener)
        return names + [f"{CONNECTION_RATE_SENSOR_NAME}-{host}" for host in self.ip_hosts]

    def check(self, quotas: ConnectionQuotas) -> None:
        """ValueError unless this state fits ``quotas`` (same windows) and holds only valid values."""
        if self.version != CONNECTION_STATE_VERSION:
            raise ValueError(f"connection state of version {self.version!r}, expected {CONNECTION_STATE_VERSION}")
        if tuple(self.windows) != _windows(quotas):
            raise ValueError(
                f"connection state taken with windows {self.windows}, these quotas have {_windows(quotas)}"
            )
        for host, count in self.counts:
            _canonical_ip(host)
            _int(count, "a connection count", 1)
        if len({host for host, _ in self.counts}) != len(self.counts):
            raise ValueError("connection state: an IP counted twice")
        names = [listener for listener, *_ in self.listeners]
        for listener, count, max_connections, max_rate in self.listeners:
            if check_listener_name(listener) != listener:
                raise ValueError(f"connection state: listener {listener!r} is not in Kafka's normalised form")
            _int(count, "a listener count", 0)
            _int(max_connections, "a listener's max.connections", 1, INT_MAX_VALUE)
            _int(max_rate, "a listener's max.connection.creation.rate", 1, INT_MAX_VALUE)
        if len(set(names)) != len(names):
            raise ValueError("connection state: a listener appears twice")
        for listener in self.retired_listeners:
            if not isinstance(listener, str) or listener in names:
                raise ValueError(f"connection state: retired listener {listener!r} is also live, or not a name")
        _int(self.next_attempt_id, "the next attempt id", 1)
        _int(self.wake_epoch, "the wake epoch", 0)
        ids = set()
        for attempt in self.pending:
            made = attempt_from_tuple(attempt)
            if made.listener not in names or made.attempt_id >= self.next_attempt_id or made.attempt_id in ids:
                raise ValueError(f"connection state: pending attempt {attempt!r} does not fit the listeners or ids")
            ids.add(made.attempt_id)
        for host in self.ip_hosts:
            _canonical_ip(host)
        if len(set(self.ip_hosts)) != len(self.ip_hosts):
            raise ValueError("connection state: an IP sensor appears twice")
        if list(self.sensors.names) != self.sensor_names():
            raise ValueError("connection state: the sensors are not the broker's, the listeners' and the IPs'")
        num_samples, _, default_samples, _ = self.windows
        throttle = {name for listener, *_ in self.listeners for name in _listener_sensor_names(listener)[1:]}
        self.sensors.check(lambda name: default_samples if name in throttle else num_samples)


def attempt_tuple(attempt: ConnectionAttempt) -> AttemptTuple:
    """A ``ConnectionAttempt`` as plain values."""
    limit = None if attempt.rate_limit is None else attempt.rate_limit.name
    return (attempt.attempt_id, attempt.listener, attempt.ip, attempt.started_ms, attempt.throttle_end_ms, limit)


def attempt_from_tuple(values: Sequence[Any]) -> ConnectionAttempt:
    """The ``ConnectionAttempt`` of :func:`attempt_tuple`; ValueError for values no attempt has."""
    if not isinstance(values, tuple) or len(values) != 6:
        raise ValueError(f"an attempt is 6 values, got {values!r}")
    attempt_id, listener, ip, started_ms, throttle_end_ms, limit = values
    _int(attempt_id, "an attempt id", 1)
    _int(started_ms, "an attempt's start", 0)
    _int(throttle_end_ms, "an attempt's throttle end", started_ms)
    if not isinstance(listener, str) or limit not in (None, *ConnectionLimit.__members__):
        raise ValueError(f"an attempt's listener or limit is not valid: {values!r}")
    _canonical_ip(ip)
    rate_limit = None if limit is None else ConnectionLimit[limit]
    return ConnectionAttempt(attempt_id, listener, ip, started_ms, throttle_end_ms, rate_limit)


def export_connection_state(quotas: ConnectionQuotas) -> ConnectionState:
    """A copy of ``quotas``' state (see the module docstring)."""
    sensors = SampledSensors()
    registry = quotas.metrics
    sensors.add(quotas._broker_rate_sensor)
    listeners = []
    for state in quotas._listeners.values():
        for sensor in (state.rate_sensor, state.throttle_sensor, state.ip_throttle_sensor):
            sensors.add(sensor)
        listeners.append((state.name, state.count, state.max_connections, state.max_connection_creation_rate))
    ip_hosts = []
    for address in quotas._ip_rate_metric_names:
        host = host_address(address)
        sensor = registry.get_sensor(f"{CONNECTION_RATE_SENSOR_NAME}-{host}")
        if sensor is not None:  # else it expired: the name is dropped lazily
            sensors.add(sensor)
            ip_hosts.append(host)
    # the counter's next value: taken, and the counter continued from it (nothing visible changes)
    next_attempt_id = next(quotas._attempt_ids)
    quotas._attempt_ids = itertools.count(next_attempt_id)
    return ConnectionState(
        windows=_windows(quotas),
        counts=tuple((host_address(address), count) for address, count in quotas._counts.items()),
        listeners=tuple(listeners),
        retired_listeners=tuple(sorted(quotas._retired_listeners)),
        pending=tuple(attempt_tuple(a) for a in quotas._pending.values()),
        next_attempt_id=next_attempt_id,
        wake_epoch=quotas.wake_epoch,
        ip_hosts=tuple(ip_hosts),
        sensors=sensors,
    )


def import_connection_state(
    quotas: ConnectionQuotas, state: ConnectionState, now_ms: int, *, check: bool = True
) -> dict[int, ConnectionAttempt]:
    """Replace ``quotas``' state with ``state`` (ValueError, before any change, if it does not fit; ``check``
    False only when the caller has just called ``state.check(quotas)``). The pending attempts by id."""
    if not isinstance(state, ConnectionState):
        raise ValueError(f"expected a ConnectionState, got {type(state).__name__}")
    _int(now_ms, "now_ms", 0)
    if check:
        state.check(quotas)
    registry, sensors = quotas.metrics, quotas._sensors
    # listeners: the receiver's own (its limits) where it has them, the giver's limits for new ones
    wanted = {name for name, *_ in state.listeners}
    for name in [name for name in quotas._listeners if name not in wanted]:
        sensors.remove_listener(quotas._listeners.pop(name))
    for name, _, max_connections, max_rate in state.listeners:
        if name not in quotas._listeners:
            quotas._listeners[name] = sensors.listener(name, max_connections, max_rate, now_ms)
    quotas._listeners = {name: quotas._listeners[name] for name, *_ in state.listeners}
    for name, count, *_ in state.listeners:
        quotas._listeners[name].count = count
    quotas._retired_listeners = set(state.retired_listeners)
    quotas._counts = {peer_address(host): count for host, count in state.counts}
    quotas._total_count = sum(quotas._counts.values())
    # IP sensors: exactly the snapshot's, each with the quota the receiver's config gives its IP
    for address in quotas._ip_rate_metric_names:
        registry.remove_sensor(f"{CONNECTION_RATE_SENSOR_NAME}-{host_address(address)}")
    quotas._ip_rate_metric_names = {}
    for host in state.ip_hosts:
        address = peer_address(host)
        _, metric_name = sensors.ip_rate_sensor(host, quotas._connection_rate_for(address), now_ms)
        quotas._ip_rate_metric_names[address] = metric_name
    state.sensors.restore(registry.sensors)
    pending = {a.attempt_id: a for a in map(attempt_from_tuple, state.pending)}
    quotas._pending = dict(pending)
    quotas._attempt_ids = itertools.count(state.next_attempt_id)
    quotas.wake_epoch = state.wake_epoch
    return pending


def _listener_sensor_names(listener: str) -> list[str]:
    return [
        f"{CONNECTION_RATE_SENSOR_NAME}-{listener}",
        f"{LISTENER_THROTTLE_PREFIX}ConnectionRateThrottleTime-{listener}",
        f"{IP_THROTTLE_PREFIX}ConnectionRateThrottleTime-{listener}",
    ]


def _windows(quotas: ConnectionQuotas) -> tuple[int, int, int, int]:
    default = quotas.metrics.config
    return (quotas.config.num_quota_samples, quotas.config.quota_window_ms, default.samples, default.time_window_ms)


def _canonical_ip(host: object) -> None:
    if not isinstance(host, str) or host_address(peer_address(host)) != host:
        raise ValueError(f"connection state: {host!r} is not an IP in Java's host-address form")


def _int(value: object, what: str, low: int, high: int = _LONG) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"connection state: {what} must be an int in [{low}, {high}], got {value!r}")
    return value
