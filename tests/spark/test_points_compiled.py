"""The compiled point decoder (``_points_compiled``) fills the telemetry columns exactly as the Python walk of
the parsed push does (``_Columns._add_points``, the reference), on pushes written field by field in the wire
format: fields in any order and repeated, unknown fields of every wire type, known fields with another wire type,
oneof members given in turn, singular messages given twice (which protobuf merges), values of every kind. And it
sends a push back to the reference exactly when the push holds what it leaves to it, with the columns untouched.
No Spark."""

from __future__ import annotations

import contextlib
import math
import struct
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m

from quotaplane.archive import ArchiveRecord
from quotaplane.protocol.types import encode_unsigned_varlong
from quotaplane.spark import _arrow_telemetry as arrow_telemetry
from quotaplane.spark._arrow_telemetry import PointOutOfRangeError, _Columns, push_batch

compiled = pytest.importorskip(
    "quotaplane.spark._points_compiled", reason="the compiled decoder is built by setup.py where a C compiler is"
)

HOUR = 1_700_002_800_000
VARINT, I64, LEN, GROUP_START, GROUP_END, I32 = 0, 1, 2, 3, 4, 5


def _varint(n: int) -> bytes:
    """A protobuf varint of ``n`` as its 64 bits (a negative int64 takes ten bytes, as protobuf writes it)."""
    out = bytearray()
    encode_unsigned_varlong(out, n & ((1 << 64) - 1))
    return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _len(field: int, payload: bytes) -> bytes:
    return _tag(field, LEN) + _varint(len(payload)) + payload


def _i64(field: int, value: int) -> bytes:
    return _tag(field, I64) + struct.pack("<Q", value & ((1 << 64) - 1))


def _double(field: int, value: float) -> bytes:
    return _tag(field, I64) + struct.pack("<d", value)


class Wire:
    """A message written field by field; ``sent_back`` is set when it holds what the compiled decoder leaves to
    the reference."""

    def __init__(self) -> None:
        self.sent_back = False


@st.composite
def unknown_field(draw: st.DrawFn, wire: Wire, first_unknown: int) -> bytes:
    """A field the message does not know, of any wire type (a group sends the push back)."""
    field = draw(st.integers(first_unknown, first_unknown + 3))
    wire_type = draw(st.sampled_from([VARINT, I64, LEN, I32] * 3 + [GROUP_START]))
    if wire_type == VARINT:
        return _tag(field, VARINT) + _varint(draw(st.integers(0, 2**64 - 1)))
    if wire_type == I64:
        return _i64(field, draw(st.integers(0, 2**64 - 1)))
    if wire_type == LEN:
        return _len(field, draw(st.binary(max_size=3)))
    if wire_type == I32:
        return _tag(field, I32) + draw(st.binary(min_size=4, max_size=4))
    wire.sent_back = True
    return _tag(field, GROUP_START) + _tag(field, GROUP_END)


@st.composite
def any_value(draw: st.DrawFn, wire: Wire) -> bytes:
    pieces = []
    for _ in range(draw(st.integers(0, 2))):  # two scalar members: the last one wins
        kind = draw(st.sampled_from(["string", "bool", "int", "double", "bytes", "unknown"] * 3 + ["array", "kvlist"]))
        if kind == "string":
            pieces.append(_len(1, draw(st.text(max_size=4)).encode()))
        elif kind == "bool":
            pieces.append(_tag(2, VARINT) + _varint(draw(st.sampled_from([0, 1, 2, 2**64 - 1]))))
        elif kind == "int":
            pieces.append(_tag(3, VARINT) + _varint(draw(st.integers(-(2**63), 2**63 - 1))))
        elif kind == "double":
            pieces.append(_double(4, draw(st.floats(allow_nan=False))))
        elif kind == "bytes":
            pieces.append(_len(7, draw(st.binary(max_size=4))))
        elif kind == "array":
            wire.sent_back = True
            array = ArrayValue(values=[AnyValue(string_value="x"), AnyValue(int_value=draw(st.integers(0, 9)))])
            pieces.append(_len(5, array.SerializeToString()))
        elif kind == "kvlist":
            wire.sent_back = True
            kvlist = KeyValueList(values=[KeyValue(key="k", value=AnyValue(bool_value=draw(st.booleans())))])
            pieces.append(_len(6, kvlist.SerializeToString()))
        else:
            pieces.append(draw(unknown_field(wire, 8)))
    return b"".join(pieces)


