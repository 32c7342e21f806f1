"""Usage micro-batches as columns (``_usage_columns``): what a gateway sends a shard for usage and un-record.

The shard must get exactly the core items it got from the same batch sent as tuples (``_group_by_type``, the
reference), after a pickle round trip as on the wire; items columns cannot carry exactly are left to tuples;
malformed columns are refused with a ValueError before anything is recorded.
"""

from __future__ import annotations

import math
import pickle
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.actors import UsageColumns, pack_usage, unpack_usage
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
