"""Ports of Kafka's ``clients/src/test/java/org/apache/kafka/common/metrics/MetricsTest.java``.

Kafka's ``Meter`` (a ``Rate`` plus a cumulative total) is written out as its two metrics. Percentiles,
histograms, metric-name templates and the concurrency tests have no counterpart here and are left out.
"""

from __future__ import annotations

import math

import pytest

from quotaplane.metrics import (
    Avg,
    CumulativeCount,
    CumulativeSum,
    Max,
    MetricConfig,
    Metrics,
    Min,
    Quota,
    QuotaViolationError,
    Rate,
    SimpleRate,
    TimeUnit,
    WindowedCount,
    WindowedSum,
)

EPS = 1e-6


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(MetricConfig())


class ConstantMeasurable:
    """A measurable that is not a stat: it reports whatever ``value`` holds."""

    def __init__(self) -> None:
        self.value = 0.0

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.value


def _value(metrics: Metrics, name: str, now_ms: int) -> float:
    return metrics.metric(metrics.metric_name(name, "grp1")).measurable_value(now_ms)


def _children(metrics: Metrics, sensor_name: str):
    """The registry's child-sensor list of a parent (Kafka's test-only ``childrenSensors()``)."""
    return metrics._children.get(sensor_name)


def test_metric_name(metrics) -> None:
    """MetricsTest.java: testMetricName (there is no key-value varargs form here, so no odd-count case)."""
    n1 = metrics.metric_name("name", "group", "description", {"key1": "value1", "key2": "value2"})
    n2 = metrics.metric_name("name", "group", "description", {"key2": "value2", "key1": "value1"})
    assert n1 == n2
    assert hash(n1) == hash(n2)

    assert n1 == metrics.metric_name("name", "group", "another description", {"key1": "value1", "key2": "value2"})
    assert n1 != metrics.metric_name("name", "group", "description", {"key1": "value1", "key2": "other"})
    assert n1 != metrics.metric_name("name", "other-group", "description", {"key1": "value1", "key2": "value2"})


def test_simple_stats(metrics, clock) -> None:
    """MetricsTest.java: testSimpleStats."""
    config = metrics.config
    measurable = ConstantMeasurable()
    metrics.add_metric(
        metrics.metric_name("direct.measurable", "grp1", "A measurable not fed by a sensor."), measurable
    )

    s = metrics.sensor("test.sensor", now_ms=clock.now_ms)
    s.add(metrics.metric_name("test.avg", "grp1"), Avg())
    s.add(metrics.metric_name("test.max", "grp1"), Max())
    s.add(metrics.metric_name("test.min", "grp1"), Min())
    s.add(metrics.metric_name("test.rate", "grp1"), Rate(unit=TimeUnit.SECONDS))
    s.add(metrics.metric_name("test.total", "grp1"), CumulativeSum())
    s.add(metrics.metric_name("test.occurrences", "grp1"), Rate(WindowedCount(), unit=TimeUnit.SECONDS))
    s.add(metrics.metric_name("test.occurrences.total", "grp1"), CumulativeCount())
    s.add(metrics.metric_name("test.count", "grp1"), WindowedCount())

    s2 = metrics.sensor("test.sensor2", now_ms=clock.now_ms)
    s2.add(metrics.metric_name("s2.total", "grp1"), CumulativeSum())
    s2.record(5.0, clock.now_ms)

    count = 10
    for i in range(count):
        s.record(i, clock.now_ms)
    total = sum(range(count))

    # before any time passes the rate is over the padded window of samples-1 windows
    elapsed_secs = config.time_window_ms * (config.samples - 1) / 1000.0
    assert _value(metrics, "test.occurrences", clock.now_ms) == pytest.approx(count / elapsed_secs, abs=EPS)

    clock.sleep(2000)
    elapsed_secs += 2

    assert _value(metrics, "s2.total", clock.now_ms) == pytest.approx(5.0, abs=EPS)
    assert _value(metrics, "test.avg", clock.now_ms) == pytest.approx(4.5, abs=EPS)
    assert _value(metrics, "test.max", clock.now_ms) == pytest.approx(count - 1, abs=EPS)
    assert _value(metrics, "test.min", clock.now_ms) == pytest.approx(0.0, abs=EPS)
    assert _value(metrics, "test.rate", clock.now_ms) == pytest.approx(total / elapsed_secs, abs=EPS)  # 1.40625
    assert _value(metrics, "test.total", clock.now_ms) == pytest.approx(total, abs=EPS)
    assert _value(metrics, "test.occurrences", clock.now_ms) == pytest.approx(count / elapsed_secs, abs=EPS)
    assert _value(metrics, "test.occurrences.total", clock.now_ms) == pytest.approx(count, abs=EPS)
    assert _value(metrics, "test.count", clock.now_ms) == pytest.approx(count, abs=EPS)

    assert _value(metrics, "direct.measurable", clock.now_ms) == 0.0
    measurable.value = 0.25
    assert _value(metrics, "direct.measurable", clock.now_ms) == 0.25


