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
"""

from __future__ import annotations

import hashlib
import hmac
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
    "PlainCredentials",
    "SaslError",
    "authenticate_token",
    "parse_plain_token",
    "sasl_authenticate",
    "sasl_handshake",
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


# --- the SaslHandshake / SaslAuthenticate exchange of one connection ----------------------------------
def sasl_handshake(server: FrontendServer, state: ConnectionState, request: Any) -> Any:
    if not server.config.sasl_enabled or state.authenticated or state.sasl_mechanism is not None:
        return SaslHandshakeResponse(error_code=Errors.ILLEGAL_SASL_STATE, mechanisms=[])
    mechanism = request.body.mechanism
    if mechanism != PLAIN:
        return SaslHandshakeResponse(error_code=Errors.UNSUPPORTED_SASL_MECHANISM, mechanisms=[PLAIN])
    state.sasl_mechanism = mechanism
    state.raw_sasl = request.api_version == 0  # v0: the token follows without a Kafka header
    return SaslHandshakeResponse(mechanisms=[PLAIN])


def sasl_authenticate(server: FrontendServer, state: ConnectionState, request: Any) -> Any:
    if not server.config.sasl_enabled or state.authenticated or state.sasl_mechanism is None:
        return SaslAuthenticateResponse(
            error_code=Errors.ILLEGAL_SASL_STATE, error_message="Unexpected SaslAuthenticate request"
        )
    try:
        authenticate_token(server, state, bytes(request.body.auth_bytes))
    except CloseConnection as e:
        return SaslAuthenticateResponse(error_code=Errors.SASL_AUTHENTICATION_FAILED, error_message=e.reason)
    return SaslAuthenticateResponse(error_message=None)


def authenticate_token(server: FrontendServer, state: ConnectionState, token: bytes) -> None:
    credentials = server.config.sasl_credentials
    assert credentials is not None
    try:
        state.principal = credentials.authenticate(token)
    except SaslError as e:
        server.stats.sasl_failures += 1
        raise CloseConnection(str(e)) from None
    state.authenticated = True
