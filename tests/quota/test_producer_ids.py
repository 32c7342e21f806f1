"""ProducerIdQuotaManager (KIP-936): producer_ids_rate per user, throttling, filters, cleanup, batches."""

from __future__ import annotations

import doctest
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.metrics import Metrics
from quotaplane.quota import (
    DEFAULT,
    PRODUCER_IDS_RATE,
    ClientQuotaEntity,
    ProducerIdQuotaManager,
    ProducerIdQuotaManagerConfig,
    _producer_ids,
    sanitize,
)

T0 = 1_700_000_000_000  # a realistic clock: TokenBucket treats 0 as "never updated"
W = 3_600_000  # producer.id.quota.window.size.seconds = 3600
HALF = W // 2
SAMPLES = 11
# 0.01 new ids/s: a burst of 11 windows * 3600 s * 0.01 = 396 ids, then one id per 100 s
RATE = 0.01
BURST = SAMPLES * 3600 * RATE


def manager(config: ProducerIdQuotaManagerConfig | None = None, **quotas: float) -> ProducerIdQuotaManager:
    mgr = ProducerIdQuotaManager(config or ProducerIdQuotaManagerConfig(filter_expected_items=2_000))
    for user, bound in quotas.items():
        mgr.update_quota(ClientQuotaEntity(user=DEFAULT if user == "default" else user), bound)
    return mgr


def metric(mgr: ProducerIdQuotaManager, name: str, user: str):
    return mgr.metrics.metric(mgr.metrics.metric_name(name, "ProducerIds", tags={"user": sanitize(user)}))


def tokens(mgr: ProducerIdQuotaManager, user: str, now_ms: int) -> float:
    m = metric(mgr, "tokens", user)
    assert m is not None, f"{user} has no tokens metric"
    return m.measurable_value(now_ms)


def _nan_safe(value: float) -> float | str:
    return "NaN" if math.isnan(value) else value


def state_of(mgr: ProducerIdQuotaManager, now_ms: int) -> dict:
    """Everything observable, to check that a rejected call changed nothing."""
    return {
        "quotas": mgr.quotas(),
        "users": mgr.tracked_users,
        "filters": {u: mgr.filter_of(u).filter_starts_ms() for u in mgr.tracked_users},
        "metrics": {str(n): _nan_safe(m.measurable_value(now_ms)) for n, m in mgr.metrics.metrics.items()},
        "tokens_raw": {u: (metric(mgr, "tokens", u).stat.tokens) for u in mgr.tracked_users},
    }


def test_module_doctests_pass():
    result = doctest.testmod(_producer_ids)
    assert result.attempted >= 3 and result.failed == 0


# --- configuration ---------------------------------------------------------------------------------
def test_config_defaults_are_kip_936s():
    config = ProducerIdQuotaManagerConfig()
    assert config.as_properties() == {
        "producer.id.quota.window.num": 11,
        "producer.id.quota.window.size.seconds": 3600,
        "producer.id.quota.cache.cleanup.scheduler.interval.ms": 10,
        "producer.id.quota.filter.expected.items": 10_000,
        "producer.id.quota.filter.false.positive.rate": 0.01,
    }
    assert config.window_ms == W
    assert config.hash_key is None


def test_config_from_broker_properties():
    config = ProducerIdQuotaManagerConfig.from_properties(
        {"producer.id.quota.window.num": 5, "producer.id.quota.window.size.seconds": 60}
    )
    assert (config.num_quota_samples, config.window_ms, config.cache_cleanup_interval_ms) == (5, 60_000, 10)
    with pytest.raises(ValueError, match="unknown producer-id quota config"):
        ProducerIdQuotaManagerConfig.from_properties({"producer.id.quota.window.count": 5})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_quota_samples": 0},
        {"num_quota_samples": True},
        {"num_quota_samples": 2.0},
        {"quota_window_size_seconds": 0},
        {"quota_window_size_seconds": "3600"},
        {"cache_cleanup_interval_ms": -10},
        {"filter_expected_items": 0},
        {"filter_false_positive_rate": 0.0},
        {"filter_false_positive_rate": 1.0},
        {"filter_false_positive_rate": math.nan},
        {"hash_key": "secret"},
        {"hash_key": bytes(65)},
    ],
)
def test_bad_config_is_rejected(kwargs):
    with pytest.raises(ValueError):
        ProducerIdQuotaManagerConfig(**kwargs)


