"""Ports of Kafka's ``ConnectionQuotasTest.scala`` and the connection-limit cases of ``SocketServerTest.scala``.

Kafka's tests run acceptor threads against the system clock and observe blocking with timeouts.
Here the clock is simulated: an acceptor is a generator that answers when it next wants to act, and
a THROTTLE decision is Kafka's blocked acceptor (it sleeps ``throttle_ms`` and asks again with the
same attempt). Everything is deterministic, so the throttle times are asserted exactly.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import pytest

from quotaplane.metrics import MetricName, Metrics
from quotaplane.quota import (
    IP_CONNECTION_RATE_DEFAULT,
    Admission,
    ConnectionAttempt,
    ConnectionDecision,
    ConnectionLimit,
    ConnectionQuotas,
    ConnectionQuotasConfig,
)

START_MS = 1_700_000_000_000
INT_MAX = 2**31 - 1
GROUP = "socket-server-metrics"

EXTERNAL, ADMIN, REPLICATION = "EXTERNAL", "ADMIN", "REPLICATION"
#: Each listener's client address, as in ConnectionQuotasTest.
LISTENER_IPS = {EXTERNAL: "192.168.1.1", ADMIN: "192.168.1.2", REPLICATION: "192.168.1.3"}
KNOWN_HOST = "192.168.10.0"
UNKNOWN_HOST = "192.168.2.0"


class Clock:
    """Kafka's MockTime reduced to a number that only ``sleep`` moves."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def sleep(self, ms: int) -> None:
        self.now_ms += ms


def no_dns(host: str) -> str:
    raise OSError(f"no DNS in tests: {host}")


def make_quotas(
    clock: Clock,
    *,
    listener_rate: int | None = None,
    resolver: Callable[[str], str] = no_dns,
    **config: object,
) -> ConnectionQuotas:
    """ConnectionQuotasTest's broker (2 samples of 1 s, REPLICATION inter-broker) with its three listeners.

    Checks what ``addListenersAndVerify`` checks: every listener starts at zero, with its metrics.
    """
    config.setdefault("num_quota_samples", 2)
    config.setdefault("quota_window_size_seconds", 1)
    config.setdefault("inter_broker_listener", REPLICATION)
    quotas = ConnectionQuotas(ConnectionQuotasConfig(**config), now_ms=clock.now_ms, resolver=resolver)
    assert broker_rate_metric(quotas) is not None
    for listener in (EXTERNAL, REPLICATION, ADMIN):
        assert quotas.add_listener(listener, now_ms=clock.now_ms, max_connection_creation_rate=listener_rate)
        assert not quotas.max_connections_exceeded(listener)
        assert quotas.get(LISTENER_IPS[listener]) == 0
        assert metric_value(quotas, listener_rate_name(listener), clock.now_ms) == 0.0
        assert math.isnan(metric_value(quotas, listener_throttle_name(listener), clock.now_ms))
        assert math.isnan(metric_value(quotas, ip_throttle_name(listener), clock.now_ms))
    assert metric_value(quotas, broker_rate_name(), clock.now_ms) == 0.0
    return quotas


# --- metric names, spelled out as Kafka's tests spell them ------------------------------------------
def broker_rate_name() -> MetricName:
    return MetricName("broker-connection-accept-rate", GROUP)


def listener_rate_name(listener: str) -> MetricName:
    return MetricName("connection-accept-rate", GROUP, tags={"listener": listener})


def ip_rate_name(ip: str) -> MetricName:
    return MetricName("connection-accept-rate", GROUP, tags={"ip": ip})


def listener_throttle_name(listener: str) -> MetricName:
    return MetricName("connection-accept-throttle-time", GROUP, tags={"listener": listener})


def ip_throttle_name(listener: str) -> MetricName:
    return MetricName("ip-connection-accept-throttle-time", GROUP, tags={"listener": listener})


def broker_rate_metric(quotas: ConnectionQuotas):
    return quotas.metrics.metric(broker_rate_name())


def metric_value(quotas: ConnectionQuotas, name: MetricName, now_ms: int) -> float:
    metric = quotas.metrics.metric(name)
    assert metric is not None, f"no metric {name}"
    return metric.measurable_value(now_ms)


# --- simulated acceptors --------------------------------------------------------------------------------
@dataclass
class AcceptorStats:
    """What one simulated acceptor saw (Kafka's tests read the BlockedPercent meter for ``blocked``)."""

    started_ms: int = 0
    ended_ms: int = 0
    admitted: int = 0
    blocked: int = 0
    ip_throttled: int = 0
    rate_limits: set[ConnectionLimit] = field(default_factory=set)
    throttles: list[int] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.admitted / ((self.ended_ms - self.started_ms) / 1000.0)


def acceptor(
    quotas: ConnectionQuotas,
    clock: Clock,
    listener: str,
    ip: str,
    num_connections: int,
    interval_ms: int,
    stats: AcceptorStats,
    *,
    expect_ip_throttle: bool = False,
) -> Generator[int, None, None]:
    """ConnectionQuotasTest.acceptConnections: one connection every ``interval_ms`` unless blocked.

    Yields the time it next wants to run. A THROTTLE blocks it (Kafka's acceptor waits in ``inc``)
    and it asks again with the same attempt.
    """
    stats.started_ms = clock.now_ms
    next_send = clock.now_ms + interval_ms
    for _ in range(num_connections):
        decision = quotas.inc(listener, ip, clock.now_ms)
        while decision.throttled:
            assert decision.throttle_ms > 0, "this simulation waits on rates only"
            stats.blocked += 1
            stats.rate_limits.add(decision.limit)
            stats.throttles.append(decision.throttle_ms)
            yield clock.now_ms + decision.throttle_ms
            decision = quotas.inc(listener, ip, clock.now_ms, attempt=decision.attempt)
        if decision.rejected:
            assert decision.limit is ConnectionLimit.IP_CONNECTION_RATE and expect_ip_throttle, decision
            stats.ip_throttled += 1
        else:
            assert decision.admitted, decision
            stats.admitted += 1
        yield max(next_send, clock.now_ms)
        next_send += interval_ms
    stats.ended_ms = clock.now_ms


def run(clock: Clock, *acceptors: Generator[int, None, None]) -> None:
    """Run simulated acceptors in time order (ties in the order given)."""
    queue = [(clock.now_ms, i, gen) for i, gen in enumerate(acceptors)]
    heapq.heapify(queue)
    while queue:
        at, i, gen = heapq.heappop(queue)
        clock.now_ms = max(clock.now_ms, at)
        with contextlib.suppress(StopIteration):
            heapq.heappush(queue, (next(gen), i, gen))


def accept(quotas: ConnectionQuotas, listener: str, ip: str, n: int, now_ms: int) -> None:
    """n connections at ``now_ms`` that must all be admitted at once."""
    for _ in range(n):
        decision = quotas.inc(listener, ip, now_ms)
        assert decision.admitted, decision


# === ConnectionQuotasTest =================================================================================
def test_fail_when_no_listeners() -> None:
    """ConnectionQuotasTest.testFailWhenNoListeners."""
    clock = Clock()
    quotas = ConnectionQuotas(ConnectionQuotasConfig(inter_broker_listener=REPLICATION), now_ms=clock.now_ms)
    with pytest.raises(ValueError, match="unknown listener 'EXTERNAL'"):
        quotas.inc(EXTERNAL, LISTENER_IPS[EXTERNAL], clock.now_ms)
    assert quotas.get(LISTENER_IPS[EXTERNAL]) == 0
    assert metric_value(quotas, broker_rate_name(), clock.now_ms) == 0.0


def test_fail_decrement_for_unknown_ip() -> None:
    """ConnectionQuotasTest.testFailDecrementForUnknownIp."""
    clock = Clock()
    quotas = make_quotas(clock)
    accept(quotas, EXTERNAL, LISTENER_IPS[EXTERNAL], 1, clock.now_ms)
    with pytest.raises(ValueError, match=re.escape("no connections, address: 192.168.2.0")):
        quotas.dec(EXTERNAL, UNKNOWN_HOST, clock.now_ms)
    assert quotas.total_count == 1
    assert quotas.listener_count(EXTERNAL) == 1


