"""Port of Kafka's QuotaUtilsTest.java, plus Java Math.round and the TokenBucket throttle time.

Kafka's MockTime becomes an explicit ``now_ms``.
"""

from __future__ import annotations

import math

import pytest

from quotaplane.metrics import (
    KafkaMetric,
    MetricConfig,
    MetricName,
    Quota,
    QuotaViolationError,
    Rate,
    TokenBucket,
    Value,
)
from quotaplane.quota import bounded_throttle_time, java_round, throttle_time, token_bucket_throttle_time
from quotaplane.quota.throttle import INT_MAX_VALUE, throttle_time_for

NOW = 1_700_000_000_000
NUM_SAMPLES = 10
MAX_THROTTLE_TIME_MS = 500
METRIC_NAME = MetricName("test-metric", "groupA", "testA", {})


def _violation(observed: float, quota: float, num_samples: int) -> QuotaViolationError:
    """A violation of a fresh Rate with 1 s windows: its window size is (num_samples - 1) s."""
    config = MetricConfig(samples=num_samples, time_window_ms=1000, quota=Quota(quota, True))
    return QuotaViolationError(KafkaMetric(METRIC_NAME, Rate(), config), observed, quota)


def _throttle_time(observed: float, quota: float, num_samples: int) -> int:
    return throttle_time(_violation(observed, quota, num_samples), NOW)


def _bounded_throttle_time(observed: float, quota: float, num_samples: int, max_throttle_time_ms: int) -> int:
    return bounded_throttle_time(_violation(observed, quota, num_samples), max_throttle_time_ms, NOW)


# --- QuotaUtilsTest --------------------------------------------------------------------------------


def test_throttle_time_observed_rate_equals_quota():
    """Kafka QuotaUtilsTest.testThrottleTimeObservedRateEqualsQuota."""
    observed = 16.5
    assert _throttle_time(observed, observed, NUM_SAMPLES) == 0
    assert _throttle_time(observed, observed, NUM_SAMPLES + 1) == 0  # independent of the window size


def test_throttle_time_observed_rate_below_quota():
    """Kafka QuotaUtilsTest.testThrottleTimeObservedRateBelowQuota."""
    assert _throttle_time(16.5, 20.4, NUM_SAMPLES) < 0
    assert _throttle_time(16.5, 20.4, NUM_SAMPLES + 1) < 0
    # exact: (16.5 - 20.4) / 20.4 * 9000 = -1720.588... rounds half up to -1721
    assert _throttle_time(16.5, 20.4, NUM_SAMPLES) == -1721


def test_throttle_time_observed_rate_above_quota():
    """Kafka QuotaUtilsTest.testThrottleTimeObservedRateAboveQuota."""
    assert _throttle_time(100.0, 50.0, 3) == 2000  # (100 - 50) / 50 * 2 s window


def test_bounded_throttle_time_observed_rate_equals_quota():
    """Kafka QuotaUtilsTest.testBoundedThrottleTimeObservedRateEqualsQuota."""
    observed = 18.2
    assert _bounded_throttle_time(observed, observed, NUM_SAMPLES, MAX_THROTTLE_TIME_MS) == 0
    assert _bounded_throttle_time(observed, observed, NUM_SAMPLES + 1, MAX_THROTTLE_TIME_MS) == 0


def test_bounded_throttle_time_observed_rate_below_quota():
    """Kafka QuotaUtilsTest.testBoundedThrottleTimeObservedRateBelowQuota."""
    assert _bounded_throttle_time(16.5, 22.4, NUM_SAMPLES, MAX_THROTTLE_TIME_MS) < 0
    assert _bounded_throttle_time(16.5, 22.4, NUM_SAMPLES + 1, MAX_THROTTLE_TIME_MS) < 0


def test_bounded_throttle_time_observed_rate_above_quota_below_limit():
    """Kafka QuotaUtilsTest.testBoundedThrottleTimeObservedRateAboveQuotaBelowLimit."""
    assert _bounded_throttle_time(55.0, 50.0, 2, MAX_THROTTLE_TIME_MS) == 100  # 10% over a 1 s window


def test_bounded_throttle_time_observed_rate_above_quota_above_limit():
    """Kafka QuotaUtilsTest.testBoundedThrottleTimeObservedRateAboveQuotaAboveLimit."""
    assert _throttle_time(100.0, 50.0, NUM_SAMPLES) == 9000
    assert _bounded_throttle_time(100.0, 50.0, NUM_SAMPLES, MAX_THROTTLE_TIME_MS) == MAX_THROTTLE_TIME_MS


def test_throttle_time_throws_exception_if_provided_non_rate_metric():
    """Kafka QuotaUtilsTest.testThrottleTimeThrowsExceptionIfProvidedNonRateMetric."""
    metric = KafkaMetric(METRIC_NAME, Value(), MetricConfig())
    with pytest.raises(ValueError, match="is not a Rate metric"):
        throttle_time(QuotaViolationError(metric, 10.0, 20.0), NOW)


