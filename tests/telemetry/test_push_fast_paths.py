"""The push path's faster forms against the plain ones they replace, on random inputs.

- The manager's payload merges the broker's labels into ``metrics_data`` on first read (``deferred``): what an
  exporter reads must be the eager merge of the decoded push, byte for byte, however many threads read it.
- ``decompress`` finds its decoder by plain id: it must answer (or refuse) every id as the ``CompressionType``
  lookup it replaced.
- The gateway's ``push_items`` keeps checked contexts and routing keys: its items, keys and refusals must be
  those of the field-by-field reading it replaced (``_reference_push_items`` below, the former code), for a
  batch of requests and for the same pushes as columns (the frontend's form).
"""

from __future__ import annotations

import functools
import pickle
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from quotaplane.kafka_uuid import ZERO_UUID, Uuid
from quotaplane.services.gateway._checks import GatewayConfig, InvalidArgument, item_time
from quotaplane.services.gateway._telemetry_service import (
    _INT8_MAX,
    _INT8_MIN,
    _REQUESTS,
    _ZERO_KEY,
    _context,
    _ContextCache,
    _instance_id,
    push_items,
)
from quotaplane.telemetry import (
    ClientMetricsManager,
    ClientMetricsManagerConfig,
    ClientTelemetryPayload,
    CompressionType,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
    RequestContext,
    add_resource_attributes,
    compress,
    decode_metrics_data,
    decompress,
)
from quotaplane.telemetry._codecs import _DECOMPRESSORS, is_supported_compression_type
from quotaplane.v1 import telemetry_pb2 as pb

_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_KEYS = ["client_id", "principal", "node_id", "host.name", "client_instance_id", "service.name"]


class _Recording:
    def __init__(self) -> None:
        self.payloads: list[ClientTelemetryPayload] = []

    def export_metrics(self, context: Any, payload: ClientTelemetryPayload) -> None:
        self.payloads.append(payload)

    def close(self) -> None:
        pass


@st.composite
def metrics_datas(draw: st.DrawFn) -> metrics_pb2.MetricsData:
    """Pushes with 0-3 resources, each with client attributes, some under the broker's own keys."""
    data = metrics_pb2.MetricsData()
    for _ in range(draw(st.integers(0, 3))):
        resource_metrics = data.resource_metrics.add()
        for key in draw(st.lists(st.sampled_from(_KEYS), max_size=5)):
            resource_metrics.resource.attributes.append(
                KeyValue(key=key, value=AnyValue(string_value=draw(st.text(max_size=8))))
            )
        metric = resource_metrics.scope_metrics.add().metrics.add(name=draw(st.text(min_size=1, max_size=20)))
        metric.gauge.data_points.add(as_double=draw(st.floats(allow_nan=False)))
    return data