def test_hierarchical_sensors(metrics, clock) -> None:
    """MetricsTest.java: testHierarchicalSensors."""
    now = clock.now_ms
    parent1 = metrics.sensor("test.parent1", now_ms=now)
    parent1.add(metrics.metric_name("test.parent1.count", "grp1"), WindowedCount())
    parent2 = metrics.sensor("test.parent2", now_ms=now)
    parent2.add(metrics.metric_name("test.parent2.count", "grp1"), WindowedCount())
    child1 = metrics.sensor("test.child1", now_ms=now, parents=(parent1, parent2))
    child1.add(metrics.metric_name("test.child1.count", "grp1"), WindowedCount())
    child2 = metrics.sensor("test.child2", now_ms=now, parents=(parent1,))
    child2.add(metrics.metric_name("test.child2.count", "grp1"), WindowedCount())
    grandchild = metrics.sensor("test.grandchild", now_ms=now, parents=(child1,))
    grandchild.add(metrics.metric_name("test.grandchild.count", "grp1"), WindowedCount())

    for sensor in (parent1, parent2, child1, child2, grandchild):
        sensor.record(1.0, now)

    p1, p2, c1, c2, gc = (s.metrics[0].measurable_value(now) for s in (parent1, parent2, child1, child2, grandchild))

    # each count is one plus the counts of its children
    assert gc == pytest.approx(1.0, abs=EPS)
    assert c1 == pytest.approx(1.0 + gc, abs=EPS)
    assert c2 == pytest.approx(1.0, abs=EPS)
    assert p2 == pytest.approx(1.0 + c1, abs=EPS)
    assert p1 == pytest.approx(1.0 + c1 + c2, abs=EPS)
    assert _children(metrics, "test.parent1") == [child1, child2]
    assert _children(metrics, "test.parent2") == [child1]
    assert _children(metrics, "test.grandchild") is None


def test_bad_sensor_hierarchy(metrics, clock) -> None:
    """MetricsTest.java: testBadSensorHierarchy."""
    p = metrics.sensor("parent", now_ms=clock.now_ms)
    c1 = metrics.sensor("child1", now_ms=clock.now_ms, parents=(p,))
    c2 = metrics.sensor("child2", now_ms=clock.now_ms, parents=(p,))
    with pytest.raises(ValueError, match="Circular dependency"):
        metrics.sensor("gc", now_ms=clock.now_ms, parents=(c1, c2))
    assert metrics.get_sensor("gc") is None


def test_remove_child_sensor(clock) -> None:
    """MetricsTest.java: testRemoveChildSensor."""
    metrics = Metrics()
    parent = metrics.sensor("parent", now_ms=clock.now_ms)
    child = metrics.sensor("child", now_ms=clock.now_ms, parents=(parent,))
    assert _children(metrics, "parent") == [child]

    metrics.remove_sensor("child")

    assert _children(metrics, "parent") == []
    assert metrics.get_sensor("parent") is parent


