"""A running ``quotaplane up`` (``launch`` with the Kafka frontend on a free port) shared by the frontend's
server tests, plus a small blocking Kafka client built on the codec for the checks real clients cannot
make (pushing too fast, raw frames)."""

from __future__ import annotations

import contextlib
import io
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from quotaplane.archive import ArchiveReader, iter_segments
from quotaplane.exporters.archive import TELEMETRY_STREAM
from quotaplane.protocol import decode_response, encode_request
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc


@dataclass
class Running:
    cluster: Any
    admin: admin_pb2_grpc.AdminServiceStub
    channel: grpc.Channel

    @property
    def frontend(self) -> Any:
        return self.cluster.frontend

    @property
    def port(self) -> int:
        return self.cluster.frontend_port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cli(self, *args: str) -> str:
        """Run a ``quotaplane`` admin command against this cluster; its stdout (asserting exit 0)."""
        from quotaplane.services.cli import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main([*args, "--bootstrap-server", self.cluster.admin_address])
        assert code == 0, out.getvalue()
        return out.getvalue()

    def set_broker_config(self, name: str, value: str | None) -> None:
        Config = admin_pb.IncrementalAlterConfigsRequest.AlterableConfig
        config = (
            Config(name=name, config_operation=admin_pb.ALTER_CONFIG_OP_TYPE_DELETE)
            if value is None
            else Config(name=name, config_operation=admin_pb.ALTER_CONFIG_OP_TYPE_SET, value=value)
        )
        resource = admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=admin_pb.RESOURCE_TYPE_BROKER, resource_name="", configs=[config]
        )
        answer = self.admin.IncrementalAlterConfigs(admin_pb.IncrementalAlterConfigsRequest(resources=[resource]))
        assert [r.error_code for r in answer.responses] == [0], answer
        self.cluster.wait_caught_up(timeout_s=30)

    def archived(self) -> list[Any]:
        """Every archived telemetry record under the data dir's shards."""
        out = []
        reader = ArchiveReader()
        for shard_dir in sorted((self.cluster.data_dir / "shards").glob("*")):
            if not (shard_dir / TELEMETRY_STREAM).is_dir():
                continue
            for path in iter_segments(shard_dir, TELEMETRY_STREAM):
                out.extend(reader.read_segment(path))
        return out


@pytest.fixture(scope="package")
def running(tmp_path_factory: pytest.TempPathFactory, spark: object) -> Iterator[Running]:
    """The cluster with its frontend. It asks for the session's ``spark`` first: PySpark forks the JVM
    launcher from this process, and a fork while this cluster's gRPC calls are in flight crashed the child
    (gRPC skips its fork handlers then: SIGSEGV, JAVA_GATEWAY_EXITED), so Spark starts before any of them."""
    from quotaplane.services.launcher import launch

    root = Path(tmp_path_factory.mktemp("frontend")) / "d"
    cluster = launch(
        root, shards=2, admin_port=0, gateway_port=0, metrics_port=None, frontend_port=0, fsync=False, num_cpus=2
    )
    channel = grpc.insecure_channel(cluster.admin_address)
    try:
        yield Running(cluster, admin_pb2_grpc.AdminServiceStub(channel), channel)
    finally:
        channel.close()
        cluster.close()


class WireClient:
    """One Kafka connection, blocking, speaking the codec: ``call`` sends a request and reads its response."""

    def __init__(self, port: int, *, client_id: str = "qp-wire", timeout_s: float = 10.0, host: str = "127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.client_id = client_id
        self._correlation = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes | None:
        """One response frame without its size, or None when the server closed the connection."""
        head = self._read(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read(size)

    def _read(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            try:
                chunk = self.sock.recv(n - len(data))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self._correlation += 1
        self.sock.sendall(encode_request(api_key, version, self._correlation, body, client_id=self.client_id))
        frame = self.read_frame()
        assert frame is not None, f"the server closed the connection instead of answering API {api_key}"
        response = decode_response(api_key, version, frame)
        assert response.correlation_id == self._correlation
        return response.body

    def closed_by_server(self, timeout_s: float = 5.0) -> bool:
        self.sock.settimeout(timeout_s)
        try:
            return self.read_frame() is None
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def wait_until(predicate: Any, timeout_s: float = 20.0, every_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every_s)
