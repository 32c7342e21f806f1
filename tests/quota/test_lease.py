"""Leased budgets (``quotaplane/quota/_lease.py``): the shares never exceed the quota, follow demand, and a
holder's local Kafka throttles are the exact mode's when its share is its part of the traffic."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaplane.quota import ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from quotaplane.quota._lease import Lease, LeaseBook, LeaseHolder, LeaseRequest

from ._client_quota_support import START_MS
from .test_client_quota_properties import SETTINGS

KEY = "PRODUCE\x00alice\x00"
HOLDERS = ["g0", "g1", "g2", "g3"]


def live_total(book: LeaseBook, key: str, now_ms: int) -> float:
    return math.fsum(lease.share for lease in book.leases(key, now_ms))


steps = st.lists(
    st.tuples(
        st.sampled_from(HOLDERS),
        st.integers(0, 900),  # ms since the previous step
        st.one_of(st.floats(0.0, 5e6), st.just(math.nan)),  # the holder's rate (NaN: no window yet)
        st.sampled_from([None, 1e5, 1e6, 2.5e6]),  # the bound the holder's replica resolves (a change, now and then)
    ),
    max_size=60,
)


@SETTINGS
@given(steps=steps, lease_ms=st.sampled_from([200, 1000]), floor=st.sampled_from([0.0, 0.05, 1.0]))
def test_live_shares_never_exceed_the_quota_they_were_granted_under(steps, lease_ms, floor) -> None:
    """Whatever the demands, the order of renewals, the holders that vanish and the quota changes: at every step
    the live shares add up to at most the largest bound among them, and to at most the current bound once every
    lease granted under an older one has expired (one lease period)."""
    book = LeaseBook(lease_ms=lease_ms, min_share_fraction=floor)
    now = START_MS
    changed_at = now
    current = None
    for holder, step_ms, rate, bound in steps:
        now += step_ms
        if bound != current:
            current, changed_at = bound, now
        lease = book.renew(holder, [LeaseRequest(KEY, bound, rate)], now)[KEY]
        live = book.leases(KEY, now)
        if lease is not None:
            assert lease.holder == holder and lease.share > 0.0 and lease.expires_ms == now + lease_ms
            assert lease in live
        if bound is None:
            assert all(lease.holder != holder for lease in live)
        if live:
            assert live_total(book, KEY, now) <= max(lease.bound for lease in live) * (1 + 1e-12)
        if current is not None and now >= changed_at + lease_ms:
            assert live_total(book, KEY, now) <= current * (1 + 1e-12)


def renew_round(book: LeaseBook, demands: dict[str, float], bound: float, now: int) -> dict[str, Lease | None]:
    return {h: book.renew(h, [LeaseRequest(KEY, bound, d)], now)[KEY] for h, d in demands.items()}


def test_shares_follow_demand_and_fill_the_quota() -> None:
    """Steady skewed demand (bytes/s per gateway) under a quota of 1 MB/s: after a few renewal rounds each share
    is the holder's part of the demand, and together they are the whole quota."""
    book = LeaseBook(lease_ms=1000, min_share_fraction=0.05)
    demands = {"g0": 700_000.0, "g1": 200_000.0, "g2": 70_000.0, "g3": 30_000.0}  # 1 MB/s in all
    now = START_MS
    for _ in range(6):
        granted = renew_round(book, demands, 1_000_000.0, now)
        now += 500
    shares = {h: lease.share for h, lease in granted.items()}
    for h, demand in demands.items():
        assert shares[h] == pytest.approx(demand, rel=1e-6)
    assert math.fsum(shares.values()) == pytest.approx(1_000_000.0, rel=1e-9)


def test_a_shrinking_share_makes_room_before_another_grows() -> None:
    """g0 held most of the quota; demand moves to g1. g1's renewal first gets only what g0 leaves free; once g0
    renews (its share shrinks), g1's next renewal gets the rest."""
    book = LeaseBook(lease_ms=1000, min_share_fraction=0.0)
    now = START_MS
    renew_round(book, {"g0": 900.0, "g1": 100.0}, 1000.0, now)
    now += 500
    renew_round(book, {"g0": 900.0, "g1": 100.0}, 1000.0, now)
    now += 500
    first = book.renew("g1", [LeaseRequest(KEY, 1000.0, 900.0)], now)[KEY]  # g1 now runs at 900/s
    assert first.share == pytest.approx(100.0)  # g0 still holds 900 until it renews
    book.renew("g0", [LeaseRequest(KEY, 1000.0, 100.0)], now + 10)  # g0 at 100/s
    second = book.renew("g1", [LeaseRequest(KEY, 1000.0, 900.0)], now + 20)[KEY]
    assert second.share == pytest.approx(900.0)
    assert live_total(book, KEY, now + 20) == pytest.approx(1000.0)


