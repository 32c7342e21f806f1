"""Reading and patching frames without decoding their bodies: what a proxy needs of what it forwards.

A proxy forwards most requests and responses untouched, so it must not pay for decoding them, nor depend on
having a schema for every API and version a broker speaks. Two facts of the protocol make that possible:

- every request header starts with api key (int16), api version (int16) and correlation id (int32), at any
  header version (:func:`peek_request`);
- most responses carry ``ThrottleTimeMs`` as the first field of their body (Kafka's KIP-219 layout), right
  after the response header, which is the correlation id plus, in flexible versions, a tagged-field buffer:
  so a request-quota throttle can be written into a forwarded response in place (:func:`set_throttle_time`).
  ``THROTTLE_FIRST`` lists those APIs, read from Kafka's message definitions: the version since which the
  field is first, and the first flexible version. Produce keeps it last and is handled with its schema.

>>> frame = bytearray(bytes.fromhex("00000007" "00" "00000000" "0000"))  # Heartbeat v4: corr id, tags, body
>>> set_throttle_time(12, 4, frame, 250), bytes(frame[5:9]).hex()
(True, '000000fa')
>>> peek_request(bytes.fromhex("000100050000002a") + b"...")
(1, 5, 42)
"""

from __future__ import annotations

import struct

from .types import ProtocolError, decode_unsigned_varint

__all__ = [
    "THROTTLE_FIRST",
    "peek_client_id",
    "peek_request",
    "produce_acks",
    "request_body_offset",
    "response_body_offset",
    "set_throttle_time",
    "skip_tagged_fields",
]

_HEAD = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")

#: api key -> (version since which ThrottleTimeMs is the body's first field, first flexible version or None).
THROTTLE_FIRST: dict[int, tuple[int, int | None]] = {
    1: (1, 12),  # Fetch
    2: (2, 6),  # ListOffsets
    3: (3, 9),  # Metadata
    8: (3, 8),  # OffsetCommit
    9: (3, 6),  # OffsetFetch
    10: (1, 3),  # FindCoordinator
    11: (2, 6),  # JoinGroup
    12: (1, 4),  # Heartbeat
    13: (1, 4),  # LeaveGroup
    14: (1, 4),  # SyncGroup
    15: (1, 5),  # DescribeGroups
    16: (1, 3),  # ListGroups
    19: (2, 5),  # CreateTopics
    20: (1, 4),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 2),  # InitProducerId
    23: (2, 4),  # OffsetForLeaderEpoch
    24: (0, 3),  # AddPartitionsToTxn
    25: (0, 3),  # AddOffsetsToTxn
    26: (0, 3),  # EndTxn
    28: (0, 3),  # TxnOffsetCommit
    29: (0, 2),  # DescribeAcls
    30: (0, 2),  # CreateAcls
    31: (0, 2),  # DeleteAcls
    32: (0, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    34: (0, 2),  # AlterReplicaLogDirs
    35: (0, 2),  # DescribeLogDirs
    37: (0, 2),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    43: (0, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 0),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    57: (0, 0),  # UpdateFeatures
    60: (0, 0),  # DescribeCluster
    61: (0, 0),  # DescribeProducers
    65: (0, 0),  # DescribeTransactions
    66: (0, 0),  # ListTransactions
    68: (0, 0),  # ConsumerGroupHeartbeat
    69: (0, 0),  # ConsumerGroupDescribe
    74: (0, 0),  # ListConfigResources (ListClientMetricsResources)
    75: (0, 0),  # DescribeTopicPartitions
}