def test_remove_sensor(metrics, clock) -> None:
    """MetricsTest.java: testRemoveSensor."""
    now = clock.now_ms
    size = len(metrics.metrics)
    parent1 = metrics.sensor("test.parent1", now_ms=now)
    parent1.add(metrics.metric_name("test.parent1.count", "grp1"), WindowedCount())
    parent2 = metrics.sensor("test.parent2", now_ms=now)
    parent2.add(metrics.metric_name("test.parent2.count", "grp1"), WindowedCount())
    child1 = metrics.sensor("test.child1", now_ms=now, parents=(parent1, parent2))
    child1.add(metrics.metric_name("test.child1.count", "grp1"), WindowedCount())
    child2 = metrics.sensor("test.child2", now_ms=now, parents=(parent2,))
    child2.add(metrics.metric_name("test.child2.count", "grp1"), WindowedCount())
    grandchild = metrics.sensor("test.gchild2", now_ms=now, parents=(child2,))
    grandchild.add(metrics.metric_name("test.gchild2.count", "grp1"), WindowedCount())

    def assert_gone(name: str) -> None:
        assert metrics.get_sensor(name) is None
        assert _children(metrics, name) is None
        assert metrics.metrics.get(metrics.metric_name(f"{name}.count", "grp1")) is None

    # removing a parent removes its children too, and their metrics
    assert metrics.get_sensor("test.parent1") is not None
    metrics.remove_sensor("test.parent1")
    assert_gone("test.parent1")
    assert_gone("test.child1")
    assert _children(metrics, "test.parent2") == [child2]

    assert metrics.get_sensor("test.gchild2") is not None
    metrics.remove_sensor("test.gchild2")
    assert_gone("test.gchild2")

    assert metrics.get_sensor("test.child2") is not None
    metrics.remove_sensor("test.child2")
    assert_gone("test.child2")

    assert metrics.get_sensor("test.parent2") is not None
    metrics.remove_sensor("test.parent2")
    assert_gone("test.parent2")

    assert len(metrics.metrics) == size


def test_remove_inactive_metrics(metrics, clock) -> None:
    """MetricsTest.java: testRemoveInactiveMetrics."""
    s1 = metrics.sensor("test.s1", now_ms=clock.now_ms, inactive_sensor_expiration_time_seconds=1)
    s1.add(metrics.metric_name("test.s1.count", "grp1"), WindowedCount())
    s2 = metrics.sensor("test.s2", now_ms=clock.now_ms, inactive_sensor_expiration_time_seconds=3)
    s2.add(metrics.metric_name("test.s2.count", "grp1"), WindowedCount())

    def present(name: str) -> bool:
        in_sensors = metrics.get_sensor(name) is not None
        in_metrics = metrics.metric(metrics.metric_name(f"{name}.count", "grp1")) is not None
        assert in_sensors == in_metrics
        return in_sensors

    assert metrics.expire_sensors(clock.now_ms) == []
    assert present("test.s1")
    assert present("test.s2")

    clock.sleep(1001)
    assert metrics.expire_sensors(clock.now_ms) == ["test.s1"]
    assert not present("test.s1")
    assert present("test.s2")

    # recording restarts s2's inactivity clock: it survives the 3 s mark after its creation
    s2.record(1.0, clock.now_ms)
    clock.sleep(2000)
    assert metrics.expire_sensors(clock.now_ms) == []
    assert present("test.s2")

    clock.sleep(1001)
    assert metrics.expire_sensors(clock.now_ms) == ["test.s2"]
    assert not present("test.s2")

    # an expired sensor and its metric can be created again
    s1 = metrics.sensor("test.s1", now_ms=clock.now_ms, inactive_sensor_expiration_time_seconds=1)
    s1.add(metrics.metric_name("test.s1.count", "grp1"), WindowedCount())
    assert present("test.s1")


def test_remove_metric(metrics) -> None:
    """MetricsTest.java: testRemoveMetric."""
    size = len(metrics.metrics)
    metrics.add_metric(metrics.metric_name("test1", "grp1"), WindowedCount())
    metrics.add_metric(metrics.metric_name("test2", "grp1"), WindowedCount())
    assert len(metrics.metrics) == size + 2

    assert metrics.remove_metric(metrics.metric_name("test1", "grp1")) is not None
    assert metrics.metrics.get(metrics.metric_name("test1", "grp1")) is None
    assert metrics.metrics.get(metrics.metric_name("test2", "grp1")) is not None

    assert metrics.remove_metric(metrics.metric_name("test2", "grp1")) is not None
    assert metrics.metrics.get(metrics.metric_name("test2", "grp1")) is None
    assert metrics.remove_metric(metrics.metric_name("test2", "grp1")) is None

    assert len(metrics.metrics) == size


