"""TLS, mutual TLS and operator authorization of the gRPC listeners, over real gRPC on loopback.

Certificates are made at test time with ``cryptography``: a CA, a server certificate for 127.0.0.1 and
localhost, client certificates with CN "ops" and CN "stranger", and an unrelated CA (what a client that
trusts the wrong authority, or a certificate from elsewhere, looks like). The AdminService runs in the
test process over a real ConfigStore, as ``conftest.py`` starts it; one ``launch`` cluster (module scope)
checks the wiring through ``quotaplane up``'s launcher: both listeners under mutual TLS, operator tokens
on the admin side only. The CLI runs as a subprocess, as an operator runs it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from quotaplane.services._security import (
    ClientSecurity,
    ServerSecurity,
    check_tls_answers,
    exposure_warning,
    is_loopback,
)
from quotaplane.services.admin import SERVICE_NAME
from quotaplane.services.launcher import Cluster, launch
from quotaplane.v1 import admin_pb2 as pb
from quotaplane.v1 import admin_pb2_grpc, quota_pb2_grpc
from quotaplane.v1 import config_events_pb2 as events_pb
from quotaplane.v1 import quota_pb2 as quota_pb

from .conftest import COMMAND

_TOKEN = "s3cret-operator-token"
_TIMEOUT_S = 10.0


# --- certificates -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    ops_cert: Path
    ops_key: Path
    stranger_cert: Path
    stranger_key: Path
    other_ca: Path
    foreign_cert: Path  # CN "ops", but signed by the other CA
    foreign_key: Path
    tokens: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None) -> None:
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        path.with_suffix(".key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )


def _builder(cn: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, *, ca: bool) -> x509.CertificateBuilder:
    """A certificate for ``cn`` issued by ``issuer``, valid from 5 minutes ago for a day."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = (
        _builder(cn, _name(cn), key, ca=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )  # digital_signature, key_cert_sign, crl_sign
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    cn: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], *, server: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    builder = _builder(cn, issuer[0].subject, key, ca=False).add_extension(
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
        critical=False,
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer[1], hashes.SHA256()), key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca, other = _ca("quotaplane test CA"), _ca("some other CA")
    _write(d / "ca", ca[0])
    _write(d / "other-ca", other[0])
    _write(d / "server", *_leaf("localhost", ca, server=True))
    _write(d / "ops", *_leaf("ops", ca, server=False))
    _write(d / "stranger", *_leaf("stranger", ca, server=False))
    _write(d / "foreign", *_leaf("ops", other, server=False))
    tokens = d / "tokens"
    tokens.write_text(f"# operators\n{_TOKEN}\n\nanother-token\n")
    return Pki(
        d / "ca.pem",
        d / "server.pem",
        d / "server.key",
        d / "ops.pem",
        d / "ops.key",
        d / "stranger.pem",
        d / "stranger.key",
        d / "other-ca.pem",
        d / "foreign.pem",
        d / "foreign.key",
        tokens,
    )


def _alter(user: str, value: float) -> pb.AlterClientQuotasRequest:
    entity = [events_pb.EntityData(entity_type="user", entity_name=user)]
    op = pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=value)
    return pb.AlterClientQuotasRequest(entries=[pb.AlterClientQuotasRequest.EntryData(entity=entity, ops=[op])])


def _call_alter(address: str, client: ClientSecurity, user: str, value: float = 1024.0) -> grpc.StatusCode:
    """AlterClientQuotas as ``client``; the status code (OK, or the failure's)."""
    with client.channel(address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        try:
            response = stub.AlterClientQuotas(_alter(user, value), timeout=_TIMEOUT_S, metadata=client.metadata())
        except grpc.RpcError as e:
            assert len(e.details().splitlines()) == 1, e.details()  # type: ignore[attr-defined]
            return e.code()  # type: ignore[attr-defined]
    assert [entry.error_code for entry in response.entries] == [0]
    return grpc.StatusCode.OK


def _health(address: str, client: ClientSecurity, service: str = "") -> int:
    with client.channel(address) as channel:
        request = health_pb2.HealthCheckRequest(service=service)
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=_TIMEOUT_S).status


