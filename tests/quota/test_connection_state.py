"""export_connection_state / import_connection_state: a ConnectionQuotas whose state moves to another one
mid-workload (same config) decides the rest of it exactly as one that never stopped: the same ADMIT /
THROTTLE / REJECT, throttle times, limits, attempt tokens, counts and metric values."""

from __future__ import annotations

import math
import pickle
from array import array
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.quota import (
    ConnectionAttempt,
    ConnectionQuotas,
    ConnectionQuotasConfig,
    ConnectionState,
    export_connection_state,
    import_connection_state,
)

T0 = 1_700_000_000_000
LISTENERS = ("EXTERNAL", "INTERNAL", "ADMIN")
IPS = ("10.0.0.1", "10.0.0.2", "192.168.1.7", "0:0:0:0:0:0:0:1")


def _no_dns(host: str) -> str:
    raise OSError(host)


def _build(config: ConnectionQuotasConfig, ip_rates: dict[str | None, int], listener_limits: dict[str, int]) -> Any:
    quotas = ConnectionQuotas(config, now_ms=T0, resolver=_no_dns)
    for listener in LISTENERS[:2]:
        _add(quotas, listener, T0, listener_limits)
    for ip, rate in ip_rates.items():
        quotas.update_ip_connection_rate_quota(ip, rate)
    return quotas


#: (op, listener index, ip index, pending attempt index, ms since the previous op)
op_strategy = st.tuples(
    st.sampled_from(["inc", "inc", "inc", "retry", "dec", "abandon", "expire", "add", "remove"]),
    st.integers(0, len(LISTENERS) - 1),
    st.integers(0, len(IPS) - 1),
    st.integers(0, 5),
    st.one_of(st.integers(0, 120), st.integers(0, 4_000), st.integers(0, 4_000_000)),
)


def _pick(reference: ConnectionQuotas, op: tuple[Any, ...]) -> ConnectionAttempt | None:
    """The pending attempt a retry or abandon names, chosen on the reference before either side runs it (the
    pair holds equal attempts: checked after every op)."""
    pending = reference.pending_attempts
    return pending[op[3] % len(pending)] if pending else None


def _add(quotas: ConnectionQuotas, listener: str, now_ms: int, listener_limits: dict[str, int]) -> bool:
    """A listener with the limits its config gives it (the same on every manager, as from one log)."""
    return quotas.add_listener(
        listener,
        now_ms=now_ms,
        max_connections=2 + LISTENERS.index(listener),
        max_connection_creation_rate=listener_limits.get(listener),
    )


def _run(
    quotas: ConnectionQuotas,
    op: tuple[Any, ...],
    now_ms: int,
    attempt: ConnectionAttempt | None,
    listener_limits: dict[str, int],
) -> Any:
    kind, li, ii, _, _ = op
    listener, ip = LISTENERS[li], IPS[ii]
    try:
        if kind == "inc":
            return quotas.inc(listener, ip, now_ms)
        if kind == "dec":
            return quotas.dec(listener, ip, now_ms)
        if kind in ("retry", "abandon"):
            if attempt is None:
                return "none pending"
            if kind == "abandon":
                return quotas.abandon(attempt)
            return quotas.inc(attempt.listener, attempt.ip, now_ms, attempt=attempt)
        if kind == "expire":
            return sorted(quotas.metrics.expire_sensors(now_ms))
        if kind == "add":
            return _add(quotas, listener, now_ms, listener_limits)
        if quotas.has_listener(listener) and len(quotas.listeners) > 1:
            return quotas.remove_listener(listener)
        return "kept"
    except ValueError as e:
        return f"ValueError: {e}"


def _metrics(quotas: ConnectionQuotas, now_ms: int) -> dict[Any, float]:
    """Every metric's value (NaN as a string, to compare), by name."""
    values = {}
    for name, metric in quotas.metrics.metrics.items():
        value = metric.measurable_value(now_ms)
        values[name] = "nan" if math.isnan(value) else value
    return values


def _view(quotas: ConnectionQuotas) -> tuple[Any, ...]:
    return (
        {ip: quotas.get(ip) for ip in IPS},
        quotas.total_count,
        {listener: quotas.listener_count(listener) for listener in quotas.listeners},
        quotas.pending_attempts,
        quotas.wake_epoch,
    )


@settings(max_examples=200, deadline=None)
@given(
    max_per_ip=st.integers(1, 6),
    max_connections=st.integers(2, 12),
    broker_rate=st.sampled_from([None, 3, 10]),
    ip_rates=st.dictionaries(st.sampled_from([None, *IPS[:3]]), st.integers(0, 6), max_size=3),
    listener_limits=st.dictionaries(st.sampled_from(LISTENERS[:2]), st.integers(1, 8), max_size=2),
    window=st.sampled_from([(11, 1), (2, 1), (3, 2)]),
    receiver_ops=st.lists(op_strategy, max_size=15),
    ops=st.lists(op_strategy, min_size=10, max_size=80),
    split=st.integers(0, 80),
    through_pickle=st.booleans(),
)
def test_hand_over_continues_exactly(
    max_per_ip: int,
    max_connections: int,
    broker_rate: int | None,
    ip_rates: dict[str | None, int],
    listener_limits: dict[str, int],
    window: tuple[int, int],
    receiver_ops: list[tuple[Any, ...]],
    ops: list[tuple[Any, ...]],
    split: int,
    through_pickle: bool,
) -> None:
    config = ConnectionQuotasConfig(
        max_connections=max_connections,
        max_connections_per_ip=max_per_ip,
        num_quota_samples=window[0],
        quota_window_size_seconds=window[1],
        **({} if broker_rate is None else {"max_connection_creation_rate": broker_rate}),
    )
    reference, giver, receiver = (_build(config, ip_rates, listener_limits) for _ in range(3))
    now = T0
    for op in receiver_ops:  # the receiver's own history: replaced by the import
        now += op[4] % 5_000
        _run(receiver, op, now, _pick(receiver, op), listener_limits)
    now = T0
    current = giver
    split = min(split, len(ops))
    for index, op in enumerate(ops):
        if index == split:
            state = export_connection_state(giver)
            if through_pickle:
                state = pickle.loads(pickle.dumps(state, protocol=5))
            import_connection_state(receiver, state, now)
            assert export_connection_state(receiver) == export_connection_state(giver)
            current = receiver
        now += op[4]
        attempt = _pick(reference, op)
        expected = _run(reference, op, now, attempt, listener_limits)
        assert _run(current, op, now, attempt, listener_limits) == expected, (index, op)
        assert _view(current) == _view(reference)
    assert _metrics(current, now) == _metrics(reference, now)
    assert sorted(current.metrics.sensors) == sorted(reference.metrics.sensors)


