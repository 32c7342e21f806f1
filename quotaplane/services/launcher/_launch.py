""":func:`launch`: check cheaply, start every piece in order, and return once all of them answer.

The order is what makes a start safe to undo and a stop clean: the checks that cost nothing run before Ray
starts; then Ray, the controller, the shards (caught up with the log), the AdminService, the usage gateway,
the Kafka frontend (a client of the gateway) and the metrics endpoint. Any failure closes what was
started (:meth:`Cluster.close` handles a partly started cluster) and is one :class:`LaunchError` line.
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ._checks import (
    SOCKET_PATH_MAX,
    check_port,
    check_port_free,
    checked_resources,
    prepare_data_dir,
    ray_temp_dir_for,
)
from ._cluster import Cluster
from ._cluster_id import adopt_cluster_id, data_dir_cluster_id, local_cluster_id
from ._common import (
    DASHBOARD_HOST,
    DEFAULT_ADMIN_PORT,
    DEFAULT_DATA_DIR,
    DEFAULT_GATEWAY_PORT,
    DEFAULT_HOST,
    DEFAULT_METRICS_PORT,
    DEFAULT_SHARDS,
    NAMESPACE,
    LaunchError,
)
from ._ray import placement_hint, ray_reason, start_ray
from ._reshard import ShardFleet
from ._servers import start_admin, start_frontend, start_gateway, start_metrics

log = logging.getLogger(__name__)

#: The principal the log records for what ``up`` itself changes: a new cluster's shard count, a --shards reshard.
LAUNCH_PRINCIPAL = "User:quotaplane-up"

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from quotaplane.services._security import ClientSecurity, ServerSecurity
    from quotaplane.services.frontend import KafkaListener

__all__ = ["launch"]


def launch(
    data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR,
    *,
    shards: int | None = None,
    admin_port: int = DEFAULT_ADMIN_PORT,
    gateway_port: int | None = DEFAULT_GATEWAY_PORT,
    metrics_port: int | None = DEFAULT_METRICS_PORT,
    host: str = DEFAULT_HOST,
    num_cpus: int | None = None,
    fsync: bool = True,
    ready_timeout_s: float = 60.0,
    say: Callable[[str], None] | None = None,
    security: ServerSecurity | None = None,
    ray_address: str | None = None,
    frontend_port: int | None = None,
    kafka_listener: KafkaListener | None = None,
    shard_resources: Mapping[str, float] | None = None,
    controller_resources: Mapping[str, float] | None = None,
    spread_shards: bool = False,
    frontend_client: ClientSecurity | None = None,
    frontend_server_name: str | None = None,
    ray_dashboard_port: int | None = None,
    shard_standby: bool | None = None,
) -> Cluster:
    """Start everything and return once it answers; :class:`LaunchError` (one line) if it cannot.

    ``ray_address`` (``host:port`` of a running Ray cluster's GCS, or ``auto``) joins that cluster instead
    of starting a private one: the controller and the shards are then *detached* named actors (found again
    by name if they run already, so a second ``up`` or another gateway host shares them), restarted by Ray
    after a crash, and left running when this process stops; the controller's log lives in
    ``data_dir/config`` on the node Ray places it on (a persistent volume in Kubernetes).

    ``admin_port=0`` picks a free port (``Cluster.admin_port`` tells which); so does ``gateway_port=0``
    (``Cluster.gateway_port``); ``gateway_port=None`` starts no gateway. ``say`` receives the start-up
    notes meant for the operator (e.g. that Ray's session went to a fallback directory). ``security``
    (None: plaintext, AdminService open) is passed to the AdminService and the gateway. The data directory's
    cluster id (``DATA_DIR/meta.properties``, made on first use: ``_cluster_id``) is ``Cluster.cluster_id``
    and rides in every AdminService answer.

    ``frontend_port`` (None: none; 0: a free port, ``Cluster.frontend_port``) starts the Kafka-facing
    frontend (``services/frontend/server.py``) as a gRPC client of the gateway and the AdminService, with
    ``kafka_listener``'s advertised address, node id, SASL, operators and TLS. The CLI's ``up`` passes
    9092; this function defaults to none so embedding it claims no Kafka port unasked. With TLS on the gRPC
    listeners the frontend's channels use TLS: ``frontend_client`` (its CA, and its client certificate under
    mutual TLS) or the defaults of ``_frontend_tls.py`` (the client CA or the server chain as CA, the server
    certificate as client), proved by a health call before the frontend starts; ``frontend_server_name`` is
    the name its listeners' certificate must match (default: the host).

    ``ray_dashboard_port`` (None: no dashboard; 0: a free port) opens a private Ray's dashboard on
    127.0.0.1 only, whatever ``host`` is: the dashboard submits jobs and kills actors without authentication,
    so it is this machine's operator's (``Cluster.ray_dashboard_url`` tells where). A joined cluster has its
    own dashboard; the port is then ignored.

    ``shard_resources`` / ``controller_resources`` (Ray custom resources, e.g. ``{"quotaplane_shard": 1}``)
    are asked for by each shard / the controller, so Ray places them, and restarts them, only on raylets
    offering them; ``spread_shards`` spreads the shards over those nodes (Ray's ``SPREAD``). A private Ray
    offers the named resources itself (10,000 of each); a joined cluster must offer them already (else a
    LaunchError saying which raylets need ``ray start --resources=...``). They apply to actors this call
    creates: a joined cluster's running controller and shards are used where they are.

    ``shard_standby`` gives every shard a warm standby (``quotaplane.actors._standby``), on another node than its
    primary when at least two raylets offer ``shard_resources``: when a shard's node or process dies, the standby
    serves its keys from the last usage checkpoint as soon as Ray declares the primary gone, until Ray's restart
    of the primary takes them back (issue 19: served again within 2 s of a node loss). It costs one more shard
    process per shard, following the log. None (the default): standbys where the pair can be placed on two nodes
    (a multi-node cluster, the Helm deployment), none on one node (a private ``up``); True or False forces it.
    """
    from quotaplane.config import MAX_SHARDS

    if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int) or not 0 < shards <= MAX_SHARDS):
        raise LaunchError(f"--shards must be a positive integer (at most {MAX_SHARDS}), got {shards!r}")
    check_port("--admin-port", admin_port)
    check_port("--gateway-port", gateway_port, optional=True)
    if gateway_port and gateway_port == admin_port:
        raise LaunchError(f"--gateway-port and --admin-port must differ, both are {admin_port}")
    check_port("--metrics-port", metrics_port, optional=True)
    check_port("--frontend-port", frontend_port, optional=True)
    check_port("--ray-dashboard-port", ray_dashboard_port, optional=True)
    if frontend_port is not None and gateway_port is None:
        raise LaunchError("the Kafka frontend needs the usage gateway (its telemetry and connection services)")
    if frontend_port and frontend_port in (admin_port, gateway_port, metrics_port):
        raise LaunchError(f"--frontend-port must differ from the admin, gateway and metrics ports, got {frontend_port}")
    if metrics_port and metrics_port in (admin_port, gateway_port):
        raise LaunchError(f"--metrics-port must differ from the admin and gateway ports, got {metrics_port}")
    shard_resources = checked_resources("--shard-resource", shard_resources)
    controller_resources = checked_resources("--controller-resource", controller_resources)
    say = say or (lambda _line: None)
    data_dir = Path(data_dir).absolute()
    lock_fd = prepare_data_dir(data_dir)
    try:
        # a private up's id is its data dir's; a joining one's is the running cluster's (``_cluster_id``)
        cluster_id = data_dir_cluster_id(data_dir) if ray_address is None else local_cluster_id(data_dir)
        if admin_port:
            check_port_free(host, admin_port)
        if gateway_port:
            check_port_free(host, gateway_port, "the usage gateway")
        if metrics_port:
            check_port_free(host, metrics_port, "the metrics endpoint")
        if frontend_port:
            check_port_free(host, frontend_port, "the Kafka frontend")
        if ray_dashboard_port and ray_address is None:
            check_port_free(DASHBOARD_HOST, ray_dashboard_port, "the Ray dashboard")
        temp_dir = ray_temp_dir_for(data_dir)
        fallback = temp_dir is None
        if temp_dir is None:
            temp_dir = Path(tempfile.mkdtemp(prefix="qp-ray-"))
            say(
                f"{data_dir / 'ray'} is too long for Ray's unix sockets ({SOCKET_PATH_MAX}-byte limit); "
                f"Ray's session is in {temp_dir} instead (removed on exit)"
            )
        else:
            temp_dir.mkdir(exist_ok=True)
    except BaseException:
        os.close(lock_fd)
        raise
    frontend_token = None
    if frontend_port is not None:
        # the frontend's own credential, made up for this run: it may assert the SASL principal of the Kafka
        # client it forwards an admin request for (recorded with the change); without it, that assertion
        # would be ignored as any caller's claim once the AdminService authenticates callers
        from quotaplane.services._security import ServerSecurity

        frontend_token = secrets.token_urlsafe(32)
        security = (security or ServerSecurity()).with_frontend_token(frontend_token)
    cluster = Cluster(
        data_dir,
        host,
        admin_port,
        temp_dir,
        fallback,
        gateway_port=gateway_port,
        metrics_port=metrics_port,
        security=security,
        ray_address=ray_address,
        frontend_port=frontend_port,
        kafka_listener=kafka_listener,
        _frontend_token=frontend_token,
        frontend_client=frontend_client,
        frontend_server_name=frontend_server_name,
        cluster_id=cluster_id,
        ray_dashboard_port=ray_dashboard_port if ray_address is None else None,
        _lock_fd=lock_fd,
    )
    try:
        _start(
            cluster,
            shards=shards,
            num_cpus=num_cpus,
            fsync=fsync,
            ready_timeout_s=ready_timeout_s,
            shard_resources=shard_resources,
            controller_resources=controller_resources,
            spread_shards=bool(spread_shards),
            shard_standby=shard_standby,
        )
    except BaseException:
        cluster.close(grace_s=0)
        raise
    return cluster


def _start(
    cluster: Cluster,
    *,
    shards: int | None,
    num_cpus: int | None,
    fsync: bool,
    ready_timeout_s: float,
    shard_resources: dict[str, float] | None = None,
    controller_resources: dict[str, float] | None = None,
    spread_shards: bool = False,
    shard_standby: bool | None = None,
) -> None:
    deadline = time.monotonic() + ready_timeout_s

    def remaining() -> float:
        return max(0.1, deadline - time.monotonic())

    start_ray(
        cluster,
        shards=shards or DEFAULT_SHARDS,  # how much of the shard resources to ask for (the log may say more later)
        num_cpus=num_cpus,
        shard_resources=shard_resources,
        controller_resources=controller_resources,
        remaining=remaining,
    )

    import ray

    from quotaplane.actors import start_controller

    joined = cluster.ray_address is not None
    cluster.controller = start_controller(
        cluster.config_dir,
        namespace=NAMESPACE,
        fsync=fsync,
        detached=joined,
        resources=controller_resources,
        cluster_id=cluster.cluster_id,
    )
    try:
        controller_info = ray.get(cluster.controller.info.remote(), timeout=remaining())
    except Exception as e:
        raise LaunchError(
            f"the config controller on {cluster.config_dir} did not start: {ray_reason(e)}"
            f"{placement_hint(e, controller_resources)}"
        ) from None
    # the controller's id is the cluster's: a joining up's data dir takes it, or names another and is refused
    cluster.cluster_id = adopt_cluster_id(cluster.data_dir, controller_info["cluster_id"])
    cluster.fleet = ShardFleet(
        cluster,
        shard_options={"detached": joined, "resources": shard_resources, "spread": spread_shards},
        standby=shard_standby,
    )
    # the shards the log says run (a new cluster: --shards, else the default); --shards then reshards to its count
    logged, _ = cluster.fleet.count_in_log()
    desired = shards
    shards = logged if logged is not None else (desired or DEFAULT_SHARDS)
    for i in range(shards):  # all created first, then awaited together
        cluster.shards[str(i)] = cluster.fleet.create(str(i))
    for name, shard in [*cluster.shards.items(), *((f"{i} (standby)", s) for i, s in cluster.standbys.items())]:
        try:
            ray.get(shard.info.remote(), timeout=remaining())
        except Exception as e:
            raise LaunchError(
                f"shard {name} did not start: {ray_reason(e)}{placement_hint(e, shard_resources)}"
            ) from None
    cluster.wait_caught_up(timeout_s=remaining())
    if logged is None:  # a new cluster: its count in the log, so that every process that joins reads the same
        cluster.fleet.seed(shards, principal=LAUNCH_PRINCIPAL)
    elif desired is not None and desired != logged:  # --shards (e.g. the Helm chart's value) drives the count
        cluster.fleet.alter(desired, principal=LAUNCH_PRINCIPAL)

    start_admin(cluster, remaining())
    if cluster.gateway_port is not None:
        start_gateway(cluster, remaining())
    if cluster.frontend_port is not None:
        start_frontend(cluster)
    if cluster.metrics_port is not None:
        start_metrics(cluster)
