"""Properties of the metric primitives against Kafka's algorithms (``SampledStat.java``, ``Rate.java``,
``TokenBucket.java`` in ``clients/src/main/java/org/apache/kafka/common/metrics``), over random inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.metrics import (
    LONG_MAX_VALUE,
    Avg,
    MetricConfig,
    Quota,
    Rate,
    SimpleRate,
    TokenBucket,
    WindowedCount,
    WindowedSum,
)
from quotaplane.metrics import Max as MaxStat
from quotaplane.metrics import Min as MinStat

from .conftest import START_MS

# no deadline: a slow CI machine must not fail a property
PROPERTY = settings(deadline=None, max_examples=200)

configs = st.builds(
    MetricConfig,
    samples=st.integers(1, 6),
    time_window_ms=st.integers(1, 2000),
    event_window=st.one_of(st.just(LONG_MAX_VALUE), st.integers(1, 4)),
)
values = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


def _delays(config: MetricConfig) -> st.SearchStrategy[int]:
    """Gaps between calls: mostly within a window, sometimes past the whole monitored span."""
    span = config.samples * config.time_window_ms
    return st.one_of(st.just(0), st.integers(0, config.time_window_ms), st.integers(0, 2 * span))


@st.composite
def scenarios(draw) -> tuple[MetricConfig, list[tuple[int, float | None]]]:
    """A config and a list of (delay, value) steps; a value of None is a measurement."""
    config = draw(configs)
    steps = draw(st.lists(st.tuples(_delays(config), st.one_of(st.none(), values)), max_size=60))
    return config, steps


# --- a brute-force model of Kafka's SampledStat + WindowedSum + Rate ----------------------------


@dataclass
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0
    event_count: int = 0


class KafkaWindowedSumModel:
    """Kafka's sampled sum as the Java reads: S+1 sample objects in a ring, purged by last event age."""

    def __init__(self) -> None:
        self.samples: list[_Sample] = []
        self.current = 0

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        if not self.samples:
            self.samples.append(_Sample(now_ms, now_ms))
        sample = self.samples[self.current]
        if now_ms - sample.start_ms >= config.time_window_ms or sample.event_count >= config.event_window:
            self.current = (self.current + 1) % (config.samples + 1)
            if self.current == len(self.samples):
                self.samples.append(_Sample(now_ms, now_ms))
            else:
                self.samples[self.current] = _Sample(now_ms, now_ms)
            sample = self.samples[self.current]
        sample.value += value
        sample.event_count += 1
        sample.last_event_ms = now_ms

    def purge(self, config: MetricConfig, now_ms: int) -> None:
        for i, sample in enumerate(self.samples):
            if now_ms - sample.last_event_ms >= config.samples * config.time_window_ms:
                self.samples[i] = _Sample(now_ms, now_ms)

    def measure_sum(self, config: MetricConfig, now_ms: int) -> float:
        self.purge(config, now_ms)
        total = 0.0
        for sample in self.samples:
            total += sample.value
        return total

    def window_size(self, config: MetricConfig, now_ms: int) -> int:
        self.purge(config, now_ms)
        if not self.samples:
            self.samples.append(_Sample(now_ms, now_ms))
        return _padded_window_ms(config, now_ms - min(s.start_ms for s in self.samples))

    def measure_rate(self, config: MetricConfig, now_ms: int) -> float:
        total = self.measure_sum(config, now_ms)
        return total / (self.window_size(config, now_ms) / 1000.0)


def _padded_window_ms(config: MetricConfig, elapsed_ms: int) -> int:
    """Rate's window, written as the sawtooth it is: (S-1)·W + elapsed mod W until S-1 windows have passed."""
    padded_span = (config.samples - 1) * config.time_window_ms
    if elapsed_ms < padded_span:
        return max(padded_span + elapsed_ms % config.time_window_ms, 1)
    return max(elapsed_ms, 1)


# --- properties -----------------------------------------------------------------------------------