def test_no_connection_limits_by_default() -> None:
    """ConnectionQuotasTest.testNoConnectionLimitsByDefault."""
    clock = Clock()
    quotas = make_quotas(clock)
    num_connections = 10_000
    stats = {name: AcceptorStats() for name in LISTENER_IPS}
    run(clock, *(acceptor(quotas, clock, n, ip, num_connections, 0, stats[n]) for n, ip in LISTENER_IPS.items()))
    assert metric_value(quotas, broker_rate_name(), clock.now_ms) > 0
    for listener, ip in LISTENER_IPS.items():
        assert quotas.get(ip) == num_connections
        assert metric_value(quotas, listener_rate_name(listener), clock.now_ms) > 0
        quotas.dec(listener, ip, clock.now_ms)
        assert quotas.get(ip) == num_connections - 1
        assert stats[listener].blocked == 0  # no limit was reached


def test_max_connections_per_ip() -> None:
    """ConnectionQuotasTest.testMaxConnectionsPerIp."""
    clock, max_per_ip = Clock(), 17
    quotas = make_quotas(clock, max_connections_per_ip=max_per_ip)
    ip = LISTENER_IPS[EXTERNAL]
    accept(quotas, EXTERNAL, ip, max_per_ip, clock.now_ms)
    assert quotas.get(ip) == max_per_ip

    # the next ones are counted, then rejected (the acceptor closes them and calls dec)
    for _ in range(2):
        decision = quotas.inc(EXTERNAL, ip, clock.now_ms)
        assert (decision.kind, decision.limit, decision.max_connections) == (
            Admission.REJECT,
            ConnectionLimit.IP_CONNECTIONS,
            max_per_ip,
        )
        assert decision.counted
    assert quotas.get(ip) == max_per_ip + 2

    # the same listener from another IP is accepted
    accept(quotas, EXTERNAL, KNOWN_HOST, max_per_ip, clock.now_ms)

    for _ in range(4):
        quotas.dec(EXTERNAL, ip, clock.now_ms)
    assert quotas.get(ip) == max_per_ip - 2
    accept(quotas, EXTERNAL, ip, 2, clock.now_ms)
    assert quotas.get(ip) == max_per_ip


def test_max_broker_wide_connection_limit() -> None:
    """ConnectionQuotasTest.testMaxBrokerWideConnectionLimit."""
    clock, max_connections = Clock(), 800
    quotas = make_quotas(clock, max_connections=max_connections)
    ext_ip, admin_ip, repl_ip = LISTENER_IPS[EXTERNAL], LISTENER_IPS[ADMIN], LISTENER_IPS[REPLICATION]

    accept(quotas, EXTERNAL, ext_ip, max_connections, clock.now_ms)
    assert quotas.get(ext_ip) == max_connections
    # exactly the maximum is not "exceeded" (strictly greater)
    assert not quotas.max_connections_exceeded(EXTERNAL)

    # one more waits for a slot
    waiting = quotas.inc(EXTERNAL, ext_ip, clock.now_ms)
    assert (waiting.kind, waiting.throttle_ms, waiting.limit) == (
        Admission.THROTTLE,
        0,
        ConnectionLimit.BROKER_CONNECTIONS,
    )
    assert waiting.waiting_for_slot and not waiting.counted
    clock.sleep(100)
    assert quotas.inc(EXTERNAL, ext_ip, clock.now_ms, attempt=waiting.attempt).waiting_for_slot

    # closing one lets the waiting connection in
    epoch = quotas.wake_epoch
    quotas.dec(EXTERNAL, ext_ip, clock.now_ms)
    assert quotas.wake_epoch > epoch
    assert quotas.inc(EXTERNAL, ext_ip, clock.now_ms, attempt=waiting.attempt).admitted
    assert quotas.get(ext_ip) == max_connections

    # inter-broker connections are accepted beyond the broker-wide maximum
    accept(quotas, REPLICATION, repl_ip, 1, clock.now_ms)
    assert quotas.max_connections_exceeded(EXTERNAL)
    assert not quotas.max_connections_exceeded(REPLICATION)

    # another non-inter-broker listener waits
    admin_waiting = quotas.inc(ADMIN, admin_ip, clock.now_ms)
    assert admin_waiting.waiting_for_slot and admin_waiting.limit is ConnectionLimit.BROKER_CONNECTIONS

    # the inter-broker listener still gets in while another waits
    accept(quotas, REPLICATION, repl_ip, 1, clock.now_ms)

    # three must close for the waiting one to get in
    for _ in range(2):
        quotas.dec(EXTERNAL, ext_ip, clock.now_ms)
    assert quotas.inc(ADMIN, admin_ip, clock.now_ms, attempt=admin_waiting.attempt).waiting_for_slot
    quotas.dec(EXTERNAL, ext_ip, clock.now_ms)
    assert quotas.inc(ADMIN, admin_ip, clock.now_ms, attempt=admin_waiting.attempt).admitted
    assert quotas.total_count == max_connections


def test_max_listener_connection_limits() -> None:
    """ConnectionQuotasTest.testMaxListenerConnectionLimits."""
    clock, listener_max = Clock(), 200
    quotas = make_quotas(clock, max_connections=800)
    for listener in LISTENER_IPS:
        quotas.update_listener_config(listener, max_connections=listener_max)

    for listener, ip in LISTENER_IPS.items():
        accept(quotas, listener, ip, listener_max, clock.now_ms)
    for listener, ip in LISTENER_IPS.items():
        assert quotas.get(ip) == listener_max
        assert not quotas.max_connections_exceeded(listener)

    # every listener, the inter-broker one too, waits at its own maximum
    waiting = {listener: quotas.inc(listener, ip, clock.now_ms) for listener, ip in LISTENER_IPS.items()}
    for decision in waiting.values():
        assert (decision.kind, decision.throttle_ms, decision.limit, decision.max_connections) == (
            Admission.THROTTLE,
            0,
            ConnectionLimit.LISTENER_CONNECTIONS,
            listener_max,
        )
    for listener, ip in LISTENER_IPS.items():
        quotas.dec(listener, ip, clock.now_ms)
    for listener, ip in LISTENER_IPS.items():
        assert quotas.inc(listener, ip, clock.now_ms, attempt=waiting[listener].attempt).admitted
        assert quotas.get(ip) == listener_max


def test_broker_connection_rate_limit_when_actual_rate_below_limit() -> None:
    """ConnectionQuotasTest.testBrokerConnectionRateLimitWhenActualRateBelowLimit."""
    clock = Clock()
    quotas = make_quotas(clock, max_connection_creation_rate=125)
    # 40 connections/s per listener, 120/s in all
    stats = {name: AcceptorStats() for name in LISTENER_IPS}
    run(clock, *(acceptor(quotas, clock, n, ip, 200, 25, stats[n]) for n, ip in LISTENER_IPS.items()))
    for listener, ip in LISTENER_IPS.items():
        assert stats[listener].blocked == 0
        assert quotas.get(ip) == 200


def test_broker_connection_rate_limit_when_actual_rate_above_limit() -> None:
    """ConnectionQuotasTest.testBrokerConnectionRateLimitWhenActualRateAboveLimit."""
    clock = Clock()
    quotas = make_quotas(clock, max_connection_creation_rate=90)
    # 100 connections/s per listener
    stats = {name: AcceptorStats() for name in LISTENER_IPS}
    run(clock, *(acceptor(quotas, clock, n, ip, 400, 10, stats[n]) for n, ip in LISTENER_IPS.items()))
    # the inter-broker listener is never held to the broker-wide rate
    assert stats[REPLICATION].blocked == 0
    for listener in (EXTERNAL, ADMIN):
        assert stats[listener].blocked > 0
        assert stats[listener].rate_limits == {ConnectionLimit.BROKER_CONNECTION_RATE}
    for ip in LISTENER_IPS.values():
        assert quotas.get(ip) == 400  # throttled, not refused
    # the two throttled listeners share 90/s between them
    shared = (stats[EXTERNAL].admitted + stats[ADMIN].admitted) / (
        (max(stats[EXTERNAL].ended_ms, stats[ADMIN].ended_ms) - START_MS) / 1000.0
    )
    assert shared == pytest.approx(90, abs=7)


