"""``Rate.record_and_measure`` (the quota hot path) against the reference: ``Sensor.record`` then ``Rate.measure``.

Two rates see the same random workload: one through the fused call, the other through a sensor
recording one by one and the reference measurement (purge, left-to-right ``reduce``, padded window).
Every measurement, every window and, at the end, every sample must be identical, bit for bit. The
workloads cover the first sample, recordings at the same ms (the fused call's remembered window),
window rolls by time and by events, purges after idle gaps, time going backwards, values taken back
(negative), quota and sampling changes mid-stream, and reference calls interleaved on the fused rate.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.metrics import (
    LONG_MAX_VALUE,
    MetricConfig,
    MetricName,
    Metrics,
    Quota,
    Rate,
    SimpleRate,
    TimeUnit,
    WindowedCount,
    WindowedSum,
)

from .conftest import START_MS
from .test_properties import KafkaWindowedSumModel

FUSED = settings(deadline=None, max_examples=300)

configs = st.builds(
    MetricConfig,
    samples=st.sampled_from([1, 2, 3, 11]),
    time_window_ms=st.sampled_from([1, 7, 1000]),
    quota=st.one_of(st.none(), st.floats(0.5, 1e6).map(Quota.upper_bound)),
    event_window=st.one_of(st.just(LONG_MAX_VALUE), st.integers(1, 3)),
)
values = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    st.integers(0, 10**6),
    st.sampled_from([0.0, -0.0, 0.1, 0.2, 0.3, 1e-300, 1e300]),
)
#: Gaps between calls: mostly the same ms or within a window, sometimes past every sample, sometimes back.
delays = st.one_of(
    st.just(0),
    st.just(0),
    st.integers(0, 8),
    st.sampled_from([999, 1000, 1001, 2000, 10_999, 11_000, 12_000, 50_000]),
    st.integers(-1500, 0),
)
steps = st.one_of(
    st.tuples(st.just("record"), delays, values),
    st.tuples(st.just("record"), delays, values),
    st.tuples(st.just("record"), delays, values),
    st.tuples(st.just("reference-record"), delays, values),
    st.tuples(st.just("measure"), delays, st.none()),
    st.tuples(st.just("config"), st.just(0), configs),
)


def same(a: float, b: float) -> bool:
    """Bit-for-bit equality (NaN equals NaN, 0.0 differs from -0.0)."""
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))


class Reference:
    """A rate recorded through a sensor, one call at a time, and measured with the reference methods."""

    def __init__(self, config: MetricConfig, now_ms: int) -> None:
        self.metrics = Metrics()
        self.sensor = self.metrics.sensor("reference", now_ms=now_ms)
        self.rate = Rate()
        self.sensor.add(MetricName("rate", "test"), self.rate, config)
        self.metric = self.sensor.metrics[0]

    def set_config(self, config: MetricConfig) -> None:
        self.metric.config = config

    def record_and_measure(self, value: float, now_ms: int) -> tuple[float, int]:
        self.sensor.record(value, now_ms, check_quotas=False)
        measured = self.metric.measurable_value(now_ms)
        return measured, self.rate.window_size(self.metric.config, now_ms)


@FUSED
@given(config=configs, workload=st.lists(steps, max_size=80))
def test_record_and_measure_equals_sensor_record_then_measure(config, workload) -> None:
    now = START_MS
    fused, reference = Rate(), Reference(config, now)
    for kind, delay, arg in workload:
        now += delay
        if kind == "record":
            measured = fused.record_and_measure(config, arg, now)
            expected, window = reference.record_and_measure(arg, now)
            assert same(measured, expected), (measured, expected)
            assert fused.last_window_ms == window
        elif kind == "reference-record":  # the reference methods on the fused rate too
            fused.record(config, arg, now)
            reference.sensor.record(arg, now, check_quotas=False)
        elif kind == "measure":
            assert same(fused.measure(config, now), reference.metric.measurable_value(now))
        else:
            config = arg
            reference.set_config(config)
    assert repr(fused) == repr(reference.rate)


@FUSED
@given(config=configs, workload=st.lists(st.tuples(delays, values), max_size=60))
def test_record_and_measure_equals_the_kafka_model(config, workload) -> None:
    """The same workload against test_properties' brute-force model of Kafka's Java, for an independent check."""
    now = START_MS
    rate, model = Rate(), KafkaWindowedSumModel()
    for delay, value in workload:
        now += delay
        model.record(config, value, now)
        assert same(rate.record_and_measure(config, value, now), model.measure_rate(config, now))
        assert rate.last_window_ms == model.window_size(config, now)


def test_a_recording_at_the_same_ms_reuses_the_window_and_still_sums_left_to_right() -> None:
    """0.1 + 0.2 + 0.3 summed as Java does (0.6000000000000001), not as a running total might round."""
    config = MetricConfig(samples=2, time_window_ms=1000)
    rate = Rate()
    rate.record_and_measure(config, 0.1, START_MS)
    rate.record_and_measure(config, 0.2, START_MS + 1000)  # a second sample
    # the remembered window is reused at the same ms; the total is recomputed over both samples
    assert rate.record_and_measure(config, 0.3, START_MS + 1000) == ((0.1 + (0.2 + 0.3)) / 1.0)
    assert rate.last_window_ms == 1000


@pytest.mark.parametrize(
    "make_rate",
    [lambda: Rate(WindowedCount()), lambda: Rate(unit=TimeUnit.MINUTES), SimpleRate],
    ids=["windowed-count", "minutes", "simple-rate"],
)
def test_other_rates_take_the_reference_path(make_rate) -> None:
    config = MetricConfig(samples=3, time_window_ms=1000)
    fused, reference = make_rate(), make_rate()
    for now, value in [(START_MS, 5.0), (START_MS, 7.0), (START_MS + 1500, 1.0), (START_MS + 9000, 2.0)]:
        measured = fused.record_and_measure(config, value, now)
        reference.record(config, value, now)
        expected, window = reference.measure_with_window(config, now)
        assert same(measured, expected)
        assert fused.last_window_ms == window


def test_changing_the_unit_forgets_the_remembered_window() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000)
    rate = Rate()
    rate.record_and_measure(config, 60.0, START_MS)
    rate.record_and_measure(config, 60.0, START_MS + 1)
    rate.unit = TimeUnit.MINUTES
    assert rate.record_and_measure(config, 60.0, START_MS + 1) == rate.measure(config, START_MS + 1)


def test_a_new_stat_is_never_taken_for_the_old_one() -> None:
    """Epochs are never reused: a rate given another stat cannot take its samples for the old ones."""
    config = MetricConfig(samples=2, time_window_ms=1000)
    rate = Rate()
    rate.record_and_measure(config, 100.0, START_MS)
    rate.stat = WindowedSum()
    assert rate.record_and_measure(config, 1.0, START_MS) == 1.0 / 1.0
