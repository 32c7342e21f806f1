"""The PushTelemetry v0 fast path against the generic codec, on random frames (``_fast_codec.py``), and the
backend's columnar batch (``_backend.push_batch``) against the same columns built a push at a time.

``decode_push_telemetry`` must return exactly ``decode_request``'s result or None (the caller then uses the
generic codec), never a different request and never an exception; ``encode_push_telemetry_response`` must
write ``encode_response``'s bytes (or raise its error).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.kafka_uuid import Uuid
from quotaplane.protocol import (
    ApiKey,
    ProtocolError,
    PushTelemetryRequest,
    PushTelemetryResponse,
    decode_request,
    encode_request,
    encode_response,
)
from quotaplane.services.frontend._backend import push_batch
from quotaplane.services.frontend._fast_codec import (
    PUSH_TELEMETRY_V0,
    decode_push_telemetry,
    encode_push_telemetry_response,
)
from quotaplane.v1 import telemetry_pb2 as tele_pb

_INT32 = st.integers(-(2**31), 2**31 - 1)
_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _generic(frame: bytes):
    try:
        return decode_request(frame)
    except ProtocolError as e:
        return e


@st.composite
def push_frames(draw: st.DrawFn) -> bytes:
    """Well-formed PushTelemetry v0 frames (without the size prefix), some of them then damaged."""
    request = PushTelemetryRequest(
        Uuid(draw(st.binary(min_size=16, max_size=16))),
        draw(_INT32),
        draw(st.booleans()),
        draw(st.integers(-128, 127)),
        draw(st.binary(max_size=20_000) | st.binary(max_size=300)),
    )
    client_id = draw(st.none() | st.text(max_size=40))
    frame = bytearray(encode_request(ApiKey.PUSH_TELEMETRY, 0, draw(_INT32), request, client_id=client_id)[4:])
    damage = draw(st.sampled_from(["none", "none", "truncate", "extend", "flip", "tags"]))
    if damage == "truncate":
        del frame[draw(st.integers(0, len(frame))) :]
    elif damage == "extend":
        frame += draw(st.binary(min_size=1, max_size=8))
    elif damage == "flip":
        at = draw(st.integers(0, len(frame) - 1))
        frame[at] = draw(st.integers(0, 255))
    elif damage == "tags":  # a body tag section with one (unknown) tagged field in place of "none"
        frame[-1:] = bytes((1, 9, 2)) + b"ab"
    return bytes(frame)


@_SETTINGS
@given(push_frames())
def test_decode_is_the_generic_result_or_none(frame: bytes) -> None:
    fast = decode_push_telemetry(frame)
    if fast is not None:
        assert fast == _generic(frame)
        assert type(fast.body.metrics) is bytes and type(fast.body.client_instance_id) is Uuid


@_SETTINGS
@given(st.binary(max_size=64))
def test_decode_of_random_bytes_never_raises_and_never_differs(tail: bytes) -> None:
    frame = PUSH_TELEMETRY_V0 + tail
    fast = decode_push_telemetry(frame)
    assert fast is None or fast == _generic(frame)


def test_the_plain_pushes_clients_send_take_the_fast_path() -> None:
    request = PushTelemetryRequest(Uuid(bytes(range(16))), 12345, False, 4, b"\x28\xb5\x2f\xfd" * 100)
    for client_id in ("rdkafka", "", None, "prödúcer-1"):
        frame = encode_request(ApiKey.PUSH_TELEMETRY, 0, 7, request, client_id=client_id)[4:]
        fast = decode_push_telemetry(frame)
        assert fast is not None and fast == decode_request(frame)
    assert decode_push_telemetry(b"\x00\x12\x00\x03" + bytes(40)) is None  # ApiVersions v3: not ours


def test_frames_the_fast_path_leaves_to_the_generic_codec() -> None:
    request = PushTelemetryRequest(Uuid(bytes(16)), 1, False, 0, bytes(20_000))  # a 3-byte length
    frame = encode_request(ApiKey.PUSH_TELEMETRY, 0, 7, request, client_id="c")[4:]
    assert decode_push_telemetry(frame) is None and decode_request(frame).body.metrics == bytes(20_000)
    bad_utf8 = bytearray(encode_request(ApiKey.PUSH_TELEMETRY, 0, 7, request, client_id="ab")[4:])
    bad_utf8[10] = 0xFF  # the generic codec replaces invalid UTF-8 in a client id
    assert decode_push_telemetry(bytes(bad_utf8)) is None


@_SETTINGS
@given(_INT32, st.integers(-(2**31), 2**31 - 1), st.integers(-(2**15), 2**15 - 1))
def test_encode_is_the_generic_encoding(correlation_id: int, throttle_ms: int, error_code: int) -> None:
    body = PushTelemetryResponse(throttle_time_ms=throttle_ms, error_code=error_code)
    assert encode_push_telemetry_response(correlation_id, body) == encode_response(
        ApiKey.PUSH_TELEMETRY, 0, correlation_id, body
    )


def test_encode_of_values_out_of_range_raises_the_generic_error() -> None:
    body = PushTelemetryResponse(throttle_time_ms=0, error_code=2**15)
    with pytest.raises(ProtocolError):
        encode_response(ApiKey.PUSH_TELEMETRY, 0, 1, body)
    with pytest.raises(ProtocolError):
        encode_push_telemetry_response(1, body)


# --- the PushTelemetry batch the backend sends ----------------------------------------------------------------
_CONTEXTS = st.builds(
    tele_pb.RequestContext,
    connection_id=st.text(max_size=12),
    client_id=st.text(max_size=12),
    client_source_address=st.text(max_size=12),
    client_source_port=st.integers(0, 65535),
    principal=st.text(max_size=12),
)
_PUSH_ITEMS = st.tuples(
    st.binary(min_size=16, max_size=16),
    _INT32,
    st.booleans(),
    st.integers(-128, 127),
    st.binary(max_size=600),
    _CONTEXTS,
    st.integers(0, 2**62),
)


@_SETTINGS
@given(st.integers(0, 2**62), st.lists(_PUSH_ITEMS, max_size=20))
def test_push_batch_is_the_columns_of_its_pushes(batch_id: int, items: list) -> None:
    """Each column holds its field of every push in order, built a push at a time as the reference: the gateway
    reads push i from entry i of every column."""
    reference = tele_pb.PushTelemetryBatch(batch_id=batch_id)
    wire_items = [(*item[:5], item[5].SerializeToString(), item[6]) for item in items]
    for cid, sid, terminating, compression, metrics, context, now_ms in wire_items:
        columns = reference.columns
        columns.client_instance_id.append(cid)
        columns.subscription_id.append(sid)
        columns.terminating.append(terminating)
        columns.compression_type.append(compression)
        columns.metrics.append(metrics)
        columns.context.append(context)
        columns.now_ms.append(now_ms)
    built = push_batch(batch_id, wire_items)
    assert built == reference
    assert built.SerializeToString() == reference.SerializeToString()
    assert built.HasField("columns") == bool(items)
    assert not built.requests
