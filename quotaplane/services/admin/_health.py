"""The AdminService's gRPC health follows the config log: NOT_SERVING while the log has failed.

A write or fsync of the log that failed (a full disk, an I/O error) leaves the store refusing every change
until it is reopened (the controller's ``health()`` says so: ``log_error``), yet the process, its port and
its reads are fine, so health checks kept saying SERVING while every change was refused. A thread polls the
backend's report every ``poll_s`` and sets the standard ``grpc.health.v1`` status of
``quotaplane.v1.AdminService`` to NOT_SERVING while the log is failed, SERVING again once it is not (the
controller actor restarted and reopened its log). Polling, not each call, because a failed log must show
even when nobody writes, and a load balancer asking for health must not cost a controller call per check.

Only the AdminService's own status changes: the server's (``""``) stays SERVING, since the process is alive
and a liveness probe restarting it would not mend the log. A backend that cannot be asked (the controller
unreachable or restarting) leaves the status as it is: that is UNAVAILABLE on each call already, and a
restart must not flap the health of every admin server of the fleet. The thread ends with the server, or
quietly when asking raises SystemExit (what Ray's ``get`` raises in a driver that is shutting down).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

__all__ = ["DEFAULT_HEALTH_POLL_S", "log_error_probe", "watch_log_health"]

log = logging.getLogger(__name__)

#: How often the log's state is asked for (one small controller call per admin server and period).
DEFAULT_HEALTH_POLL_S = 1.0

#: A probe's answer: the log's error (its text) while it has failed, else None.
Probe = Callable[[], "str | None"]


def log_error_probe(backend: Any) -> Probe | None:
    """How to ask ``backend`` whether its log has failed: ``health()`` (the ConfigController's report, through
    :class:`~quotaplane.services.admin.ControllerBackend`), else a ``failure`` attribute (a ``ConfigStore`` in
    process); None for a backend that reports neither."""
    report = getattr(backend, "health", None)
    if callable(report):

        def from_report() -> str | None:
            answer = report()
            return None if answer.get("serving", True) else str(answer.get("log_error") or "the log has failed")

        return from_report
    if hasattr(type(backend), "failure") or hasattr(backend, "failure"):

        def from_failure() -> str | None:
            failure = backend.failure
            return None if failure is None else str(failure)

        return from_failure
    return None


def watch_log_health(
    server: grpc.Server, servicer: health.HealthServicer, service: str, probe: Probe, poll_s: float
) -> threading.Thread:
    """Start the thread keeping ``service``'s health in step with ``probe`` until ``server`` terminates."""

    def run() -> None:
        failed: str | None = None
        # wait_for_termination is True when it timed out: the server still runs
        while server.wait_for_termination(timeout=poll_s):
            try:
                error = probe()
            except Exception as e:  # unreachable: keep the last status (see the module docstring)
                log.debug("cannot ask the config log's health: %s", e)
                continue
            except SystemExit:
                # a probe still in flight when the server stopped and Ray shut down (``Cluster.close`` does not wait
                # for this thread): Ray's get raises SystemExit there; the loop would end at its next wait anyway
                log.debug("the config log's health is no longer watched: Ray is shutting down")
                return
            if (error is None) == (failed is None):
                continue
            if error is not None:
                log.error("the config log has failed, AdminService health NOT_SERVING: %s", error)
            else:
                log.warning("the config log takes changes again, AdminService health SERVING")
            failed = error
            status = health_pb2.HealthCheckResponse.NOT_SERVING if error else health_pb2.HealthCheckResponse.SERVING
            servicer.set(service, status)

    thread = threading.Thread(target=run, name="admin-log-health", daemon=True)
    thread.start()
    return thread
