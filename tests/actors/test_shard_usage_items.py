"""The shard's split of a usage micro-batch by quota type (``_group_by_type``), checked a column at a time.

It must equal the plain per-item split on every good batch, and refuse every batch holding a bad item with a
ValueError before anything is recorded: the check runs over the whole batch, not type by type.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.actors.shard import _group_by_type
from quotaplane.quota import QuotaType

good = st.tuples(
    st.sampled_from(["PRODUCE", "FETCH", "produce"]),
    st.text(max_size=3),
    st.text(max_size=3),
    st.one_of(st.floats(min_value=0.0, max_value=1e12), st.integers(min_value=0, max_value=10**9)),
    st.integers(min_value=0, max_value=2**40),
)


def reference(items):
    groups: dict[QuotaType, tuple[list[int], list[tuple]]] = {}
    for index, (name, user, client_id, value, now_ms) in enumerate(items):
        indices, group = groups.setdefault(QuotaType.parse(name), ([], []))
        indices.append(index)
        group.append((user, client_id, value, now_ms))
    return groups


@settings(max_examples=300, deadline=None)
@given(st.lists(good, min_size=1, max_size=30))
def test_the_split_equals_the_per_item_split(items):
    got = _group_by_type(items)
    want = reference(items)
    assert set(got) == set(want)
    for kind, (indices, group) in got.items():
        assert group == want[kind][1]
        assert (indices if indices is not None else list(range(len(items)))) == want[kind][0]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (("FETCH", "u", "c", -1.0, 1), "item 2"),
        (("FETCH", "u", "c", math.nan, 1), "item 2"),
        (("FETCH", "u", "c", math.inf, 1), "item 2"),
        (("FETCH", "u", "c", True, 1), "item 2"),
        (("FETCH", "u", 7, 1.0, 1), "item 2"),
        (("FETCH", "u", "c", 1.0, -1), "item 2"),
        (("FETCH", "u", "c", 1.0, 1.5), "item 2"),
        (("FETCH", "u", "c", 1.0), "item 2"),
        (["FETCH", "u", "c", 1.0, 1], "item 2"),
        (("REQUEST", "u", "c", 1.0, 1), "not REQUEST"),
        (("NOPE", "u", "c", 1.0, 1), "unknown quota type"),
    ],
)
def test_a_bad_item_of_any_type_refuses_the_whole_batch(bad, message):
    items = [("PRODUCE", "u", "c", 1.0, 1), ("FETCH", "u", "c", 1.0, 1), bad]
    with pytest.raises(ValueError, match=message):
        _group_by_type(items)


def test_values_whose_sum_overflows_are_each_fine():
    items = [("PRODUCE", "u", "c", 1.7e308, 1), ("PRODUCE", "u", "c", 1.7e308, 2)]
    assert _group_by_type(items) == {QuotaType.PRODUCE: (None, [("u", "c", 1.7e308, 1), ("u", "c", 1.7e308, 2)])}
