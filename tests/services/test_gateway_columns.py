"""``UsageColumns``: a columnar UsageBatch is checked and decided exactly as the same items one message each.

The columnar check (``_usage_columns``) tests whole columns at once and walks a column item by item only when
it fails; these tests hold it to the per-item check (``usage_items`` of ``items``): the same tuples for every
good batch, the same INVALID_ARGUMENT message for every bad one, on random batches. Where it is built, a compiled
pass (``_usage_compiled.pyx``) checks a batch and builds its items first; the tests below hold it to the
reference, and the reference alone to the per-item check.
"""

from __future__ import annotations

import math
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.actors import pack_columns, unpack_usage
from quotaplane.actors.shard import _group_by_type
from quotaplane.services.gateway import GatewayConfig, _quota_service
from quotaplane.services.gateway._checks import InvalidArgument
from quotaplane.services.gateway._quota_service import usage_items, usage_request
from quotaplane.v1 import quota_pb2 as pb

CONFIG = GatewayConfig(max_name_length=8, max_batch_items=20)
NOW_MS = 1_700_000_000_000

names = st.text(alphabet=st.sampled_from("ab\x00é"), max_size=10)
values = st.one_of(
    st.floats(min_value=0.0, max_value=1e9),
    st.sampled_from([-1.0, -0.0, math.nan, math.inf, -math.inf, 1.7e308]),
)
items = st.tuples(
    st.sampled_from([pb.PRODUCE, pb.PRODUCE, pb.FETCH, pb.QUOTA_TYPE_UNSPECIFIED, 7]),
    names,
    names,
    values,
    st.integers(min_value=-3, max_value=NOW_MS),
)


def as_items(chunk, stamped: bool) -> pb.UsageBatch:
    return pb.UsageBatch(
        items=[
            pb.UsageItem(quota_type=t, user=u, client_id=c, value=v, **({"now_ms": n} if stamped else {}))
            for t, u, c, v, n in chunk
        ]
    )


def as_columns(chunk, stamped: bool) -> pb.UsageBatch:
    columns = pb.UsageColumns(
        quota_type=[i[0] for i in chunk],
        user=[i[1] for i in chunk],
        client_id=[i[2] for i in chunk],
        value=[i[3] for i in chunk],
        now_ms=[i[4] for i in chunk] if stamped else [],
    )
    return pb.UsageBatch(columns=columns)


def outcome(batch: pb.UsageBatch) -> object:
    try:
        return usage_items(CONFIG, batch, NOW_MS)
    except InvalidArgument as e:
        return ("INVALID_ARGUMENT", str(e))


@settings(max_examples=400, deadline=None)
@given(st.lists(items, max_size=22), st.booleans())
def test_columns_check_and_convert_exactly_as_items(chunk, stamped):
    by_items, by_columns = outcome(as_items(chunk, stamped)), outcome(as_columns(chunk, stamped))
    if isinstance(by_items, list) and isinstance(by_columns, list):
        # NaN never equals itself; compare the tuples' reprs (a NaN value is refused anyway)
        assert repr(by_columns) == repr(by_items)
    else:
        assert by_columns == by_items


def test_a_good_columnar_batch_gives_the_items_in_order_with_the_gateway_clock_when_unstamped():
    chunk = [(pb.PRODUCE, "alice", "c1", 10.0, 5), (pb.FETCH, "bob", "", 0.0, 6)]
    assert usage_items(CONFIG, as_columns(chunk, True), NOW_MS) == [
        ("PRODUCE", "alice", "c1", 10.0, 5),
        ("FETCH", "bob", "", 0.0, 6),
    ]
    assert [i[4] for i in usage_items(CONFIG, as_columns(chunk, False), NOW_MS)] == [NOW_MS, NOW_MS]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (pb.UsageColumns(quota_type=[pb.PRODUCE], user=["u"], client_id=[], value=[1.0]), "unequal length"),
        (pb.UsageColumns(quota_type=[pb.PRODUCE], user=["u"], client_id=["c"], value=[]), "unequal length"),
        (
            pb.UsageColumns(
                quota_type=[pb.PRODUCE] * 2, user=["u"] * 2, client_id=["c"] * 2, value=[1.0] * 2, now_ms=[1]
            ),
            "now_ms has 1 entries for 2 items",
        ),
        (pb.UsageColumns(), "empty batch"),
    ],
)
def test_columns_of_unequal_length_are_refused(columns, message):
    with pytest.raises(InvalidArgument, match=message):
        usage_items(CONFIG, pb.UsageBatch(columns=columns), NOW_MS)


