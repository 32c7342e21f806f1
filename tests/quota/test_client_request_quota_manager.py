"""Ports of Kafka's ``core/src/test/scala/unit/kafka/server/ClientRequestQuotaManagerTest.scala``
(also ``server/src/test/java/org/apache/kafka/server/quota/ClientRequestQuotaManagerTest.java`` in Kafka 4.x),
plus the exempt sensor and network-thread time of ``ClientRequestQuotaManager``.
"""

from __future__ import annotations

import pytest

from quotaplane.quota import (
    NANOS_TO_PERCENTAGE_PER_SECOND,
    ClientQuotaEntity,
    ClientQuotaManagerConfig,
    ClientRequestQuotaManager,
    nanos_to_percentage,
)

from ._client_quota_support import START_MS, quota_metric_value

CONFIG = ClientQuotaManagerConfig()


def millis_to_percent(millis: float) -> float:
    """Kafka's test helper: thread time in ms as a percentage of one thread for one second."""
    return millis * 1000 * 1000 * NANOS_TO_PERCENTAGE_PER_SECOND


def new_manager(config: ClientQuotaManagerConfig = CONFIG) -> ClientRequestQuotaManager:
    return ClientRequestQuotaManager(config, now_ms=START_MS)


def test_request_percentage_quota_violation() -> None:
    """ClientRequestQuotaManagerTest.scala: testRequestPercentageQuotaViolation (exact numbers)."""
    mgr = new_manager()
    mgr.update_quota(ClientQuotaEntity(user="ANONYMOUS", client_id="test-client"), 1)  # 1 % = 10 ms per second
    now = START_MS

    def record(value: float) -> int:
        return mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "test-client", value, now)

    # 10 s of 4 ms per second: under quota
    for _ in range(10):
        assert record(millis_to_percent(4)) == 0
        now += 1000

    # A spike half-way into the 11th window: (4*10 + 67.1) ms / 10.5 s = 10.2 ms/s,
    # so (10.2 - 10) / 10 * 10.5 s = 210 ms
    now += 500
    throttle_ms = record(millis_to_percent(67.1))
    assert throttle_ms == 210

    mgr.throttle("ANONYMOUS", "test-client", throttle_ms, now)
    throttle_metric = mgr.metrics.metric(
        mgr.metrics.metric_name("throttle-time", "Request", tags={"user": "ANONYMOUS", "client-id": "test-client"})
    )
    assert throttle_metric is not None
    assert throttle_metric.measurable_value(now) == 210.0
    now += throttle_ms

    # Delays continue until the bursty sample leaves the window
    for _ in range(11):
        record(millis_to_percent(4))
        now += 1000
    assert record(0) == 0, "unthrottled once the bursty sample has rolled over"

    # A spike needing more than one window to drain is capped at one window (1 s), every time
    assert record(millis_to_percent(500)) == 1000
    for _ in range(10):
        now += 1000
        assert record(0) == 1000
    now += 1000
    assert record(0) == 0, "unthrottled once the bursty sample has rolled over"


def test_request_thread_time_in_nanos() -> None:
    """ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs(request): handler time in ns, bounded throttle."""
    mgr = new_manager()
    assert nanos_to_percentage(250_000_000) == 25.0

    # no quota: nothing is recorded
    assert mgr.maybe_record_request_time("alice", "c1", request_thread_time_nanos=900_000_000, now_ms=START_MS) == 0
    assert mgr.metrics.get_sensor("Request-:c1") is None

    mgr.update_quota(ClientQuotaEntity(user="alice"), 10.0)  # 10 % of one thread
    # 900 ms of thread time in a fresh (padded 10 s) window: 9 %/s, under 10 %
    assert mgr.maybe_record_request_time("alice", "c1", request_thread_time_nanos=900_000_000, now_ms=START_MS) == 0
    # network-thread time is recorded but never throttles by itself: 9 % + 2 % = 11 %/s
    mgr.record_network_thread_time("alice", "c1", time_nanos=200_000_000, now_ms=START_MS)
    assert quota_metric_value(mgr, "alice", "c1", START_MS) == pytest.approx(11.0)
    # the next request sees the total: 11.5 % over 10 % for 10 s is 1.5 s, capped at one window
    throttle_ms = mgr.maybe_record_request_time("alice", "c1", request_thread_time_nanos=50_000_000, now_ms=START_MS)
    assert throttle_ms == 1000


def test_request_quota_metric_name() -> None:
    """ClientRequestQuotaManager.clientQuotaMetricName: request-time in group Request, not byte-rate."""
    mgr = new_manager()
    mgr.update_quota(ClientQuotaEntity(client_id="c1"), 5)
    name = mgr.quota_metric("alice", "c1")
    assert (name.name, name.group, name.tags) == ("request-time", "Request", {"user": "", "client-id": "c1"})
    mgr.maybe_record_and_get_throttle_time_ms("alice", "c1", 1.0, START_MS)
    assert mgr.metrics.metric(name) is not None
    assert mgr.metrics.get_sensor("Request-:c1") is not None


def test_exempt_sensor() -> None:
    """ClientRequestQuotaManager.maybeRecordExempt: one shared, never-expiring exempt-request-time sensor."""
    mgr = new_manager()
    exempt_name = mgr.metrics.metric_name("exempt-request-time", "Request")
    exempt_metric = mgr.metrics.metric(exempt_name)
    assert exempt_metric is not None
    assert mgr.metrics.get_sensor("exempt-Request") is mgr.exempt_sensor

    # with no quota configured nothing is recorded, not even exempt time
    mgr.maybe_record_exempt(time_nanos=500_000_000, now_ms=START_MS)
    assert exempt_metric.measurable_value(START_MS) == 0.0

    mgr.update_quota(ClientQuotaEntity(user="alice"), 1.0)
    now = START_MS + 1000
    mgr.maybe_record_exempt(time_nanos=600_000_000, now_ms=now)  # 60 %
    # the registry's default config is 2 samples of 30 s; measuring at START_MS above opened the first
    # sample there (Kafka's SampledStat.oldest), so the window is 1 s elapsed + one padded 30 s window
    assert exempt_metric.measurable_value(now) == pytest.approx(60.0 / 31)
    # exempt time is charged to no client: no client sensor exists, nobody is throttled
    assert [name for name in mgr.metrics.sensors if name.startswith("Request")] == []
    assert mgr.maybe_record_and_get_throttle_time_ms("alice", "c1", 0.5, now) == 0

    # all client sensors expire after an hour idle; the exempt sensor never does
    expired = mgr.expire_sensors(now + 10 * 3_600_000)
    assert "exempt-Request" not in expired
    assert sorted(expired) == ["Request-alice:", "RequestThrottleTime-alice:"]
    assert mgr.metrics.get_sensor("exempt-Request") is mgr.exempt_sensor


def test_throttle_bounded_to_one_window_with_larger_window() -> None:
    """ClientRequestQuotaManager.maxThrottleTimeMs: one quota window, quota.window.size.seconds * 1000."""
    mgr = new_manager(ClientQuotaManagerConfig(num_quota_samples=11, quota_window_size_seconds=2))
    mgr.update_quota(ClientQuotaEntity(user="alice"), 1.0)
    assert mgr.max_throttle_time_ms == 2000
    # 500 % in a 20 s padded window: 25 %/s, 24x over, 480 s unbounded
    assert mgr.maybe_record_and_get_throttle_time_ms("alice", "c1", 500.0, START_MS) == 2000
