"""SASL/PLAIN for the Kafka listener: the credentials file and the check of one PLAIN token.

Kafka's PLAIN server (``PlainSaslServer``) reads the RFC 4616 message ``[authzid] NUL authcid NUL
passwd``; an authorization id, when given, must equal the authentication id; the principal is then
``User:<authcid>``. Kafka keeps passwords in JAAS config (``user_<name>="<password>"``); quotaplane
reads a plain file instead, ``name:password`` one a line (blank lines and ``#`` comments skipped), so
an operator can mount a Kubernetes secret as is.

Passwords are kept only as SHA-256 digests (a repr or heap dump does not leak them) and a presented
password is checked with :func:`hmac.compare_digest`, so timing does not say how close a guess was.
An unknown user is compared against a dummy digest, so timing does not tell which users exist.
The file is read and checked once at start-up: a missing, unreadable or malformed file is a one-line
``ValueError`` naming the file and line, not a failure on the first client.

SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) follow Kafka's ``ScramSaslServer``: the two-round
exchange (client-first -> server-first with the combined nonce, salt and iterations; client-final with the
proof -> server-final with the server signature), the message grammar of Kafka's ``ScramMessages`` (only the
``n`` GS2 header: no channel binding), ``=2C`` / ``=3D`` in user names, at least 4,096 iterations, and its
errors: a requested authorization id other than the user is told as such; every other failure (unknown user,
wrong proof, malformed message, nonce mismatch, a delegation-token request) is Kafka's one generic message,
``Authentication failed during authentication due to invalid credentials with SASL mechanism <M>``. The
credentials file holds Kafka's stored form (``ScramCredentialUtils``: ``salt=<b64>,stored_key=<b64>,
server_key=<b64>,iterations=N``), one ``user:MECHANISM:credential`` a line: no password is ever read or held,
and a stolen file does not let anyone authenticate (the stored key is H(ClientKey), not ClientKey).
:func:`scram_credential_line` makes such a line from a password (what ``kafka-configs.sh --add-config
'SCRAM-SHA-256=[iterations=8192,password=...]'`` stores).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quotaplane.errors import Errors
from quotaplane.protocol import SaslAuthenticateResponse, SaslHandshakeResponse

from ._state import CloseConnection, ConnectionState

if TYPE_CHECKING:
    from .server import FrontendServer

__all__ = [
    "PLAIN",
    "SCRAM_MECHANISMS",
    "PlainCredentials",
    "SaslError",
    "ScramCredential",
    "ScramCredentials",
    "ScramMechanism",
    "ScramServer",
    "authenticate_token",
    "parse_plain_token",
    "sasl_authenticate",
    "sasl_handshake",
    "scram_credential_line",
]

PLAIN = "PLAIN"
_DUMMY = hashlib.sha256(b"\x00quotaplane-no-such-user").digest()


class SaslError(Exception):
    """Authentication failed; the message is what Kafka would put in SaslAuthenticate's error_message."""


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode()).digest()


@dataclass(frozen=True)
class PlainCredentials:
    """user name -> SHA-256 of the password."""

    digests: dict[str, bytes] = field(repr=False)

    @classmethod
    def load(cls, path: str | PathLike[str]) -> PlainCredentials:
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise ValueError(f"cannot read the SASL credentials file {path}: {e.strerror or e}") from None
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise ValueError(f"the SASL credentials file {path} is not UTF-8 text") from None
        digests: dict[str, bytes] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, password = line.partition(":")
            if not sep or not user or not password:
                raise ValueError(f"the SASL credentials file {path}, line {number}: expected 'user:password'")
            if "\x00" in line or any(c.isspace() for c in user):
                raise ValueError(f"the SASL credentials file {path}, line {number}: a NUL or a space in the user")
            if user in digests:
                raise ValueError(f"the SASL credentials file {path}, line {number}: user {user!r} given twice")
            digests[user] = _digest(password)
        if not digests:
            raise ValueError(f"the SASL credentials file {path} holds no 'user:password' line")
        return cls(digests)

    @classmethod
    def of(cls, users: dict[str, str]) -> PlainCredentials:
        """From a mapping (tests, embedding)."""
        return cls({user: _digest(password) for user, password in users.items()})

    def authenticate(self, token: bytes) -> str:
        """The principal (``User:<name>``) of a PLAIN token, or ``SaslError``."""
        authzid, authcid, password = parse_plain_token(token)
        known = self.digests.get(authcid)
        ok = hmac.compare_digest(_digest(password), known if known is not None else _DUMMY)
        if known is None or not ok:
            raise SaslError("Authentication failed: Invalid username or password")
        if authzid and authzid != authcid:
            raise SaslError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        return f"User:{authcid}"


