"""SASL/SCRAM without a network: Kafka's ScramFormatterTest, ScramSaslServerTest and ScramCredentialUtilsTest
cases ported, RFC 7677's SHA-256 example through the server, and the credentials file."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.services.frontend._sasl import (
    SCRAM_MECHANISMS,
    SaslError,
    ScramCredential,
    ScramCredentials,
    ScramServer,
    scram_credential_line,
    scram_username,
)

SHA256 = SCRAM_MECHANISMS["SCRAM-SHA-256"]
GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


def saslname(user: str) -> str:
    """Kafka's ``ScramFormatter.saslName`` (the client side)."""
    return user.replace("=", "=3D").replace(",", "=2C")


def client_final(mechanism, password: str, first_bare: str, server_first: bytes) -> tuple[str, bytes]:
    """A correct client-final message for ``server_first``, and the server signature the client expects."""
    fields = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = mechanism.salted_password(password, base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = mechanism.hmac(salted, b"Client Key")
    without_proof = f"c=biws,r={fields['r']}"
    auth = f"{first_bare},{server_first.decode()},{without_proof}".encode()
    signature = mechanism.hmac(mechanism.hash(client_key), auth)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    expected = mechanism.hmac(mechanism.hmac(salted, b"Server Key"), auth)
    return f"{without_proof},p={base64.b64encode(proof).decode()}", expected


def test_rfc7677_example_through_the_server() -> None:
    """RFC 7677 section 3 (Kafka's ScramFormatterTest.rfc7677Example): the server derives the same messages."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credentials = ScramCredentials(
        {("user", "SCRAM-SHA-256"): ScramCredential.from_password(SHA256, "pencil", 4096, salt)}
    )
    server = ScramServer(SHA256, credentials, server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.principal == "User:user"
    assert SHA256.min_iterations == 4096 == SCRAM_MECHANISMS["SCRAM-SHA-512"].min_iterations


def test_hi_is_rfc5802s_iterated_hmac() -> None:
    """Hi() by its definition (U1 = HMAC(p, salt || INT(1)), Ui = HMAC(p, Ui-1), XOR of all), as Kafka computes it."""
    for mechanism in SCRAM_MECHANISMS.values():
        u = hmac.new(b"pw", b"salt" + b"\0\0\0\1", mechanism.hash_name).digest()
        result = u
        for _ in range(2, 4097):
            u = hmac.new(b"pw", u, mechanism.hash_name).digest()
            result = bytes(a ^ b for a, b in zip(result, u, strict=True))
        assert mechanism.salted_password("pw", b"salt", 4096) == result


@pytest.mark.parametrize("user", ["user1", "123", "1,2", "user=A", "user==B", "user,1", "user 1", ",", "=", ",=", "=="])
def test_sasl_name_round_trip(user: str) -> None:
    """Kafka's ScramFormatterTest.saslName."""
    name = saslname(user)
    assert "," not in name and "=" not in name.replace("=2C", "").replace("=3D", "")
    assert scram_username(name) == user


def test_sasl_name_with_a_bare_equals_is_invalid() -> None:
    with pytest.raises(ValueError):
        scram_username("a=b")


@settings(deadline=None, max_examples=50)
@given(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=20))
def test_any_ascii_user_authenticates_under_its_sasl_name(user: str) -> None:
    credentials = ScramCredentials({(user, "SCRAM-SHA-256"): ScramCredential.from_password(SHA256, "pw", 4096, b"s")})
    server = ScramServer(SHA256, credentials)
    bare = f"n={saslname(user)},r=abc"
    final, expected = client_final(SHA256, "pw", bare, server.evaluate(f"n,,{bare}".encode()))
    assert server.evaluate(final.encode()) == b"v=" + base64.b64encode(expected)
    assert server.principal == f"User:{user}"


# --- ScramSaslServerTest ------------------------------------------------------------------------------------
@pytest.fixture(params=sorted(SCRAM_MECHANISMS))
def mechanism(request):
    return SCRAM_MECHANISMS[request.param]


@pytest.fixture(scope="module")
def users() -> ScramCredentials:
    return ScramCredentials.of({"userA": "passwordA", "userB": "passwordB"})


def test_no_authorization_id(mechanism, users) -> None:
    assert ScramServer(mechanism, users).evaluate(b"n,,n=userA,r=nonce1")


def test_authorization_id_equal_to_the_user(mechanism, users) -> None:
    assert ScramServer(mechanism, users).evaluate(b"n,a=userA,n=userA,r=nonce1")


def test_authorization_id_other_than_the_user(mechanism, users) -> None:
    with pytest.raises(SaslError) as failed:
        ScramServer(mechanism, users).evaluate(b"n,a=userB,n=userA,r=nonce1")
    assert str(failed.value) == (
        "Authentication failed: Client requested an authorization id that is different from username"
    )


