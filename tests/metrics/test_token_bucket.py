"""Ports of Kafka's ``clients/src/test/java/org/apache/kafka/common/metrics/TokenBucketTest.java``."""

from __future__ import annotations

import pytest

from quotaplane.metrics import MetricConfig, Quota, TokenBucket

# 5 units per second, burst = 10 samples * 2 s * 5 = 100 units
CONFIG = MetricConfig(samples=10, time_window_ms=2000, quota=Quota.upper_bound(5))


def test_record(clock) -> None:
    """TokenBucketTest.java: testRecord."""
    bucket = TokenBucket()
    # the bucket starts empty at time 0, so at a wall-clock time it has refilled to the burst
    assert bucket.measure(CONFIG, clock.now_ms) == pytest.approx(100, abs=0.1)

    bucket.record(CONFIG, 60, clock.now_ms)
    assert bucket.measure(CONFIG, clock.now_ms) == pytest.approx(40, abs=0.1)

    clock.sleep(2000)
    bucket.record(CONFIG, 5, clock.now_ms)
    assert bucket.measure(CONFIG, clock.now_ms) == pytest.approx(45, abs=0.1)

    clock.sleep(2000)
    bucket.record(CONFIG, 60, clock.now_ms)
    assert bucket.measure(CONFIG, clock.now_ms) == pytest.approx(-5, abs=0.1)


def test_unrecord(clock) -> None:
    """TokenBucketTest.java: testUnrecord."""
    bucket = TokenBucket()
    assert bucket.measure(CONFIG, clock.now_ms) == pytest.approx(100, abs=0.1)

    # giving back credits never lifts the bucket above its burst
    bucket.record(CONFIG, -60, clock.now_ms)
    assert bucket.measure(CONFIG, clock.now_ms) == pytest.approx(100, abs=0.1)

    clock.sleep(2000)
    bucket.record(CONFIG, 60, clock.now_ms)
    assert bucket.measure(CONFIG, clock.now_ms) == pytest.approx(40, abs=0.1)

    clock.sleep(2000)
    bucket.record(CONFIG, -60, clock.now_ms)
    assert bucket.measure(CONFIG, clock.now_ms) == pytest.approx(100, abs=0.1)
