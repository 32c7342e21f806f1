"""Port of Kafka's ControllerMutationQuotaManagerTest.scala (Strict/Permissive quota tests included).

Kafka's MockTime becomes an explicit ``now_ms``; its Session principal is our ``user`` string.
"""

from __future__ import annotations

import math

import pytest

from quotaplane.metrics import (
    KafkaMetric,
    MetricConfig,
    MetricName,
    Metrics,
    Quota,
    QuotaViolationError,
    Rate,
    Sensor,
    TokenBucket,
)
from quotaplane.quota import (
    STRICT_SINCE_VERSION,
    UNBOUNDED_CONTROLLER_MUTATION_QUOTA,
    ClientQuotaEntity,
    ClientQuotaManagerConfig,
    ControllerMutationQuotaManager,
    PermissiveControllerMutationQuota,
    StrictControllerMutationQuota,
    ThrottlingQuotaExceededError,
    token_bucket_throttle_time,
)

NOW = 1_700_000_000_000  # realistic clock: TokenBucket uses 0 as "never updated"
USER = "ANONYMOUS"
CLIENT_ID = "test-client"


def _token_sensor(quota: float = 10.0, samples: int = 10, window_ms: int = 1000) -> tuple[Metrics, Sensor, MetricName]:
    """A sensor holding one TokenBucket, as in Kafka's Strict/PermissiveControllerMutationQuotaTest."""
    metrics = Metrics()
    config = MetricConfig(samples=samples, time_window_ms=window_ms, quota=Quota.upper_bound(quota))
    sensor = metrics.sensor("sensor", config, now_ms=NOW)
    name = metrics.metric_name("rate", "test-group")
    assert sensor.add(name, TokenBucket())
    return metrics, sensor, name


def _tokens(metrics: Metrics, name: MetricName, now_ms: int) -> float:
    return metrics.metric(name).measurable_value(now_ms)


def _manager(samples: int = 10, window_s: int = 1) -> ControllerMutationQuotaManager:
    return ControllerMutationQuotaManager(
        ClientQuotaManagerConfig(num_quota_samples=samples, quota_window_size_seconds=window_s)
    )


def _manager_with_quota(bound: float = 10.0, samples: int = 10) -> ControllerMutationQuotaManager:
    mgr = _manager(samples=samples)
    mgr.update_quota(ClientQuotaEntity(user=USER, client_id=CLIENT_ID), bound)
    return mgr


# --- StrictControllerMutationQuotaTest -------------------------------------------------------------


def test_strict_controller_mutation_quota_violation():
    """Kafka StrictControllerMutationQuotaTest.testControllerMutationQuotaViolation."""
    metrics, sensor, name = _token_sensor()
    quota = StrictControllerMutationQuota(sensor)
    assert not quota.is_exceeded()

    # burst = 10 samples * 1 s * 10/s = 100 tokens; 90 leaves 10, accepted
    quota.record(90, NOW)
    assert not quota.is_exceeded()
    assert quota.throttle_time(NOW) == 0
    assert _tokens(metrics, name, NOW) == 10.0

    # tokens are still >= 0, so 90 more is accepted even though it drives the bucket to -80
    quota.record(90, NOW)
    assert not quota.is_exceeded()
    assert quota.throttle_time(NOW) == 0
    assert _tokens(metrics, name, NOW) == -80.0

    # the bucket is below zero: rejected at once, with 80 / 10 s to wait
    with pytest.raises(ThrottlingQuotaExceededError) as excinfo:
        quota.record(90, NOW)
    assert excinfo.value.errno == 89
    assert excinfo.value.retriable is True
    assert excinfo.value.throttle_time_ms == 8000
    assert quota.is_exceeded()
    assert quota.throttle_time(NOW) == 8000
    # the rejected mutations were not recorded
    assert _tokens(metrics, name, NOW) == -80.0

    # the throttle time decays with the time elapsed since it was computed
    assert quota.throttle_time(NOW + 5000) == 3000
    assert quota.throttle_time(NOW + 8000) == 0
    assert quota.throttle_time(NOW + 60_000) == 0


