"""ProducerIdQuotaManager.record_batch's fused path against one-by-one calls (the reference), on random workloads.

The batch path keeps state between calls that one-by-one calls do not use (each filter's ``_live``
view, the manager's ``_seen`` cache of ids per Bloom filter, each user's ``bound``),
so the workloads here interleave batches with everything that changes that state: one-by-one calls
on the same manager, quota changes, cleanups, direct filter adds and expiries, clocks that step
back, tiny filters (many false positives), ids shared between users and a seen cache small enough
to be emptied. Every answer and, at the end, every observable number must be equal.
"""

from __future__ import annotations

from collections import namedtuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.quota import DEFAULT, ClientQuotaEntity, ProducerIdQuotaManager, ProducerIdQuotaManagerConfig
from quotaplane.quota import _producer_ids as producer_ids_module
from quotaplane.quota._producer_id_items import batch_columns

from .test_producer_ids import T0, state_of

W_S = 2  # a 2 s window: filters rotate every 2000 ms, live 3000 ms
USERS = ["alice", "bob", "carol", "CN=d e", "<default>"]

_pids = st.integers(0, 12) | st.integers(0, 2**63 - 1)
_offsets = st.integers(-1_500, 1_500)  # item times around the batch's time: steps back included
_items = st.lists(
    st.tuples(st.sampled_from(USERS), _pids, st.one_of(st.none(), _offsets)),
    max_size=40,
)
_bounds = st.one_of(st.none(), st.sampled_from([0.25, 1.0, 3.0, 1e6]))
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("batch"), st.integers(0, 2_500), _items),
        st.tuples(st.just("one"), st.integers(0, 2_500), st.sampled_from(USERS), _pids),
        st.tuples(st.just("quota"), st.sampled_from([*USERS[:3], DEFAULT]), _bounds),
        st.tuples(st.just("cleanup"), st.integers(0, 2_500)),
        st.tuples(st.just("filter_add"), st.integers(0, 2_500), st.sampled_from(USERS), _pids),
        st.tuples(st.just("expire"), st.integers(0, 2_500), st.sampled_from(USERS)),
    ),
    max_size=25,
)


def _replay(mgr: ProducerIdQuotaManager, steps: list, *, batched: bool) -> list:
    """Run the steps; batches through record_batch if ``batched``, else item by item. The answers."""
    now = T0
    answers: list = []
    for step in steps:
        kind = step[0]
        if kind in ("batch", "one", "cleanup", "filter_add", "expire"):
            now += step[1]
        if kind == "batch":
            items = [(u, p) if off is None else (u, p, now + off) for u, p, off in step[2]]
            if batched:
                answers.append(mgr.record_batch(items, now))
            else:
                one = mgr.record_and_get_throttle_time_ms
                answers.append([one(i[0], i[1], i[2] if len(i) == 3 else now) for i in items])
        elif kind == "one":
            answers.append(mgr.record_and_get_throttle_time_ms(step[2], step[3], now))
        elif kind == "quota":
            mgr.update_quota(ClientQuotaEntity(user=step[1]), step[2])
        elif kind == "cleanup":
            answers.append(mgr.cleanup(now))
        elif kind == "filter_add":
            f = mgr.filter_of(step[2])
            answers.append(None if f is None else f.add(step[3], now))
        else:
            f = mgr.filter_of(step[2])
            answers.append(None if f is None else f.expire(now))
    return answers