def test_broker_connection_rate_exact_throttle_times() -> None:
    """ConnectionQuotasTest.testBrokerConnectionRateLimitWhenActualRateAboveLimit, with exact QuotaUtils numbers."""
    clock = Clock()
    quotas = make_quotas(clock, max_connection_creation_rate=5)
    ip = LISTENER_IPS[EXTERNAL]
    accept(quotas, EXTERNAL, ip, 5, clock.now_ms)  # 5 in a padded 1 s window: at the quota, not over

    # 6/s over a 5/s quota in a 1 s window: (6 - 5) / 5 * 1000 = 200 ms
    sixth = quotas.inc(EXTERNAL, ip, clock.now_ms)
    assert (sixth.kind, sixth.throttle_ms, sixth.limit) == (
        Admission.THROTTLE,
        200,
        ConnectionLimit.BROKER_CONNECTION_RATE,
    )
    # a second new connection is recorded too: (7 - 5) / 5 * 1000 = 400 ms
    seventh = quotas.inc(EXTERNAL, ip, clock.now_ms)
    assert seventh.throttle_ms == 400
    assert metric_value(quotas, listener_throttle_name(EXTERNAL), clock.now_ms) == 300.0  # avg of 200, 400

    # asking again before the delay is over answers the rest of it and records nothing
    clock.sleep(150)
    early = quotas.inc(EXTERNAL, ip, clock.now_ms, attempt=sixth.attempt)
    assert (early.kind, early.throttle_ms, early.attempt) == (Admission.THROTTLE, 50, sixth.attempt)
    clock.sleep(50)
    assert quotas.inc(EXTERNAL, ip, clock.now_ms, attempt=sixth.attempt).admitted
    # 7 recordings over the padded window of 1.2 s: the retries were not recorded again
    assert metric_value(quotas, broker_rate_name(), clock.now_ms) == pytest.approx(7 / 1.2)
    assert metric_value(quotas, listener_rate_name(EXTERNAL), clock.now_ms) == pytest.approx(7 / 1.2)
    assert metric_value(quotas, listener_throttle_name(EXTERNAL), clock.now_ms) == 300.0

    clock.sleep(200)
    assert quotas.inc(EXTERNAL, ip, clock.now_ms, attempt=seventh.attempt).admitted
    assert quotas.get(ip) == 7

    # the token is single use
    with pytest.raises(ValueError, match="not pending"):
        quotas.inc(EXTERNAL, ip, clock.now_ms, attempt=seventh.attempt)
    assert quotas.get(ip) == 7


def test_connection_rate_throttle_is_capped_at_one_quota_window() -> None:
    """ConnectionQuotasTest.testBrokerConnectionRateLimitWhenActualRateAboveLimit: delay capped, 11 samples."""
    clock = Clock()
    quotas = make_quotas(clock, max_connection_creation_rate=5, num_quota_samples=11)
    ip = LISTENER_IPS[ADMIN]
    accept(quotas, ADMIN, ip, 50, clock.now_ms)  # 50 over the padded 10 s window: 5/s
    # 5.1/s: (5.1 - 5) / 5 * 10000 = 200 ms
    assert quotas.inc(ADMIN, ip, clock.now_ms).throttle_ms == 200
    throttles = [quotas.inc(ADMIN, ip, clock.now_ms).throttle_ms for _ in range(5)]
    # 5.2/s -> 400, 5.3/s -> 600, 5.4/s -> 800, 5.5/s -> 1000, 5.6/s -> 1200 capped at 1000
    assert throttles == [400, 600, 800, 1000, 1000]


def test_listener_connection_rate_limit_when_actual_rate_below_limit() -> None:
    """ConnectionQuotasTest.testListenerConnectionRateLimitWhenActualRateBelowLimit."""
    clock = Clock()
    quotas = make_quotas(clock, max_connection_creation_rate=125, listener_rate=50)
    stats = {name: AcceptorStats() for name in LISTENER_IPS}
    run(clock, *(acceptor(quotas, clock, n, ip, 200, 25, stats[n]) for n, ip in LISTENER_IPS.items()))
    for listener, ip in LISTENER_IPS.items():
        assert stats[listener].blocked == 0
        assert quotas.get(ip) == 200


def test_listener_connection_rate_limit_when_actual_rate_above_limit() -> None:
    """ConnectionQuotasTest.testListenerConnectionRateLimitWhenActualRateAboveLimit."""
    clock, listener_rate = Clock(), 30
    quotas = make_quotas(clock, max_connection_creation_rate=125, listener_rate=listener_rate)
    stats = {name: AcceptorStats() for name in LISTENER_IPS}
    run(clock, *(acceptor(quotas, clock, n, ip, 600, 25, stats[n]) for n, ip in LISTENER_IPS.items()))
    for listener, ip in LISTENER_IPS.items():
        # every listener, the inter-broker one too, is held to its own rate
        assert stats[listener].blocked > 0
        assert stats[listener].rate_limits == {ConnectionLimit.LISTENER_CONNECTION_RATE}
        assert stats[listener].rate == pytest.approx(listener_rate, abs=7)
        assert metric_value(quotas, listener_throttle_name(listener), clock.now_ms) > 0
        assert quotas.get(ip) == 600


def test_listener_connection_rate_exact_throttle_times() -> None:
    """ConnectionQuotasTest.testListenerConnectionRateLimitWhenActualRateAboveLimit, with exact numbers."""
    clock = Clock()
    quotas = make_quotas(clock, max_connection_creation_rate=125, listener_rate=30)
    ip = LISTENER_IPS[REPLICATION]
    accept(quotas, REPLICATION, ip, 30, clock.now_ms)
    # 31/s over 30/s: 1/30 * 1000 = 33.3 -> 33; 32/s: 66.7 -> 67 (Java's Math.round)
    first, second = quotas.inc(REPLICATION, ip, clock.now_ms), quotas.inc(REPLICATION, ip, clock.now_ms)
    assert (first.throttle_ms, first.limit) == (33, ConnectionLimit.LISTENER_CONNECTION_RATE)
    assert (second.throttle_ms, second.limit) == (67, ConnectionLimit.LISTENER_CONNECTION_RATE)
    assert metric_value(quotas, listener_throttle_name(REPLICATION), clock.now_ms) == 50.0
    # the protected listener never records on the broker-wide sensor
    assert metric_value(quotas, broker_rate_name(), clock.now_ms) == 0.0


def test_broker_rate_longer_than_listener_rate_names_the_broker_limit() -> None:
    """ConnectionQuotasTest.testListenerConnectionRateLimitWhenActualRateAboveLimit: the longer delay wins."""
    clock = Clock()
    quotas = make_quotas(clock, max_connection_creation_rate=15, listener_rate=12)
    ext_ip = LISTENER_IPS[EXTERNAL]
    accept(quotas, EXTERNAL, ext_ip, 10, clock.now_ms)
    accept(quotas, ADMIN, LISTENER_IPS[ADMIN], 5, clock.now_ms)
    # EXTERNAL at 11/s is under its 12/s; the broker at 16/s over 15/s: 1/15 * 1000 = 66.7 -> 67
    eleventh = quotas.inc(EXTERNAL, ext_ip, clock.now_ms)
    assert (eleventh.throttle_ms, eleventh.limit) == (67, ConnectionLimit.BROKER_CONNECTION_RATE)
    assert quotas.inc(EXTERNAL, ext_ip, clock.now_ms).throttle_ms == 133
    # both over: the listener at 13/12 gives 83 ms, the broker at 18/15 gives 200 ms, the longer wins
    thirteenth = quotas.inc(EXTERNAL, ext_ip, clock.now_ms)
    assert (thirteenth.throttle_ms, thirteenth.limit) == (200, ConnectionLimit.BROKER_CONNECTION_RATE)
    assert metric_value(quotas, listener_throttle_name(EXTERNAL), clock.now_ms) == pytest.approx((67 + 133 + 200) / 3)


