"""TimedBloomFilter: KIP-936's filter lifecycle, sizing, hashing and false-positive rate."""

from __future__ import annotations

import doctest
import hashlib
import math
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.quota import TimedBloomFilter, _bloom
from quotaplane.quota._bloom import MAX_PRODUCER_ID, make_id_hasher, optimal_bits

T0 = 1_700_000_000_000  # a realistic clock
W = 3_600_000  # one window: KIP-936's default of one hour
HALF = W // 2


def new_filter(expected_items: int = 1_000, false_positive_rate: float = 0.01, window_ms: int = W, **kw):
    return TimedBloomFilter(expected_items, false_positive_rate, window_ms, **kw)


def test_module_doctests_pass():
    result = doctest.testmod(_bloom)
    assert result.attempted >= 2 and result.failed == 0


# --- the lifecycle, step by step ------------------------------------------------------------------------
def test_empty_filter_holds_nothing():
    f = new_filter()
    assert f.live_filters(T0) == 0
    assert f.filters_held == 0
    assert f.next_expiry_ms is None
    assert not f.contains(1, T0)
    assert f.bit_array_bytes == 0


def test_step1_first_id_creates_filter_1_and_new_ids_go_into_it():
    f = new_filter()
    assert f.add(101, T0) is True  # new
    assert f.filter_starts_ms() == [T0]
    assert f.live_filters(T0) == 1
    assert f.add(101, T0 + 1) is False  # seen
    assert f.add(102, T0 + W - 1) is True  # still in the first window: same filter
    assert f.filter_starts_ms() == [T0]
    assert f.contains(101, T0 + W - 1) and f.contains(102, T0 + W - 1)
    assert f.next_expiry_ms == T0 + W + HALF


def test_step2_after_one_window_a_second_filter_takes_new_ids_and_both_are_consulted():
    f = new_filter()
    f.add(101, T0)
    assert f.add(201, T0 + W) is True  # exactly one window later
    assert f.filter_starts_ms() == [T0, T0 + W]
    assert f.live_filters(T0 + W) == 2
    # both filters answer: 101 lives in filter 1, 201 in filter 2
    assert f.contains(101, T0 + W) and f.contains(201, T0 + W)
    assert f.add(101, T0 + W + 5) is False
    # 201 went into filter 2 only: it survives filter 1's end; a new id of filter 1's window would not
    f2 = new_filter()
    f2.add(101, T0)
    f2.add(102, T0 + W - 1)
    f2.add(201, T0 + W)
    assert f2.contains(201, T0 + W + HALF) and not f2.contains(102, T0 + W + HALF)


def test_step3_the_old_filter_is_dropped_at_one_and_a_half_windows():
    f = new_filter()
    f.add(101, T0)
    f.add(201, T0 + W)
    assert f.live_filters(T0 + W + HALF - 1) == 2
    assert f.contains(101, T0 + W + HALF - 1)
    assert f.live_filters(T0 + W + HALF) == 1
    assert not f.contains(101, T0 + W + HALF)
    assert f.contains(201, T0 + W + HALF)
    assert f.filters_held == 2  # nothing runs in the background...
    assert f.expire(T0 + W + HALF) == 1  # ...until expire (or an add) drops it
    assert f.filter_starts_ms() == [T0 + W]
    assert f.bit_array_bytes == f.bits_per_filter // 8
    # an id of the dropped filter is new again
    assert f.add(101, T0 + W + HALF) is True


def test_step4_the_cycle_repeats_with_windows_anchored_at_the_first_id():
    f = new_filter()
    f.add(101, T0)
    f.add(201, T0 + W)
    f.add(301, T0 + 2 * W)
    assert f.filter_starts_ms() == [T0 + W, T0 + 2 * W]
    assert f.live_filters(T0 + 2 * W + HALF - 1) == 2
    assert f.live_filters(T0 + 2 * W + HALF) == 1
    assert not f.contains(201, T0 + 2 * W + HALF)
    assert f.contains(301, T0 + 2 * W + HALF)
    f.add(401, T0 + 3 * W + 1)
    assert f.filter_starts_ms() == [T0 + 2 * W, T0 + 3 * W]


