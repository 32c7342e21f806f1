"""The proxy's edges with real clients and real sockets: kafka-python's admin client through it, a request over
Kafka's size limit, an upstream that stalls, and a frontend without an upstream refusing Produce and Fetch at
once."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import kafka.admin as kafka_admin
import pytest
from confluent_kafka import KafkaException, Producer

from quotaplane.errors import Errors
from quotaplane.protocol import ApiKey, MetadataRequest, encode_request
from quotaplane.services.frontend import PROXY_MAX_REQUEST_BYTES, PlainCredentials
from quotaplane.services.proxy import UpstreamSasl
from tests.services.frontend.conftest import WireClient
from tests.support import free_port

from .conftest import TANSU_NODE_ID, Proxied, upstream_config
from .test_proxy import create_topic, produce_request, record_batch


def test_kafka_python_admin_creates_and_lists_topics_through_the_proxy(proxied: Proxied) -> None:
    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=proxied.bootstrap, client_id="qp-kafka-python")
    try:
        admin.create_topics([kafka_admin.NewTopic("from-kafka-python", 2, 1)])
        assert "from-kafka-python" in admin.list_topics()
        [cluster_node] = admin.describe_cluster()["brokers"]
        assert (cluster_node["broker_id"], cluster_node["port"]) == (
            TANSU_NODE_ID,
            proxied.frontend.proxy.brokers.proxy_port(TANSU_NODE_ID),
        )
    finally:
        admin.close()


def test_a_request_over_kafkas_limit_closes_that_connection(proxied: Proxied) -> None:
    client = WireClient(proxied.frontend.proxy.brokers.proxy_port(TANSU_NODE_ID), client_id="huge")
    try:
        client.send_raw(struct.pack(">i", PROXY_MAX_REQUEST_BYTES + 1))  # closed before anything is allocated
        assert client.closed_by_server()
    finally:
        client.close()
    other = WireClient(proxied.port, client_id="after-huge")
    try:
        assert other.call(ApiKey.METADATA, 4, MetadataRequest(topics=None)).brokers
    finally:
        other.close()


@pytest.fixture
def stalling_upstream() -> Iterator[int]:
    """A TCP server that accepts and reads but never answers: a broker that hangs."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    stop = threading.Event()
    held: list[socket.socket] = []

    def run() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            held.append(conn)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def test_a_stalling_upstream_times_out_and_closes_only_its_clients(proxied: Proxied, stalling_upstream: int) -> None:
    # the first bootstrap broker accepts and never answers: discovery gives up on it after connect_timeout_s and
    # asks the next (Tansu); a client on the bootstrap port is forwarded to the first that accepts, the stalling one
    server = proxied.serve(
        upstream=upstream_config(
            f"127.0.0.1:{stalling_upstream},{proxied.tansu.bootstrap}", connect_timeout_s=1.0, request_timeout_s=1.0
        )
    )
    try:
        client = WireClient(server.port, client_id="stalled")
        started = time.monotonic()
        client.send_raw(encode_request(ApiKey.METADATA, 4, 1, MetadataRequest(topics=None), client_id="stalled"))
        assert client.closed_by_server(timeout_s=10)
        assert time.monotonic() - started < 10
        client.close()
        assert server.stats.upstream_errors == 1
        healthy = WireClient(server.proxy.brokers.proxy_port(TANSU_NODE_ID), client_id="healthy")
        try:
            assert healthy.call(ApiKey.METADATA, 4, MetadataRequest(topics=None)).brokers
        finally:
            healthy.close()
    finally:
        server.close()


# --- no upstream ------------------------------------------------------------------------------------------------
@pytest.fixture
def standalone(proxied: Proxied) -> Iterator[int]:
    """A frontend of the same cluster without an upstream: it serves only quotaplane's own APIs."""
    server = proxied.serve()
    try:
        yield server.port
    finally:
        server.close()


def test_without_an_upstream_produce_is_refused_at_once(standalone: int) -> None:
    client = WireClient(standalone, client_id="lost-producer")
    try:
        answer = client.call(ApiKey.PRODUCE, 8, produce_request("t", record_batch([b"x"])))
        [topic] = answer.responses
        [partition] = topic.partition_responses
        assert partition.error_code == Errors.INVALID_REQUEST
        assert "--upstream-bootstrap" in partition.error_message
        client.send_raw(encode_request(ApiKey.PRODUCE, 7, 9, produce_request("t", record_batch([b"y"]), acks=0)))
        assert client.closed_by_server()  # acks=0: the client learns of a failed produce by the close
    finally:
        client.close()


@pytest.mark.parametrize(("version", "closed"), [(4, True), (7, False), (11, False)])
def test_without_an_upstream_fetch_is_refused_at_once(standalone: int, version: int, closed: bool) -> None:
    client = WireClient(standalone, client_id="lost-consumer")
    try:
        frame = struct.pack(">hhih", ApiKey.FETCH, version, 5, 2) + b"lc" + b"\x00" * 40
        client.send_raw(struct.pack(">i", len(frame)) + frame)
        answer = client.read_frame()
        if closed:  # Fetch before v7 has no top-level error: the connection is closed
            assert answer is None
        else:
            assert answer is not None
            correlation_id, throttle, error = struct.unpack_from(">iih", answer, 0)
            assert (correlation_id, throttle, error) == (5, 0, Errors.INVALID_REQUEST)
    finally:
        client.close()


