"""Ports of Kafka's ``clients/src/test/java/org/apache/kafka/common/metrics/SensorTest.java``.

Left out: ``testCheckQuotasInMultiThreads`` (the core is single-threaded by design) and the
``Meter`` half of ``testExpiredSensor`` (there are no compound stats here).
"""

from __future__ import annotations

import pytest

from quotaplane.metrics import (
    Avg,
    CumulativeCount,
    MetricConfig,
    MetricName,
    Metrics,
    Quota,
    QuotaViolationError,
    Rate,
    RecordingLevel,
    Sensor,
    TokenBucket,
    WindowedSum,
)

INFO, DEBUG, TRACE = RecordingLevel.INFO, RecordingLevel.DEBUG, RecordingLevel.TRACE


class RecordingStat:
    """A stat that remembers each call it gets (the Mockito mock of Kafka's test); measures ``value``."""

    def __init__(self) -> None:
        self.value = 0.0
        self.records: list[tuple[MetricConfig, float, int]] = []
        self.measures: list[tuple[MetricConfig, int]] = []

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.records.append((config, value, now_ms))

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        self.measures.append((config, now_ms))
        return self.value


def test_record_level_enum() -> None:
    """SensorTest.java: testRecordLevelEnum."""
    assert INFO.should_record(INFO)
    assert not DEBUG.should_record(INFO)
    assert not TRACE.should_record(INFO)

    assert INFO.should_record(DEBUG)
    assert DEBUG.should_record(DEBUG)
    assert not TRACE.should_record(DEBUG)

    assert INFO.should_record(TRACE)
    assert DEBUG.should_record(TRACE)
    assert TRACE.should_record(TRACE)

    for level in RecordingLevel:
        assert RecordingLevel.for_name(level.name) is level
        assert RecordingLevel.for_name(level.name.lower()) is level
    with pytest.raises(ValueError):
        RecordingLevel.for_name("VERBOSE")


def _sensor_at(sensor_level: RecordingLevel, config_level: RecordingLevel, now_ms: int) -> tuple[Sensor, Metrics]:
    metrics = Metrics()
    config = MetricConfig(recording_level=config_level)
    sensor = metrics.sensor(
        "sensor", config, now_ms=now_ms, inactive_sensor_expiration_time_seconds=0, recording_level=sensor_level
    )
    sensor.add(metrics.metric_name("count", "grp"), CumulativeCount())
    return sensor, metrics


def _assert_records(sensor: Sensor, metrics: Metrics, expected: bool, now_ms: int) -> None:
    assert sensor.should_record() is expected
    sensor.record(1.0, now_ms)
    assert metrics.metric(metrics.metric_name("count", "grp")).measurable_value(now_ms) == (1.0 if expected else 0.0)


@pytest.mark.parametrize(
    ("config_level", "expected"), [(INFO, True), (DEBUG, True), (TRACE, True)], ids=["INFO", "DEBUG", "TRACE"]
)
def test_should_record_for_info_level_sensor(clock, config_level: RecordingLevel, expected: bool) -> None:
    """SensorTest.java: testShouldRecordForInfoLevelSensor."""
    sensor, metrics = _sensor_at(INFO, config_level, clock.now_ms)
    _assert_records(sensor, metrics, expected, clock.now_ms)


@pytest.mark.parametrize(
    ("config_level", "expected"), [(INFO, False), (DEBUG, True), (TRACE, True)], ids=["INFO", "DEBUG", "TRACE"]
)
def test_should_record_for_debug_level_sensor(clock, config_level: RecordingLevel, expected: bool) -> None:
    """SensorTest.java: testShouldRecordForDebugLevelSensor."""
    sensor, metrics = _sensor_at(DEBUG, config_level, clock.now_ms)
    _assert_records(sensor, metrics, expected, clock.now_ms)


@pytest.mark.parametrize(
    ("config_level", "expected"), [(INFO, False), (DEBUG, False), (TRACE, True)], ids=["INFO", "DEBUG", "TRACE"]
)
def test_should_record_for_trace_level_sensor(clock, config_level: RecordingLevel, expected: bool) -> None:
    """SensorTest.java: testShouldRecordForTraceLevelSensor."""
    sensor, metrics = _sensor_at(TRACE, config_level, clock.now_ms)
    _assert_records(sensor, metrics, expected, clock.now_ms)


