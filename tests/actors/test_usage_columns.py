"""Usage micro-batches as columns (``_usage_columns``): what a gateway sends a shard for usage and un-record.

The shard must get exactly the core items it got from the same batch sent as tuples (``_group_by_type``, the
reference), after a pickle round trip as on the wire; items columns cannot carry exactly are left to tuples;
malformed columns are refused with a ValueError before anything is recorded. Where it is built, a compiled pass
(``_unpack_compiled.pyx``) unpacks the columns first; the tests below hold it to ``unpack_usage``'s own walk (the
reference) on random columns, junk included.
"""

from __future__ import annotations

import math
import pickle
import struct
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.actors import UsageColumns, _usage_columns, pack_usage, unpack_usage
from quotaplane.actors._usage_columns import last_time_ms
from quotaplane.actors.shard import _group_by_type

names = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=4)
gateway_items = st.tuples(
    st.sampled_from(["PRODUCE", "FETCH"]),
    names.filter(bool),
    names,
    st.floats(min_value=0.0, max_value=1e15),
    st.integers(min_value=0, max_value=2**63 - 1),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(gateway_items, min_size=1, max_size=40))
def test_columns_give_the_shard_the_items_the_tuples_give(items):
    packed = pack_usage(items)
    assert packed is not None and len(packed) == len(items)
    wire = pickle.loads(pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL))
    got = unpack_usage(wire)
    want = _group_by_type(items)
    assert got == want
    for quota_type, (_, group) in got.items():  # the same types and signs too: -0.0 stays -0.0, a time an int
        assert all(type(v) is float and type(t) is int for _, _, v, t in group)
        signs = [math.copysign(1.0, item[2]) for item in want[quota_type][1]]
        assert [math.copysign(1.0, item[2]) for item in group] == signs
    assert last_time_ms(wire) == items[-1][4]
    assert _group_by_type(wire) == want  # the shard's entry point takes either form


def test_a_negative_zero_value_and_the_extreme_times_survive():
    items = [("PRODUCE", "u", "", -0.0, 0), ("FETCH", "u", "c", 5e-324, 2**63 - 1)]
    groups = unpack_usage(pickle.loads(pickle.dumps(pack_usage(items))))
    assert math.copysign(1.0, groups[next(iter(groups))][1][0][2]) == -1.0
    assert [g for _, g in groups.values()] == [[("u", "", -0.0, 0)], [("u", "c", 5e-324, 2**63 - 1)]]


@pytest.mark.parametrize(
    "items",
    [
        [],
        [("PRODUCE", "u\x00v", "c", 1.0, 1)],  # a NUL would split the name at the shard
        [("PRODUCE", "u", "c\x00", 1.0, 1)],
        [("PRODUCE", "u", "c", 1, 1)],  # an int value would come back a float
        [("PRODUCE", "u", "c", 1.0, True)],  # a bool time would come back an int
        [("PRODUCE", "u", "c", 1.0, 2**63)],  # beyond an int64
        [("PRODUCE", "u", "c", 1.0, 1.0)],
        [("REQUEST", "u", "c", 1.0, 1)],  # not a usage type
        [("produce", "u", "c", 1.0, 1)],
        [("PRODUCE", "u", "c", 1.0)],  # a short item
    ],
)
def test_items_columns_cannot_carry_exactly_stay_tuples(items):
    assert pack_usage(items) is None


def _columns(**changes):
    good = pack_usage([("PRODUCE", "u", "c", 1.0, 10), ("FETCH", "v", "", 2.0, 11)])
    fields = {name: getattr(good, name) for name in good.__slots__}
    fields.update(changes)
    return UsageColumns(**fields)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ([("PRODUCE", "u", "c", 1.0, 1)], "expected UsageColumns, got list"),
        (_columns(count=0), "count must be an int >= 1"),
        (_columns(count=True), "count must be an int >= 1"),
        (_columns(quota_types=b"\x00\x02"), "quota_types"),
        (_columns(quota_types=b"\x00"), "quota_types"),
        (_columns(quota_types="\x00\x01"), "quota_types"),
        (_columns(users=b"u\x00v"), "NUL-joined strings"),
        (_columns(users="u"), "1 users and 2 client ids for 2 items"),
        (_columns(client_ids="a\x00b\x00c"), "2 users and 3 client ids"),
        (_columns(values=struct.pack("<d", 1.0)), "values holds 8 bytes for 2 items"),
        (_columns(times_ms=b""), "times_ms holds 0 bytes"),
        (_columns(values=struct.pack("<2d", 1.0, -1.0)), "finite number >= 0"),
        (_columns(values=struct.pack("<2d", 1.0, math.nan)), "finite number >= 0"),
        (_columns(values=struct.pack("<2d", math.inf, 1.0)), "finite number >= 0"),
        (_columns(times_ms=struct.pack("<2q", 1, -1)), "now_ms must be >= 0"),
    ],
)
def test_malformed_columns_are_refused(columns, message):
    with pytest.raises(ValueError, match=message):
        unpack_usage(columns)
    # the reference alone refuses them the same way
    with mock.patch.object(_usage_columns, "_compiled", None), pytest.raises(ValueError, match=message):
        unpack_usage(columns)


