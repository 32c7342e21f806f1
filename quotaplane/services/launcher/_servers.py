"""The servers ``up`` runs in this process, over the cluster's actors, and the check that each answers.

Ready means answering: each gRPC listener is checked as a client sees it (the gRPC health check says
SERVING) before ``launch`` returns. This process holds no client certificate, so with TLS the readiness
check is a TLS handshake with the listener instead (both servers set SERVING before they listen, so an
answering listener is a serving one). The metrics endpoint stays plain HTTP: Prometheus scrapes it, and
it changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ._common import NAMESPACE, LaunchError, first_line, host_port

if TYPE_CHECKING:
    from ._cluster import Cluster

__all__ = ["start_admin", "start_frontend", "start_gateway", "start_metrics"]


def _check_health(
    address: str, timeout_s: float, service: str | None = None, what: str = "admin service", *, tls: bool = False
) -> None:
    """A gRPC health check (default: the AdminService's), as a client sees it; for a TLS listener, a TLS
    handshake (see the module docstring: this process cannot be the listener's client). LaunchError (one
    line) if it is not serving or does not answer."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from quotaplane.services._security import check_tls_answers
    from quotaplane.services.admin import SERVICE_NAME

    try:
        if tls:
            host, _, port = address.rpartition(":")
            check_tls_answers(host, int(port), timeout_s)
            return
        with grpc.insecure_channel(address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest(service=SERVICE_NAME if service is None else service)
            response = stub.Check(request, timeout=timeout_s)
    except Exception as e:
        raise LaunchError(f"the {what} at {address} does not answer: {first_line(e)}") from None
    if response.status != health_pb2.HealthCheckResponse.SERVING:
        raise LaunchError(f"the {what} at {address} is not serving ({response.status})")


def start_admin(cluster: Cluster, timeout_s: float) -> None:
    """The AdminService backed by the cluster's controller (:class:`ControllerBackend`); ready when it answers."""
    from quotaplane.services.admin import ControllerBackend, serve

    try:
        cluster.server, cluster.admin_port = serve(
            ControllerBackend(cluster.controller),
            host_port(cluster.host, cluster.admin_port),
            security=cluster.security,
            cluster_id=cluster.cluster_id,
            shards=cluster.fleet,
        )
    except OSError as e:
        raise LaunchError(f"{first_line(e)} for the admin service") from None
    _check_health(cluster.admin_address, timeout_s, tls=cluster.security is not None and cluster.security.tls)


def start_gateway(cluster: Cluster, timeout_s: float) -> None:
    """The usage gateway in this process, over the cluster's controller and shards; ready when it answers."""
    from quotaplane.services.gateway import QUOTA_SERVICE_NAME, serve_gateway

    def shard_lookup(shard_id: str) -> Any:  # a shard a reshard added (this process's or another's)
        import ray

        handle = cluster.shards.get(shard_id)
        return handle if handle is not None else ray.get_actor(f"quotaplane-shard-{shard_id}", namespace=NAMESPACE)

    assert cluster.gateway_port is not None
    try:
        cluster.gateway_server, cluster.gateway_port, cluster.gateway = serve_gateway(
            cluster.controller,
            cluster.shards,
            host_port(cluster.host, cluster.gateway_port),
            security=cluster.security,
            shard_lookup=shard_lookup,
        )
    except OSError as e:
        raise LaunchError(f"{first_line(e)} for the usage gateway") from None
    except Exception as e:
        raise LaunchError(f"the usage gateway did not start: {first_line(e)}") from None
    gateway_address = cluster.gateway_address
    assert gateway_address is not None
    tls = cluster.security is not None and cluster.security.tls
    _check_health(gateway_address, timeout_s, QUOTA_SERVICE_NAME, "usage gateway", tls=tls)


def start_frontend(cluster: Cluster) -> None:
    """The Kafka-facing frontend in this process (a thread with its own event loop), a gRPC client of the
    gateway and the AdminService like any other frontend. It presents a token of its own, made up for this
    run (``launch`` added its digest to the accepted ones as a frontend's): it authorizes Kafka principals
    itself, by its operator list, as a broker's authorizer does, and its token is what lets the AdminService
    record the Kafka client's principal it asserts, instead of ignoring it as any other caller's claim. With TLS
    on the listeners its channels use TLS too (``_frontend_tls.py``: the CA, and a client certificate under
    mutual TLS)."""
    from quotaplane.services.frontend import FrontendServer, GrpcTarget, KafkaListener

    assert cluster.frontend_port is not None and cluster.gateway_address is not None
    listener = cluster.kafka_listener or KafkaListener()
    if cluster.security is not None and cluster.security.tls:
        from ._frontend_tls import frontend_targets

        gateway, admin = frontend_targets(cluster)  # the CA to trust and its client certificate, proved
    else:
        gateway = GrpcTarget(cluster.gateway_address)
        admin = GrpcTarget(cluster.admin_address, token=cluster._frontend_token)
    try:
        config = listener.config(gateway, admin, cluster.host, cluster.frontend_port)
        frontend = FrontendServer(config)
        frontend.start()
    except (OSError, ValueError) as e:
        raise LaunchError(first_line(e)) from None
    cluster.frontend = frontend
    cluster.frontend_port = frontend.port


class _ShardsInPlacement(Mapping[str, Any]):
    """The shards the gateway of this process places over now (it follows reshards made by any process), else the
    ones this process started: what the metrics endpoint scrapes, read again at each scrape."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    def _current(self) -> dict[str, Any]:
        gateway = self._cluster.gateway
        if gateway is None or not gateway.follows_reshards:
            return dict(self._cluster.shards)
        return {shard: worker.handle for shard, worker in list(gateway.workers.items())}

    def items(self) -> Any:  # one consistent view per scrape
        return self._current().items()

    def __getitem__(self, shard: str) -> Any:
        return self._current()[shard]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


def start_metrics(cluster: Cluster) -> None:
    """The Prometheus endpoint over the cluster's controller and shards (those in the current placement)."""
    from quotaplane.services.metrics import start_metrics_endpoint

    try:
        cluster.metrics, cluster.metrics_port = start_metrics_endpoint(
            cluster.controller,
            _ShardsInPlacement(cluster),
            host=cluster.host,
            port=cluster.metrics_port,
            gateways=[cluster.gateway] if cluster.gateway is not None else [],
        )
    except OSError as e:
        raise LaunchError(f"{first_line(e)} for the metrics endpoint") from None