def test_a_late_first_call_in_a_window_does_not_shift_the_windows():
    f = new_filter()
    f.add(101, T0)
    f.add(201, T0 + W + HALF // 2)  # first call of the second window comes late
    assert f.filter_starts_ms() == [T0, T0 + W]  # the second filter still starts at T0 + W
    assert f.next_expiry_ms == T0 + W + HALF
    f.add(301, T0 + 2 * W)  # so the third starts on time
    assert f.filter_starts_ms() == [T0 + W, T0 + 2 * W]


def test_with_no_newer_filter_the_last_one_expires_and_the_next_id_starts_over():
    f = new_filter()
    f.add(101, T0)
    assert f.live_filters(T0 + W + HALF - 1) == 1
    assert f.live_filters(T0 + W + HALF) == 0
    assert not f.contains(101, T0 + W + HALF)
    assert f.add(101, T0 + 5 * W) is True
    assert f.filter_starts_ms() == [T0 + 5 * W]  # step 1 again, anchored at this id
    assert f.expire(T0 + 6 * W + HALF) == 0
    assert f.filters_held == 0 and f.next_expiry_ms is None


def test_a_seen_id_found_only_in_the_old_filter_is_refreshed_into_the_new_one():
    f = new_filter()
    f.add(101, T0)  # a long-lived producer...
    f.add(102, T0)  # ...and one that stops
    f.add(201, T0 + W)  # second filter
    assert f.add(101, T0 + W + 10) is False  # seen, and copied into filter 2
    assert f.contains(101, T0 + W + HALF)  # survives filter 1
    assert not f.contains(102, T0 + W + HALF)
    assert f.add(101, T0 + W + HALF) is False


def test_a_clock_that_steps_back_stays_in_the_current_window():
    f = new_filter()
    f.add(101, T0)
    assert f.add(101, T0 - 5_000) is False
    assert f.add(102, T0 - 5_000) is True
    assert f.filter_starts_ms() == [T0]


def test_odd_windows_drop_filters_at_the_ceiling_of_one_and_a_half_windows():
    f = new_filter(window_ms=3)  # 1.5 windows = 4.5 ms: alive at +4, dropped at +5
    f.add(1, T0)
    assert f.lifetime_ms == 5
    assert f.contains(1, T0 + 4) and not f.contains(1, T0 + 5)


# --- sizing and memory -------------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "p"), [(10_000, 0.01), (1_000, 0.001), (100, 0.1), (123_457, 0.02)])
def test_each_filter_is_the_optimum_rounded_up_to_whole_bytes(n, p):
    f = new_filter(n, p)
    optimum = optimal_bits(n, p)
    assert optimum <= f.bits_per_filter < optimum + 8
    assert f.bits_per_filter % 8 == 0


def test_memory_is_bounded_by_the_configuration_not_by_the_ids_shown():
    f = new_filter(1_000, 0.01)
    cap = 2 * f.bits_per_filter // 8
    for i in range(30_000):  # 30x the expected items, over three windows
        f.add(i, T0 + i * 360)
        assert f.filters_held <= 2
    assert f.bit_array_bytes <= cap


# --- validation ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [-1, -(2**63), MAX_PRODUCER_ID + 1, 1.0, True, "7", None, 2**64])
def test_bad_producer_ids_are_rejected_and_change_nothing(bad):
    f = new_filter()
    f.add(5, T0)
    with pytest.raises(ValueError):
        f.add(bad, T0 + W)
    with pytest.raises(ValueError):
        f.contains(bad, T0)
    assert f.filter_starts_ms() == [T0]  # the rotation due at T0 + W did not happen


def test_largest_and_smallest_producer_ids_are_accepted():
    f = new_filter()
    assert f.add(0, T0) and f.add(MAX_PRODUCER_ID, T0)
    assert f.contains(0, T0) and f.contains(MAX_PRODUCER_ID, T0)


@pytest.mark.parametrize("bad_now", [1.5, "1", None, True])
def test_bad_times_are_rejected(bad_now):
    f = new_filter()
    for call in (f.add, f.contains):
        with pytest.raises(ValueError):
            call(1, bad_now)
    with pytest.raises(ValueError):
        f.expire(bad_now)
    assert f.filters_held == 0


@pytest.mark.parametrize(
    ("n", "p", "w", "key"),
    [
        (0, 0.01, W, None),
        (-5, 0.01, W, None),
        (1.5, 0.01, W, None),
        (True, 0.01, W, None),
        (2**33, 0.01, W, None),
        (100, 0.0, W, None),
        (100, 1.0, W, None),
        (100, math.nan, W, None),
        (100, True, W, None),
        (100, "0.1", W, None),
        (100, 0.01, 0, None),
        (100, 0.01, 1.5, None),
        (100, 0.01, W, "key"),
        (100, 0.01, W, b"k" * 65),
    ],
)
def test_bad_shapes_are_rejected(n, p, w, key):
    with pytest.raises(ValueError):
        TimedBloomFilter(n, p, w, hash_key=key)


# --- hashing and the false-positive rate -----------------------------------------------------------
def _measured_fp(f: TimedBloomFilter, queries, now_ms: int) -> float:
    return sum(f.contains(q, now_ms) for q in queries) / len(queries)


N, P = 10_000, 0.01
QUERIES = 200_000  # ~2,000 false positives expected: the 20% band is ~9 standard deviations wide


@pytest.mark.parametrize("ids", ["sequential", "random", "above_2_61"])
def test_false_positive_rate_is_within_20_percent_of_the_configured_one_at_the_expected_count(ids):
    rng = random.Random(936)
    if ids == "sequential":  # how a controller hands producer ids out
        inserted = list(range(5_000, 5_000 + N))
        queries = list(range(5_000 + N, 5_000 + N + QUERIES))
    elif ids == "random":
        pool: set[int] = set()
        while len(pool) < N + QUERIES:
            pool.add(rng.getrandbits(63))
        ordered = sorted(pool)
        rng.shuffle(ordered)
        inserted, queries = ordered[:N], ordered[N:]
    else:  # large ids, where Python's int hash (mod 2**61 - 1) would alias
        base = 2**62
        inserted = list(range(base, base + N))
        queries = list(range(base + N, base + N + QUERIES))
    f = new_filter(N, P)
    for pid in inserted:
        f.add(pid, T0)  # (an add may itself be a false positive: "seen")
    assert all(f.contains(pid, T0) for pid in inserted)  # never a false negative
    measured = _measured_fp(f, queries, T0)
    assert 0.8 * P <= measured <= 1.2 * P, measured


def test_ids_that_alias_under_pythons_int_hash_are_not_confused():
    modulus = 2**61 - 1  # hash(x) == hash(x + modulus) for ints
    rng = random.Random(61)
    inserted = rng.sample(range(modulus), N)
    f = new_filter(N, P)
    for pid in inserted:
        f.add(pid, T0)
    measured = _measured_fp(f, [pid + modulus for pid in inserted], T0)
    assert measured <= 1.2 * P  # raw ints through rbloom's default hash would give 100%


def test_two_full_filters_during_the_overlap_give_about_twice_the_rate():
    """Both filters are consulted between 1 and 1.5 windows: FP = 1 - (1 - p)^2 with both full."""
    f = new_filter(N, P)
    for pid in range(N):
        f.add(pid, T0)
    for pid in range(N, 2 * N):
        f.add(pid, T0 + W)
    queries = range(10**12, 10**12 + QUERIES)
    expected = 1 - (1 - P) ** 2
    measured = _measured_fp(f, queries, T0 + W)
    assert 0.8 * expected <= measured <= 1.2 * expected, measured
    # once the old one is dropped, the rate is the configured one again
    measured_after = _measured_fp(f, queries, T0 + W + HALF)
    assert 0.8 * P <= measured_after <= 1.2 * P, measured_after


def test_a_hash_key_changes_which_ids_are_false_positives_but_not_the_rate():
    plain = new_filter(N, P)
    keyed = new_filter(N, P, hash_key=b"shard-secret")
    for pid in range(N):
        plain.add(pid, T0)
        keyed.add(pid, T0)
    queries = range(N, N + QUERIES)
    fp_plain = {q for q in queries if plain.contains(q, T0)}
    fp_keyed = {q for q in queries if keyed.contains(q, T0)}
    assert fp_plain != fp_keyed
    assert 0.8 * P <= len(fp_keyed) / QUERIES <= 1.2 * P


_STABILITY_SCRIPT = """
import hashlib
from quotaplane.quota import TimedBloomFilter
f = TimedBloomFilter(1000, 0.05, 3_600_000)
for pid in range(1000):
    f.add(pid, 1_700_000_000_000)
fps = [q for q in range(1000, 60_000) if f.contains(q, 1_700_000_000_000)]
print(len(fps), hashlib.sha256(repr(fps).encode()).hexdigest())
"""


def test_answers_are_the_same_in_every_process_whatever_the_hash_seed():
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run(
            [sys.executable, "-c", _STABILITY_SCRIPT], capture_output=True, text=True, env=env, check=True
        )
        outputs.add(result.stdout.strip())
    assert len(outputs) == 1
    (line,) = outputs
    assert int(line.split()[0]) > 0  # there are false positives to compare


def test_ids_are_hashed_with_blake2b_of_their_8_little_endian_bytes():
    """The hashing contract (stable across processes, versions and machines), keyed or not."""
    for pid in (0, 1, 936, 2**61 - 1, MAX_PRODUCER_ID):
        data = pid.to_bytes(8, "little")
        plain = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
        keyed = int.from_bytes(hashlib.blake2b(data, digest_size=8, key=b"k").digest(), "little")
        assert make_id_hasher()(pid) == plain
        assert make_id_hasher(b"k")(pid) == keyed
        assert plain != keyed


# --- the batch path's view: _live_view and _live -----------------------------------------------------
def _fused_add(f: TimedBloomFilter, key: int, now_ms: int) -> bool:
    """What ProducerIdQuotaManager.record_batch does with a filter, from its ``_live`` view."""
    until, current, previous, _ = f._live
    if now_ms >= until:
        fresh = f._add_key(key, now_ms)
        f._live_view()
        return fresh
    if key in current:
        return False
    current.add(key)
    return not (previous is not None and key in previous)


_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "add", "expire", "public_add"]),
        st.integers(-7, 25),  # the clock moves in steps of a tenth of a window, back sometimes
        st.integers(0, 30),
    ),
    max_size=60,
)


