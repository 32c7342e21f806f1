"""OTLP decoding, the broker's resource attributes and the metric counts, on librdkafka-like payloads."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, Metric, MetricsData

from quotaplane.errors import Errors, InvalidRecordError
from quotaplane.telemetry import _otlp
from quotaplane.telemetry._codecs import CompressionType, compress, decompress
from quotaplane.telemetry._otlp import (
    BROKER_RESOURCE_ATTRIBUTES,
    add_resource_attributes,
    data_point_count,
    decode_metrics_data,
    metric_count,
    prepare_resource_attributes,
)

T_NANOS = 1_700_000_000_000 * 1_000_000  # a realistic clock, in OTLP's nanoseconds
INTERVAL_NANOS = 30_000 * 1_000_000

# librdkafka's producer metrics (rdkafka_telemetry_encode.h): (name, kind, per broker)
PRODUCER_METRICS = (
    ("org.apache.kafka.producer.connection.creation.rate", "gauge", False),
    ("org.apache.kafka.producer.connection.creation.total", "sum", False),
    ("org.apache.kafka.producer.node.request.latency.avg", "gauge", True),
    ("org.apache.kafka.producer.node.request.latency.max", "gauge", True),
    ("org.apache.kafka.producer.produce.throttle.time.avg", "gauge", False),
    ("org.apache.kafka.producer.produce.throttle.time.max", "gauge", False),
    ("org.apache.kafka.producer.record.queue.time.avg", "gauge", False),
    ("org.apache.kafka.producer.record.queue.time.max", "gauge", False),
    ("org.apache.kafka.producer.request.latency.avg", "gauge", False),
    ("org.apache.kafka.producer.request.latency.max", "gauge", False),
)


def producer_metrics_data(broker_ids: tuple[int, ...] = (1, 2, 3)) -> MetricsData:
    """What a librdkafka producer pushes: one resource, one scope, 10 metrics, per-broker ones by node.id."""
    metrics_data = MetricsData()
    resource_metrics = metrics_data.resource_metrics.add()
    scope_metrics = resource_metrics.scope_metrics.add(scope=InstrumentationScope(name="librdkafka", version="2.16.0"))
    for index, (name, kind, per_broker) in enumerate(PRODUCER_METRICS):
        metric = scope_metrics.metrics.add(name=name, unit="ms" if "time" in name or "latency" in name else "1")
        if kind == "sum":
            metric.sum.aggregation_temporality = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
            metric.sum.is_monotonic = True
            points = metric.sum.data_points
        else:
            points = metric.gauge.data_points
        for broker_id in broker_ids if per_broker else (None,):
            point = points.add(start_time_unix_nano=T_NANOS - INTERVAL_NANOS, time_unix_nano=T_NANOS)
            if name.endswith((".max", ".total")):
                point.as_int = 10 * index + (broker_id or 0)
            else:
                point.as_double = index + 0.25
            if broker_id is not None:
                point.attributes.add(key="node.id", value=AnyValue(int_value=broker_id))
    return metrics_data


def attributes_of(resource_metrics) -> list[tuple[str, str]]:
    """The resource attributes as (key, value) pairs, the value rendered by its kind."""
    out = []
    for kv in resource_metrics.resource.attributes:
        kind = kv.value.WhichOneof("value")
        out.append((kv.key, getattr(kv.value, kind) if kind else None))
    return out


def test_module_doctests_pass():
    result = doctest.testmod(_otlp)
    assert result.attempted >= 8 and result.failed == 0


# --- decoding -------------------------------------------------------------------------------------------
def test_a_producer_payload_decodes_to_the_same_message():
    original = producer_metrics_data()
    decoded = decode_metrics_data(original.SerializeToString())
    assert decoded == original
    assert [m.name for m in decoded.resource_metrics[0].scope_metrics[0].metrics] == [n for n, _, _ in PRODUCER_METRICS]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.kafka_name)
def test_a_producer_payload_round_trips_through_every_codec(codec):
    original = producer_metrics_data()
    raw = original.SerializeToString()
    payload = compress(codec, raw)
    decoded = decode_metrics_data(decompress(codec, payload, len(raw)))
    assert decoded == original
    assert decoded.SerializeToString() == raw


def test_an_empty_payload_is_an_empty_metrics_data():
    decoded = decode_metrics_data(b"")
    assert decoded == MetricsData()
    assert metric_count(decoded) == data_point_count(decoded) == 0


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xff\xff\xff", id="bad-tag-varint"),
        pytest.param(b"\x0a\x05abc", id="length-past-the-end"),
        pytest.param(b"\x0f", id="wire-type-7"),
        pytest.param(b"\x0c", id="unmatched-end-group"),
        pytest.param(b"\x0a\x04\x12\x02\x12\x05", id="nested-length-past-its-parent"),
    ],
)
def test_bytes_protobuf_refuses_are_invalid_record(data):
    with pytest.raises(InvalidRecordError, match="not an OTLP MetricsData") as info:
        decode_metrics_data(data)
    assert info.value.error is Errors.INVALID_RECORD


def test_a_truncated_payload_is_invalid_record_at_every_cut_inside_a_field():
    raw = producer_metrics_data().SerializeToString()
    # The payload is one top-level field, so every strict prefix but the empty one ends inside it.
    for cut in range(1, len(raw)):
        with pytest.raises(InvalidRecordError):
            decode_metrics_data(raw[:cut])


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _metrics_data_with_metric_name(name: bytes) -> bytes:
    metric = _field(1, name)  # Metric.name
    scope_metrics = _field(2, metric)  # ScopeMetrics.metrics
    resource_metrics = _field(2, scope_metrics)  # ResourceMetrics.scope_metrics
    return _field(1, resource_metrics)  # MetricsData.resource_metrics


def test_invalid_utf8_in_a_string_is_invalid_record():
    assert (
        decode_metrics_data(_metrics_data_with_metric_name(b"ok")).resource_metrics[0].scope_metrics[0].metrics[0].name
        == "ok"
    )
    with pytest.raises(InvalidRecordError, match="UTF-8"):
        decode_metrics_data(_metrics_data_with_metric_name(b"\xff\xfe"))


def test_nesting_past_protobufs_recursion_limit_is_invalid_record_not_a_crash():
    value = _field(1, b"x")  # AnyValue.string_value
    for _ in range(5_000):
        value = _field(5, _field(1, value))  # AnyValue.array_value.values[0]
    resource = _field(1, _field(1, b"k") + _field(2, value))  # Resource.attributes[0] = KeyValue(k, value)
    with pytest.raises(InvalidRecordError):
        decode_metrics_data(_field(1, _field(1, resource)))


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\x10\x01", id="field-2-varint"),
        pytest.param(b"\x08\x01", id="field-1-with-the-wrong-wire-type"),
        pytest.param(b"\x1a\x03abc", id="field-3-bytes"),
        pytest.param(b"\x0d\x00\x00\x00\x00", id="field-1-fixed32"),
        pytest.param(b"hi", id="text"),  # "h" is field 13, a varint; "i" its value
    ],
)
def test_unknown_top_level_fields_are_invalid_record(data):
    # protobuf itself accepts these (as unknown fields): the check is ours.
    MetricsData().ParseFromString(data)
    with pytest.raises(InvalidRecordError, match="unknown top-level fields"):
        decode_metrics_data(data)


def test_a_valid_payload_with_an_unknown_top_level_field_appended_is_invalid_record():
    raw = producer_metrics_data().SerializeToString()
    with pytest.raises(InvalidRecordError, match="unknown top-level fields"):
        decode_metrics_data(raw + b"\x10\x01")


def test_unknown_fields_inside_resource_metrics_are_kept_for_forward_compatibility():
    # A newer OTLP may add fields to Metric; such a client must not be told INVALID_RECORD.
    metric = _field(1, b"org.apache.kafka.producer.future") + _field(99, b"new field")
    raw = _field(1, _field(2, _field(2, metric)))
    decoded = decode_metrics_data(raw)
    assert decoded.resource_metrics[0].scope_metrics[0].metrics[0].name == "org.apache.kafka.producer.future"
    assert decoded.SerializeToString() == raw  # passed on intact to exporters


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_are_invalid_record(data):
    try:
        decoded = decode_metrics_data(data)
    except InvalidRecordError:
        return
    assert isinstance(decoded, MetricsData)


_PRODUCER_RAW = producer_metrics_data().SerializeToString()


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(_PRODUCER_RAW) - 1), st.integers(0, 255), st.binary(max_size=8))
def test_a_mutated_producer_payload_decodes_or_is_invalid_record(position, byte, tail):
    data = _PRODUCER_RAW[:position] + bytes([byte]) + _PRODUCER_RAW[position + 1 :] + tail
    try:
        decoded = decode_metrics_data(data)
    except InvalidRecordError:
        return
    assert isinstance(decoded, MetricsData)


# --- the broker's resource attributes -------------------------------------------------------------------
BROKER_ATTRIBUTES = {
    "client_instance_id": "vZ4lwmOdQ0yH6Vs0zTe0tQ",
    "client_id": "producer-1",
    "client_software_name": "librdkafka",
    "client_software_version": "2.16.0",
    "client_source_address": "10.0.0.7",
    "client_source_port": "56078",
    "principal": "User:alice",
    "node_id": "1",
}


def test_broker_resource_attributes_are_kip_714s_labels_in_order():
    assert BROKER_RESOURCE_ATTRIBUTES == (
        "client_instance_id",
        "client_id",
        "client_software_name",
        "client_software_version",
        "client_source_address",
        "client_source_port",
        "principal",
        "node_id",
    )
    assert tuple(BROKER_ATTRIBUTES) == BROKER_RESOURCE_ATTRIBUTES


def test_attributes_are_added_as_strings_to_a_resource_the_client_left_empty():
    metrics_data = producer_metrics_data()
    assert not metrics_data.resource_metrics[0].HasField("resource")
    add_resource_attributes(metrics_data, BROKER_ATTRIBUTES)
    resource = metrics_data.resource_metrics[0].resource
    assert [(kv.key, kv.value.string_value) for kv in resource.attributes] == list(BROKER_ATTRIBUTES.items())
    assert all(kv.value.WhichOneof("value") == "string_value" for kv in resource.attributes)


def test_ours_override_the_clients_same_keys_and_keep_its_others_in_order():
    metrics_data = producer_metrics_data()
    client = metrics_data.resource_metrics[0].resource.attributes
    client.add(key="service.name", value=AnyValue(string_value="orders"))
    client.add(key="client_id", value=AnyValue(string_value="spoofed"))
    client.add(key="host.name", value=AnyValue(string_value="h1"))
    client.add(key="principal", value=AnyValue(int_value=7))  # a clash of another value type
    client.add(key="client_id", value=AnyValue(string_value="spoofed again"))  # every copy goes
    client.add(key="process.pid", value=AnyValue(int_value=42))
    add_resource_attributes(metrics_data, {"client_id": "producer-1", "principal": "User:alice", "node_id": "1"})
    assert attributes_of(metrics_data.resource_metrics[0]) == [
        ("service.name", "orders"),
        ("host.name", "h1"),
        ("process.pid", 42),
        ("client_id", "producer-1"),
        ("principal", "User:alice"),
        ("node_id", "1"),
    ]


def test_a_none_value_is_skipped_and_the_clients_attribute_of_that_key_stays():
    metrics_data = producer_metrics_data()
    client = metrics_data.resource_metrics[0].resource.attributes
    client.add(key="client_software_name", value=AnyValue(string_value="my-wrapper"))
    add_resource_attributes(metrics_data, {"client_id": "producer-1", "client_software_name": None})
    assert attributes_of(metrics_data.resource_metrics[0]) == [
        ("client_software_name", "my-wrapper"),
        ("client_id", "producer-1"),
    ]


def test_every_resource_metrics_gets_the_attributes():
    metrics_data = producer_metrics_data()
    second = metrics_data.resource_metrics.add()
    second.resource.attributes.add(key="node_id", value=AnyValue(string_value="99"))
    second.scope_metrics.add().metrics.add(name="org.apache.kafka.producer.other")
    metrics_data.resource_metrics.add()  # a third one with nothing at all
    add_resource_attributes(metrics_data, BROKER_ATTRIBUTES)
    for resource_metrics in metrics_data.resource_metrics:
        assert attributes_of(resource_metrics) == list(BROKER_ATTRIBUTES.items())


def test_the_metrics_themselves_are_untouched():
    metrics_data = producer_metrics_data()
    before = [rm.scope_metrics for rm in producer_metrics_data().resource_metrics]
    add_resource_attributes(metrics_data, BROKER_ATTRIBUTES)
    assert [rm.scope_metrics for rm in metrics_data.resource_metrics] == before


def test_adding_twice_gives_the_same_message():
    once = producer_metrics_data()
    add_resource_attributes(once, BROKER_ATTRIBUTES)
    twice = MetricsData()
    twice.CopyFrom(once)
    add_resource_attributes(twice, BROKER_ATTRIBUTES)
    assert twice == once


def test_a_metrics_data_without_resource_metrics_is_left_as_it_is():
    metrics_data = MetricsData()
    add_resource_attributes(metrics_data, BROKER_ATTRIBUTES)
    assert metrics_data == MetricsData()
    assert metrics_data.SerializeToString() == b""


def test_the_labelled_payload_survives_serialization():
    metrics_data = producer_metrics_data()
    add_resource_attributes(metrics_data, BROKER_ATTRIBUTES)
    decoded = decode_metrics_data(metrics_data.SerializeToString())
    assert attributes_of(decoded.resource_metrics[0]) == list(BROKER_ATTRIBUTES.items())
    assert decoded == metrics_data


# --- counts ---------------------------------------------------------------------------------------------
def test_counts_of_a_producer_payload():
    metrics_data = producer_metrics_data(broker_ids=(1, 2, 3))
    assert metric_count(metrics_data) == 10
    assert data_point_count(metrics_data) == 8 + 2 * 3  # the two node.* metrics have a point per broker


def test_counts_cover_every_data_kind_resource_and_scope():
    metrics_data = producer_metrics_data(broker_ids=(1,))  # 10 metrics, 10 points
    resource_metrics = metrics_data.resource_metrics.add()
    scope_a = resource_metrics.scope_metrics.add()
    scope_b = resource_metrics.scope_metrics.add()
    histogram = scope_a.metrics.add(name="h")
    histogram.histogram.data_points.add(count=3)
    histogram.histogram.data_points.add(count=4)
    scope_a.metrics.add(name="e").exponential_histogram.data_points.add(count=1)
    summary = scope_b.metrics.add(name="s")
    for _ in range(3):
        summary.summary.data_points.add(count=1)
    scope_b.metrics.add(name="sum").sum.data_points.add(as_int=1)
    scope_b.metrics.add(name="no-data")  # a Metric with no data set
    scope_b.metrics.add(name="empty-gauge").gauge.SetInParent()
    assert metric_count(metrics_data) == 10 + 6
    assert data_point_count(metrics_data) == 10 + 2 + 1 + 3 + 1 + 0 + 0
    assert metric_count(MetricsData()) == data_point_count(MetricsData()) == 0


def test_counts_follow_the_metric_oneof():
    metric = Metric(name="m")
    metric.gauge.data_points.add(as_double=1.0)
    metric.sum.data_points.add(as_int=1)  # setting sum clears gauge: one kind per metric
    metric.sum.data_points.add(as_int=2)
    metrics_data = MetricsData()
    metrics_data.resource_metrics.add().scope_metrics.add().metrics.append(metric)
    assert data_point_count(metrics_data) == 2


def test_attribute_values_must_be_strings():
    with pytest.raises(TypeError):
        add_resource_attributes(producer_metrics_data(), {"node_id": 1})  # type: ignore[dict-item]


def test_keyvalue_is_the_otlp_type_we_attach():
    # The attributes are ordinary OTLP KeyValues an exporter can copy.
    metrics_data = producer_metrics_data()
    add_resource_attributes(metrics_data, {"client_id": "producer-1"})
    attribute = metrics_data.resource_metrics[0].resource.attributes[0]
    assert attribute == KeyValue(key="client_id", value=AnyValue(string_value="producer-1"))


# --- the per-instance fast path: attributes prepared once, merged on every push --------------------------------
_ATTRIBUTE_KEYS = st.sampled_from([*BROKER_RESOURCE_ATTRIBUTES, "client_rack", "host.name"])
_ATTRIBUTE_VALUES = st.one_of(st.none(), st.text(max_size=150))


@given(
    ours=st.dictionaries(_ATTRIBUTE_KEYS, _ATTRIBUTE_VALUES, max_size=10),
    clients=st.lists(st.lists(st.tuples(_ATTRIBUTE_KEYS, st.text(max_size=20)), max_size=6), max_size=3),
)
@settings(max_examples=200, deadline=None)
def test_prepared_attributes_merge_exactly_as_the_reference(ours: dict, clients: list) -> None:
    """The manager prepares an instance's attributes once (``prepare_resource_attributes``) and merges them on
    every push: byte for byte what merging the mapping itself gives, on random resources and attributes."""
    data = MetricsData()
    for attributes in clients:
        resource = data.resource_metrics.add().resource
        for key, value in attributes:
            resource.attributes.append(KeyValue(key=key, value=AnyValue(string_value=value)))
    reference, fast = MetricsData(), MetricsData()
    reference.CopyFrom(data)
    fast.CopyFrom(data)
    labels = [(key, value) for key, value in ours.items() if value is not None]
    for resource_metrics in reference.resource_metrics:  # the rule spelled out with protobuf's own API
        kept = [kv for kv in resource_metrics.resource.attributes if kv.key not in dict(labels)] if labels else None
        if kept is not None:
            del resource_metrics.resource.attributes[:]
            resource_metrics.resource.attributes.extend(kept)
            for key, value in labels:
                resource_metrics.resource.attributes.append(KeyValue(key=key, value=AnyValue(string_value=value)))
    prepared = prepare_resource_attributes(ours)
    add_resource_attributes(fast, ours, prepared=prepared)
    add_resource_attributes(data, ours, prepared=prepare_resource_attributes(dict(ours)))  # a shared key set
    assert fast.SerializeToString() == reference.SerializeToString() == data.SerializeToString()