def test_full_exchange_and_every_failure_is_kafkas_generic_message(mechanism, users) -> None:
    generic = GENERIC.format(mechanism.name)
    server = ScramServer(mechanism, users)
    bare = "n=userA,r=fyko+d2lbbFgONRv9qkxdawL"
    first = server.evaluate(f"n,,{bare}".encode())
    assert first.startswith(b"r=fyko+d2lbbFgONRv9qkxdawL") and b",i=4096" in first
    final, expected = client_final(mechanism, "passwordA", bare, first)
    assert server.evaluate(final.encode()) == b"v=" + base64.b64encode(expected)
    assert server.principal == "User:userA"
    with pytest.raises(SaslError, match=generic):  # nothing after the end of the exchange
        server.evaluate(final.encode())

    def fails(first_message: bytes, final_of=None) -> None:
        server = ScramServer(mechanism, users)
        with pytest.raises(SaslError) as failed:
            answer = server.evaluate(first_message)
            server.evaluate(final_of(answer).encode())
        assert str(failed.value) == generic

    fails(b"n,,n=nobody,r=abc")  # unknown user
    fails(b"y,,n=userA,r=abc")  # channel binding: only "n" is supported
    fails(b"n,,n=userA,r=abc,tokenauth=true")  # a delegation token: none exists
    fails(b"n,,n=us=er,r=abc")  # not a SASL name
    fails(b"garbage")
    fails(b"n,,n=userA,r=abc", lambda answer: client_final(mechanism, "wrong", "n=userA,r=abc", answer)[0])
    wrong_nonce = lambda answer: client_final(mechanism, "passwordA", "n=userA,r=abc", answer)[0].replace(  # noqa: E731
        ",r=abc", ",r=abd"
    )
    fails(b"n,,n=userA,r=abc", wrong_nonce)
    fails(b"n,,n=userA,r=abc", lambda answer: "c=biws,r=x,p=AAAA")
    # a proof of the wrong length
    fails(b"n,,n=userA,r=abc", lambda answer: f"c=biws,{answer.decode().split(',')[0]},p=AAAA")
    # a SHA-256 credential does not answer SHA-512 and the reverse: the user has none for that mechanism
    only256 = ScramCredentials({("u", "SCRAM-SHA-256"): ScramCredential.from_password(SHA256, "p")})
    with pytest.raises(SaslError):
        ScramServer(SCRAM_MECHANISMS["SCRAM-SHA-512"], only256).evaluate(b"n,,n=u,r=abc")


def test_too_few_iterations_are_refused(mechanism) -> None:
    weak = ScramCredentials({("u", mechanism.name): ScramCredential.from_password(mechanism, "p", 4095)})
    with pytest.raises(SaslError, match=GENERIC.format(mechanism.name)):
        ScramServer(mechanism, weak).evaluate(b"n,,n=u,r=abc")


# --- ScramCredentialUtilsTest and the file ---------------------------------------------------------------------
def test_credential_string_round_trip() -> None:
    credential = ScramCredential.from_password(SHA256, "password", 4096)
    text = credential.to_string()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=4096")
    assert ScramCredential.parse(text) == credential
    assert "password" not in repr(credential) and base64.b64encode(credential.stored_key).decode() not in repr(
        credential
    )
    for bad in ("", "salt=abc", text.replace("iterations=4096", "iterations=x"), text + ",extra=1"):
        with pytest.raises(ValueError):
            ScramCredential.parse(bad)
    salted = hashlib.pbkdf2_hmac("sha256", b"password", credential.salt, 4096)
    assert credential.stored_key == hashlib.sha256(hmac.new(salted, b"Client Key", "sha256").digest()).digest()


def test_credentials_file(tmp_path) -> None:
    path = tmp_path / "scram"
    lines = [scram_credential_line("alice", m, "alice-secret") for m in SCRAM_MECHANISMS]
    path.write_text("# users\n\n" + "\n".join(lines) + "\n" + scram_credential_line("a:b", "SCRAM-SHA-512", "x") + "\n")
    loaded = ScramCredentials.load(path)
    assert set(loaded.credentials) == {("alice", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-512"), ("a:b", "SCRAM-SHA-512")}
    assert "alice-secret" not in repr(loaded)
    cases = {
        "alice:PLAIN:" + lines[0].split(":", 2)[2]: "unknown mechanism",
        lines[0] + "\n" + lines[0]: "given twice",
        "alice:SCRAM-SHA-256:salt=abc": "line 1",
        scram_credential_line("bob", "SCRAM-SHA-256", "p", 1000): "fewer than",
        "alice-secret": "expected 'user:MECHANISM:credential'",
        "# nothing": "holds no",
    }
    for text, expected in cases.items():
        path.write_text(text + "\n")
        with pytest.raises(ValueError) as failed:
            ScramCredentials.load(path)
        message = str(failed.value)
        secret = text.partition("stored_key=")[2][:16]  # a credential is never echoed
        assert expected in message and "\n" not in message and (not secret or secret not in message), message
    with pytest.raises(ValueError, match="cannot read"):
        ScramCredentials.load(tmp_path / "missing")