def parse_plain_token(token: bytes) -> tuple[str, str, str]:
    """``(authzid, authcid, password)`` of an RFC 4616 message, as Kafka's PlainSaslServer splits it."""
    try:
        text = token.decode()
    except UnicodeDecodeError:
        raise SaslError("Invalid SASL/PLAIN response: not UTF-8") from None
    parts = text.split("\x00")
    if len(parts) != 3:
        raise SaslError("Invalid SASL/PLAIN response: expected 3 tokens")
    authzid, authcid, password = parts
    if not authcid:
        raise SaslError("Authentication failed: username not specified")
    if not password:
        raise SaslError("Authentication failed: password not specified")
    return authzid, authcid, password


# --- SASL/SCRAM (RFC 5802 / RFC 7677, as Kafka's ScramSaslServer) ----------------------------------------
@dataclass(frozen=True)
class ScramMechanism:
    """Kafka's ``ScramMechanism``: the mechanism name, its hash, and the fewest iterations a credential may
    have (4,096 for both)."""

    name: str
    hash_name: str
    min_iterations: int = 4096

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """RFC 5802's Hi(): PBKDF2 with HMAC of this hash, one block (Kafka's ``ScramFormatter.hi``)."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)


SCRAM_MECHANISMS: dict[str, ScramMechanism] = {
    m.name: m for m in (ScramMechanism("SCRAM-SHA-256", "sha256"), ScramMechanism("SCRAM-SHA-512", "sha512"))
}
_CREDENTIAL_KEYS = ("salt", "stored_key", "server_key", "iterations")


@dataclass(frozen=True)
class ScramCredential:
    """Kafka's stored SCRAM credential: salt, StoredKey = H(ClientKey), ServerKey, iterations. It proves a
    client's proof and signs the server's answer; it cannot produce a client proof."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    @classmethod
    def from_password(
        cls, mechanism: ScramMechanism, password: str, iterations: int = 4096, salt: bytes | None = None
    ) -> ScramCredential:
        """Kafka's ``ScramFormatter.generateCredential`` (a random salt unless given)."""
        salt = salt if salt is not None else _random_string().encode()
        salted = mechanism.salted_password(password, salt, iterations)
        client_key = mechanism.hmac(salted, b"Client Key")
        return cls(salt, mechanism.hash(client_key), mechanism.hmac(salted, b"Server Key"), iterations)

    @classmethod
    def parse(cls, text: str) -> ScramCredential:
        """Kafka's ``ScramCredentialUtils.credentialFromString``: exactly the four ``key=value`` fields (the
        first ``=`` splits: base64 values end in ``=``); a ``ValueError`` that does not echo the text."""
        fields: dict[str, str] = {}
        for token in text.split(","):
            key, sep, value = token.partition("=")
            if not sep or key in fields:
                raise ValueError("expected salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=N")
            fields[key] = value
        if set(fields) != set(_CREDENTIAL_KEYS):
            raise ValueError("expected salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=N")
        try:
            salt, stored, server = (base64.b64decode(fields[k], validate=True) for k in _CREDENTIAL_KEYS[:3])
        except binascii.Error:
            raise ValueError("a salt or key is not base64") from None
        if not fields["iterations"].isdigit():
            raise ValueError("iterations is not a number")
        return cls(salt, stored, server, int(fields["iterations"]))

    def to_string(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString``."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )


def scram_credential_line(user: str, mechanism: str, password: str, iterations: int = 4096) -> str:
    """One line of a SCRAM credentials file, ``user:MECHANISM:credential``, for ``password``."""
    if mechanism not in SCRAM_MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}; expected one of {', '.join(SCRAM_MECHANISMS)}")
    credential = ScramCredential.from_password(SCRAM_MECHANISMS[mechanism], password, iterations)
    return f"{user}:{mechanism}:{credential.to_string()}"


