"""What a proxy reads and writes of Fetch without decoding it: the request's byte limits and session, the
response's size as Kafka's fetch quota counts it, and Kafka's empty throttled response.

A Fetch response carries the records a consumer asked for, megabytes of them; decoding and re-encoding it
to apply a quota would cost more than the quota saves. Kafka's fetch quota needs only:

- ``max_bytes`` of the request (v3+), capped by the most the client may fetch in one quota window
  (``ClientQuotaManager.getMaxValueInQuotaWindow``), and ``min_bytes`` kept at most that
  (``KafkaApis.handleFetchRequest``): both are fixed-width fields right after the header;
- the response's size, ``FetchResponse.sizeOf``: 4 + the body's size, i.e. the frame without its header's
  tagged fields (:func:`fetch_response_size`);
- when throttled, an empty response (``FetchContext.getThrottledResponse``): throttle time, no partitions
  (:func:`throttled_fetch_response`).

Fetch sessions (KIP-227): Kafka answers a throttled fetch without touching the session's cached partition
state. A proxy cannot: the upstream already served the request and updated its session (for example the high
watermarks it believes the client knows). So a throttled *incremental* fetch (a session id and an epoch > 0) is
answered FETCH_SESSION_ID_NOT_FOUND: the client drops its session and sends a full fetch after the throttle,
which the upstream answers in full, so no partition state is lost. A throttled full or sessionless fetch is
answered exactly as Kafka answers it (no error, session id 0).

>>> head = bytes.fromhex("0001000b0000000500027161")  # Fetch v11, correlation id 5, client id "qa"
>>> body = bytes.fromhex("ffffffff" "000001f4" "00000001" "00100000" "00" "00000000" "ffffffff")
>>> limits = fetch_limits(head + body, 11)
>>> limits.max_bytes, limits.min_bytes, limits.session_id, limits.session_epoch
(1048576, 1, 0, -1)
>>> capped = cap_fetch_bytes(head + body, limits, 4096)
>>> fetch_limits(capped, 11).max_bytes
4096
>>> throttled_fetch_response(11, 5, 250, limits).hex()
'00000005000000fa00000000000000000000'
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .frames import request_body_offset, response_body_offset
from .types import ProtocolError

__all__ = [
    "FETCH_SESSION_ID_NOT_FOUND",
    "FLEXIBLE_SINCE",
    "FetchLimits",
    "cap_fetch_bytes",
    "empty_fetch_response",
    "fetch_limits",
    "fetch_response_size",
    "throttled_fetch_response",
]

#: Fetch's first flexible version (request header v2, response header v1, compact arrays).
FLEXIBLE_SINCE = 12
FETCH_SESSION_ID_NOT_FOUND = 70
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


@dataclass(frozen=True)
class FetchLimits:
    """Where a Fetch request's byte limits are, and its session (``session_id`` 0 / epoch -1: none)."""

    min_bytes_at: int
    min_bytes: int
    max_bytes_at: int | None  # None before v3 (no max_bytes: Kafka reads it as Int.MaxValue)
    max_bytes: int
    replica_id: int
    session_id: int
    session_epoch: int

    @property
    def incremental(self) -> bool:
        return self.session_id != 0 and self.session_epoch > 0


def fetch_limits(frame: bytes | bytearray | memoryview, version: int) -> FetchLimits:
    """Read a Fetch request's replica id (v < 15), max wait, byte limits and session (v7+)."""
    pos = request_body_offset(frame, version >= FLEXIBLE_SINCE)
    replica_id = -1
    need = pos + (4 if version < 15 else 0) + 8 + (4 if version >= 3 else 0) + (1 if version >= 4 else 0)
    need += 8 if version >= 7 else 0
    if need > len(frame):
        raise ProtocolError(f"the Fetch v{version} request ends before its limits")
    if version < 15:
        (replica_id,) = _I32.unpack_from(frame, pos)
        pos += 4
    pos += 4  # max_wait_ms
    min_at = pos
    (min_bytes,) = _I32.unpack_from(frame, pos)
    pos += 4
    max_at = None
    max_bytes = 2**31 - 1
    if version >= 3:
        max_at = pos
        (max_bytes,) = _I32.unpack_from(frame, pos)
        pos += 4
    if version >= 4:
        pos += 1  # isolation_level
    session_id, epoch = 0, -1
    if version >= 7:
        session_id, epoch = struct.unpack_from(">ii", frame, pos)
    return FetchLimits(min_at, min_bytes, max_at, max_bytes, replica_id, session_id, epoch)


def cap_fetch_bytes(frame: bytes | bytearray | memoryview, limits: FetchLimits, cap: int) -> bytearray:
    """The request with ``max_bytes = min(max_bytes, cap)`` and ``min_bytes = min(min_bytes, max_bytes)``."""
    out = bytearray(frame)
    if limits.max_bytes_at is None:
        return out
    max_bytes = min(limits.max_bytes, max(cap, 0))
    _I32.pack_into(out, limits.max_bytes_at, max_bytes)
    _I32.pack_into(out, limits.min_bytes_at, min(limits.min_bytes, max_bytes))
    return out


def fetch_response_size(frame: bytes | bytearray | memoryview, version: int) -> int:
    """Kafka's ``FetchResponse.sizeOf``: 4 + the size of the body (the frame less its header's tagged fields)."""
    return 4 + len(frame) - response_body_offset(frame, version >= FLEXIBLE_SINCE)


def empty_fetch_response(version: int, correlation_id: int, throttle_ms: int, error_code: int) -> bytearray:
    """A Fetch response without partitions: ``throttle_ms`` and, from v7, a top-level ``error_code`` and session
    id 0. A frame without its size prefix."""
    flexible = version >= FLEXIBLE_SINCE
    out = bytearray(_I32.pack(correlation_id))
    if flexible:
        out += b"\x00"
    if version >= 1:
        out += _I32.pack(min(max(throttle_ms, 0), 2**31 - 1))
    if version >= 7:
        out += _I16.pack(error_code) + _I32.pack(0)
    out += b"\x01\x00" if flexible else _I32.pack(0)  # no topics (compact: length + 1), then the tags
    return out


def throttled_fetch_response(version: int, correlation_id: int, throttle_ms: int, limits: FetchLimits) -> bytearray:
    """Kafka's empty throttled Fetch response (no partitions), FETCH_SESSION_ID_NOT_FOUND for an incremental
    session (see the module docstring)."""
    error = FETCH_SESSION_ID_NOT_FOUND if limits.incremental else 0
    return empty_fetch_response(version, correlation_id, throttle_ms, error)
