"""PushTelemetry v0 read and answered without the generic codec: the one request every client sends all the time.

Why: a KIP-714 client pushes once per interval for as long as it lives, so with thousands of connections
PushTelemetry is nearly every frame the frontend reads. The generic codec (``quotaplane.protocol``) walks a
schema field by field in Python; the request and the answer have a fixed shape, read and written here with one
``struct`` call each (bench/frontend.py: a push's frontend CPU, ``cpu_us_per_push.frontend_loop``).

**Same result or none.** :func:`decode_push_telemetry` returns exactly what ``decode_request`` returns for the
frame (the same ``DecodedRequest``, header and body objects, equal field for field), or ``None`` whenever the
frame is not the plain case: tagged fields in the header or the body, a metrics length over two varint bytes,
a client id that is not valid UTF-8 (the generic codec replaces bad bytes), anything short or malformed. The
caller then decodes it with ``decode_request``, which answers every such case as before (including its
``ProtocolError`` for a malformed frame). :func:`encode_push_telemetry_response` is ``encode_response`` for
PushTelemetry v0, byte for byte, and falls back to it for values the fixed layout cannot carry (so the
generic codec still raises its errors). ``tests/services/frontend/test_fast_codec.py`` compares both with
the generic codec on random frames.
"""

from __future__ import annotations

import struct
from typing import Any

from quotaplane.kafka_uuid import Uuid
from quotaplane.protocol import ApiKey, PushTelemetryRequest, PushTelemetryResponse, RequestHeader, encode_response
from quotaplane.protocol.codec import DecodedRequest

__all__ = ["PUSH_TELEMETRY_V0", "decode_push_telemetry", "encode_push_telemetry_response"]

#: The first four bytes of a PushTelemetry v0 request frame: api key 72, version 0.
PUSH_TELEMETRY_V0 = struct.pack(">hh", ApiKey.PUSH_TELEMETRY, 0)

_HEAD = struct.Struct(">hhih")  # api key, api version, correlation id, client id length (-1: null)
# after the header's tags: client instance id, subscription id, terminating (any byte but 0 is true, as Java's
# readByte() != 0 and the generic codec's "?"), compression type
_FIXED = struct.Struct(">16si?b")
# the answer: size 12, correlation id, no header tags, throttle time, error code, no body tags
_ANSWER = struct.Struct(">iiBihB")
_INT32 = (-(2**31), 2**31 - 1)
_INT16 = (-(2**15), 2**15 - 1)


def decode_push_telemetry(frame: bytes) -> DecodedRequest | None:
    """``decode_request(frame)`` for a plain PushTelemetry v0 request, or None (see the module docstring)."""
    size = len(frame)
    if size < 10 or type(frame) is not bytes:
        return None
    api_key, api_version, correlation_id, client_id_length = _HEAD.unpack_from(frame)
    if api_key != ApiKey.PUSH_TELEMETRY or api_version != 0:
        return None
    pos = 10
    if client_id_length == -1:
        client_id = None
    elif client_id_length >= 0:
        end = pos + client_id_length
        if end > size:
            return None
        try:
            client_id = frame[pos:end].decode("utf-8")
        except UnicodeDecodeError:
            return None
        pos = end
    else:
        return None
    # header tags (none), 16 + 4 bytes, terminating, compression type, metrics length (1 or 2 varint bytes)
    if pos + 24 > size or frame[pos] != 0:
        return None
    raw_id, subscription_id, terminating, compression_type = _FIXED.unpack_from(frame, pos + 1)
    pos += 23
    first = frame[pos]
    if first < 0x80:
        length, pos = first, pos + 1
    else:
        if pos + 1 >= size:
            return None
        second = frame[pos + 1]
        if second >= 0x80:
            return None
        length, pos = (first & 0x7F) | (second << 7), pos + 2
    if length == 0:  # null: not allowed for Metrics, the generic codec raises its error
        return None
    end = pos + length - 1
    if end + 1 > size or frame[end] != 0:  # the metrics, then the body's tags (none)
        return None
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    body = PushTelemetryRequest(Uuid(raw_id), subscription_id, terminating, compression_type, frame[pos:end])
    return DecodedRequest(header, api_key, api_version, body, size - end - 1)


def encode_push_telemetry_response(correlation_id: int, body: Any) -> bytes:
    """``encode_response(PUSH_TELEMETRY, 0, correlation_id, body)``, byte for byte."""
    throttle, error = body.throttle_time_ms, body.error_code
    if (
        type(body) is PushTelemetryResponse
        and type(throttle) is int
        and type(error) is int
        and _INT32[0] <= throttle <= _INT32[1]
        and _INT16[0] <= error <= _INT16[1]
        and type(correlation_id) is int
        and _INT32[0] <= correlation_id <= _INT32[1]
    ):
        return _ANSWER.pack(12, correlation_id, 0, throttle, error, 0)
    return encode_response(ApiKey.PUSH_TELEMETRY, 0, correlation_id, body)