def _services_by_reflection(address: str, client: ClientSecurity) -> set[str]:
    with client.channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        [answer] = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=_TIMEOUT_S
        )
    return {s.name for s in answer.list_services_response.service}


# --- transport ----------------------------------------------------------------------------------------------
def test_tls_works_with_the_ca_and_fails_without_it(pki, start_admin):
    admin = start_admin(ServerSecurity.load(cert_file=pki.server_cert, key_file=pki.server_key))
    assert _call_alter(admin.address, ClientSecurity.load(ca_file=pki.ca), "alice") is grpc.StatusCode.OK
    assert admin.quotas("alice") == [({"user": "alice"}, {"producer_byte_rate": 1024.0})]

    # the system's roots, the wrong CA, plaintext: no handshake, no call
    with grpc.secure_channel(admin.address, grpc.ssl_channel_credentials()) as channel:
        with pytest.raises(grpc.RpcError) as failed:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=_TIMEOUT_S)
        assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
    assert _call_alter(admin.address, ClientSecurity.load(ca_file=pki.other_ca), "bob") is grpc.StatusCode.UNAVAILABLE
    assert _call_alter(admin.address, ClientSecurity(), "bob") is grpc.StatusCode.UNAVAILABLE
    assert admin.quotas("bob") == []


def test_mutual_tls_refuses_clients_without_a_certificate_of_its_ca(pki, start_admin):
    security = ServerSecurity.load(cert_file=pki.server_cert, key_file=pki.server_key, client_ca_file=pki.ca)
    admin = start_admin(security)
    assert not security.operator_auth  # transport only: any certificate of the CA may call
    no_cert = ClientSecurity.load(ca_file=pki.ca)
    foreign = ClientSecurity.load(ca_file=pki.ca, cert_file=pki.foreign_cert, key_file=pki.foreign_key)
    stranger = ClientSecurity.load(ca_file=pki.ca, cert_file=pki.stranger_cert, key_file=pki.stranger_key)
    assert _call_alter(admin.address, no_cert, "alice") is grpc.StatusCode.UNAVAILABLE
    assert _call_alter(admin.address, foreign, "alice") is grpc.StatusCode.UNAVAILABLE
    assert admin.quotas("alice") == []
    assert _call_alter(admin.address, stranger, "alice") is grpc.StatusCode.OK
    assert admin.quotas("alice") == [({"user": "alice"}, {"producer_byte_rate": 1024.0})]


# --- operator authorization ---------------------------------------------------------------------------------
def test_operator_tokens(pki, start_admin):
    security = ServerSecurity.load(cert_file=pki.server_cert, key_file=pki.server_key, tokens_file=pki.tokens)
    admin = start_admin(security)
    assert _TOKEN not in repr(security) and len(security.token_digests) == 2

    def as_token(token: str | None) -> ClientSecurity:
        return ClientSecurity.load(ca_file=pki.ca, token=token)

    assert _call_alter(admin.address, as_token(None), "alice") is grpc.StatusCode.UNAUTHENTICATED
    assert _call_alter(admin.address, as_token("guess"), "alice") is grpc.StatusCode.PERMISSION_DENIED
    assert _call_alter(admin.address, as_token(_TOKEN + "x"), "alice") is grpc.StatusCode.PERMISSION_DENIED
    assert admin.quotas("alice") == []
    with as_token(None).channel(admin.address) as channel:  # a header that is not "Bearer <token>"
        with pytest.raises(grpc.RpcError) as failed:
            admin_pb2_grpc.AdminServiceStub(channel).GetLogOffsets(
                pb.GetLogOffsetsRequest(), timeout=_TIMEOUT_S, metadata=(("authorization", _TOKEN),)
            )
        assert failed.value.code() is grpc.StatusCode.UNAUTHENTICATED
        # reads need the credential too
        with pytest.raises(grpc.RpcError) as failed:
            admin_pb2_grpc.AdminServiceStub(channel).DescribeClientQuotas(
                pb.DescribeClientQuotasRequest(), timeout=_TIMEOUT_S
            )
        assert failed.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert failed.value.details() == "an operator credential is required: a bearer token"
    assert admin.store.end_offset == 0  # nothing was appended by the refused calls

    assert _call_alter(admin.address, as_token(_TOKEN), "alice") is grpc.StatusCode.OK
    assert _call_alter(admin.address, as_token("another-token"), "bob", 2048.0) is grpc.StatusCode.OK
    assert admin.quotas("alice") == [({"user": "alice"}, {"producer_byte_rate": 1024.0})]
    assert admin.quotas("bob") == [({"user": "bob"}, {"producer_byte_rate": 2048.0})]

    # health and reflection stay open
    anonymous = as_token(None)
    assert _health(admin.address, anonymous) == health_pb2.HealthCheckResponse.SERVING
    assert _health(admin.address, anonymous, SERVICE_NAME) == health_pb2.HealthCheckResponse.SERVING
    assert SERVICE_NAME in _services_by_reflection(admin.address, anonymous)


