"""Shared by the service tests: a real AdminService on loopback over a real ConfigStore, with a clock the test
moves; one real cluster per module (``launch``: private local Ray, controller, 2 shards, AdminService and
gateway on free ports) with its admin and quota stubs, or one cluster shared by the modules that opt in
(``session_cluster``); the helpers that set quotas through it."""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import ray

from quotaplane.config import ClientQuotaFilterComponent, ConfigStore, MatchType
from quotaplane.quota import DEFAULT
from quotaplane.services.admin import serve
from quotaplane.services.launcher import Cluster, launch
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc, quota_pb2_grpc
from quotaplane.v1 import config_events_pb2 as events_pb
from tests.support import SharedContext, leaves_modules, run_modules_together

_SCRIPT = Path(sys.executable).parent / "quotaplane"
#: the installed console script (or the module, when the venv has no script)
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "quotaplane.services.cli"]

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

    def quotas(self, user: str) -> list:
        """The store's client quotas of exactly ``user`` (what a change through the service left)."""
        return self.store.describe_client_quotas(
            [ClientQuotaFilterComponent("user", MatchType.EXACT, user)], strict=True
        )


@contextmanager
def running_admin_server(log_dir: Path, **serve_options: Any) -> Iterator[AdminServer]:
    """An AdminService on a free loopback port over a fresh ConfigStore in ``log_dir``, stopped on exit;
    ``serve_options`` (``security``, ``cluster_id``) go to ``serve``."""
    store = ConfigStore.open(log_dir, fsync=False)
    clock = FakeClock()
    server, port = serve(store, clock=clock, **serve_options)
    try:
        yield AdminServer(store, port, clock, server)
    finally:
        server.stop(None).wait()
        store.close()


@pytest.fixture
def admin_server(tmp_path) -> Iterator[AdminServer]:
    with running_admin_server(tmp_path / "log") as server:
        yield server


@pytest.fixture
def start_admin(tmp_path) -> Iterator[Callable[..., AdminServer]]:
    """Start AdminServices over fresh stores: ``start_admin(security=None, **serve_options)``; all stopped
    after the test."""
    numbers = itertools.count()
    with ExitStack() as stack:

        def start(security: Any = None, **serve_options: Any) -> AdminServer:
            log_dir = tmp_path / f"log-{next(numbers)}"
            return stack.enter_context(running_admin_server(log_dir, security=security, **serve_options))

        yield start


