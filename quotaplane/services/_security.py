"""Transport security and operator authorization for quotaplane's gRPC listeners.

Two concerns, kept apart because the two kinds of caller need different things:

- **Transport** (every listener: the AdminService, the usage gateway). With a certificate chain and key the
  listener speaks TLS only; with a client CA as well it is mutual TLS: a client must present a certificate
  signed by that CA, or the handshake fails before any RPC runs. Brokers streaming usage to the gateway get
  the same protection but need no further credential: their path must not depend on an operator's secret.
- **Operator authorization** (the AdminService only). Once operator credentials are configured, every
  AdminService RPC needs one: a bearer token from the tokens file (``authorization: Bearer <token>``), or,
  under mutual TLS, a client certificate whose subject common name is in the operator list. No credential
  is UNAUTHENTICATED, a credential not in the list PERMISSION_DENIED; the RPC body never runs, so nothing
  changes. Health checking and reflection stay open (load balancers and ``grpcurl`` need them, and they
  reveal nothing an operator's service map does not). With no operator credential configured every RPC is
  open, as before this module existed: ``quotaplane up`` then listens on loopback and warns otherwise.

**Who made a change** is the credential's principal, never the caller's claim: the tokens file names each
token (``NAME:TOKEN``: ``User:NAME``; a bare ``TOKEN`` line, the older form, is ``User:admin``), and under
mutual TLS a client certificate is its subject DN mapped by Kafka's ``ssl.principal.mapping.rules``
(:class:`PrincipalMapper`; DEFAULT: ``User:<RFC 2253 subject>``, e.g. ``User:CN=alice,OU=ops``), whether or
not operator subjects are configured. A token wins over a certificate (it names an operator; a certificate
only a peer of the CA). The one credential that may assert another principal is a Kafka frontend's
(``NAME:TOKEN:frontend``, or the one ``up`` makes up for its own frontend at each start): the frontend
authenticated the Kafka client with SASL and forwards its admin requests, so the principal it asserts is the
one recorded (:meth:`ServerSecurity.identity`; the AdminService applies it).

Tokens are kept only as SHA-256 digests (a heap dump or a repr does not leak them) and a presented token is
compared with every digest by :func:`hmac.compare_digest` without stopping at a match, so timing does not
tell which prefix or which entry was close. Files are read and checked once, when the configuration is
built: a missing, unreadable or non-PEM file is a one-line ``ValueError`` naming the file, at start-up,
instead of a handshake failure on the first connection (gRPC itself only parses the PEM when a client
connects). The PEM checks use the standard library's ``ssl`` module, so they also catch a key that does not
belong to its certificate and a passphrase-protected key (gRPC cannot use one).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import socket
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import Any

import grpc

__all__ = [
    "AUTHORIZATION_METADATA",
    "DEFAULT_TOKEN_NAME",
    "FRONTEND_TOKEN_NAME",
    "ClientSecurity",
    "Identity",
    "OperatorToken",
    "PrincipalMapper",
    "ServerSecurity",
    "bind_port",
    "check_tls_answers",
    "exposure_warning",
    "is_loopback",
    "subject_dn",
]

#: The call metadata carrying an operator's bearer token (gRPC lower-cases metadata keys).
AUTHORIZATION_METADATA = "authorization"
_BEARER = "bearer "
_CERTIFICATE_MARKER = b"-----BEGIN CERTIFICATE-----"
#: The principal name of a tokens file's line without a name (``TOKEN`` alone): ``User:admin``.
DEFAULT_TOKEN_NAME = "admin"
#: The principal name of the token ``up`` makes up for its Kafka frontend at each start.
FRONTEND_TOKEN_NAME = "quotaplane-frontend"
#: A tokens file's third field marking a frontend's token: it may assert the Kafka client's principal.
FRONTEND_ROLE = "frontend"

_File = str | PathLike[str]


# --- reading and checking files ---------------------------------------------------------------------------
def _read(path: _File, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read the {what} {path}: {e.strerror or e}") from None


def _read_certificates(path: _File, what: str) -> bytes:
    """A PEM file of one or more certificates, checked by loading it as OpenSSL would."""
    data = _read(path, what)
    if _CERTIFICATE_MARKER not in data:
        raise ValueError(f"the {what} {path} is not a PEM certificate file (no '-----BEGIN CERTIFICATE-----')")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=data.decode("ascii", errors="replace"))
    except (ssl.SSLError, ValueError) as e:
        raise ValueError(f"the {what} {path} holds no valid PEM certificate: {_ssl_reason(e)}") from None
    return data


def _refuse_passphrase() -> str:
    raise ValueError("passphrase-protected")


def _read_key_pair(cert_path: _File, key_path: _File) -> tuple[bytes, bytes]:
    """The server's certificate chain and private key, checked to be PEM and to belong together."""
    chain = _read_certificates(cert_path, "TLS certificate")
    key = _read(key_path, "TLS private key")
    if b"PRIVATE KEY-----" not in key:
        raise ValueError(f"the TLS private key {key_path} is not a PEM private key (no '-----BEGIN ... PRIVATE KEY')")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_path, key_path, password=_refuse_passphrase)
    except ValueError:
        raise ValueError(f"the TLS private key {key_path} is passphrase-protected; gRPC needs it unencrypted") from None
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in (e.reason or "") or "key values mismatch" in str(e):
            raise ValueError(f"the TLS private key {key_path} does not match the certificate {cert_path}") from None
        raise ValueError(f"the TLS private key {key_path} cannot be used: {_ssl_reason(e)}") from None
    except OSError as e:
        raise ValueError(f"cannot read the TLS private key {key_path}: {e.strerror or e}") from None
    return chain, key