def test_ip_connection_rate_when_actual_rate_below_limit() -> None:
    """ConnectionQuotasTest.testIpConnectionRateWhenActualRateBelowLimit."""
    clock = Clock()
    quotas = make_quotas(clock)
    ext_ip, admin_ip = LISTENER_IPS[EXTERNAL], LISTENER_IPS[ADMIN]
    quotas.update_ip_connection_rate_quota(ext_ip, 30)

    # 25/s under a 30/s IP quota: all accepted, at exactly the offered rate
    ext = AcceptorStats()
    run(clock, acceptor(quotas, clock, EXTERNAL, ext_ip, 200, 40, ext))
    assert ext.rate == 25.0
    assert quotas.get(ext_ip) == 200

    # an IP without a quota
    admin = AcceptorStats()
    run(clock, acceptor(quotas, clock, ADMIN, admin_ip, 200, 20, admin))
    assert admin.rate == 50.0
    assert quotas.get(admin_ip) == 200

    assert ext.blocked == admin.blocked == 0
    for listener in LISTENER_IPS:
        assert math.isnan(metric_value(quotas, ip_throttle_name(listener), clock.now_ms))


def test_ip_connection_rate_when_actual_rate_above_limit() -> None:
    """ConnectionQuotasTest.testIpConnectionRateWhenActualRateAboveLimit."""
    clock, ip_rate = Clock(), 20
    quotas = make_quotas(clock)
    ext_ip, admin_ip = LISTENER_IPS[EXTERNAL], LISTENER_IPS[ADMIN]
    quotas.update_ip_connection_rate_quota(ext_ip, ip_rate)

    # 40/s offered over a 20/s quota
    ext = AcceptorStats()
    run(clock, acceptor(quotas, clock, EXTERNAL, ext_ip, 80, 25, ext, expect_ip_throttle=True))
    assert ext.rate == pytest.approx(ip_rate, abs=1)
    assert ext.ip_throttled > 0
    assert metric_value(quotas, ip_throttle_name(EXTERNAL), clock.now_ms) > 0

    # the default quota applies to IPs without their own
    quotas.update_ip_connection_rate_quota(None, ip_rate)
    assert math.isnan(metric_value(quotas, ip_throttle_name(ADMIN), clock.now_ms))
    admin = AcceptorStats()
    run(clock, acceptor(quotas, clock, ADMIN, admin_ip, 80, 25, admin, expect_ip_throttle=True))
    assert admin.rate == pytest.approx(ip_rate, abs=1)
    assert metric_value(quotas, ip_throttle_name(ADMIN), clock.now_ms) > 0

    # IP throttling never blocks the acceptor
    assert ext.blocked == admin.blocked == 0
    assert math.isnan(metric_value(quotas, ip_throttle_name(REPLICATION), clock.now_ms))


def test_ip_connection_rate_with_listener_connection_rate() -> None:
    """ConnectionQuotasTest.testIpConnectionRateWithListenerConnectionRate."""
    clock = Clock()
    quotas = ConnectionQuotas(
        ConnectionQuotasConfig(num_quota_samples=2, quota_window_size_seconds=1, inter_broker_listener=REPLICATION),
        now_ms=clock.now_ms,
    )
    quotas.update_ip_connection_rate_quota(None, 25)
    for listener in LISTENER_IPS:
        quotas.add_listener(listener, now_ms=clock.now_ms, max_connection_creation_rate=35)

    # one acceptor takes the two IPs' connections in turn, as fast as it can
    stats = {KNOWN_HOST: AcceptorStats(), UNKNOWN_HOST: AcceptorStats()}

    def two_ips() -> Generator[int, None, None]:
        for _ in range(35):
            for ip in (KNOWN_HOST, UNKNOWN_HOST):
                yield from acceptor(quotas, clock, EXTERNAL, ip, 1, 0, stats[ip], expect_ip_throttle=True)

    run(clock, two_ips())
    # the acceptor blocked on the listener rate before either IP reached its own rate
    assert sum(s.blocked for s in stats.values()) > 0
    assert sum(1 for s in stats.values() if s.ip_throttled) < 2
    assert quotas.get(KNOWN_HOST) + quotas.get(UNKNOWN_HOST) == 70 - sum(s.ip_throttled for s in stats.values())


def test_rejected_ip_connection_unrecorded_from_connection_rate_quotas() -> None:
    """ConnectionQuotasTest.testRejectedIpConnectionUnrecordedFromConnectionRateQuotas."""
    clock = Clock()
    quotas = make_quotas(clock)
    ext_ip, repl_ip = LISTENER_IPS[EXTERNAL], LISTENER_IPS[REPLICATION]
    quotas.update_ip_connection_rate_quota(ext_ip, 0)
    quotas.update_ip_connection_rate_quota(repl_ip, 0)

    decision = quotas.inc(EXTERNAL, ext_ip, clock.now_ms)
    # a zero quota gives Java's infinite delay, capped at one window
    assert (decision.kind, decision.limit, decision.throttle_ms) == (
        Admission.REJECT,
        ConnectionLimit.IP_CONNECTION_RATE,
        1000,
    )
    assert not decision.counted and quotas.get(ext_ip) == 0
    # the refused connection is in none of the accept rates
    assert metric_value(quotas, ip_rate_name(ext_ip), clock.now_ms) == 0.0
    assert metric_value(quotas, listener_rate_name(EXTERNAL), clock.now_ms) == 0.0
    assert metric_value(quotas, broker_rate_name(), clock.now_ms) == 0.0
    assert metric_value(quotas, ip_throttle_name(EXTERNAL), clock.now_ms) == 1000.0

    # the protected listener never recorded on the broker sensor, so it does not un-record either
    assert quotas.inc(REPLICATION, repl_ip, clock.now_ms).limit is ConnectionLimit.IP_CONNECTION_RATE
    assert metric_value(quotas, ip_rate_name(repl_ip), clock.now_ms) == 0.0
    assert metric_value(quotas, listener_rate_name(REPLICATION), clock.now_ms) == 0.0
    assert metric_value(quotas, broker_rate_name(), clock.now_ms) == 0.0


def test_max_listener_connection_listener_must_be_above_zero() -> None:
    """ConnectionQuotasTest.testMaxListenerConnectionListenerMustBeAboveZero."""
    clock = Clock()
    quotas = ConnectionQuotas(ConnectionQuotasConfig(), now_ms=clock.now_ms)
    quotas.add_listener(EXTERNAL, now_ms=clock.now_ms, max_connection_creation_rate=7)
    with pytest.raises(ValueError, match=r"listener\.name\.external\.max\.connection\.creation\.rate"):
        quotas.update_listener_config(EXTERNAL, max_connection_creation_rate=0)
    with pytest.raises(ValueError, match=r"listener\.name\.external\.max\.connections"):
        quotas.update_listener_config(EXTERNAL, max_connections=0)
    assert quotas.listener_limits(EXTERNAL) == (INT_MAX, 7)


def test_max_listener_connection_rate_reconfiguration() -> None:
    """ConnectionQuotasTest.testMaxListenerConnectionRateReconfiguration."""
    clock = Clock()
    quotas = ConnectionQuotas(ConnectionQuotasConfig(num_quota_samples=2), now_ms=clock.now_ms)
    quotas.add_listener(EXTERNAL, now_ms=clock.now_ms, max_connection_creation_rate=20)
    ip = LISTENER_IPS[EXTERNAL]

    # remove the rate limit: 1000 connections at once are not throttled
    quotas.update_listener_config(EXTERNAL)
    unlimited = AcceptorStats()
    run(clock, acceptor(quotas, clock, EXTERNAL, ip, 1000, 0, unlimited))
    assert unlimited.blocked == 0

    # 10/s: 200 connections offered at 200/s are held to about 10/s
    clock.sleep(2000)  # let the unlimited burst leave the window
    quotas.update_listener_config(EXTERNAL, max_connection_creation_rate=10)
    limited = AcceptorStats()
    run(clock, acceptor(quotas, clock, EXTERNAL, ip, 200, 5, limited))
    assert limited.blocked > 0
    assert limited.rate == pytest.approx(10, abs=3)