def peek_request(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame (without its size prefix)."""
    if len(frame) < _HEAD.size:
        raise ProtocolError(f"a request of {len(frame)} bytes has no header")
    return _HEAD.unpack_from(frame, 0)


def peek_client_id(frame: bytes | bytearray | memoryview) -> str | None:
    """The client id of a request frame: an int16-length string after the first 8 bytes in every request
    header version but v0 (ControlledShutdown v0 only, which has none: None). Decoded as Java's
    ``new String(bytes, UTF_8)``, malformed bytes becoming U+FFFD.

    >>> peek_client_id(bytes.fromhex("000000090000000100037264") + b"k")
    'rdk'
    """
    api_key, api_version, _ = peek_request(frame)
    if api_key == 7 and api_version == 0:
        return None
    if len(frame) < 10:
        raise ProtocolError("the request header ends before its client id")
    (size,) = _INT16.unpack_from(frame, 8)
    if size < 0:
        return None
    if 10 + size > len(frame):
        raise ProtocolError(f"the client id claims {size} bytes, past the end of the request")
    return bytes(frame[10 : 10 + size]).decode("utf-8", "replace")


def request_body_offset(frame: bytes | bytearray | memoryview, flexible: bool) -> int:
    """Where the body of a request frame (header v1 or v2) starts: after the 8 fixed bytes, the int16-length
    client id, and, if ``flexible`` (header v2), the header's tagged fields."""
    if len(frame) < 10:
        raise ProtocolError("the request ends inside its header")
    (size,) = _INT16.unpack_from(frame, 8)
    pos = 10 + max(size, 0)
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    if pos > len(frame):
        raise ProtocolError("the request header runs past the frame")
    return pos


#: Produce's first flexible version (request header v2, compact strings).
PRODUCE_FLEXIBLE_SINCE = 9


def produce_acks(frame: bytes | bytearray | memoryview, version: int) -> int:
    """The ``acks`` of a Produce request (v3+), read past its header and transactional id without decoding
    the record batches (a proxy must know whether an answer comes before it forwards).

    >>> produce_acks(bytes.fromhex("00000007000000010000" "ffff" "0001" "00007530"), 7)  # no client id, txn null
    1
    """
    flexible = version >= PRODUCE_FLEXIBLE_SINCE
    pos = request_body_offset(frame, flexible)
    if flexible:  # compact nullable string: unsigned varint length + 1 (0: null)
        length, pos = decode_unsigned_varint(frame, pos)
        pos += max(length - 1, 0)
    else:
        if pos + 2 > len(frame):
            raise ProtocolError("the Produce request ends before its transactional id")
        (length,) = _INT16.unpack_from(frame, pos)
        pos += 2 + max(length, 0)
    if pos + 2 > len(frame):
        raise ProtocolError("the Produce request ends before its acks")
    return _INT16.unpack_from(frame, pos)[0]


def skip_tagged_fields(frame: bytes | bytearray | memoryview, pos: int) -> int:
    """The position after a tagged-field buffer at ``pos`` (a count, then per field a tag, a size and that
    many bytes); ``ProtocolError`` when it runs past the frame."""
    count, pos = decode_unsigned_varint(frame, pos)
    for _ in range(count):
        _, pos = decode_unsigned_varint(frame, pos)
        size, pos = decode_unsigned_varint(frame, pos)
        pos += size
    if pos > len(frame):
        raise ProtocolError("tagged fields run past the frame")
    return pos


def response_body_offset(frame: bytes | bytearray | memoryview, flexible: bool) -> int:
    """Where the body of a response frame starts: after the correlation id and, if flexible, the header's
    tagged fields (response header v1)."""
    if len(frame) < 4:
        raise ProtocolError("the response ends inside its header")
    return skip_tagged_fields(frame, 4) if flexible else 4


def set_throttle_time(api_key: int, api_version: int, frame: bytearray, throttle_ms: int) -> bool:
    """Write ``throttle_ms`` into a response's ThrottleTimeMs in place; False when this API / version has no
    such first field (the caller then only mutes the connection, as a broker would still do)."""
    layout = THROTTLE_FIRST.get(api_key)
    if layout is None or api_version < layout[0]:
        return False
    flexible = layout[1] is not None and api_version >= layout[1]
    pos = response_body_offset(frame, flexible)
    if pos + 4 > len(frame):
        raise ProtocolError("the response ends before its throttle time")
    _INT32.pack_into(frame, pos, min(max(throttle_ms, 0), 2**31 - 1))
    return True
