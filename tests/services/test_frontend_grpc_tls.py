"""``up``'s Kafka frontend with TLS and mutual TLS on the gRPC listeners (``launcher/_frontend_tls.py``).

Through ``launch()``: the frontend's channels trust the CA, and under mutual TLS present a client certificate
(the server's own when it allows client authentication, or one given); a real librdkafka client pushes KIP-714
telemetry through the frontend (GetTelemetrySubscriptions / PushTelemetry: the gateway's TelemetryService) and
kafka-python alters a client quota through it (the AdminService), both over those TLS channels. Without a
usable client identity the start is refused in one line naming the flags (checked without Ray, against a real
mutual-TLS AdminService)."""

from __future__ import annotations

import contextlib
import io
import ipaddress
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID

from quotaplane.config import ConfigStore
from quotaplane.services._security import ClientSecurity, ServerSecurity
from quotaplane.services.admin import serve
from quotaplane.services.launcher import LaunchError, launch
from quotaplane.services.launcher._frontend_tls import frontend_targets

from .conftest import FakeClock
from .frontend.conftest import wait_until
from .test_security import _builder, _ca, _key, _leaf, _write


def _dual_use(cn: str, issuer) -> tuple:
    """A service certificate for 127.0.0.1 valid for server and client authentication (cert-manager's kind)."""
    key = _key()
    cert = (
        _builder(cn, issuer[0].subject, key, ca=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(issuer[1], hashes.SHA256())
    )
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    ca = _ca("quotaplane frontend-grpc CA")
    _write(d / "ca", ca[0])
    _write(d / "server", *_leaf("localhost", ca, server=True))  # serverAuth only
    _write(d / "dual", *_dual_use("localhost", ca))
    _write(d / "frontend", *_leaf("kafka-frontend", ca, server=False))
    _write(d / "ops", *_leaf("ops", ca, server=False))
    return d


PRODUCER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": "127.0.0.1:" + sys.argv[1], "client.id": "qp-grpc-tls",
                  "enable.metrics.push": True})
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        p.poll(0.05)
    p.flush(1)
    """
)


def _exercise(cluster, operator_args: list[str]) -> None:
    """librdkafka pushes telemetry through the frontend (the gateway's TelemetryService); an AlterClientQuotas
    through the frontend reaches the AdminService and is read back with the CLI (``operator_args``: its TLS
    flags)."""
    from quotaplane.protocol import AlterClientQuotasRequest, ApiVersionsRequest
    from quotaplane.services.cli import main

    from .frontend.conftest import WireClient

    target = ["--bootstrap-server", cluster.admin_address, *operator_args]
    subscription = ["client-metrics", "--alter", "--name", "grpc-tls", "--metrics", "org.apache.kafka.producer."]
    assert main([*subscription, "--interval", "1000", "--match", "client_id=qp-grpc-tls", *target]) == 0
    cluster.wait_caught_up(timeout_s=30)
    done = subprocess.run(
        [sys.executable, "-c", PRODUCER, str(cluster.frontend_port), "3"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    stats = cluster.frontend.stats
    assert wait_until(lambda: stats.responses[72, 0] >= 1), stats.snapshot()  # PushTelemetry answered by the gateway
    assert stats.backend_errors == 0, stats.snapshot()

    client = WireClient(cluster.frontend_port, client_id="qp-grpc-tls-admin")
    try:
        assert client.call(18, 3, ApiVersionsRequest("qp", "1.0")).error_code == 0
        Entry = AlterClientQuotasRequest.EntryData
        alter = AlterClientQuotasRequest(
            [Entry([Entry.EntityData("user", "tls-user")], [Entry.OpData("producer_byte_rate", 2048.0, False)])]
        )
        assert [e.error_code for e in client.call(49, 1, alter).entries] == [0]
    finally:
        client.close()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["quotas", "--describe", "--entity-type", "users", "--entity-name", "tls-user", *target]) == 0
    assert "producer_byte_rate=2048" in out.getvalue(), out.getvalue()


def _launch(tmp_path: Path, security: ServerSecurity, **options):
    return launch(
        tmp_path / "d",
        shards=1,
        admin_port=0,
        gateway_port=0,
        metrics_port=None,
        frontend_port=0,
        fsync=False,
        num_cpus=1,
        security=security,
        **options,
    )


def test_tls_listeners_frontend_trusts_the_given_ca(pki: Path, tmp_path: Path) -> None:
    security = ServerSecurity.load(cert_file=pki / "server.pem", key_file=pki / "server.key")
    with _launch(tmp_path, security, frontend_client=ClientSecurity.load(ca_file=pki / "ca.pem")) as cluster:
        assert cluster.frontend is not None and cluster.frontend.config.gateway.tls
        _exercise(cluster, ["--tls-ca", str(pki / "ca.pem")])


def test_mutual_tls_listeners_frontend_reuses_a_dual_use_server_certificate(pki: Path, tmp_path: Path) -> None:
    """No frontend flag at all: the client CA is trusted and the server certificate (serverAuth + clientAuth) is
    the frontend's client certificate."""
    security = ServerSecurity.load(cert_file=pki / "dual.pem", key_file=pki / "dual.key", client_ca_file=pki / "ca.pem")
    with _launch(tmp_path, security) as cluster:
        config = cluster.frontend.config
        assert config.gateway.certificate_chain == security.cert_chain and config.admin.token
        _exercise(cluster, ["--tls-ca", str(pki / "ca.pem"), "--tls-cert", str(pki / "ops.pem"),
                            "--tls-key", str(pki / "ops.key")])  # fmt: skip


@pytest.fixture
def mutual_admin(pki: Path, tmp_path: Path):
    """A real mutual-TLS AdminService (serverAuth-only certificate), standing in for both listeners."""
    security = ServerSecurity.load(
        cert_file=pki / "server.pem", key_file=pki / "server.key", client_ca_file=pki / "ca.pem"
    )
    store = ConfigStore.open(tmp_path / "log", fsync=False)
    server, port = serve(store, clock=FakeClock(), security=security)
    try:
        yield SimpleNamespace(
            security=security,
            host="127.0.0.1",
            gateway_port=port,
            admin_port=port,
            frontend_client=None,
            frontend_server_name=None,
            _frontend_token="t",
        )
    finally:
        server.stop(None).wait()
        store.close()


def test_mutual_tls_needs_a_client_certificate_valid_for_client_auth(pki: Path, mutual_admin) -> None:
    with pytest.raises(LaunchError) as refused:  # the serverAuth-only server certificate is refused as a client's
        frontend_targets(mutual_admin)
    message = str(refused.value)
    assert "\n" not in message and "--frontend-tls-cert" in message and "the server certificate as client" in message
    mutual_admin.frontend_client = ClientSecurity.load(
        ca_file=pki / "ca.pem", cert_file=pki / "frontend.pem", key_file=pki / "frontend.key"
    )
    gateway, admin = frontend_targets(mutual_admin)
    assert gateway.certificate_chain == (pki / "frontend.pem").read_bytes() and admin.token == "t"
    mutual_admin.frontend_server_name = "elsewhere.example"  # a name the certificate does not hold
    with pytest.raises(LaunchError, match="--frontend-tls-server-name"):
        frontend_targets(mutual_admin)