# --- quota entities and resolution -----------------------------------------------------------------
@pytest.mark.parametrize(
    "entity",
    [
        ClientQuotaEntity(client_id="producer-1"),
        ClientQuotaEntity(client_id=DEFAULT),
        ClientQuotaEntity(user="alice", client_id="producer-1"),
        ClientQuotaEntity(user="alice", client_id=DEFAULT),
        ClientQuotaEntity(user=DEFAULT, client_id=DEFAULT),
    ],
)
def test_client_id_entities_are_rejected(entity):
    mgr = manager(alice=1.0)
    with pytest.raises(ValueError, match=r"producer_ids_rate applies to <user> and <default> user entities only"):
        mgr.update_quota(entity, 5.0)
    assert mgr.quotas() == {"alice": 1.0}


@pytest.mark.parametrize("bound", [0, 0.0, -1.0, math.nan, math.inf, "5", True, [1.0]])
def test_bad_bounds_are_rejected_and_change_nothing(bound):
    mgr = manager(alice=1.0, default=2.0)
    with pytest.raises(ValueError):
        mgr.update_quota(ClientQuotaEntity(user="alice"), bound)
    with pytest.raises(ValueError):
        mgr.update_quota(ClientQuotaEntity(user=DEFAULT), bound)
    assert mgr.quotas() == {"alice": 1.0, DEFAULT: 2.0}


def test_not_an_entity_is_rejected():
    mgr = manager()
    with pytest.raises(ValueError, match="ClientQuotaEntity"):
        mgr.update_quota("alice", 1.0)


def test_resolution_is_own_quota_then_default_user_then_unlimited():
    mgr = manager()
    assert mgr.quota("alice") is None
    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), 2.0)
    assert mgr.quota("alice") == 2.0 and mgr.quota("bob") == 2.0
    mgr.update_quota(ClientQuotaEntity(user="alice"), 0.5)
    assert mgr.quota("alice") == 0.5 and mgr.quota("bob") == 2.0
    mgr.update_quota(ClientQuotaEntity(user="alice"), None)
    assert mgr.quota("alice") == 2.0
    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), None)
    assert mgr.quota("alice") is None and mgr.quotas() == {}
    assert PRODUCER_IDS_RATE == "producer_ids_rate"


def test_a_user_literally_named_default_is_not_the_default_user():
    mgr = manager(**{"<default>": 1.0})
    assert mgr.quota("<default>") == 1.0
    assert mgr.quota("alice") is None


def test_unlimited_users_are_not_tracked():
    mgr = manager(alice=RATE)
    for pid in range(1_000):
        assert mgr.record_and_get_throttle_time_ms("bob", pid, T0) == 0
    assert mgr.tracked_users == []
    assert metric(mgr, "tokens", "bob") is None


# --- throttling ------------------------------------------------------------------------------------
def test_new_ids_take_tokens_until_the_burst_is_spent_then_throttle_kafka_style():
    mgr = manager(alice=RATE)
    results = [mgr.record_and_get_throttle_time_ms("alice", pid, T0) for pid in range(396)]
    assert results == [0] * 396
    assert tokens(mgr, "alice", T0) == pytest.approx(BURST - 396, abs=1e-9)  # 0: not violated
    # the 397th id leaves -1 token: -(-1) / 0.01 per s = 100 s
    assert mgr.record_and_get_throttle_time_ms("alice", 396, T0) == 100_000
    assert tokens(mgr, "alice", T0) < 0  # < 0 means throttled
    assert mgr.record_and_get_throttle_time_ms("alice", 397, T0) == 200_000
    assert mgr.record_and_get_throttle_time_ms("alice", 398, T0 + 50_000) == 250_000  # -3 + 0.5 = -2.5


def test_seen_ids_cost_nothing_even_while_throttled():
    mgr = manager(alice=RATE)
    for pid in range(398):
        mgr.record_and_get_throttle_time_ms("alice", pid, T0)
    before = tokens(mgr, "alice", T0)
    assert before == pytest.approx(-2.0)
    assert [mgr.record_and_get_throttle_time_ms("alice", pid, T0) for pid in (0, 100, 397)] == [0, 0, 0]
    assert tokens(mgr, "alice", T0) == before


