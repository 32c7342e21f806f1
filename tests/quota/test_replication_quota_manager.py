"""Port of Kafka's ReplicationQuotaManagerTest.scala, plus the throttled-replica parsing of
ConfigHandler.parseThrottledPartitions (DynamicConfigChangeTest) and ThrottledReplicaListValidator (LogConfigTest).

Kafka's MockTime becomes an explicit ``now_ms``.
"""

from __future__ import annotations

import math

import pytest

from quotaplane.metrics import LONG_MAX_VALUE, Metrics, Quota, Rate, SimpleRate
from quotaplane.quota import (
    ALL_REPLICAS,
    QuotaType,
    ReplicationQuotaManager,
    ReplicationQuotaManagerConfig,
    parse_throttled_replicas,
)

NOW = 1_700_000_000_000
LEADER_THROTTLED = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED = "follower.replication.throttled.replicas"
KAFKA_FORMAT = "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


def _rate(mgr: ReplicationQuotaManager, now_ms: int) -> float:
    """The byte-rate metric, looked up by name the way Kafka's test does."""
    name = mgr.metrics.metric_name(
        "byte-rate", str(mgr.replication_type), f"Tracking byte-rate for {mgr.replication_type}"
    )
    return mgr.metrics.metric(name).measurable_value(now_ms)


# --- ReplicationQuotaManagerTest -------------------------------------------------------------------


def test_should_throttle_only_defined_replicas():
    """Kafka ReplicationQuotaManagerTest.shouldThrottleOnlyDefinedReplicas (Kafka uses QuotaType.FETCH)."""
    quota = ReplicationQuotaManager(ReplicationQuotaManagerConfig(), QuotaType.FOLLOWER_REPLICATION)
    quota.mark_throttled("topic1", [1, 2, 3])

    assert quota.is_throttled("topic1", 1)
    assert quota.is_throttled("topic1", 2)
    assert quota.is_throttled("topic1", 3)
    assert not quota.is_throttled("topic1", 4)
    assert not quota.is_throttled("topic2", 1)

    # a later list replaces the earlier one (Kafka's markThrottled puts, it does not merge)
    quota.mark_throttled("topic1", [4])
    assert quota.is_throttled("topic1", 4)
    assert not quota.is_throttled("topic1", 1)

    quota.remove_throttle("topic1")
    assert not quota.is_throttled("topic1", 4)


def test_should_exceed_quota_then_return_back_below_bound_as_time_passes():
    """Kafka ReplicationQuotaManagerTest.shouldExceedQuotaThenReturnBackBelowBoundAsTimePasses."""
    quota = ReplicationQuotaManager(
        ReplicationQuotaManagerConfig(num_quota_samples=10, quota_window_size_seconds=1), QuotaType.LEADER_REPLICATION
    )
    quota.update_quota(Quota(100.0, True))

    # not exceeded at the start (this check creates the sensor and its first sample at NOW)
    now = NOW
    assert not quota.is_quota_exceeded(now)

    # the first window is fixed; record after 1.5 s
    now += 1500
    quota.record(1, now)
    assert not quota.is_quota_exceeded(now)

    quota.record(149, now)  # 150 B over 1.5 s = 100 B/s: at the bound, not over it
    assert not quota.is_quota_exceeded(now)

    quota.record(1, now)  # 151 B over 1.5 s
    assert _rate(quota, now) == 151 / 1.5
    assert quota.is_quota_exceeded(now)

    now += 500  # 151 B over 2 s
    assert not quota.is_quota_exceeded(now)
    assert _rate(quota, now) == 151 / 2

    now += 500
    quota.record(99, now)  # 250 B over 2.5 s
    assert _rate(quota, now) == 250 / 2.5
    assert not quota.is_quota_exceeded(now)
    quota.record(1, now)
    assert quota.is_quota_exceeded(now)
    assert _rate(quota, now) == 251 / 2.5

    now += 2000  # 4.5 s after the first sample
    assert not quota.is_quota_exceeded(now)
    assert _rate(quota, now) == 251 / 4.5