def _ssl_reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    text = reason if isinstance(reason, str) and reason else str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _is_token(token: str) -> bool:
    """Whether ``token`` can ride in ``authorization: Bearer <token>``: printable ASCII, no spaces."""
    return not any(c.isspace() for c in token) and token.isprintable() and token.isascii()


@dataclass(frozen=True)
class OperatorToken:
    """One accepted bearer token: its SHA-256 digest, the principal it authenticates, and whether its holder may
    record a change under another principal (``on_behalf_of``: the Kafka frontend, which authenticated the Kafka
    client itself and forwards its admin requests)."""

    digest: bytes = field(repr=False)
    principal: str
    on_behalf_of: bool = False


def _token_line(path: _File, number: int, line: str) -> OperatorToken:
    """``TOKEN`` (principal ``User:admin``), ``NAME:TOKEN`` (principal ``User:NAME``) or ``NAME:TOKEN:frontend``
    (the same, and it may assert the Kafka client's principal)."""
    fields = line.split(":")
    if len(fields) > 3 or (len(fields) == 3 and fields[2] != FRONTEND_ROLE):
        raise ValueError(
            f"the operator tokens file {path} line {number}: expected TOKEN, NAME:TOKEN or NAME:TOKEN:{FRONTEND_ROLE}"
        )
    name, token = (DEFAULT_TOKEN_NAME, fields[0]) if len(fields) == 1 else (fields[0], fields[1])
    if not name or not _is_token(name):
        raise ValueError(f"the operator tokens file {path} line {number}: the name is empty or not printable ASCII")
    if not token or not _is_token(token):  # never echo the token: it is a secret
        raise ValueError(f"the operator tokens file {path} line {number}: a token with spaces or non-ASCII characters")
    return OperatorToken(_digest(token), f"User:{name}", len(fields) == 3)


def _read_tokens(path: _File) -> tuple[OperatorToken, ...]:
    """One token a line (:func:`_token_line`); blank lines and ``#`` comments are skipped. Only the digests are
    kept. A token listed twice is refused: it could not say which principal it authenticates."""
    data = _read(path, "operator tokens file")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ValueError(f"the operator tokens file {path} is not UTF-8 text") from None
    tokens = [
        _token_line(path, number, line.strip())
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#")
    ]
    if not tokens:
        raise ValueError(f"the operator tokens file {path} holds no token (one a line)")
    if len({t.digest for t in tokens}) != len(tokens):
        raise ValueError(f"the operator tokens file {path} lists a token twice")
    return tuple(tokens)