@pytest.fixture
def channel(admin_server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(admin_server.address) as ch:
        yield ch


@pytest.fixture
def stub(channel) -> admin_pb2_grpc.AdminServiceStub:
    return admin_pb2_grpc.AdminServiceStub(channel)


# --- one real cluster per module ------------------------------------------------------------------------------
@contextmanager
def launched(tmp_path_factory: pytest.TempPathFactory, name: str, *, fsync: bool = False) -> Iterator[Cluster]:
    """``launch`` with 2 shards, the admin, gateway and metrics endpoints on free ports, 2 CPUs."""
    data_dir = Path(tmp_path_factory.mktemp(name)) / "d"
    with launch(data_dir, shards=2, admin_port=0, gateway_port=0, metrics_port=0, fsync=fsync, num_cpus=2) as c:
        yield c


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster per test module (starting Ray costs seconds); a module needing other options overrides it."""
    with launched(tmp_path_factory, request.module.__name__.rsplit(".", 1)[-1]) as c:
        yield c


#: The cluster ``session_cluster`` hands to every module that opts in, started on first use (``SharedContext``).
_SHARED: SharedContext[Cluster] = SharedContext()
#: the fixture a module's tests use (through the module's ``cluster``) to share the one cluster
SHARED_FIXTURE = "session_cluster"
#: the modules with a test using it, as collected
_SHARING_MODULES: set[object] = set()


@pytest.fixture(scope="session")
def _shared_cluster_owner() -> Iterator[SharedContext[Cluster]]:
    """Stops the shared cluster at the end of the session at the latest (normally it stops earlier)."""
    try:
        yield _SHARED
    finally:
        _SHARED.close()


@pytest.fixture(scope="module")
def session_cluster(
    _shared_cluster_owner: SharedContext[Cluster], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """The cluster shared by the modules that opt in: each overrides ``cluster`` to return this one.

    Every client quota a module adds is removed when it ends, and the removal applied by the shards and the
    gateway, so the next module finds the quotas it would find on a fresh cluster: none. A module may share only
    if it puts back any broker or topic config it changes (a fixture of its own), kills nothing of the cluster's,
    changes no shard count, and asserts nothing that needs a fresh cluster beyond that (an offset, a page another
    module's users could change); its users are its own."""
    cluster = _shared_cluster_owner.get(lambda: launched(tmp_path_factory, "shared"))
    with grpc.insecure_channel(cluster.admin_address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        before = client_quotas(stub)
        yield cluster
        remove_client_quotas(stub, [key for key in client_quotas(stub) if key not in before])
        # and applied everywhere before the next module's first call: a loaded machine (two test workers) let a
        # module ask the gateway while the previous module's removals were still on their way to it
        cluster.wait_caught_up(timeout_s=60)
        wait_propagated(cluster, cluster.gateway, timeout_s=60)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the modules sharing ``session_cluster`` one after the other, so the one cluster serves them all."""
    _SHARING_MODULES.clear()
    _SHARING_MODULES.update(run_modules_together(items, SHARED_FIXTURE))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the module fixtures' teardown: stop the shared cluster if the next test's module does not use it
    (it may start a Ray of its own)."""
    result = yield
    if _SHARED.open and leaves_modules(nextitem, _SHARING_MODULES):
        _SHARED.close()
    return result


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[admin_pb2_grpc.AdminServiceStub]:
    with grpc.insecure_channel(cluster.admin_address) as channel:
        yield admin_pb2_grpc.AdminServiceStub(channel)


@pytest.fixture(scope="module")
def quota(cluster: Cluster) -> Iterator[quota_pb2_grpc.QuotaServiceStub]:
    assert cluster.gateway_address is not None
    with grpc.insecure_channel(cluster.gateway_address) as channel:
        yield quota_pb2_grpc.QuotaServiceStub(channel)


def entity(user: object, client_id: object) -> list[events_pb.EntityData]:
    """A quota entity as AdminService takes it: ``None`` leaves a component out, ``DEFAULT`` is its default."""
    out = []
    for kind, name in (("user", user), ("client-id", client_id)):
        if name is None:
            continue
        if name is DEFAULT:
            out.append(events_pb.EntityData(entity_type=kind))
        else:
            out.append(events_pb.EntityData(entity_type=kind, entity_name=name))
    return out


#: a client quota as described: ((entity type, name or None for its default), ...) in the entity's order, and key
QuotaKey = tuple[tuple[tuple[str, str | None], ...], str]


def client_quotas(admin: admin_pb2_grpc.AdminServiceStub) -> dict[QuotaKey, float]:
    """Every client quota on the cluster (DescribeClientQuotas with no filter), by entity and key."""
    described = admin.DescribeClientQuotas(admin_pb.DescribeClientQuotasRequest(components=[], strict=False))
    return {
        (
            tuple((e.entity_type, e.entity_name if e.HasField("entity_name") else None) for e in entry.entity),
            value.key,
        ): value.value
        for entry in described.entries
        for value in entry.values
    }


def remove_client_quotas(admin: admin_pb2_grpc.AdminServiceStub, keys: Iterable[QuotaKey]) -> None:
    """Remove these quotas (``session_cluster`` takes back every quota a module added)."""
    entries = [
        admin_pb.AlterClientQuotasRequest.EntryData(
            entity=[
                events_pb.EntityData(entity_type=kind)
                if name is None
                else events_pb.EntityData(entity_type=kind, entity_name=name)
                for kind, name in components
            ],
            ops=[admin_pb.AlterClientQuotasRequest.OpData(key=key)],
        )
        for components, key in keys
    ]
    if entries:
        answer = admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=entries))
        assert [e.error_code for e in answer.entries] == [0] * len(entries), answer


def wait_propagated(cluster: Cluster, *gateways: object, timeout_s: float = 2.0) -> float:
    """Seconds until every gateway's replica reached the log's end offset (one propagation round)."""
    started = time.monotonic()
    end = ray.get(cluster.controller.end_offset.remote())
    while any(g.config_offset < end for g in gateways):  # type: ignore[attr-defined]
        assert time.monotonic() - started < timeout_s, f"not propagated in {timeout_s} s"
        time.sleep(0.005)
    return time.monotonic() - started
