"""The columnar telemetry decoder (``_arrow_telemetry``) gives exactly the rows of a per-record reference
(``points_of_record`` below, one tuple per data point as the job made them before it decoded in Arrow) on
random pushes, torn tails and bad bodies included. No Spark."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from quotaplane.archive import ArchiveRecord, decode_segment_bytes
from quotaplane.archive._format import FILE_HEADER, encode_batch, encode_record_fields
from quotaplane.spark._arrow_telemetry import POINT_ARROW_SCHEMA, any_value_text, segment_point_batches

HOUR = 1_700_002_800_000
MAP_COLUMNS = {"labels", "attributes"}
TEMPORALITY = {1: "delta", 2: "cumulative"}


def _attributes(kvs: Any) -> dict[str, str] | None:
    return {kv.key: any_value_text(kv.value) for kv in kvs} if kvs else None


def points_of_record(path: str, hour_ms: int, record: ArchiveRecord) -> Iterator[tuple]:
    """One ``POINT_SCHEMA`` row per data point of one archived push, walked point by point (the oracle the
    columnar decoder is held to); ValueError if the body is not OTLP."""
    try:
        metrics_data = MetricsData.FromString(record.body)
    except DecodeError as exc:
        raise ValueError(f"body is not an OTLP MetricsData: {exc}") from None
    labels = dict(record.labels)
    hour_start = datetime.fromtimestamp(hour_ms / 1000, UTC)
    date, hour = hour_start.date(), hour_start.hour
    received = record.time_ms
    head = (labels.get("client_instance_id"), labels.get("client_id"), labels.get("principal"), labels.get("node_id"))
    for resource_metrics in metrics_data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind is None:
                    continue
                data = getattr(metric, kind)
                temporality = (
                    TEMPORALITY.get(data.aggregation_temporality) if kind != "gauge" and kind != "summary" else None
                )
                monotonic = data.is_monotonic if kind == "sum" else None
                name = metric.name
                numeric = kind in ("gauge", "sum")
                for point in data.data_points:
                    t = point.time_unix_nano // 1_000_000 or received
                    start = point.start_time_unix_nano // 1_000_000 or None
                    if numeric:
                        which = point.WhichOneof("value")
                        value = float(point.as_int) if which == "as_int" else point.as_double
                        count = None
                    else:
                        value = point.sum if kind != "histogram" or point.HasField("sum") else None
                        count = point.count
                    yield (
                        date,
                        hour,
                        t,
                        received,
                        *head,
                        labels,
                        name,
                        kind,
                        temporality,
                        monotonic,
                        _attributes(point.attributes),
                        value,
                        count,
                        start,
                        path,
                    )


any_values = st.one_of(
    st.builds(lambda s: AnyValue(string_value=s), st.text(max_size=5)),
    st.builds(lambda i: AnyValue(int_value=i), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda d: AnyValue(double_value=d), st.floats(allow_nan=False)),
    st.builds(lambda b: AnyValue(bool_value=b), st.booleans()),
    st.builds(lambda b: AnyValue(bytes_value=b), st.binary(max_size=4)),
    st.just(AnyValue()),
)
attributes = st.lists(st.tuples(st.sampled_from(["a", "b", "node.id"]), any_values), max_size=3)  # repeats keys
times = st.one_of(st.just(0), st.integers(0, 2**63 - 1))


@st.composite
def number_point(draw: st.DrawFn, point: m.NumberDataPoint) -> None:
    point.time_unix_nano, point.start_time_unix_nano = draw(times), draw(times)
    kind = draw(st.sampled_from(["int", "double", "none"]))
    if kind == "int":
        point.as_int = draw(st.integers(-(2**63), 2**63 - 1))
    elif kind == "double":
        point.as_double = draw(st.floats(allow_nan=False))
    for key, value in draw(attributes):
        point.attributes.append(KeyValue(key=key, value=value))


@st.composite
def push(draw: st.DrawFn) -> bytes:
    md = m.MetricsData()
    for _ in range(draw(st.integers(0, 2))):
        metrics = md.resource_metrics.add().scope_metrics.add().metrics
        for i in range(draw(st.integers(0, 4))):
            metric = metrics.add(name=f"metric.{i}.{draw(st.integers(0, 3))}")
            kind = draw(st.sampled_from(["gauge", "sum", "histogram", "exponential_histogram", "summary", "none"]))
            if kind == "none":
                continue
            data = getattr(metric, kind)
            if kind in ("sum", "histogram", "exponential_histogram"):
                data.aggregation_temporality = draw(st.integers(0, 3))
            if kind == "sum":
                data.is_monotonic = draw(st.booleans())
            for _ in range(draw(st.integers(0, 3))):
                point = data.data_points.add()
                if kind in ("gauge", "sum"):
                    draw(number_point(point))
                    continue
                point.time_unix_nano, point.start_time_unix_nano = draw(times), draw(times)
                point.count = draw(st.integers(0, 2**63 - 1))
                if kind != "histogram" or draw(st.booleans()):
                    point.sum = draw(st.floats(allow_nan=False))
                for key, value in draw(attributes):
                    point.attributes.append(KeyValue(key=key, value=value))
    return md.SerializeToString()


labels = st.dictionaries(
    st.sampled_from(["client_instance_id", "client_id", "principal", "node_id", "other"]), st.text(max_size=4)
)
records = st.lists(
    st.tuples(st.integers(HOUR, HOUR + 3_599_999), labels, st.one_of(push(), st.just(b"\xff\xff"))),
    min_size=1,
    max_size=6,
)


def _segment(batches: list[list[tuple[int, dict[str, str], bytes]]], torn: bytes) -> bytes:
    return (
        FILE_HEADER
        + b"".join(encode_batch([(t, encode_record_fields(lb, body)) for t, lb, body in b]) for b in batches)
        + torn
    )


def _reference(path: str, data: bytes) -> tuple[list[tuple], list[str]]:
    rows, bad = [], []
    for record in decode_segment_bytes(data, path).records:
        try:
            rows += points_of_record(path, HOUR, record)
        except ValueError as exc:
            bad.append(f"{record.time_ms}: {exc}")
    return rows, bad


def _bulk(path: str, data: bytes) -> tuple[list[tuple], list[str]]:
    rows, bad = [], []
    for batch in segment_point_batches(path, HOUR, data, lambda r, reason: bad.append(f"{r.time_ms}: {reason}")):
        assert batch.schema == POINT_ARROW_SCHEMA
        for row in batch.to_pylist():
            rows.append(tuple((dict(v) if v is not None else None) if k in MAP_COLUMNS else v for k, v in row.items()))
    return rows, bad


@settings(max_examples=150, deadline=None)
@given(st.lists(records, min_size=1, max_size=3), st.sampled_from([b"", b"QB\x01", b"QB\x01" + bytes(40)]))
def test_bulk_points_equal_the_per_record_reference(batches: list, torn: bytes) -> None:
    data = _segment(batches, torn)
    path = "root/telemetry/date=2023-11-14/hour=23/1700002800000-w-000000.seg"
    assert _bulk(path, data) == _reference(path, data)


def test_archive_bulk_api_gives_the_records_of_the_eager_reader() -> None:
    from quotaplane.archive import TornTail, iter_segment_batches

    data = _segment([[(HOUR, {"k": "v"}, b"x")], [(HOUR + 1, {}, b""), (HOUR + 2, {"a": "b"}, b"yz")]], b"QB")
    items = list(iter_segment_batches(data, "s.seg"))
    assert isinstance(items[-1], TornTail)
    bulk = [r for item in items[:-1] for r in item[1]]
    assert bulk == decode_segment_bytes(data, "s.seg").records
    assert bulk[2] == ArchiveRecord(HOUR + 2, {"a": "b"}, b"yz")


def test_number_values_keep_their_sign_and_kind() -> None:
    """The decoder reads ``as_double`` first and ``as_int`` when it is 0: a zero of either kind, a negative
    zero and an unset value must still come out as the reference's (compared bit for bit: ``-0.0 == 0.0``)."""
    md = m.MetricsData()
    gauge = md.resource_metrics.add().scope_metrics.add().metrics.add(name="g").gauge
    for set_value in (
        lambda p: setattr(p, "as_double", -0.0),
        lambda p: setattr(p, "as_double", 0.0),
        lambda p: setattr(p, "as_int", 0),
        lambda p: setattr(p, "as_int", -7),
        lambda p: setattr(p, "as_double", 2.5),
        lambda p: None,
    ):
        set_value(gauge.data_points.add())
    data = _segment([[(HOUR, {}, md.SerializeToString())]], b"")
    path = "root/telemetry/date=2023-11-14/hour=23/1700002800000-w-000000.seg"
    bulk = [row[14] for row in _bulk(path, data)[0]]
    reference = [row[14] for row in _reference(path, data)[0]]
    assert [struct.pack("<d", v) for v in bulk] == [struct.pack("<d", v) for v in reference]
    assert [struct.pack("<d", v) for v in bulk] == [struct.pack("<d", v) for v in (-0.0, 0.0, 0.0, -7.0, 2.5, 0.0)]