def test_time_windowing(clock) -> None:
    """MetricsTest.java: testTimeWindowing."""
    count = WindowedCount()
    config = MetricConfig(samples=2, time_window_ms=1)
    count.record(config, 1.0, clock.now_ms)
    clock.sleep(1)
    count.record(config, 1.0, clock.now_ms)
    assert count.measure(config, clock.now_ms) == pytest.approx(2.0, abs=EPS)
    clock.sleep(1)
    count.record(config, 1.0, clock.now_ms)  # the oldest event times out
    assert count.measure(config, clock.now_ms) == pytest.approx(2.0, abs=EPS)


def test_old_data_has_no_effect(clock) -> None:
    """MetricsTest.java: testOldDataHasNoEffect."""
    stat = Max()
    config = MetricConfig(samples=2, time_window_ms=100)
    stat.record(config, 50, clock.now_ms)
    assert stat.measure(config, clock.now_ms) == 50
    clock.sleep(config.samples * config.time_window_ms)
    assert math.isnan(stat.measure(config, clock.now_ms))


def test_sampled_stat_returns_nan_when_no_values_exist(clock) -> None:
    """MetricsTest.java: testSampledStatReturnsNaNWhenNoValuesExist."""
    config = MetricConfig(samples=2, time_window_ms=100)
    stats = [Max(), Min(), Avg()]
    for stat in stats:
        stat.record(config, 50, clock.now_ms)

    # every sample expires and is reset to the initial value, which these stats do not report
    clock.sleep(config.samples * config.time_window_ms)
    for stat in stats:
        assert math.isnan(stat.measure(config, clock.now_ms)), type(stat).__name__


def test_sampled_stat_returns_initial_value_when_no_values_exist(clock) -> None:
    """MetricsTest.java: testSampledStatReturnsInitialValueWhenNoValuesExist."""
    config = MetricConfig(samples=2, time_window_ms=100)
    count, sampled_total = WindowedCount(), WindowedSum()
    count.record(config, 50, clock.now_ms)
    sampled_total.record(config, 50, clock.now_ms)
    assert (count.measure(config, clock.now_ms), sampled_total.measure(config, clock.now_ms)) == (1.0, 50.0)

    clock.sleep(config.samples * config.time_window_ms)
    assert count.measure(config, clock.now_ms) == 0.0
    assert sampled_total.measure(config, clock.now_ms) == 0.0


def test_duplicate_metric_name(metrics, clock) -> None:
    """MetricsTest.java: testDuplicateMetricName."""
    metrics.sensor("test", now_ms=clock.now_ms).add(metrics.metric_name("test", "grp1"), Avg())
    with pytest.raises(ValueError, match="already exists"):
        metrics.sensor("test2", now_ms=clock.now_ms).add(metrics.metric_name("test", "grp1"), CumulativeSum())
    with pytest.raises(ValueError, match="already exists"):
        metrics.add_metric(metrics.metric_name("test", "grp1"), CumulativeSum())
    assert type(metrics.metric(metrics.metric_name("test", "grp1")).stat) is Avg


def test_quotas(metrics, clock) -> None:
    """MetricsTest.java: testQuotas."""
    now = clock.now_ms
    sensor = metrics.sensor("test", now_ms=now)
    sensor.add(metrics.metric_name("test1.total", "grp1"), CumulativeSum(), MetricConfig(quota=Quota.upper_bound(5.0)))
    sensor.add(metrics.metric_name("test2.total", "grp1"), CumulativeSum(), MetricConfig(quota=Quota.lower_bound(0.0)))

    sensor.record(5.0, now)
    with pytest.raises(QuotaViolationError) as excinfo:
        sensor.record(1.0, now)
    assert excinfo.value.metric.metric_name.name == "test1.total"
    assert (excinfo.value.value, excinfo.value.bound) == (6.0, 5.0)
    # the violating value stays recorded
    assert _value(metrics, "test1.total", now) == pytest.approx(6.0, abs=EPS)

    sensor.record(-6.0, now)
    with pytest.raises(QuotaViolationError) as excinfo:
        sensor.record(-1.0, now)
    assert excinfo.value.metric.metric_name.name == "test2.total"
    assert (excinfo.value.value, excinfo.value.bound) == (-1.0, 0.0)