@PROPERTY
@given(
    samples=st.integers(1, 30),
    window_ms=st.integers(1, 5000),
    data=st.data(),
)
def test_rate_window_size_pads_whole_windows(samples: int, window_ms: int, data) -> None:
    """RateTest.java (window padding): the window after one record is the sawtooth, not max(elapsed, (S-1)·W)."""
    config = MetricConfig(samples=samples, time_window_ms=window_ms)
    elapsed = data.draw(st.integers(0, 2 * samples * window_ms), label="elapsed")
    rate = Rate()
    rate.record(config, 1.0, START_MS)

    window = rate.window_size(config, START_MS + elapsed)

    if elapsed >= samples * window_ms:
        # the only sample is purged and restarts now: nothing has elapsed
        assert window == max((samples - 1) * window_ms, 1)
    elif elapsed < (samples - 1) * window_ms:
        assert window == (samples - 1) * window_ms + elapsed % window_ms
        if elapsed % window_ms:
            assert window != max(elapsed, (samples - 1) * window_ms)
    else:
        assert window == max(elapsed, 1)


@PROPERTY
@given(
    scenario=scenarios(),
    make_stat=st.sampled_from([WindowedSum, WindowedCount, Avg, MaxStat, MinStat, Rate, SimpleRate, TokenBucket]),
    delay=st.integers(0, 100_000),
)
def test_measurements_are_repeatable_at_the_same_timestamp(scenario, make_stat, delay: int) -> None:
    """RateTest.java (testRateIsConsistentAfterTheFirstWindow): measuring twice at one time gives one value."""
    config, steps = scenario
    config = config.with_quota(Quota.upper_bound(10.0))  # TokenBucket measures only with a quota
    stat = make_stat()
    now = START_MS
    for step_delay, value in steps:
        now += step_delay
        if value is None:
            first = stat.measure(config, now)
            assert _same(stat.measure(config, now), first)
        else:
            stat.record(config, value, now)

    now += delay
    first = stat.measure(config, now)
    assert _same(stat.measure(config, now), first)
    assert _same(stat.measure(config, now), first)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@PROPERTY
@given(scenario=scenarios(), final_delay=st.integers(0, 20_000))
def test_windowed_sum_matches_kafka_sampled_stat(scenario, final_delay: int) -> None:
    """SampledStatTest.java: WindowedSum and Rate equal a brute-force model of Kafka's SampledStat."""
    config, steps = scenario
    windowed_sum, sum_model = WindowedSum(), KafkaWindowedSumModel()
    rate, rate_model = Rate(), KafkaWindowedSumModel()

    now = START_MS
    for step_delay, value in [*steps, (final_delay, None)]:
        now += step_delay
        if value is None:
            assert windowed_sum.measure(config, now) == sum_model.measure_sum(config, now)
            assert rate.measure(config, now) == rate_model.measure_rate(config, now)
            assert rate.window_size(config, now) == rate_model.window_size(config, now)
        else:
            windowed_sum.record(config, value, now)
            sum_model.record(config, value, now)
            rate.record(config, value, now)
            rate_model.record(config, value, now)
        assert windowed_sum.sample_count == len(sum_model.samples) <= config.samples + 1


@PROPERTY
@given(
    samples=st.integers(1, 20),
    window_ms=st.integers(1, 5000),
    bound=st.floats(0.001, 1e5, allow_nan=False),
    steps=st.lists(st.tuples(st.integers(0, 60_000), st.one_of(st.none(), values)), max_size=60),
)
def test_token_bucket_never_exceeds_its_burst(samples: int, window_ms: int, bound: float, steps) -> None:
    """TokenBucketTest.java: whatever is recorded or given back, the credits never exceed the burst."""
    config = MetricConfig(samples=samples, time_window_ms=window_ms, quota=Quota.upper_bound(bound))
    burst = samples * (window_ms / 1000.0) * bound
    bucket = TokenBucket()
    now = START_MS
    for delay, value in steps:
        now += delay
        if value is None:
            assert bucket.measure(config, now) <= burst
        else:
            before = bucket.measure(config, now)
            bucket.record(config, value, now)
            assert bucket.tokens == min(burst, before - value)
        assert bucket.tokens <= burst