def test_max_broker_connection_rate_reconfiguration() -> None:
    """ConnectionQuotasTest.testMaxBrokerConnectionRateReconfiguration."""
    clock = Clock()
    quotas = make_quotas(clock)
    quotas.update_broker_max_connection_rate(50)
    assert broker_rate_metric(quotas).config.quota.bound == 50
    stats = AcceptorStats()
    run(clock, acceptor(quotas, clock, EXTERNAL, LISTENER_IPS[EXTERNAL], 400, 5, stats))
    assert stats.blocked > 0
    assert stats.rate == pytest.approx(50, abs=20)


def test_ip_connection_rate_metric_update() -> None:
    """ConnectionQuotasTest.testIpConnectionRateMetricUpdate."""
    clock = Clock()
    quotas = ConnectionQuotas(ConnectionQuotasConfig(), now_ms=clock.now_ms)
    quotas.add_listener(EXTERNAL, now_ms=clock.now_ms)
    quotas.add_listener(ADMIN, now_ms=clock.now_ms)
    ext_ip, admin_ip = LISTENER_IPS[EXTERNAL], LISTENER_IPS[ADMIN]

    def assert_ip_quota(ip: str, quota: int) -> None:
        assert quotas.connection_rate_for_ip(ip) == quota
        assert quotas.metrics.metric(ip_rate_name(ip)).config.quota.bound == quota

    # a limited default creates the IP sensors
    quotas.update_ip_connection_rate_quota(None, 50)
    accept(quotas, EXTERNAL, ext_ip, 1, clock.now_ms)
    accept(quotas, ADMIN, admin_ip, 1, clock.now_ms)
    assert_ip_quota(ext_ip, 50)
    assert_ip_quota(admin_ip, 50)

    quotas.update_ip_connection_rate_quota(ext_ip, 30)
    assert_ip_quota(ext_ip, 30)

    # a new default reaches only the IPs without their own quota
    quotas.update_ip_connection_rate_quota(None, 20)
    assert_ip_quota(ext_ip, 30)
    assert_ip_quota(admin_ip, 20)

    quotas.update_ip_connection_rate_quota(None, None)
    assert_ip_quota(admin_ip, IP_CONNECTION_RATE_DEFAULT)
    assert_ip_quota(ext_ip, 30)

    quotas.update_ip_connection_rate_quota(ext_ip, None)
    assert_ip_quota(ext_ip, IP_CONNECTION_RATE_DEFAULT)


def test_enforced_ip_connection_rate_quota_update() -> None:
    """ConnectionQuotasTest.testEnforcedIpConnectionRateQuotaUpdate."""
    clock, ip_rate, offered = Clock(), 20, 40
    quotas = make_quotas(clock)
    ext_ip, admin_ip = LISTENER_IPS[EXTERNAL], LISTENER_IPS[ADMIN]

    def accept_until_ip_throttled(listener: str, ip: str) -> bool:
        """Kafka's acceptConnections without expectIpThrottle: stops at the first IP throttle."""
        for _ in range(offered):
            decision = quotas.inc(listener, ip, clock.now_ms)
            if decision.rejected:
                assert decision.limit is ConnectionLimit.IP_CONNECTION_RATE
                return True
            assert decision.admitted
        return False

    quotas.update_ip_connection_rate_quota(ext_ip, ip_rate)
    assert accept_until_ip_throttled(EXTERNAL, ext_ip)
    assert quotas.get(ext_ip) == ip_rate

    # a higher quota lets connections in up to it
    quotas.update_ip_connection_rate_quota(ext_ip, 30)
    assert accept_until_ip_throttled(EXTERNAL, ext_ip)
    assert quotas.get(ext_ip) == 30

    # no quota: all are accepted
    quotas.update_ip_connection_rate_quota(ext_ip, None)
    assert not accept_until_ip_throttled(EXTERNAL, ext_ip)
    assert quotas.get(ext_ip) == offered + 30

    assert not accept_until_ip_throttled(ADMIN, admin_ip)
    assert quotas.get(admin_ip) == offered

    # a default quota reaches the other IP
    quotas.update_ip_connection_rate_quota(None, ip_rate)
    assert accept_until_ip_throttled(ADMIN, admin_ip)
    assert quotas.get(admin_ip) == offered + ip_rate


def test_non_default_connection_count_limit_and_rate_limit() -> None:
    """ConnectionQuotasTest.testNonDefaultConnectionCountLimitAndRateLimit."""
    clock, broker_rate, max_connections = Clock(), 25, 350
    quotas = make_quotas(clock, max_connections=max_connections, max_connection_creation_rate=broker_rate)
    ip = LISTENER_IPS[EXTERNAL]

    # 100/s offered, held to 25/s, until the connections run out
    stats = AcceptorStats()
    run(clock, acceptor(quotas, clock, EXTERNAL, ip, max_connections, 10, stats))
    assert stats.blocked > 0
    assert stats.rate == pytest.approx(broker_rate, abs=8)
    assert quotas.get(ip) == max_connections

    # one more waits for a slot (after any rate delay), and gets in once one closes
    clock.sleep(2000)
    waiting = quotas.inc(EXTERNAL, ip, clock.now_ms)
    assert waiting.waiting_for_slot and waiting.limit is ConnectionLimit.BROKER_CONNECTIONS
    quotas.dec(EXTERNAL, ip, clock.now_ms)
    assert quotas.inc(EXTERNAL, ip, clock.now_ms, attempt=waiting.attempt).admitted
    assert quotas.get(ip) == max_connections


# === SocketServerTest ======================================================================================
def test_socket_server_max_connections_per_ip() -> None:
    """SocketServerTest.testMaxConnectionsPerIp."""
    clock = Clock()
    quotas = ConnectionQuotas(ConnectionQuotasConfig(max_connections_per_ip=5), now_ms=clock.now_ms)
    quotas.add_listener("PLAINTEXT", now_ms=clock.now_ms)
    accept(quotas, "PLAINTEXT", "127.0.0.1", 5, clock.now_ms)
    rejected = quotas.inc("PLAINTEXT", "127.0.0.1", clock.now_ms)
    assert (rejected.kind, rejected.limit, rejected.max_connections) == (
        Admission.REJECT,
        ConnectionLimit.IP_CONNECTIONS,
        5,
    )
    quotas.dec("PLAINTEXT", "127.0.0.1", clock.now_ms)  # the acceptor closes the rejected channel
    assert quotas.get("127.0.0.1") == 5

    quotas.dec("PLAINTEXT", "127.0.0.1", clock.now_ms)  # a client closes one
    assert quotas.inc("PLAINTEXT", "127.0.0.1", clock.now_ms).admitted


def test_socket_server_zero_max_connections_per_ip() -> None:
    """SocketServerTest.testZeroMaxConnectionsPerIp."""
    clock = Clock()
    with pytest.raises(ValueError, match=re.escape("can be set to zero only if max.connections.per.ip.overrides")):
        ConnectionQuotasConfig(max_connections_per_ip=0)
    config = ConnectionQuotasConfig(max_connections_per_ip=0, max_connections_per_ip_overrides="127.0.0.1:5")
    quotas = ConnectionQuotas(config, now_ms=clock.now_ms)
    quotas.add_listener("PLAINTEXT", now_ms=clock.now_ms)

    accept(quotas, "PLAINTEXT", "127.0.0.1", 5, clock.now_ms)
    assert quotas.inc("PLAINTEXT", "127.0.0.1", clock.now_ms).limit is ConnectionLimit.IP_CONNECTIONS
    quotas.dec("PLAINTEXT", "127.0.0.1", clock.now_ms)
    quotas.dec("PLAINTEXT", "127.0.0.1", clock.now_ms)
    assert quotas.inc("PLAINTEXT", "127.0.0.1", clock.now_ms).admitted

    # any other address gets the default of zero
    external = quotas.inc("PLAINTEXT", "10.1.2.3", clock.now_ms)
    assert (external.limit, external.max_connections) == (ConnectionLimit.IP_CONNECTIONS, 0)