def test_should_support_wildcard_throttled_replicas():
    """Kafka ReplicationQuotaManagerTest.shouldSupportWildcardThrottledReplicas."""
    quota = ReplicationQuotaManager(ReplicationQuotaManagerConfig(), QuotaType.LEADER_REPLICATION)
    quota.mark_throttled("MyTopic")

    assert quota.is_throttled("MyTopic", 0)
    assert quota.is_throttled("MyTopic", 12345)
    assert not quota.is_throttled("MyOtherTopic", 0)


def test_simple_rate_uses_true_elapsed_time_but_at_least_one_window():
    """Kafka SimpleRate.windowSize = max(now - oldest.start, windowMs), the ReplicationQuotaManager byte-rate."""
    quota = ReplicationQuotaManager(
        ReplicationQuotaManagerConfig(num_quota_samples=10, quota_window_size_seconds=1), QuotaType.LEADER_REPLICATION
    )
    quota.update_quota(100)
    quota.record(150, NOW)
    metric = quota.metrics.metric(quota.metrics.metric_name("byte-rate", "LeaderReplication"))
    assert isinstance(metric.stat, SimpleRate)

    # one window at least: 150 B / 1 s (a padded Rate would divide by 9 s and see 16.7 B/s)
    assert _rate(quota, NOW) == 150.0
    assert quota.is_quota_exceeded(NOW)
    assert Rate().window_size(metric.config, NOW) != metric.stat.window_size(metric.config, NOW)

    # then the true elapsed time: 150 B / 1.5 s, exactly the bound
    assert _rate(quota, NOW + 1500) == 100.0
    assert not quota.is_quota_exceeded(NOW + 1500)
    assert _rate(quota, NOW + 7500) == 20.0

    # samples whose last event is samples * window old are purged
    assert _rate(quota, NOW + 9999) == 150 / 9.999
    assert _rate(quota, NOW + 10_000) == 0.0


def test_record_ignores_quota():
    """Kafka ReplicationQuotaManager.record: adds to the rate even when the quota is already exceeded."""
    quota = ReplicationQuotaManager(
        ReplicationQuotaManagerConfig(num_quota_samples=10, quota_window_size_seconds=1), QuotaType.LEADER_REPLICATION
    )
    quota.update_quota(10)
    quota.record(100, NOW)  # no QuotaViolationError escapes
    assert quota.is_quota_exceeded(NOW)
    quota.record(100, NOW)
    assert _rate(quota, NOW) == 200.0


def test_update_quota_applies_to_existing_sensor():
    """Kafka ReplicationQuotaManager.updateQuota: the existing byte-rate metric gets the new bound; samples stay."""
    quota = ReplicationQuotaManager(
        ReplicationQuotaManagerConfig(num_quota_samples=10, quota_window_size_seconds=1), QuotaType.FOLLOWER_REPLICATION
    )
    assert quota.upper_bound == LONG_MAX_VALUE
    quota.record(300, NOW)
    assert not quota.is_quota_exceeded(NOW)  # no quota: never exceeded

    quota.update_quota(Quota.upper_bound(200))
    assert quota.upper_bound == 200
    assert quota.is_quota_exceeded(NOW)  # the 300 B recorded before the quota still count

    quota.update_quota(300.0)
    assert quota.upper_bound == 300
    assert not quota.is_quota_exceeded(NOW)

    quota.update_quota(None)
    assert quota.upper_bound == LONG_MAX_VALUE
    quota.record(10_000, NOW)
    assert not quota.is_quota_exceeded(NOW)


def test_separate_managers_do_not_share_a_rate():
    """Kafka ReplicationQuotaManager: the sensor and metric are named after the replication type."""
    metrics = Metrics()
    config = ReplicationQuotaManagerConfig(num_quota_samples=10, quota_window_size_seconds=1)
    leader = ReplicationQuotaManager(config, QuotaType.LEADER_REPLICATION, metrics=metrics)
    follower = ReplicationQuotaManager(config, QuotaType.FOLLOWER_REPLICATION, metrics=metrics)
    leader.update_quota(100)
    follower.update_quota(100)
    leader.record(500, NOW)
    assert leader.is_quota_exceeded(NOW)
    assert not follower.is_quota_exceeded(NOW)
    assert metrics.get_sensor("LeaderReplication") is not None
    assert metrics.get_sensor("FollowerReplication") is not None