def test_quotas_equality() -> None:
    """MetricsTest.java: testQuotasEquality."""
    quota1 = Quota.upper_bound(10.5)
    quota2 = Quota.lower_bound(10.5)
    assert quota1 != quota2

    quota3 = Quota.lower_bound(10.5)
    assert quota2 == quota3
    assert hash(quota2) == hash(quota3)


def test_rate_windowing(metrics, clock) -> None:
    """MetricsTest.java: testRateWindowing."""
    cfg = MetricConfig(samples=3)  # the default 30 s window
    s = metrics.sensor("test.sensor", cfg, now_ms=clock.now_ms)
    s.add(metrics.metric_name("test.rate", "grp1"), Rate(unit=TimeUnit.SECONDS))
    s.add(metrics.metric_name("test.total", "grp1"), CumulativeSum())
    s.add(metrics.metric_name("test.count.rate", "grp1"), Rate(WindowedCount(), unit=TimeUnit.SECONDS))
    s.add(metrics.metric_name("test.count.total", "grp1"), CumulativeCount())

    total = 0
    count = cfg.samples - 1
    # one record per window
    for _ in range(count):
        s.record(100, clock.now_ms)
        total += 100
        clock.sleep(cfg.time_window_ms)
        assert _value(metrics, "test.total", clock.now_ms) == pytest.approx(total, abs=EPS)

    clock.sleep(cfg.time_window_ms // 2)

    # samples - 1 whole windows have passed, plus half of the last: no padding, 75 s
    elapsed_secs = cfg.time_window_ms / 1000.0 * (cfg.samples - 0.5)
    rate_metric = metrics.metric(metrics.metric_name("test.rate", "grp1"))
    assert _value(metrics, "test.rate", clock.now_ms) == pytest.approx(total / elapsed_secs, abs=EPS)
    assert _value(metrics, "test.count.rate", clock.now_ms) == pytest.approx(count / elapsed_secs, abs=EPS)
    assert rate_metric.stat.window_size(cfg, clock.now_ms) / 1000.0 == pytest.approx(elapsed_secs, abs=EPS)
    assert _value(metrics, "test.total", clock.now_ms) == pytest.approx(total, abs=EPS)
    assert _value(metrics, "test.count.total", clock.now_ms) == pytest.approx(count, abs=EPS)

    # the rates expire, the totals are cumulative
    clock.sleep(cfg.time_window_ms * cfg.samples)
    assert _value(metrics, "test.rate", clock.now_ms) == 0
    assert _value(metrics, "test.count.rate", clock.now_ms) == 0
    assert _value(metrics, "test.total", clock.now_ms) == pytest.approx(total, abs=EPS)
    assert _value(metrics, "test.count.total", clock.now_ms) == pytest.approx(count, abs=EPS)


def test_simple_rate(clock) -> None:
    """MetricsTest.java: testSimpleRate."""
    rate = SimpleRate()
    config = MetricConfig(samples=10, time_window_ms=1000)

    def record(value: float) -> None:
        rate.record(config, value, clock.now_ms)

    def measure() -> float:
        return rate.measure(config, clock.now_ms)

    # within the first window the span is one whole window, not the time elapsed
    record(1000)
    assert measure() == 1000
    for sleep_ms in (100, 100, 200, 600):  # at 0.1 s, 0.2 s, 0.4 s and 1.0 s
        clock.sleep(sleep_ms)
        assert measure() == 1000

    # after that the span is the time since the first recording
    clock.sleep(200)
    assert measure() == 1000 / 1.2
    clock.sleep(200)
    assert measure() == 1000 / 1.4

    record(1000)
    assert measure() == 2000 / 1.4

    clock.sleep(1100)
    assert measure() == 2000 / 2.5
    record(1000)
    assert measure() == 3000 / 2.5

    clock.sleep(6500)
    assert measure() == pytest.approx(3000 / 9, rel=1e-12)
    record(1000)
    assert measure() == pytest.approx(4000 / 9, rel=1e-12)

    # past the 10-window mark the first sample (1000 at 0 s) is purged; the oldest left starts at 1.4 s
    clock.sleep(1500)
    assert measure() == pytest.approx((4000 - 1000) / (10.5 - 1.4), rel=1e-12)
    record(1000)
    assert measure() == pytest.approx((5000 - 1000) / (10.5 - 1.4), rel=1e-12)
