"""What a frontend is configured with (``FrontendConfig``, and ``KafkaListener``: what ``quotaplane up`` passes
through), the TLS context of its Kafka listener, and its counters (``FrontendStats``)."""

from __future__ import annotations

import collections
import dataclasses
import ssl
from dataclasses import dataclass, field
from typing import Any

from quotaplane.services._security import PrincipalMapper
from quotaplane.services.proxy import ProxyConfig

from ._backend import GrpcTarget
from ._sasl import PlainCredentials, ScramCredentials

__all__ = [
    "DEFAULT_FRONTEND_PORT",
    "DEFAULT_MAX_REQUEST_BYTES",
    "PROXY_MAX_REQUEST_BYTES",
    "FrontendConfig",
    "FrontendStats",
    "KafkaListener",
    "tls_context",
]

DEFAULT_FRONTEND_PORT = 9092
#: Kafka's ``socket.request.max.bytes`` is 100 MiB, sized for produce batches. A frontend without an upstream
#: carries telemetry (at most ``telemetry.max.bytes``, 1 MiB by default) and small admin requests, so 8 MiB
#: bounds a connection's buffer with room to spare; a proxy forwards Produce requests, so it takes Kafka's.
DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024
PROXY_MAX_REQUEST_BYTES = 100 * 1024 * 1024
#: The largest THROTTLE wait of an accepted socket before it is abandoned (the shard's own bound is 60 s).
_MAX_ADMISSION_WAIT_S = 55.0
#: Kafka's default ``ssl.principal.mapping.rules``: the whole subject DN.
_DEFAULT_MAPPER = PrincipalMapper()


def tls_context(cert_file: str, key_file: str, client_ca_file: str | None = None) -> ssl.SSLContext:
    """A server TLS context for the Kafka listener, the files checked as the gRPC listeners' are
    (``services/_security.py``: PEM, key matching its certificate, no passphrase): a bad file is a
    one-line ``ValueError`` at start-up. With ``client_ca_file`` clients must present a certificate
    signed by it (Kafka's ``ssl.client.auth=required``)."""
    from .._security import _read_certificates, _read_key_pair

    _read_key_pair(cert_file, key_file)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        ca = _read_certificates(client_ca_file, "client CA file")
        context.load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@dataclass(frozen=True)
class FrontendConfig:
    """How one frontend listens and what it presents to clients."""

    gateway: GrpcTarget
    admin: GrpcTarget
    host: str = "127.0.0.1"
    #: 0: a free port (``FrontendServer.port`` tells which).
    port: int = DEFAULT_FRONTEND_PORT
    #: What Metadata tells clients to connect to; None: ``host`` / the bound port.
    advertised_host: str | None = None
    advertised_port: int | None = None
    #: The broker id presented in Metadata, and the node whose connection budget this frontend counts in.
    node_id: int = 0
    cluster_id: str = "quotaplane"
    #: SASL/PLAIN users; None: no PLAIN.
    sasl_credentials: PlainCredentials | None = None
    #: SASL/SCRAM-SHA-256 and -512 users' stored credentials; None: no SCRAM. Neither: no SASL (the principal
    #: is ``User:ANONYMOUS``, or the client certificate's under mutual TLS).
    scram_credentials: ScramCredentials | None = None
    #: Principals allowed to use the admin APIs; None: no list, open only on a listener that authenticates no
    #: one (no SASL, no client certificates), closed to everyone once it does (``authenticates_clients``).
    operators: frozenset[str] | None = None
    #: TLS on the Kafka listener (``tls_context``; with a client CA, Kafka's ``ssl.client.auth=required``).
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    #: Kafka's ``ssl.principal.mapping.rules``: a client certificate's subject to its principal (SSL listener
    #: with client authentication and no SASL).
    principal_mapper: PrincipalMapper = _DEFAULT_MAPPER
    #: Kafka's ``socket.request.max.bytes``; None: 8 MiB, or 100 MiB (Kafka's default) in proxy mode.
    max_request_bytes: int | None = None
    #: Kafka's ``connections.max.idle.ms`` (10 minutes).
    connections_max_idle_s: float = 600.0
    max_admission_wait_s: float = _MAX_ADMISSION_WAIT_S
    #: Record each request's time on the request quota (and throttle by it), as Kafka does.
    request_quotas: bool = True
    #: How long the batchers wait for more requests before a gateway call; 0 (the default): natural batching,
    #: each batch closes after one pass of the event loop (see ``_batcher.py``).
    linger_s: float = 0.0
    #: Prefix of this frontend's connection ids (unique across the fleet); None: random.
    frontend_id: str | None = None
    #: Proxy mode: forward to this upstream Kafka cluster (see quotaplane.services.proxy); None: the frontend
    #: serves only quotaplane's own APIs.
    upstream: ProxyConfig | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"the Kafka port must be in 0..65535, got {self.port}")
        if self.advertised_port is not None and not 1 <= self.advertised_port <= 65535:
            raise ValueError(f"the advertised port must be in 1..65535, got {self.advertised_port}")
        if self.node_id < 0:
            raise ValueError(f"the node id must be >= 0, got {self.node_id}")
        if self.max_request_bytes is not None and self.max_request_bytes < 64:
            raise ValueError("max_request_bytes is too small for any Kafka request")

    @property
    def request_limit(self) -> int:
        """The largest request accepted (see ``max_request_bytes``)."""
        if self.max_request_bytes is not None:
            return self.max_request_bytes
        return DEFAULT_MAX_REQUEST_BYTES if self.upstream is None else PROXY_MAX_REQUEST_BYTES

    @property
    def sasl_enabled(self) -> bool:
        return self.sasl_credentials is not None or self.scram_credentials is not None

    @property
    def authenticates_clients(self) -> bool:
        """Whether the listener proves who its clients are (SASL, or ``ssl.client.auth=required``). Then an
        operator list is the only grant of the admin APIs: with none, they are refused to every principal (an
        authorizer with no ACL), so turning authentication on never leaves them open to every authenticated
        client. Without authentication every client is ``User:ANONYMOUS`` and nothing could be granted to
        anyone in particular: open, as a broker without ``authorizer.class.name``."""
        return self.sasl_enabled or self.ssl_client_auth

    @property
    def ssl_client_auth(self) -> bool:
        """Whether Kafka clients must present a certificate (``ssl.client.auth=required``)."""
        return self.ssl_context is not None and self.ssl_context.verify_mode == ssl.CERT_REQUIRED

    @property
    def listener_name(self) -> str:
        """Kafka's listener (and security protocol) name, what ConnectionService budgets per listener."""
        tls = self.ssl_context is not None
        if self.sasl_enabled:
            return "SASL_SSL" if tls else "SASL_PLAINTEXT"
        return "SSL" if tls else "PLAINTEXT"


