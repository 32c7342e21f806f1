"""The principal recorded with a change comes from the caller's credential, over real gRPC on loopback.

A bearer token is its name's principal (``User:<name>``; a line without a name is ``User:admin``); under
mutual TLS a client certificate is its subject through Kafka's ``ssl.principal.mapping.rules`` (DEFAULT:
``User:<subject DN>``). A caller's ``x-quotaplane-principal`` is ignored, except from a Kafka frontend's token,
which asserts the principal of the SASL-authenticated Kafka client it forwards for (checked through the
frontend's own gRPC client, ``frontend._backend.Backend``). Read back from the log: ``EntityHistory``.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import itertools
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from quotaplane.services._security import ClientSecurity, PrincipalMapper, ServerSecurity
from quotaplane.services.admin import PRINCIPAL_BIN_METADATA, PRINCIPAL_METADATA, principal_metadata
from quotaplane.v1 import admin_pb2 as pb
from quotaplane.v1 import admin_pb2_grpc
from quotaplane.v1 import config_events_pb2 as events_pb

_TIMEOUT_S = 10.0
ALICE_TOKEN = "alice-token-0123456789"
LEGACY_TOKEN = "legacy-token-0123456789"
FRONTEND_TOKEN = "frontend-token-0123456789"
ALICE_DN = "CN=alice,OU=ops,O=Example"
#: every change sets a new value: setting the same one again changes nothing, and the history records changes
_VALUES = itertools.count(1024)


# --- certificates: a CA, the server, alice (CN=alice,OU=ops,O=Example), bob (CN=bob) ------------------------------
def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _certificate(
    subject: x509.Name, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None, key, *, kind: str
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer if issuer is not None else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=kind == "ca", path_length=None), critical=True)
    )
    if kind == "ca":
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if kind == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if kind == "server":
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return path.with_suffix(".pem"), path.with_suffix(".key")


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: tuple[Path, Path]
    alice: tuple[Path, Path]
    bob: tuple[Path, Path]
    tokens: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "principal test CA")])
    ca = _certificate(ca_name, None, ca_key, kind="ca")
    ca_path, _ = _write(d / "ca", ca, ca_key)

    def leaf(name: str, subject: x509.Name, kind: str) -> tuple[Path, Path]:
        key = _key()
        return _write(d / name, _certificate(subject, (ca_name, ca_key), key, kind=kind), key)

    # ASN.1 order is most significant first; RFC 2253 (Java's X500Principal.getName) prints it reversed
    alice = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        ]
    )
    assert alice.rfc4514_string() == ALICE_DN
    tokens = d / "tokens"
    tokens.write_text(f"# operators\nalice:{ALICE_TOKEN}\n{LEGACY_TOKEN}\n")
    return Pki(
        ca_path,
        leaf("server", x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]), "server"),
        leaf("alice", alice, "client"),
        leaf("bob", x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bob")]), "client"),
        tokens,
    )


# --- an AdminService in this process over a real ConfigStore ------------------------------------------------------
def _entity(user: str) -> list[events_pb.EntityData]:
    return [events_pb.EntityData(entity_type="user", entity_name=user)]


def _alter_request(user: str) -> pb.AlterClientQuotasRequest:
    """Set ``user``'s producer_byte_rate to a value it never had."""
    op = pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=float(next(_VALUES)))
    return pb.AlterClientQuotasRequest(entries=[pb.AlterClientQuotasRequest.EntryData(entity=_entity(user), ops=[op])])


def _alter(address: str, client: ClientSecurity, user: str, *, claim: str | None = None) -> grpc.StatusCode:
    """Alter ``user``'s quota as ``client``, claiming ``claim`` in ``x-quotaplane-principal``."""
    request = _alter_request(user)
    metadata = (*client.metadata(), *(((PRINCIPAL_METADATA, claim),) if claim else ()))
    with client.channel(address) as channel:
        try:
            answer = admin_pb2_grpc.AdminServiceStub(channel).AlterClientQuotas(
                request, timeout=_TIMEOUT_S, metadata=metadata
            )
        except grpc.RpcError as e:
            return e.code()  # type: ignore[attr-defined]
    assert [e.error_code for e in answer.entries] == [0]
    return grpc.StatusCode.OK