def test_strict_quota_accepts_any_size_at_zero_tokens():
    """Kafka StrictControllerMutationQuota.record: checkQuotas passes at tokens == 0 (TokenBucket violated iff < 0)."""
    metrics, sensor, name = _token_sensor()
    quota = StrictControllerMutationQuota(sensor)
    quota.record(100, NOW)  # exactly the burst: 0 tokens left, which is not a violation
    assert _tokens(metrics, name, NOW) == 0.0
    quota.record(1000, NOW)  # still accepted, whatever its size
    assert not quota.is_exceeded()
    assert _tokens(metrics, name, NOW) == -1000.0
    with pytest.raises(ThrottlingQuotaExceededError) as excinfo:
        quota.record(1, NOW)
    assert excinfo.value.throttle_time_ms == 100_000  # 1000 tokens at 10/s


# --- PermissiveControllerMutationQuotaTest ---------------------------------------------------------


def test_permissive_controller_mutation_quota_violation():
    """Kafka PermissiveControllerMutationQuotaTest.testControllerMutationQuotaViolation."""
    metrics, sensor, name = _token_sensor()
    quota = PermissiveControllerMutationQuota(sensor)
    assert not quota.is_exceeded()

    quota.record(90, NOW)  # 100 -> 10 tokens
    assert not quota.is_exceeded()
    assert quota.throttle_time(NOW) == 0

    quota.record(90, NOW)  # 10 -> -80 tokens: accepted, throttled for the deficit
    assert not quota.is_exceeded()
    assert quota.throttle_time(NOW) == 8000

    quota.record(90, NOW)  # -80 -> -170: accepted even though the bucket was already empty
    assert not quota.is_exceeded()  # a permissive quota is never exceeded
    assert quota.throttle_time(NOW) == 17000
    assert _tokens(metrics, name, NOW) == -170.0

    assert quota.throttle_time(NOW + 5000) == 12000


# --- ControllerMutationQuotaManagerTest ------------------------------------------------------------


def test_throttle_time():
    """Kafka ControllerMutationQuotaManagerTest.testThrottleTime (ControllerMutationQuotaManager.throttleTimeMs)."""
    metrics = Metrics()
    sensor = metrics.sensor("sensor", now_ms=NOW)
    name = metrics.metric_name("tokens", "test-group")
    sensor.add(name, TokenBucket())
    metric = metrics.metric(name)
    mgr = _manager()

    for tokens, expected in ((0.0, 0), (-5.0, 500), (-10.0, 1000)):
        e = QuotaViolationError(metric, tokens, 10.0)
        assert token_bucket_throttle_time(e) == expected
        assert mgr.throttle_time(e, NOW) == expected


def test_throttle_time_rejects_non_token_bucket_metric():
    """Kafka ControllerMutationQuotaManager.throttleTimeMs: IllegalArgumentException for a non-TokenBucket metric."""
    metric = KafkaMetric(MetricName("rate", "test-group"), Rate(), MetricConfig())
    with pytest.raises(ValueError, match="is not a TokenBucket metric"):
        token_bucket_throttle_time(QuotaViolationError(metric, -10.0, 10.0))


def test_controller_mutation_quota_violation():
    """Kafka ControllerMutationQuotaManagerTest.testControllerMutationQuotaViolation."""
    mgr = _manager_with_quota(10.0)
    now = NOW

    # staying under the quota: 10 mutations a second against 10/s never throttles
    for _ in range(10):
        assert mgr.maybe_record_and_get_throttle_time_ms(USER, CLIENT_ID, 10, now) == 0
        now += 1000

    # the bucket is full (100): a spike of 110 is checked before it is recorded, so it passes
    assert mgr.maybe_record_and_get_throttle_time_ms(USER, CLIENT_ID, 110, now) == 0, "Should not be throttled"

    # the bucket is at -10: the next spike is rejected without recording; 10 tokens at 10/s = 1 s
    throttle_time_ms = mgr.maybe_record_and_get_throttle_time_ms(USER, CLIENT_ID, 110, now)
    assert throttle_time_ms == 1000, "Should be throttled"

    # the caller applies the throttle; the manager records it in the throttle-time metric
    mgr.throttle(USER, CLIENT_ID, throttle_time_ms, now)
    throttle_metric = mgr.metrics.metric(
        mgr.metrics.metric_name("throttle-time", "ControllerMutation", tags={"user": USER, "client-id": CLIENT_ID})
    )
    assert throttle_metric.measurable_value(now) == 1000.0

    # after waiting the throttle time the bucket is back at 0 (the rejected 110 never counted)
    now += throttle_time_ms
    assert mgr.maybe_record_and_get_throttle_time_ms(USER, CLIENT_ID, 110, now) == 0


