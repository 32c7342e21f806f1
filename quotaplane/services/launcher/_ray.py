"""Starting or joining Ray for ``up``, its auth token, and Ray's failures as one line.

Why it is done this way:

- **Nothing outside DATA_DIR.** Ray's session goes to the cluster's ``ray_temp_dir`` (``_temp_dir`` and
  ``RAY_TMPDIR``, which Ray's child processes inherit) and a private Ray's auth token is given in
  ``RAY_AUTH_TOKEN`` (a fresh random one unless the user set one), so Ray writes none to
  ``~/.ray/auth_token``. The environment is saved first and restored by ``Cluster.close``.
- **A private cluster** is ``address="local"``: always a new Ray, never one found via ``RAY_ADDRESS``; it
  offers the custom resources the actors ask for itself. **A joined cluster** must answer at its GCS
  address within seconds and offer those resources already, else a LaunchError names what is missing.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import signal
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from quotaplane.durable import replace_file

from ._common import DASHBOARD_HOST, NAMESPACE, LaunchError, first_line

if TYPE_CHECKING:
    from ._cluster import Cluster

__all__ = [
    "forget_ray_auth_token",
    "placement_hint",
    "ray_reason",
    "refresh_ray_config",
    "start_ray",
]

log = logging.getLogger(__name__)

#: Where a private Ray's dashboard token is written, in its session directory (``DATA_DIR/ray``).
DASHBOARD_TOKEN_FILE = "dashboard-token"
_RAY_ENV = ("RAY_TMPDIR", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE")
#: How much of each requested custom resource a private Ray offers (plenty: every actor asks for a little).
_PRIVATE_RESOURCE_AMOUNT = 10_000


def start_ray(
    cluster: Cluster,
    *,
    shards: int,
    num_cpus: int | None,
    shard_resources: dict[str, float] | None,
    controller_resources: dict[str, float] | None,
    remaining: Callable[[], float],
) -> None:
    """Start a private Ray (``cluster.ray_address`` None) or join the one at ``cluster.ray_address``, with
    the environment set as the module docstring says; ``remaining`` is the time left of the ready timeout."""
    cluster._saved_env = {name: os.environ.get(name) for name in _RAY_ENV}
    os.environ["RAY_TMPDIR"] = str(cluster.ray_temp_dir)
    if cluster.ray_address is not None:
        if os.environ.get("RAY_AUTH_TOKEN") and not os.environ.get("RAY_AUTH_MODE"):
            _use_ray_token_auth()
    elif not os.environ.get("RAY_AUTH_TOKEN"):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)  # else Ray writes one to ~/.ray/auth_token
    forget_ray_auth_token()

    import ray

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
            _start_private_ray(cluster, num_cpus, _private_resources(shards, shard_resources, controller_resources))
    except Exception as e:
        what = f"join the Ray cluster at {cluster.ray_address}" if joined else "start Ray"
        raise LaunchError(f"cannot {what}: {first_line(e)}") from None
    cluster._ray_started = True
    if joined and (shard_resources or controller_resources):
        try:
            offered = ray.cluster_resources()
        except Exception as e:
            raise LaunchError(f"cannot read the Ray cluster's resources: {first_line(e)}") from None
        _check_cluster_offers(offered, shards, shard_resources, controller_resources)


def forget_ray_auth_token() -> None:
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
    refresh_ray_config()


#: Ray's own words when its node did not come up in time (node.py): the raylet did not register with the
#: GCS within its 30 s, or the GCS did not publish its port file within its 30 s.
_NODE_START_TIMEOUTS = ("timed out during startup", "Timed out waiting for file")


def _kill_session_processes(temp_dir: Path) -> list[int]:
    """SIGKILL every process of this machine whose command line names ``temp_dir`` (the GCS, raylet and
    helpers of a private Ray started there), this process aside; their pids. Linux's /proc: elsewhere none."""
    killed = []
    marker = str(temp_dir).encode()
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return killed