def _recorded(address: str, client: ClientSecurity, user: str) -> list[str]:
    """The principals of ``user``'s changes, oldest first, as the log's history says."""
    request = pb.EntityHistoryRequest(entity=pb.ClientQuotaEntity(entity=_entity(user)))
    with client.channel(address) as channel:
        answer = admin_pb2_grpc.AdminServiceStub(channel).EntityHistory(
            request, timeout=_TIMEOUT_S, metadata=client.metadata()
        )
    return [entry.principal for entry in answer.entries]


def _client(pki: Pki, cert: str | None = None, token: str | None = None) -> ClientSecurity:
    files = {} if cert is None else dict(zip(("cert_file", "key_file"), getattr(pki, cert), strict=True))
    return ClientSecurity.load(ca_file=pki.ca, token=token, **files)


# --- tokens ----------------------------------------------------------------------------------------------------
def test_a_forged_principal_header_is_ignored_and_the_token_name_recorded(pki, start_admin):
    security = ServerSecurity.load(cert_file=pki.server[0], key_file=pki.server[1], tokens_file=pki.tokens)
    address = start_admin(security).address
    alice, legacy = _client(pki, token=ALICE_TOKEN), _client(pki, token=LEGACY_TOKEN)
    assert _alter(address, alice, "u1", claim="User:mallory") is grpc.StatusCode.OK
    assert _alter(address, alice, "u1") is grpc.StatusCode.OK
    assert _alter(address, legacy, "u1", claim="User:alice") is grpc.StatusCode.OK  # a nameless line: User:admin
    assert _recorded(address, alice, "u1") == ["User:alice", "User:alice", "User:admin"]
    # the claim does not even get a caller without a credential in: nothing written
    assert _alter(address, _client(pki), "u1", claim="User:alice") is grpc.StatusCode.UNAUTHENTICATED
    assert len(_recorded(address, alice, "u1")) == 3


def test_tokens_file_lines(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"{LEGACY_TOKEN}\nalice:{ALICE_TOKEN}\nkafka-frontend:{FRONTEND_TOKEN}:frontend\n")
    security = ServerSecurity.load(tokens_file=path)
    assert [(t.principal, t.on_behalf_of) for t in security.tokens] == [
        ("User:admin", False),
        ("User:alice", False),
        ("User:kafka-frontend", True),
    ]
    for secret in (ALICE_TOKEN, LEGACY_TOKEN, FRONTEND_TOKEN):  # digests only: no repr or line shows a token
        assert secret not in repr(security) and secret not in security.describe()
    assert "User:alice" in security.describe()
    for bad, expected in [
        (f"alice:{ALICE_TOKEN}:admin\n", "line 1: expected TOKEN, NAME:TOKEN or NAME:TOKEN:frontend"),
        (f"# x\n:{ALICE_TOKEN}\n", "line 2: the name is empty"),
        ("alice:\n", "line 1: a token with spaces"),
        (f"alice:{ALICE_TOKEN}\nbob:{ALICE_TOKEN}\n", "lists a token twice"),
    ]:
        path.write_text(bad)
        with pytest.raises(ValueError) as failed:
            ServerSecurity.load(tokens_file=path)
        assert expected in str(failed.value) and ALICE_TOKEN not in str(failed.value)


# --- client certificates ------------------------------------------------------------------------------------------
def test_the_client_certificate_subject_is_the_principal_under_mutual_tls(pki, start_admin):
    mutual = dict(cert_file=pki.server[0], key_file=pki.server[1], client_ca_file=pki.ca)
    address = start_admin(ServerSecurity.load(**mutual)).address  # transport only: any certificate of the CA may call
    alice, bob = _client(pki, "alice"), _client(pki, "bob")
    assert _alter(address, alice, "u2", claim="User:mallory") is grpc.StatusCode.OK
    assert _alter(address, bob, "u2") is grpc.StatusCode.OK
    assert _recorded(address, alice, "u2") == [f"User:{ALICE_DN}", "User:CN=bob"]

    # operators by common name, a token beside a certificate: the token's principal wins (it names an operator)
    address = start_admin(ServerSecurity.load(**mutual, tokens_file=pki.tokens, operator_subjects=["alice"])).address
    assert _alter(address, alice, "u3", claim="User:mallory") is grpc.StatusCode.OK
    assert _alter(address, _client(pki, "bob", token=LEGACY_TOKEN), "u3") is grpc.StatusCode.OK
    assert _alter(address, bob, "u3") is grpc.StatusCode.PERMISSION_DENIED
    assert _recorded(address, alice, "u3") == [f"User:{ALICE_DN}", "User:admin"]

    # Kafka's ssl.principal.mapping.rules: the first rule that applies; none applying fails authentication
    rules = "RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,DEFAULT"
    address = start_admin(ServerSecurity.load(**mutual, principal_mapping_rules=rules)).address
    assert _alter(address, alice, "u4") is grpc.StatusCode.OK
    assert _alter(address, bob, "u4") is grpc.StatusCode.OK
    assert _recorded(address, alice, "u4") == ["User:alice@ops", "User:CN=bob"]
    address = start_admin(ServerSecurity.load(**mutual, principal_mapping_rules="RULE:^CN=bob$/bob/")).address
    assert _alter(address, alice, "u5") is grpc.StatusCode.UNAUTHENTICATED
    assert _recorded(address, bob, "u5") == []