@st.composite
def key_value(draw: st.DrawFn, wire: Wire) -> bytes:
    pieces = [_len(1, draw(st.sampled_from(["a", "b", "node.id", ""])).encode())]
    values = draw(st.sampled_from([0, 1, 1, 1, 2]))
    if values > 1:
        wire.sent_back = True  # the two AnyValues merge
    pieces += [_len(2, draw(any_value(wire))) for _ in range(values)]
    if draw(st.booleans()):
        pieces.append(_len(1, draw(st.sampled_from(["a", "c"])).encode()))  # a second key: the last one wins
    if draw(st.booleans()):
        pieces.append(draw(unknown_field(wire, 3)))
    return b"".join(draw(st.permutations(pieces)))


TIMES = st.one_of(st.just(0), st.integers(0, 999_999), st.integers(0, 2**64 - 1))


@st.composite
def data_point(draw: st.DrawFn, wire: Wire, kind: str) -> bytes:
    attributes_field = {"gauge": 7, "sum": 7, "histogram": 9, "exponential_histogram": 1, "summary": 7}[kind]
    pieces = [_i64(2, draw(TIMES)), _i64(3, draw(TIMES))]
    pieces += [_len(attributes_field, draw(key_value(wire))) for _ in range(draw(st.integers(0, 3)))]
    if kind in ("gauge", "sum"):
        for _ in range(draw(st.integers(0, 2))):  # as_double and as_int, in turn: the last one wins
            if draw(st.booleans()):
                pieces.append(
                    _double(4, draw(st.sampled_from([0.0, -0.0, 1.5, -2.0, 1e300]) | st.floats(allow_nan=False)))
                )
            else:
                pieces.append(_i64(6, draw(st.sampled_from([0, 1, -1, 2**63, 2**53 + 1]) | st.integers(0, 2**64 - 1))))
        first_unknown = 9
    else:
        pieces.append(_i64(4, draw(st.integers(0, 2**63 - 1) | st.just(2**64 - 1))))  # the latter is left out
        if kind != "histogram" or draw(st.booleans()):
            pieces.append(_double(5, draw(st.floats(allow_nan=False))))
        first_unknown = 15
        if kind == "histogram" and draw(st.booleans()):  # packed bucket counts, a field the decoder skips
            pieces.append(_len(6, b"".join(struct.pack("<Q", c) for c in range(draw(st.integers(0, 3))))))
    if draw(st.integers(0, 15)) == 0:
        # a known field with another wire type: protobuf keeps it as an unknown field, the decoder sends it back
        wire.sent_back = True
        pieces.append(_tag(3, VARINT) + _varint(draw(st.integers(0, 2**20))))
    if draw(st.booleans()):
        pieces.append(draw(unknown_field(wire, first_unknown)))
    return b"".join(draw(st.permutations(pieces)))


KINDS = {"gauge": 5, "sum": 7, "histogram": 9, "exponential_histogram": 10, "summary": 11}