def test_record_and_get_throttle_time_ms_is_strict():
    """Kafka ControllerMutationQuotaManager.recordAndGetThrottleTimeMs: check first, record only when accepted."""
    mgr = _manager_with_quota(10.0)
    assert mgr.record_and_get_throttle_time_ms(USER, CLIENT_ID, 150, NOW) == 0  # 100 -> -50, accepted
    tokens = mgr.metrics.metric(mgr.quota_metric(USER, CLIENT_ID))
    assert tokens.measurable_value(NOW) == -50.0
    assert mgr.record_and_get_throttle_time_ms(USER, CLIENT_ID, 150, NOW) == 5000
    assert tokens.measurable_value(NOW) == -50.0  # the rejected value was not recorded
    # 2.5 s later the deficit is 25 tokens: 2.5 s left
    assert mgr.record_and_get_throttle_time_ms(USER, CLIENT_ID, 1, NOW + 2500) == 2500


def test_register_quota_metrics():
    """Kafka ControllerMutationQuotaManager.registerQuotaMetrics: bounded `tokens` bucket, unbounded `mutation-rate`."""
    mgr = _manager_with_quota(10.0)
    mgr.record_and_get_throttle_time_ms(USER, CLIENT_ID, 5, NOW)
    tags = {"user": USER, "client-id": CLIENT_ID}
    tokens = mgr.metrics.metric(mgr.metrics.metric_name("tokens", "ControllerMutation", tags=tags))
    rate = mgr.metrics.metric(mgr.metrics.metric_name("mutation-rate", "ControllerMutation", tags=tags))
    assert isinstance(tokens.stat, TokenBucket)
    assert tokens.config.quota == Quota.upper_bound(10.0)
    assert isinstance(rate.stat, Rate)
    assert rate.config.quota is None
    assert tokens.measurable_value(NOW) == 95.0
    # the Rate uses the sensor's (registry default) config, 2 samples of 30 s: padded to one 30 s window
    assert rate.measurable_value(NOW) == 5.0 / 30.0


def test_new_strict_quota_for_returns_unbounded_quota_when_quota_is_disabled():
    """Kafka ControllerMutationQuotaManagerTest.testNewStrictQuotaForReturnsUnboundedQuotaWhenQuotaIsDisabled."""
    mgr = _manager()
    quota = mgr.new_strict_quota_for(USER, CLIENT_ID, NOW)
    assert quota is UNBOUNDED_CONTROLLER_MUTATION_QUOTA
    quota.record(1e9, NOW)
    assert not quota.is_exceeded()
    assert quota.throttle_time(NOW) == 0


def test_new_strict_quota_for_returns_strict_quota_when_quota_is_enabled():
    """Kafka ControllerMutationQuotaManagerTest.testNewStrictQuotaForReturnsStrictQuotaWhenQuotaIsEnabled."""
    mgr = _manager_with_quota(10.0)
    quota = mgr.new_strict_quota_for(USER, CLIENT_ID, NOW)
    assert isinstance(quota, StrictControllerMutationQuota)
    # it records into the client's own sensor: the manager sees the 150 it accepted
    quota.record(150, NOW)
    assert mgr.record_and_get_throttle_time_ms(USER, CLIENT_ID, 1, NOW) == 5000


def test_new_permissive_quota_for_returns_unbounded_quota_when_quota_is_disabled():
    """Kafka ControllerMutationQuotaManagerTest.testNewPermissiveQuotaForReturnsUnboundedQuotaWhenQuotaIsDisabled."""
    mgr = _manager()
    assert mgr.new_permissive_quota_for(USER, CLIENT_ID, NOW) is UNBOUNDED_CONTROLLER_MUTATION_QUOTA


def test_new_permissive_quota_for_returns_permissive_quota_when_quota_is_enabled():
    """Kafka ControllerMutationQuotaManagerTest.testNewPermissiveQuotaForReturnsStrictQuotaWhenQuotaIsEnabled."""
    mgr = _manager_with_quota(10.0)
    quota = mgr.new_permissive_quota_for(USER, CLIENT_ID, NOW)
    assert isinstance(quota, PermissiveControllerMutationQuota)
    quota.record(150, NOW)
    assert quota.throttle_time(NOW) == 5000
    assert not quota.is_exceeded()