# --- client certificates as principals (Kafka's ssl.principal.mapping.rules) ------------------------------
# Kafka's SslPrincipalMapper grammar: DEFAULT, or RULE:pattern/replacement/ with an optional L or U after it
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_JAVA_REPLACEMENT = re.compile(r"\\(.)|\$(\d+)|\$\{(\w+)\}")


@dataclass(frozen=True)
class _MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        """As Kafka's ``Rule.apply``: DEFAULT is the DN; a rule whose pattern matches the whole DN replaces
        every match (Java's ``replaceAll``, ``$1`` back references) and lower- or upper-cases the result."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self._replace, dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result

    def _replace(self, match: re.Match[str]) -> str:
        def one(part: re.Match[str]) -> str:
            literal, number, name = part.groups()
            if literal is not None:
                return literal
            return match.group(int(number) if number is not None else name) or ""

        return _JAVA_REPLACEMENT.sub(one, self.replacement)


@dataclass(frozen=True)
class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: a client certificate's subject DN (RFC 2253, as Java's
    ``X500Principal.getName()``: ``CN=alice,OU=ops,O=Example``) to the name of its ``User:`` principal. The
    first rule that applies decides; none applying is a ``ValueError`` (Kafka: ``NoMatchingRule``, the
    connection fails authentication). ``DEFAULT``, Kafka's default, keeps the whole DN."""

    rules: tuple[_MappingRule, ...] = (_MappingRule(None),)
    text: str = "DEFAULT"

    @classmethod
    def parse(cls, text: str) -> PrincipalMapper:
        """Rules as Kafka writes them, comma-separated: ``RULE:^CN=(.*?),OU=(.*?)$/$1/L,DEFAULT``."""
        rules = []
        for match in _RULE_SPLITTER.finditer(text.strip()):
            rule = match.group(1)
            if not rule and match.start() == len(text.strip()):
                break
            parsed = _RULE_PARSER.match(rule)
            if parsed is None or parsed.end() != len(rule) or (parsed.group(1) or parsed.group(2)) is None:
                raise ValueError(f"invalid ssl.principal.mapping.rules rule: {rule!r}")
            if parsed.group(1) is not None:
                rules.append(_MappingRule(None))
            else:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as e:
                    raise ValueError(f"invalid ssl.principal.mapping.rules pattern {parsed.group(2)!r}: {e}") from None
                rules.append(_MappingRule(pattern, parsed.group(3), parsed.group(4)))
        if not rules:
            raise ValueError("ssl.principal.mapping.rules holds no rule")
        return cls(tuple(rules), text.strip())

    def principal(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return f"User:{name}"
        raise ValueError(f"no ssl.principal.mapping.rules rule applies to {dn}")


# Java's X500Principal.getName() (RFC 2253) keywords; any other attribute is its OID with #hex of the DER value
_DN_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}  # fmt: skip
_DN_STRINGS = {12: "utf-8", 19: "ascii", 22: "ascii", 20: "latin-1", 30: "utf-16-be", 28: "utf-32-be"}


