"""Ports of Kafka's ``clients/src/test/java/org/apache/kafka/common/metrics/stats/RateTest.java``."""

from __future__ import annotations

import math

import pytest

from quotaplane.metrics import MetricConfig, Rate


@pytest.mark.parametrize(("num_samples", "window_seconds"), [(1, 1), (1, 11), (11, 1), (11, 11)])
def test_rate_with_no_prior_available_samples(clock, num_samples: int, window_seconds: int) -> None:
    """RateTest.java: testRateWithNoPriorAvailableSamples."""
    config = MetricConfig(samples=num_samples, time_window_ms=window_seconds * 1000)
    rate = Rate()
    rate.record(config, 50.0, clock.now_ms)

    # measure one millisecond before the first window completes
    elapsed_ms = window_seconds * 1000 - 1
    clock.sleep(elapsed_ms)
    observed = rate.measure(config, clock.now_ms)

    # with too few windows retained, the rate is taken as if samples-1 empty windows came before
    assert not math.isnan(observed)
    window_seconds_assumed = elapsed_ms / 1000.0 + (num_samples - 1) * window_seconds
    assert observed == pytest.approx(50.0 / window_seconds_assumed, abs=1e-6)


def test_rate_is_consistent_after_the_first_window(clock) -> None:
    """RateTest.java: testRateIsConsistentAfterTheFirstWindow."""
    config = MetricConfig(samples=2, time_window_ms=1000)
    rate = Rate()
    # one event about every 100 ms: at 0, 99, 199, ..., 999 ms into the window
    steps_ms = [0, 99, 100, 100, 100, 100, 100, 100, 100, 100, 100]

    for step in steps_ms:
        clock.sleep(step)
        rate.record(config, 1, clock.now_ms)

    # a 100 ms gap, then a second window of the same events; the first sample overlaps the
    # monitored window, so from here on the rate stays between 10 and 11 per second
    clock.sleep(101)
    for step in steps_ms:
        clock.sleep(step)
        rate.record(config, 1, clock.now_ms)
        observed = rate.measure(config, clock.now_ms)
        assert 10 <= observed <= 11
        assert rate.measure(config, clock.now_ms) == observed