@st.composite
def metric(draw: st.DrawFn, wire: Wire) -> bytes:
    pieces = [_len(1, f"metric.{draw(st.integers(0, 3))}".encode())]
    data_fields = draw(st.sampled_from([0, 1, 1, 1, 2]))
    if data_fields > 1:
        wire.sent_back = True  # merged or replaced by protobuf
    for _ in range(data_fields):
        kind = draw(st.sampled_from(sorted(KINDS)))
        data = [_len(1, draw(data_point(wire, kind))) for _ in range(draw(st.integers(0, 3)))]
        if kind in ("sum", "histogram", "exponential_histogram"):
            for _ in range(draw(st.integers(0, 2))):
                data.append(_tag(2, VARINT) + _varint(draw(st.sampled_from([0, 1, 2, 3, 2**32 + 1, 2**64 - 1]))))
        if kind == "sum" and draw(st.booleans()):
            data.append(_tag(3, VARINT) + _varint(draw(st.sampled_from([0, 1, 2, 2**40]))))
        pieces.append(_len(KINDS[kind], b"".join(draw(st.permutations(data)))))
    if draw(st.booleans()):
        pieces.append(_len(2, b"a description"))
    if draw(st.booleans()):
        pieces.append(_len(1, b"renamed"))  # a second name: the last one wins
    return b"".join(draw(st.permutations(pieces)))