def test_socket_server_max_connections_per_ip_overrides() -> None:
    """SocketServerTest.testMaxConnectionsPerIpOverrides."""
    clock = Clock()
    resolved: list[str] = []

    def resolver(host: str) -> str:
        resolved.append(host)
        return {"localhost": "127.0.0.1"}[host]

    # the override (6) replaces the default (no limit) for the resolved address
    quotas = ConnectionQuotas(
        ConnectionQuotasConfig(max_connections_per_ip_overrides={"localhost": 6}),
        now_ms=clock.now_ms,
        resolver=resolver,
    )
    assert resolved == ["localhost"]
    assert quotas.max_connections_per_ip_overrides == {"127.0.0.1": 6}
    quotas.add_listener("PLAINTEXT", now_ms=clock.now_ms)
    accept(quotas, "PLAINTEXT", "127.0.0.1", 6, clock.now_ms)
    assert quotas.inc("PLAINTEXT", "127.0.0.1", clock.now_ms).limit is ConnectionLimit.IP_CONNECTIONS
    accept(quotas, "PLAINTEXT", "127.0.0.2", 7, clock.now_ms)


def test_socket_server_connection_rate_per_ip() -> None:
    """SocketServerTest.testConnectionRatePerIp."""
    clock = Clock()
    quotas = ConnectionQuotas(ConnectionQuotasConfig(num_quota_samples=2), now_ms=clock.now_ms)
    quotas.add_listener("PLAINTEXT", now_ms=clock.now_ms)
    quotas.update_ip_connection_rate_quota(None, 5)

    accept(quotas, "PLAINTEXT", "127.0.0.1", 5, clock.now_ms)
    # the 6th and 7th are throttled: (6 - 5) / 5 * 1000 = 200 ms each, since the 6th was un-recorded
    for _ in range(2):
        decision = quotas.inc("PLAINTEXT", "127.0.0.1", clock.now_ms)
        assert (decision.kind, decision.limit, decision.throttle_ms) == (
            Admission.REJECT,
            ConnectionLimit.IP_CONNECTION_RATE,
            200,
        )
    assert quotas.get("127.0.0.1") == 5

    # after the samples expire, a new connection is accepted
    clock.sleep(2000)
    assert quotas.inc("PLAINTEXT", "127.0.0.1", clock.now_ms).admitted


# === the decision protocol, dynamic updates, metrics and validation =========================================
def test_retry_token_must_match_its_connection() -> None:
    """ConnectionQuotasTest.testMaxBrokerWideConnectionLimit: a blocked acceptor resumes the same connection."""
    clock = Clock()
    quotas = make_quotas(clock, max_connections=1)
    accept(quotas, EXTERNAL, LISTENER_IPS[EXTERNAL], 1, clock.now_ms)
    waiting = quotas.inc(ADMIN, LISTENER_IPS[ADMIN], clock.now_ms)
    assert waiting.waiting_for_slot
    with pytest.raises(ValueError, match=re.escape("is for 192.168.1.2 on ADMIN")):
        quotas.inc(EXTERNAL, LISTENER_IPS[ADMIN], clock.now_ms, attempt=waiting.attempt)
    forged = ConnectionAttempt(waiting.attempt.attempt_id, ADMIN, LISTENER_IPS[ADMIN], clock.now_ms, clock.now_ms - 5)
    with pytest.raises(ValueError, match="not pending"):
        quotas.inc(ADMIN, LISTENER_IPS[ADMIN], clock.now_ms, attempt=forged)
    assert quotas.pending_attempts == [waiting.attempt]

    # a client that goes away while waiting is abandoned; its rate recordings stay
    assert quotas.abandon(waiting.attempt)
    assert not quotas.abandon(waiting.attempt)
    assert quotas.pending_attempts == []
    quotas.dec(EXTERNAL, LISTENER_IPS[EXTERNAL], clock.now_ms)
    with pytest.raises(ValueError, match="not pending"):
        quotas.inc(ADMIN, LISTENER_IPS[ADMIN], clock.now_ms, attempt=waiting.attempt)
    assert metric_value(quotas, listener_rate_name(ADMIN), clock.now_ms) == 1.0


def test_stale_attempts_can_be_dropped() -> None:
    """ConnectionQuotasTest.testMaxListenerConnectionLimits: waiting acceptors, bounded for a service."""
    clock = Clock()
    quotas = make_quotas(clock)
    quotas.update_listener_config(EXTERNAL, max_connections=1)
    accept(quotas, EXTERNAL, LISTENER_IPS[EXTERNAL], 1, clock.now_ms)
    old = quotas.inc(EXTERNAL, LISTENER_IPS[EXTERNAL], clock.now_ms).attempt
    clock.sleep(5000)
    new = quotas.inc(EXTERNAL, KNOWN_HOST, clock.now_ms).attempt
    assert quotas.abandon_attempts_older_than(clock.now_ms, 1000) == [old]
    assert quotas.pending_attempts == [new]


def test_raising_a_count_limit_lets_waiting_callers_through() -> None:
    """ConnectionQuotasTest.testMaxListenerConnectionLimits with a dynamic update (Kafka's notifyAll)."""
    clock = Clock()
    quotas = make_quotas(clock, max_connections=2)
    quotas.update_listener_config(ADMIN, max_connections=1)
    accept(quotas, ADMIN, LISTENER_IPS[ADMIN], 1, clock.now_ms)
    listener_wait = quotas.inc(ADMIN, LISTENER_IPS[ADMIN], clock.now_ms)
    assert listener_wait.limit is ConnectionLimit.LISTENER_CONNECTIONS

    epoch = quotas.wake_epoch
    quotas.reconfigure({"listener.name.admin.max.connections": "5"})
    assert quotas.wake_epoch > epoch
    assert quotas.listener_limits(ADMIN) == (5, INT_MAX)
    assert quotas.inc(ADMIN, LISTENER_IPS[ADMIN], clock.now_ms, attempt=listener_wait.attempt).admitted

    broker_wait = quotas.inc(EXTERNAL, LISTENER_IPS[EXTERNAL], clock.now_ms)
    assert broker_wait.limit is ConnectionLimit.BROKER_CONNECTIONS
    quotas.update_max_connections(3)
    assert quotas.inc(EXTERNAL, LISTENER_IPS[EXTERNAL], clock.now_ms, attempt=broker_wait.attempt).admitted


def test_raising_a_rate_limit_keeps_the_running_delay() -> None:
    """ConnectionQuotas.updateBrokerMaxConnectionRate: a waiting connection waits its original delay."""
    clock = Clock()
    quotas = make_quotas(clock, max_connection_creation_rate=5)
    accept(quotas, EXTERNAL, LISTENER_IPS[EXTERNAL], 5, clock.now_ms)
    waiting = quotas.inc(EXTERNAL, LISTENER_IPS[EXTERNAL], clock.now_ms)
    assert waiting.throttle_ms == 200
    quotas.update_broker_max_connection_rate(1000)
    clock.sleep(100)
    assert quotas.inc(EXTERNAL, LISTENER_IPS[EXTERNAL], clock.now_ms, attempt=waiting.attempt).throttle_ms == 100
    # a new connection is held to the new quota
    assert quotas.inc(ADMIN, LISTENER_IPS[ADMIN], clock.now_ms).admitted