@pytest.mark.parametrize(
    ("dn", "principal"),
    [  # Kafka's SslPrincipalMapperTest cases
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "User:Duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "User:duke@sme"),
        ("cn=duke,ou=JavaSoft,o=Sun Microsystems", "User:duke"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "User:OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_principal_mapping_rules(dn, principal):
    rules = (
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, "
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, "
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L, DEFAULT"
    )
    assert PrincipalMapper.parse(rules).principal(dn) == principal
    assert PrincipalMapper().principal(dn) == f"User:{dn}"


def test_principal_mapping_rules_upper_case_and_invalid_rules():
    assert PrincipalMapper.parse("RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/U").principal("CN=abc,OU=x") == "User:ABC"
    assert PrincipalMapper.parse("RULE:^CN=(.*)$/u\\$er-$1/").principal("CN=x") == "User:u$er-x"  # \$: a literal $
    with pytest.raises(ValueError, match=r"no ssl\.principal\.mapping\.rules rule applies"):
        PrincipalMapper.parse("RULE:^CN=x$/x/").principal("CN=y")
    for invalid in ("DEFAULTS", "RULE:a/b", "RULE:a/b/X", "DEFAULT,,DEFAULT", "", "RULE:(/x/"):
        with pytest.raises(ValueError):
            PrincipalMapper.parse(invalid)


# --- the Kafka frontend asserts the Kafka client's principal ------------------------------------------------------
def _frontend_alter(address: str, token: str | None, user: str, principal: str) -> None:
    """AlterClientQuotas exactly as the Kafka frontend forwards a Kafka client's (its own gRPC client)."""
    from quotaplane.services.frontend import GrpcTarget
    from quotaplane.services.frontend._backend import Backend

    request = _alter_request(user)

    async def call() -> None:
        backend = Backend(GrpcTarget("127.0.0.1:1"), GrpcTarget(address, token=token), timeout_s=_TIMEOUT_S)
        try:
            answer = await backend.admin_call("AlterClientQuotas", request, principal)
            assert [e.error_code for e in answer.entries] == [0]
        finally:
            await backend.close()

    asyncio.run(call())


def test_the_frontend_token_asserts_the_kafka_principal(tmp_path, start_admin):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice:{ALICE_TOKEN}\n")
    # as up does: a token of its own for the frontend, beside the operators' tokens
    address = start_admin(ServerSecurity.load(tokens_file=tokens).with_frontend_token(FRONTEND_TOKEN)).address
    plain_alice = ClientSecurity.load(token=ALICE_TOKEN)
    _frontend_alter(address, FRONTEND_TOKEN, "u6", "User:kafka-bob")
    _frontend_alter(address, ALICE_TOKEN, "u6", "User:kafka-bob")  # an operator's token asserts nothing
    assert _alter(address, ClientSecurity.load(token=FRONTEND_TOKEN), "u6") is grpc.StatusCode.OK  # no claim
    assert _recorded(address, plain_alice, "u6") == ["User:kafka-bob", "User:alice", "User:quotaplane-frontend"]

    # with no operator credential the AdminService stays open to anyone: the frontend's token closes nothing,
    # and a caller with no credential has nothing but its claim to record
    address = start_admin(ServerSecurity().with_frontend_token(FRONTEND_TOKEN)).address
    anyone = ClientSecurity.load()
    _frontend_alter(address, FRONTEND_TOKEN, "u7", "User:kafka-carol")
    assert _alter(address, anyone, "u7", claim="User:cli-user") is grpc.StatusCode.OK
    assert _alter(address, anyone, "u7") is grpc.StatusCode.OK
    assert _recorded(address, anyone, "u7") == ["User:kafka-carol", "User:cli-user", "User:ANONYMOUS"]


@pytest.mark.parametrize("principal", ["User:jörg", "User:Zoë,OU=ünits", "User:用户", "User:a b\u00a0c", "User:😀"])
def test_a_non_ascii_principal_arrives_intact(tmp_path, start_admin, principal):
    """Plain gRPC metadata is printable ASCII only: a SASL user such as ``jörg`` rides as the UTF-8 bytes of
    ``x-quotaplane-principal-bin``, and the change is recorded under exactly that principal."""
    key, value = principal_metadata(principal)
    assert (key, value) == (PRINCIPAL_BIN_METADATA, principal.encode())
    assert principal_metadata("User:alice") == (PRINCIPAL_METADATA, "User:alice")  # what older servers read
    address = start_admin(ServerSecurity().with_frontend_token(FRONTEND_TOKEN)).address
    frontend = ClientSecurity.load(token=FRONTEND_TOKEN)
    with frontend.channel(address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        stub.AlterClientQuotas(_alter_request("u10"), timeout=_TIMEOUT_S, metadata=(*frontend.metadata(), (key, value)))
        # both claims: the binary one wins (a frontend sends one; a proxy may have added the other)
        both = (*frontend.metadata(), (PRINCIPAL_METADATA, "User:other"), (key, value))
        stub.AlterClientQuotas(_alter_request("u10"), timeout=_TIMEOUT_S, metadata=both)
        # binary metadata that is not UTF-8 names no one: refused, nothing written
        with pytest.raises(grpc.RpcError) as refused:
            bad = (*frontend.metadata(), (PRINCIPAL_BIN_METADATA, b"User:j\xf6rg"))
            stub.AlterClientQuotas(_alter_request("u10"), timeout=_TIMEOUT_S, metadata=bad)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        assert "not UTF-8" in refused.value.details()  # type: ignore[attr-defined]
    assert _recorded(address, frontend, "u10") == [principal, principal]


def test_the_frontends_own_client_carries_a_non_ascii_principal(start_admin):
    """What the Kafka frontend sends for a SASL client ``jörg`` (``frontend._backend.Backend.admin_call``)."""
    address = start_admin(ServerSecurity().with_frontend_token(FRONTEND_TOKEN)).address
    _frontend_alter(address, FRONTEND_TOKEN, "u11", "User:jörg")
    _frontend_alter(address, FRONTEND_TOKEN, "u11", "User:bob")
    assert _recorded(address, ClientSecurity.load(), "u11") == ["User:jörg", "User:bob"]


# --- through quotaplane up's launcher: a SASL client's AlterClientQuotas on the Kafka listener ------------------
def test_a_kafka_clients_principal_is_recorded_through_the_frontend(tmp_path):
    """``launch`` gives its frontend a token of its own; a SASL-authenticated Kafka client's change is recorded
    under that client's principal, an operator's CLI change under the operator token's name."""
    from quotaplane.protocol import (
        AlterClientQuotasRequest,
        ApiVersionsRequest,
        SaslAuthenticateRequest,
        SaslHandshakeRequest,
    )
    from quotaplane.services.frontend import KafkaListener, PlainCredentials
    from quotaplane.services.launcher import launch

    from .frontend.conftest import WireClient

    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice:{ALICE_TOKEN}\n")
    listener = KafkaListener(
        sasl_credentials=PlainCredentials.of({"kafka-admin": "kafka-secret", "jörg": "jörg-secret"}),
        operators=frozenset({"User:kafka-admin", "User:jörg"}),
    )
    with launch(
        tmp_path / "d",
        shards=1,
        admin_port=0,
        gateway_port=0,
        metrics_port=None,
        fsync=False,
        num_cpus=1,
        security=ServerSecurity.load(tokens_file=tokens),
        frontend_port=0,
        kafka_listener=listener,
    ) as cluster:
        assert cluster.frontend_port
        client = WireClient(cluster.frontend_port, client_id="qp-principal")
        try:
            assert client.call(18, 3, ApiVersionsRequest("qp-principal", "1.0")).error_code == 0
            assert client.call(17, 1, SaslHandshakeRequest("PLAIN")).error_code == 0
            assert client.call(36, 2, SaslAuthenticateRequest(b"\x00kafka-admin\x00kafka-secret")).error_code == 0
            Entry = AlterClientQuotasRequest.EntryData
            alter = AlterClientQuotasRequest(
                [Entry([Entry.EntityData("user", "u8")], [Entry.OpData("producer_byte_rate", 4096.0, False)])]
            )
            assert [e.error_code for e in client.call(49, 1, alter).entries] == [0]
        finally:
            client.close()
        # a non-ASCII SASL user name (RFC 4616 is UTF-8): the change is recorded under exactly its principal
        client = WireClient(cluster.frontend_port, client_id="qp-principal-jörg")
        try:
            assert client.call(18, 3, ApiVersionsRequest("qp-principal", "1.0")).error_code == 0
            assert client.call(17, 1, SaslHandshakeRequest("PLAIN")).error_code == 0
            token = "\x00jörg\x00jörg-secret".encode()
            assert client.call(36, 2, SaslAuthenticateRequest(token)).error_code == 0
            alter = AlterClientQuotasRequest(
                [Entry([Entry.EntityData("user", "u9")], [Entry.OpData("producer_byte_rate", 4096.0, False)])]
            )
            assert [e.error_code for e in client.call(49, 1, alter).entries] == [0]
        finally:
            client.close()
        alice = ClientSecurity.load(token=ALICE_TOKEN)
        assert _alter(cluster.admin_address, alice, "u8", claim="User:kafka-admin") is grpc.StatusCode.OK
        assert _recorded(cluster.admin_address, alice, "u8") == ["User:kafka-admin", "User:alice"]
        assert _recorded(cluster.admin_address, alice, "u9") == ["User:jörg"]


# --- quotaplane up --admin-ssl-principal-mapping-rules ----------------------------------------------------------
def _up_args(*flags: str):
    from quotaplane.services.cli._parser import build_parser

    return build_parser().parse_args(["up", *flags])


def test_up_maps_admin_client_certificates_by_its_rules_flag(pki, start_admin):
    """``up --admin-ssl-principal-mapping-rules`` reaches the AdminService's security (what ``launch`` serves
    with): a change made with alice's certificate is recorded under the mapped principal."""
    from quotaplane.services.cli._up import _server_security

    tls = ("--tls-cert", str(pki.server[0]), "--tls-key", str(pki.server[1]), "--tls-client-ca", str(pki.ca))
    rules = "RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,DEFAULT"
    security = _server_security(_up_args(*tls, "--admin-ssl-principal-mapping-rules", rules))
    assert security is not None and security.principal_mapper.text == rules
    assert f"ssl.principal.mapping.rules {rules}" in security.describe()
    address = start_admin(security).address
    assert _alter(address, _client(pki, "alice"), "u12") is grpc.StatusCode.OK
    assert _alter(address, _client(pki, "bob"), "u12") is grpc.StatusCode.OK
    assert _recorded(address, _client(pki, "alice"), "u12") == ["User:alice@ops", "User:CN=bob"]
    default = _server_security(_up_args(*tls))  # no flag: Kafka's DEFAULT, the whole subject DN
    assert default is not None and default.principal_mapper.text == "DEFAULT"


@pytest.mark.parametrize(
    ("rules", "with_ca", "message"),
    [
        ("RULE:^CN=(.*)$/$1/", False, "--admin-ssl-principal-mapping-rules maps client certificates: it needs "
         "--tls-client-ca"),
        ("RULE:a/b/X", True, "--admin-ssl-principal-mapping-rules: invalid ssl.principal.mapping.rules rule"),
    ],
)  # fmt: skip
def test_up_refuses_admin_mapping_rules_that_cannot_apply_in_one_line(pki, tmp_path, capsys, rules, with_ca, message):
    from quotaplane.services.cli import main

    tls = ["--tls-cert", str(pki.server[0]), "--tls-key", str(pki.server[1])]
    if with_ca:
        tls += ["--tls-client-ca", str(pki.ca)]
    code = main(["up", "--data-dir", str(tmp_path / "d"), *tls, "--admin-ssl-principal-mapping-rules", rules])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"Error: {message}") and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "d").exists()  # refused before anything started
