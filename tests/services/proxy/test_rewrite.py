"""The proxy's pure parts: the broker map, the versions it offers, the rewriting of every address-carrying
response, and the frame patching of throttle times."""

from __future__ import annotations

import struct

import pytest

from quotaplane.errors import Errors
from quotaplane.protocol import (
    ApiKey,
    DescribeClusterResponse,
    FindCoordinatorResponse,
    MetadataResponse,
    ProtocolError,
    decode_response,
    encode_response,
)
from quotaplane.protocol.frames import THROTTLE_FIRST, peek_client_id, peek_request, set_throttle_time
from quotaplane.services.proxy import BrokerMap, offered_versions, parse_bootstrap, rewrite_response


def frame_of(api_key: int, version: int, body: object, correlation_id: int = 7) -> bytearray:
    return bytearray(encode_response(api_key, version, correlation_id, body)[4:])


# --- the broker map -----------------------------------------------------------------------------------------
def test_node_n_is_served_on_base_plus_n_on_every_proxy() -> None:
    one = BrokerMap("a:9092", broker_port_base=20000, max_brokers=10)
    two = BrokerMap("b:9092,c:9092", broker_port_base=20000, max_brokers=10)
    assert [one.proxy_port(n) for n in (0, 3, 9)] == [two.proxy_port(n) for n in (0, 3, 9)] == [20000, 20003, 20009]
    assert one.proxy_port(10) is None and one.proxy_port(-1) is None
    assert one.node_of_port(20004) == 4 and one.node_of_port(20010) is None


def test_learn_reports_new_and_moved_brokers_only() -> None:
    brokers = BrokerMap("a:9092", broker_port_base=20000, max_brokers=10)
    assert brokers.learn([(1, "h1", 9092), (2, "h2", 9092)]) == [1, 2]
    assert brokers.learn([(1, "h1", 9092), (2, "h2", 9092)]) == []
    moved = brokers.learn([(2, "h2b", 9093), (12, "far", 9092)], complete=False)  # 12: outside the range
    assert moved == [2] and brokers.upstream(2) == ("h2b", 9093) and brokers.upstream(12) is None
    assert brokers.nodes == [1, 2]


