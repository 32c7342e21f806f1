"""What every part of the launcher shares: its defaults, its one error, and how it names an address.

Kept apart so the checks, the Ray start-up, the servers and the :class:`~quotaplane.services.launcher.Cluster`
handle can each be read alone without importing one another.
"""

from __future__ import annotations

import os

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
    "LOCK_FILE",
    "NAMESPACE",
    "NODE_FAILURE_DETECTION",
    "LaunchError",
    "default_shard_count",
    "first_line",
    "host_port",
]

DEFAULT_DATA_DIR = "quotaplane-data"


def default_shard_count(cpus: int) -> int:
    """The shards a new cluster starts with on a machine of ``cpus`` usable cores: one per core but one, and at
    least one. A shard runs one call at a time, so more shards than cores only add switching; and the process
    ``up`` runs in (the gateway, the frontends, the metrics endpoint) needs a core of its own under load. Measured
    on 2 cores (docs/performance.md, "The default shard count"): one shard decided 244-287k usage items a second
    where two decided 175-200k, each of two shards' serving threads waiting for a core 40-47 % of the time."""
    return max(1, cpus - 1)


def _usable_cpus() -> int:
    """The cores this process may run on (its affinity mask, as a container's cpuset sets it), else all."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


DEFAULT_SHARDS = default_shard_count(_usable_cpus())
DEFAULT_ADMIN_PORT = 9093
DEFAULT_GATEWAY_PORT = 9094
#: Prometheus' conventional exporter range; the shipped deploy/prometheus/prometheus.yml scrapes it.
DEFAULT_METRICS_PORT = 9464
#: Kafka's own port: the Kafka-facing frontend answers clients that know nothing but a bootstrap server.
DEFAULT_FRONTEND_PORT = 9092
DEFAULT_HOST = "127.0.0.1"
#: Ray's own dashboard port; ``up`` takes another free one when it is taken (another Ray on this machine)
DEFAULT_DASHBOARD_PORT = 8265
#: The dashboard runs jobs and kills actors for anyone who reaches it: loopback only, whatever ``--host`` is.
DASHBOARD_HOST = "127.0.0.1"
NAMESPACE = "quotaplane"
#: How fast Ray's GCS declares a raylet dead, so the shards of a lost node are restarted elsewhere (Ray's system
#: config, given to the head as ``RAY_<name>`` variables: the Helm chart's ``ray.nodeFailureDetection``). A node
#: is dead after ``health_check_failure_threshold`` failed checks in a row, one every ``health_check_period_ms``:
#: 0.5 s for a crashed host (its raylet's port refuses at once), 5 x (100 + 250) ms = 1.75 s for one that vanished
#: (each check waits ``health_check_timeout_ms``). Ray's defaults (3,000 / 10,000 / 5) take 15 s and 65 s; a
#: raylet too busy to answer for five checks in a row is taken for dead (its shards restart elsewhere, with
#: their checkpoint: see docs/scaling.md).
NODE_FAILURE_DETECTION = {
    "health_check_period_ms": 100,
    "health_check_timeout_ms": 250,
    "health_check_failure_threshold": 5,
}
LOCK_FILE = "up.lock"


class LaunchError(Exception):
    """A reason ``up`` cannot start (or stopped), as one line for the operator."""


def first_line(exc: BaseException) -> str:
    """An exception as one line: its message's first line, else its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def host_port(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets.

    >>> host_port("127.0.0.1", 9093), host_port("::1", 9093)
    ('127.0.0.1:9093', '[::1]:9093')
    """
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