def test_operator_subjects_under_mutual_tls(pki, start_admin):
    security = ServerSecurity.load(
        cert_file=pki.server_cert,
        key_file=pki.server_key,
        client_ca_file=pki.ca,
        tokens_file=pki.tokens,
        operator_subjects=["ops", " "],
    )
    assert security.operator_subjects == {"ops"}
    admin = start_admin(security)

    def with_cert(name: str, token: str | None = None) -> ClientSecurity:
        cert, key = getattr(pki, f"{name}_cert"), getattr(pki, f"{name}_key")
        return ClientSecurity.load(ca_file=pki.ca, cert_file=cert, key_file=key, token=token)

    assert _call_alter(admin.address, with_cert("stranger"), "alice") is grpc.StatusCode.PERMISSION_DENIED
    assert admin.quotas("alice") == []
    assert _call_alter(admin.address, with_cert("ops"), "alice") is grpc.StatusCode.OK
    # any valid credential admits: a stranger's certificate with an operator token
    assert _call_alter(admin.address, with_cert("stranger", _TOKEN), "bob") is grpc.StatusCode.OK
    assert admin.quotas("alice") == [({"user": "alice"}, {"producer_byte_rate": 1024.0})]
    assert admin.quotas("bob") == [({"user": "bob"}, {"producer_byte_rate": 1024.0})]
    assert _health(admin.address, with_cert("stranger")) == health_pb2.HealthCheckResponse.SERVING


def test_check_operator_decisions():
    """The decision table, without a network: which status for which credentials."""
    security = ServerSecurity(cert_chain=b"c", private_key=b"k", client_ca=b"ca", operator_subjects=frozenset({"ops"}))
    ops = {"x509_common_name": [b"ops"]}
    assert security.check_operator((), ops) is None
    assert security.check_operator((), {"x509_common_name": [b"eve"]})[0] is grpc.StatusCode.PERMISSION_DENIED
    assert security.check_operator((), {})[0] is grpc.StatusCode.UNAUTHENTICATED
    # a token when only subjects are configured matches nothing
    assert security.check_operator((("authorization", "Bearer x"),), {})[0] is grpc.StatusCode.PERMISSION_DENIED
    assert ServerSecurity().check_operator((), {}) is None  # unconfigured: open


# --- the CLI ------------------------------------------------------------------------------------------------
def _quotaplane(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    drop = ("QUOTAPLANE_ADMIN", "QUOTAPLANE_PRINCIPAL", "QUOTAPLANE_TOKEN")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if token is not None:
        env["QUOTAPLANE_TOKEN"] = token
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, env=env, timeout=60, check=False)


def _one_error_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, done
    assert done.stdout == "" and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("Error: ")
    return line


