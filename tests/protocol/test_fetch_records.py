"""The proxy's frame readers: Fetch limits at every layout (header v1 / v2, with and without replica id),
the capped request, the empty responses, and producer ids from record batch headers."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from quotaplane.protocol import ProtocolError
from quotaplane.protocol.fetch import (
    FETCH_SESSION_ID_NOT_FOUND,
    cap_fetch_bytes,
    empty_fetch_response,
    fetch_limits,
    fetch_response_size,
    throttled_fetch_response,
)
from quotaplane.protocol.records import producer_ids


def fetch_request(version: int, *, max_bytes: int = 1 << 20, min_bytes: int = 1, session: tuple = (0, -1)) -> bytes:
    header = struct.pack(">hhih", 1, version, 9, 3) + b"cid"
    if version >= 12:
        header += b"\x02" + b"\x00\x01x" + b"\x05\x00"  # two tagged fields the reader must skip
    body = b"" if version >= 15 else struct.pack(">i", -1)
    body += struct.pack(">ii", 500, min_bytes)
    body += struct.pack(">i", max_bytes) if version >= 3 else b""
    body += b"\x00" if version >= 4 else b""
    body += struct.pack(">ii", *session) if version >= 7 else b""
    return header + body + b"topics..."


@pytest.mark.parametrize("version", [0, 3, 4, 7, 11, 12, 13, 15])
def test_fetch_limits_at_every_layout(version: int) -> None:
    limits = fetch_limits(fetch_request(version, max_bytes=777_000, min_bytes=5, session=(42, 3)), version)
    assert limits.min_bytes == 5
    assert limits.max_bytes == (777_000 if version >= 3 else 2**31 - 1)
    assert (limits.session_id, limits.session_epoch) == ((42, 3) if version >= 7 else (0, -1))
    assert limits.incremental == (version >= 7)
    assert limits.replica_id == -1


@pytest.mark.parametrize("version", [3, 11, 12, 15])
def test_cap_keeps_min_bytes_at_most_max_bytes(version: int) -> None:
    frame = fetch_request(version, max_bytes=1_000_000, min_bytes=600_000)
    capped = cap_fetch_bytes(frame, fetch_limits(frame, version), 50_000)
    again = fetch_limits(capped, version)
    assert (again.max_bytes, again.min_bytes) == (50_000, 50_000)
    assert capped[-9:] == frame[-9:] and len(capped) == len(frame)  # only the limits changed
    uncapped = cap_fetch_bytes(frame, fetch_limits(frame, version), 2_000_000)
    assert fetch_limits(uncapped, version).max_bytes == 1_000_000


def test_truncated_fetch_requests_are_protocol_errors() -> None:
    frame = fetch_request(11)
    for cut in (5, 12, 20, 30):
        with pytest.raises(ProtocolError):
            fetch_limits(frame[:cut], 11)


@pytest.mark.parametrize("version", [1, 4, 7, 11, 12, 15])
def test_empty_responses_and_their_size(version: int) -> None:
    session = fetch_limits(fetch_request(version, session=(42, 3)), version)
    out = throttled_fetch_response(version, 9, 1234, session)
    flexible = version >= 12
    body = out[5:] if flexible else out[4:]
    assert struct.unpack_from(">i", out, 0)[0] == 9 and struct.unpack_from(">i", body, 0)[0] == 1234
    if version >= 7:  # an incremental session is told to start over: the upstream already moved its state
        assert struct.unpack_from(">hi", body, 4) == (FETCH_SESSION_ID_NOT_FOUND, 0)
    sessionless = fetch_limits(fetch_request(version), version)
    if version >= 7:
        assert (
            struct.unpack_from(">h", throttled_fetch_response(version, 9, 1, sessionless), 9 if flexible else 8)[0] == 0
        )
    assert fetch_response_size(out, version) == len(out) - (1 if flexible else 0)
    assert empty_fetch_response(version, 9, 0, 42)[-2 if flexible else -4 :] == (
        b"\x01\x00" if flexible else b"\x00" * 4
    )


def batch(producer_id: int, *, records: int = 3, compression: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        batch_size=1 << 20,
    )
    for offset in range(records):
        builder.append(offset, timestamp=1_700_000_000_000, key=None, value=b"v" * 100, headers=[])
    return bytes(builder.build())


def test_producer_ids_of_real_batches_without_decompressing() -> None:
    records = batch(7) + batch(-1) + batch(9, compression=1) + batch(7)  # gzip: read from the header alone
    assert producer_ids(records) == [7, 9]
    with pytest.raises(ProtocolError, match="past the end"):
        producer_ids(records[:-5])
    with pytest.raises(ProtocolError, match="inside its header"):
        producer_ids(records + b"\x00" * 10)
