"""``quotaplane up``: the embedded default, one machine with every piece and all data under one folder.

:func:`launch` starts a private local Ray, the ConfigController on ``DATA_DIR/config``, N ShardActors
subscribed to it, and the gRPC AdminService backed by the controller (:class:`ControllerBackend`), and
returns a :class:`Cluster` once every piece answers. The CLI is a thin wrapper around it; tests and the
later services (gateway, frontend, metrics endpoint) start through the same function.

Why the details are as they are:

- **Nothing outside DATA_DIR.** Ray writes its session under ``/tmp/ray`` and a generated auth token to
  ``~/.ray/auth_token`` unless told otherwise. The session goes to ``DATA_DIR/ray`` (``_temp_dir`` and
  ``RAY_TMPDIR``, which Ray's child processes inherit) and the token is given in ``RAY_AUTH_TOKEN`` (a
  fresh random one, unless the user set one): token auth stays on and nothing is written to the home
  directory. Unix socket paths are limited to 107 bytes and Ray puts its sockets under
  ``<temp dir>/session_<date>_<pid>/sockets/``; when DATA_DIR is too deep for that, the session goes to
  a short private directory from :func:`tempfile.mkdtemp` instead (said on the console, removed on close).
- **A private cluster.** ``address="local"`` always starts a new Ray rather than joining one found via
  ``RAY_ADDRESS`` or ``/tmp/ray/ray_current_cluster``: ``up`` owns what it starts and stops all of it.
- **Fail fast, in one line.** The cheap checks (``--shards``, the data directory, its lock, the admin
  port) run before Ray starts, and every failure is a :class:`LaunchError` with a one-line message.
  One ``up`` per data directory: ``DATA_DIR/up.lock`` is held (``flock``) for the cluster's lifetime, so
  a second ``up`` fails at once instead of waiting for the controller's log lock.
- **Ready means answering.** :func:`launch` returns only after the controller answered, every shard
  reached the log's end offset, and the gRPC health check of the AdminService says SERVING.
- **Shards follow the config.** :meth:`Cluster.status` reports each shard's applied offset against the
  log's end offset, and a watcher (``Cluster.watch``, used by the CLI) reports a change of those offsets
  as it happens.
- **The usage gateway** (:mod:`quotaplane.services.gateway`: QuotaService, ProducerIdService) runs in this process,
  as a Ray driver, on ``gateway_port`` (default 9094; ``None``: no gateway). Its port is checked with the
  admin port before Ray starts, and ``launch`` returns only once its health check says SERVING too.
- **The Kafka frontend** (:mod:`quotaplane.services.frontend`) runs in this process too, on its own event-loop thread,
  after the gateway (it is the gateway's client); it is stopped first, so its connections release their
  connection-quota counts while the gateway still answers.
- **Placement** (``shard_resources``, ``controller_resources``, ``spread_shards``): Ray custom resources the
  actors ask for, so Ray places them (and restarts them) only on raylets that offer them; see "Placement"
  in docs/architecture.md. A private Ray offers them itself; a joined cluster that offers none of one is a
  LaunchError at once, not an actor waiting forever for a node that will never come.
- **Security** (``quotaplane/services/_security.py``): ``security`` puts TLS or mutual TLS on both gRPC listeners and
  operator authorization on the AdminService; the metrics endpoint stays plain HTTP (Prometheus scrapes
  it, and it changes nothing). This process holds no client certificate, so with TLS the readiness check
  is a TLS handshake with each listener instead of a gRPC health call (both servers set SERVING before
  they listen, so an answering listener is a serving one). The Kafka frontend gets a bearer token of its
  own, made up at each start and accepted as a frontend's: it is what lets the AdminService record the
  Kafka client's principal the frontend asserts (any other caller's claim is ignored once it holds a
  credential).
- **One cluster id per data directory** (``_cluster_id.py``): made on first use and kept in
  ``DATA_DIR/meta.properties`` (Kafka's form), printed at start, and carried by every AdminService answer
  (``x-quotaplane-cluster-id``), so a client told which cluster to expect notices a second instance that
  took the same default port.

One module per part: ``_common.py`` (defaults, :class:`LaunchError`), ``_checks.py`` (the checks before
Ray starts), ``_ray.py`` (starting or joining Ray, its auth token), ``_cluster.py`` (the :class:`Cluster`
handle), ``_servers.py`` (the in-process servers and their readiness checks), ``_cluster_id.py`` (the data
directory's cluster id), ``_launch.py`` (the order).
"""

from __future__ import annotations

from ._checks import parse_resource_flags, port_is_free, ray_temp_dir_for
from ._cluster import Cluster, ClusterStatus
from ._common import (
    DASHBOARD_HOST,
    DEFAULT_ADMIN_PORT,
    DEFAULT_DASHBOARD_PORT,
    DEFAULT_DATA_DIR,
    DEFAULT_FRONTEND_PORT,
    DEFAULT_GATEWAY_PORT,
    DEFAULT_HOST,
    DEFAULT_METRICS_PORT,
    DEFAULT_SHARDS,
    NODE_FAILURE_DETECTION,
    LaunchError,
)
from ._launch import launch

__all__ = [
    "DASHBOARD_HOST",
    "DEFAULT_ADMIN_PORT",
    "DEFAULT_DASHBOARD_PORT",
    "DEFAULT_DATA_DIR",
    "DEFAULT_FRONTEND_PORT",
    "DEFAULT_GATEWAY_PORT",
    "DEFAULT_HOST",
    "DEFAULT_METRICS_PORT",
    "DEFAULT_SHARDS",
    "NODE_FAILURE_DETECTION",
    "Cluster",
    "ClusterStatus",
    "LaunchError",
    "launch",
    "parse_resource_flags",
    "port_is_free",
    "ray_temp_dir_for",
]
