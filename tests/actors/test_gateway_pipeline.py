"""A gateway's shard worker with micro-batches pipelined on the shard's direct channel (``ShardWorker._pipeline``).

A real ``DirectChannelServer`` on loopback serves a scripted shard; the worker is the gateway's own, with a
small stand-in for the gateway it reports to. Checked: a second batch goes on the wire before the first is
answered, the shard sees the items in the order they were queued, a fenced refusal sends every batch behind it
back together and in order, a batch the shard refuses as invalid fails alone, and a broken connection fails every
batch on it.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import ray

from quotaplane.actors import UsageColumns, unpack_usage
from quotaplane.actors._direct import DirectChannelServer
from quotaplane.services.gateway._batching import Pending, ShardWorker, Unit
from quotaplane.services.gateway._checks import GatewayConfig, InvalidArgument, Unavailable

pytestmark = pytest.mark.usefixtures("ray_cluster")

T0 = 1_700_000_000_000


class ScriptedShard:
    """Serves usage at ``offset`` (throttle = the item's value), refuses older offsets as fenced, and holds each
    batch until ``release`` is set, so the next one can reach the wire meanwhile."""

    def __init__(self, offset: int = 5) -> None:
        self.offset = offset
        self.seen: list[tuple[int, list[str]]] = []
        self.release = threading.Event()
        self.release.set()
        self.invalid_users: set[str] = set()
        self.server = DirectChannelServer(self.serve, "127.0.0.1")

    def serve(self, kind: str, offset: int, items: Any) -> Any:
        assert isinstance(items, UsageColumns)  # usage travels as columns
        groups = unpack_usage(items)
        users = [u for _, group in groups.values() for u, _, _, _ in group]
        self.seen.append((offset, users))
        self.release.wait(10)
        if self.invalid_users & set(users):
            raise ValueError("item 0: refused by the script")
        if offset != self.offset:
            return self.offset, None, ()
        throttles = [0] * len(items)
        for indices, group in groups.values():
            for index, (_, _, value, _) in zip(indices or range(len(items)), group, strict=True):
                throttles[index] = int(value)
        return self.offset, throttles

    @property
    def direct_address(self) -> SimpleNamespace:
        remote = lambda: ray.put(self.server.address)  # noqa: E731
        return SimpleNamespace(remote=remote, options=lambda **_: SimpleNamespace(remote=remote))


class StandInGateway:
    """What a shard worker reports to: finished requests, re-routed units (in the order handed back)."""

    def __init__(self) -> None:
        self.config = GatewayConfig(shard_timeout_s=10.0, max_shard_batch_items=3)  # a unit is a micro-batch
        self.stopping = False
        self.config_offset = 5
        self.rerouted: list[list[str]] = []
        self.reroute_offsets: list[int] = []
        self.done_units = 0
        self.barrier = SimpleNamespace(done=self._done)

    def _done(self, units: list[Unit]) -> None:
        self.done_units += len(units)

    def finish(self, pending: Pending, error: Exception | None = None) -> None:
        if error is not None:
            pending.fail(error)

    def reroute(self, units: list[Unit], shard_offset: int, events: Any = ()) -> None:
        self.rerouted.append([unit.pending.items[i][1] for unit in units for i in unit.indices])
        self.reroute_offsets.append(shard_offset)


def unit(name: str, offset: int = 5, count: int = 3) -> Unit:
    items = [("PRODUCE", f"{name}-{k}", "c", float(k), T0 + k) for k in range(count)]
    return Unit(Pending("usage", items, lambda _items, _indices: (offset, [])), list(range(count)), offset)


@pytest.fixture
def shard_and_worker():
    shard = ScriptedShard()
    gateway = StandInGateway()
    worker = ShardWorker(gateway, "0", shard)  # type: ignore[arg-type]
    calls: list[str] = []
    for name in ("send", "receive"):  # record the order of the channel's calls; each still does its work
        real = getattr(worker.channel, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            return _real(*args)

        setattr(worker.channel, name, spy)
    yield shard, gateway, worker, calls
    gateway.stopping = True
    shard.release.set()
    worker.join(5)
    shard.server.close()


def connect(worker: ShardWorker) -> None:
    """The first batch goes one at a time and opens the connection; pipelining starts on the next."""
    first = unit("warm")
    worker.put([first])
    worker.start()
    assert first.pending.done.wait(10) and first.pending.error is None


def wait_until(condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_the_next_batch_goes_on_the_wire_while_the_shard_serves_and_answers_keep_their_order(shard_and_worker):
    shard, gateway, worker, calls = shard_and_worker
    connect(worker)
    assert calls == ["send", "receive"]
    shard.release.clear()  # the shard holds each batch until released
    units = [unit(f"b{n}") for n in range(6)]
    worker.put(units)
    wait_until(lambda: len(calls) >= 5)
    time.sleep(0.05)
    # b1 went on the wire while b0 was held, and no third: the depth is 2
    assert calls == ["send", "receive", "send", "send", "receive"]
    shard.release.set()
    for u in units:
        assert u.pending.done.wait(10) and u.pending.error is None
        assert u.pending.results == [0, 1, 2]
    assert [user for _, users in shard.seen for user in users] == [
        f"{name}-{k}" for name in ["warm", *(f"b{n}" for n in range(6))] for k in range(3)
    ]
    assert gateway.rerouted == [] and gateway.done_units == 7


def test_a_fenced_refusal_sends_every_batch_behind_it_back_together_in_order(shard_and_worker):
    shard, gateway, worker, _ = shard_and_worker
    connect(worker)
    shard.offset = 6  # the shard moved on: batches routed at offset 5 are refused
    shard.release.clear()
    worker.put([unit(f"f{n}") for n in range(3)])
    wait_until(lambda: len(shard.seen) >= 2)
    shard.release.set()
    wait_until(lambda: sum(map(len, gateway.rerouted)) >= 9)
    # the two on the wire handed back together, in their order, then the third
    assert gateway.rerouted == [[f"f{n}-{k}" for n in range(2) for k in range(3)], [f"f2-{k}" for k in range(3)]]
    assert gateway.reroute_offsets == [6, 6]
    wait_until(lambda: gateway.done_units == 4)
    assert gateway.done_units == 4


def test_an_invalid_batch_fails_alone_and_a_broken_connection_fails_every_batch_on_it(shard_and_worker):
    shard, _, worker, calls = shard_and_worker
    connect(worker)
    shard.invalid_users = {"bad-0"}
    shard.release.clear()
    bad, good = unit("bad"), unit("good")
    worker.put([bad, good])
    wait_until(lambda: len(calls) >= 5)
    shard.release.set()
    assert bad.pending.done.wait(10) and isinstance(bad.pending.error, InvalidArgument)
    assert good.pending.done.wait(10) and good.pending.error is None and good.pending.results == [0, 1, 2]

    shard.release.clear()
    lost = [unit("lost-a"), unit("lost-b")]
    worker.put(lost)
    wait_until(lambda: len(shard.seen) >= 4)
    time.sleep(0.05)
    assert calls[-3:] == ["send", "send", "receive"]  # both on the wire
    shard.server.close()  # the shard goes away with both batches on the wire
    shard.release.set()
    for u in lost:
        assert u.pending.done.wait(10) and isinstance(u.pending.error, Unavailable)
