"""OTLP ``MetricsData``: decoding a push, adding the broker's resource attributes, counting.

KIP-714 payloads are OTLP protobuf ``MetricsData`` (``opentelemetry.proto.metrics.v1``) once
decompressed.

**What counts as undecodable** (INVALID_RECORD, 87, which makes the client stop telemetry for good,
so the rule rejects only what cannot be a ``MetricsData``):

* bytes protobuf refuses (``DecodeError``: a bad wire type or varint, a length past the end, invalid
  UTF-8 in a string, nesting past protobuf's recursion limit);
* a message with *unknown fields at the top level*. ``MetricsData`` has had exactly one field
  (``resource_metrics = 1``) in every OTLP version, yet protobuf's parser keeps any well-formed
  field it does not know, so random bytes sometimes "parse": about 1 % of random strings of 1-64
  bytes do, every one of them as top-level unknown fields only. Anything else at the top level
  means the payload is not a ``MetricsData``.

Unknown fields *inside* ``resource_metrics`` are kept and passed on, as protobuf's forward
compatibility intends: a client built on a newer OTLP may send fields this version does not know,
and refusing them would switch its telemetry off. So garbage wrapped in a valid first field can
still be accepted, exactly as Kafka's broker (``MetricsData.parseFrom``) accepts it. An empty
payload is an empty ``MetricsData``.

>>> from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
>>> md = MetricsData()
>>> metric = md.resource_metrics.add().scope_metrics.add().metrics.add(name="org.apache.kafka.producer.io.wait.ratio")
>>> _ = metric.gauge.data_points.add(as_double=0.5)
>>> decoded = decode_metrics_data(md.SerializeToString())
>>> add_resource_attributes(decoded, {"client_id": "producer-1", "principal": None})
>>> [(kv.key, kv.value.string_value) for kv in decoded.resource_metrics[0].resource.attributes]
[('client_id', 'producer-1')]
>>> metric_count(decoded), data_point_count(decoded)
(1, 1)
>>> decode_metrics_data(b"\\x10\\x01")  # field 2, a varint: well-formed protobuf, but not a MetricsData
Traceback (most recent call last):
    ...
quotaplane.errors.InvalidRecordError: the payload is not an OTLP MetricsData: it has unknown top-level fields
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from ..errors import InvalidRecordError

__all__ = [
    "BROKER_RESOURCE_ATTRIBUTES",
    "PreparedAttributes",
    "add_resource_attributes",
    "data_point_count",
    "decode_metrics_data",
    "metric_count",
    "prepare_resource_attributes",
]

#: The resource attributes the broker adds to every push, in this order (KIP-714's labels).
BROKER_RESOURCE_ATTRIBUTES: tuple[str, ...] = (
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
    "principal",
    "node_id",
)


def decode_metrics_data(data: bytes) -> MetricsData:
    """Parse a decompressed push; ``InvalidRecordError`` if it is not a ``MetricsData`` (module docstring)."""
    metrics_data = MetricsData()
    try:
        metrics_data.ParseFromString(data)
    except DecodeError as e:
        raise InvalidRecordError(f"the payload is not an OTLP MetricsData: {e}") from None
    # UnknownFieldSet lists this message's own unknown fields, not those of nested messages.
    if len(UnknownFieldSet(metrics_data)):
        raise InvalidRecordError("the payload is not an OTLP MetricsData: it has unknown top-level fields")
    return metrics_data


#: ``prepare_resource_attributes``' result: the keys set and their ``Resource`` wire format.
PreparedAttributes = tuple[frozenset[str], bytes]


def prepare_resource_attributes(attributes: Mapping[str, str | None]) -> PreparedAttributes:
    """What ``add_resource_attributes`` merges, computed once: a client instance's attributes are the same
    on every push, so the manager keeps this per instance instead of encoding them per push."""
    ours = [(key, value) for key, value in attributes.items() if value is not None]
    for key, value in ours:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"resource attributes are strings, got {key!r}: {value!r}")
    names = tuple(key for key, _ in ours)
    keys = _KEY_SETS.get(names)
    if keys is None:  # every instance has the same few key sets: one frozenset each, shared
        if len(_KEY_SETS) >= 1024:
            _KEY_SETS.clear()
        keys = _KEY_SETS[names] = frozenset(names)
    # Appending the attributes as one serialized blob is a single C call per resource, a third of the
    # cost of eight ``add`` calls: this runs on every push.
    return keys, _attributes_blob(ours)


_KEY_SETS: dict[tuple[str, ...], frozenset[str]] = {}


def add_resource_attributes(
    metrics_data: MetricsData,
    attributes: Mapping[str, str | None],
    *,
    prepared: PreparedAttributes | None = None,
) -> None:
    """Set the broker's attributes, as string values, on the resource of every ``ResourceMetrics``.

    Ours win: an attribute the client sent under one of these keys is removed (every copy of it),
    its other attributes keep their order, and ours follow in the mapping's order. A key whose value
    is None is skipped (the client's attribute of that key, if any, stays). A ``MetricsData`` without
    ``resource_metrics`` is left as it is: there are no metrics to label, and an empty
    ``ResourceMetrics`` would only show exporters a resource with nothing in it. ``prepared``:
    ``prepare_resource_attributes(attributes)``, when the caller keeps it.
    """
    keys, blob = prepared if prepared is not None else prepare_resource_attributes(attributes)
    if not keys:
        return
    for resource_metrics in metrics_data.resource_metrics:
        resource = resource_metrics.resource
        resource_attributes = resource.attributes
        # Delete from the end, in place: no copies of the client's attributes, indexes stay valid.
        for index in range(len(resource_attributes) - 1, -1, -1):
            if resource_attributes[index].key in keys:
                del resource_attributes[index]
        resource.MergeFromString(blob)


def _length_delimited(field_tag: int, payload: bytes) -> bytes:
    n = len(payload)
    prefix = bytearray((field_tag,))
    while n >= 0x80:
        prefix.append((n & 0x7F) | 0x80)
        n >>= 7
    prefix.append(n)
    return bytes(prefix) + payload


def _key_value(key: str, value: str) -> bytes:
    """One ``Resource.attributes`` entry (field 1): ``KeyValue{key = 1, value = 2: AnyValue{string_value = 1}}``."""
    k = key.encode("utf-8")
    v = value.encode("utf-8")
    if len(k) + len(v) < 120:  # every length fits one varint byte: the common case, in one expression
        any_len = len(v) + 2
        return b"".join((bytes((0x0A, len(k) + any_len + 4, 0x0A, len(k))), k, bytes((0x12, any_len, 0x0A, len(v))), v))
    return _length_delimited(0x0A, _length_delimited(0x0A, k) + _length_delimited(0x12, _length_delimited(0x0A, v)))


def _attributes_blob(attributes: list[tuple[str, str]]) -> bytes:
    """The attributes as ``Resource`` wire format, to append with one ``MergeFromString``."""
    return b"".join([_key_value(key, value) for key, value in attributes])


def metric_count(metrics_data: MetricsData) -> int:
    """How many ``Metric`` messages the payload holds, across all resources and scopes."""
    return sum(
        len(scope_metrics.metrics)
        for resource_metrics in metrics_data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
    )


def data_point_count(metrics_data: MetricsData) -> int:
    """How many data points the payload holds: those of gauges, sums, (exponential) histograms, summaries."""
    count = 0
    for resource_metrics in metrics_data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind is not None:
                    count += len(getattr(metric, kind).data_points)
    return count