def test_record_then_check_the_overdrawing_id_is_remembered_and_not_charged_again():
    small = manager(ProducerIdQuotaManagerConfig(num_quota_samples=2, quota_window_size_seconds=1), alice=1.0)
    assert [small.record_and_get_throttle_time_ms("alice", pid, T0) for pid in (1, 2, 3)] == [0, 0, 1000]
    # the client waits the throttle out and comes back with the same id: it is seen, no token taken
    assert small.record_and_get_throttle_time_ms("alice", 3, T0 + 1000) == 0
    assert tokens(small, "alice", T0 + 1000) == pytest.approx(0.0)


def test_the_bucket_refills_at_the_quota():
    mgr = manager(alice=RATE)
    for pid in range(398):
        mgr.record_and_get_throttle_time_ms("alice", pid, T0)  # -2 tokens
    # after 200 s the bucket is back at 0; one more new id costs 100 s again
    assert mgr.record_and_get_throttle_time_ms("alice", 10_000, T0 + 200_000) == 100_000
    # after a long idle time it refills to the burst, never beyond
    assert tokens(mgr, "alice", T0 + 100 * W) == pytest.approx(BURST)


def test_each_user_has_its_own_bucket_with_the_default_bound():
    small = ProducerIdQuotaManagerConfig(num_quota_samples=2, quota_window_size_seconds=1)
    mgr = manager(small, default=1.0)
    assert [mgr.record_and_get_throttle_time_ms("alice", pid, T0) for pid in (1, 2, 3, 4)] == [0, 0, 1000, 2000]
    # bob's ids (even the same numbers) are his own: a full bucket of 2
    assert [mgr.record_and_get_throttle_time_ms("bob", pid, T0) for pid in (1, 2, 3)] == [0, 0, 1000]


def test_a_quota_change_keeps_the_tokens_and_applies_the_new_bound():
    mgr = manager(alice=RATE)
    for pid in range(400):
        mgr.record_and_get_throttle_time_ms("alice", pid, T0)  # -4 tokens
    mgr.update_quota(ClientQuotaEntity(user="alice"), 0.04)
    assert tokens(mgr, "alice", T0) == pytest.approx(-4.0)
    # -5 tokens at 0.04/s: 125 s
    assert mgr.record_and_get_throttle_time_ms("alice", 400, T0) == 125_000
    # falling back to the default user's bound, and to unlimited
    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), 0.05)
    mgr.update_quota(ClientQuotaEntity(user="alice"), None)
    assert mgr.record_and_get_throttle_time_ms("alice", 401, T0) == 120_000  # -6 / 0.05
    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), None)
    assert mgr.record_and_get_throttle_time_ms("alice", 402, T0) == 0
    assert metric(mgr, "tokens", "alice").stat.tokens == pytest.approx(-6.0)  # nothing recorded


def test_a_default_quota_change_reaches_tracked_users_without_their_own():
    mgr = manager(default=RATE, alice=RATE)
    for user in ("alice", "bob"):
        for pid in range(397):
            mgr.record_and_get_throttle_time_ms(user, pid, T0)  # -1 token each
    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), 0.02)
    assert mgr.record_and_get_throttle_time_ms("bob", 1_000, T0) == 100_000  # -2 / 0.02
    assert mgr.record_and_get_throttle_time_ms("alice", 1_000, T0) == 200_000  # -2 / 0.01


# --- the filter lifecycle through the manager -----------------------------------------------------
def test_an_id_costs_again_once_its_filter_is_dropped_at_one_and_a_half_windows():
    mgr = manager(alice=RATE)
    for pid in range(500):
        mgr.record_and_get_throttle_time_ms("alice", pid, T0)  # -104 tokens
    # a window less 1 ms later: 35.99999 tokens refilled; id 7 is remembered and costs nothing
    assert mgr.record_and_get_throttle_time_ms("alice", 7, T0 + W - 1) == 0
    assert tokens(mgr, "alice", T0 + W - 1) == pytest.approx(-68.00001)
    assert mgr.filter_of("alice").contains(7, T0 + W + HALF - 1)
    # at 1.5 windows its filter is dropped (no newer one holds it): id 7 is new again, a token
    assert mgr.record_and_get_throttle_time_ms("alice", 7, T0 + W + HALF) == 5_100_000  # -51 / 0.01
    assert mgr.filter_of("alice").filter_starts_ms() == [T0 + W + HALF]