def test_items_and_columns_together_are_refused():
    batch = as_columns([(pb.PRODUCE, "u", "c", 1.0, 1)], True)
    batch.items.add(quota_type=pb.PRODUCE, user="u", value=1.0)
    with pytest.raises(InvalidArgument, match="either items or columns"):
        usage_items(CONFIG, batch, NOW_MS)


good_items = st.tuples(
    st.sampled_from([pb.PRODUCE, pb.FETCH]),
    st.text(alphabet=st.sampled_from("abé"), min_size=1, max_size=4),
    st.text(alphabet=st.sampled_from("abé"), max_size=4),
    st.floats(min_value=0.0, max_value=1e9),
    st.integers(min_value=0, max_value=NOW_MS),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(good_items, min_size=1, max_size=20), st.booleans(), st.data())
def test_a_checked_batchs_columns_give_a_shard_the_items_it_would_get_as_tuples(chunk, stamped, data):
    """What a shard is sent (``pack_columns`` of the request's columns: whole, or some of its items, several
    requests in one micro-batch) unpacks to exactly the core items of the same tuples (``_group_by_type``)."""
    tuples, columns = usage_request(CONFIG, as_columns(chunk, stamped), NOW_MS)
    assert tuples == usage_items(CONFIG, as_columns(chunk, stamped), NOW_MS)
    assert usage_request(CONFIG, as_items(chunk, stamped), NOW_MS) == (tuples, None)  # items: packed from tuples
    assert unpack_usage(pack_columns([(columns, None)])) == _group_by_type(tuples)
    some = sorted(data.draw(st.sets(st.integers(0, len(chunk) - 1), min_size=1)))
    twice = pack_columns([(columns, some), (columns, None)])
    assert unpack_usage(twice) == _group_by_type([tuples[i] for i in some] + tuples)


def test_a_part_of_one_item_or_of_none_is_packed_as_the_items_themselves():
    """``itemgetter`` answers a lone entry, not a tuple, for one index, and refuses none: a shard owning one item of
    a request (or none of a part) gets exactly those items."""
    chunk = [(pb.PRODUCE, "a", "x", 1.5, 10), (pb.FETCH, "b", "", 2.5, 11), (pb.PRODUCE, "é", "y", 3.5, 12)]
    tuples, columns = usage_request(CONFIG, as_columns(chunk, True), NOW_MS)
    for some in ([0], [2], [1, 2], [0, 2]):
        assert unpack_usage(pack_columns([(columns, some)])) == _group_by_type([tuples[i] for i in some])
    assert unpack_usage(pack_columns([(columns, []), (columns, [1])])) == _group_by_type([tuples[1]])


# --- the compiled checks and items (``_usage_compiled.pyx``) against the reference -----------------------------
compiled = _quota_service._compiled


def test_the_compiled_usage_items_are_built():
    """``make test`` installs the package, which compiles them: a silent fallback would hide a broken build."""
    assert compiled is not None, "quotaplane.services.gateway._usage_compiled is not importable: did setup.py build it?"


def reference_items(types, users, client_ids, values, times):
    """The reference's answer (``_usage_columns`` without the compiled pass, on the same columns as a protobuf
    message): None if it refuses an item, else its items."""
    columns = pb.UsageColumns(quota_type=types, user=users, client_id=client_ids, value=values, now_ms=times)
    with mock.patch.object(_quota_service, "_compiled", None):
        try:
            return usage_items(CONFIG, pb.UsageBatch(columns=columns), NOW_MS)
        except InvalidArgument:
            return None


def compiled_items(types, users, client_ids, values, times):
    return compiled.usage_items(
        types, users, client_ids, values, times, CONFIG.max_name_length, pb.PRODUCE, pb.FETCH, "PRODUCE", "FETCH"
    )


