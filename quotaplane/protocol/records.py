"""Record batch headers, read without decompressing anything: the producer ids a Produce request carries.

A Produce request's ``records`` field holds whole record batches (magic v2, Kafka's ``DefaultRecordBatch``):
a 61-byte header, then the records, compressed or not. KIP-936's producer-id quota needs only the header's
producer id, so the batches are walked by their ``batchLength`` and nothing past each header is read.
Layout (offsets in the batch): baseOffset int64 @0, batchLength int32 @8 (bytes after this field),
partitionLeaderEpoch int32 @12, magic int8 @16, crc uint32 @17, attributes int16 @21, lastOffsetDelta int32 @23,
baseTimestamp int64 @27, maxTimestamp int64 @35, producerId int64 @43, producerEpoch int16 @51, baseSequence
int32 @53, records count int32 @57. Batches of an older magic carry no producer id and are skipped.

>>> header = bytearray(61); header[8:12] = (49).to_bytes(4, "big"); header[16] = 2
>>> header[43:51] = (4242).to_bytes(8, "big")
>>> producer_ids(bytes(header) + bytes(header))
[4242]
>>> producer_ids(b"") == producer_ids(None) == []
True
"""

from __future__ import annotations

import struct

from .types import ProtocolError

__all__ = ["BATCH_HEADER_BYTES", "producer_ids"]

BATCH_HEADER_BYTES = 61
_LENGTH = struct.Struct(">i")
_PRODUCER_ID = struct.Struct(">q")


def producer_ids(records: bytes | bytearray | memoryview | None) -> list[int]:
    """The distinct producer ids (>= 0: idempotent or transactional) of the batches in ``records``, in order of
    first appearance; ``ProtocolError`` when a batch runs past the end or claims a negative length."""
    if not records:
        return []
    seen: dict[int, None] = {}
    pos = 0
    end = len(records)
    while pos < end:
        if pos + 17 > end:
            raise ProtocolError(f"a record batch at {pos} ends inside its header")
        (length,) = _LENGTH.unpack_from(records, pos + 8)
        stop = pos + 12 + length
        if length < 0 or stop > end:
            raise ProtocolError(f"a record batch at {pos} claims {length} bytes, past the end of the records")
        if records[pos + 16] >= 2 and length >= BATCH_HEADER_BYTES - 12:
            (producer_id,) = _PRODUCER_ID.unpack_from(records, pos + 43)
            if producer_id >= 0:
                seen[producer_id] = None
        pos = stop
    return list(seen)