def test_a_steady_producer_is_counted_once_across_rotations():
    mgr = manager(alice=1.0)
    mgr.record_and_get_throttle_time_ms("alice", 7, T0)
    for k in range(1, 6):  # every hour for 5 hours
        assert mgr.record_and_get_throttle_time_ms("alice", 7, T0 + k * W + 1) == 0
        assert mgr.live_filters("alice", T0 + k * W + 1) == 2
    # one new id in 5 hours, over Kafka's padded window of 10 hours (+1 ms)
    now = T0 + 5 * W + 1
    assert metric(mgr, "rate", "alice").measurable_value(now) == pytest.approx(1 / 36_000.001)
    assert tokens(mgr, "alice", now) == pytest.approx(SAMPLES * 3600 * 1.0)  # the one token is back


def test_live_filters_follow_the_kip_lifecycle():
    mgr = manager(alice=RATE)
    assert mgr.live_filters("alice", T0) == 0
    mgr.record_and_get_throttle_time_ms("alice", 1, T0)
    assert mgr.live_filters("alice", T0 + W - 1) == 1
    mgr.record_and_get_throttle_time_ms("alice", 2, T0 + W)
    assert mgr.live_filters("alice", T0 + W) == 2
    assert mgr.live_filters("alice", T0 + W + HALF) == 1
    assert mgr.live_filters("alice", T0 + 2 * W + HALF) == 0


# --- cleanup ---------------------------------------------------------------------------------------
def test_cleanup_forgets_a_user_with_no_live_filter_and_a_full_bucket():
    mgr = manager(alice=RATE)
    mgr.record_and_get_throttle_time_ms("alice", 1, T0)  # one token, back within 100 s
    mgr.throttle("alice", 1, T0)  # so that the throttle-time metric exists, and must go too
    assert mgr.cleanup(T0 + W + HALF - 1) == []
    assert mgr.tracked_users == ["alice"]
    assert mgr.cleanup(T0 + W + HALF) == ["alice"]
    assert mgr.tracked_users == []
    assert metric(mgr, "tokens", "alice") is None and metric(mgr, "rate", "alice") is None
    assert not any(n.group == "ProducerIds" for n in mgr.metrics.metrics)
    assert mgr.bit_array_bytes() == 0
    # the user comes back: a fresh filter and a full bucket
    assert mgr.record_and_get_throttle_time_ms("alice", 1, T0 + 2 * W) == 0
    assert tokens(mgr, "alice", T0 + 2 * W) == pytest.approx(BURST - 1)


def test_cleanup_keeps_an_active_user_and_drops_only_its_expired_filter():
    mgr = manager(alice=RATE)
    mgr.record_and_get_throttle_time_ms("alice", 1, T0)
    mgr.record_and_get_throttle_time_ms("alice", 2, T0 + W)
    assert mgr.filter_of("alice").filters_held == 2
    assert mgr.cleanup(T0 + W + HALF) == []
    assert mgr.filter_of("alice").filters_held == 1
    assert mgr.cleanup(T0 + 2 * W + HALF - 1) == []
    assert mgr.cleanup(T0 + 2 * W + HALF) == ["alice"]


def test_cleanup_keeps_a_drained_bucket_until_it_has_refilled():
    """Forgetting a drained bucket would hand the user a fresh burst: it is kept until full."""
    mgr = manager(alice=RATE)
    for pid in range(500):
        mgr.record_and_get_throttle_time_ms("alice", pid, T0)  # -104 tokens
    full_after_ms = round((BURST + 104) / RATE * 1000)  # 50,000 s
    assert full_after_ms > W + HALF
    assert mgr.cleanup(T0 + W + HALF) == []
    assert mgr.filter_of("alice").filters_held == 0  # the filter's memory is freed...
    assert metric(mgr, "tokens", "alice") is not None  # ...the bucket is kept
    assert mgr.cleanup(T0 + full_after_ms - 1) == []
    assert mgr.cleanup(T0 + full_after_ms) == ["alice"]