def _der(data: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at ``at``."""
    tag, length = data[at], data[at + 1]
    at += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(data[at : at + n], "big")
        at += n
    if at + length > len(data):
        raise ValueError("truncated DER")
    return tag, at, at + length


def _der_children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    out = []
    while start < end:
        tag, value, stop = _der(data, start)
        out.append((tag, start, value, stop))
        start = stop
    return out


def _oid(raw: bytes) -> str:
    parts, n = [], 0
    for byte in raw[1:]:
        n = (n << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(str(n))
            n = 0
    first = raw[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(map(str, [*head, *parts]))


def _escape_dn_value(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_dn(der_certificate: bytes) -> str:
    """A DER certificate's subject as Java's ``X500Principal.getName()`` writes it (RFC 2253: last RDN first,
    ``CN``/``C``/``L``/``ST``/``O``/``OU``/``STREET``/``DC``/``UID`` by name, other attributes as
    ``OID=#<hex DER>``): what Kafka's ``ssl.principal.mapping.rules`` see (:class:`PrincipalMapper`)."""
    _, cert, _ = _der(der_certificate, 0)
    tbs = _der_children(der_certificate, *_der(der_certificate, cert)[1:])
    fields = tbs[1:] if tbs[0][0] == 0xA0 else tbs  # skip the [0] version
    _tag, _, subject_start, subject_end = fields[4]  # serial, signature, issuer, validity, subject
    rdns = []
    for _tag, _, set_start, set_end in _der_children(der_certificate, subject_start, subject_end):
        avas = []
        for _tag, _, ava_start, ava_end in _der_children(der_certificate, set_start, set_end):
            (_, _, oid_start, oid_end), (value_tag, tlv_start, value_start, value_end) = _der_children(
                der_certificate, ava_start, ava_end
            )[:2]
            oid = _oid(der_certificate[oid_start:oid_end])
            keyword = _DN_KEYWORDS.get(oid)
            if keyword is not None and value_tag in _DN_STRINGS:
                text = der_certificate[value_start:value_end].decode(_DN_STRINGS[value_tag], errors="replace")
                avas.append(f"{keyword}={_escape_dn_value(text)}")
            else:
                avas.append(f"{keyword or oid}=#{der_certificate[tlv_start:value_end].hex()}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


# --- the server side --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerSecurity:
    """A listener's TLS material, the AdminService's operator credentials, and how a caller's credential
    becomes the principal recorded with its changes.

    Build it with :meth:`load` (from files). ``cert_chain`` / ``private_key`` set: TLS; ``client_ca`` set
    as well: mutual TLS. ``tokens`` (each operator token's SHA-256 digest and principal) and
    ``operator_subjects`` (client-certificate common names) are the operator credentials; both empty:
    operator RPCs are open. ``frontend_tokens`` are tokens of trusted Kafka frontends: they admit too, and
    may assert the Kafka client's principal, but do not by themselves close the AdminService to others.
    ``principal_mapper`` maps a client certificate's subject to its principal (Kafka's
    ``ssl.principal.mapping.rules``, DEFAULT: ``User:<subject DN>``).
    """

    cert_chain: bytes | None = field(default=None, repr=False)
    private_key: bytes | None = field(default=None, repr=False)
    client_ca: bytes | None = field(default=None, repr=False)
    tokens: tuple[OperatorToken, ...] = field(default=(), repr=False)
    operator_subjects: frozenset[str] = frozenset()
    frontend_tokens: tuple[OperatorToken, ...] = field(default=(), repr=False)
    principal_mapper: PrincipalMapper = PrincipalMapper()

    def __post_init__(self) -> None:
        if (self.cert_chain is None) != (self.private_key is None):
            raise ValueError("a TLS certificate needs its private key, and a key its certificate")
        if self.client_ca is not None and self.cert_chain is None:
            raise ValueError("mutual TLS (a client CA) needs the server's TLS certificate and key")
        if self.operator_subjects and self.client_ca is None:
            raise ValueError("operator subjects are client-certificate names: they need mutual TLS (a client CA)")

    @classmethod
    def load(
        cls,
        *,
        cert_file: _File | None = None,
        key_file: _File | None = None,
        client_ca_file: _File | None = None,
        tokens_file: _File | None = None,
        operator_subjects: Iterable[str] = (),
        principal_mapping_rules: str = "DEFAULT",
    ) -> ServerSecurity:
        """Read and check the files; a problem is a one-line ``ValueError`` naming the file."""
        if (cert_file is None) != (key_file is None):
            raise ValueError("a TLS certificate needs its private key, and a key its certificate")
        chain = key = None
        if cert_file is not None and key_file is not None:
            chain, key = _read_key_pair(cert_file, key_file)
        client_ca = None if client_ca_file is None else _read_certificates(client_ca_file, "client CA file")
        tokens = () if tokens_file is None else _read_tokens(tokens_file)
        subjects = frozenset(s.strip() for s in operator_subjects if s.strip())
        mapper = PrincipalMapper.parse(principal_mapping_rules)
        return cls(chain, key, client_ca, tokens, subjects, principal_mapper=mapper)

    @property
    def tls(self) -> bool:
        return self.cert_chain is not None

    @property
    def mutual_tls(self) -> bool:
        return self.client_ca is not None

    @property
    def token_digests(self) -> frozenset[bytes]:
        """Every accepted token's digest, operators' and frontends'."""
        return frozenset(t.digest for t in (*self.tokens, *self.frontend_tokens))

    @property
    def operator_auth(self) -> bool:
        """Whether AdminService RPCs need an operator credential."""
        return bool(self.tokens or self.operator_subjects)

    def describe(self) -> str:
        """One line for the operator's console (no secrets: counts and names only)."""
        transport = "mutual TLS" if self.mutual_tls else "TLS" if self.tls else "no TLS"
        auth = []
        if self.tokens:
            names = sorted({t.principal for t in self.tokens})
            auth.append(f"{len(self.tokens)} operator token(s) ({', '.join(names)})")
        if self.operator_subjects:
            auth.append(f"operator subjects {', '.join(sorted(self.operator_subjects))}")
        text = f"{transport}; {' and '.join(auth) if auth else 'no operator authentication'}"
        if self.mutual_tls and self.principal_mapper.text != "DEFAULT":
            text += f"; ssl.principal.mapping.rules {self.principal_mapper.text}"
        return text

    def with_operator_token(self, token: str, name: str = DEFAULT_TOKEN_NAME) -> ServerSecurity:
        """This security with ``token`` accepted as an operator token of principal ``User:<name>`` too."""
        return replace(self, tokens=(*self.tokens, OperatorToken(_digest(token), f"User:{name}")))

    def with_frontend_token(self, token: str, name: str = FRONTEND_TOKEN_NAME) -> ServerSecurity:
        """This security with ``token`` accepted as a Kafka frontend's (``User:<name>``, may assert the Kafka
        client's principal). It admits even when operators are configured, and closes nothing when not."""
        return replace(
            self, frontend_tokens=(*self.frontend_tokens, OperatorToken(_digest(token), f"User:{name}", True))
        )

    def credentials(self) -> grpc.ServerCredentials:
        assert self.cert_chain is not None and self.private_key is not None
        return grpc.ssl_server_credentials(
            [(self.private_key, self.cert_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )

    def _presented(self, metadata: Iterable[tuple[str, str | bytes]]) -> list[str] | tuple[grpc.StatusCode, str]:
        """The bearer tokens of the call, or the refusal of malformed authorization metadata."""
        presented = []
        for key, value in metadata:
            if key != AUTHORIZATION_METADATA:
                continue
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            if text[: len(_BEARER)].lower() != _BEARER or not text[len(_BEARER) :].strip():
                return grpc.StatusCode.UNAUTHENTICATED, "malformed authorization metadata: expected 'Bearer <token>'"
            presented.append(text[len(_BEARER) :].strip())
        return presented

    def _token(self, presented: Sequence[str]) -> OperatorToken | None:
        """The accepted token among ``presented``, if any. Every digest is compared, so the time taken does
        not depend on which one matches (nor how close a wrong one came)."""
        known = (*self.tokens, *self.frontend_tokens)
        found = None
        for token in presented:
            digest = _digest(token)
            for candidate in known:
                if hmac.compare_digest(digest, candidate.digest) and found is None:
                    found = candidate
        return found

    def check_operator(
        self, metadata: Iterable[tuple[str, str | bytes]], auth_context: Mapping[str, Sequence[bytes]]
    ) -> tuple[grpc.StatusCode, str] | None:
        """None when the caller holds an operator credential, else the status and one-line message.

        Any valid credential admits (a good token with a stranger's certificate is still an operator). A
        token or a certificate (when subjects are configured) that matches nothing is PERMISSION_DENIED;
        nothing presented at all is UNAUTHENTICATED.
        """
        if not self.operator_auth:
            return None
        presented = self._presented(metadata)
        if isinstance(presented, tuple):
            return presented
        if presented and self._token(presented) is not None:
            return None
        names = [n.decode(errors="replace") for n in auth_context.get("x509_common_name", ())]
        if self.operator_subjects and any(name in self.operator_subjects for name in names):
            return None
        if presented:
            return grpc.StatusCode.PERMISSION_DENIED, "the bearer token is not an operator token"
        if names and self.operator_subjects:
            return grpc.StatusCode.PERMISSION_DENIED, f"client certificate CN={names[0]!r} is not an operator"
        return (
            grpc.StatusCode.UNAUTHENTICATED,
            "an operator credential is required: a bearer token"
            + (" or an operator's client certificate" if self.operator_subjects else ""),
        )

    def identity(
        self, metadata: Iterable[tuple[str, str | bytes]], auth_context: Mapping[str, Sequence[bytes]]
    ) -> Identity | None:
        """Who the call's credential says the caller is, or None when it presents none this server knows.

        An accepted bearer token is its principal (``User:<name>``; a frontend's may assert another); else,
        under mutual TLS, the client certificate's subject through the mapping rules (Kafka's SSL principal).
        A token wins over a certificate: it names an operator, a certificate only a peer of the CA. A subject
        no rule maps is a ``ValueError``, as Kafka fails such a connection's authentication.
        """
        presented = self._presented(metadata)
        token = None if isinstance(presented, tuple) else self._token(presented)
        if token is not None:
            return Identity(token.principal, token.on_behalf_of)
        if self.mutual_tls:  # every caller presented a certificate of the CA: its subject is who it is
            subjects = auth_context.get("x509_subject", ())
            if not subjects:
                raise ValueError("the client certificate's subject is not available")
            return Identity(self.principal_mapper.principal(subjects[0].decode(errors="replace")), False)
        if self.operator_auth:  # the operator check admitted no one without a token: never fall back to a claim
            raise ValueError("no operator credential identifies the caller")
        return None

    def operator_interceptor(self, *services: str) -> grpc.ServerInterceptor:
        """A server interceptor requiring an operator credential on every method of ``services`` (full
        names); other services (health, reflection) pass untouched."""
        return _OperatorInterceptor(self, tuple(f"/{s}/" for s in services))


@dataclass(frozen=True)
class Identity:
    """A caller as its credential proves it: its principal, and whether it may act for another principal."""

    principal: str
    on_behalf_of: bool = False


def _guard(behavior: Callable[..., Any], security: ServerSecurity) -> Callable[..., Any]:
    def guarded(request_or_iterator: Any, context: grpc.ServicerContext) -> Any:
        refused = security.check_operator(context.invocation_metadata() or (), context.auth_context() or {})
        if refused is not None:
            context.abort(*refused)
        return behavior(request_or_iterator, context)

    return guarded


class _OperatorInterceptor(grpc.ServerInterceptor):
    """Checks the credential inside the handler, where the ServicerContext (and so the TLS peer's
    certificate, ``auth_context``) is available; ``handler_call_details`` alone has only the metadata."""

    def __init__(self, security: ServerSecurity, prefixes: tuple[str, ...]) -> None:
        self._security = security
        self._prefixes = prefixes

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(self._prefixes):  # type: ignore[attr-defined]
            return handler
        return wrap_rpc_handler(handler, lambda behavior: _guard(behavior, self._security))


def wrap_rpc_handler(
    handler: grpc.RpcMethodHandler, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> grpc.RpcMethodHandler:
    """``handler`` with its behaviour (whichever of the four call shapes it has) replaced by ``wrap(behaviour)``,
    its codecs kept: what a server interceptor that must run inside the handler (with the ServicerContext)
    returns."""
    codecs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(wrap(handler.unary_unary), **codecs)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(wrap(handler.unary_stream), **codecs)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(wrap(handler.stream_unary), **codecs)
    return grpc.stream_stream_rpc_method_handler(wrap(handler.stream_stream), **codecs)


def bind_port(server: grpc.Server, address: str, security: ServerSecurity | None) -> int:
    """Bind ``address`` on ``server``: TLS when ``security`` has a certificate, else plaintext. Returns the
    port; an address that cannot be bound is an ``OSError`` naming it (gRPC raises RuntimeError or
    returns 0)."""
    try:
        if security is not None and security.tls:
            port = server.add_secure_port(address, security.credentials())
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as e:
        raise OSError(f"cannot listen on {address}: {e}") from None
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    return port


def check_tls_answers(host: str, port: int, timeout_s: float) -> None:
    """Raise unless a TLS server answers on ``host:port``: a readiness probe for a TLS listener.

    The process that started the listener holds no certificate a client would (it may trust no CA the
    server's certificate chains to, and under mutual TLS it has no client certificate), so it cannot make a
    gRPC call to it. It proves instead that the listener completes TLS: a finished handshake, or an alert
    sent by the server (mutual TLS refusing a client without a certificate) both mean it is up and
    speaking TLS; a refused connection, a timeout or a plaintext answer raise ``OSError``. The server's
    identity is not checked: it is this process's own listener.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    with socket.create_connection((host.strip("[]"), port), timeout=timeout_s) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=None) as tls:
                tls.do_handshake()
        except ssl.SSLError as e:
            if "ALERT" not in (e.reason or "").upper():
                raise OSError(f"no TLS server answers on {host}:{port}: {_ssl_reason(e)}") from None


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` is reachable from this machine only (every address it names is
    loopback). ``0.0.0.0``, ``::`` and names resolving to anything else are not."""
    host = host.strip().strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def exposure_warning(host: str, security: ServerSecurity | None) -> str | None:
    """The one-line warning ``quotaplane up`` prints before listening on ``host``, or None.

    Listening beyond loopback with no operator credential lets anyone who reaches the admin port change
    quotas; bearer tokens without TLS beyond loopback travel in clear text. Both are allowed (a trusted
    network, an authenticating proxy in front) but said, once, at start-up.
    """
    if is_loopback(host):
        return None
    if security is None or not security.operator_auth:
        return (
            f"Warning: listening on {host} (not loopback) with no operator authentication: anyone who can "
            "reach the admin port can change quotas (see --operator-tokens-file, --operator-subjects)"
        )
    if security.tokens and not security.tls:
        return (
            f"Warning: listening on {host} (not loopback) without TLS: operator tokens travel in clear text "
            "(see --tls-cert, --tls-key)"
        )
    return None


# --- the client side --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClientSecurity:
    """How a client (the CLI) reaches a listener: the CA to trust, its own certificate for mutual TLS, and
    an operator token. Build it with :meth:`load`.

    TLS is used when a CA or a client certificate is given (with no CA, gRPC's default roots are trusted);
    otherwise the channel is plaintext. The token rides as ``authorization: Bearer <token>`` call metadata.
    """

    root_certificates: bytes | None = field(default=None, repr=False)
    cert_chain: bytes | None = field(default=None, repr=False)
    private_key: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    @classmethod
    def load(
        cls,
        *,
        ca_file: _File | None = None,
        cert_file: _File | None = None,
        key_file: _File | None = None,
        token: str | None = None,
    ) -> ClientSecurity:
        """Read and check the files; a problem is a one-line ``ValueError`` naming the file."""
        if (cert_file is None) != (key_file is None):
            raise ValueError(
                "a client certificate (--tls-cert) needs its private key (--tls-key), and a key its certificate"
            )
        roots = None if ca_file is None else _read_certificates(ca_file, "CA file")
        chain = key = None
        if cert_file is not None and key_file is not None:
            chain, key = _read_key_pair(cert_file, key_file)
        token = token.strip() if token else None
        if token and not _is_token(token):
            raise ValueError("the operator token has spaces or non-ASCII characters")
        return cls(roots, chain, key, token or None)

    @property
    def tls(self) -> bool:
        return self.root_certificates is not None or self.cert_chain is not None

    def channel(self, address: str) -> grpc.Channel:
        if not self.tls:
            return grpc.insecure_channel(address)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates, private_key=self.private_key, certificate_chain=self.cert_chain
        )
        return grpc.secure_channel(address, credentials)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return ((AUTHORIZATION_METADATA, f"Bearer {self.token}"),) if self.token else ()