def test_expired_sensor(clock) -> None:
    """SensorTest.java: testExpiredSensor."""
    metrics = Metrics()
    expiration_seconds = 60
    sensor = metrics.sensor("sensor", now_ms=clock.now_ms, inactive_sensor_expiration_time_seconds=expiration_seconds)

    assert sensor.add(metrics.metric_name("test1", "grp1"), Avg(), now_ms=clock.now_ms)

    clock.sleep((expiration_seconds + 1) * 1000)
    assert sensor.has_expired(clock.now_ms)
    assert not sensor.add(metrics.metric_name("test3", "grp1"), Avg(), now_ms=clock.now_ms)
    assert metrics.metric(metrics.metric_name("test3", "grp1")) is None
    assert [m.metric_name.name for m in sensor.metrics] == ["test1"]


def test_idempotent_add(clock) -> None:
    """SensorTest.java: testIdempotentAdd."""
    metrics = Metrics()
    sensor = metrics.sensor("sensor", now_ms=clock.now_ms)
    name = metrics.metric_name("test-metric", "test-group")

    assert sensor.add(name, Avg())
    # the same name on the same sensor is a no-op
    assert sensor.add(name, Avg())

    # but on another sensor it is an error
    another = metrics.sensor("another-sensor", now_ms=clock.now_ms)
    with pytest.raises(ValueError, match="already exists"):
        another.add(name, Avg())

    # a different stat under the same name is a no-op as well
    assert sensor.add(name, WindowedSum())

    assert len(sensor.metrics) == 1
    assert type(sensor.metrics[0].stat) is Avg
    assert not another.has_metrics()


def test_should_return_presence_of_metrics(clock) -> None:
    """SensorTest.java: shouldReturnPresenceOfMetrics."""
    metrics = Metrics()
    sensor = metrics.sensor("sensor", now_ms=clock.now_ms)
    assert not sensor.has_metrics()

    sensor.add(MetricName("name1", "group1", "description1", {}), WindowedSum())
    assert sensor.has_metrics()

    sensor.add(MetricName("name2", "group2", "description2", {}), CumulativeCount())
    assert sensor.has_metrics()
    assert len(sensor.metrics) == 2


def _strict_record(sensor: Sensor, value: float, now_ms: int) -> None:
    """Check first, and record (unchecked) only if no quota is violated already."""
    sensor.check_quotas(now_ms)
    sensor.record(value, now_ms, check_quotas=False)


def test_strict_quota_enforcement_with_rate(clock) -> None:
    """SensorTest.java: testStrictQuotaEnforcementWithRate."""
    metrics = Metrics()
    sensor = metrics.sensor(
        "sensor", MetricConfig(samples=11, time_window_ms=1000, quota=Quota.upper_bound(2)), now_ms=clock.now_ms
    )
    name = metrics.metric_name("rate", "test-group")
    assert sensor.add(name, Rate())
    rate_metric = metrics.metric(name)

    # 30 over a padded window of 10 s: 3 per second, already above the quota of 2
    _strict_record(sensor, 30, clock.now_ms)
    assert rate_metric.measurable_value(clock.now_ms) == pytest.approx(3, abs=0.1)

    # (3 - 2) / 2 * 10 s = 5 s should bring the rate back to the quota, but the window is still
    # padded to 10 s at that point, so the rate is still 3 and the next record is rejected
    clock.sleep(5000)
    assert rate_metric.measurable_value(clock.now_ms) == pytest.approx(3, abs=0.1)
    with pytest.raises(QuotaViolationError) as excinfo:
        _strict_record(sensor, 30, clock.now_ms)
    assert excinfo.value.metric is rate_metric
    assert excinfo.value.bound == 2
    # rejected before recording: the rate is unchanged
    assert rate_metric.measurable_value(clock.now_ms) == pytest.approx(3, abs=0.1)