def test_without_an_upstream_a_librdkafka_producer_fails_fast(standalone: int) -> None:
    """A producer pointed at a frontend without an upstream gets an error once its topic.metadata.propagation.max.ms
    has passed (30 s by default; 2 s here), not after its 5-minute message timeout: the frontend offers no Produce
    in ApiVersions and its Metadata names no topic."""
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{standalone}", "topic.metadata.propagation.max.ms": 2000})
    started = time.monotonic()
    try:
        producer.produce("nowhere", b"x", on_delivery=lambda err, _msg: errors.append(err))
    except KafkaException as e:  # refused before it is even queued
        errors.append(e)
    producer.flush(60)
    assert errors and errors[0] is not None
    assert time.monotonic() - started < 60


# --- the proxy's own credentials upstream -----------------------------------------------------------------------
@pytest.fixture
def sasl_upstream(proxied: Proxied, tmp_path) -> Iterator[int]:
    """A Kafka server that requires SASL/PLAIN: a quotaplane frontend with a credentials file (user proxy)."""
    credentials = tmp_path / "users"
    credentials.write_text("proxy:s3cret\n")
    server = proxied.serve(sasl_credentials=PlainCredentials.load(credentials))
    try:
        yield server.port
    finally:
        server.close()


def test_the_proxy_authenticates_upstream_with_its_own_credentials(
    proxied: Proxied, sasl_upstream: int, tmp_path
) -> None:
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    server = proxied.serve(
        upstream=upstream_config(f"127.0.0.1:{sasl_upstream}", sasl=UpstreamSasl.from_file("proxy", str(password)))
    )
    try:
        client = WireClient(server.port, client_id="plain-client")  # the client itself sends no SASL
        try:
            [broker] = client.call(ApiKey.METADATA, 4, MetadataRequest(topics=None)).brokers
        finally:
            client.close()
        assert (broker.node_id, broker.port) == (0, server.proxy.brokers.proxy_port(0))  # rewritten
    finally:
        server.close()
    with pytest.raises(OSError, match="refused the proxy's credentials"):
        proxied.serve(upstream=upstream_config(f"127.0.0.1:{sasl_upstream}", sasl=UpstreamSasl("proxy", "wrong")))


def test_a_broker_that_leaves_the_upstreams_metadata_is_refused(proxied: Proxied) -> None:
    """Two single-broker Kafka servers (quotaplane frontends presenting node ids 3 and 5) as the upstream's
    bootstrap list: the proxy learns node 3 from the first; when it goes away, the proxy asks again, the
    second answers with node 5 only, and a client on node 3's proxy port is refused, logged, not forwarded."""
    first = proxied.serve(node_id=3)
    second = proxied.serve(node_id=5)
    server = proxied.serve(
        upstream=upstream_config(f"127.0.0.1:{first.port},127.0.0.1:{second.port}", connect_timeout_s=2.0)
    )
    try:
        assert server.proxy.brokers.nodes == [3]
        node3_port = server.proxy.brokers.proxy_port(3)
        client = WireClient(node3_port, client_id="before")
        try:
            [broker] = client.call(ApiKey.METADATA, 4, MetadataRequest(topics=None)).brokers
            assert (broker.node_id, broker.port) == (3, node3_port)
        finally:
            client.close()
        first.close()  # broker 3 leaves
        late = WireClient(node3_port, client_id="after")
        try:
            late.send_raw(encode_request(ApiKey.METADATA, 4, 1, MetadataRequest(topics=None), client_id="after"))
            assert late.closed_by_server()
        finally:
            late.close()
        assert server.proxy.brokers.nodes == [5]
        assert server.stats.upstream_errors >= 1
        fresh = WireClient(server.proxy.brokers.proxy_port(5), client_id="node5")
        try:
            [broker] = fresh.call(ApiKey.METADATA, 4, MetadataRequest(topics=None)).brokers
            assert broker.node_id == 5
        finally:
            fresh.close()
    finally:
        server.close()
        first.close()
        second.close()


@pytest.mark.parametrize("fail_closed", [False, True])
def test_without_a_gateway_the_proxy_fails_open_or_closed(proxied: Proxied, fail_closed: bool) -> None:
    """No gateway answers (its address is a port nobody listens on): by default the proxy keeps forwarding,
    unmetered and counted; with fail_closed it refuses the clients instead."""
    create_topic(proxied, f"no-gateway-{fail_closed}", 1)
    dead_gateway = f"127.0.0.1:{free_port()}"
    server = proxied.serve(
        gateway=dead_gateway, upstream=upstream_config(proxied.tansu.bootstrap, fail_closed=fail_closed)
    )
    try:
        client = WireClient(server.proxy.brokers.proxy_port(TANSU_NODE_ID), client_id="no-gateway")
        try:
            if fail_closed:
                assert client.closed_by_server(timeout_s=30)
            else:
                assert client.call(ApiKey.METADATA, 4, MetadataRequest(topics=None)).brokers
                answer = client.call(
                    ApiKey.PRODUCE, 7, produce_request(f"no-gateway-{fail_closed}", record_batch([b"z"]))
                )
                assert answer.responses[0].partition_responses[0].error_code == 0 and answer.throttle_time_ms == 0
        finally:
            client.close()
        assert server.stats.backend_errors >= 1
        assert (server.stats.gateway_fail_open > 0) != fail_closed
    finally:
        server.close()