def test_one_type_is_one_group_without_indices_and_mixed_types_keep_their_places():
    one = unpack_usage(pack_usage([("FETCH", "u", "c", 1.0, 1), ("FETCH", "u", "d", 2.0, 2)]))
    assert list(one.items()) == [(next(iter(one)), (None, [("u", "c", 1.0, 1), ("u", "d", 2.0, 2)]))]
    mixed = unpack_usage(
        pack_usage([("FETCH", "a", "", 1.0, 1), ("PRODUCE", "b", "", 2.0, 2), ("FETCH", "c", "", 3.0, 3)])
    )
    assert {t.name: v for t, v in mixed.items()} == {
        "PRODUCE": ([1], [("b", "", 2.0, 2)]),
        "FETCH": ([0, 2], [("a", "", 1.0, 1), ("c", "", 3.0, 3)]),
    }


# --- the compiled pass (``_unpack_compiled.pyx``) against the reference -------------------------------------------
def test_the_compiled_unpacking_is_built():
    """``make test`` installs the package with its extensions: the tests below must not pass vacuously."""
    assert _usage_columns._compiled is not None, "quotaplane.actors._unpack_compiled is not importable"


def _reference(columns: UsageColumns) -> object:
    """``unpack_usage``'s answer without the compiled pass: its groups, or the ValueError's message."""
    with mock.patch.object(_usage_columns, "_compiled", None):
        try:
            return unpack_usage(columns)
        except ValueError as e:
            return str(e)


def _answer(columns: UsageColumns) -> object:
    try:
        return unpack_usage(columns)
    except ValueError as e:
        return str(e)


def _same(got: object, want: object) -> None:
    """Equal groups in the same order, with the reference's types and signs (-0.0 stays -0.0), or equal errors."""
    assert got == want
    if isinstance(want, dict):
        assert list(got) == list(want)
        for (_, rows), (_, wanted) in zip(got.values(), want.values(), strict=True):
            assert [(type(v), type(t), math.copysign(1.0, v)) for _, _, v, t in rows] == [
                (type(v), type(t), math.copysign(1.0, v)) for _, _, v, t in wanted
            ]


#: values around every edge the checks draw: negative, zero of both signs, subnormal, huge, inf, NaN
edge_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 5e-324, 1e-300, 1.0, 6e299, 1e300, 8e307, 1.7e308, -1.0, math.inf, math.nan]),
)


@settings(max_examples=500, deadline=None)
@given(
    st.integers(min_value=1, max_value=12).flatmap(
        lambda count: st.tuples(
            st.lists(st.sampled_from([0, 1]), min_size=count, max_size=count),
            st.lists(names, min_size=count, max_size=count),
            st.lists(names, min_size=count, max_size=count),
            st.lists(st.floats(min_value=0.0, max_value=1e298), min_size=count, max_size=count),
            st.lists(st.integers(min_value=0, max_value=2**63 - 1), min_size=count, max_size=count),
            # most batches good, the rest with one thing wrong at one item
            st.sampled_from([None, None, None, "code", "value", "time", "count"]),
            st.integers(min_value=0, max_value=count - 1),
            st.sampled_from([2, 255]),
            edge_values,
            st.integers(min_value=-(2**63), max_value=-1),
            st.sampled_from([-1, 1]),
        )
    )
)
def test_the_compiled_unpacking_answers_as_the_reference(columns):
    codes, users, client_ids, values, times, wrong, at, bad_code, bad_value, bad_time, skew = columns
    if wrong == "code":
        codes[at] = bad_code
    elif wrong == "value":
        values[at] = bad_value  # any float: a good one too, at the edges
    elif wrong == "time":
        times[at] = bad_time
    count = len(codes)
    wire = UsageColumns(
        count + (skew if wrong == "count" else 0),
        bytes(codes),
        "\x00".join(users),
        "\x00".join(client_ids),
        struct.pack(f"<{count}d", *values),
        struct.pack(f"<{count}q", *times),
    )
    want = _reference(wire)
    _same(_answer(wire), want)
    if wrong is None:
        assert isinstance(want, dict)  # a good batch: the compiled pass answered it (not a fallback)
        assert _usage_columns._unpack_compiled(wire) == want


@pytest.mark.parametrize(
    "values",
    [
        (6e299, 6e299),  # a sum past the compiled pass's bound, finite: the reference unpacks them
        (1.7e308, 1.7e308),  # a sum past the float range: refused
        (1e300, 0.0),
        (5e-324, -0.0),
    ],
)
def test_sums_near_the_float_range_are_the_references_to_decide(values):
    wire = _columns(values=struct.pack("<2d", *values))
    _same(_answer(wire), _reference(wire))


def test_columns_of_other_bytes_like_types_are_the_references_to_unpack():
    good = _columns()
    wire = _columns(values=bytearray(good.values), times_ms=memoryview(good.times_ms))
    assert _answer(wire) == _reference(wire) == unpack_usage(good)