def test_cli_with_and_without_a_token(pki, start_admin):
    admin = start_admin(ServerSecurity.load(cert_file=pki.server_cert, key_file=pki.server_key, tokens_file=pki.tokens))
    alter = ["quotas", "--bootstrap-server", admin.address, "--alter", "--add-config", "producer_byte_rate=4096"]
    alice = ["--entity-type", "users", "--entity-name", "alice"]

    done = _quotaplane(*alter, *alice, "--tls-ca", str(pki.ca), "--token", _TOKEN)
    assert (done.returncode, done.stderr, done.stdout) == (0, "", "Completed updating config for user alice.\n")
    assert admin.quotas("alice") == [({"user": "alice"}, {"producer_byte_rate": 4096.0})]

    line = _one_error_line(
        _quotaplane(*alter, "--entity-type", "users", "--entity-name", "bob", "--tls-ca", str(pki.ca)), 1
    )
    assert "operator credential is required" in line and "--token" in line
    line = _one_error_line(_quotaplane(*alter, *alice, "--tls-ca", str(pki.ca), token="wrong"), 1)  # $QUOTAPLANE_TOKEN
    assert line == "Error: the bearer token is not an operator token"
    # without the CA the handshake fails: unreachable, exit 3
    assert "cannot reach the admin service" in _one_error_line(_quotaplane(*alter, *alice, "--token", _TOKEN), 3)
    missing = pki.ca.parent / "missing.pem"
    line = _one_error_line(_quotaplane(*alter, *alice, "--tls-ca", str(missing), "--token", _TOKEN), 1)
    assert str(missing) in line
    assert admin.quotas("bob") == []


def test_cli_with_a_client_certificate(pki, start_admin):
    admin = start_admin(
        ServerSecurity.load(
            cert_file=pki.server_cert, key_file=pki.server_key, client_ca_file=pki.ca, operator_subjects=["ops"]
        )
    )
    tls = ["--bootstrap-server", admin.address, "--tls-ca", str(pki.ca)]
    done = _quotaplane("log", "offsets", *tls, "--tls-cert", str(pki.ops_cert), "--tls-key", str(pki.ops_key))
    assert (done.returncode, done.stderr) == (0, ""), done
    assert done.stdout.splitlines() == ["Log start offset: 0", "Log end offset: 0"]
    line = _one_error_line(
        _quotaplane("log", "offsets", *tls, "--tls-cert", str(pki.stranger_cert), "--tls-key", str(pki.stranger_key)), 1
    )
    assert line == "Error: client certificate CN='stranger' is not an operator"


# --- quotaplane up: the bind warning, bad files ---------------------------------------------------------------
def test_exposure_warning(pki):
    tls_tokens = ServerSecurity.load(cert_file=pki.server_cert, key_file=pki.server_key, tokens_file=pki.tokens)
    tokens_only = ServerSecurity.load(tokens_file=pki.tokens)
    tls_only = ServerSecurity.load(cert_file=pki.server_cert, key_file=pki.server_key)
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
        assert exposure_warning(host, None) is None
    for host in ("0.0.0.0", "::", "192.0.2.10"):
        assert not is_loopback(host), host
        for security in (None, tls_only):
            warning = exposure_warning(host, security)
            assert warning is not None and "\n" not in warning and "no operator authentication" in warning
        assert exposure_warning(host, tls_tokens) is None
        assert "clear text" in (exposure_warning(host, tokens_only) or "")


def test_up_warns_beyond_loopback_without_operator_auth(tmp_path):
    # --shards 0 fails before Ray starts: the warning comes first, then the error; nothing is started
    done = _quotaplane("up", "--data-dir", str(tmp_path / "d"), "--host", "0.0.0.0", "--shards", "0")
    assert done.returncode == 1 and done.stdout == ""
    warning, error = done.stderr.strip().splitlines()
    assert warning.startswith("Warning: listening on 0.0.0.0 (not loopback) with no operator authentication")
    assert error.startswith("Error: --shards must be a positive integer")
    done = _quotaplane("up", "--data-dir", str(tmp_path / "d"), "--shards", "0")  # loopback: no warning
    assert _one_error_line(done, 1).startswith("Error: --shards")