def _start_private_ray(cluster: Cluster, num_cpus: int | None, resources: dict[str, float] | None) -> None:
    """``ray.init`` of a private local Ray, started a second time if the first node timed out during start-up.

    A node whose raylet misses Ray's 30 s registration window, or whose GCS does not publish its port within
    30 s, is gone for good (Ray does not retry), though a second start usually succeeds at once: each seen once
    in a full test run on 2 cores, right after another private Ray of the same process had stopped. One retry,
    logged, keeps ``up`` from failing on it (``start_node_retrying_once``)."""
    import ray

    dashboard_port = cluster.ray_dashboard_port
    if dashboard_port == 0:
        dashboard_port = _free_port(DASHBOARD_HOST)

    def start() -> None:
        context = ray.init(
            address="local",
            num_cpus=num_cpus,
            resources=resources,
            include_dashboard=dashboard_port is not None,
            dashboard_host=DASHBOARD_HOST,
            dashboard_port=dashboard_port,
            _temp_dir=str(cluster.ray_temp_dir),
            namespace=NAMESPACE,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        if dashboard_port is not None and context.dashboard_url:
            cluster.ray_dashboard_url = f"http://{context.dashboard_url}"

    start_node_retrying_once(start, cluster.ray_temp_dir)
    if cluster.ray_dashboard_url is not None:
        _save_dashboard_token(cluster)


def start_node_retrying_once(start: Callable[[], None], temp_dir: Path) -> None:
    """``start()`` (a ``ray.init`` of a private Ray in ``temp_dir``, or raylets started there), and once more if
    Ray's node timed out during start-up. Ray raises before it records the failed node, so ``ray.shutdown``
    cannot stop that node's GCS and raylet: they are killed by the session directory their command lines name,
    which is under ``temp_dir``."""
    import ray

    try:
        start()
    except Exception as e:
        if not any(words in str(e) for words in _NODE_START_TIMEOUTS):
            raise
        log.warning("Ray's node did not start in time (%s); starting it once more", first_line(e))
        ray.shutdown()
        _kill_session_processes(temp_dir)
        start()


def _save_dashboard_token(cluster: Cluster) -> None:
    """The dashboard asks for Ray's auth token (it runs jobs): the operator finds this run's in a file only
    they can read, ``DASHBOARD_TOKEN_FILE`` in Ray's session directory (removed by ``Cluster.close``)."""
    path = cluster.ray_temp_dir / DASHBOARD_TOKEN_FILE
    replace_file(path, os.environ["RAY_AUTH_TOKEN"].encode() + b"\n", fsync=False, mode=0o600)
    cluster.ray_dashboard_token_file = path


def _free_port(host: str) -> int:
    """A port free on ``host`` now (the dashboard binds it a moment later: a race only another starter wins)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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


def refresh_ray_config() -> None:
    """Make Ray read its environment settings (``RAY_AUTH_MODE``) again."""
    try:
        from ray._raylet import Config

        Config.initialize("")
    except Exception as e:  # an older Ray reads the environment when it connects
        log.debug("cannot refresh Ray's config: %s", e)


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


def placement_hint(exc: BaseException, resources: dict[str, float] | None) -> str:
    """For an actor that never answered while asking for custom resources: the likely reason."""
    import ray

    if resources and isinstance(exc, ray.exceptions.GetTimeoutError):
        asked = ", ".join(f"{name}={amount:g}" for name, amount in resources.items())
        return f" (it asks for Ray resources {asked}: no raylet offering them has enough free)"
    return ""


#: The last line of a Python traceback: ``package.module.SomeError: message`` (the message's first line).
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?P<name>[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)): (?P<message>.*)$"
)


def _creation_error(exc: BaseException) -> str | None:
    """``Type: message`` of the exception an actor's ``__init__`` raised, from Ray's ActorDiedError.

    Ray carries that exception only as text (the creation task's traceback, after its own first line, which
    says no more than "the actor died because of an error raised in its creation task"), so the operator would
    read Ray's words instead of why: a log with a gap, an unreadable directory. The traceback's last exception
    line is the one raised (earlier ones are those it chained from)."""
    if not getattr(exc, "_actor_init_failed", False):
        return None
    found = None
    for line in str(exc).splitlines():
        match = _EXCEPTION_LINE.match(line.strip())
        if match is not None:
            found = f"{match['name']}: {match['message'].strip()}"
    return found


def ray_reason(exc: BaseException) -> str:
    """The actor's own error when Ray wrapped one (a method's exception, or the one its ``__init__`` raised:
    :func:`_creation_error`), else Ray's first line."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {first_line(cause)}"
    return _creation_error(exc) or first_line(exc)