def test_protected_listener_needs_more_than_one_listener() -> None:
    """ConnectionQuotasTest.testMaxBrokerWideConnectionLimit: inter-broker protection only with >1 listener."""
    clock = Clock()
    quotas = ConnectionQuotas(
        ConnectionQuotasConfig(
            max_connections=1, max_connection_creation_rate=1, inter_broker_listener=REPLICATION, num_quota_samples=2
        ),
        now_ms=clock.now_ms,
    )
    quotas.add_listener(REPLICATION, now_ms=clock.now_ms)
    assert not quotas.protected_listener(REPLICATION)
    accept(quotas, REPLICATION, LISTENER_IPS[REPLICATION], 1, clock.now_ms)
    alone = quotas.inc(REPLICATION, LISTENER_IPS[REPLICATION], clock.now_ms)
    assert (alone.throttle_ms, alone.limit) == (1000, ConnectionLimit.BROKER_CONNECTION_RATE)
    quotas.abandon(alone.attempt)

    quotas.add_listener(EXTERNAL, now_ms=clock.now_ms)
    assert quotas.protected_listener(REPLICATION)
    assert quotas.inc(REPLICATION, LISTENER_IPS[REPLICATION], clock.now_ms).admitted
    quotas.remove_listener(EXTERNAL)
    assert not quotas.protected_listener(REPLICATION)
    assert quotas.max_connections_exceeded(REPLICATION)


def test_remove_listener() -> None:
    """ConnectionQuotas.removeListener: sensors and waiting attempts go; open connections still dec."""
    clock = Clock()
    quotas = make_quotas(clock)
    quotas.update_listener_config(ADMIN, max_connections=1)
    accept(quotas, ADMIN, LISTENER_IPS[ADMIN], 1, clock.now_ms)
    waiting = quotas.inc(ADMIN, LISTENER_IPS[ADMIN], clock.now_ms)
    assert quotas.has_listener(ADMIN)
    quotas.remove_listener(ADMIN)

    assert ADMIN not in quotas.listeners
    assert not quotas.has_listener(ADMIN)
    assert quotas.pending_attempts == []
    for name in (listener_rate_name(ADMIN), listener_throttle_name(ADMIN), ip_throttle_name(ADMIN)):
        assert quotas.metrics.metric(name) is None
    with pytest.raises(ValueError, match="unknown listener 'ADMIN'"):
        quotas.inc(ADMIN, LISTENER_IPS[ADMIN], clock.now_ms, attempt=waiting.attempt)
    quotas.dec(ADMIN, LISTENER_IPS[ADMIN], clock.now_ms)
    assert quotas.get(LISTENER_IPS[ADMIN]) == 0 and quotas.total_count == 0
    with pytest.raises(ValueError, match="unknown listener 'NEVER'"):
        quotas.dec("NEVER", LISTENER_IPS[ADMIN], clock.now_ms)

    # re-adding starts from fresh sensors and a zero count
    assert quotas.add_listener(ADMIN, now_ms=clock.now_ms)
    assert quotas.listener_count(ADMIN) == 0
    assert metric_value(quotas, listener_rate_name(ADMIN), clock.now_ms) == 0.0
    assert not quotas.add_listener(ADMIN, now_ms=clock.now_ms, max_connections=3)
    assert quotas.listener_limits(ADMIN) == (INT_MAX, INT_MAX)


def test_metric_names_groups_tags_and_sensors() -> None:
    """ConnectionQuotasTest's metric helpers: Kafka's names, group socket-server-metrics and tags."""
    clock = Clock()
    quotas = make_quotas(clock, max_connection_creation_rate=40)
    quotas.update_ip_connection_rate_quota(None, 10)
    accept(quotas, EXTERNAL, "::1", 1, clock.now_ms)
    accept(quotas, EXTERNAL, "::ffff:10.0.0.7", 1, clock.now_ms)

    names = {(n.name, n.group, tuple(sorted(n.tags.items()))) for n in quotas.metrics.metrics if n.group == GROUP}
    assert names == {
        ("broker-connection-accept-rate", GROUP, ()),
        *(("connection-accept-rate", GROUP, (("listener", n),)) for n in LISTENER_IPS),
        *(("connection-accept-throttle-time", GROUP, (("listener", n),)) for n in LISTENER_IPS),
        *(("ip-connection-accept-throttle-time", GROUP, (("listener", n),)) for n in LISTENER_IPS),
        # Java's InetAddress.getHostAddress: IPv6 uncompressed; an IPv4-mapped address is the IPv4 one
        ("connection-accept-rate", GROUP, (("ip", "0:0:0:0:0:0:0:1"),)),
        ("connection-accept-rate", GROUP, (("ip", "10.0.0.7"),)),
    }
    assert set(quotas.metrics.sensors) >= {
        "Connection-Accept-Rate",
        "Connection-Accept-Rate-EXTERNAL",
        "ConnectionRateThrottleTime-EXTERNAL",
        "ip-ConnectionRateThrottleTime-EXTERNAL",
        "Connection-Accept-Rate-0:0:0:0:0:0:0:1",
        "Connection-Accept-Rate-10.0.0.7",
    }
    assert quotas.get("10.0.0.7") == 1
    rate = quotas.metrics.metric(broker_rate_name())
    assert (rate.config.samples, rate.config.time_window_ms, rate.config.quota.bound) == (2, 1000, 40)
    assert quotas.metrics.metric(listener_rate_name(EXTERNAL)).config.quota.bound == INT_MAX

    # IP sensors expire after an hour idle; broker and listener sensors never do
    expired = quotas.metrics.expire_sensors(clock.now_ms + 3600 * 1000 + 1)
    assert sorted(expired) == ["Connection-Accept-Rate-0:0:0:0:0:0:0:1", "Connection-Accept-Rate-10.0.0.7"]
    # a default change after expiry reaches a re-created sensor
    accept(quotas, EXTERNAL, "10.0.0.7", 1, clock.now_ms + 3600 * 1000 + 2)
    quotas.update_ip_connection_rate_quota(None, 3)
    assert quotas.metrics.metric(ip_rate_name("10.0.0.7")).config.quota.bound == 3

    quotas.close()
    assert not [n for n in quotas.metrics.metrics if n.group == GROUP and "ip" not in n.tags]


def test_shared_metrics_registry() -> None:
    """ConnectionQuotasTest.setUp: ConnectionQuotas records into the broker's Metrics."""
    clock = Clock()
    metrics = Metrics()
    quotas = ConnectionQuotas(ConnectionQuotasConfig(), now_ms=clock.now_ms, metrics=metrics)
    quotas.add_listener(EXTERNAL, now_ms=clock.now_ms)
    accept(quotas, EXTERNAL, "10.0.0.1", 3, clock.now_ms)
    assert metrics.metric(listener_rate_name(EXTERNAL)).measurable_value(clock.now_ms) == pytest.approx(3 / 10)


