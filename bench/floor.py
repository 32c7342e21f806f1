"""Benchmark of the floor under a decision: what the hops around the core cost on this machine with no work in them.

Why: ``bench/cluster_quota.py`` measures one 1000-item batch through a gateway and a shard at 7-10 ms p50 where
issue 17 aims at 3 ms, and one item at ~1 ms. Before any more of the path is rewritten, this measures what no
rewrite of the gateway's or the shard's own work can remove: the gRPC stream a client sends on, the hop to the
shard, and the core. Their sum is the least a batch can take through the project's shape (a Python gRPC gateway
in front of a shard process), on this machine.

What it measures
    On ``bench/cluster_quota.py``'s own workload and messages (``UsageBatch`` with ``UsageColumns``; batches of
    ``--batch`` items and of one item), one batch in flight, from a client in this process to a server in a
    process of its own (as the cluster bench's load and gateway are):

    - ``grpc_echo``: a ``QuotaService.RecordUsage`` bidi stream whose server answers each batch with a
      ``ThrottleBatch`` of zeros, no checks and no work. Three servers: ``threads`` (grpcio's thread-pool server,
      the batch handed from a reader thread to a worker thread and back to the stream's thread, as the gateway's
      ``RecordUsage`` does), ``sync`` (answered from the stream's own thread) and ``aio`` (``grpc.aio`` on the
      frontend's event loop, uvloop where installed). p50 / p99 of the round trip, and the server's CPU a batch
      (``/proc``).
    - ``direct_hop``: the gateway -> shard hop's transport alone: the batch as the gateway sends it
      (``pickle((kind, offset, UsageColumns))`` in one frame of ``quotaplane.actors._direct``'s framing on a
      loopback TCP connection), read and unpickled by a thread of the server process, answered with the frame a
      shard answers (``("ok", (offset, throttle times))``), read and unpickled again.
    - ``core``: the in-process core on the same batches (``bench/cluster_quota.py``'s ``run_core``): its p50 / p99
      for one batch on warm sensors, i.e. the decisions themselves.
    - ``floor``: the fastest echo + the hop + the core, for the batch and for one item, against issue 17's aims
      (3 ms for a 1000-item batch, 1 ms for one item): what is left of an aim for the gateway's and the shard's
      own work (checks, routing, packing, the split by quota type, the throttle sensors, the answer).

Output: one JSON object on stdout (workload, figures, machine). Run:
``.venv/bin/python bench/floor.py [--quick] [--batches N] [--batch N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

from _machine import machine
from cluster_quota import T0, _usage_batch, percentile, run_core, workload

#: issue 17's latency aims (ms): one ``--batch``-item batch through the cluster, one item
AIM_ONE_BATCH_MS = 3.0
AIM_ONE_ITEM_MS = 1.0
SERVERS = ("threads", "sync", "aio")
_OFFSET = 7  # a config offset the hop's frames carry, as a gateway's do


# --- the servers (each in a process of its own: ``floor.py --serve KIND``) ----------------------------------
def _answer(pb: Any, batch: Any) -> Any:
    return pb.ThrottleBatch(batch_id=batch.batch_id, throttle_time_ms=[0] * len(batch.columns.quota_type))


def _servicers() -> dict[str, Any]:
    from quotaplane.v1 import quota_pb2 as pb
    from quotaplane.v1 import quota_pb2_grpc as pb_grpc

    class Sync(pb_grpc.QuotaServiceServicer):
        def RecordUsage(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
            for batch in request_iterator:
                yield _answer(pb, batch)

    class Threads(pb_grpc.QuotaServiceServicer):
        """The gateway's hand-offs without its work: a reader thread takes each batch off the stream and queues it
        for a worker thread (the shard worker's place), whose answer wakes the stream's thread to send it."""

        def __init__(self) -> None:
            self.work: queue.SimpleQueue[Any] = queue.SimpleQueue()
            threading.Thread(target=self._worker, daemon=True).start()

        def _worker(self) -> None:
            while True:
                batch, done, box = self.work.get()
                box.append(_answer(pb, batch))
                done.set()

        def RecordUsage(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
            answers: queue.SimpleQueue[Any] = queue.SimpleQueue()

            def read() -> None:
                for batch in request_iterator:
                    done, box = threading.Event(), []
                    self.work.put((batch, done, box))
                    answers.put((done, box))
                answers.put(None)

            threading.Thread(target=read, daemon=True).start()
            while (entry := answers.get()) is not None:
                done, box = entry
                done.wait()
                yield box[0]

    class Aio(pb_grpc.QuotaServiceServicer):
        async def RecordUsage(self, request_iterator: Any, context: Any) -> Any:
            async for batch in request_iterator:
                yield _answer(pb, batch)

    return {"sync": Sync, "threads": Threads, "aio": Aio, "add": pb_grpc.add_QuotaServiceServicer_to_server}


def _serve_grpc(kind: str) -> None:
    import grpc

    servicers = _servicers()
    if kind == "aio":
        from quotaplane.services.frontend._loop import new_event_loop

        async def serve() -> None:
            server = grpc.aio.server()
            servicers["add"](servicers["aio"](), server)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            print(port, flush=True)
            await server.wait_for_termination()

        new_event_loop().run_until_complete(serve())
        return
    server = grpc.server(futures.ThreadPoolExecutor(8))
    servicers["add"](servicers[kind](), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def _serve_hop() -> None:
    """A shard's channel without the shard: each frame read, unpickled and answered with zeros, in one thread."""
    from quotaplane.actors import read_frame, write_frame

    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    sock, _ = listener.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    stream = sock.makefile("rb")
    while (frame := read_frame(stream)) is not None:
        _, offset, columns = pickle.loads(frame)
        write_frame(sock, pickle.dumps(("ok", (offset, [0] * len(columns))), protocol=pickle.HIGHEST_PROTOCOL))


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Server:
    """``floor.py --serve KIND`` in a process of its own; the port it printed."""

    def __init__(self, kind: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.process.kill()
            raise RuntimeError(f"the {kind} server did not start (printed {line!r})")
        self.port = int(line)

    def cpu_s(self) -> float:
        return _cpu_s(self.process.pid)

    def __enter__(self) -> _Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()


# --- the clients --------------------------------------------------------------------------------------------
def _timed(round_trips: Iterator[float], count: int, cpu: Callable[[], float]) -> dict[str, Any]:
    """p50 / p99 of the round trips after a tenth of them (the warm-up), and the server's CPU over those."""
    warm = max(1, count // 10)
    seconds: list[float] = []
    cpu_from = 0.0
    for index, took in enumerate(round_trips):
        if index == warm - 1:
            cpu_from = cpu()
        elif index >= warm:
            seconds.append(took)
    return {
        "p50_ms": round(percentile(seconds, 0.5) * 1000, 3),
        "p99_ms": round(percentile(seconds, 0.99) * 1000, 3),
        "server_cpu_ms_per_batch": round((cpu() - cpu_from) * 1000 / len(seconds), 3),
        "batches_timed": len(seconds),
    }


def grpc_echo(kind: str, batches: Sequence[Any]) -> dict[str, Any]:
    """One batch at a time on one RecordUsage stream: each sent once the answer of the one before is back."""
    import grpc

    with _Server(kind) as server, grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        from quotaplane.v1 import quota_pb2_grpc as pb_grpc

        turn: queue.SimpleQueue[None] = queue.SimpleQueue()
        sent: list[float] = []

        def requests() -> Iterator[Any]:
            for batch in batches:
                sent.append(time.perf_counter())
                yield batch
                turn.get()

        def round_trips() -> Iterator[float]:
            for answer in pb_grpc.QuotaServiceStub(channel).RecordUsage(requests()):
                took = time.perf_counter() - sent[answer.batch_id]
                if len(answer.throttle_time_ms) != len(batches[answer.batch_id].columns.quota_type):
                    raise RuntimeError(f"the {kind} server answered batch {answer.batch_id} wrongly")
                yield took
                turn.put(None)

        return _timed(round_trips(), len(batches), server.cpu_s)


def direct_hop(columns: Sequence[Any]) -> dict[str, Any]:
    """One frame at a time on a loopback connection, as a shard worker sends its micro-batches."""
    from quotaplane.actors import read_frame, write_frame

    with _Server("hop") as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream = sock.makefile("rb")

        def round_trips() -> Iterator[float]:
            for batch in columns:
                began = time.perf_counter()
                write_frame(sock, pickle.dumps(("usage", _OFFSET, batch), protocol=pickle.HIGHEST_PROTOCOL))
                frame = read_frame(stream)
                outcome, (offset, throttles) = pickle.loads(frame or b"")
                took = time.perf_counter() - began
                if outcome != "ok" or offset != _OFFSET or len(throttles) != len(batch):
                    raise RuntimeError("the hop's server answered wrongly")
                yield took

        return _timed(round_trips(), len(columns), server.cpu_s)


def _columns(items: Sequence[Any]) -> Any:
    """A batch's items as the gateway hands them to a shard (``UsageColumns``, quota types by name)."""
    from quotaplane.actors import pack_usage

    names = {1: "PRODUCE", 2: "FETCH"}
    packed = pack_usage([(names[t], u, c, v, n) for t, u, c, v, n in items])
    if packed is None:
        raise RuntimeError("the workload's items do not pack as columns")
    return packed


def floor(echo: dict[str, dict[str, Any]], hop: dict[str, Any], core_p50_ms: float, aim_ms: float) -> dict[str, Any]:
    """The fastest echo + the hop + the core (p50s), and what that leaves of ``aim_ms``."""
    fastest = min(echo, key=lambda kind: echo[kind]["p50_ms"])
    total = echo[fastest]["p50_ms"] + hop["p50_ms"] + core_p50_ms
    return {
        "fastest_server": fastest,
        "grpc_echo_p50_ms": echo[fastest]["p50_ms"],
        "direct_hop_p50_ms": hop["p50_ms"],
        "core_p50_ms": core_p50_ms,
        "floor_p50_ms": round(total, 3),
        "aim_p50_ms": aim_ms,
        "left_for_gateway_and_shard_work_ms": round(aim_ms - total, 3),
    }


def _batch_figures(items: Sequence[Any], batch: int, count: int, users: int) -> dict[str, Any]:
    from quotaplane.v1 import quota_pb2 as pb

    chunks = [items[start : start + batch] for start in range(0, batch * count, batch)]
    messages = [_usage_batch(pb, index, chunk, "columns") for index, chunk in enumerate(chunks)]
    echo = {kind: grpc_echo(kind, messages) for kind in SERVERS}
    hop = direct_hop([_columns(chunk) for chunk in chunks])
    core, _ = run_core(items[: batch * count], users, batch, 1)
    core_figures = {key: core[key] for key in ("batch_p50_ms", "batch_p99_ms", "batches_timed")}
    aim = AIM_ONE_BATCH_MS if batch > 1 else AIM_ONE_ITEM_MS
    return {
        "grpc_echo": echo,
        "direct_hop": hop,
        "core": core_figures,
        "floor": floor(echo, hop, core["batch_p50_ms"], aim),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run (few batches)")
    parser.add_argument("--batches", type=int, default=1000, help="batches per measurement (a tenth is warm-up)")
    parser.add_argument("--batch", type=int, default=1000, help="items per batch (the second run uses 1)")
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--serve", choices=(*SERVERS, "hop"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve == "hop":
        _serve_hop()
        return 0
    if args.serve:
        _serve_grpc(args.serve)
        return 0
    if args.batches < 2 or args.batch < 1:
        parser.error("--batches must be >= 2 and --batch >= 1")
    if args.quick:
        args.batches, args.users = min(args.batches, 60), min(args.users, 200)

    items = workload(args.users, args.batches * args.batch, args.seed, T0)
    one_batch = _batch_figures(items, args.batch, args.batches, args.users)
    one_item = _batch_figures(items, 1, args.batches, args.users)
    report = {
        "benchmark": "floor",
        "workload": {
            "batches": args.batches,
            "batch_items": args.batch,
            "users": args.users,
            "seed": args.seed,
            "quick": args.quick,
            "wire": "UsageBatch with UsageColumns, one batch in flight",
        },
        "figures": {"one_batch": one_batch, "one_item": one_item},
        "notes": (
            "grpc_echo: a RecordUsage stream answered with zeros, no work (threads: with the gateway's hand-offs); "
            "direct_hop: the gateway -> shard frame and its answer, no work; core: the in-process core on the same "
            "batches; floor = fastest echo + hop + core (p50s): the least a batch takes through a Python gRPC "
            "gateway and a shard process on this machine, and what it leaves of issue 17's aim for their own work"
        ),
        "machine": machine(),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