def _busy() -> ConnectionQuotas:
    quotas = _build(ConnectionQuotasConfig(max_connections=3), {"10.0.0.1": 2}, {"EXTERNAL": 2})
    for i in range(5):
        quotas.inc("EXTERNAL", "10.0.0.1", T0 + i)
        quotas.inc("INTERNAL", "10.0.0.2", T0 + i)
    assert quotas.pending_attempts
    return quotas


def test_the_state_holds_what_moves() -> None:
    quotas = _busy()
    state = export_connection_state(quotas)
    assert dict(state.counts) == {"10.0.0.1": quotas.get("10.0.0.1"), "10.0.0.2": quotas.get("10.0.0.2")}
    assert state.ip_hosts == ("10.0.0.1",)
    assert [name for name, *_ in state.listeners] == ["EXTERNAL", "INTERNAL"]
    assert len(state.pending) == len(quotas.pending_attempts)
    # the counter is not consumed by the export
    assert export_connection_state(quotas).next_attempt_id == state.next_attempt_id


def test_without_import_the_rates_are_lost() -> None:
    giver = _busy()
    fresh = _build(ConnectionQuotasConfig(max_connections=3), {"10.0.0.1": 2}, {"EXTERNAL": 2})
    receiver = _build(ConnectionQuotasConfig(max_connections=3), {"10.0.0.1": 2}, {"EXTERNAL": 2})
    import_connection_state(receiver, export_connection_state(giver), T0 + 10)
    assert receiver.inc("EXTERNAL", "10.0.0.3", T0 + 10) == giver.inc("EXTERNAL", "10.0.0.3", T0 + 10)
    assert receiver.inc("EXTERNAL", "10.0.0.3", T0 + 10).throttled
    assert fresh.inc("EXTERNAL", "10.0.0.3", T0 + 10).admitted


def _mutated(**changes: Any) -> Callable[[ConnectionState], ConnectionState]:
    def mutate(state: ConnectionState) -> ConnectionState:
        return replace(state, **{k: v(state) if callable(v) else v for k, v in changes.items()})

    return mutate


def _sensor_column(column: str, value: Callable[[Any], Any]) -> Callable[[ConnectionState], ConnectionState]:
    def mutate(state: ConnectionState) -> ConnectionState:
        sensors = pickle.loads(pickle.dumps(state.sensors))
        setattr(sensors, column, value(getattr(sensors, column)))
        return replace(state, sensors=sensors)

    return mutate


@pytest.mark.parametrize(
    "mutate",
    [
        _mutated(version=2),
        _mutated(windows=(11, 1000, 2, 60_000)),
        _mutated(counts=lambda s: (("not an ip", 1), *s.counts)),
        _mutated(counts=lambda s: (("::ffff:10.0.0.9", 1), *s.counts)),  # not Java's host-address form
        _mutated(counts=lambda s: (("10.0.0.9", 0), *s.counts)),
        _mutated(listeners=lambda s: (("bad name!", 0, 5, 5), *s.listeners[1:])),
        _mutated(listeners=lambda s: (s.listeners[0], s.listeners[0])),
        _mutated(pending=lambda s: ((99_999, "EXTERNAL", "10.0.0.1", T0, T0, None),)),
        _mutated(pending=lambda s: ((1, "NOPE", "10.0.0.1", T0, T0, None),)),
        _mutated(pending=lambda s: ((1, "EXTERNAL", "10.0.0.1", T0, T0, "NO_SUCH_LIMIT"),)),
        _mutated(ip_hosts=("10.0.0.1", "10.0.0.1")),
        _mutated(ip_hosts=()),  # the sensors no longer line up
        _mutated(next_attempt_id=0),
        _sensor_column("currents", lambda c: array("q", [99] * len(c))),
        _sensor_column("sizes", lambda c: array("q", [c[0] + 1, *c[1:]])),
        _sensor_column("starts", lambda c: c[:-1]),
        _sensor_column("values", lambda c: array("q", [0] * len(c))),
        _sensor_column("names", lambda names: list(reversed(names))),
    ],
)
def test_a_bad_state_raises_and_changes_nothing(mutate: Callable[[ConnectionState], ConnectionState]) -> None:
    state = export_connection_state(_busy())
    receiver = _build(ConnectionQuotasConfig(max_connections=3), {"10.0.0.1": 2}, {"EXTERNAL": 2})
    receiver.inc("ADMIN" if receiver.has_listener("ADMIN") else "EXTERNAL", "10.0.0.5", T0)
    before = export_connection_state(receiver)
    with pytest.raises(ValueError):
        import_connection_state(receiver, mutate(state), T0 + 5)
    assert export_connection_state(receiver) == before
    with pytest.raises(ValueError):
        import_connection_state(receiver, "not a state", T0)  # type: ignore[arg-type]
