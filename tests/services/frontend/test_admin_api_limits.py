"""The Kafka listener's admin APIs accept only names a Kafka client can receive back, against a running cluster.

On the wire a Kafka STRING is at most 32,767 bytes: a longer one is a request Kafka's generated reader
refuses ("string field ... had invalid length"), and the broker closes the connection, as the frontend
does. What the wire can carry can still come out longer once decoded: malformed UTF-8 decodes as Java
decodes it, each bad byte a 3-byte U+FFFD, so that entry is refused (INVALID_REQUEST) and the request's
other entries apply, as Kafka answers each entry on its own. Control characters are accepted, as Kafka
accepts them, and come back unchanged; the CLI prints them escaped, one line per entity.
"""

from __future__ import annotations

import struct

from quotaplane.config import MAX_STRING_BYTES
from quotaplane.protocol import AlterClientQuotasRequest, DescribeClientQuotasRequest, decode_response, encode_request
from quotaplane.v1 import admin_pb2 as admin_pb

from .conftest import Running, WireClient, wait_until

ALTER, DESCRIBE = 49, 48
Entry = AlterClientQuotasRequest.EntryData


def entry(entity_type: str, name: str, value: float = 1024.0) -> Entry:
    return Entry(
        entity=[Entry.EntityData(entity_type, name)],
        ops=[Entry.OpData("producer_byte_rate", value, False)],
    )


def describe(client: WireClient, entity_type: str, name: str):
    component = DescribeClientQuotasRequest.ComponentData(entity_type, 0, name)
    return client.call(DESCRIBE, 1, DescribeClientQuotasRequest([component], True))


def end_offset(running: Running) -> int:
    return running.admin.GetLogOffsets(admin_pb.GetLogOffsetsRequest()).end_offset


def test_a_32767_byte_name_is_accepted_and_returned_by_describe(running: Running) -> None:
    name = "k" * (MAX_STRING_BYTES - 2) + "é"  # 32,767 bytes: the most a Kafka string carries
    assert len(name.encode()) == MAX_STRING_BYTES
    client = WireClient(running.port)
    try:
        answer = client.call(ALTER, 1, AlterClientQuotasRequest([entry("client-id", name)]))
        assert [(e.error_code, e.error_message) for e in answer.entries] == [(0, None)]
        running.cluster.wait_caught_up(timeout_s=30)
        described = describe(client, "client-id", name)
        assert described.error_code == 0
        [found] = described.entries
        assert [(e.entity_type, e.entity_name) for e in found.entity] == [("client-id", name)]
        assert [(v.key, v.value) for v in found.values] == [("producer_byte_rate", 1024.0)]
    finally:
        client.close()


def test_a_32768_byte_name_closes_the_connection_as_kafka_does_and_nothing_is_written(running: Running) -> None:
    before = end_offset(running)
    name = "q" * MAX_STRING_BYTES
    frame = bytearray(encode_request(ALTER, 1, 7, AlterClientQuotasRequest([entry("user", name)]), client_id="qp"))
    at = frame.index(b"\x80\x80\x02" + b"q" * 8)  # the compact length: 32,767 + 1 as a varint
    frame[at : at + 3] = b"\x81\x80\x02"  # now 32,768 + 1 ...
    frame[at + 3 : at + 3] = b"q"  # ... and one more byte of name
    frame[0:4] = struct.pack(">i", len(frame) - 4)
    errors_before = running.frontend.stats.protocol_errors
    client = WireClient(running.port)
    try:
        client.send_raw(bytes(frame))
        assert client.closed_by_server()
    finally:
        client.close()
    assert wait_until(lambda: running.frontend.stats.protocol_errors == errors_before + 1, timeout_s=5)
    assert end_offset(running) == before
    component = admin_pb.DescribeClientQuotasRequest.ComponentData(entity_type="user", match_type=2)
    users = running.admin.DescribeClientQuotas(admin_pb.DescribeClientQuotasRequest(components=[component]))
    assert all(len(e.entity[0].entity_name) < MAX_STRING_BYTES for e in users.entries)


def test_malformed_utf8_that_decodes_too_long_is_that_entrys_error_and_the_others_apply(running: Running) -> None:
    placeholder = "\x01" * 11_000  # 11,000 bytes on the wire, 33,000 once each byte is a U+FFFD
    request = AlterClientQuotasRequest([entry("user", placeholder), entry("user", "qp-limits-fine", 2048.0)])
    frame = encode_request(ALTER, 1, 9, request, client_id="qp").replace(placeholder.encode(), b"\xff" * 11_000)
    client = WireClient(running.port)
    try:
        client.send_raw(frame)
        raw = client.read_frame()
        assert raw is not None, "the frontend closed the connection instead of answering"
        answer = decode_response(ALTER, 1, raw).body
        refused, applied = answer.entries
        assert refused.error_code == 42
        assert refused.error_message.startswith("Invalid user name '\ufffd\ufffd")
        assert "33000 bytes of UTF-8, above the 32767 a Kafka string can carry" in refused.error_message
        assert len(refused.entity[0].entity_name.encode()) <= MAX_STRING_BYTES  # the echo stays carriable
        assert (applied.error_code, applied.error_message) == (0, None)
        running.cluster.wait_caught_up(timeout_s=30)
        assert [e.values[0].value for e in describe(client, "user", "qp-limits-fine").entries] == [2048.0]
        component = admin_pb.DescribeClientQuotasRequest.ComponentData(entity_type="user", match_type=2)
        users = running.admin.DescribeClientQuotas(admin_pb.DescribeClientQuotasRequest(components=[component]))
        assert not any("\ufffd" in e.entity[0].entity_name for e in users.entries)  # nothing of it was written
    finally:
        client.close()


def test_control_characters_are_accepted_and_the_cli_prints_one_line_per_entity(running: Running) -> None:
    name = "qp-limits\nsecond line\x1b[0m"
    client = WireClient(running.port)
    try:
        answer = client.call(ALTER, 0, AlterClientQuotasRequest([entry("user", name, 4096.0)]))
        assert [e.error_code for e in answer.entries] == [0]
        running.cluster.wait_caught_up(timeout_s=30)
        [found] = describe(client, "user", name).entries
        assert found.entity[0].entity_name == name
    finally:
        client.close()
    shown = running.cli("quotas", "--describe", "--entity-type", "users", "--entity-name", name)
    assert shown.splitlines() == [
        "Quota configs for user-principal 'qp-limits\\nsecond line\\x1b[0m' are producer_byte_rate=4096.0"
    ]