def test_bounded_throttle_time_throws_exception_if_provided_non_rate_metric():
    """Kafka QuotaUtilsTest.testBoundedThrottleTimeThrowsExceptionIfProvidedNonRateMetric."""
    metric = KafkaMetric(METRIC_NAME, Value(), MetricConfig())
    with pytest.raises(ValueError, match="is not a Rate metric"):
        bounded_throttle_time(QuotaViolationError(metric, 10.0, 20.0), MAX_THROTTLE_TIME_MS, NOW)


def test_throttle_time_rejects_token_bucket_metric():
    """Kafka QuotaUtils.measurableAsRate: a TokenBucket is not a Rate."""
    config = MetricConfig(quota=Quota.upper_bound(10.0))
    metric = KafkaMetric(METRIC_NAME, TokenBucket(), config)
    with pytest.raises(ValueError, match="is not a Rate metric"):
        throttle_time(QuotaViolationError(metric, -10.0, 10.0), NOW)


def test_throttle_time_uses_padded_window_at_now():
    """Kafka QuotaUtils.throttleTime: the window is rate.windowSize(config, timeMs), padded to whole windows."""
    config = MetricConfig(samples=11, time_window_ms=1000, quota=Quota.upper_bound(5.0))
    rate = Rate()
    rate.record(config, 560.0, NOW)
    metric = KafkaMetric(METRIC_NAME, rate, config)
    # at NOW + 500 ms the window is 10.5 s: the rate is 560 / 10.5 and the delay (O - T) / T * 10500
    e = QuotaViolationError(metric, rate.measure(config, NOW + 500), 5.0)
    assert throttle_time(e, NOW + 500) == java_round((560 / 10.5 - 5.0) / 5.0 * 10_500)
    assert throttle_time(e, NOW + 500) == 101_500
    # the same violation measured against the window at NOW + 1200 ms (10.2 s, the sawtooth dropped back)
    assert throttle_time(e, NOW + 1200) == java_round((560 / 10.5 - 5.0) / 5.0 * 10_200)


# --- Java Math.round --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (2.5, 3),
        (-2.5, -2),
        (0.5, 1),
        (-0.5, 0),
        (1.5, 2),
        (3.5, 4),
        (-1.5, -1),
        (0.49999999999999994, 0),
        (-0.49999999999999994, 0),
        (2.4999999999999996, 2),
        (4503599627370497.0, 4503599627370497),  # 2**52 + 1: floor(x + 0.5) would give 2**52 + 2
        (0.0, 0),
        (-0.0, 0),
        (1e18, 10**18),
        (math.nan, 0),
        (math.inf, 2**63 - 1),
        (-math.inf, -(2**63)),
    ],
)
def test_java_round(x, expected):
    """Java Math.round (used by Kafka QuotaUtils.throttleTime): nearest integer, ties toward positive infinity."""
    assert java_round(x) == expected


# --- TokenBucket throttle time ----------------------------------------------------------------------


def test_token_bucket_throttle_time():
    """Kafka ControllerMutationQuotaManager.throttleTimeMs: round(-tokens / quota * 1000); -60 tokens at 5/s -> 12 s."""
    metric = KafkaMetric(MetricName("tokens", "ControllerMutation"), TokenBucket(), MetricConfig())
    assert token_bucket_throttle_time(QuotaViolationError(metric, -60.0, 5.0)) == 12_000
    assert token_bucket_throttle_time(QuotaViolationError(metric, -0.0025, 5.0)) == 1  # 0.5 ms rounds up
    assert token_bucket_throttle_time(QuotaViolationError(metric, -1.0, 3.0)) == 333


def test_token_bucket_throttle_time_rejects_rate_metric():
    """Kafka ControllerMutationQuotaManager.throttleTimeMs: IllegalArgumentException for a non-TokenBucket metric."""
    metric = KafkaMetric(METRIC_NAME, Rate(), MetricConfig())
    with pytest.raises(ValueError, match="is not a TokenBucket metric"):
        token_bucket_throttle_time(QuotaViolationError(metric, -60.0, 5.0))


def test_throttle_time_is_capped_at_int_max():
    """Kafka turns throttle times into an int throttle_time_ms field; this port caps at Integer.MAX_VALUE."""
    metric = KafkaMetric(MetricName("tokens", "ControllerMutation"), TokenBucket(), MetricConfig())
    assert token_bucket_throttle_time(QuotaViolationError(metric, -1e12, 1.0)) == 2**31 - 1
    assert _throttle_time(1e12, 1.0, NUM_SAMPLES) == 2**31 - 1


def test_zero_bound_saturates_like_java_division_by_zero() -> None:
    """QuotaUtils.throttleTime with a zero quota (allowed for connection rates): Java gives Infinity, not an error."""
    assert throttle_time_for(1.0, 0.0, 1000) == INT_MAX_VALUE
    assert throttle_time_for(0.0, 0.0, 1000) == 0  # 0/0 is NaN; Math.round(NaN) is 0