def test_reconfigure_with_kafka_config_names() -> None:
    """SocketServer.reconfigure and ListenerConnectionQuota.reconfigure: dynamic configs by Kafka's names."""
    clock = Clock()
    quotas = make_quotas(clock, resolver={"broker-2.internal": "10.9.9.9"}.__getitem__)
    quotas.reconfigure(
        {
            "max.connections": "100",
            "max.connections.per.ip": 0,
            "max.connections.per.ip.overrides": "broker-2.internal:4, ::1:2",
            "max.connection.creation.rate": "30",
            "listener.name.external.max.connection.creation.rate": 7,
        }
    )
    assert quotas.max_connections == 100
    assert quotas.max_connections_per_ip == 0
    assert quotas.max_connections_per_ip_overrides == {"10.9.9.9": 4, "0:0:0:0:0:0:0:1": 2}
    assert quotas.max_connection_creation_rate == 30
    assert broker_rate_metric(quotas).config.quota.bound == 30
    assert quotas.listener_limits(EXTERNAL) == (INT_MAX, 7)
    assert quotas.metrics.metric(listener_rate_name(EXTERNAL)).config.quota.bound == 7

    # None returns to Kafka's default
    quotas.reconfigure({"max.connections.per.ip": None, "listener.name.external.max.connection.creation.rate": None})
    assert quotas.max_connections_per_ip == INT_MAX
    assert quotas.listener_limits(EXTERNAL) == (INT_MAX, INT_MAX)


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"max.connections": 5, "max.conections": 1}, "unknown connection quota config 'max.conections'"),
        ({"max.connections": 5, "quota.window.num": 3}, "quota.window.num cannot be changed at runtime"),
        ({"max.connections": 5, "max.connection.creation.rate": -1}, "must be between 0 and 2147483647"),
        ({"max.connections": 5, "max.connections.per.ip": "ten"}, "expected an integer"),
        ({"max.connections": 5, "max.connections.per.ip": 0}, "can be set to zero only if"),
        ({"max.connections": 5, "max.connections.per.ip.overrides": "bad host!:3"}, "contains invalid addresses"),
        ({"max.connections": 5, "max.connections.per.ip.overrides": "nowhere:3"}, "unable to resolve address"),
        ({"max.connections": 5, "max.connections.per.ip.overrides": "10.0.0.1"}, "is not host:count"),
        ({"max.connections": 5, "max.connections.per.ip.overrides": "10.0.0.1:-2"}, "must be between 0"),
        ({"max.connections": 5, "listener.name.nope.max.connections": 3}, "names unknown listener 'nope'"),
        ({"max.connections": 5, "listener.name.external.max.connections": 0}, "must be between 1"),
        ({"max.connections": 5, "listener.name.external.num.network.threads": 3}, "unknown listener config"),
    ],
)
def test_reconfigure_rejects_bad_configs_and_changes_nothing(configs: dict, message: str) -> None:
    """DynamicBrokerConfig validation (KafkaConfig.validateValues, ListenerConnectionQuota.validateReconfiguration)."""
    clock = Clock()
    quotas = make_quotas(clock, max_connections=50)
    with pytest.raises(ValueError, match=re.escape(message)):
        quotas.reconfigure(configs)
    assert quotas.max_connections == 50
    assert quotas.max_connections_per_ip == INT_MAX
    assert quotas.max_connections_per_ip_overrides == {}
    assert quotas.max_connection_creation_rate == INT_MAX
    assert quotas.listener_limits(EXTERNAL) == (INT_MAX, INT_MAX)


@pytest.mark.parametrize("ip", ["300.1.1.1", "10.0.0", "broker-1.example.com", "", None, 17, "::1::2"])
def test_malformed_peer_addresses_are_rejected(ip: object) -> None:
    """ConnectionQuotas.inc takes an InetAddress: anything else is bad input and changes nothing."""
    clock = Clock()
    quotas = make_quotas(clock)
    with pytest.raises(ValueError, match="is not an IP address"):
        quotas.inc(EXTERNAL, ip, clock.now_ms)
    with pytest.raises(ValueError, match="is not an IP address"):
        quotas.dec(EXTERNAL, ip, clock.now_ms)
    assert metric_value(quotas, listener_rate_name(EXTERNAL), clock.now_ms) == 0.0
    assert quotas.total_count == 0


def test_bad_limits_and_ip_quota_entities_are_rejected() -> None:
    """KafkaConfig ranges (atLeast(0)) and DynamicConfig.Ip.isValidIpEntity."""
    clock = Clock()
    quotas = make_quotas(clock, resolver={"broker-3": "10.3.3.3"}.__getitem__)
    with pytest.raises(ValueError, match=re.escape("max.connections")):
        quotas.update_max_connections(-1)
    with pytest.raises(ValueError, match=re.escape("max.connection.creation.rate")):
        quotas.update_broker_max_connection_rate(2**31)
    with pytest.raises(ValueError, match="expected an integer"):
        quotas.update_max_connections_per_ip(True)
    with pytest.raises(ValueError, match="connection_creation_rate"):
        quotas.update_ip_connection_rate_quota("10.0.0.1", -5)
    with pytest.raises(ValueError, match="expected an integer"):
        quotas.update_ip_connection_rate_quota("10.0.0.1", 2.5)
    with pytest.raises(ValueError, match="not a valid IP address or host name"):
        quotas.update_ip_connection_rate_quota("bad host", 5)
    with pytest.raises(ValueError, match="unable to resolve address"):
        quotas.update_ip_connection_rate_quota("unknown-host", 5)
    with pytest.raises(ValueError, match="unknown listener 'NOPE'"):
        quotas.update_listener_config("NOPE", max_connections=3)
    with pytest.raises(ValueError, match="unknown listener"):
        quotas.max_connections_exceeded("NOPE")
    with pytest.raises(ValueError, match="cannot be an IP address"):
        quotas.add_listener("10.0.0.1", now_ms=clock.now_ms)
    with pytest.raises(ValueError, match="now_ms"):
        quotas.inc(EXTERNAL, "10.0.0.1", float(clock.now_ms))
    assert (quotas.max_connections, quotas.max_connection_creation_rate) == (INT_MAX, INT_MAX)
    assert quotas.connection_rate_for_ip("10.0.0.1") == IP_CONNECTION_RATE_DEFAULT

    # a host-named IP entity is resolved; an integral float is Kafka's double quota value
    quotas.update_ip_connection_rate_quota("broker-3", 4.0)
    assert quotas.connection_rate_for_ip("10.3.3.3") == 4


def test_config_from_kafka_names() -> None:
    """KafkaConfig: the broker configs ConnectionQuotas reads, by name."""
    config = ConnectionQuotasConfig.from_configs(
        {
            "max.connections": "1000",
            "max.connections.per.ip": "50",
            "max.connections.per.ip.overrides": "10.0.0.1:100",
            "max.connection.creation.rate": 200,
            "inter.broker.listener.name": "REPLICATION",
            "quota.window.num": 2,
            "quota.window.size.seconds": 3,
        }
    )
    assert config == ConnectionQuotasConfig(
        max_connections=1000,
        max_connections_per_ip=50,
        max_connections_per_ip_overrides=(("10.0.0.1", 100),),
        max_connection_creation_rate=200,
        inter_broker_listener=REPLICATION,
        num_quota_samples=2,
        quota_window_size_seconds=3,
    )
    with pytest.raises(ValueError, match=r"unknown connection quota configs \['listeners'\]"):
        ConnectionQuotasConfig.from_configs({"listeners": "PLAINTEXT://:9092"})
    with pytest.raises(ValueError, match=re.escape("quota.window.size.seconds")):
        ConnectionQuotasConfig(quota_window_size_seconds=0)


def test_throttle_is_capped_at_the_configured_window() -> None:
    """ConnectionQuotas.maxThrottleTimeMs: quota.window.size.seconds * 1000."""
    clock = Clock()
    quotas = make_quotas(clock, max_connection_creation_rate=1, quota_window_size_seconds=3)
    accept(quotas, EXTERNAL, LISTENER_IPS[EXTERNAL], 3, clock.now_ms)  # 3 in a padded 3 s window: 1/s
    # 4/3 per s over 1/s: (1.333 - 1) / 1 * 3000 = 1000; 5/3: 2000; 6/3: 3000; 7/3: 4000 capped at 3000
    throttles = [quotas.inc(EXTERNAL, LISTENER_IPS[EXTERNAL], clock.now_ms).throttle_ms for _ in range(4)]
    assert throttles == [1000, 2000, 3000, 3000]


def test_decision_helpers() -> None:
    """ConnectionQuotas.inc outcomes as the acceptor handles them: which ones the caller must dec."""
    admit = ConnectionDecision(Admission.ADMIT, EXTERNAL, "10.0.0.1")
    too_many = ConnectionDecision(Admission.REJECT, EXTERNAL, "10.0.0.1", limit=ConnectionLimit.IP_CONNECTIONS)
    ip_rate = ConnectionDecision(
        Admission.REJECT, EXTERNAL, "10.0.0.1", throttle_ms=200, limit=ConnectionLimit.IP_CONNECTION_RATE
    )
    assert [d.counted for d in (admit, too_many, ip_rate)] == [True, True, False]
    assert admit.admitted and too_many.rejected and not ip_rate.throttled