def test_an_expired_lease_frees_its_share_and_a_full_quota_grants_nothing() -> None:
    book = LeaseBook(lease_ms=1000, min_share_fraction=0.0)
    only = book.renew("g0", [LeaseRequest(KEY, 1000.0, 1000.0)], START_MS)[KEY]
    assert only.share == pytest.approx(1000.0)  # alone: the whole quota
    assert book.renew("g1", [LeaseRequest(KEY, 1000.0, 1000.0)], START_MS + 999)[KEY] is None  # no room
    later = book.renew("g1", [LeaseRequest(KEY, 1000.0, 1000.0)], START_MS + 1000)[KEY]  # g0's expired
    assert later.share == pytest.approx(1000.0)
    assert [lease.holder for lease in book.leases(KEY, START_MS + 1000)] == ["g1"]
    assert book.release("g1") == 1 and book.leases(KEY, START_MS + 1000) == []


def test_a_holder_decides_locally_only_while_its_lease_lives() -> None:
    holder = LeaseHolder("g0", ClientQuotaManagerConfig(), clock_skew_ms=50)
    bounds = {KEY: 1000.0}
    assert holder.decide([(KEY, 10.0)], bounds, START_MS) == [None]  # no lease yet: the shard decides
    holder.observe(KEY, 10.0, 1000.0, START_MS)
    [request] = holder.renewal(START_MS + 500)
    # its rate of the key by its own sensor (10 bytes over Kafka's padded window of 10.5 s), nothing decided here
    assert request == LeaseRequest(KEY, 1000.0, 10.0 / 10.5, 0.0)
    book = LeaseBook(lease_ms=1000)
    holder.apply(book.renew("g0", [request], START_MS + 500))
    [throttle] = holder.decide([(KEY, 10.0)], bounds, START_MS + 600)
    assert throttle == 0
    assert holder.renewal(START_MS + 700)[0].decided_locally == 10.0  # reported once: the shard records it
    assert holder.renewal(START_MS + 800)[0].decided_locally == 0.0
    assert holder.decide([(KEY, 10.0)], bounds, START_MS + 1449) != [None]
    assert holder.decide([(KEY, 10.0)], bounds, START_MS + 1450) == [None]  # expires_ms - clock skew
    with pytest.raises(ValueError):
        holder.decide([(KEY, -1.0)], bounds, START_MS + 1460)


@SETTINGS
@given(
    values=st.lists(st.tuples(st.integers(0, 2500), st.floats(0.0, 40_000.0)), min_size=1, max_size=80),
    k=st.sampled_from([2, 4, 8]),
    bound=st.sampled_from([1024.0, 10_000.0, 65_536.0]),
)
def test_local_throttles_equal_exact_mode_when_the_share_is_the_traffics_part(values, k, bound) -> None:
    """k gateways each see 1/k of an entity's traffic and hold 1/k of its quota: each gateway's local Kafka
    throttle equals what one manager with the whole quota, seeing all of it, answers (powers of two: exact)."""
    config = ClientQuotaManagerConfig()
    exact = ClientQuotaManager(config, QuotaType.PRODUCE)
    exact.update_quota(ClientQuotaEntity(user="alice"), bound)
    holder = LeaseHolder("g0", config)
    holder.observe(KEY, 0.0, bound, START_MS)  # both windows start at the same time
    exact.record_no_throttle("alice", "c", 0.0, START_MS)
    holder.apply({KEY: Lease(KEY, "g0", bound / k, bound, START_MS + 10**9)})
    now = START_MS
    for step_ms, value in values:
        now += step_ms
        expected = exact.record_and_get_throttle_time_ms("alice", "c", value * k, now)
        assert holder.decide([(KEY, value)], {KEY: bound}, now) == [expected]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        LeaseBook(lease_ms=0)
    with pytest.raises(ValueError):
        LeaseBook(min_share_fraction=1.5)
    holder = LeaseHolder("g0", ClientQuotaManagerConfig())
    holder.observe(KEY, 1.0, 10.0, START_MS)
    with pytest.raises(ValueError):
        holder.apply({KEY: Lease(KEY, "g1", 5.0, 10.0, START_MS + 1000)})  # another holder's lease


def test_an_idle_key_is_forgotten_and_its_lease_dropped_at_the_first_renewal_its_window_is_empty() -> None:
    config = ClientQuotaManagerConfig()  # 11 samples of 1 s
    holder = LeaseHolder("g0", config)
    holder.observe(KEY, 100.0, 1000.0, START_MS)
    book = LeaseBook(lease_ms=1000)
    holder.apply(book.renew("g0", holder.renewal(START_MS + 500), START_MS + 500))
    assert holder.leased() == 1 and holder.keys() == 1
    assert holder.manager.metrics.get_sensor("Produce-:lease-0") is not None
    # idle, but its window still holds the 100 bytes: renewed (the book keeps its share)
    [request] = holder.renewal(START_MS + 5_000)
    assert request.rate > 0.0
    holder.apply(book.renew("g0", [request], START_MS + 5_000))
    # the window has rolled past every sample: forgotten, lease, local quota and sensors with it
    assert holder.renewal(START_MS + 12_000) == []
    assert holder.leased() == 0 and holder.keys() == 0
    assert holder.manager.metrics.get_sensor("Produce-:lease-0") is None
    assert holder.decide([(KEY, 10.0)], {KEY: 1000.0}, START_MS + 12_001) == [None]  # a new name: no lease
    assert holder.keys() == 1


