"""The frontend's network layer against a running cluster: connection quotas at accept, Kafka's answers
to bad frames, the request quota's throttling, SASL/PLAIN and the admin APIs' authorization."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from quotaplane.protocol import (
    ApiVersionsRequest,
    DescribeClientQuotasRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
    ListClientMetricsResourcesRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    encode_request,
)
from quotaplane.services.frontend import PlainCredentials
from quotaplane.services.frontend.server import FrontendServer, serve_frontend

from .conftest import Running, WireClient, wait_until


def api_versions_works(port: int, client_id: str = "qp-limits") -> bool:
    client = WireClient(port, client_id=client_id)
    try:
        return client.call(18, 3, ApiVersionsRequest("qp-limits", "1.0")).error_code == 0
    finally:
        client.close()


# --- connection quotas ---------------------------------------------------------------------------------------
def test_a_fourth_connection_from_one_ip_is_refused(running: Running) -> None:
    assert wait_until(lambda: running.frontend.stats.connections_open == 0, timeout_s=20)
    running.set_broker_config("max.connections.per.ip", "3")
    clients: list[WireClient] = []
    try:
        for _ in range(3):
            client = WireClient(running.port)
            assert client.call(18, 3, ApiVersionsRequest("qp-limits", "1.0")).error_code == 0
            clients.append(client)
        rejected_before = running.frontend.stats.connections_rejected
        fourth = WireClient(running.port)
        try:
            fourth.send_raw(encode_request(18, 3, 1, ApiVersionsRequest("qp-limits", "1.0")))
            assert fourth.closed_by_server(), "the fourth connection from 127.0.0.1 was answered"
        finally:
            fourth.close()
        assert running.frontend.stats.connections_rejected == rejected_before + 1
        for client in clients:  # the first three still work
            assert client.call(3, 12, MetadataRequest(topics=None)).brokers[0].port == running.port
        clients.pop().close()  # a close releases its count: a new connection fits again
        assert wait_until(lambda: running.frontend.stats.connections_open == 2)
        assert wait_until(lambda: _fits(running), timeout_s=10)
    finally:
        for client in clients:
            client.close()
        running.set_broker_config("max.connections.per.ip", None)


def _fits(running: Running) -> bool:
    client = WireClient(running.port)
    try:
        client.send_raw(encode_request(18, 3, 1, ApiVersionsRequest("qp-limits", "1.0")))
        return client.read_frame() is not None
    finally:
        client.close()


# --- bad frames ------------------------------------------------------------------------------------------------
def test_api_versions_at_an_unsupported_version_gets_a_v0_answer(running: Running) -> None:
    client = WireClient(running.port)
    try:
        frame = bytearray(encode_request(18, 3, 41, ApiVersionsRequest("qp-limits", "1.0")))
        frame[6:8] = struct.pack(">h", 99)  # version 99 of ApiVersions
        client.send_raw(bytes(frame))
        answer = client.read_frame()
        assert answer is not None
        correlation, error, count, key, lo, hi = struct.unpack(">ihihhh", answer[:16])
        assert (correlation, error, count, key, lo, hi) == (41, 35, 1, 18, 0, 4)
        assert client.call(18, 0, ApiVersionsRequest()).error_code == 0  # and the connection goes on
    finally:
        client.close()


def _with_trailing_bytes(frame: bytes) -> bytes:
    """A valid request with two bytes after its body, inside its size (Kafka reads the body and ignores them)."""
    return struct.pack(">i", len(frame) - 4 + 2) + frame[4:] + b"\x00\x00"


def test_bytes_after_a_request_body_are_ignored_as_kafka_does(running: Running) -> None:
    client = WireClient(running.port)
    try:
        client.send_raw(_with_trailing_bytes(encode_request(18, 0, 7, ApiVersionsRequest())))
        assert not client.closed_by_server()
    finally:
        client.close()
    assert api_versions_works(running.port)


def test_librdkafka_lists_topics_through_the_frontend(running: Running) -> None:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{running.port}"}).list_topics(timeout=10)
    assert [(b.id, b.port) for b in metadata.brokers.values()] == [(running.frontend.config.node_id, running.port)]


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">ihhi", 8, 999, 0, 1),  # an unknown API key
        struct.pack(">ihhih", 10, 3, 77, 1, -1),  # Metadata v77 (a null client id)
        struct.pack(">i", 3) + b"abc",  # shorter than any header
        struct.pack(">i", -5),  # a negative size
        struct.pack(">i", 64 * 1024 * 1024),  # above socket.request.max.bytes: closed before reading it
    ],
    ids=["unknown-key", "unknown-version", "short", "negative-size", "too-large"],
)
def test_bad_frames_close_the_connection_and_nothing_else(running: Running, frame: bytes) -> None:
    errors_before = running.frontend.stats.protocol_errors
    client = WireClient(running.port)
    try:
        client.send_raw(frame)
        assert client.closed_by_server()
    finally:
        client.close()
    assert wait_until(lambda: running.frontend.stats.protocol_errors == errors_before + 1, timeout_s=5)
    assert running.frontend.stats.unexpected_errors == 0
    assert api_versions_works(running.port)


# --- throttling ------------------------------------------------------------------------------------------------
def test_the_request_quota_throttles_and_mutes_the_connection(running: Running) -> None:
    args = ("--entity-type", "users", "--entity-name", "ANONYMOUS", "--entity-type", "clients", "--entity-name")
    running.cli("quotas", "--alter", "--add-config", "request_percentage=0.001", *args, "qp-throttled")
    running.cluster.wait_caught_up(timeout_s=30)
    # the frontend records request time once it knows a request quota exists (Kafka's quotasEnabled)
    assert wait_until(lambda: getattr(running.frontend.enabled_quotas, "request", False), timeout_s=10)
    client = WireClient(running.port, client_id="qp-throttled")
    try:
        throttle_ms = 0
        for _ in range(200):
            throttle_ms = client.call(3, 12, MetadataRequest(topics=None)).throttle_time_ms
            if throttle_ms > 0:
                break
        assert throttle_ms > 0, "the request quota never throttled"
        started = time.monotonic()
        client.call(3, 12, MetadataRequest(topics=None))
        waited_ms = (time.monotonic() - started) * 1000
        assert waited_ms >= throttle_ms * 0.9, (waited_ms, throttle_ms)  # muted: not read until the throttle ended
        assert running.frontend.stats.throttled_responses > 0
    finally:
        client.close()
        running.cli("quotas", "--alter", "--delete-config", "request_percentage", *args, "qp-throttled")


# --- SASL/PLAIN and authorization ------------------------------------------------------------------------------
USERS = {"admin": "admin-secret", "alice": "alice-secret"}


@pytest.fixture(scope="module")
def sasl_frontend(running: Running) -> Iterator[FrontendServer]:
    server = serve_frontend(
        running.cluster.gateway_address,
        running.cluster.admin_address,
        port=0,
        node_id=7,
        sasl_credentials=PlainCredentials.of(USERS),
        operators=["User:admin"],
    )
    try:
        yield server
    finally:
        server.close()


def sasl_client(port: int, user: str, password: str, *, handshake_version: int = 1) -> WireClient:
    client = WireClient(port, client_id=f"qp-sasl-{user}")
    assert client.call(18, 3, ApiVersionsRequest("qp-sasl", "1.0")).error_code == 0
    handshake = client.call(17, handshake_version, SaslHandshakeRequest("PLAIN"))
    assert handshake.error_code == 0 and handshake.mechanisms == ["PLAIN"]
    token = f"\x00{user}\x00{password}".encode()
    if handshake_version == 0:  # v0: the bare token, answered by an empty frame
        client.send_raw(struct.pack(">i", len(token)) + token)
        assert client.read_frame() == b""
        return client
    answer = client.call(36, 2, SaslAuthenticateRequest(token))
    assert answer.error_code == 0, answer
    return client


def test_sasl_plain_authenticates_and_a_wrong_password_is_refused(sasl_frontend: FrontendServer) -> None:
    client = sasl_client(sasl_frontend.port, "alice", "alice-secret")
    client.close()
    legacy = sasl_client(sasl_frontend.port, "alice", "alice-secret", handshake_version=0)
    assert legacy.call(3, 12, MetadataRequest(topics=None)).brokers[0].node_id == 7
    legacy.close()

    wrong = WireClient(sasl_frontend.port)
    try:
        assert wrong.call(17, 1, SaslHandshakeRequest("PLAIN")).error_code == 0
        answer = wrong.call(36, 2, SaslAuthenticateRequest(b"\x00alice\x00guess"))
        assert answer.error_code == 58 and "Invalid username or password" in answer.error_message
        assert wrong.closed_by_server()
    finally:
        wrong.close()
    assert sasl_frontend.stats.sasl_failures >= 1

    other = WireClient(sasl_frontend.port)
    try:
        assert other.call(17, 1, SaslHandshakeRequest("SCRAM-SHA-512")).error_code == 33  # UNSUPPORTED_SASL_MECHANISM
    finally:
        other.close()

    early = WireClient(sasl_frontend.port)
    try:  # anything but ApiVersions / SASL before authenticating: closed, as Kafka does
        early.send_raw(encode_request(3, 12, 1, MetadataRequest(topics=None)))
        assert early.closed_by_server()
    finally:
        early.close()


def test_admin_apis_need_an_operator_and_telemetry_needs_nothing(sasl_frontend: FrontendServer) -> None:
    port = sasl_frontend.port
    describe = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(16, "anything", None)])
    alter = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                16,
                "by-alice",
                [IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig("interval.ms", 0, "5000")],
            )
        ]
    )
    alice = sasl_client(port, "alice", "alice-secret")
    try:
        assert alice.call(48, 1, DescribeClientQuotasRequest([], False)).error_code == 31
        assert [r.error_code for r in alice.call(32, 4, describe).results] == [31]
        assert [r.error_code for r in alice.call(44, 1, alter).responses] == [31]
        assert alice.call(74, 0, ListClientMetricsResourcesRequest()).error_code == 31
    finally:
        alice.close()
    admin = sasl_client(port, "admin", "admin-secret")
    try:
        assert admin.call(48, 1, DescribeClientQuotasRequest([], False)).error_code == 0
        assert [r.error_code for r in admin.call(44, 1, alter).responses] == [0]
        assert "by-alice" in {
            r.name for r in admin.call(74, 0, ListClientMetricsResourcesRequest()).client_metrics_resources
        }
    finally:
        admin.close()


PRODUCER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": "127.0.0.1:" + sys.argv[1], "client.id": "qp-sasl-producer",
                  "enable.metrics.push": True, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                  "sasl.username": "alice", "sasl.password": "alice-secret"})
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        p.poll(0.05)
    p.flush(1)
    """
)