def test_strict_quota_enforcement_with_token_bucket(clock) -> None:
    """SensorTest.java: testStrictQuotaEnforcementWithTokenBucket."""
    metrics = Metrics()
    sensor = metrics.sensor(
        "sensor", MetricConfig(samples=10, time_window_ms=1000, quota=Quota.upper_bound(2)), now_ms=clock.now_ms
    )
    name = metrics.metric_name("credits", "test-group")
    assert sensor.add(name, TokenBucket())
    credits = metrics.metric(name)

    # a full bucket of 20 credits, minus 30
    _strict_record(sensor, 30, clock.now_ms)
    assert credits.measurable_value(clock.now_ms) == pytest.approx(-10, abs=0.1)

    # 10 credits at 2 per second: after 5 s the bucket is at 0, which is not a violation
    clock.sleep(5000)
    assert credits.measurable_value(clock.now_ms) == pytest.approx(0, abs=0.1)
    _strict_record(sensor, 30, clock.now_ms)
    assert credits.measurable_value(clock.now_ms) == pytest.approx(-30, abs=0.1)

    # now below zero: the next strict record is rejected without recording
    with pytest.raises(QuotaViolationError):
        _strict_record(sensor, 30, clock.now_ms)
    assert credits.measurable_value(clock.now_ms) == pytest.approx(-30, abs=0.1)


def test_record_and_check_quota_use_metric_config_of_each_stat(clock) -> None:
    """SensorTest.java: testRecordAndCheckQuotaUseMetricConfigOfEachStat."""
    metrics = Metrics()
    sensor = metrics.sensor("sensor", now_ms=clock.now_ms)

    stat1, stat2 = RecordingStat(), RecordingStat()
    stat1_config = MetricConfig(quota=Quota.upper_bound(5))
    stat2_config = MetricConfig(quota=Quota.upper_bound(10))
    sensor.add(metrics.metric_name("stat1", "test-group"), stat1, stat1_config)
    sensor.add(metrics.metric_name("stat2", "test-group"), stat2, stat2_config)

    # each stat records and is measured (record checks the quotas too) with its own config
    t1, t2 = clock.now_ms + 1, clock.now_ms + 2
    sensor.record(10, t1)
    assert stat1.records == [(stat1_config, 10, t1)]
    assert stat2.records == [(stat2_config, 10, t1)]

    sensor.check_quotas(t2)
    assert stat1.measures == [(stat1_config, t1), (stat1_config, t2)]
    assert stat2.measures == [(stat2_config, t1), (stat2_config, t2)]

    # a stat of one's own is held to its quota like any other: 6 is over stat1's bound of 5
    stat1.value = 6.0
    with pytest.raises(QuotaViolationError) as excinfo:
        sensor.check_quotas(t2)
    assert (excinfo.value.metric.stat, excinfo.value.bound) == (stat1, 5.0)


def test_updating_metric_config_is_reflected_in_the_sensor(clock) -> None:
    """SensorTest.java: testUpdatingMetricConfigIsReflectedInTheSensor."""
    metrics = Metrics()
    sensor = metrics.sensor("sensor", now_ms=clock.now_ms)

    stat = RecordingStat()
    name = metrics.metric_name("stat", "test-group")
    stat_config = MetricConfig(quota=Quota.upper_bound(5))
    sensor.add(name, stat, stat_config)

    t1, t2, t3, t4 = (clock.now_ms + i for i in range(1, 5))
    sensor.record(10, t1)
    sensor.check_quotas(t2)
    assert stat.records == [(stat_config, 10, t1)]
    assert stat.measures == [(stat_config, t1), (stat_config, t2)]

    new_config = MetricConfig(quota=Quota.upper_bound(10))
    metrics.metric(name).config = new_config

    sensor.record(10, t3)
    sensor.check_quotas(t4)
    assert stat.records[1:] == [(new_config, 10, t3)]
    assert stat.measures[2:] == [(new_config, t3), (new_config, t4)]
    assert stat.records[1][0] is new_config


def test_updating_metric_config_is_reflected_in_the_sensor_with_rate(clock) -> None:
    """SensorTest.java: testUpdatingMetricConfigIsReflectedInTheSensor, with a real Rate in place of the mock."""
    metrics = Metrics()
    config = MetricConfig(samples=11, time_window_ms=1000, quota=Quota.upper_bound(2))
    sensor = metrics.sensor("sensor", config, now_ms=clock.now_ms)
    name = metrics.metric_name("rate", "test-group")
    sensor.add(name, Rate())

    with pytest.raises(QuotaViolationError):
        sensor.record(30, clock.now_ms)  # 3 per second, over 2

    # raising the bound to 5 keeps the samples: the same 30 is now within the quota
    metrics.metric(name).config = config.with_quota(Quota.upper_bound(5))
    sensor.record(10, clock.now_ms)
    assert metrics.metric(name).measurable_value(clock.now_ms) == pytest.approx(4.0)