def test_cleanup_forgets_users_whose_quota_was_removed():
    mgr = manager(alice=RATE)
    for pid in range(500):
        mgr.record_and_get_throttle_time_ms("alice", pid, T0)
    mgr.update_quota(ClientQuotaEntity(user="alice"), None)
    assert mgr.cleanup(T0 + W + HALF) == ["alice"]


def test_cleanup_with_nothing_due_changes_nothing():
    mgr = manager(alice=RATE, bob=RATE)
    mgr.record_and_get_throttle_time_ms("alice", 1, T0)
    mgr.record_and_get_throttle_time_ms("bob", 1, T0 + 10)
    before = state_of(mgr, T0 + 20)
    for now in range(T0, T0 + 10_000, 10):  # every cleanup.scheduler.interval.ms for 10 s
        assert mgr.cleanup(now) == []
    assert state_of(mgr, T0 + 20) == before
    assert len(mgr._due) == 2  # one heap entry per tracked user, however often cleanup runs


def test_cleanup_scales_with_users_due_not_users_tracked():
    mgr = manager(default=RATE)
    for i in range(200):
        mgr.record_and_get_throttle_time_ms(f"user-{i}", i, T0 + i * 60_000)  # one a minute
    # at T0 + 1.5 W + 30 min the first 31 users' filters have expired
    removed = mgr.cleanup(T0 + W + HALF + 30 * 60_000)
    assert removed == [f"user-{i}" for i in range(31)]
    assert len(mgr.tracked_users) == 169


# --- metrics ---------------------------------------------------------------------------------------
def test_metrics_are_in_group_producer_ids_tagged_by_sanitized_user():
    mgr = manager(default=RATE)
    user = "CN=svc one,OU=kafka"
    for pid in range(397):
        mgr.record_and_get_throttle_time_ms(user, pid, T0)
    tag = (("user", "CN%3Dsvc%20one%2COU%3Dkafka"),)
    assert sanitize(user) == tag[0][1]

    def names() -> set:
        return {(n.name, n.group, tuple(n.tags.items())) for n in mgr.metrics.metrics if n.group == "ProducerIds"}

    assert names() == {("rate", "ProducerIds", tag), ("tokens", "ProducerIds", tag)}
    # 397 new ids over Kafka's padded window of (11 - 1) hours
    assert metric(mgr, "rate", user).measurable_value(T0) == pytest.approx(397 / 36_000)
    assert tokens(mgr, user, T0) == pytest.approx(-1.0)
    mgr.throttle(user, 0, T0)  # not a throttle: nothing recorded, no metric yet
    assert metric(mgr, "throttle-time", user) is None
    mgr.throttle(user, 100_000, T0)  # the first throttle reported creates the metric
    assert names() == {
        ("rate", "ProducerIds", tag),
        ("tokens", "ProducerIds", tag),
        ("throttle-time", "ProducerIds", tag),
    }
    mgr.throttle(user, 300_000, T0)
    assert metric(mgr, "throttle-time", user).measurable_value(T0) == 200_000
    mgr.throttle("nobody-tracked", 5_000, T0)
    assert metric(mgr, "throttle-time", "nobody-tracked") is None


def test_a_shared_metrics_registry_is_used():
    metrics = Metrics()
    mgr = ProducerIdQuotaManager(metrics=metrics)
    mgr.update_quota(ClientQuotaEntity(user="alice"), RATE)
    mgr.record_and_get_throttle_time_ms("alice", 1, T0)
    assert any(n.group == "ProducerIds" for n in metrics.metrics)


# --- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("user", "pid", "now"),
    [
        ("alice", -1, T0),
        ("alice", 2**63, T0),
        ("alice", 1.0, T0),
        ("alice", True, T0),
        ("alice", "1", T0),
        (None, 1, T0),
        (b"alice", 1, T0),
        (7, 1, T0),
        ("alice", 1, float(T0)),
        ("alice", 1, None),
    ],
)
def test_bad_recordings_are_rejected_and_change_nothing(user, pid, now):
    mgr = manager(alice=RATE)
    mgr.record_and_get_throttle_time_ms("alice", 1, T0)
    before = state_of(mgr, T0)
    with pytest.raises(ValueError):
        mgr.record_and_get_throttle_time_ms(user, pid, now)
    with pytest.raises(ValueError, match="item 1"):
        mgr.record_batch([("alice", 2), (user, pid, now)], T0)
    assert state_of(mgr, T0) == before