good_name = st.text(alphabet=st.sampled_from("abé\U0001f600"), min_size=1, max_size=8)
wire_items = st.tuples(
    st.sampled_from([pb.PRODUCE, pb.FETCH, pb.PRODUCE, pb.FETCH, pb.QUOTA_TYPE_UNSPECIFIED, 7, -1]),
    st.one_of(good_name, st.text(alphabet=st.sampled_from("ab\x00é\U0001f600"), max_size=10)),
    st.one_of(good_name, st.just(""), st.text(alphabet=st.sampled_from("ab\x00é\U0001f600"), max_size=10)),
    st.one_of(
        st.floats(min_value=0.0, max_value=1e9),
        st.sampled_from([-0.0, 5e-324, 1.7976931348623157e308, -5e-324, -1.0, math.inf, -math.inf, math.nan]),
        st.floats(),
    ),
    st.one_of(
        st.integers(min_value=0, max_value=2**63 - 1),
        st.sampled_from([0, -1, 2**62, 2**63 - 1, -(2**63)]),
        st.integers(min_value=-(2**63), max_value=-1),
    ),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(wire_items, min_size=1, max_size=5))
def test_compiled_usage_items_pass_exactly_what_the_reference_passes(chunk):
    """Values a protobuf message can carry (any float, int64 times, any enum number, names with NUL, accents and
    astral-plane characters, at and past the length limit): the same items, or None exactly when the reference
    refuses an item (then the gateway's walk names it)."""
    columns = [list(column) for column in zip(*chunk, strict=True)]
    expected = reference_items(*columns)
    got = compiled_items(*columns)
    if expected is None:
        assert got is None
    else:
        assert repr(got) == repr(expected)  # -0.0 stays -0.0
        assert all(item[k] is columns[k][i] for i, item in enumerate(got) for k in range(1, 5))  # no copies


@pytest.mark.parametrize(
    ("index", "junk"),
    [
        (0, True),  # a bool is not a quota type
        (1, b"alice"),  # bytes are not a name
        (2, None),
        (3, 1),  # an int value: the reference would zip it as it is; the compiled pass leaves that to it
        (4, 1.0),  # a float time
        (4, True),
        (4, 2**64),  # past a C long long
    ],
)
def test_compiled_usage_items_leave_anything_but_the_wire_types_to_the_reference(index, junk):
    columns = [[pb.PRODUCE, pb.FETCH], ["u", "v"], ["c", ""], [1.0, 2.0], [5, 6]]
    assert compiled_items(*columns) == reference_items(*columns)
    columns[index][1] = junk  # no protobuf message carries it: only a caller of the compiled pass could
    assert compiled_items(*columns) is None


GOOD = [[pb.PRODUCE, pb.FETCH], ["u", "vvvvvvv\U0001f600"], ["c", ""], [1.0, -0.0], [5, 0]]


@pytest.mark.parametrize(
    ("index", "bad", "accepted"),
    [
        (0, pb.QUOTA_TYPE_UNSPECIFIED, False),
        (0, 7, False),
        (1, "", False),  # a user must not be empty
        (1, "u" * 9, False),  # over max_name_length (8)
        (1, "u" * 8, True),
        (1, "\U0001f600" * 8, True),  # a character, not a byte or a UTF-16 unit, counts
        (1, "u\x00", False),
        (2, "c" * 9, False),
        (2, "c\x00", False),
        (2, "\x00", False),
        (3, -1.0, False),
        (3, -5e-324, False),
        (3, math.inf, False),
        (3, -math.inf, False),
        (3, math.nan, False),
        (3, 1.7976931348623157e308, True),
        (3, 0.0, True),
        (4, -1, False),
        (4, -(2**63), False),
        (4, 2**63 - 1, True),
    ],
)
def test_compiled_usage_items_check_each_field_as_the_reference(index, bad, accepted):
    """One field of the second item changed in a good batch: passed or refused exactly as the reference does."""
    columns = [list(column) for column in GOOD]
    columns[index][1] = bad
    assert (reference_items(*columns) is not None) == accepted
    assert compiled_items(*columns) == reference_items(*columns)


def test_compiled_usage_items_refuse_columns_of_unequal_length():
    assert compiled_items([pb.PRODUCE], ["u"], ["c"], [1.0], []) is None
    assert compiled_items([pb.PRODUCE], ["u"], [], [1.0], [1]) is None


@settings(max_examples=150, deadline=None)
@given(st.lists(items, max_size=22), st.booleans())
def test_the_reference_alone_checks_columns_exactly_as_items(chunk, stamped):
    """Where the compiled pass is not built: the column-at-a-time reference gives the same answers too."""
    with mock.patch.object(_quota_service, "_compiled", None):
        by_items, by_columns = outcome(as_items(chunk, stamped)), outcome(as_columns(chunk, stamped))
    if isinstance(by_items, list) and isinstance(by_columns, list):
        assert repr(by_columns) == repr(by_items)
    else:
        assert by_columns == by_items
