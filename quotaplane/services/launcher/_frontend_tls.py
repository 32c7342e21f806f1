"""How ``up``'s Kafka frontend reaches the gRPC listeners when they speak TLS (or mutual TLS).

The frontend is a gRPC client of the gateway and the AdminService like any broker plug-in, so it needs what
any client needs: the CA that signed the listeners' certificate, and under mutual TLS a client certificate
of the client CA. Given explicitly (``up --frontend-tls-ca / --frontend-tls-cert / --frontend-tls-key``,
``launch(frontend_client=...)``) they are used as given. Otherwise the defaults are tried in order:

- **Trust**: the client CA (``--tls-client-ca``: one CA commonly signs both sides), then the server's own
  certificate file (a full chain ``--tls-cert`` holds its CA).
- **Client identity** under mutual TLS: the server's certificate and key, which TLS accepts as a client's
  only when the certificate allows client authentication (no extended key usage, or ``clientAuth`` beside
  ``serverAuth``, as cert-manager and most internal CAs issue service certificates). A ``serverAuth``-only
  certificate is refused by the handshake: then ``--frontend-tls-cert/--frontend-tls-key`` are needed.

Each candidate is proved the way the frontend will use it: a gRPC health call to both listeners through a
channel with exactly those credentials (gRPC's own TLS stack, so its verification, purpose and host-name
checks are the ones that count). The first that works is the frontend's; none working is one LaunchError
with gRPC's reason and the flags to give. The frontend dials the listening host (loopback for a wildcard
host); ``--frontend-tls-server-name`` names what its certificate must match when that host is not in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._common import LaunchError, host_port

if TYPE_CHECKING:
    from quotaplane.services._security import ClientSecurity, ServerSecurity
    from quotaplane.services.frontend import GrpcTarget

    from ._cluster import Cluster

__all__ = ["frontend_targets"]

_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1", "": "127.0.0.1"}
_CHECK_TIMEOUT_S = 10.0


def _candidates(security: ServerSecurity, given: ClientSecurity | None) -> list[tuple[str, ClientSecurity]]:
    """(what it is, for the error) and the client credentials to try, in order."""
    from quotaplane.services._security import ClientSecurity

    if given is not None and given.root_certificates is not None:
        roots = [("--frontend-tls-ca", given.root_certificates)]
    else:
        known = (("the client CA", security.client_ca), ("--tls-cert's chain", security.cert_chain))
        roots = [(name, ca) for name, ca in known if ca is not None]
    if not security.mutual_tls:
        identities: list[tuple[str, bytes | None, bytes | None]] = [("no client certificate", None, None)]
    elif given is not None and given.cert_chain is not None:
        identities = [("--frontend-tls-cert", given.cert_chain, given.private_key)]
    else:
        identities = [("the server certificate as client", security.cert_chain, security.private_key)]
    return [
        (f"trusting {root_name}, {identity_name}", ClientSecurity(roots_pem, chain, key))
        for root_name, roots_pem in roots
        for identity_name, chain, key in identities
    ]


def _target(address: str, client: ClientSecurity, server_name: str | None, token: str | None = None) -> GrpcTarget:
    from quotaplane.services.frontend import GrpcTarget

    return GrpcTarget(
        address,
        root_certificates=client.root_certificates,
        private_key=client.private_key,
        certificate_chain=client.cert_chain,
        server_name=server_name,
        token=token,
    )


def _health(address: str, client: ClientSecurity, server_name: str | None) -> None:
    """A gRPC health call over exactly these credentials; raises gRPC's error."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    credentials = grpc.ssl_channel_credentials(client.root_certificates, client.private_key, client.cert_chain)
    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    with grpc.secure_channel(address, credentials, options=options) as channel:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=_CHECK_TIMEOUT_S)


def frontend_targets(cluster: Cluster) -> tuple[GrpcTarget, GrpcTarget]:
    """The frontend's gateway and AdminService targets over TLS, proved to work (see the module docstring)."""
    security = cluster.security
    assert security is not None and security.tls and cluster.gateway_port is not None
    host = _WILDCARDS.get(cluster.host, cluster.host)
    gateway, admin = host_port(host, cluster.gateway_port), host_port(host, cluster.admin_port)
    server_name = cluster.frontend_server_name
    failures = []
    for what, client in _candidates(security, cluster.frontend_client):
        try:
            _health(gateway, client, server_name)
            _health(admin, client, server_name)
        except Exception as e:
            details = getattr(e, "details", None)
            reason = str(details() or "") if callable(details) else str(e)
            failures.append(f"{what}: {reason.strip().splitlines()[0] if reason.strip() else type(e).__name__}")
            continue
        return _target(gateway, client, server_name), _target(admin, client, server_name, cluster._frontend_token)
    if not failures:
        failures.append("no CA to trust")
    raise LaunchError(
        "the Kafka frontend cannot reach the TLS gRPC listeners ("
        + "; ".join(failures)
        + "): give it the CA that signed --tls-cert (--frontend-tls-ca)"
        + (
            " and a client certificate of --tls-client-ca valid for client authentication "
            "(--frontend-tls-cert, --frontend-tls-key)"
            if security.mutual_tls
            else ""
        )
        + ", or --frontend-tls-server-name when the certificate does not name --host"
    )