@pytest.mark.parametrize(
    "items",
    [
        [("alice",)],
        [("alice", 1, T0, 4)],
        [["alice", 1]],
        "alice",
        None,
    ],
)
def test_malformed_batches_are_rejected(items):
    mgr = manager(alice=RATE)
    with pytest.raises(ValueError):
        mgr.record_batch(items, T0)
    assert mgr.tracked_users == []


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_throttle_reports_are_rejected(bad):
    mgr = manager(alice=RATE)
    mgr.record_and_get_throttle_time_ms("alice", 1, T0)
    mgr.throttle("alice", 10, T0)
    with pytest.raises(ValueError):
        mgr.throttle("alice", bad, T0)
    with pytest.raises(ValueError):
        mgr.throttle(None, 10, T0)
    assert metric(mgr, "throttle-time", "alice").measurable_value(T0) == 10


def test_memory_is_bounded_by_configuration():
    config = ProducerIdQuotaManagerConfig(filter_expected_items=1_000)
    mgr = manager(config, alice=1e9)
    for i in range(50_000):  # 50x the expected items, over 5 windows
        mgr.record_and_get_throttle_time_ms("alice", i, T0 + i * 360)
    f = mgr.filter_of("alice")
    assert f.filters_held <= 2
    assert mgr.bit_array_bytes() <= 2 * math.ceil(f.bits_per_filter / 8)


# --- batches ---------------------------------------------------------------------------------------
def test_batch_equals_one_by_one_on_a_simple_case():
    small = ProducerIdQuotaManagerConfig(num_quota_samples=2, quota_window_size_seconds=1)
    items = [("alice", 1), ("alice", 2), ("alice", 3), ("bob", 3), ("alice", 3), ("alice", 4, T0 + 500)]
    one = manager(small, default=1.0)
    expected = [one.record_and_get_throttle_time_ms(i[0], i[1], i[2] if len(i) == 3 else T0) for i in items]
    assert expected == [0, 0, 1000, 0, 0, 1500]
    assert manager(small, default=1.0).record_batch(items, T0) == expected
    assert manager(small, default=1.0).record_batch([], T0) == []


_users = st.sampled_from(["alice", "bob", "carol", "CN=d e"])
_items = st.lists(
    st.tuples(
        _users,
        st.integers(0, 40) | st.integers(0, 2**63 - 1),
        st.one_of(st.none(), st.integers(0, 3 * W)),
    ),
    max_size=80,
)
_bounds = st.one_of(st.none(), st.sampled_from([0.0005, 0.001, 0.01, 1.0]))


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=_items,
    alice=_bounds,
    default=_bounds,
    start=st.integers(0, W),
    cleanup_every=st.one_of(st.none(), st.integers(1, 40)),
)
def test_batch_gives_exactly_the_results_of_one_by_one_calls(items, alice, default, start, cleanup_every):
    config = ProducerIdQuotaManagerConfig(num_quota_samples=3, quota_window_size_seconds=3600, filter_expected_items=64)

    def fresh() -> ProducerIdQuotaManager:
        mgr = ProducerIdQuotaManager(config)
        mgr.update_quota(ClientQuotaEntity(user="alice"), alice)
        mgr.update_quota(ClientQuotaEntity(user=DEFAULT), default)
        return mgr

    batch_now = T0 + start
    batch = [(u, p) if offset is None else (u, p, T0 + offset) for u, p, offset in items]
    chunks = (
        [batch]
        if cleanup_every is None
        else [batch[i : i + cleanup_every] for i in range(0, len(batch), cleanup_every)]
    )

    one = fresh()
    expected: list[int] = []
    for chunk in chunks:
        for item in chunk:
            now = item[2] if len(item) == 3 else batch_now
            expected.append(one.record_and_get_throttle_time_ms(item[0], item[1], now))
        one.cleanup(batch_now)

    batched = fresh()
    got: list[int] = []
    for chunk in chunks:
        got.extend(batched.record_batch(chunk, batch_now))
        batched.cleanup(batch_now)

    assert got == expected
    end = T0 + 4 * W
    assert state_of(batched, end) == state_of(one, end)
