"""Mutual TLS on the Kafka listener (Kafka's ``ssl.client.auth=required``): a client certificate's subject DN,
through ``ssl.principal.mapping.rules``, is the connection's principal: the one the telemetry carries (so
quotas and exporters see it) and the one recorded with an admin change made through the frontend (the audit).
librdkafka presents a certificate; a client without one, or with one of another CA, gets nothing."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from quotaplane.protocol import AlterClientQuotasRequest, ApiVersionsRequest, DescribeClientQuotasRequest
from quotaplane.services._security import PrincipalMapper
from quotaplane.services.frontend import FrontendServer, serve_frontend, tls_context
from quotaplane.v1 import admin_pb2 as pb
from quotaplane.v1 import config_events_pb2 as events_pb

from ..test_security import _ca, _leaf, _write
from .conftest import Running, WireClient, wait_until

RULES = "RULE:^CN=([^,]*)(,.*)?$/$1/L,DEFAULT"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("kafka-mtls")
    ca, other = _ca("kafka mtls CA"), _ca("another CA")
    _write(d / "ca", ca[0])
    _write(d / "server", *_leaf("localhost", ca, server=True))
    _write(d / "alice", *_leaf("Alice", ca, server=False))
    _write(d / "foreign", *_leaf("Alice", other, server=False))
    return d


@pytest.fixture(scope="module")
def mtls_frontend(running: Running, pki: Path) -> Iterator[FrontendServer]:
    server = serve_frontend(
        running.cluster.gateway_address,
        running.cluster.admin_address,
        port=0,
        advertised_host="localhost",
        node_id=11,
        ssl_context=tls_context(str(pki / "server.pem"), str(pki / "server.key"), str(pki / "ca.pem")),
        principal_mapper=PrincipalMapper.parse(RULES),
        operators=["User:alice"],
    )
    try:
        yield server
    finally:
        server.close()


PRODUCER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Producer
    config = {"bootstrap.servers": "localhost:" + sys.argv[1], "client.id": sys.argv[3], "enable.metrics.push": True,
              "security.protocol": "SSL", "ssl.ca.location": sys.argv[4] + "/ca.pem"}
    if sys.argv[5] != "-":
        config.update({"ssl.certificate.location": sys.argv[4] + "/" + sys.argv[5] + ".pem",
                       "ssl.key.location": sys.argv[4] + "/" + sys.argv[5] + ".key"})
    p = Producer(config)
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        p.poll(0.05)
    p.flush(1)
    """
)


def _produce(port: int, pki: Path, client_id: str, cert: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PRODUCER, str(port), "2.5", client_id, str(pki), cert],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_librdkafka_with_a_certificate_pushes_as_its_subjects_principal(
    running: Running, mtls_frontend: FrontendServer, pki: Path
) -> None:
    assert mtls_frontend.config.listener_name == "SSL" and mtls_frontend.config.ssl_client_auth
    running.cli("client-metrics", "--alter", "--name", "mtls-test", "--metrics", "org.apache.kafka.producer.",
                "--interval", "1000", "--match", "client_id=qp-mtls-.*")  # fmt: skip
    running.cluster.wait_caught_up(timeout_s=30)
    _produce(mtls_frontend.port, pki, "qp-mtls-alice", "alice")

    def pushed(client_id: str) -> list:
        return [r for r in running.archived() if r.labels.get("client_id") == client_id]

    assert wait_until(lambda: pushed("qp-mtls-alice"))
    assert {r.labels["principal"] for r in pushed("qp-mtls-alice")} == {"User:alice"}  # CN=Alice, lower-cased

    before = mtls_frontend.stats.connections_accepted
    _produce(mtls_frontend.port, pki, "qp-mtls-none", "-")  # no certificate: the handshake fails
    _produce(mtls_frontend.port, pki, "qp-mtls-foreign", "foreign")  # a certificate of another CA
    assert not pushed("qp-mtls-none") and not pushed("qp-mtls-foreign")
    assert mtls_frontend.stats.connections_accepted == before  # refused in the handshake, before any request
    assert mtls_frontend.stats.unexpected_errors == 0


