"""Ports of Kafka's ``clients/src/test/java/org/apache/kafka/common/metrics/stats/SampledStatTest.java``."""

from __future__ import annotations

import pytest

from quotaplane.metrics import MetricConfig, WindowedSum

CONFIG = MetricConfig(samples=2, time_window_ms=1000)  # a monitored window of 2 s


class SampleCount(WindowedSum):
    """Measures the number of retained samples that hold an event: each such sample is worth 1."""

    @staticmethod
    def _fold(current: float, value: float) -> float:
        return 1.0


@pytest.fixture
def stat() -> SampleCount:
    return SampleCount()


def complete_sample(stat: SampleCount, clock) -> None:
    """One sample with an event at its first and its last millisecond; leaves the clock at its end."""
    stat.record(CONFIG, 1, clock.now_ms)
    clock.sleep(CONFIG.time_window_ms - 1)
    stat.record(CONFIG, 1, clock.now_ms)
    clock.sleep(1)


def test_sample_is_purged_if_doesnt_overlap(stat, clock) -> None:
    """SampledStatTest.java: testSampleIsPurgedIfDoesntOverlap."""
    complete_sample(stat, clock)
    clock.sleep(2500)

    assert stat.measure(CONFIG, clock.now_ms) == 0


def test_sample_is_kept_if_overlaps(stat, clock) -> None:
    """SampledStatTest.java: testSampleIsKeptIfOverlaps."""
    complete_sample(stat, clock)
    clock.sleep(1500)

    assert stat.measure(CONFIG, clock.now_ms) == 1


def test_sample_is_kept_if_overlaps_and_extra(stat, clock) -> None:
    """SampledStatTest.java: testSampleIsKeptIfOverlapsAndExtra."""
    complete_sample(stat, clock)
    clock.sleep(100)
    complete_sample(stat, clock)
    clock.sleep(100)
    stat.record(CONFIG, 1, clock.now_ms)

    # 2.2 s after the start: the first sample still overlaps the window and is the extra (n+1)th
    assert stat.measure(CONFIG, clock.now_ms) == 3
    assert stat.sample_count == CONFIG.samples + 1