@_SETTINGS
@given(metrics_datas(), st.integers(1, 4), st.sampled_from([None, "rdkafka"]), st.sampled_from([None, 9092]))
def test_metrics_data_read_by_exporters_is_the_eager_merge(
    data: metrics_pb2.MetricsData, readers: int, software: str | None, port: int | None
) -> None:
    exporter = _Recording()
    manager = ClientMetricsManager(ClientMetricsManagerConfig(node_id=3), [exporter], now_ms=1000)
    manager.update_subscription("all", {"metrics": "*", "interval.ms": "100"})
    context = RequestContext(
        "conn-1", "producer-1", software, None if software is None else "2.6", "10.0.0.1", port, "User:alice"
    )
    got = manager.process_get_telemetry_subscriptions_request(GetTelemetrySubscriptionsRequest(), context, 1000)
    raw = data.SerializeToString()
    for at in (1100, 1200):  # the second push reuses the instance's prepared labels
        pushed = manager.process_push_telemetry_request(
            PushTelemetryRequest(
                got.client_instance_id, got.subscription_id, False, int(CompressionType.ZSTD), compress(4, raw)
            ),
            context,
            at,
        )
        assert pushed.error_code == 0
    for payload in exporter.payloads:
        assert payload.data == raw
        expected = decode_metrics_data(raw)
        add_resource_attributes(expected, dict(payload.resource_attributes))
        seen: list[bytes] = []
        threads = [
            threading.Thread(target=lambda p=payload, out=seen: out.append(p.metrics_data.SerializeToString()))
            for _ in range(readers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert seen == [expected.SerializeToString()] * readers
        assert payload.metrics_data == expected


def test_a_deferred_payload_is_a_payload_and_copies_merged() -> None:
    exporter = _Recording()
    manager = ClientMetricsManager(ClientMetricsManagerConfig(node_id=3), [exporter], now_ms=1000)
    manager.update_subscription("all", {"metrics": "*", "interval.ms": "100"})
    context = RequestContext("conn-1", "producer-1")
    got = manager.process_get_telemetry_subscriptions_request(GetTelemetrySubscriptionsRequest(), context, 1000)
    data = metrics_pb2.MetricsData()
    data.resource_metrics.add().scope_metrics.add().metrics.add(name="m").gauge.data_points.add(as_int=1)
    raw = data.SerializeToString()
    request = PushTelemetryRequest(got.client_instance_id, got.subscription_id, False, 0, raw)
    assert manager.process_push_telemetry_request(request, context, 1100).error_code == 0
    (payload,) = exporter.payloads
    assert isinstance(payload, ClientTelemetryPayload)
    copied = pickle.loads(pickle.dumps(payload))
    assert type(copied) is ClientTelemetryPayload
    assert copied.metrics_data == payload.metrics_data and copied.data == raw
    with pytest.raises(AttributeError):
        payload.data = b"x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        payload.metrics_data = data  # type: ignore[misc]


# --- the gateway's push items ---------------------------------------------------------------------------------
def _reference_push_items(gateway: Any, batch: pb.PushTelemetryBatch, now_ms: int) -> tuple[list[tuple], list[str]]:
    """The former ``push_items``: every field of every request read and checked."""
    gateway.config.check_size(len(batch.requests), _REQUESTS)
    items: list[tuple] = []
    keys: list[str] = []
    for index, request in enumerate(batch.requests):
        uuid = _instance_id(_REQUESTS, index, request.client_instance_id)
        if not _INT8_MIN <= request.compression_type <= _INT8_MAX:
            raise InvalidArgument(
                f"{_REQUESTS}[{index}]: compression_type {request.compression_type} is not a Kafka int8 value"
            )
        context = _context(gateway.config, index, request.context)
        t = item_time(index, request, now_ms, _REQUESTS)
        items.append(
            (
                "push",
                bytes(uuid),
                request.subscription_id,
                request.terminating,
                request.compression_type,
                request.metrics,
                context,
                t,
            )
        )
        keys.append(_ZERO_KEY if uuid == ZERO_UUID else str(uuid))
    return items, keys


_NAMES = st.sampled_from(["", "c-1", "producer", "x\x00y", "é" * 3, "n" * 20])
_IDS = st.sampled_from([b"", bytes(16), bytes(range(16)), b"\x01" * 16, b"short"]) | st.binary(min_size=16, max_size=16)


@st.composite
def contexts(draw: st.DrawFn) -> pb.RequestContext:
    ctx = pb.RequestContext(connection_id=draw(_NAMES), client_id=draw(_NAMES), principal=draw(_NAMES))
    if draw(st.booleans()):
        ctx.client_software_name = draw(_NAMES)
        ctx.client_software_version = draw(_NAMES)
    if draw(st.booleans()):
        ctx.client_source_address = draw(_NAMES)
    if draw(st.booleans()):
        ctx.client_source_port = draw(st.sampled_from([0, 9092, 65535, 65536, 2**31 - 1]))
    return ctx


@st.composite
def push_batches(draw: st.DrawFn) -> pb.PushTelemetryBatch:
    shared = draw(st.lists(contexts(), min_size=1, max_size=4))  # connections push many times
    batch = pb.PushTelemetryBatch(batch_id=1)
    for _ in range(draw(st.integers(0, 12))):
        request = batch.requests.add(
            client_instance_id=draw(_IDS),
            subscription_id=draw(st.integers(-(2**31), 2**31 - 1)),
            terminating=draw(st.booleans()),
            compression_type=draw(st.sampled_from([0, 4, 127, -128, 128, -129])),
            metrics=draw(st.binary(max_size=8)),
        )
        request.context.CopyFrom(draw(st.sampled_from(shared)))
        if draw(st.booleans()):
            request.now_ms = draw(st.sampled_from([0, 5, -1, 2**40]))
    return batch


def _outcome(read: Any, gateway: Any, batch: pb.PushTelemetryBatch) -> Any:
    try:
        return read(gateway, batch, 77)
    except InvalidArgument as e:
        return ("refused", str(e))


@_SETTINGS
@given(st.lists(push_batches(), min_size=1, max_size=4), st.sampled_from([8, 1024]))
def test_push_items_are_the_field_by_field_reading(batches: list[pb.PushTelemetryBatch], max_name: int) -> None:
    gateway = SimpleNamespace(config=GatewayConfig(max_name_length=max_name))
    cached = functools.partial(push_items, cache=_ContextCache())  # one cache, as the servicer keeps
    for batch in batches:  # in turn, so later batches meet what earlier ones left in the cache
        assert _outcome(cached, gateway, batch) == _outcome(_reference_push_items, gateway, batch)


def _as_columns(batch: pb.PushTelemetryBatch, now_ms: int) -> pb.PushTelemetryBatch:
    """The same pushes as ``PushTelemetryColumns`` (the frontend's form): each context serialized, and every
    push's time when any request set one (an unset one is the gateway's clock, as the requests form reads it)."""
    columnar = pb.PushTelemetryBatch(batch_id=batch.batch_id)
    columns = columnar.columns
    columns.SetInParent()  # a batch of no pushes still says which form it is
    for request in batch.requests:
        columns.client_instance_id.append(request.client_instance_id)
        columns.subscription_id.append(request.subscription_id)
        columns.terminating.append(request.terminating)
        columns.compression_type.append(request.compression_type)
        columns.metrics.append(request.metrics)
        columns.context.append(request.context.SerializeToString())
    if any(request.HasField("now_ms") for request in batch.requests):
        columns.now_ms.extend(r.now_ms if r.HasField("now_ms") else now_ms for r in batch.requests)
    return columnar


@_SETTINGS
@given(st.lists(push_batches(), min_size=1, max_size=4), st.sampled_from([8, 1024]))
def test_push_columns_are_the_requests_read_field_by_field(batches: list[pb.PushTelemetryBatch], max_name: int) -> None:
    """The frontend's columnar batch gives the shards the items and keys of the same pushes sent as requests,
    and refuses what they refuse with the same message, naming ``columns[i]`` for ``requests[i]``."""
    gateway = SimpleNamespace(config=GatewayConfig(max_name_length=max_name))
    cached = functools.partial(push_items, cache=_ContextCache())
    for batch in batches:
        expected = _outcome(_reference_push_items, gateway, batch)
        if expected[0] == "refused":
            expected = ("refused", expected[1].replace("requests", "columns"))
        assert _outcome(cached, gateway, _as_columns(batch, 77)) == expected


def _columnar(count: int = 2) -> pb.PushTelemetryBatch:
    batch = pb.PushTelemetryBatch(batch_id=3)
    context = pb.RequestContext(connection_id="c-1", principal="User:alice").SerializeToString()
    for i in range(count):
        batch.columns.client_instance_id.append(bytes([i + 1]) * 16)
        batch.columns.subscription_id.append(7)
        batch.columns.terminating.append(False)
        batch.columns.compression_type.append(0)
        batch.columns.metrics.append(b"")
        batch.columns.context.append(context)
    return batch


def test_push_columns_refuse_a_malformed_batch_whole() -> None:
    gateway = SimpleNamespace(config=GatewayConfig())
    items, keys = push_items(gateway, _columnar(), 77)
    assert [item[-1] for item in items] == [77, 77]  # no now_ms column: the gateway's clock
    assert [item[6][0] for item in items] == ["c-1", "c-1"]
    assert keys == [str(Uuid(bytes([i + 1]) * 16)) for i in range(2)]

    both = _columnar()
    both.requests.add(client_instance_id=bytes(16))
    uneven = _columnar()
    uneven.columns.metrics.append(b"x")
    times = _columnar()
    times.columns.now_ms.append(5)  # one time for two pushes
    garbage = _columnar()
    garbage.columns.context[1] = b"\xff\xff\xff"
    for batch, message in (
        (both, "set either requests or columns, not both"),
        (
            uneven,
            "columns of unequal length: 2 client_instance_id, then subscription_id, terminating, "
            "compression_type, metrics, context: 2, 2, 2, 3, 2",
        ),
        (times, "now_ms has 1 entries for 2 pushes: one per push, or none"),
        (garbage, "columns[1]: context is not a serialized RequestContext"),
    ):
        with pytest.raises(InvalidArgument) as refused:
            push_items(gateway, batch, 77)
        assert str(refused.value).startswith(message)


# --- decompress's dispatch by plain id ------------------------------------------------------------------------
def _reference_decompress(compression_type: Any, data: bytes, limit: int) -> Any:
    """The former dispatch: the CompressionType member first (unknown ids raise), then its decoder."""
    codec = CompressionType.for_id(compression_type)
    if limit < 0:
        raise ValueError(f"max_decompressed_bytes must be >= 0, got {limit}")
    return _DECOMPRESSORS[codec](bytes(data), limit)


def _decompressed(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:
        return (type(e), str(e))


@_SETTINGS
@given(
    st.integers(-130, 130) | st.sampled_from([True, False, 4.0, 3.5, "4", None]),
    st.binary(max_size=64),
    st.integers(-1, 300),
    st.booleans(),
)
def test_decompress_dispatch_is_the_compression_type_lookup(
    compression_type: Any, raw: bytes, limit: int, valid: bool
) -> None:
    data = raw
    if valid and type(compression_type) is int and is_supported_compression_type(compression_type):
        data = compress(compression_type, raw)
    assert _decompressed(decompress, compression_type, data, limit) == _decompressed(
        _reference_decompress, compression_type, data, limit
    )