@settings(deadline=None, max_examples=300)
@given(
    ops=_ops,
    window_ms=st.sampled_from([10, 11, 1000]),
    expected_items=st.sampled_from([1, 8, 100]),
    false_positive_rate=st.sampled_from([0.01, 0.3, 0.6]),  # 0.6: rbloom's degenerate filter, every key "in"
)
def test_the_live_view_answers_exactly_as_add_key(ops, window_ms, expected_items, false_positive_rate):
    reference = new_filter(expected_items, false_positive_rate, window_ms)
    fused = new_filter(expected_items, false_positive_rate, window_ms)
    now = T0
    for kind, step, key in ops:
        now += step * window_ms // 10
        if kind == "add":
            assert _fused_add(fused, key, now) == reference._add_key(key, now)
        elif kind == "public_add":  # a change the fused path did not make: _live must not go stale
            assert fused.add(key, now) == reference.add(key, now)
        else:
            assert fused.expire(now) == reference.expire(now)
        assert fused.filter_starts_ms() == reference.filter_starts_ms()
        assert fused.live_filters(now) == reference.live_filters(now)


def test_expire_makes_the_batch_path_forget_a_dropped_filter():
    f = new_filter()
    assert f.add(1, T0) is True
    assert f.add(2, T0 + W) is True  # filter 2 starts; filter 1 is still readable until T0 + 1.5 W
    assert f._live_view()[0] == T0 + W + HALF
    assert f.expire(T0 + W + HALF) == 1
    # a clock that steps back to before filter 1's expiry must not see it again
    assert _fused_add(f, f._hash(1), T0 + W + HALF - 1) is True


def test_every_bloom_filter_made_has_its_own_serial():
    f, g = new_filter(), new_filter()
    f.add(1, T0)
    g.add(1, T0)
    serials = [f._live_view()[3], g._live_view()[3]]
    f.add(1, T0 + W)  # step 2 numbers its filter
    serials.append(f._live_view()[3])
    f.add(1, T0 + 4 * W)  # and so does step 1 after every filter expired
    serials.append(f._live_view()[3])
    assert len(set(serials)) == 4 and 0 not in serials
