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
- **The usage gateway** (``services/gateway.py``: QuotaService, ProducerIdService) runs in this process,
  as a Ray driver, on ``gateway_port`` (default 9094; ``None``: no gateway). Its port is checked with the
  admin port before Ray starts, and ``launch`` returns only once its health check says SERVING too.
- **The Kafka frontend** (``services/frontend``) runs in this process too, on its own event-loop thread,
  after the gateway (it is the gateway's client); it is stopped first, so its connections release their
  connection-quota counts while the gateway still answers.
- **Placement** (``shard_resources``, ``controller_resources``, ``spread_shards``): Ray custom resources the
  actors ask for, so Ray places them (and restarts them) only on raylets that offer them; see "Placement"
  in docs/architecture.md. A private Ray offers them itself; a joined cluster that offers none of one is a
  LaunchError at once, not an actor waiting forever for a node that will never come.
- **Security** (``services/_security.py``): ``security`` puts TLS or mutual TLS on both gRPC listeners and
  operator authorization on the AdminService; the metrics endpoint stays plain HTTP (Prometheus scrapes
  it, and it changes nothing). This process holds no client certificate, so with TLS the readiness check
  is a TLS handshake with each listener instead of a gRPC health call (both servers set SERVING before
  they listen, so an answering listener is a serving one).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import math
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._security import ServerSecurity
    from .frontend.server import KafkaListener

__all__ = [
    "DEFAULT_ADMIN_PORT",
    "DEFAULT_DATA_DIR",
    "DEFAULT_FRONTEND_PORT",
    "DEFAULT_GATEWAY_PORT",
    "DEFAULT_HOST",
    "DEFAULT_METRICS_PORT",
    "DEFAULT_SHARDS",
    "Cluster",
    "ClusterStatus",
    "LaunchError",
    "launch",
    "parse_resource_flags",
    "ray_temp_dir_for",
]

log = logging.getLogger(__name__)

DEFAULT_DATA_DIR = "quotaplane-data"
#: One shard per core: a shard runs one call at a time, so more shards than cores only add switching.
DEFAULT_SHARDS = max(1, os.cpu_count() or 1)
DEFAULT_ADMIN_PORT = 9093
DEFAULT_GATEWAY_PORT = 9094
#: Prometheus' conventional exporter range; the shipped deploy/prometheus/prometheus.yml scrapes it.
DEFAULT_METRICS_PORT = 9464
#: Kafka's own port: the Kafka-facing frontend answers clients that know nothing but a bootstrap server.
DEFAULT_FRONTEND_PORT = 9092
DEFAULT_HOST = "127.0.0.1"
NAMESPACE = "quotaplane"
LOCK_FILE = "up.lock"

#: The longest unix socket path Linux accepts (``sun_path`` is 108 bytes with its NUL).
_SOCKET_PATH_MAX = 107
#: What Ray appends to its temp dir for its longest socket: the session directory (date with microseconds
#: and a pid of up to 7 digits), ``sockets/`` and ``plasma_store`` with a possible ``.N`` suffix.
_RAY_SOCKET_SUFFIX = "/session_2000-01-01_00-00-00_000000_4194304/sockets/plasma_store.99"
_RAY_ENV = ("RAY_TMPDIR", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE")
#: How much of each requested custom resource a private Ray offers (plenty: every actor asks for a little).
_PRIVATE_RESOURCE_AMOUNT = 10_000


class LaunchError(Exception):
    """A reason ``up`` cannot start (or stopped), as one line for the operator."""


@dataclass(frozen=True)
class ClusterStatus:
    """Where the config log ends and how far each shard has applied it."""

    end_offset: int
    applied: dict[str, int]

    @property
    def caught_up(self) -> bool:
        return all(offset == self.end_offset for offset in self.applied.values())

    def line(self) -> str:
        shards = ", ".join(f"{name}={offset}" for name, offset in self.applied.items())
        return f"config log end offset {self.end_offset}; shards applied {shards}"


def ray_temp_dir_for(data_dir: Path) -> Path | None:
    """``DATA_DIR/ray`` when Ray's socket paths under it fit the unix limit, else None."""
    candidate = data_dir.absolute() / "ray"
    if len(os.fsencode(candidate)) + len(_RAY_SOCKET_SUFFIX) > _SOCKET_PATH_MAX:
        return None
    return candidate


def parse_resource_flags(flag: str, values: Sequence[str] | None) -> dict[str, float] | None:
    """``NAME[=AMOUNT]`` strings (a repeatable CLI flag; the amount defaults to 1) as a resources mapping,
    None when there are none; bad syntax, a repeated name or a bad amount is a LaunchError naming ``flag``."""
    if not values:
        return None
    resources: dict[str, float] = {}
    for value in values:
        name, sep, amount_text = value.partition("=")
        name = name.strip()
        if not name or (sep and not amount_text.strip()):
            raise LaunchError(f"{flag} must be NAME or NAME=AMOUNT, got {value!r}")
        try:
            amount = float(amount_text) if sep else 1.0
        except ValueError:
            raise LaunchError(f"{flag} {value!r}: the amount must be a number, got {amount_text!r}") from None
        if name in resources:
            raise LaunchError(f"{flag} {name!r} is given twice")
        resources[name] = amount
    return _checked_resources(flag, resources)


def _checked_resources(what: str, resources: Mapping[str, float] | None) -> dict[str, float] | None:
    from quotaplane.actors._resources import check_resources

    try:
        return check_resources(resources, what)
    except ValueError as e:
        raise LaunchError(str(e)) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _check_port(flag: str, port: int | None, *, optional: bool = False) -> None:
    """LaunchError unless ``port`` is an int in 0..65535 (or, if ``optional``, None: no listener)."""
    if port is None and optional:
        return
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise LaunchError(f"{flag} must be in 0..65535, got {port!r}")


def _check_port_free(host: str, port: int, what: str = "the admin service") -> None:
    """Bind the admin address once before anything starts, so a busy port costs no Ray start-up.
    ``SO_REUSEADDR`` as gRPC sets it: a port left in TIME_WAIT by a previous run is free, a listener is not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise LaunchError(f"cannot resolve --host {host!r}: {e.strerror}") from None
    family, type_, proto, _, sockaddr = infos[0]
    with socket.socket(family, type_, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(sockaddr)
        except OSError as e:
            reason = "the port is in use" if e.errno == errno.EADDRINUSE else e.strerror or str(e)
            raise LaunchError(f"cannot listen on {_address(host, port)} for {what}: {reason}") from None


def _prepare_data_dir(data_dir: Path) -> int:
    """Create DATA_DIR, prove it writable, and take its ``up.lock``; return the lock's descriptor."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "config").mkdir(exist_ok=True)
        probe = data_dir / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise LaunchError(f"cannot use data dir {data_dir}: {e.strerror or e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise LaunchError(f"data dir {data_dir} is in use by another quotaplane up") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


@dataclass
class Cluster:
    """What :func:`launch` started; :meth:`close` stops all of it (also as a context manager)."""

    data_dir: Path
    host: str
    admin_port: int
    ray_temp_dir: Path
    ray_temp_dir_is_fallback: bool
    controller: Any = None
    shards: dict[str, Any] = field(default_factory=dict)
    server: Any = None
    gateway_port: int | None = None
    gateway_server: Any = None
    gateway: Any = None
    metrics_port: int | None = None
    metrics: Any = None
    frontend_port: int | None = None
    frontend: Any = None
    kafka_listener: KafkaListener | None = None
    _frontend_token: str | None = field(default=None, repr=False)
    security: ServerSecurity | None = None
    #: None: a private local Ray (stopped with the cluster); else the Ray cluster joined (actors detached)
    ray_address: str | None = None
    _lock_fd: int | None = None
    _saved_env: dict[str, str | None] = field(default_factory=dict)
    _ray_started: bool = False
    _closed: bool = False

    @property
    def admin_address(self) -> str:
        return _address(self.host, self.admin_port)

    @property
    def gateway_address(self) -> str | None:
        return None if self.gateway_port is None else _address(self.host, self.gateway_port)

    @property
    def frontend_address(self) -> str | None:
        return None if self.frontend_port is None else _address(self.host, self.frontend_port)

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics_port is None else f"http://{_address(self.host, self.metrics_port)}/metrics"

    @property
    def config_dir(self) -> Path:
        return self.data_dir / "config"

    def status(self, *, timeout_s: float = 10.0) -> ClusterStatus:
        """The log's end offset, then each shard's applied offset (asked after, so a caught-up shard
        shows the same offset or a later one)."""
        import ray

        end = ray.get(self.controller.end_offset.remote(), timeout=timeout_s)
        refs = {name: shard.applied_offset.remote() for name, shard in self.shards.items()}
        return ClusterStatus(end, {name: ray.get(ref, timeout=timeout_s) for name, ref in refs.items()})

    def wait_caught_up(self, *, timeout_s: float = 30.0) -> ClusterStatus:
        """Poll :meth:`status` until every shard has applied the whole log."""
        deadline = time.monotonic() + timeout_s
        while True:
            current = self.status(timeout_s=timeout_s)
            if current.caught_up:
                return current
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"the shards did not catch up with the config log in {timeout_s:g} s: {current.line()}"
                )
            time.sleep(0.05)

    def watch(
        self,
        report: Callable[[ClusterStatus], None],
        stop: threading.Event,
        *,
        every_s: float = 0.5,
        last: ClusterStatus | None = None,
    ) -> None:
        """Call ``report`` with the status each time it differs from the last one reported (``last``: what
        the caller already showed), until ``stop`` is set. One small actor call per shard and period; an
        error (e.g. during shutdown) is logged and the watch goes on."""
        while not stop.wait(every_s):
            try:
                current = self.status()
            except Exception as e:
                log.debug("status poll failed: %s", e)
                continue
            if current != last:
                report(current)
                last = current

    def close(self, *, grace_s: float = 2.0) -> None:
        """Stop the gRPC server (in-flight calls get ``grace_s``), kill the actors, shut Ray down, release
        the data dir, restore the environment. Safe to call twice and on a partly started cluster."""
        if self._closed:
            return
        self._closed = True
        if self.frontend is not None:  # its connections release their counts through the gateway: first
            self.frontend.close()
        if self.metrics is not None:  # its scrapes call Ray: stop it before Ray goes
            self.metrics.close()
        if self.gateway_server is not None:
            self.gateway_server.stop(grace_s).wait()
        if self.server is not None:
            self.server.stop(grace_s).wait()
        if self._ray_started:
            import ray

            # shards first: they hold no durable state; the controller's writes were fsynced when answered.
            # On a joined Ray cluster the actors are detached and shared (other gateways use them): leave them.
            if self.ray_address is None:
                for handle in [*self.shards.values(), self.controller]:
                    if handle is not None:
                        with contextlib.suppress(Exception):
                            ray.kill(handle, no_restart=True)
            ray.shutdown()
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if self._ray_started:
            _forget_ray_auth_token()
        if self.ray_address is not None:
            _refresh_ray_config()  # forget the token mode set for joining
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
        if self.ray_temp_dir_is_fallback:
            shutil.rmtree(self.ray_temp_dir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _forget_ray_auth_token() -> None:
    """Make Ray read ``RAY_AUTH_TOKEN`` again. Ray caches the token per process on first use, so without this
    a second Ray started in the same process (a second ``launch`` after ``close``, or a test's ``ray.init``
    after a cluster of ours) runs its GCS with the new token while the driver still sends the old one, and
    fails with "Failed to start GCS"."""
    try:
        from ray._raylet import AuthenticationTokenLoader

        AuthenticationTokenLoader.instance().reset_cache()
    except Exception as e:  # a Ray without it has no cache to forget
        log.debug("cannot reset Ray's auth token cache: %s", e)


def _use_ray_token_auth() -> None:
    """Send ``RAY_AUTH_TOKEN`` when joining a cluster. A driver that *starts* Ray turns token mode on when
    it finds a token, but one that *connects* only does when ``RAY_AUTH_MODE=token`` is set, and Ray reads
    that setting into its config at import: set it and refresh the config, as Ray's own setup does."""
    os.environ["RAY_AUTH_MODE"] = "token"
    _refresh_ray_config()


def _check_gcs_answers(address: str, timeout_s: float) -> None:
    """Fail in seconds, not minutes, when nothing listens at a ``host:port`` Ray address (``ray.init``
    retries an unreachable GCS for a long time). ``auto`` and other forms are left to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as e:
        raise LaunchError(
            f"cannot join the Ray cluster at {address}: nothing answers there ({e.strerror or e})"
        ) from None


def _refresh_ray_config() -> None:
    """Make Ray read its environment settings (``RAY_AUTH_MODE``) again."""
    try:
        from ray._raylet import Config

        Config.initialize("")
    except Exception as e:  # an older Ray reads the environment when it connects
        log.debug("cannot refresh Ray's config: %s", e)


def _check_health(
    address: str, timeout_s: float, service: str | None = None, what: str = "admin service", *, tls: bool = False
) -> None:
    """A gRPC health check (default: the AdminService's), as a client sees it; for a TLS listener, a TLS
    handshake (see the module docstring: this process cannot be the listener's client). LaunchError (one
    line) if it is not serving or does not answer."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from ._security import check_tls_answers
    from .admin import SERVICE_NAME

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
        raise LaunchError(f"the {what} at {address} does not answer: {_first_line(e)}") from None
    if response.status != health_pb2.HealthCheckResponse.SERVING:
        raise LaunchError(f"the {what} at {address} is not serving ({response.status})")


def launch(
    data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR,
    *,
    shards: int = DEFAULT_SHARDS,
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
    (None: plaintext, AdminService open) is passed to the AdminService and the gateway.

    ``frontend_port`` (None: none; 0: a free port, ``Cluster.frontend_port``) starts the Kafka-facing
    frontend (``services/frontend/server.py``) as a gRPC client of the gateway and the AdminService, with
    ``kafka_listener``'s advertised address, node id, SASL, operators and TLS. The CLI's ``up`` passes
    9092; this function defaults to none so embedding it claims no Kafka port unasked.

    ``shard_resources`` / ``controller_resources`` (Ray custom resources, e.g. ``{"quotaplane_shard": 1}``)
    are asked for by each shard / the controller, so Ray places them, and restarts them, only on raylets
    offering them; ``spread_shards`` spreads the shards over those nodes (Ray's ``SPREAD``). A private Ray
    offers the named resources itself (10,000 of each); a joined cluster must offer them already (else a
    LaunchError saying which raylets need ``ray start --resources=...``). They apply to actors this call
    creates: a joined cluster's running controller and shards are used where they are.
    """
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise LaunchError(f"--shards must be a positive integer, got {shards!r}")
    _check_port("--admin-port", admin_port)
    _check_port("--gateway-port", gateway_port, optional=True)
    if gateway_port and gateway_port == admin_port:
        raise LaunchError(f"--gateway-port and --admin-port must differ, both are {admin_port}")
    _check_port("--metrics-port", metrics_port, optional=True)
    _check_port("--frontend-port", frontend_port, optional=True)
    if frontend_port is not None and gateway_port is None:
        raise LaunchError("the Kafka frontend needs the usage gateway (its telemetry and connection services)")
    if frontend_port and frontend_port in (admin_port, gateway_port, metrics_port):
        raise LaunchError(f"--frontend-port must differ from the admin, gateway and metrics ports, got {frontend_port}")
    if metrics_port and metrics_port in (admin_port, gateway_port):
        raise LaunchError(f"--metrics-port must differ from the admin and gateway ports, got {metrics_port}")
    shard_resources = _checked_resources("--shard-resource", shard_resources)
    controller_resources = _checked_resources("--controller-resource", controller_resources)
    say = say or (lambda _line: None)
    data_dir = Path(data_dir).absolute()
    lock_fd = _prepare_data_dir(data_dir)
    try:
        if admin_port:
            _check_port_free(host, admin_port)
        if gateway_port:
            _check_port_free(host, gateway_port, "the usage gateway")
        if metrics_port:
            _check_port_free(host, metrics_port, "the metrics endpoint")
        if frontend_port:
            _check_port_free(host, frontend_port, "the Kafka frontend")
        temp_dir = ray_temp_dir_for(data_dir)
        fallback = temp_dir is None
        if temp_dir is None:
            temp_dir = Path(tempfile.mkdtemp(prefix="qp-ray-"))
            say(
                f"{data_dir / 'ray'} is too long for Ray's unix sockets ({_SOCKET_PATH_MAX}-byte limit); "
                f"Ray's session is in {temp_dir} instead (removed on exit)"
            )
        else:
            temp_dir.mkdir(exist_ok=True)
    except BaseException:
        os.close(lock_fd)
        raise
    if frontend_port is not None and security is not None and security.tls:
        # its gRPC client would need a certificate trusted by (and, under mutual TLS, signed for) the TLS
        # listeners, which this process does not hold
        say("the Kafka frontend is not started: it cannot be a client of TLS gRPC listeners yet")
        frontend_port = None
    frontend_token = None
    if frontend_port is not None and security is not None and security.operator_auth:
        frontend_token = secrets.token_urlsafe(32)
        security = security.with_operator_token(frontend_token)
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
        )
    except BaseException:
        cluster.close(grace_s=0)
        raise
    return cluster


def _private_resources(
    shards: int, shard_resources: dict[str, float] | None, controller_resources: dict[str, float] | None
) -> dict[str, float] | None:
    """What a private Ray offers so the actors asking for custom resources fit on it: 10,000 of each name,
    more if the actors together ask for more (a node offers whole numbers)."""
    needed: dict[str, float] = {}
    for name, amount in (shard_resources or {}).items():
        needed[name] = needed.get(name, 0.0) + amount * shards
    for name, amount in (controller_resources or {}).items():
        needed[name] = needed.get(name, 0.0) + amount
    return {name: float(max(_PRIVATE_RESOURCE_AMOUNT, math.ceil(total))) for name, total in needed.items()} or None


def _check_cluster_offers(
    cluster_resources: Mapping[str, float],
    shards: int,
    shard_resources: dict[str, float] | None,
    controller_resources: dict[str, float] | None,
) -> None:
    """A LaunchError (one line) when the joined cluster offers none, or too little, of a requested resource:
    the actor would wait for a raylet offering it, and ``up`` with it, until the ready timeout."""
    for what, flag, requested, count in (
        ("the controller", "--controller-resource", controller_resources, 1),
        ("the shards", "--shard-resource", shard_resources, shards),
    ):
        for name, amount in (requested or {}).items():
            offered = float(cluster_resources.get(name, 0.0))
            example = json.dumps({name: max(1000, math.ceil(amount * count))})
            if offered <= 0:
                raise LaunchError(
                    f"{flag} {name}: the Ray cluster has no raylet offering resource {name!r}; start the raylets "
                    f"that may run {what} with ray start --resources='{example}'"
                )
            if offered < amount:
                raise LaunchError(
                    f"{flag} {name}={amount:g}: the Ray cluster offers only {offered:g} of resource {name!r} in "
                    f"all; start the raylets that may run {what} with ray start --resources='{example}'"
                )


def _start(
    cluster: Cluster,
    *,
    shards: int,
    num_cpus: int | None,
    fsync: bool,
    ready_timeout_s: float,
    shard_resources: dict[str, float] | None = None,
    controller_resources: dict[str, float] | None = None,
    spread_shards: bool = False,
) -> None:
    deadline = time.monotonic() + ready_timeout_s

    def remaining() -> float:
        return max(0.1, deadline - time.monotonic())

    cluster._saved_env = {name: os.environ.get(name) for name in _RAY_ENV}
    os.environ["RAY_TMPDIR"] = str(cluster.ray_temp_dir)
    if cluster.ray_address is not None:
        if os.environ.get("RAY_AUTH_TOKEN") and not os.environ.get("RAY_AUTH_MODE"):
            _use_ray_token_auth()
    elif not os.environ.get("RAY_AUTH_TOKEN"):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)  # else Ray writes one to ~/.ray/auth_token
    _forget_ray_auth_token()

    import ray
    from quotaplane.actors import start_controller, start_shard

    from .admin import ControllerBackend, serve

    joined = cluster.ray_address is not None
    if joined:
        _check_gcs_answers(cluster.ray_address, min(10.0, remaining()))
    try:
        if joined:
            ray.init(
                address=cluster.ray_address,
                namespace=NAMESPACE,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        else:
            ray.init(
                address="local",
                num_cpus=num_cpus,
                resources=_private_resources(shards, shard_resources, controller_resources),
                include_dashboard=False,
                _temp_dir=str(cluster.ray_temp_dir),
                namespace=NAMESPACE,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
    except Exception as e:
        what = f"join the Ray cluster at {cluster.ray_address}" if joined else "start Ray"
        raise LaunchError(f"cannot {what}: {_first_line(e)}") from None
    cluster._ray_started = True
    if joined and (shard_resources or controller_resources):
        try:
            offered = ray.cluster_resources()
        except Exception as e:
            raise LaunchError(f"cannot read the Ray cluster's resources: {_first_line(e)}") from None
        _check_cluster_offers(offered, shards, shard_resources, controller_resources)

    cluster.controller = start_controller(
        cluster.config_dir, namespace=NAMESPACE, fsync=fsync, detached=joined, resources=controller_resources
    )
    try:
        ray.get(cluster.controller.info.remote(), timeout=remaining())
    except Exception as e:
        raise LaunchError(
            f"the config controller on {cluster.config_dir} did not start: {_ray_reason(e)}"
            f"{_placement_hint(e, controller_resources)}"
        ) from None
    for i in range(shards):
        cluster.shards[str(i)] = start_shard(
            i,
            cluster.controller,
            namespace=NAMESPACE,
            data_dir=str(cluster.data_dir.absolute() / "shards" / str(i)),
            detached=joined,
            resources=shard_resources,
            spread=spread_shards,
        )
    for name, shard in cluster.shards.items():
        try:
            ray.get(shard.info.remote(), timeout=remaining())
        except Exception as e:
            raise LaunchError(
                f"shard {name} did not start: {_ray_reason(e)}{_placement_hint(e, shard_resources)}"
            ) from None
    cluster.wait_caught_up(timeout_s=remaining())

    try:
        cluster.server, cluster.admin_port = serve(
            ControllerBackend(cluster.controller), _address(cluster.host, cluster.admin_port), security=cluster.security
        )
    except OSError as e:
        raise LaunchError(f"{_first_line(e)} for the admin service") from None
    _check_health(cluster.admin_address, remaining(), tls=cluster.security is not None and cluster.security.tls)
    if cluster.gateway_port is not None:
        _start_gateway(cluster, remaining())
    if cluster.frontend_port is not None:
        _start_frontend(cluster)
    if cluster.metrics_port is not None:
        from .metrics import start_metrics_endpoint

        try:
            cluster.metrics, cluster.metrics_port = start_metrics_endpoint(
                cluster.controller, cluster.shards, host=cluster.host, port=cluster.metrics_port
            )
        except OSError as e:
            raise LaunchError(f"{_first_line(e)} for the metrics endpoint") from None


def _start_gateway(cluster: Cluster, timeout_s: float) -> None:
    """The usage gateway in this process, over the cluster's controller and shards; ready when it answers."""
    from .gateway import QUOTA_SERVICE_NAME, serve_gateway

    assert cluster.gateway_port is not None
    try:
        cluster.gateway_server, cluster.gateway_port, cluster.gateway = serve_gateway(
            cluster.controller, cluster.shards, _address(cluster.host, cluster.gateway_port), security=cluster.security
        )
    except OSError as e:
        raise LaunchError(f"{_first_line(e)} for the usage gateway") from None
    except Exception as e:
        raise LaunchError(f"the usage gateway did not start: {_first_line(e)}") from None
    address = cluster.gateway_address
    assert address is not None
    tls = cluster.security is not None and cluster.security.tls
    _check_health(address, timeout_s, QUOTA_SERVICE_NAME, "usage gateway", tls=tls)


def _start_frontend(cluster: Cluster) -> None:
    """The Kafka-facing frontend in this process (a thread with its own event loop), a gRPC client of the
    gateway and the AdminService like any other frontend. With operator credentials on the AdminService it
    presents a token of its own, made up here for this run (``launch`` added its digest to the accepted
    ones): it authorizes Kafka principals itself, by its operator list, as a broker's authorizer does."""
    from .frontend.server import FrontendServer, GrpcTarget, KafkaListener

    assert cluster.frontend_port is not None and cluster.gateway_address is not None
    listener = cluster.kafka_listener or KafkaListener()
    try:
        config = listener.config(
            GrpcTarget(cluster.gateway_address),
            GrpcTarget(cluster.admin_address, token=cluster._frontend_token),
            cluster.host,
            cluster.frontend_port,
        )
        frontend = FrontendServer(config)
        frontend.start()
    except (OSError, ValueError) as e:
        raise LaunchError(_first_line(e)) from None
    cluster.frontend = frontend
    cluster.frontend_port = frontend.port


def _placement_hint(exc: BaseException, resources: dict[str, float] | None) -> str:
    """For an actor that never answered while asking for custom resources: the likely reason."""
    import ray

    if resources and isinstance(exc, ray.exceptions.GetTimeoutError):
        asked = ", ".join(f"{name}={amount:g}" for name, amount in resources.items())
        return f" (it asks for Ray resources {asked}: no raylet offering them has enough free)"
    return ""


def _ray_reason(exc: BaseException) -> str:
    """The actor's own error when Ray wrapped one, else Ray's first line."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {_first_line(cause)}"
    return _first_line(exc)