def test_a_failed_renewal_is_reported_again_and_unrecorded_usage_is_taken_back() -> None:
    holder = LeaseHolder("g0", ClientQuotaManagerConfig())
    holder.observe(KEY, 0.0, 1000.0, START_MS)
    holder.apply({KEY: Lease(KEY, "g0", 1000.0, 1000.0, START_MS + 10_000)})
    assert holder.decide([(KEY, 300.0)], {KEY: 1000.0}, START_MS + 100) == [0]
    lost = holder.renewal(START_MS + 200)
    assert [r.decided_locally for r in lost] == [300.0]
    holder.restore(lost)  # the shard never saw it: it goes with the next renewal
    holder.unrecord(KEY, 300.0, START_MS + 300)  # Kafka's unrecordQuotaSensor: the window is back to zero
    [again] = holder.renewal(START_MS + 400)
    assert again.decided_locally == 300.0  # the shard took it back already (its own unrecord): net zero there
    assert again.rate == 0.0
    with pytest.raises(ValueError):
        holder.unrecord(KEY, math.nan, START_MS + 500)


def test_the_book_forgets_keys_without_live_leases_or_recent_renewals() -> None:
    book = LeaseBook(lease_ms=1000)
    book.renew("g0", [LeaseRequest(KEY, 1000.0, 10.0)], START_MS)
    book.renew("g1", [LeaseRequest("other", None, 10.0)], START_MS)  # no quota: no lease, no rate kept
    assert book.keys() == 1  # "other" holds nothing
    assert book.expire(START_MS + 999) == 1 and book.keys() == 1  # its empty entry goes
    assert book.expire(START_MS + 1000) == 1 and book.keys() == 0  # g0's lease expired, no renewal since


def test_a_key_without_a_quota_is_answered_here_and_reported_and_a_removed_quota_ends_its_lease() -> None:
    holder = LeaseHolder("g0", ClientQuotaManagerConfig())
    # no quota applies: Kafka answers 0 and records; nothing to lease, so no round trip either
    assert holder.decide([(KEY, 5e9)], {KEY: None}, START_MS) == [0]
    [request] = holder.renewal(START_MS + 100)
    assert (request.bound, request.decided_locally) == (None, 5e9)
    # a lease, then the quota is removed at the replica: the small share no longer throttles
    holder.apply({KEY: Lease(KEY, "g0", 10.0, 10.0, START_MS + 10_000)})
    assert holder.decide([(KEY, 1000.0)], {KEY: 10.0}, START_MS + 200) != [0]
    assert holder.decide([(KEY, 1000.0)], {KEY: None}, START_MS + 300) == [0]
    assert holder.leased() == 0


@SETTINGS
@given(
    batches=st.lists(
        st.tuples(
            st.integers(0, 700),  # ms since the previous batch
            st.lists(
                st.tuples(st.sampled_from(["k0", "k1", "k2"]), st.floats(0.0, 50_000.0) | st.integers(0, 50_000)),
                min_size=1,
                max_size=12,
            ),
            st.dictionaries(st.sampled_from(["k0", "k1", "k2"]), st.sampled_from([None, 1000.0, 8000.0])),
            st.booleans(),  # a renewal after the batch
        ),
        max_size=25,
    )
)
def test_decide_batch_equals_decide_then_observe(batches) -> None:
    """The gateway's one-pass path answers and records exactly as ``decide`` then ``observe`` of what it left:
    the same throttles, the same renewal reports (rates bit for bit; renewed in parts or whole), the same
    leases."""
    config = ClientQuotaManagerConfig()
    one, two = LeaseHolder("g0", config), LeaseHolder("g0", config)
    book_one, book_two = LeaseBook(lease_ms=1000), LeaseBook(lease_ms=1000)
    now = START_MS
    for step_ms, items, bound_of, renew in batches:
        now += step_ms
        keys = [key for key, _ in items]
        bounds = {key: bound_of.get(key, 4000.0) for key in keys}
        expected = one.decide(items, bounds, now)
        for (key, value), answer in zip(items, expected, strict=True):
            if answer is None:
                one.observe(key, value, bounds[key], now)
        got = two.decide_batch(keys, [value for _, value in items], [bounds[key] for key in keys], now)
        assert got == expected
        if renew:
            tracked = two.tracked()  # the gateway renews in parts: the same requests as a whole renewal
            wanted, asked = one.renewal(now), two.renewal(now, tracked[:1]) + two.renewal(now, tracked[1:])
            assert [(r.key, r.bound, r.decided_locally) for r in wanted] == [
                (r.key, r.bound, r.decided_locally) for r in asked
            ]
            assert [r.rate for r in wanted] == [r.rate for r in asked] or all(
                math.isnan(a.rate) and math.isnan(b.rate) for a, b in zip(wanted, asked, strict=True)
            )
            one.apply(book_one.renew("g0", wanted, now))
            two.apply(book_two.renew("g0", asked, now))
    with pytest.raises(ValueError):
        two.decide_batch(["k0", "k1"], [1.0, math.nan], [1000.0, 1000.0], now)