def _tls_client(port: int, pki: Path) -> WireClient:
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    context.load_cert_chain(str(pki / "alice.pem"), str(pki / "alice.key"))
    client = WireClient.__new__(WireClient)
    client.sock = context.wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="localhost"
    )
    client.client_id = "qp-mtls-admin"
    client._correlation = 0
    return client


def test_an_admin_change_is_recorded_under_the_certificates_principal(
    running: Running, mtls_frontend: FrontendServer, pki: Path
) -> None:
    client = _tls_client(mtls_frontend.port, pki)
    try:
        assert client.call(18, 3, ApiVersionsRequest("qp", "1.0")).error_code == 0
        Entry = AlterClientQuotasRequest.EntryData
        alter = AlterClientQuotasRequest(
            [Entry([Entry.EntityData("user", "mtls-u1")], [Entry.OpData("producer_byte_rate", 1024.0, False)])]
        )
        assert [e.error_code for e in client.call(49, 1, alter).entries] == [0]  # User:alice is an operator
    finally:
        client.close()
    entity = pb.ClientQuotaEntity(entity=[events_pb.EntityData(entity_type="user", entity_name="mtls-u1")])
    history = running.admin.EntityHistory(pb.EntityHistoryRequest(entity=entity), timeout=10)
    assert [e.principal for e in history.entries] == ["User:alice"]


def test_a_subject_no_rule_maps_fails_the_connection(running: Running, pki: Path) -> None:
    server = serve_frontend(
        running.cluster.gateway_address,
        running.cluster.admin_address,
        port=0,
        ssl_context=tls_context(str(pki / "server.pem"), str(pki / "server.key"), str(pki / "ca.pem")),
        principal_mapper=PrincipalMapper.parse("RULE:^CN=bob$/bob/"),
    )
    try:
        client = _tls_client(server.port, pki)
        try:
            client.send_raw(struct.pack(">i", 0))
            assert client.closed_by_server()
        finally:
            client.close()
        assert server.stats.protocol_errors >= 1 and server.stats.unexpected_errors == 0
    finally:
        server.close()


def test_mutual_tls_without_an_operator_list_refuses_the_admin_apis(running: Running, pki: Path) -> None:
    """Client certificates authenticate; they grant nothing. With no operator list the admin APIs answer
    CLUSTER_AUTHORIZATION_FAILED to every principal, as Kafka's authorizer does with no ACL granting
    ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster (the same rule as a SASL listener with no list)."""
    server = serve_frontend(
        running.cluster.gateway_address,
        running.cluster.admin_address,
        port=0,
        ssl_context=tls_context(str(pki / "server.pem"), str(pki / "server.key"), str(pki / "ca.pem")),
        principal_mapper=PrincipalMapper.parse(RULES),
    )
    try:
        assert server.config.authenticates_clients and server.config.operators is None
        client = _tls_client(server.port, pki)
        try:
            assert client.call(18, 3, ApiVersionsRequest("qp", "1.0")).error_code == 0
            Entry = AlterClientQuotasRequest.EntryData
            alter = AlterClientQuotasRequest(
                [Entry([Entry.EntityData("user", "mtls-open")], [Entry.OpData("producer_byte_rate", 1024.0, False)])]
            )
            assert [e.error_code for e in client.call(49, 1, alter).entries] == [31]  # CLUSTER_AUTHORIZATION_FAILED
            describe = DescribeClientQuotasRequest([DescribeClientQuotasRequest.ComponentData("user", 1, None)], False)
            assert client.call(48, 1, describe).error_code == 31
        finally:
            client.close()
    finally:
        server.close()
    entity = pb.ClientQuotaEntity(entity=[events_pb.EntityData(entity_type="user", entity_name="mtls-open")])
    assert not running.admin.EntityHistory(pb.EntityHistoryRequest(entity=entity), timeout=10).entries
