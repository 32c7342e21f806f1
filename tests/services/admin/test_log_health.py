"""The AdminService's standard gRPC health follows the config log: NOT_SERVING while a disk fault has failed
the log (the store refuses every change), SERVING again once the log is reopened; the server's own status
("") stays SERVING throughout. The fault enters at the log's I/O seam (``LogIO``), over real gRPC."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from quotaplane.config import ConfigStore
from quotaplane.config import _log as log_module
from quotaplane.config._log import LogIO
from quotaplane.services.admin import SERVICE_NAME, serve
from quotaplane.v1 import admin_pb2 as pb
from quotaplane.v1 import admin_pb2_grpc
from quotaplane.v1 import config_events_pb2 as events_pb

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_POLL_S = 0.05


class _FullDisk(LogIO):
    def write(self, fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _Reopenable:
    """A ConfigStore the test can reopen under a running AdminService, as Ray restarts the controller."""

    def __init__(self, store: ConfigStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def _status(channel: grpc.Channel, service: str) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def _eventually(channel: grpc.Channel, service: str, expected: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (status := _status(channel, service)) != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert status == expected


def _alter(channel: grpc.Channel, value: float) -> grpc.StatusCode:
    entity = [events_pb.EntityData(entity_type="user", entity_name="alice")]
    op = pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=value)
    request = pb.AlterClientQuotasRequest(entries=[pb.AlterClientQuotasRequest.EntryData(entity=entity, ops=[op])])
    try:
        admin_pb2_grpc.AdminServiceStub(channel).AlterClientQuotas(request, timeout=10)
    except grpc.RpcError as e:
        return e.code()  # type: ignore[attr-defined]
    return grpc.StatusCode.OK


def test_a_failed_log_makes_the_admin_service_not_serving_until_it_is_reopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _Reopenable(ConfigStore.open(tmp_path, fsync=False))
    server, port = serve(backend, health_poll_s=_POLL_S)  # type: ignore[arg-type]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert _alter(channel, 1.0) is grpc.StatusCode.OK
            time.sleep(5 * _POLL_S)
            assert (_status(channel, SERVICE_NAME), _status(channel, "")) == (SERVING, SERVING)

            monkeypatch.setattr(log_module, "_io", _FullDisk())
            assert _alter(channel, 2.0) is grpc.StatusCode.UNAVAILABLE  # the write fails: the log is failed
            _eventually(channel, SERVICE_NAME, NOT_SERVING)
            assert _status(channel, "") == SERVING  # the process is fine: no liveness restart for a disk
            time.sleep(5 * _POLL_S)
            assert _status(channel, SERVICE_NAME) == NOT_SERVING  # it stays so: the failure is permanent

            monkeypatch.setattr(log_module, "_io", LogIO())  # space returns; the store is reopened
            backend.store.close()
            backend.store = ConfigStore.open(tmp_path, fsync=False)
            _eventually(channel, SERVICE_NAME, SERVING)
            assert _alter(channel, 3.0) is grpc.StatusCode.OK
    finally:
        server.stop(None).wait()
        backend.store.close()


class _Controller(_Reopenable):
    """A backend reporting as ``ControllerBackend.health`` does, or failing as an unreachable controller; its
    admin calls go to the store."""

    def __init__(self, store: ConfigStore) -> None:
        super().__init__(store)
        self.report: Callable[[], dict[str, Any]] = lambda: {"serving": True, "log_error": None}

    def health(self) -> dict[str, Any]:
        return self.report()


def test_the_controllers_report_drives_health_and_an_unreachable_controller_changes_nothing(tmp_path: Path) -> None:
    store = ConfigStore.open(tmp_path, fsync=False)
    controller = _Controller(store)
    server, port = serve(controller, health_poll_s=_POLL_S)  # type: ignore[arg-type]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert _status(channel, SERVICE_NAME) == SERVING
            controller.report = lambda: {"serving": False, "log_error": "No space left on device"}
            _eventually(channel, SERVICE_NAME, NOT_SERVING)

            def unreachable() -> dict[str, Any]:
                raise RuntimeError("the config controller is unavailable")

            controller.report = unreachable
            time.sleep(5 * _POLL_S)
            assert _status(channel, SERVICE_NAME) == NOT_SERVING  # kept: not known to have recovered
            controller.report = lambda: {"serving": True, "log_error": None}
            _eventually(channel, SERVICE_NAME, SERVING)
            controller.report = unreachable
            time.sleep(5 * _POLL_S)
            assert _status(channel, SERVICE_NAME) == SERVING  # kept: a restarting controller does not flap it
    finally:
        server.stop(None).wait()
        store.close()


def test_a_ray_shutting_down_under_the_server_ends_the_watch_quietly(tmp_path: Path) -> None:
    """Ray's ``get`` raises SystemExit in a driver that shuts down while an admin server still runs: the watch
    ends there (nothing is left to ask) without an unhandled exception in its thread, and the status stays."""
    store = ConfigStore.open(tmp_path, fsync=False)
    controller = _Controller(store)
    unhandled: list[threading.ExceptHookArgs] = []
    previous_hook = threading.excepthook
    threading.excepthook = unhandled.append
    asked: list[float] = []

    def shutting_down() -> dict[str, Any]:
        asked.append(time.monotonic())
        raise SystemExit(0)

    server, port = serve(controller, health_poll_s=_POLL_S)  # type: ignore[arg-type]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert _status(channel, SERVICE_NAME) == SERVING
            controller.report = shutting_down
            time.sleep(10 * _POLL_S)
            assert len(asked) == 1  # asked once, then the thread stopped asking
            assert unhandled == []
            assert _status(channel, SERVICE_NAME) == SERVING
    finally:
        threading.excepthook = previous_hook
        server.stop(None).wait()
        store.close()
