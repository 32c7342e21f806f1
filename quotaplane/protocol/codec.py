"""Whole requests and responses: header + body, for the server side and for test clients.

Framing: on the wire every request and response is preceded by its size as an int32. The
*encoders* here return complete wire frames, size prefix included, ready for ``transport.write``;
the *decoders* take one frame without its size prefix (the connection reads the 4 bytes, then
that many, and hands those over). A server never has to slice or concatenate.

Only ``ProtocolError`` escapes ``decode_request`` on bad input; ``UnsupportedRequestError`` (a
subclass, so catch it first) says the header was readable but the API key or version is not one
this codec has a schema for. Kafka answers an ApiVersions request at an unsupported version with a
v0 ApiVersions response (error UNSUPPORTED_VERSION and its supported versions) and closes the
connection for anything else; the error carries what is needed for either.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from .messages import (
    APIS,
    REQUEST_HEADER,
    RESPONSE_HEADER,
    RequestHeader,
    ResponseHeader,
    request_header_version,
    response_header_version,
)
from .schema import MessageCodec
from .types import Buffer, ProtocolError

__all__ = [
    "DecodedRequest",
    "DecodedResponse",
    "UnsupportedRequestError",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "supported_versions",
]

_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id: the part every header version has
_SIZE = struct.Struct(">i")


class DecodedRequest(NamedTuple):
    header: Any  # RequestHeader
    api_key: int
    api_version: int
    body: Any
    #: bytes after the body, ignored as Kafka ignores them (librdkafka 2.16's Metadata v12 for all topics
    #: ends with three such bytes)
    trailing_bytes: int = 0


class DecodedResponse(NamedTuple):
    correlation_id: int
    body: Any


class UnsupportedRequestError(ProtocolError):
    """The request header was read, but there is no schema for its API key or version.

    ``header`` is the full ``RequestHeader`` when the API key is known (``known_api``: its header
    version follows from the API's flexible versions); for an unknown key only the api key,
    version and correlation id could be read and ``header.client_id`` is None.
    """

    def __init__(self, message: str, header: Any, known_api: bool) -> None:
        super().__init__(message)
        self.header = header
        self.known_api = known_api

    @property
    def api_key(self) -> int:
        return self.header.request_api_key

    @property
    def api_version(self) -> int:
        return self.header.request_api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id


#: (api key, version) -> (header codec, body codec)
_Table = dict[tuple[int, int], tuple[MessageCodec, MessageCodec]]


def _tables() -> tuple[_Table, _Table]:
    """(api key, version) -> (header codec, body codec) of requests and of responses, resolved once at import."""
    requests: _Table = {}
    responses: _Table = {}
    for key, (req, resp) in APIS.items():
        for v in req.versions:
            body = req.codec(v)
            requests[key, v] = (REQUEST_HEADER.codec(request_header_version(key, v, body.flexible)), body)
        for v in resp.versions:
            body = resp.codec(v)
            responses[key, v] = (RESPONSE_HEADER.codec(response_header_version(key, body.flexible)), body)
    return requests, responses


_REQUESTS, _RESPONSES = _tables()


def supported_versions() -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version this codec reads and writes (both directions agree)."""
    return {key: (req.valid_versions.lo, req.valid_versions.hi) for key, (req, _) in sorted(APIS.items())}


def decode_request(frame: Buffer) -> DecodedRequest:
    """Decode one request frame (without its int32 size prefix): header, then body.

    Raises ``UnsupportedRequestError`` for an API key or version without a schema, and
    ``ProtocolError`` for anything malformed (see the package docstring for an example). Bytes left
    over after the body are not an error, as in Kafka (its request parser never looks past the body): a
    real librdkafka sends some; ``trailing_bytes`` counts them.
    """
    try:
        api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
    except struct.error:
        raise ProtocolError(f"request frame of {len(frame)} bytes is shorter than a request header") from None
    codecs = _REQUESTS.get((api_key, api_version))
    if codecs is None:
        raise _unsupported(frame, api_key, api_version, correlation_id)
    header_codec, body_codec = codecs
    header, pos = header_codec.decode(frame, 0)
    body, pos = body_codec.decode(frame, pos)
    return DecodedRequest(header, api_key, api_version, body, len(frame) - pos)


def _unsupported(frame: Buffer, api_key: int, api_version: int, correlation_id: int) -> ProtocolError:
    specs = APIS.get(api_key)
    if specs is None:
        header = RequestHeader(api_key, api_version, correlation_id, None)
        return UnsupportedRequestError(f"unknown API key {api_key} (version {api_version})", header, False)
    request_spec = specs[0]
    flexible = api_version in request_spec.flexible_versions
    header, _ = REQUEST_HEADER.codec(request_header_version(api_key, api_version, flexible)).decode(frame, 0)
    return UnsupportedRequestError(
        f"{request_spec.name} version {api_version} is not supported (versions {request_spec.valid_versions})",
        header,
        True,
    )


def _codecs(table: _Table, what: str, api_key: int, api_version: int) -> tuple[MessageCodec, MessageCodec]:
    codecs = table.get((api_key, api_version))
    if codecs is None:
        raise ProtocolError(f"no {what} schema for API key {api_key} version {api_version}")
    return codecs


def _frame(
    api_key: int, header_codec: MessageCodec, header: Any, body_codec: MessageCodec, body: Any, verb: str
) -> bytes:
    """int32 size, header, body; ``body`` must be an instance of the body codec's class."""
    cls = body_codec.spec.cls
    if type(body) is not cls:
        raise TypeError(f"API key {api_key} {verb} {cls.__name__}, not {type(body).__name__}")
    out = bytearray(4)
    header_codec.encode(out, header)
    body_codec.encode(out, body)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """The wire frame of a response: int32 size, response header, body.

    ``body`` must be an instance of the API's response class (``ApiVersionsResponse``, ...).
    Fields the version does not have are not written. Raises ``ProtocolError`` if a value
    cannot be encoded at that version (a null where it is not nullable, an int out of range).
    """
    header_codec, body_codec = _codecs(_RESPONSES, "response", api_key, api_version)
    return _frame(api_key, header_codec, ResponseHeader(correlation_id), body_codec, body, "responds with")


def encode_request(
    api_key: int, api_version: int, correlation_id: int, body: Any, client_id: str | None = "quotaplane"
) -> bytes:
    """The wire frame of a request (int32 size, request header, body), as a client sends it."""
    header_codec, body_codec = _codecs(_REQUESTS, "request", api_key, api_version)
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    return _frame(api_key, header_codec, header, body_codec, body, "takes")


def decode_response(api_key: int, api_version: int, frame: Buffer) -> DecodedResponse:
    """Decode one response frame (without its size prefix) of the request the caller sent.

    Responses do not name their API: the caller knows it from the correlation id.
    """
    header_codec, body_codec = _codecs(_RESPONSES, "response", api_key, api_version)
    header, pos = header_codec.decode(frame, 0)
    body, pos = body_codec.decode(frame, pos)
    if pos != len(frame):
        raise ProtocolError(f"{body_codec.spec.name} v{api_version}: {len(frame) - pos} bytes left after the body")
    return DecodedResponse(header.correlation_id, body)