def test_a_broker_missing_from_a_complete_answer_has_left() -> None:
    brokers = BrokerMap("a:9092", broker_port_base=20000, max_brokers=10)
    brokers.learn([(1, "h1", 9092), (2, "h2", 9092)])
    assert brokers.learn([], complete=True) == [] and brokers.nodes == [1, 2]  # an empty answer proves nothing
    assert brokers.learn([(2, "h2", 9092), (3, "h3", 9092)]) == [3]
    assert brokers.nodes == [2, 3] and brokers.upstream(1) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "not HOST:PORT"), ("kafka", "not HOST:PORT"), ("kafka:0", "1..65535"), ("kafka:x", "not HOST:PORT")],
)
def test_bad_bootstrap_lists_are_refused_clearly(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_bootstrap(text)


def test_port_ranges_must_fit() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        BrokerMap("a:1", broker_port_base=65500, max_brokers=100)


# --- versions -----------------------------------------------------------------------------------------------
def test_offered_versions_intersect_the_upstream_with_what_the_proxy_handles() -> None:
    upstream = {0: (0, 12), 1: (4, 17), 3: (0, 13), 10: (0, 6), 18: (0, 4), 19: (2, 7), 55: (0, 2), 78: (0, 1)}
    offered = offered_versions(upstream)
    assert offered[ApiKey.PRODUCE] == (3, 9)  # v10+ carries NodeEndpoints: capped at what the codec rewrites
    assert offered[ApiKey.FETCH] == (4, 15)  # v16 adds NodeEndpoints
    assert offered[ApiKey.METADATA] == (0, 12)
    assert offered[19] == (2, 7)  # forwarded untouched: the upstream's own range
    assert offered[55] == (0, 1) and 78 not in offered
    for key in (17, 18, 36, 48, 49, 71, 72, 74):  # served by quotaplane whatever the upstream has
        assert key in offered
    assert offered[71] == (0, 0) and offered[72] == (0, 0)


def test_an_api_without_a_common_version_is_not_offered() -> None:
    assert ApiKey.PRODUCE not in offered_versions({0: (10, 12)})


# --- address rewriting ----------------------------------------------------------------------------------------
def _brokers() -> BrokerMap:
    return BrokerMap("up:9092", broker_port_base=30000, max_brokers=200)


@pytest.mark.parametrize("version", [0, 1, 5, 9, 12])
def test_metadata_brokers_become_proxy_addresses(version: int) -> None:
    Broker = MetadataResponse.MetadataResponseBroker
    body = MetadataResponse(
        brokers=[Broker(1, "kafka-1.internal", 9092, None), Broker(500, "kafka-500", 9092, None)],
        cluster_id="c" if version >= 2 else None,
        controller_id=1,
    )
    brokers = _brokers()
    rewritten, learned = rewrite_response(
        ApiKey.METADATA, version, frame_of(3, version, body), brokers, "proxy.example"
    )
    out = decode_response(ApiKey.METADATA, version, rewritten)
    assert out.correlation_id == 7
    assert [(b.node_id, b.host, b.port) for b in out.body.brokers] == [(1, "proxy.example", 30001)]
    assert learned == [1] and brokers.upstream(1) == ("kafka-1.internal", 9092)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_find_coordinator_before_v4(version: int) -> None:
    body = FindCoordinatorResponse(node_id=3, host="kafka-3", port=9092)
    rewritten, _ = rewrite_response(10, version, frame_of(10, version, body), _brokers(), "proxy")
    out = decode_response(10, version, rewritten).body
    assert (out.node_id, out.host, out.port, out.error_code) == (3, "proxy", 30003, 0)


@pytest.mark.parametrize("version", [4, 5, 6])
def test_find_coordinator_batched_keys(version: int) -> None:
    Coordinator = FindCoordinatorResponse.Coordinator
    body = FindCoordinatorResponse(
        coordinators=[
            Coordinator("g1", 3, "kafka-3", 9092, 0, None),
            Coordinator("g2", 999, "kafka-999", 9092, 0, None),  # no proxy port: not available, ask again
            Coordinator("g3", -1, "", -1, Errors.COORDINATOR_LOAD_IN_PROGRESS, None),
        ]
    )
    rewritten, _ = rewrite_response(10, version, frame_of(10, version, body), _brokers(), "proxy")
    got = [
        (c.key, c.node_id, c.host, c.port, c.error_code)
        for c in decode_response(10, version, rewritten).body.coordinators
    ]
    assert got == [
        ("g1", 3, "proxy", 30003, 0),
        ("g2", -1, "", -1, Errors.COORDINATOR_NOT_AVAILABLE),
        ("g3", -1, "", -1, Errors.COORDINATOR_LOAD_IN_PROGRESS),
    ]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster(version: int) -> None:
    Broker = DescribeClusterResponse.DescribeClusterBroker
    body = DescribeClusterResponse(cluster_id="c", controller_id=2, brokers=[Broker(2, "k2", 9092, "r1", False)])
    brokers = _brokers()
    rewritten, learned = rewrite_response(60, version, frame_of(60, version, body), brokers, "proxy")
    out = decode_response(60, version, rewritten).body
    assert [(b.broker_id, b.host, b.port, b.rack) for b in out.brokers] == [(2, "proxy", 30002, "r1")]
    assert learned == [2]


# --- frames -------------------------------------------------------------------------------------------------------
def test_peek_reads_any_header_version() -> None:
    v1 = struct.pack(">hhih", 0, 7, 99, 3) + b"cid" + b"body"
    assert peek_request(v1) == (0, 7, 99) and peek_client_id(v1) == "cid"
    null_client = struct.pack(">hhih", 1, 12, 5, -1) + b"\x00"
    assert peek_client_id(null_client) is None
    assert peek_client_id(struct.pack(">hhi", 7, 0, 1)) is None  # ControlledShutdown v0: header v0
    with pytest.raises(ProtocolError):
        peek_request(b"\x00\x01")
    with pytest.raises(ProtocolError, match="past the end"):
        peek_client_id(struct.pack(">hhih", 0, 7, 99, 30) + b"short")


@pytest.mark.parametrize(("api_key", "version"), [(3, 3), (3, 9), (3, 12), (10, 1), (10, 3), (10, 6), (60, 0)])
def test_throttle_written_in_place_equals_the_schemas_field(api_key: int, version: int) -> None:
    body = {3: MetadataResponse, 10: FindCoordinatorResponse, 60: DescribeClusterResponse}[api_key]()
    frame = frame_of(api_key, version, body)
    assert set_throttle_time(api_key, version, frame, 1234)
    assert decode_response(api_key, version, frame).body.throttle_time_ms == 1234


def test_no_throttle_field_no_change() -> None:
    frame = frame_of(3, 2, MetadataResponse())  # Metadata v0-2 has no throttle time
    before = bytes(frame)
    assert not set_throttle_time(3, 2, frame, 10) and bytes(frame) == before
    assert ApiKey.PRODUCE not in THROTTLE_FIRST  # last in the body: set through its schema
