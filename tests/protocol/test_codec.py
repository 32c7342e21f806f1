"""Whole messages: round trips of every API at every version, golden bytes derived by hand from
the protocol spec, header-version rules, unsupported requests."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.kafka_uuid import ZERO_UUID, Uuid
from quotaplane.protocol import (
    APIS,
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeConfigsResponse,
    GetTelemetrySubscriptionsResponse,
    MetadataRequest,
    MetadataResponse,
    ProtocolError,
    PushTelemetryRequest,
    RequestHeader,
    UnsupportedRequestError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
    supported_versions,
)
from quotaplane.protocol.schema import MessageSpec

from .strategies import ALL_MESSAGE_VERSIONS, message_strategy


def _id(item: tuple[MessageSpec, int]) -> str:
    return f"{item[0].name}-v{item[1]}"


@pytest.mark.parametrize("spec_version", ALL_MESSAGE_VERSIONS, ids=[_id(x) for x in ALL_MESSAGE_VERSIONS])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_every_message_every_version(spec_version: tuple[MessageSpec, int], data: st.DataObject) -> None:
    """decode(encode(x)) == x, re-encoding gives the same bytes, and the whole frame path agrees."""
    spec, version = spec_version
    body = data.draw(message_strategy(spec, version))
    codec = spec.codec(version)
    out = bytearray()
    codec.encode(out, body)
    decoded, pos = codec.decode(bytes(out), 0)
    assert pos == len(out)
    assert decoded == body
    again = bytearray()
    codec.encode(again, decoded)
    assert again == out

    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1))
    if spec.kind == "request":
        client_id = data.draw(st.none() | st.text(st.characters(blacklist_categories=("Cs",)), max_size=8))
        frame = encode_request(spec.api_key, version, correlation_id, body, client_id=client_id)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        request = decode_request(frame[4:])
        assert request.header == RequestHeader(spec.api_key, version, correlation_id, client_id)
        assert (request.api_key, request.api_version, request.body) == (spec.api_key, version, body)
    else:
        frame = encode_response(spec.api_key, version, correlation_id, body)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        assert decode_response(spec.api_key, version, frame[4:]) == (correlation_id, body)


def test_every_api_of_the_brief_is_covered() -> None:
    assert supported_versions() == {
        0: (3, 9),
        3: (0, 12),
        10: (0, 6),
        17: (0, 1),
        19: (2, 7),
        20: (1, 6),
        37: (0, 3),
        18: (0, 4),
        32: (0, 4),
        36: (0, 2),
        44: (0, 1),
        48: (0, 1),
        49: (0, 1),
        71: (0, 0),
        72: (0, 0),
        60: (0, 2),
        74: (0, 0),
    }
    flexible_from = {key: req.flexible_versions.lo for key, (req, _) in APIS.items()}
    assert flexible_from == {
        0: 9,
        3: 9,
        10: 3,
        19: 5,
        20: 4,
        37: 2,
        60: 0,
        17: 1,
        18: 3,
        32: 4,
        36: 2,
        44: 1,
        48: 1,
        49: 1,
        71: 0,
        72: 0,
        74: 0,
    }
    assert APIS[17][0].flexible_versions.empty  # SaslHandshake never became flexible


# --- golden bytes, derived by hand from the protocol guide -------------------------------------

SOFTWARE_NAME = "confluent-kafka-python"
SOFTWARE_VERSION = "2.16.1-rdkafka-2.16.0"


def test_golden_api_versions_v3_request_as_librdkafka_sends_it() -> None:
    body = (
        b"\x00\x12\x00\x03\x00\x00\x00\x01"  # api key 18, version 3, correlation id 1
        + b"\x00\x07rdkafka"  # client id: int16 length even in header v2
        + b"\x00"  # header tagged fields
        + bytes([len(SOFTWARE_NAME) + 1])
        + SOFTWARE_NAME.encode()  # compact string: length + 1
        + bytes([len(SOFTWARE_VERSION) + 1])
        + SOFTWARE_VERSION.encode()
        + b"\x00"  # body tagged fields
    )
    wire = struct.pack(">i", len(body)) + body
    assert len(body) == 64
    request = ApiVersionsRequest(client_software_name=SOFTWARE_NAME, client_software_version=SOFTWARE_VERSION)
    assert encode_request(18, 3, 1, request, client_id="rdkafka") == wire
    decoded = decode_request(body)
    assert decoded.header == RequestHeader(18, 3, 1, "rdkafka")
    assert decoded.body == request


def test_golden_api_versions_v3_response_uses_header_v0() -> None:
    """No tag byte after the correlation id: librdkafka would read it as the error code."""
    response = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(18, 0, 3)])
    assert encode_response(18, 3, 1, response) == bytes.fromhex(
        "00000013"  # size 19
        "00000001"  # correlation id, header v0: nothing else
        "0000"  # error code
        "02"  # compact array of 1
        "0012" "0000" "0003" "00"  # key 18, 0..3, element tagged fields
        "00000000"  # throttle time
        "00"  # body tagged fields (the defaults of the four tagged fields are not written)
    )  # fmt: skip


def test_golden_unsupported_version_answer_is_a_v0_body() -> None:
    """The answer to an ApiVersions request at a version the server lacks: v0 body, error 35."""
    response = ApiVersionsResponse(error_code=35, api_keys=[ApiVersionsResponse.ApiVersion(18, 0, 4)])
    assert encode_response(18, 0, 1, response) == bytes.fromhex(
        "00000010" "00000001" "0023" "00000001" "0012" "0000" "0004"
    )  # fmt: skip


def test_golden_get_telemetry_subscriptions_response() -> None:
    instance = Uuid(bytes(range(16)))
    response = GetTelemetrySubscriptionsResponse(
        client_instance_id=instance,
        subscription_id=7,
        accepted_compression_types=[4, 3],
        push_interval_ms=5000,
        telemetry_max_bytes=1 << 20,
        requested_metrics=["*"],
    )
    assert encode_response(71, 0, 2, response) == bytes.fromhex(
        "0000002f"  # size 47
        "00000002" "00"  # correlation id, header v1 tagged fields
        "00000000" "0000"  # throttle, error
        + instance.hex()
        + "00000007"  # subscription id
        "03" "04" "03"  # [zstd, lz4]
        "00001388" "00100000"  # push interval 5000, max bytes 1 MiB
        "00"  # delta temporality false
        "02" "02" "2a"  # ["*"]
        "00"
    )  # fmt: skip


def test_golden_metadata_v12_request_all_topics() -> None:
    wire = encode_request(3, 12, 5, MetadataRequest(topics=None), client_id=None)
    assert wire == bytes.fromhex(
        "0000000f"
        "0003" "000c" "00000005" "ffff" "00"  # header v2 with a null client id
        "00"  # topics: null (all topics)
        "01"  # allow auto topic creation (default true)
        "00"  # include topic authorized operations
        "00"
    )  # fmt: skip
    assert decode_request(wire[4:]).body == MetadataRequest(topics=None)


def test_golden_metadata_v0_response() -> None:
    response = MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(1, "h", 9092)])
    assert encode_response(3, 0, 3, response)[4:] == bytes.fromhex(
        "00000003" "00000001" "00000001" "0001" "68" "00002384" "00000000"
    )  # fmt: skip


def test_push_telemetry_decodes_uuid_and_bytes() -> None:
    instance = Uuid(b"\x11" * 16)
    frame = (
        bytes.fromhex("004800000000002a00016300")  # header v2, client id "c"
        + instance
        + bytes.fromhex("00000009010404")  # subscription 9, terminating, zstd, 3 bytes of metrics
        + b"abc"
        + b"\x00"
    )
    request = decode_request(frame)
    assert request.body == PushTelemetryRequest(instance, 9, True, 4, b"abc")
    assert isinstance(request.body.client_instance_id, Uuid)


# --- header versions ---------------------------------------------------------------------------


def test_header_version_rules() -> None:
    assert request_header_version(7, 0, False) == 0  # ControlledShutdown v0 only
    assert request_header_version(7, 1, False) == 1
    assert request_header_version(18, 3, True) == 2
    assert request_header_version(3, 8, False) == 1
    assert response_header_version(18, True) == 0  # ApiVersions: always v0
    assert response_header_version(71, True) == 1
    assert response_header_version(3, False) == 0


@pytest.mark.parametrize(("version", "header_bytes"), [(8, 4), (9, 5)])
def test_metadata_response_header_follows_flexibility(version: int, header_bytes: int) -> None:
    frame = encode_response(3, version, 0x01020304, MetadataResponse())[4:]
    assert frame[:4] == b"\x01\x02\x03\x04"
    if header_bytes == 5:
        assert frame[4] == 0  # the header's empty tagged fields


# --- tagged fields ---------------------------------------------------------------------------


def test_unknown_tags_are_skipped_and_known_tags_read() -> None:
    base = encode_request(18, 3, 1, ApiVersionsRequest("n", "v"), client_id="c")[4:]
    with_unknown = base[:-1] + b"\x01\x63\x02\xab\xcd"  # one tagged field, tag 99, 2 bytes
    assert decode_request(with_unknown).body == ApiVersionsRequest("n", "v")

    response = ApiVersionsResponse(finalized_features_epoch=3, zk_migration_ready=True)
    frame = encode_response(18, 3, 1, response)[4:]
    assert frame.endswith(b"\x02" + b"\x01\x08" + (3).to_bytes(8, "big") + b"\x03\x01\x01")
    assert decode_response(18, 3, frame).body == response


def test_tagged_field_must_fill_its_declared_size() -> None:
    frame = bytearray(encode_response(18, 3, 1, ApiVersionsResponse(zk_migration_ready=True))[4:])
    assert frame[-3:] == b"\x03\x01\x01"
    frame[-2:] = b"\x02\x01\x00"  # size 2 for a one-byte bool
    with pytest.raises(ProtocolError, match="used 1 of its 2 bytes"):
        decode_response(18, 3, bytes(frame))


# --- unsupported and malformed requests ---------------------------------------------------------


def test_unsupported_api_versions_version_carries_the_header() -> None:
    frame = bytes.fromhex("001200090000000b0002696400") + b"\x05junk"
    with pytest.raises(UnsupportedRequestError) as info:
        decode_request(frame)
    assert info.value.known_api
    assert info.value.header == RequestHeader(18, 9, 11, "id")
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (18, 9, 11)


def test_unsupported_non_flexible_version_reads_header_v1() -> None:
    frame = bytes.fromhex("0003ffff00000001000178")  # Metadata v-1: header v1, no tags
    with pytest.raises(UnsupportedRequestError) as info:
        decode_request(frame)
    assert info.value.header.client_id == "x"


def test_unknown_api_key() -> None:
    with pytest.raises(UnsupportedRequestError) as info:
        decode_request(bytes.fromhex("0009000000000004000178"))  # OffsetFetch v0
    assert not info.value.known_api
    assert info.value.header == RequestHeader(9, 0, 4, None)


def test_trailing_bytes_are_ignored_as_kafka_ignores_them() -> None:
    frame = encode_request(18, 0, 1, ApiVersionsRequest())[4:]
    assert decode_request(frame).trailing_bytes == 0
    decoded = decode_request(frame + b"\x00")
    assert decoded.body == ApiVersionsRequest() and decoded.trailing_bytes == 1


def test_librdkafkas_metadata_v12_for_all_topics_decodes() -> None:
    # captured from confluent-kafka 2.16.1 / librdkafka 2.16.0 list_topics(): three bytes after the body
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    decoded = decode_request(frame)
    assert decoded.body == MetadataRequest(topics=None, allow_auto_topic_creation=False)
    assert decoded.header.client_id == "rdkafka" and decoded.trailing_bytes == 3


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        (18, 3, ApiVersionsRequest("n", "v")),
        (3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")])),
        (3, 1, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")])),
        (72, 0, PushTelemetryRequest(metrics=b"xyz")),
    ],
)
def test_every_truncation_is_a_protocol_error(api_key: int, version: int, body: object) -> None:
    frame = encode_request(api_key, version, 1, body, client_id="c")[4:]
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_request(frame[:cut])


def test_memoryview_frames() -> None:
    frame = encode_request(72, 0, 1, PushTelemetryRequest(metrics=b"\x01\x02"))[4:]
    request = decode_request(memoryview(frame))
    assert request.body.metrics == b"\x01\x02" and type(request.body.metrics) is bytes


# --- encoding errors ---------------------------------------------------------------------------


def test_encode_checks_the_body_type_and_nullability() -> None:
    with pytest.raises(TypeError):
        encode_response(18, 3, 1, MetadataResponse())
    with pytest.raises(ProtocolError):
        encode_response(3, 1, 1, MetadataResponse(topics=None))  # not nullable in a response
    with pytest.raises(ProtocolError):
        encode_request(3, 0, 1, MetadataRequest(topics=None))  # nullable only from v1
    with pytest.raises(ProtocolError):
        encode_response(18, 99, 1, ApiVersionsResponse())
    with pytest.raises(ProtocolError):
        encode_response(18, 0, 1, ApiVersionsResponse(error_code=1 << 15))


# --- the generated classes ---------------------------------------------------------------------


def test_generated_classes_have_kafka_defaults() -> None:
    response = MetadataResponse()
    assert response.controller_id == -1 and response.cluster_id is None and response.brokers == []
    assert MetadataResponse().brokers is not response.brokers  # fresh lists
    assert MetadataResponse.MetadataResponseBroker().rack is None
    assert MetadataResponse.MetadataResponseTopic().topic_authorized_operations == -(2**31)
    assert MetadataRequest().allow_auto_topic_creation is True
    assert ApiVersionsResponse().finalized_features_epoch == -1
    assert DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult().config_source == -1
    assert GetTelemetrySubscriptionsResponse().client_instance_id == ZERO_UUID
    assert repr(ApiVersionsRequest("a", "b")) == (
        "ApiVersionsRequest(client_software_name='a', client_software_version='b')"
    )


def test_fields_absent_from_a_version_decode_as_defaults() -> None:
    """v0 of Metadata has no rack, leader epoch or cluster id: they read back as Kafka's defaults."""
    partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
        partition_index=0, leader_id=1, leader_epoch=5, replica_nodes=[1], isr_nodes=[1], offline_replicas=[2]
    )
    topic = MetadataResponse.MetadataResponseTopic(name="t", is_internal=True, partitions=[partition])
    response = MetadataResponse(
        throttle_time_ms=5,
        brokers=[MetadataResponse.MetadataResponseBroker(1, "h", 1, rack="r")],
        cluster_id="c",
        controller_id=1,
        topics=[topic],
    )
    back = decode_response(3, 0, encode_response(3, 0, 1, response)[4:]).body
    assert back.throttle_time_ms == 0 and back.cluster_id is None and back.controller_id == -1
    assert back.brokers[0].rack is None
    assert back.topics[0].is_internal is False
    p = back.topics[0].partitions[0]
    assert (p.leader_epoch, p.offline_replicas, p.replica_nodes) == (-1, [], [1])
