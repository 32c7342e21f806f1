"""The handle on what :func:`~quotaplane.services.launcher.launch` started: addresses, status, and stop.

Shards follow the config: :meth:`Cluster.status` reports each shard's applied offset against the log's end
offset, and :meth:`Cluster.watch` (used by the CLI) reports a change of those offsets as it happens.
:meth:`Cluster.close` stops everything in the order that lets each piece finish cleanly, and is safe on a
partly started cluster, so ``launch`` can use it to undo a failed start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import LaunchError, host_port
from ._ray import forget_ray_auth_token, refresh_ray_config

if TYPE_CHECKING:
    from quotaplane.services._security import ClientSecurity, ServerSecurity
    from quotaplane.services.frontend import KafkaListener

__all__ = ["Cluster", "ClusterStatus"]

log = logging.getLogger(__name__)


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
    #: each shard's warm standby (``quotaplane.actors._standby``), by shard id: empty without standbys
    standbys: dict[str, Any] = field(default_factory=dict)
    #: the shards as a resizable set (AlterShardCount); None until the controller runs
    fleet: Any = None
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
    #: How the Kafka frontend reaches TLS gRPC listeners (its CA, and its client certificate under mutual TLS;
    #: None: defaults, see ``_frontend_tls.py``), and the name it expects in their certificate (None: the host)
    frontend_client: ClientSecurity | None = field(default=None, repr=False)
    frontend_server_name: str | None = None
    #: The data directory's cluster id (``DATA_DIR/meta.properties``), in every AdminService answer's trailers
    cluster_id: str | None = None
    #: None: a private local Ray (stopped with the cluster); else the Ray cluster joined (actors detached)
    ray_address: str | None = None
    #: a private Ray's dashboard: the port asked for (None: none; 0: any free one), then its URL once started
    ray_dashboard_port: int | None = None
    ray_dashboard_url: str | None = None
    #: the file holding the token the dashboard asks for (mode 0600; removed on close)
    ray_dashboard_token_file: Path | None = None
    _lock_fd: int | None = None
    _saved_env: dict[str, str | None] = field(default_factory=dict)
    _ray_started: bool = False
    _closed: bool = False

    @property
    def admin_address(self) -> str:
        return host_port(self.host, self.admin_port)

    @property
    def gateway_address(self) -> str | None:
        return None if self.gateway_port is None else host_port(self.host, self.gateway_port)

    @property
    def frontend_address(self) -> str | None:
        return None if self.frontend_port is None else host_port(self.host, self.frontend_port)

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics_port is None else f"http://{host_port(self.host, self.metrics_port)}/metrics"

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
                for handle in [*self.shards.values(), *self.standbys.values(), self.controller]:
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
            forget_ray_auth_token()
        if self.ray_address is not None:
            refresh_ray_config()  # forget the token mode set for joining
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
        if self.ray_dashboard_token_file is not None:
            self.ray_dashboard_token_file.unlink(missing_ok=True)
        if self.ray_temp_dir_is_fallback:
            shutil.rmtree(self.ray_temp_dir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
