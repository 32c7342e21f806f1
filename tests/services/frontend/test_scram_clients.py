"""SASL/SCRAM-SHA-256 and -512 on a frontend's Kafka listener with real clients: librdkafka (confluent-kafka,
in a subprocess as the other librdkafka tests run it) and kafka-python both authenticate with each mechanism;
a wrong password is an authentication error; PLAIN keeps working beside SCRAM; SaslHandshake v0's bare tokens
carry the SCRAM exchange too."""

from __future__ import annotations

import base64
import logging
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from quotaplane.protocol import ApiVersionsRequest, MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest
from quotaplane.services.frontend import FrontendServer, PlainCredentials, serve_frontend
from quotaplane.services.frontend._sasl import SCRAM_MECHANISMS, ScramCredentials

from .conftest import Running, WireClient
from .test_scram import GENERIC, client_final

SCRAM_USERS = {"scram-alice": "alice-scram-secret"}


@pytest.fixture(scope="module")
def scram_frontend(running: Running) -> Iterator[FrontendServer]:
    server = serve_frontend(
        running.cluster.gateway_address,
        running.cluster.admin_address,
        port=0,
        node_id=9,
        sasl_credentials=PlainCredentials.of({"plain-bob": "bob-secret"}),
        scram_credentials=ScramCredentials.of(SCRAM_USERS),
    )
    try:
        yield server
    finally:
        server.close()


LIBRDKAFKA = textwrap.dedent(
    """
    import sys
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:" + sys.argv[1], "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanisms": sys.argv[2], "sasl.username": sys.argv[3], "sasl.password": sys.argv[4]})
    try:
        print(sorted(admin.list_topics(timeout=10).brokers))
    except KafkaException as e:
        print("error", e.args[0].name(), e.args[0].str())
        sys.exit(2)
    """
)


def _librdkafka(port: int, mechanism: str, user: str, password: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LIBRDKAFKA, str(port), mechanism, user, password],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("mechanism", sorted(SCRAM_MECHANISMS))
def test_librdkafka_authenticates_with_scram(scram_frontend: FrontendServer, mechanism: str) -> None:
    done = _librdkafka(scram_frontend.port, mechanism, "scram-alice", SCRAM_USERS["scram-alice"])
    assert (done.returncode, done.stdout.strip()) == (0, "[9]"), done.stderr[-2000:]
    failures = scram_frontend.stats.sasl_failures
    done = _librdkafka(scram_frontend.port, mechanism, "scram-alice", "wrong")
    assert done.returncode == 2, done
    # librdkafka logs the broker's message and fails the call (as a transport failure: the broker closed)
    assert f"SASL authentication error: {GENERIC.format(mechanism)}" in done.stderr, done.stderr[-2000:]
    assert scram_frontend.stats.sasl_failures > failures


def test_plain_keeps_working_beside_scram(scram_frontend: FrontendServer) -> None:
    done = _librdkafka(scram_frontend.port, "PLAIN", "plain-bob", "bob-secret")
    assert (done.returncode, done.stdout.strip()) == (0, "[9]"), done.stderr[-2000:]


@pytest.mark.parametrize("mechanism", sorted(SCRAM_MECHANISMS))
def test_kafka_python_authenticates_with_scram(
    scram_frontend: FrontendServer, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    def admin(password: str) -> KafkaAdminClient:
        return KafkaAdminClient(
            bootstrap_servers=f"127.0.0.1:{scram_frontend.port}",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username="scram-alice",
            sasl_plain_password=password,
            request_timeout_ms=10_000,
            bootstrap_timeout_ms=5_000,
        )

    client = admin(SCRAM_USERS["scram-alice"])
    try:
        [broker] = client.describe_cluster()["brokers"]  # authenticated: Metadata answered, our node id in it
        assert 9 in broker.values()
    finally:
        client.close()
    with caplog.at_level(logging.DEBUG, logger="kafka"), pytest.raises(KafkaError):
        admin("wrong").close()  # kafka-python keeps retrying the bootstrap, then gives up
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert f"SaslAuthenticationFailedError: {GENERIC.format(mechanism)}" in logged, logged[-3000:]


def test_the_handshake_lists_every_enabled_mechanism_and_v0_carries_scram(scram_frontend: FrontendServer) -> None:
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-512"]
    client = WireClient(scram_frontend.port)
    try:
        assert client.call(18, 3, ApiVersionsRequest("qp-scram", "1.0")).error_code == 0
        answer = client.call(17, 0, SaslHandshakeRequest("SCRAM-SHA-512"))
        assert answer.error_code == 0 and answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        bare = "n=scram-alice,r=v0nonce"
        token = f"n,,{bare}".encode()
        client.send_raw(struct.pack(">i", len(token)) + token)  # v0: bare tokens and bare answers
        server_first = client.read_frame()
        assert server_first is not None and server_first.startswith(b"r=v0nonce")
        final, expected = client_final(mechanism, SCRAM_USERS["scram-alice"], bare, server_first)
        client.send_raw(struct.pack(">i", len(final)) + final.encode())
        assert client.read_frame() == b"v=" + base64.b64encode(expected)
        assert client.call(3, 12, MetadataRequest(topics=None)).brokers[0].node_id == 9
    finally:
        client.close()

    wrong = WireClient(scram_frontend.port)
    try:  # v1: SaslAuthenticate frames; a wrong proof is error 58 with Kafka's message, then the connection closes
        assert wrong.call(17, 1, SaslHandshakeRequest("SCRAM-SHA-256")).error_code == 0
        first = wrong.call(36, 2, SaslAuthenticateRequest(b"n,,n=scram-alice,r=abc"))
        assert first.error_code == 0
        final, _ = client_final(SCRAM_MECHANISMS["SCRAM-SHA-256"], "guess", "n=scram-alice,r=abc", first.auth_bytes)
        answer = wrong.call(36, 2, SaslAuthenticateRequest(final.encode()))
        assert (answer.error_code, answer.error_message) == (
            58,
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256",
        )
        assert wrong.closed_by_server()
    finally:
        wrong.close()
    assert not scram_frontend.scram_exchanges  # nothing kept for closed connections
