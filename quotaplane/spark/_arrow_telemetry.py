"""Archived telemetry pushes to Arrow record batches, a segment at a time: a row per push, its points in a list.

Why: handing Spark one Python tuple per data point (pickled, then converted row by row in the JVM)
cost five times what writing the same rows as Parquet did. Here an executor decodes a whole segment
(``iter_segment_batches``: the archive's own reader, in bulk) and fills plain per-column lists, one
entry per data point, with nothing per point but the numbers and the attribute strings OTLP gives it;
what is per metric (name, type, temporality) is stored once and spread over the points with Arrow
``take``. What is per push (the broker's labels, the client names, the receive time, the segment: most
of a point row's bytes) stays once per push: the batch has a row per push (``PUSH_ARROW_SCHEMA``) and
its points in a list, which the job spreads into point rows (``POINT_ARROW_SCHEMA``) with ``inline`` in
the JVM (that took a tenth off the points write, against a row per point from here). Spark receives the
columns through ``mapInArrow``, with no Python object per row on its side. The points themselves are read
from each push's bytes by a compiled decoder (``_points_compiled.pyx``) where the install built it: the walk
of the parsed push in ``_Columns._add_points`` is its reference and its fallback.

The rows are exactly those a per-record walk of the pushes gives (``tests/spark/test_arrow_bulk_telemetry.py``
holds that reference and compares it with ``points_of_pushes`` on random pushes; ``test_telemetry_push_rows``
with the job's ``inline`` in Spark).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from itertools import accumulate
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from quotaplane.archive import ArchiveRecord, TornTail, iter_segment_batches
from quotaplane.compiled import load_compiled

__all__ = [
    "POINT_ARROW_SCHEMA",
    "PUSH_ARROW_SCHEMA",
    "any_value_text",
    "compiled_decoder",
    "point_batch",
    "points_of_pushes",
    "push_batch",
    "segment_point_batches",
    "segment_push_batches",
]

_STR_MAP = pa.map_(pa.string(), pa.string())

_HEAD_NAMES = ("client_instance_id", "client_id", "principal", "node_id")

POINT_ARROW_SCHEMA = pa.schema(
    [
        ("date", pa.date32()),
        ("hour", pa.int32()),
        ("time_ms", pa.int64()),
        ("received_ms", pa.int64()),
        ("client_instance_id", pa.string()),
        ("client_id", pa.string()),
        ("principal", pa.string()),
        ("node_id", pa.string()),
        ("labels", _STR_MAP),
        ("metric", pa.string()),
        ("type", pa.string()),
        ("temporality", pa.string()),
        ("monotonic", pa.bool_()),
        ("attributes", _STR_MAP),
        ("value", pa.float64()),
        ("count", pa.int64()),
        ("start_time_ms", pa.int64()),
        ("segment", pa.string()),
    ]
)

#: The per-point fields of ``POINT_ARROW_SCHEMA``, in a push's ``points`` list.
_POINT_TYPE = pa.struct(
    [
        POINT_ARROW_SCHEMA.field(name)
        for name in (
            "time_ms",
            "metric",
            "type",
            "temporality",
            "monotonic",
            "attributes",
            "value",
            "count",
            "start_time_ms",
        )
    ]
)
_POINTS_TYPE = pa.list_(pa.field("element", _POINT_TYPE))

#: A row per push: what is the push's (the archive hour, the broker's labels, the segment) once, and its
#: data points in a list, which Spark's ``inline`` spreads into ``POINT_ARROW_SCHEMA`` rows in the JVM.
PUSH_ARROW_SCHEMA = pa.schema(
    [
        *(
            POINT_ARROW_SCHEMA.field(name)
            for name in ("date", "hour", "received_ms", *_HEAD_NAMES, "labels", "segment")
        ),
        ("points", _POINTS_TYPE),
    ]
)

_TEMPORALITY = {1: "delta", 2: "cumulative"}
_INT64_MAX = 2**63 - 1


class PointOutOfRangeError(ValueError):
    """A push holds a value the points table cannot store."""


_METRIC_TYPES = (pa.string(), pa.string(), pa.string(), pa.bool_())


#: The compiled point decoder (``_points_compiled.pyx``), or None where it was not built or the pure paths
#: are asked for (``quotaplane.compiled``).
_DEFAULT_DECODER = load_compiled(f"{__package__}._points_compiled")


def compiled_decoder() -> bool:
    """Whether this process decodes telemetry points with the compiled decoder (else the Python walk)."""
    return _DEFAULT_DECODER is not None


def any_value_text(value: Any) -> str:
    """An OTLP ``AnyValue`` as the text the points table stores."""
    kind = value.WhichOneof("value")
    if kind is None:
        return ""
    if kind in ("string_value", "int_value", "double_value"):
        return str(getattr(value, kind))
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return str(getattr(value, kind)).replace("\n", " ")  # arrays and kvlists: their text form


def _map_array(offsets: list[int], keys: list[str], items: list[str], *, null_if_empty: bool) -> pa.MapArray:
    offset_array = pa.array(offsets, pa.int32())
    mask = None
    if null_if_empty:
        mask = pc.equal(offset_array[1:], offset_array[:-1])
        if not pc.any(mask).as_py():
            mask = None
    return pa.MapArray.from_arrays(
        offset_array, pa.array(keys, pa.string()), pa.array(items, pa.string()), _STR_MAP, mask=mask
    )


class _Columns:
    """The per-column lists of one segment's points, and the per-push and per-metric tables they index."""

    def __init__(self) -> None:
        # per point
        self.metric: list[int] = []
        self.time_ms: list[int] = []
        self.start_ms: list[int | None] = []
        self.value: list[float | None] = []
        self.count_at: list[int] = []  # the points that have a count (histograms, summaries): their index
        self.count: list[int] = []  # and their count
        self.attr_counts: list[int] = []  # a point without attributes (0) has a null map
        self.attr_keys: list[str] = []
        self.attr_values: list[str] = []
        # per push
        self.point_offsets: list[int] = [0]  # its points: [point_offsets[i], point_offsets[i + 1])
        self.received: list[int] = []
        self.label_offsets: list[int] = [0]
        self.label_keys: list[str] = []
        self.label_values: list[str] = []
        self.heads: list[list[str | None]] = [[], [], [], []]
        # per metric: (name, kind, aggregation temporality, monotonic) -> its index, in first-seen order
        # (temporality None for gauges and summaries, monotonic None but for sums)
        self.metric_ids: dict[tuple[str, str, int | None, bool | None], int] = {}
        keys, values = self.attr_keys, self.attr_values
        key_append, value_append = keys.append, values.append

        def add_attributes(kvs: Any) -> int:
            """Appends a point's attributes (not empty), returns how many entries it has."""
            # a string is its own text: any_value_text only for the other kinds (and the empty string)
            if len(kvs) == 1:
                kv = kvs[0]
                value = kv.value
                key_append(kv.key)
                value_append(value.string_value or any_value_text(value))
                return 1
            attributes = {}  # a key given twice keeps its first place and its last value
            for kv in kvs:
                value = kv.value
                attributes[kv.key] = value.string_value or any_value_text(value)
            keys.extend(attributes.keys())
            values.extend(attributes.values())
            return len(attributes)

        # the per-point code is the whole cost of decoding: names bound once, no call per point but this
        # one for a point with attributes (and the lists' appends)
        self._add_attributes = add_attributes

    def add(self, record: ArchiveRecord, metrics_data: Any, decoder: ModuleType | None = None) -> None:
        """Appends one push: ``metrics_data`` is its body parsed. Its points are read from the body's bytes by
        ``decoder`` (``_points_compiled``) if given, and walked in the parsed message where it is not or where
        it sends the push back."""
        received = record.time_ms
        lengths = [len(column) for column in self._point_columns()]
        metrics = len(self.metric_ids)
        if decoder is not None and not decoder.add_points(self, received, record.body):
            self._take_back(lengths, metrics)  # what the decoder appended before it sent the push back
            decoder = None
        if decoder is None:
            self._add_points(received, metrics_data)
        counts = self.count
        if len(counts) > lengths[5] and max(counts[lengths[5] :]) > _INT64_MAX:
            # OTLP counts are uint64, the points table's an int64: the push is left out, named (the archive keeps it)
            self._take_back(lengths, metrics)
            raise PointOutOfRangeError("a data point's count is 2**63 or more: the points table's count is an int64")
        self.received.append(received)
        labels = record.labels
        self.label_keys += labels.keys()
        self.label_values += labels.values()
        self.label_offsets.append(len(self.label_keys))
        for column, key in zip(self.heads, _HEAD_NAMES, strict=True):
            column.append(labels.get(key))
        self.point_offsets.append(len(self.time_ms))

    def _take_back(self, lengths: list[int], metrics: int) -> None:
        """Undoes a push's points: the per-point lists back to ``lengths``, the metric ids back to the first
        ``metrics`` (those added since are the dict's last, so the ids keep their first-seen order)."""
        for column, length in zip(self._point_columns(), lengths, strict=True):
            del column[length:]
        for key in list(self.metric_ids)[metrics:]:
            del self.metric_ids[key]

    def _point_columns(self) -> tuple[list[Any], ...]:
        """The per-point lists (``count`` the sixth)."""
        return (
            self.metric,
            self.time_ms,
            self.start_ms,
            self.value,
            self.count_at,
            self.count,
            self.attr_counts,
            self.attr_keys,
            self.attr_values,
        )

    def _add_points(self, received: int, metrics_data: Any) -> None:
        """The reference walk of a parsed push's data points (``_points_compiled`` does the same from bytes)."""
        metric_col, metric_ids = self.metric, self.metric_ids
        times = self.time_ms
        time_append, start_append = times.append, self.start_ms.append
        value_append, count_append, count_at_append = self.value.append, self.count.append, self.count_at.append
        attr_count_append, add_attributes = self.attr_counts.append, self._add_attributes
        for resource_metrics in metrics_data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    if kind is None:
                        continue
                    data = getattr(metric, kind)
                    points = data.data_points
                    if not points:
                        continue
                    if kind == "sum":
                        key = (metric.name, kind, data.aggregation_temporality, data.is_monotonic)
                    elif kind == "gauge" or kind == "summary":
                        key = (metric.name, kind, None, None)
                    else:
                        key = (metric.name, kind, data.aggregation_temporality, None)
                    m = metric_ids.get(key)
                    if m is None:
                        m = metric_ids[key] = len(metric_ids)
                    n = len(points)
                    if n == 1:
                        metric_col.append(m)
                    else:
                        metric_col += [m] * n
                    if kind == "gauge" or kind == "sum":
                        for point in points:
                            time_append(point.time_unix_nano // 1_000_000 or received)
                            start_append(point.start_time_unix_nano // 1_000_000 or None)
                            # the oneof's value: as_double, else as_int (an unset field reads 0, and
                            # -0.0 is falsy but must stay -0.0)
                            value = point.as_double
                            value_append(value or (float(point.as_int) if point.as_int else value))
                            kvs = point.attributes
                            attr_count_append(add_attributes(kvs) if kvs else 0)
                    else:
                        for point in points:
                            count_at_append(len(times))
                            time_append(point.time_unix_nano // 1_000_000 or received)
                            start_append(point.start_time_unix_nano // 1_000_000 or None)
                            value_append(point.sum if kind != "histogram" or point.HasField("sum") else None)
                            count_append(point.count)
                            kvs = point.attributes
                            attr_count_append(add_attributes(kvs) if kvs else 0)

    def _counts(self) -> pa.Array:
        n = len(self.time_ms)
        if not self.count_at:
            return pa.nulls(n, pa.int64())
        counts: list[int | None] = [None] * n
        for i, count in zip(self.count_at, self.count, strict=True):
            counts[i] = count
        return pa.array(counts, pa.int64())

    @property
    def points(self) -> int:
        return len(self.time_ms)

    def batch(self, path: str, hour_ms: int) -> pa.RecordBatch:
        """The pushes as ``PUSH_ARROW_SCHEMA`` rows (a push without points has an empty list)."""
        pushes = len(self.received)
        hour_start = datetime.fromtimestamp(hour_ms / 1000, UTC)
        by_metric = pa.array(self.metric, pa.int32())
        metrics = list(self.metric_ids) or [("", "", None, None)]  # (a batch without points: a row nothing takes)
        names, kinds, temporalities, monotonics = zip(*metrics, strict=True)
        metric_columns = (names, kinds, [_TEMPORALITY.get(t) for t in temporalities], monotonics)
        points = pa.StructArray.from_arrays(
            [
                pa.array(self.time_ms, pa.int64()),
                *(
                    pa.array(column, arrow_type).take(by_metric)
                    for column, arrow_type in zip(metric_columns, _METRIC_TYPES, strict=True)
                ),
                _map_array([0, *accumulate(self.attr_counts)], self.attr_keys, self.attr_values, null_if_empty=True),
                pa.array(self.value, pa.float64()),
                self._counts(),
                pa.array(self.start_ms, pa.int64()),
            ],
            fields=list(_POINT_TYPE),
        )
        columns = [
            pa.repeat(pa.scalar(hour_start.date(), pa.date32()), pushes),
            pa.repeat(pa.scalar(hour_start.hour, pa.int32()), pushes),
            pa.array(self.received, pa.int64()),
            *(pa.array(column, pa.string()) for column in self.heads),
            _map_array(self.label_offsets, self.label_keys, self.label_values, null_if_empty=False),
            pa.repeat(pa.scalar(path, pa.string()), pushes),
            pa.ListArray.from_arrays(pa.array(self.point_offsets, pa.int32()), points, type=_POINTS_TYPE),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=PUSH_ARROW_SCHEMA)


def points_of_pushes(pushes: pa.RecordBatch) -> pa.RecordBatch:
    """``PUSH_ARROW_SCHEMA`` rows flattened to ``POINT_ARROW_SCHEMA`` rows, a row per point, in order: what
    the job's ``inline`` does in the JVM (``telemetry.points_of``), done here in Arrow."""
    points_column = pushes.column("points")
    by_push = pc.list_parent_indices(points_column)
    per_push = {name: pushes.column(name).take(by_push) for name in pushes.schema.names if name != "points"}
    per_point = dict(zip([f.name for f in _POINT_TYPE], points_column.flatten().flatten(), strict=True))
    per_point.update(per_push)
    return pa.RecordBatch.from_arrays([per_point[f.name] for f in POINT_ARROW_SCHEMA], schema=POINT_ARROW_SCHEMA)


def push_batch(
    path: str,
    hour_ms: int,
    records: Iterable[ArchiveRecord],
    bad_record: Any = None,
    decoder: ModuleType | None = _DEFAULT_DECODER,
) -> tuple[pa.RecordBatch, int]:
    """The ``PUSH_ARROW_SCHEMA`` rows of ``records`` (pushes of the segment ``path``, archive hour
    ``hour_ms``) and their number of data points.

    A record whose body is not OTLP ``MetricsData``, or holds a count the points table cannot store (2**63
    or more), is skipped and, if given, ``bad_record(record, reason)`` is called (the reason names the
    protobuf error or the count). ``decoder``: the compiled point decoder, or
    None for the Python walk (the tests compare the two).
    """
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

    columns = _Columns()
    parse = MetricsData.FromString
    for record in records:
        try:
            metrics_data = parse(record.body)
        except DecodeError as exc:
            if bad_record is not None:
                bad_record(record, f"body is not an OTLP MetricsData: {exc}")
            continue
        try:
            columns.add(record, metrics_data, decoder)
        except PointOutOfRangeError as exc:
            if bad_record is not None:
                bad_record(record, str(exc))
    return columns.batch(path, hour_ms), columns.points


def point_batch(path: str, hour_ms: int, records: Iterable[ArchiveRecord], bad_record: Any = None) -> pa.RecordBatch:
    """The ``POINT_SCHEMA`` rows of ``records``: ``push_batch``'s, a row per data point."""
    return points_of_pushes(push_batch(path, hour_ms, records, bad_record)[0])


def segment_push_batches(
    path: str, hour_ms: int, data: bytes, bad_record: Any = None, on_torn_tail: Any = None
) -> Iterator[pa.RecordBatch]:
    """One ``PUSH_ARROW_SCHEMA`` batch per archive batch of a whole segment's bytes (those without a
    data point left out).

    Raises ``ArchiveCorruptError`` as the archive reader does; a torn tail ends the segment and goes
    to ``on_torn_tail`` if given.
    """
    for item in iter_segment_batches(data, path):
        if isinstance(item, TornTail):
            if on_torn_tail is not None:
                on_torn_tail(item)
            return
        batch, points = push_batch(path, hour_ms, item[1], bad_record)
        if points:
            yield batch


def segment_point_batches(
    path: str, hour_ms: int, data: bytes, bad_record: Any = None, on_torn_tail: Any = None
) -> Iterator[pa.RecordBatch]:
    """``segment_push_batches``' batches as ``POINT_ARROW_SCHEMA`` rows, a row per data point."""
    for batch in segment_push_batches(path, hour_ms, data, bad_record, on_torn_tail):
        yield points_of_pushes(batch)