@pytest.mark.parametrize("seen_cache_size", [2, 1 << 16])
@settings(
    deadline=None,
    max_examples=120,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],  # the same patch each time
)
@given(
    steps=_steps,
    default=_bounds,
    expected_items=st.sampled_from([1, 4, 64]),
    false_positive_rate=st.sampled_from([0.01, 0.3, 0.6]),  # 0.6: rbloom's degenerate filter, every key "in"
    hash_key=st.sampled_from([None, b"shard-key"]),
)
def test_batches_equal_one_by_one_calls_whatever_happens_between_them(
    monkeypatch, seen_cache_size, steps, default, expected_items, false_positive_rate, hash_key
):
    monkeypatch.setattr(producer_ids_module, "_SEEN_CACHE_SIZE", seen_cache_size)
    config = ProducerIdQuotaManagerConfig(
        num_quota_samples=3,
        quota_window_size_seconds=W_S,
        filter_expected_items=expected_items,
        filter_false_positive_rate=false_positive_rate,
        hash_key=hash_key,
    )

    def fresh() -> ProducerIdQuotaManager:
        mgr = ProducerIdQuotaManager(config)
        mgr.update_quota(ClientQuotaEntity(user=DEFAULT), default)
        mgr.update_quota(ClientQuotaEntity(user="alice"), 0.5)
        return mgr

    reference, fused = fresh(), fresh()
    assert _replay(fused, steps, batched=True) == _replay(reference, steps, batched=False)
    end = T0 + 25 * 2_500
    assert state_of(fused, end) == state_of(reference, end)
    assert len(fused._seen) <= seen_cache_size


def test_a_throttled_batch_gives_kafkas_throttle_times():
    """A burst of new ids through the fused path: the token bucket's numbers, as one by one."""
    config = ProducerIdQuotaManagerConfig(num_quota_samples=2, quota_window_size_seconds=1)
    mgr = ProducerIdQuotaManager(config)
    mgr.update_quota(ClientQuotaEntity(user="alice"), 1.0)  # a burst of 2 ids
    assert mgr.record_batch([("alice", pid) for pid in (1, 2, 3, 4, 1, 2)], T0) == [0, 0, 1000, 2000, 0, 0]
    # 1.4 s later the bucket holds -0.6 tokens: a new id leaves -1.6, and waits 1.6 s; id 4 is still in
    # the older filter (alive until 1.5 windows), so it is refreshed into the newer one for free
    assert mgr.record_batch([("alice", 5, T0 + 1_400), ("alice", 4, T0 + 1_400)], T0) == [1600, 0]


# --- the columns --------------------------------------------------------------------------------------
Item = namedtuple("Item", "user producer_id")


class Principal(str):
    pass


def test_columns_of_uniform_and_mixed_batches():
    assert batch_columns([], 5) == ((), (), ())
    users, pids, times = batch_columns([("a", 1), ("b", 2)], 5)
    assert (users, pids, list(times)) == (["a", "b"], [1, 2], [5, 5])
    assert batch_columns([("a", 1, 7), ("b", 2, 8)], 5) == (["a", "b"], [1, 2], [7, 8])
    assert batch_columns([("a", 1, 7), ("b", 2)], 5) == (["a", "b"], [1, 2], [7, 5])


def test_tuple_subclasses_and_str_subclasses_are_items_too():
    principal = Principal("alice")
    assert batch_columns([Item("a", 1), (principal, 2)], 5) == (["a", principal], [1, 2], [5, 5])


@settings(deadline=None, max_examples=200)
@given(
    good=st.lists(st.tuples(st.text(max_size=3), st.integers(0, 2**63 - 1)), min_size=1, max_size=8),
    bad=st.sampled_from(
        [
            ("a", -1),
            ("a", 2**63),
            ("a", 1.0),
            ("a", True),
            ("a", "1"),
            (None, 1),
            (b"a", 1),
            ("a", 1, 2.0),
            ("a", 1, None),
            ("a", 1, False),
            ("a",),
            ("a", 1, 2, 3),
            ["a", 1],
            "a1",
            None,
        ]
    ),
    data=st.data(),
)
def test_the_first_bad_item_is_named_by_its_index(good, bad, data):
    index = data.draw(st.integers(0, len(good)))
    items = [*good[:index], bad, *good[index:]]
    with pytest.raises(ValueError, match=rf"^producer-id item {index}: "):
        batch_columns(items, T0)


@pytest.mark.parametrize("items", ["ab", b"ab", None, 5, {("a", 1)}])
def test_a_batch_must_be_a_sequence(items):
    with pytest.raises(ValueError, match="items must be a sequence"):
        batch_columns(items, T0)