@dataclass(frozen=True)
class ScramCredentials:
    """(user, mechanism) -> stored credential: Kafka's credential cache, read from a file."""

    credentials: Mapping[tuple[str, str], ScramCredential] = field(repr=False)

    @classmethod
    def load(cls, path: str | PathLike[str]) -> ScramCredentials:
        """``user:MECHANISM:salt=...,stored_key=...,server_key=...,iterations=N`` one a line (split from the
        right: a user name may hold ``:``); blank lines and ``#`` comments skipped. Errors name the file and
        line, never the credential."""
        what = "SASL/SCRAM credentials file"
        try:
            text = Path(path).read_bytes().decode()
        except OSError as e:
            raise ValueError(f"cannot read the {what} {path}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise ValueError(f"the {what} {path} is not UTF-8 text") from None
        credentials: dict[tuple[str, str], ScramCredential] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.rsplit(":", 2)
            if len(parts) != 3 or not parts[0]:
                raise ValueError(f"the {what} {path}, line {number}: expected 'user:MECHANISM:credential'")
            user, mechanism, text_credential = parts
            if mechanism not in SCRAM_MECHANISMS:
                raise ValueError(
                    f"the {what} {path}, line {number}: unknown mechanism {mechanism!r} "
                    f"(expected {' or '.join(SCRAM_MECHANISMS)})"
                )
            if any(c.isspace() or not c.isprintable() for c in user):
                raise ValueError(f"the {what} {path}, line {number}: a space or control character in the user")
            if (user, mechanism) in credentials:
                raise ValueError(f"the {what} {path}, line {number}: {mechanism} of user {user!r} given twice")
            try:
                credential = ScramCredential.parse(text_credential)
            except ValueError as e:
                raise ValueError(f"the {what} {path}, line {number}: {e}") from None
            minimum = SCRAM_MECHANISMS[mechanism].min_iterations
            if credential.iterations < minimum:  # Kafka refuses such a credential when it is stored
                raise ValueError(
                    f"the {what} {path}, line {number}: {credential.iterations} iterations, "
                    f"fewer than {mechanism}'s minimum {minimum}"
                )
            credentials[user, mechanism] = credential
        if not credentials:
            raise ValueError(f"the {what} {path} holds no 'user:MECHANISM:credential' line")
        return cls(credentials)

    @classmethod
    def of(cls, users: Mapping[str, str], iterations: int = 4096) -> ScramCredentials:
        """Both mechanisms' credentials for each ``user: password`` (tests, embedding)."""
        return cls(
            {
                (user, name): ScramCredential.from_password(mechanism, password, iterations)
                for user, password in users.items()
                for name, mechanism in SCRAM_MECHANISMS.items()
            }
        )

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.credentials.get((user, mechanism))


# Kafka's ScramMessages grammar (Java's [\x01-\x7F&&[^=,]] written out)
_VALUE_SAFE = r"[\x01-\x2b\x2d-\x3c\x3e-\x7f]"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_SASLNAME = rf"(?:{_VALUE_SAFE}|=2C|=3D)+"
_B64 = r"[a-zA-Z0-9/+]"
_BASE64 = rf"(?:{_B64}{{4}})*(?:{_B64}{{3}}=|{_B64}{{2}}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<bare>(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_BASE64})"
)
_AUTHZID_MISMATCH = "Authentication failed: Client requested an authorization id that is different from username"


def _random_string() -> str:
    """Kafka's ``ScramFormatter.secureRandomString``: 130 random bits in base 36."""
    n = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, d = divmod(n, 36)
        out = digits[d] + out
        if n == 0:
            return out


def scram_username(saslname: str) -> str:
    """Kafka's ``ScramFormatter.username``: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is invalid."""
    name = saslname.replace("=2C", ",")
    if "=" in name.replace("=3D", ""):
        raise ValueError(f"Invalid username: {saslname}")
    return name.replace("=3D", "=")


class ScramServer:
    """One connection's SCRAM exchange (Kafka's ``ScramSaslServer``): :meth:`evaluate` each client message in
    turn; the answer is the server's message, or :class:`SaslError` with what Kafka tells the client. After the
    exchange (or a failure) the credential is dropped, as Kafka's ``clearCredentials`` does."""

    def __init__(
        self, mechanism: ScramMechanism, credentials: ScramCredentials, *, server_nonce: Callable[[], str] | None = None
    ) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self._server_nonce = server_nonce or _random_string  # tests give RFC 7677's
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.principal: str | None = None
        self.complete = False
        self._failed = False

    def _invalid(self) -> SaslError:
        """Kafka's answer to a ``SaslException`` (every failure but the authorization id's)."""
        return SaslError(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism "
            + self.mechanism.name
        )

    def evaluate(self, response: bytes) -> bytes:
        if self.complete or self._failed:
            self._failed = True
            raise self._invalid()
        try:
            if self._credential is None:
                return self._client_first(response.decode(errors="replace"))
            return self._client_final(response.decode(errors="replace"))
        except SaslError:
            self._failed = True
            self._credential = None
            raise

    def _client_first(self, message: str) -> bytes:
        match = _CLIENT_FIRST.fullmatch(message)
        if match is None:
            raise self._invalid()  # Kafka: Invalid SCRAM client first message format
        extensions = dict(
            item.split("=", 1) for item in match.group("extensions").split(",")[1:]
        )  # Kafka ignores any extension but tokenauth
        if extensions.get("tokenauth", "").lower() == "true":
            raise self._invalid()  # a delegation token: none exists here (Kafka: Invalid tokenId)
        try:
            username = scram_username(match.group("saslname"))
        except ValueError:
            raise self._invalid() from None  # Kafka: Credentials could not be obtained
        credential = self._credentials.get(username, self.mechanism.name)
        if credential is None:
            raise self._invalid()  # Kafka: Invalid user credentials
        authzid = match.group("authzid") or ""
        if authzid and authzid != username:
            raise SaslError(_AUTHZID_MISMATCH)
        if credential.iterations < self.mechanism.min_iterations:
            raise self._invalid()
        self._nonce = match.group("nonce") + self._server_nonce()
        self._server_first = f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        self._client_first_bare = match.group("bare")
        self._credential = credential
        self.principal = f"User:{username}"
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        credential = self._credential
        assert credential is not None
        match = _CLIENT_FINAL.fullmatch(message)
        if match is None or match.group("nonce") != self._nonce:
            raise self._invalid()  # Kafka: the final message's format, or Invalid client nonce
        auth_message = f"{self._client_first_bare},{self._server_first},{match.group('without_proof')}".encode()
        proof = base64.b64decode(match.group("proof"))
        signature = self.mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise self._invalid()
        client_key = bytes(a ^ b for a, b in zip(signature, proof, strict=True))
        if not hmac.compare_digest(self.mechanism.hash(client_key), credential.stored_key):
            raise self._invalid()  # Kafka: Invalid client credentials
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        self._credential = None
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