def test_strict_since_versions():
    """Kafka ControllerApis: strictSinceVersion 6 / 5 / 3 for CreateTopics / DeleteTopics / CreatePartitions."""
    assert dict(STRICT_SINCE_VERSION) == {"CreateTopics": 6, "DeleteTopics": 5, "CreatePartitions": 3}


@pytest.mark.parametrize("api", sorted(STRICT_SINCE_VERSION))
def test_new_quota_for(api):
    """Kafka ControllerMutationQuotaManager.newQuotaFor: strict iff apiVersion >= strictSinceVersion."""
    since = STRICT_SINCE_VERSION[api]
    mgr = _manager_with_quota(10.0)
    for version in (since, since + 1):
        quota = mgr.new_quota_for(USER, CLIENT_ID, api_version=version, strict_since_version=since, now_ms=NOW)
        assert isinstance(quota, StrictControllerMutationQuota)
    for version in (0, since - 1):
        quota = mgr.new_quota_for(USER, CLIENT_ID, api_version=version, strict_since_version=since, now_ms=NOW)
        assert isinstance(quota, PermissiveControllerMutationQuota)

    unbounded = _manager()
    for version in (since - 1, since):
        quota = unbounded.new_quota_for(USER, CLIENT_ID, api_version=version, strict_since_version=since, now_ms=NOW)
        assert quota is UNBOUNDED_CONTROLLER_MUTATION_QUOTA


# --- TokenBucket numbers (kafka-semantics.md section C) --------------------------------------------


def test_token_bucket_burst_and_refill():
    """Kafka TokenBucket.java: burst = samples * window_s * quota; a 560 burst at Q=5, S=100, W=1 s needs 12 s."""
    config = MetricConfig(samples=100, time_window_ms=1000, quota=Quota.upper_bound(5.0))
    bucket = TokenBucket()
    assert bucket.measure(config, NOW) == 500.0  # starts at 0 tokens at t=0, so refills to the burst
    bucket.record(config, 560.0, NOW)
    assert bucket.measure(config, NOW) == -60.0
    assert bucket.measure(config, NOW + 6000) == -30.0
    assert bucket.measure(config, NOW + 12_000) == 0.0
    assert bucket.measure(config, NOW + 1_000_000) == 500.0  # never above the burst


def test_token_bucket_throttle_time_for_560_burst():
    """Kafka ControllerMutationQuotaManager with Q=5, S=100, W=1 s: a 560 burst leaves -60 tokens, 12000 ms throttle."""
    mgr = _manager_with_quota(5.0, samples=100)
    assert mgr.record_and_get_throttle_time_ms(USER, CLIENT_ID, 560, NOW) == 0
    assert mgr.record_and_get_throttle_time_ms(USER, CLIENT_ID, 1, NOW) == 12_000
    assert mgr.record_and_get_throttle_time_ms(USER, CLIENT_ID, 1, NOW + 11_999) == 1
    assert mgr.record_and_get_throttle_time_ms(USER, CLIENT_ID, 1, NOW + 12_000) == 0  # back at zero: accepted


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize("permits", [-1.0, math.nan, math.inf, "3", None, True])
def test_record_rejects_bad_permits(permits):
    """Kafka ControllerMutationQuota.record(permits: Double): bad permits are a ValueError here, nothing recorded."""
    metrics, sensor, name = _token_sensor()
    for quota in (StrictControllerMutationQuota(sensor), PermissiveControllerMutationQuota(sensor)):
        with pytest.raises(ValueError):
            quota.record(permits, NOW)
    assert _tokens(metrics, name, NOW) == 100.0  # nothing was recorded
    with pytest.raises(ValueError):
        UNBOUNDED_CONTROLLER_MUTATION_QUOTA.record(permits, NOW)

    mgr = _manager_with_quota(10.0)
    with pytest.raises(ValueError):
        mgr.record_and_get_throttle_time_ms(USER, CLIENT_ID, permits, NOW)
    with pytest.raises(ValueError):
        mgr.maybe_record_and_get_throttle_time_ms(USER, CLIENT_ID, permits, NOW)