def test_librdkafka_over_sasl_pushes_telemetry_as_its_principal(
    running: Running, sasl_frontend: FrontendServer
) -> None:
    running.cli("client-metrics", "--alter", "--name", "sasl-test", "--metrics", "org.apache.kafka.producer.",
                "--interval", "1000", "--match", "client_id=qp-sasl-producer")  # fmt: skip
    running.cluster.wait_caught_up(timeout_s=30)
    process = subprocess.run(
        [sys.executable, "-c", PRODUCER, str(sasl_frontend.port), "2.5"], capture_output=True, text=True, timeout=60
    )
    assert process.returncode == 0, process.stderr[-3000:]

    def mine() -> list:
        return [r for r in running.archived() if r.labels.get("client_id") == "qp-sasl-producer"]

    assert wait_until(mine)
    assert {r.labels["principal"] for r in mine()} == {"User:alice"}


# --- TLS on the Kafka listener ---------------------------------------------------------------------------------
TLS_PRODUCER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": "localhost:" + sys.argv[1], "client.id": "qp-tls-producer",
                  "enable.metrics.push": True, "security.protocol": "SSL", "ssl.ca.location": sys.argv[3]})
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        p.poll(0.05)
    p.flush(1)
    """
)


def test_librdkafka_pushes_telemetry_over_tls(running: Running, tmp_path) -> None:
    from quotaplane.services.frontend.server import tls_context

    from ..test_security import _ca, _leaf, _write

    ca = _ca("quotaplane frontend test CA")
    _write(tmp_path / "ca", ca[0])
    _write(tmp_path / "server", *_leaf("localhost", ca, server=True))
    with pytest.raises(ValueError, match=r"does not match|cannot be used|not a PEM"):
        tls_context(str(tmp_path / "ca.pem"), str(tmp_path / "server.pem"))  # a certificate is not a key
    server = serve_frontend(
        running.cluster.gateway_address,
        running.cluster.admin_address,
        port=0,
        advertised_host="localhost",
        node_id=5,
        ssl_context=tls_context(str(tmp_path / "server.pem"), str(tmp_path / "server.key")),
    )
    try:
        assert server.config.listener_name == "SSL"
        running.cli("client-metrics", "--alter", "--name", "tls-test", "--metrics", "org.apache.kafka.producer.",
                    "--interval", "1000", "--match", "client_id=qp-tls-producer")  # fmt: skip
        running.cluster.wait_caught_up(timeout_s=30)
        process = subprocess.run(
            [sys.executable, "-c", TLS_PRODUCER, str(server.port), "2.5", str(tmp_path / "ca.pem")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert process.returncode == 0, process.stderr[-3000:]

        def mine() -> list:
            return [r for r in running.archived() if r.labels.get("client_id") == "qp-tls-producer"]

        assert wait_until(mine)
        assert server.stats.responses[72, 0] >= 1

        plain = WireClient(server.port)  # a plaintext client on the TLS listener gets nothing it can read
        try:
            plain.send_raw(encode_request(18, 3, 1, ApiVersionsRequest("qp-plain", "1.0")))
            assert plain.closed_by_server()
        finally:
            plain.close()
        assert server.stats.unexpected_errors == 0
    finally:
        server.close()