# --- the SaslHandshake / SaslAuthenticate exchange of one connection ----------------------------------
def enabled_mechanisms(server: FrontendServer) -> list[str]:
    """Kafka's ``sasl.enabled.mechanisms`` of the listener: PLAIN with a PLAIN credentials file, both SCRAM
    mechanisms with a SCRAM one."""
    config = server.config
    mechanisms = [PLAIN] if config.sasl_credentials is not None else []
    if config.scram_credentials is not None:
        mechanisms.extend(SCRAM_MECHANISMS)
    return mechanisms


def sasl_handshake(server: FrontendServer, state: ConnectionState, request: Any) -> Any:
    mechanisms = enabled_mechanisms(server)
    if not server.config.sasl_enabled or state.authenticated or state.sasl_mechanism is not None:
        return SaslHandshakeResponse(error_code=Errors.ILLEGAL_SASL_STATE, mechanisms=[])
    mechanism = request.body.mechanism
    if mechanism not in mechanisms:
        return SaslHandshakeResponse(error_code=Errors.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms)
    state.sasl_mechanism = mechanism
    if mechanism in SCRAM_MECHANISMS:
        assert server.config.scram_credentials is not None
        server.scram_exchanges[state.connection_id] = ScramServer(
            SCRAM_MECHANISMS[mechanism], server.config.scram_credentials
        )
    state.raw_sasl = request.api_version == 0  # v0: the tokens follow without a Kafka header
    return SaslHandshakeResponse(mechanisms=mechanisms)


def sasl_authenticate(server: FrontendServer, state: ConnectionState, request: Any) -> Any:
    if not server.config.sasl_enabled or state.authenticated or state.sasl_mechanism is None or state.raw_sasl:
        return SaslAuthenticateResponse(
            error_code=Errors.ILLEGAL_SASL_STATE, error_message="Unexpected SaslAuthenticate request"
        )
    try:
        answer = authenticate_token(server, state, bytes(request.body.auth_bytes))
    except CloseConnection as e:
        return SaslAuthenticateResponse(error_code=Errors.SASL_AUTHENTICATION_FAILED, error_message=e.reason)
    return SaslAuthenticateResponse(error_message=None, auth_bytes=answer)


def authenticate_token(server: FrontendServer, state: ConnectionState, token: bytes) -> bytes:
    """Evaluate one client token of the connection's mechanism; the server's answer (empty for PLAIN).
    ``CloseConnection`` with Kafka's message when authentication fails (nothing about the secret is in it)."""
    try:
        if state.sasl_mechanism == PLAIN:
            credentials = server.config.sasl_credentials
            assert credentials is not None
            state.principal = credentials.authenticate(token)
            answer = b""
        else:
            exchange = server.scram_exchanges[state.connection_id]
            answer = exchange.evaluate(token)
            if not exchange.complete:
                return answer
            del server.scram_exchanges[state.connection_id]
            assert exchange.principal is not None
            state.principal = exchange.principal
    except SaslError as e:
        server.stats.sasl_failures += 1
        server.scram_exchanges.pop(state.connection_id, None)
        raise CloseConnection(str(e)) from None
    state.authenticated = True
    state.raw_sasl = False
    return answer