@dataclass(frozen=True)
class KafkaListener:
    """What ``quotaplane up`` passes through to its frontend (everything but the gRPC targets, host and
    port, which the launcher knows)."""

    advertised_host: str | None = None
    advertised_port: int | None = None
    node_id: int = 0
    sasl_credentials: PlainCredentials | None = None
    scram_credentials: ScramCredentials | None = None
    operators: frozenset[str] | None = None
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    principal_mapper: PrincipalMapper = _DEFAULT_MAPPER
    #: Proxy mode (``up --upstream-bootstrap``): the upstream Kafka cluster this frontend fronts.
    upstream: ProxyConfig | None = None

    def config(self, gateway: GrpcTarget, admin: GrpcTarget, host: str, port: int) -> FrontendConfig:
        return FrontendConfig(
            gateway=gateway,
            admin=admin,
            host=host,
            port=port,
            advertised_host=self.advertised_host,
            advertised_port=self.advertised_port,
            node_id=self.node_id,
            sasl_credentials=self.sasl_credentials,
            scram_credentials=self.scram_credentials,
            operators=self.operators,
            ssl_context=self.ssl_context,
            principal_mapper=self.principal_mapper,
            upstream=self.upstream,
        )


@dataclass
class FrontendStats:
    """Counters of one frontend (read them from any thread; they are only written on its loop)."""

    connections_accepted: int = 0
    connections_rejected: int = 0
    connections_throttled: int = 0
    connections_open: int = 0
    protocol_errors: int = 0
    unexpected_errors: int = 0
    backend_errors: int = 0
    sasl_failures: int = 0
    admin_requests: int = 0
    throttled_responses: int = 0
    #: proxy mode: requests sent to the upstream, upstream failures, usage forwarded without a gateway answer
    forwarded_requests: int = 0
    upstream_errors: int = 0
    gateway_fail_open: int = 0
    throttled_fetches: int = 0
    #: (api key, error code) -> responses
    responses: collections.Counter[tuple[int, int]] = field(default_factory=collections.Counter)

    def count(self, api_key: int, error_code: int) -> None:
        self.responses[api_key, error_code] += 1

    def snapshot(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "responses"}
        out["responses"] = {f"{k}:{e}": n for (k, e), n in sorted(self.responses.items())}
        return out
