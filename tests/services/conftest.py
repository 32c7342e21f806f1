"""A real AdminService on loopback over a real ConfigStore, with a clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from quotaplane.services.admin import serve
from quotaplane.v1 import admin_pb2_grpc

from quotaplane.config import ConfigStore

#: 2023-11-14T22:13:20Z: the admin server's clock starts here in tests.
T0_MS = 1_700_000_000_000


class FakeClock:
    """The server's clock: commit times are then known, so ``DescribeClientQuotasAt`` is exact."""

    def __init__(self, now_ms: int = T0_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms


@dataclass
class AdminServer:
    store: ConfigStore
    port: int
    clock: FakeClock
    server: grpc.Server

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def admin_server(tmp_path) -> Iterator[AdminServer]:
    store = ConfigStore.open(tmp_path / "log", fsync=False)
    clock = FakeClock()
    server, port = serve(store, clock=clock)
    try:
        yield AdminServer(store, port, clock, server)
    finally:
        server.stop(None).wait()
        store.close()


@pytest.fixture
def channel(admin_server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(admin_server.address) as ch:
        yield ch


@pytest.fixture
def stub(channel) -> admin_pb2_grpc.AdminServiceStub:
    return admin_pb2_grpc.AdminServiceStub(channel)