# --- parseThrottledPartitions / ThrottledReplicaListValidator --------------------------------------


def test_should_parse_replication_quota_properties():
    """Kafka DynamicConfigChangeTest.shouldParseReplicationQuotaProperties."""
    replicas = parse_throttled_replicas("0:101,0:102,1:101,1:102", name=LEADER_THROTTLED)
    assert replicas.partitions_on(102) == {0, 1}
    assert replicas.partitions_on(103) == frozenset()


def test_should_parse_wildcard_replication_quota_properties():
    """Kafka DynamicConfigChangeTest.shouldParseWildcardReplicationQuotaProperties."""
    replicas = parse_throttled_replicas("*", name=LEADER_THROTTLED)
    assert replicas == ALL_REPLICAS
    assert replicas.partitions_on(102) is None  # all partitions


def test_should_parse_regardless_of_whitespace_around_values():
    """Kafka DynamicConfigChangeTest.shouldParseRegardlessOfWhitespaceAroundValues."""
    assert parse_throttled_replicas("* ") == ALL_REPLICAS
    assert parse_throttled_replicas(" ").partitions_on(102) == frozenset()
    assert parse_throttled_replicas("6:102").partitions_on(102) == {6}
    assert parse_throttled_replicas("6:102 ").partitions_on(102) == {6}
    assert parse_throttled_replicas(" 6:102").partitions_on(102) == {6}


def test_should_parse_replication_quota_reset():
    """Kafka DynamicConfigChangeTest.shouldParseReplicationQuotaReset."""
    replicas = parse_throttled_replicas("", name=FOLLOWER_THROTTLED)
    assert not replicas.all_replicas
    assert replicas.partitions_on(102) == frozenset()


@pytest.mark.parametrize(
    "value", ["*", "* ", "", " ", "100:10", "100:10,12:10", "100:10,12:10,15:1", "100:10,12:10,15:1  ", "100:0,"]
)
def test_should_validate_throttled_replicas_config_valid(value):
    """Kafka LogConfigTest.shouldValidateThrottledReplicasConfig (valid values)."""
    parse_throttled_replicas(value, name=LEADER_THROTTLED)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("100", "[100]"),
        ("100:", "[100:]"),
        ("100:0,10", "[100:0, 10]"),
        ("100:0,10:", "[100:0, 10:]"),
        ("100:0,10:   ", "[100:0, 10:]"),
        ("100 :0,10:   ", "[100 :0, 10:]"),
        ("100: 0,10:   ", "[100: 0, 10:]"),
        ("100:0,10 :   ", "[100:0, 10 :]"),
        ("*,100:10", "[*, 100:10]"),
        ("* ,100:10", "[* , 100:10]"),
    ],
)
def test_should_validate_throttled_replicas_config_invalid(value, shown):
    """Kafka LogConfigTest.shouldValidateThrottledReplicasConfig (invalid values, ConfigException message)."""
    expected = (
        f"Invalid value {shown} for configuration {LEADER_THROTTLED}: {LEADER_THROTTLED} must be the literal '*' "
        f"or a list of replicas in the following format: {KAFKA_FORMAT}"
    )
    with pytest.raises(ValueError) as excinfo:
        parse_throttled_replicas(value, name=LEADER_THROTTLED)
    assert str(excinfo.value) == expected


def test_java_trim_keeps_non_breaking_space():
    """Kafka ThrottledReplicaListValidator trims with Java String.trim, which keeps U+00A0: the element is invalid."""
    with pytest.raises(ValueError, match="must be the literal"):
        parse_throttled_replicas("\u00a06:102", name=LEADER_THROTTLED)