def test_bad_files_are_one_line_errors_naming_the_file(pki, tmp_path):
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    empty = tmp_path / "empty-tokens"
    empty.write_text("# nobody\n\n")
    missing = tmp_path / "missing.pem"
    locked = tmp_path / "locked.key"
    server_key = serialization.load_pem_private_key(pki.server_key.read_bytes(), password=None)
    locked.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pass"),
        )
    )
    cases = [
        (dict(cert_file=pki.server_cert, key_file=locked), "passphrase-protected"),
        (dict(cert_file=missing, key_file=pki.server_key), str(missing)),
        (dict(cert_file=not_pem, key_file=pki.server_key), str(not_pem)),
        (dict(cert_file=pki.server_cert, key_file=not_pem), str(not_pem)),
        (dict(cert_file=pki.server_cert, key_file=pki.ops_key), "does not match"),
        (dict(cert_file=pki.server_cert, key_file=pki.server_key, client_ca_file=not_pem), str(not_pem)),
        (dict(tokens_file=empty), str(empty)),
        (dict(tokens_file=missing), str(missing)),
        (dict(cert_file=pki.server_cert), "private key"),
        (dict(operator_subjects=["ops"]), "mutual TLS"),
        (dict(client_ca_file=pki.ca), "mutual TLS"),
    ]
    for kwargs, expected in cases:
        with pytest.raises(ValueError) as failed:
            ServerSecurity.load(**kwargs)
        message = str(failed.value)
        assert expected in message and "\n" not in message, (kwargs, message)
    with pytest.raises(ValueError, match=str(not_pem)):
        ClientSecurity.load(ca_file=not_pem)
    with pytest.raises(ValueError, match="--tls-key"):
        ClientSecurity.load(cert_file=pki.ops_cert)

    done = _quotaplane("up", "--data-dir", str(tmp_path / "d"), "--tls-cert", str(missing), "--tls-key", str(not_pem))
    assert str(missing) in _one_error_line(done, 1)
    assert not (tmp_path / "d").exists()  # refused before anything started


# --- through launch(): both listeners under mutual TLS -----------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    security = ServerSecurity.load(
        cert_file=pki.server_cert, key_file=pki.server_key, client_ca_file=pki.ca, tokens_file=pki.tokens
    )
    data_dir = Path(tmp_path_factory.mktemp("up")) / "d"
    with launch(
        data_dir, shards=1, admin_port=0, gateway_port=0, metrics_port=None, fsync=False, num_cpus=1, security=security
    ) as c:
        yield c


def test_launch_puts_tls_on_both_listeners_and_tokens_on_admin_only(pki, cluster):
    stranger = ClientSecurity.load(ca_file=pki.ca, cert_file=pki.stranger_cert, key_file=pki.stranger_key)
    assert _call_alter(cluster.admin_address, stranger, "alice") is grpc.StatusCode.UNAUTHENTICATED
    operator = ClientSecurity.load(ca_file=pki.ca, cert_file=pki.stranger_cert, key_file=pki.stranger_key, token=_TOKEN)
    assert _call_alter(cluster.admin_address, operator, "alice", 4096.0) is grpc.StatusCode.OK

    gateway = cluster.gateway_address
    assert gateway is not None
    # the brokers' path: mutual TLS, no operator token
    with stranger.channel(gateway) as channel:
        item = quota_pb.UsageItem(quota_type=quota_pb.PRODUCE, user="alice", client_id="c", value=1.0)
        answer = quota_pb2_grpc.QuotaServiceStub(channel).RecordUsageBatch(
            quota_pb.UsageBatch(batch_id=7, items=[item]), timeout=_TIMEOUT_S
        )
        assert answer.batch_id == 7 and list(answer.throttle_time_ms) == [0]
    for client in (ClientSecurity(), ClientSecurity.load(ca_file=pki.ca)):  # plaintext; TLS without a certificate
        with client.channel(gateway) as channel, pytest.raises(grpc.RpcError) as failed:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=_TIMEOUT_S)
        assert failed.value.code() is grpc.StatusCode.UNAVAILABLE


def test_the_readiness_probe_needs_a_tls_listener(pki, start_admin):
    """``launch``'s readiness check for TLS listeners: a handshake (or the server's alert, under mutual TLS)
    passes; a plaintext listener or a closed port does not."""
    mutual = start_admin(ServerSecurity.load(cert_file=pki.server_cert, key_file=pki.server_key, client_ca_file=pki.ca))
    plain = start_admin(None)
    check_tls_answers("127.0.0.1", int(mutual.address.rpartition(":")[2]), _TIMEOUT_S)
    with pytest.raises(OSError):
        check_tls_answers("127.0.0.1", int(plain.address.rpartition(":")[2]), _TIMEOUT_S)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(OSError):
        check_tls_answers("127.0.0.1", port, _TIMEOUT_S)