@st.composite
def push(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A push's wire bytes and whether the compiled decoder sends it back."""
    wire = Wire()
    resources = []
    for _ in range(draw(st.integers(0, 2))):
        scopes = []
        for _ in range(draw(st.integers(0, 2))):
            scope = [_len(2, draw(metric(wire))) for _ in range(draw(st.integers(0, 3)))]
            if draw(st.booleans()):
                scope.append(_len(1, _len(1, b"scope-name")))
            scopes.append(_len(2, b"".join(scope)))
        if draw(st.booleans()):
            scopes.append(_len(1, b""))  # an empty resource
        resources.append(_len(1, b"".join(draw(st.permutations(scopes)))))
    return b"".join(resources), wire.sent_back


def _float_bits(value: Any) -> Any:
    """Rows with every float as its bits: ``-0.0 == 0.0`` and ``nan != nan`` hide differences."""
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, dict):
        return {k: _float_bits(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_float_bits(v) for v in value]
    return value


def _batch(bodies: list[bytes], decoder: Any) -> pa.RecordBatch:
    labels = {"client_instance_id": "id", "client_id": "c"}
    records = [ArchiveRecord(HOUR + i, labels, body) for i, body in enumerate(bodies)]
    return push_batch("segment", HOUR, records, decoder=decoder)[0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(push(), min_size=1, max_size=4))
def test_compiled_decoder_fills_the_columns_of_the_reference(pushes: list[tuple[bytes, bool]]) -> None:
    bodies = [body for body, _ in pushes]
    for body in bodies:
        try:
            m.MetricsData.FromString(body)
        except DecodeError:  # pragma: no cover - the strategy writes valid protobuf
            assume(False)
    reference, fast = _batch(bodies, None), _batch(bodies, compiled)
    assert fast.schema == reference.schema
    assert _float_bits(fast.to_pylist()) == _float_bits(reference.to_pylist())
    for body, sent_back in pushes:
        columns = _Columns()
        assert compiled.add_points(columns, HOUR, body) is not sent_back


def _state(columns: _Columns) -> dict[str, Any]:
    return {
        name: (list(v) if isinstance(v, list) else dict(v))
        for name, v in vars(columns).items()
        if isinstance(v, list | dict)
    }


@given(push(), push())
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_a_push_sent_back_leaves_the_columns_as_they_were(
    before: tuple[bytes, bool], after: tuple[bytes, bool]
) -> None:
    """Points and metric ids the compiled decoder appended before it met what it sends back are taken out again
    (``_Columns.add``), so the reference's walk of that push starts from the same columns: the columns equal the
    reference's alone, the metric ids in the same order."""
    assume(after[1])
    columns, reference = _Columns(), _Columns()
    for target in (columns, reference):
        with contextlib.suppress(PointOutOfRangeError):  # (a count past int64 leaves the push out)
            target.add(ArchiveRecord(HOUR, {}, before[0]), m.MetricsData.FromString(before[0]), None)
    assert not compiled.add_points(_Columns(), HOUR + 1, after[0])  # sent back
    for target, decoder in ((columns, compiled), (reference, None)):
        with contextlib.suppress(PointOutOfRangeError):
            target.add(ArchiveRecord(HOUR + 1, {}, after[0]), m.MetricsData.FromString(after[0]), decoder)
    assert _state(columns) == _state(reference)
    assert list(columns.metric_ids) == list(reference.metric_ids)


def test_special_doubles_and_int_values_are_the_references() -> None:
    """NaN, infinities, both zeros and int64 values a double cannot hold exactly, from either member."""
    md = m.MetricsData()
    gauge = md.resource_metrics.add().scope_metrics.add().metrics.add(name="g").gauge
    for value in (math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324):
        gauge.data_points.add(as_double=value)
    for value in (0, 1, -1, 2**53 + 1, 2**63 - 1, -(2**63)):
        gauge.data_points.add(as_int=value)
    point = gauge.data_points.add(as_double=1.0)
    point.attributes.append(KeyValue(key="d", value=AnyValue(double_value=math.nan)))
    point.attributes.append(KeyValue(key="i", value=AnyValue(int_value=-(2**63))))
    point.attributes.append(KeyValue(key="b", value=AnyValue(bytes_value=b"\x00\xff")))
    body = md.SerializeToString()
    assert compiled.add_points(_Columns(), HOUR, body)
    reference, fast = _batch([body], None), _batch([body], compiled)
    assert _float_bits(fast.to_pylist()) == _float_bits(reference.to_pylist())


@pytest.mark.parametrize("decoder", [None, compiled], ids=["reference", "compiled"])
def test_a_push_with_a_count_past_int64_is_left_out_and_named(decoder: Any) -> None:
    """OTLP counts are uint64, the points table's an int64: such a push is a bad record, the others are kept."""

    def histogram_push(count: int) -> bytes:
        md = m.MetricsData()
        metrics = md.resource_metrics.add().scope_metrics.add().metrics
        metrics.add(name="before").gauge.data_points.add(as_double=1.0)
        metrics.add(name="h").histogram.data_points.add(count=count, sum=2.0)
        return md.SerializeToString()

    records = [ArchiveRecord(HOUR + i, {"client_id": f"c{i}"}, histogram_push(c)) for i, c in enumerate([1, 2**63, 3])]
    bad: list[tuple[int, str]] = []
    batch, points = push_batch("s", HOUR, records, lambda r, reason: bad.append((r.time_ms, reason)), decoder)
    assert bad == [(HOUR + 1, "a data point's count is 2**63 or more: the points table's count is an int64")]
    rows = batch.to_pylist()
    assert [row["client_id"] for row in rows] == ["c0", "c2"] and points == 4
    assert [[(p["metric"], p["count"]) for p in row["points"]] for row in rows] == [
        [("before", None), ("h", 1)],
        [("before", None), ("h", 3)],
    ]


def test_a_body_that_is_not_bytes_goes_to_the_reference() -> None:
    body = m.MetricsData(resource_metrics=[m.ResourceMetrics()]).SerializeToString()
    assert not compiled.add_points(_Columns(), HOUR, bytearray(body))
    assert compiled.add_points(_Columns(), HOUR, body)


def _field_numbers(descriptor: Any) -> dict[str, int]:
    return {f"{descriptor.name}.{field.name}": field.number for field in descriptor.fields}


def test_field_numbers_are_opentelemetry_protos() -> None:
    from opentelemetry.proto.common.v1 import common_pb2

    known: dict[str, int] = {}
    for module in (m, common_pb2):
        for descriptor in module.DESCRIPTOR.message_types_by_name.values():
            known.update(_field_numbers(descriptor))
    assert compiled.FIELD_NUMBERS
    for name, number in compiled.FIELD_NUMBERS.items():
        assert known[name] == number, name


def test_the_job_uses_the_compiled_decoder_where_it_is_built() -> None:
    assert arrow_telemetry.compiled_decoder()
    assert arrow_telemetry._DEFAULT_DECODER is compiled