def test_update_throttled_list_per_broker():
    """Kafka TopicConfigHandler.processConfigChanges: a broker throttles its own replicas; "" removes the throttle."""
    leader = ReplicationQuotaManager(ReplicationQuotaManagerConfig(), QuotaType.LEADER_REPLICATION)
    leader.mark_throttled_replicas("t", parse_throttled_replicas("0:101,1:102", name=LEADER_THROTTLED), broker_id=101)
    assert leader.is_throttled("t", 0)
    assert not leader.is_throttled("t", 1)

    leader.mark_throttled_replicas("t", parse_throttled_replicas("0:101,1:102", name=LEADER_THROTTLED), broker_id=102)
    assert leader.is_throttled("t", 1)
    assert not leader.is_throttled("t", 0)

    # a list naming only other brokers throttles nothing here
    leader.mark_throttled_replicas("t", parse_throttled_replicas("0:103", name=LEADER_THROTTLED), broker_id=102)
    assert not leader.is_throttled("t", 0)
    assert not leader.is_throttled("t", 1)

    leader.mark_throttled_replicas("t", parse_throttled_replicas("*", name=LEADER_THROTTLED), broker_id=102)
    assert leader.is_throttled("t", 7)

    leader.mark_throttled_replicas("t", parse_throttled_replicas("", name=LEADER_THROTTLED), broker_id=102)
    assert not leader.is_throttled("t", 7)


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [-1, -0.5, math.nan, "100", True, [100]])
def test_update_quota_rejects_bad_rates(rate):
    """Kafka *.replication.throttled.rate is a LONG at least 0: anything else is a ValueError here."""
    quota = ReplicationQuotaManager(ReplicationQuotaManagerConfig(), QuotaType.LEADER_REPLICATION)
    quota.update_quota(100)
    with pytest.raises(ValueError):
        quota.update_quota(rate)
    assert quota.upper_bound == 100  # the earlier quota stays


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, "10", None, True])
def test_record_rejects_bad_values(value):
    """Kafka ReplicationQuotaManager.record(value: Long): bad byte counts are a ValueError here, nothing recorded."""
    quota = ReplicationQuotaManager(
        ReplicationQuotaManagerConfig(num_quota_samples=10, quota_window_size_seconds=1), QuotaType.LEADER_REPLICATION
    )
    quota.record(50, NOW)
    with pytest.raises(ValueError):
        quota.record(value, NOW)
    assert _rate(quota, NOW) == 50.0


@pytest.mark.parametrize(
    "quota_type", [QuotaType.FETCH, QuotaType.PRODUCE, QuotaType.REQUEST, QuotaType.CONTROLLER_MUTATION, "Fetch"]
)
def test_rejects_non_replication_quota_type(quota_type):
    """Kafka QuotaFactory: ReplicationQuotaManager only for Leader/Follower/AlterLogDirs replication."""
    with pytest.raises(ValueError, match="not a replication quota type"):
        ReplicationQuotaManager(ReplicationQuotaManagerConfig(), quota_type)


@pytest.mark.parametrize(
    "quota_type", ["LeaderReplication", "FOLLOWER_REPLICATION", QuotaType.ALTER_LOG_DIRS_REPLICATION]
)
def test_accepts_replication_quota_types(quota_type):
    """Kafka QuotaFactory: leader, follower and alter-log-dirs replication quota managers."""
    quota = ReplicationQuotaManager(ReplicationQuotaManagerConfig(), quota_type)
    assert quota.replication_type in {
        QuotaType.LEADER_REPLICATION,
        QuotaType.FOLLOWER_REPLICATION,
        QuotaType.ALTER_LOG_DIRS_REPLICATION,
    }
    assert quota.replication_type == QuotaType.parse(quota_type)


@pytest.mark.parametrize("value", [None, 0, ["0:101"]])
def test_parse_throttled_replicas_rejects_non_strings(value):
    """Kafka ThrottledReplicaListValidator: a value that is not a list/string is a ConfigException (ValueError here)."""
    with pytest.raises(ValueError):
        parse_throttled_replicas(value)


@pytest.mark.parametrize(("samples", "window"), [(0, 1), (1, 0), (-1, 1), (1.5, 1), (11, "1")])
def test_replication_quota_manager_config_rejects_bad_values(samples, window):
    """Kafka replication.quota.window.num / .size.seconds are ints at least 1."""
    with pytest.raises(ValueError):
        ReplicationQuotaManagerConfig(num_quota_samples=samples, quota_window_size_seconds=window)
