"""Benchmark of KIP-714 telemetry through the Kafka-facing frontend, beside the gateway-only path.

What it measures
    ``launch()`` starts ``quotaplane up``'s pieces in this process (a private local Ray, the controller,
    the shards, the gateway and the Kafka frontend, as ``up`` runs them) with one client-metrics
    subscription (every metric, ``--interval-ms``, default 100 ms: Kafka's minimum, so each client pushes
    as often as it may). Load comes from client processes (``multiprocessing`` spawn, so the clients'
    Python does not share the server's GIL):

    - ``frontend``: ``--clients`` simulated Kafka clients (default 2,000) over real TCP sockets, an
      asyncio client per process speaking the frontend's own codec. Phase 1, handshakes: every client
      connects (admitted by the ConnectionService), sends ApiVersions v3 and GetTelemetrySubscriptions
      with the zero id, all at once (at most ``--connect-concurrency`` handshakes in flight per client
      process). Phase 2, pushes: all connections stay open; each client pushes a librdkafka-sized
      payload (a producer's 10 metrics as OTLP, zstd-compressed: ~1.4 kB raw, ~0.5 kB on the wire, as
      librdkafka 2.16 sends them), waits for the answer, then waits one push interval (so no push is
      refused for coming early), for ``--seconds``. With ``--with-request-quota`` (a request quota set
      for another user) every Kafka request also records its time on the request quota
      (RecordRequestTime), as on a Kafka broker with request quotas; without it no request quota exists
      and, as in Kafka, no request time is recorded.

      **What the load costs.** It shares the 2 cores with the system under test, so it is kept cheap:
      each connection's frame is encoded once (only the correlation id changes) and, after the
      handshake, a connection is a bare ``asyncio.Protocol`` on uvloop (per push a write, a read of the
      12-byte answer and one timer; no stream reader, no sleeping coroutine). What it still costs is
      ``cpu_us_per_push.load_clients``: about 20-28 µs per push on this 2-core machine, mostly the
      kernel's TCP loopback work for its send and receive (~40 µs with stream readers and a codec
      decode per answer). Subtract it to see the system under test alone.
    - ``gateway_only``: the same numbers of GetTelemetrySubscriptions and PushTelemetry (same payload)
      sent straight to the gateway's TelemetryService over gRPC in batches of ``--grpc-batch`` with
      ``--grpc-in-flight`` calls outstanding: what the frontend's sockets, Kafka framing, per-request
      batching and request quota add on top.

    - ``frontend_alone``: the same load on a frontend started the same way, whose gateway is an echo in a process
      of its own (``grpc.aio``, every connection admitted, every push accepted at once, nothing decoded): the
      frontend's own CPU a push and what it can serve when the gateway and the shards cost nothing, so a change
      to the frontend is measured apart from theirs (``--skip-frontend-alone`` leaves it out).

    Figures: handshakes/s (phase 1 wall time), accepted pushes/s in phase 2, push latency p50 / p99
    (request written to answer read, per connection), error codes counted, and the frontend's own
    counters (batches sent per RPC kind, so the batching is visible). Handshake and push are measured
    apart: GetTelemetrySubscriptions' own latency (``get_subscriptions_latency_*``) beside the whole
    handshake's (connect, admission, ApiVersions, GetTelemetrySubscriptions), and the CPU time each phase
    cost per handshake / per push in every process (``cpu_us_per_handshake``, ``cpu_us_per_push``: the
    frontend's event-loop thread, the gateway's gRPC and shard-worker threads, the rest of the launching
    process, the shard actors, Ray's raylet and GCS, the load's own client processes; read from
    ``/proc``, so on Linux only), which is where one push's time goes hop by hop. ``offered_pushes_per_s``
    is what the clients would send with answers taking no time (clients / interval); ``pacing_bound_pushes_per_s``
    the bound their pacing puts on ``pushes_per_s`` at the run's median latency (clients / (interval + p50)): each
    client waits one interval after its answer, as KIP-714 requires of it, so 2,000 clients at 100 ms cannot
    show 20,000 pushes/s (``--clients`` more for that). ``cpu_bound_pushes_per_s`` is the other bound: what the
    machine's CPUs allow at the run's CPU a push, every CPU used whole and the load's clients counted (they share
    the machine).

Output: one JSON object on stdout. Run: ``.venv/bin/python bench/frontend.py [--quick] [--clients N]
[--seconds S] [--client-processes P]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import multiprocessing
import os
import random
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _cpu import cpu_bound_per_s, cpu_snapshot, cpu_us_per
from _machine import machine

SUBSCRIPTION = "bench"
PRODUCER_METRICS = [
    "org.apache.kafka.producer.connection.creation.rate",
    "org.apache.kafka.producer.connection.creation.total",
    "org.apache.kafka.producer.node.request.latency.avg",
    "org.apache.kafka.producer.node.request.latency.max",
    "org.apache.kafka.producer.produce.throttle.time.avg",
    "org.apache.kafka.producer.produce.throttle.time.max",
    "org.apache.kafka.producer.record.queue.time.avg",
    "org.apache.kafka.producer.record.queue.time.max",
    "org.apache.kafka.producer.partition.queue.time.avg",
    "org.apache.kafka.producer.partition.queue.time.max",
]


def payload(seed: int) -> tuple[bytes, int]:
    """A producer's push as librdkafka builds it: 10 metrics, sums DELTA, gauges; zstd. (bytes, raw size)."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.metrics.v1 import metrics_pb2

    from quotaplane.telemetry import CompressionType, compress

    rng = random.Random(seed)
    now_ns = time.time_ns()
    data = metrics_pb2.MetricsData()
    rm = data.resource_metrics.add()
    scope = rm.scope_metrics.add()
    scope.scope.name = "librdkafka"
    for name in PRODUCER_METRICS:
        metric = scope.metrics.add(name=name)
        if name.endswith(("total", "rate")):
            metric.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
            metric.sum.is_monotonic = name.endswith("total")
            point = metric.sum.data_points.add(as_int=rng.randint(0, 1000), time_unix_nano=now_ns)
        else:
            point = metric.gauge.data_points.add(as_double=rng.random() * 100, time_unix_nano=now_ns)
        point.start_time_unix_nano = now_ns - 10**9
        point.attributes.append(KeyValue(key="node.id", value=AnyValue(int_value=rng.randint(0, 5))))
    raw = data.SerializeToString()
    return compress(CompressionType.ZSTD, raw), len(raw)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_phased(
    target: Any, jobs: list[tuple], extra: dict[str, int] | None = None
) -> tuple[list[dict], dict, list[dict], dict]:
    """Run ``target(conn, job)`` in one spawned process per job: each sends its phase-1 (handshake) result,
    waits for "go", then sends its phase-2 (push) result. The CPU of every component is read between the
    phases, so each phase's cost is measured alone. (phase-1 results, CPU before phase 2, phase-2 results,
    CPU after it)."""
    context = multiprocessing.get_context("spawn")
    pipes, processes = [], []
    for job in jobs:
        parent, child = context.Pipe()
        process = context.Process(target=target, args=(child, job), daemon=True)
        process.start()
        pipes.append(parent)
        processes.append(process)
    first = [p.recv() for p in pipes]
    middle = cpu_snapshot(extra)
    for p in pipes:
        p.send("go")
    second = [p.recv() for p in pipes]
    end = cpu_snapshot(extra)
    for process in processes:
        process.join(30)
    return first, middle, second, end


# --- the Kafka clients (one process) -------------------------------------------------------------------------
class _KafkaClients:
    """``n`` simulated Kafka clients on one event loop: :meth:`handshakes` opens the connections (ApiVersions
    v3, GetTelemetrySubscriptions), :meth:`pushes` then pushes on all of them for ``seconds``."""

    def __init__(self, port: int, n: int, seconds: float, interval_ms: int, concurrency: int, seed: int) -> None:
        self.port, self.n, self.seconds, self.interval_ms, self.concurrency = port, n, seconds, interval_ms, concurrency
        self.seed = seed
        self.body, _ = payload(seed)
        self.codes: Counter[str] = Counter()
        self.connections: list[tuple[Any, Any, Any]] = []

    async def call(self, reader: Any, writer: Any, key: int, version: int, correlation: int, request: Any) -> Any:
        from quotaplane.protocol import decode_response, encode_request

        writer.write(encode_request(key, version, correlation, request, client_id="qp-bench"))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        return decode_response(key, version, await reader.readexactly(size)).body

    async def handshakes(self) -> dict:
        from quotaplane.kafka_uuid import ZERO_UUID
        from quotaplane.protocol import ApiVersionsRequest, GetTelemetrySubscriptionsRequest

        codes = self.codes
        gate = asyncio.Semaphore(self.concurrency)
        handshake_latencies: list[float] = []
        get_latencies: list[float] = []

        async def handshake(i: int) -> Any:
            async with gate:
                t = time.perf_counter()
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                    versions = await self.call(reader, writer, 18, 3, 1, ApiVersionsRequest("qp-bench", "1.0"))
                    t_get = time.perf_counter()
                    sub = await self.call(reader, writer, 71, 0, 2, GetTelemetrySubscriptionsRequest(ZERO_UUID))
                except (OSError, asyncio.IncompleteReadError) as e:
                    codes[f"handshake:{type(e).__name__}"] += 1
                    return None
                done = time.perf_counter()
                handshake_latencies.append(done - t)
                get_latencies.append(done - t_get)
                codes[f"71:{sub.error_code}"] += 1
                if versions.error_code or sub.error_code:
                    writer.close()
                    return None
                return reader, writer, sub

        cpu, started = time.process_time(), time.perf_counter()
        got = await asyncio.gather(*(handshake(i) for i in range(self.n)))
        self.connections = [c for c in got if c is not None]
        return {
            "connections": len(self.connections),
            "handshake_s": time.perf_counter() - started,
            "handshake_latencies": handshake_latencies,
            "get_latencies": get_latencies,
            "cpu_s": time.process_time() - cpu,
        }

    async def pushes(self) -> dict:
        from quotaplane.protocol import PushTelemetryRequest, encode_request

        rng = random.Random(self.seed)
        loop = asyncio.get_running_loop()
        run = _PushRun(loop, time.perf_counter() + self.seconds, self.interval_ms / 1000, self.codes)
        cpu, push_started = time.process_time(), time.perf_counter()
        for _, writer, sub in self.connections:
            # the load's own CPU shares the machine with the system under test: each connection's push frame is
            # encoded once and only its correlation id (bytes 8..12: size, api key, version) changes per push
            request = PushTelemetryRequest(sub.client_instance_id, sub.subscription_id, False, 4, self.body)
            frame = bytearray(encode_request(72, 0, 3, request, client_id="qp-bench"))
            pusher = _Pusher(run, writer.transport, frame)
            writer.transport.set_protocol(pusher)  # the handshake's StreamReader is done: raw frames from here
            loop.call_later(rng.uniform(0, run.interval_s), pusher.push)
        if run.running:
            await run.done
        push_s = time.perf_counter() - push_started
        cpu_s = time.process_time() - cpu
        for _, writer, _ in self.connections:
            writer.close()
        return {
            "pushes_accepted": run.accepted,
            "push_s": push_s,
            "latencies": run.latencies,
            "codes": dict(self.codes),
            "cpu_s": cpu_s,
        }


_CODE_KEYS = {0: "72:0"}


class _PushRun:
    """What the pushers of one client process share: the stop time, the counters, and the future that ends
    the phase when the last connection has stopped pushing."""

    def __init__(self, loop: Any, stop: float, interval_s: float, codes: Counter[str]) -> None:
        self.loop, self.stop, self.interval_s, self.codes = loop, stop, interval_s, codes
        self.latencies: list[float] = []
        self.accepted = 0
        self.running = 0
        self.done = loop.create_future()

    def started(self) -> None:
        self.running += 1

    def finished(self) -> None:
        self.running -= 1
        if not self.running and not self.done.done():
            self.done.set_result(None)


class _Pusher(asyncio.Protocol):
    """One connection's pushes as a bare protocol: write the pre-encoded frame, read the 12-byte answer, push
    again one interval (plus any throttle) later. No stream reader, no coroutine, no sleep future per push: the
    load generator shares the 2 cores with the system under test, and this keeps its cost per push to a write,
    a read and a timer (``load_clients`` in ``cpu_us_per_push``)."""

    _ANSWER = struct.Struct(">ixih")  # PushTelemetry v0 response: correlation id, no header tags, throttle, error

    def __init__(self, run: _PushRun, transport: Any, frame: bytearray) -> None:
        self.run, self.transport, self.frame = run, transport, frame
        self.correlation = 3
        self.buffer = b""
        self.sent_at = 0.0
        self.waiting = False
        run.started()

    def push(self) -> None:
        run = self.run
        if time.perf_counter() >= run.stop or self.transport.is_closing():
            run.finished()
            return
        struct.pack_into(">i", self.frame, 8, self.correlation)
        self.waiting = True
        self.sent_at = time.perf_counter()
        self.transport.write(bytes(self.frame))

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        while len(buffer) >= 4:
            (size,) = struct.unpack_from(">i", buffer)
            if len(buffer) < 4 + size:
                break
            self.answer(buffer[4 : 4 + size])
            buffer = buffer[4 + size :]
        self.buffer = buffer

    def answer(self, body: bytes) -> None:
        from quotaplane.protocol import decode_response

        run = self.run
        done = time.perf_counter()
        if len(body) == 12 and body[11] == 0:  # no tagged fields: the fixed layout, read in place
            correlation, throttle_ms, error = self._ANSWER.unpack_from(body)
        else:
            decoded = decode_response(72, 0, body)
            correlation, throttle_ms, error = (
                decoded.correlation_id,
                decoded.body.throttle_time_ms,
                decoded.body.error_code,
            )
        if not self.waiting or correlation != self.correlation:  # the frontend broke the protocol: stop here
            run.codes["push:unexpected_answer"] += 1
            self.waiting = False
            self.transport.close()
            run.finished()
            return
        self.waiting = False
        run.latencies.append(done - self.sent_at)
        run.codes[_CODE_KEYS.get(error) or f"72:{error}"] += 1
        run.accepted += error == 0
        self.correlation += 1
        run.loop.call_at(run.loop.time() + run.interval_s + throttle_ms / 1000, self.push)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.waiting:
            self.waiting = False
            self.run.codes[f"push:{type(exc).__name__ if exc else 'ConnectionClosed'}"] += 1
            self.run.finished()


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed (a quotaplane dependency: the frontend runs on it too), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _kafka_client_process(conn: Any, args: tuple) -> None:
    clients = _KafkaClients(*args)
    loop = _new_event_loop()
    conn.send(loop.run_until_complete(clients.handshakes()))
    conn.recv()  # "go": the CPU of the handshake phase has been read
    conn.send(loop.run_until_complete(clients.pushes()))
    loop.close()


def _ms(values: list[float], q: float) -> float:
    return round(_percentile(values, q) * 1000, 2)


def run_frontend(port: int, args: argparse.Namespace, extra: dict[str, int] | None = None) -> dict:
    processes = args.client_processes
    share = [args.clients // processes + (1 if i < args.clients % processes else 0) for i in range(processes)]
    jobs = [
        (port, k, args.seconds, args.interval_ms, args.connect_concurrency, args.seed + i) for i, k in enumerate(share)
    ]
    before = cpu_snapshot(extra)
    shakes, middle, parts, end = run_phased(_kafka_client_process, jobs, extra)
    latencies = [x for p in parts for x in p["latencies"]]
    handshake_latencies = [x for p in shakes for x in p["handshake_latencies"]]
    get_latencies = [x for p in shakes for x in p["get_latencies"]]
    codes: Counter[str] = Counter()
    for p in parts:
        codes.update(p["codes"])
    handshake_s = max(p["handshake_s"] for p in shakes)
    push_s = max(p["push_s"] for p in parts)
    connections = sum(p["connections"] for p in shakes)
    accepted = sum(p["pushes_accepted"] for p in parts)
    push_p50_ms = _ms(latencies, 0.5)
    per_push = cpu_us_per(middle, end, sum(p["cpu_s"] for p in parts), len(latencies))
    return {
        "concurrent_connections": connections,
        "handshakes": connections,
        "handshakes_per_s": round(connections / handshake_s, 1),
        "pushes_accepted": accepted,
        "pushes_per_s": round(accepted / push_s, 1),
        "push_latency_p50_ms": push_p50_ms,
        "push_latency_p99_ms": _ms(latencies, 0.99),
        "offered_pushes_per_s": round(connections * 1000 / args.interval_ms, 1),
        # each client waits one interval after its answer (KIP-714 refuses an early push), so at this latency the
        # clients could not send more than this: pushes_per_s near it means the system kept up
        "pacing_bound_pushes_per_s": round(connections / ((args.interval_ms + push_p50_ms) / 1000), 1),
        "handshake_latency_p50_ms": _ms(handshake_latencies, 0.5),
        "handshake_latency_p99_ms": _ms(handshake_latencies, 0.99),
        "get_subscriptions_latency_p50_ms": _ms(get_latencies, 0.5),
        "get_subscriptions_latency_p99_ms": _ms(get_latencies, 0.99),
        "cpu_us_per_handshake": cpu_us_per(before, middle, sum(p["cpu_s"] for p in shakes), connections),
        "cpu_us_per_push": per_push,
        # every CPU of the machine used whole at that CPU a push, the load's clients included
        "cpu_bound_pushes_per_s": cpu_bound_per_s(per_push),
        "response_codes": dict(sorted(codes.items())),
    }


# --- the gateway-only path (one process) ------------------------------------------------------------------------
def _gateway_process(conn: Any, args: tuple) -> None:
    address, n, seconds, interval_ms, batch, in_flight, seed = args
    import grpc

    from quotaplane.v1 import telemetry_pb2 as pb
    from quotaplane.v1 import telemetry_pb2_grpc

    body, _ = payload(seed)
    channel = grpc.insecure_channel(
        address, options=[("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
    )
    stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)

    def context(i: int) -> pb.RequestContext:
        return pb.RequestContext(
            connection_id=f"bench-grpc-{seed}-{i}",
            client_id="qp-bench",
            client_software_name="qp-bench",
            client_software_version="1.0",
            client_source_address="127.0.0.1",
            client_source_port=10000 + i % 50000,
            principal="User:ANONYMOUS",
        )

    contexts = [context(i) for i in range(n)]
    codes: Counter[str] = Counter()

    get_latencies: list[float] = []

    def run_batches(make: Any, kind: str, chunks: list[list[int]]) -> list[Any]:
        results: list[Any] = []
        pending: list[Any] = []

        def take() -> None:
            sent, future = pending.pop(0)
            results.extend(future.result().results)
            get_latencies.append(time.perf_counter() - sent)

        for chunk in chunks:
            pending.append((time.perf_counter(), make(chunk)))
            if len(pending) >= in_flight:
                take()
        while pending:
            take()
        for r in results:
            codes[f"{kind}:{r.error_code}"] += 1
        return results

    chunks = [list(range(i, min(n, i + batch))) for i in range(0, n, batch)]
    cpu, started = time.process_time(), time.perf_counter()
    subs = run_batches(
        lambda c: stub.GetTelemetrySubscriptions.future(
            pb.GetTelemetrySubscriptionsBatch(
                requests=[pb.GetTelemetrySubscriptionsRequest(context=contexts[i]) for i in c]
            ),
            timeout=120,
        ),
        "71",
        chunks,
    )
    handshake_s = time.perf_counter() - started
    conn.send({"handshake_s": handshake_s, "cpu_s": time.process_time() - cpu})
    conn.recv()  # "go": the CPU of the handshake phase has been read

    def push_batch(chunk: list[int]) -> Any:
        return stub.PushTelemetry.future(
            pb.PushTelemetryBatch(
                requests=[
                    pb.PushTelemetryRequest(
                        client_instance_id=subs[i].client_instance_id,
                        subscription_id=subs[i].subscription_id,
                        compression_type=4,
                        metrics=body,
                        context=contexts[i],
                    )
                    for i in chunk
                ]
            ),
            timeout=120,
        )

    # each chunk of instances pushes again one interval (+5 %) after its previous answer arrived, so no push
    # is refused for coming early; chunks are sent in turn with at most ``in_flight`` outstanding
    accepted = 0
    rounds = 0
    answered_at = [0.0] * len(chunks)
    sent_at = [0.0] * len(chunks)
    push_latencies: list[float] = []
    cpu, push_started = time.process_time(), time.perf_counter()
    stop = push_started + seconds
    pending: list[tuple[int, Any]] = []

    def collect(k: int, future: Any) -> None:
        nonlocal accepted
        for r in future.result().results:
            codes[f"72:{r.error_code}"] += 1
            accepted += r.error_code == 0
        answered_at[k] = time.perf_counter()
        push_latencies.append(answered_at[k] - sent_at[k])

    while time.perf_counter() < stop:
        for k, chunk in enumerate(chunks):
            while any(j == k for j, _ in pending):  # its previous push must be answered first
                collect(*pending.pop(0))
            wait = answered_at[k] + interval_ms / 1000 * 1.05 - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            sent_at[k] = time.perf_counter()
            pending.append((k, push_batch(chunk)))
            if len(pending) >= in_flight:
                collect(*pending.pop(0))
        rounds += 1
    for k, future in pending:
        collect(k, future)
    push_s = time.perf_counter() - push_started
    cpu_s = time.process_time() - cpu
    channel.close()
    conn.send(
        {
            "instances": n,
            "handshakes_per_s": round(n / handshake_s, 1),
            "pushes_accepted": accepted,
            "pushes_per_s": round(accepted / push_s, 1),
            "push_rounds": rounds,
            "grpc_batch": batch,
            "grpc_in_flight": in_flight,
            "response_codes": dict(sorted(codes.items())),
            "get_batch_latency_p50_ms": _ms(get_latencies, 0.5),
            "get_batch_latency_p99_ms": _ms(get_latencies, 0.99),
            "push_batch_latency_p50_ms": _ms(push_latencies, 0.5),
            "push_batch_latency_p99_ms": _ms(push_latencies, 0.99),
            "pushes": sum(codes[k] for k in codes if k.startswith("72:")),
            "cpu_s": cpu_s,
        }
    )


def run_gateway_only(address: str, args: argparse.Namespace) -> dict:
    job = (address, args.clients, args.seconds, args.interval_ms, args.grpc_batch, args.grpc_in_flight, args.seed)
    before = cpu_snapshot()
    (shakes,), middle, (report,), end = run_phased(_gateway_process, [job])
    report["cpu_us_per_handshake"] = cpu_us_per(before, middle, shakes["cpu_s"], args.clients)
    report["cpu_us_per_push"] = cpu_us_per(middle, end, report.pop("cpu_s"), report.pop("pushes"))
    report["cpu_bound_pushes_per_s"] = cpu_bound_per_s(report["cpu_us_per_push"])
    return report


# --- the frontend alone: an echo gateway (one process) -----------------------------------------------------------
def _echo_gateway_process(conn: Any, interval_ms: int) -> None:
    """A TelemetryService and ConnectionService that answer every batch at once with constant results (every
    connection admitted, every push accepted, a fresh client instance id per subscription request), on
    ``grpc.aio``: what the frontend's gateway calls cost when the gateway and the shards cost nothing. Sends its
    port, serves until it reads "stop"."""
    import grpc

    from quotaplane.v1 import connection_pb2 as conn_pb
    from quotaplane.v1 import connection_pb2_grpc, telemetry_pb2_grpc
    from quotaplane.v1 import telemetry_pb2 as tele_pb

    admitted = conn_pb.AdmitResult(decision=conn_pb.AdmitResult.ADMIT, counted=True)
    accepted = tele_pb.PushTelemetryResult(error_code=0)
    ids = itertools.count(1)

    class Telemetry(telemetry_pb2_grpc.TelemetryServiceServicer):
        async def GetTelemetrySubscriptions(self, request: Any, context: Any) -> Any:
            results = [
                tele_pb.GetTelemetrySubscriptionsResult(
                    client_instance_id=next(ids).to_bytes(16, "big"),
                    subscription_id=1,
                    accepted_compression_types=[1, 2, 3, 4],
                    push_interval_ms=interval_ms,
                    telemetry_max_bytes=1 << 20,
                    requested_metrics=["org.apache.kafka."],
                )
                for _ in request.requests
            ]
            return tele_pb.GetTelemetrySubscriptionsResults(batch_id=request.batch_id, results=results)

        async def PushTelemetry(self, request: Any, context: Any) -> Any:
            # the frontend sends columns; a batch of requests is counted too
            count = len(request.columns.client_instance_id) or len(request.requests)
            return tele_pb.PushTelemetryResults(batch_id=request.batch_id, results=[accepted] * count)

        async def ClientDisconnected(self, request: Any, context: Any) -> Any:
            results = [tele_pb.ClientDisconnectedResult(evicted=True)] * len(request.connections)
            return tele_pb.ClientDisconnectedResults(batch_id=request.batch_id, results=results)

    class Connections(connection_pb2_grpc.ConnectionServiceServicer):
        async def Admit(self, request: Any, context: Any) -> Any:
            return conn_pb.AdmitResults(batch_id=request.batch_id, results=[admitted] * len(request.items))

        async def Release(self, request: Any, context: Any) -> Any:
            return conn_pb.ReleaseResults(batch_id=request.batch_id, released=[True] * len(request.items))

    async def serve() -> None:
        server = grpc.aio.server()
        telemetry_pb2_grpc.add_TelemetryServiceServicer_to_server(Telemetry(), server)
        connection_pb2_grpc.add_ConnectionServiceServicer_to_server(Connections(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        conn.send(port)
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        await server.stop(None)

    _new_event_loop().run_until_complete(serve())


def run_frontend_alone(args: argparse.Namespace) -> dict:
    """The same load on a frontend (in this process, as ``launch`` starts it) whose gateway is the echo above,
    in a process of its own: the frontend's own cost and capacity, apart from the gateway's and the shards'.
    ``cpu_us_per_push.gateway_echo`` is the echo's process (gRPC's server side of the frontend's calls)."""
    from quotaplane.services.frontend import FrontendConfig, FrontendServer, GrpcTarget

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    echo = context.Process(target=_echo_gateway_process, args=(child, args.interval_ms), daemon=True)
    echo.start()
    try:
        address = f"127.0.0.1:{parent.recv()}"
        # no request quota anywhere in the cluster run either: the frontend records no request time there
        config = FrontendConfig(gateway=GrpcTarget(address), admin=GrpcTarget(address), port=0, request_quotas=False)
        with FrontendServer(config) as frontend:
            frontend.start()
            assert echo.pid is not None
            report = run_frontend(frontend.port, args, extra={"gateway_echo": echo.pid})
            report["server"] = {"unexpected_errors": frontend.stats.unexpected_errors}
    finally:
        parent.send("stop")
        echo.join(10)
        if echo.is_alive():
            echo.kill()
    return report


def _frontend_loop_kind() -> str:
    try:
        from quotaplane.services.frontend._loop import loop_kind
    except ImportError:  # a tree from before uvloop (A/B runs): asyncio's loop
        return "asyncio"
    return loop_kind()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run (200 clients, 3 s)")
    parser.add_argument("--clients", type=int, default=2000, help="concurrent simulated Kafka clients")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the push phase")
    parser.add_argument("--interval-ms", type=int, default=100, help="the subscription's push interval")
    parser.add_argument("--client-processes", type=int, default=1)
    parser.add_argument("--connect-concurrency", type=int, default=500, help="handshakes in flight per process")
    parser.add_argument("--grpc-batch", type=int, default=200, help="gateway-only: requests per gRPC batch")
    parser.add_argument("--grpc-in-flight", type=int, default=8, help="gateway-only: calls outstanding")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument(
        "--skip-frontend-alone", action="store_true", help="no frontend_alone run (the frontend before an echo gateway)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--with-request-quota",
        action="store_true",
        help="set a request_percentage quota for another user, so that every request's time is recorded "
        "(RecordRequestTime) as on a broker with request quotas; without any, Kafka records none and neither "
        "does the frontend",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.clients, args.seconds = min(args.clients, 200), min(args.seconds, 3.0)

    import grpc

    from quotaplane.gc_pause import ready_to_serve
    from quotaplane.services.launcher import launch
    from quotaplane.v1 import admin_pb2 as admin_pb
    from quotaplane.v1 import admin_pb2_grpc
    from quotaplane.v1 import config_events_pb2 as events_pb

    body, raw_size = payload(args.seed)
    with tempfile.TemporaryDirectory(prefix="qp-bench-frontend-") as root:
        cluster = launch(
            Path(root) / "d",
            shards=args.shards,
            admin_port=0,
            gateway_port=0,
            metrics_port=None,
            frontend_port=0,
            fsync=False,
        )
        try:
            with grpc.insecure_channel(cluster.admin_address) as channel:
                Config = admin_pb.IncrementalAlterConfigsRequest.AlterableConfig
                set_ = admin_pb.ALTER_CONFIG_OP_TYPE_SET
                resource = admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=admin_pb.RESOURCE_TYPE_CLIENT_METRICS,
                    resource_name=SUBSCRIPTION,
                    configs=[
                        Config(name="metrics", config_operation=set_, value="*"),
                        Config(name="interval.ms", config_operation=set_, value=str(args.interval_ms)),
                    ],
                )
                admin = admin_pb2_grpc.AdminServiceStub(channel)
                admin.IncrementalAlterConfigs(admin_pb.IncrementalAlterConfigsRequest(resources=[resource]))
                if args.with_request_quota:
                    Entry = admin_pb.AlterClientQuotasRequest.EntryData
                    entry = Entry(
                        entity=[events_pb.EntityData(entity_type="user", entity_name="qp-bench-elsewhere")],
                        ops=[admin_pb.AlterClientQuotasRequest.OpData(key="request_percentage", value=50.0)],
                    )
                    answer = admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry]))
                    assert all(e.error_code == 0 for e in answer.entries), answer
            cluster.wait_caught_up(timeout_s=60)
            # this process runs the gateway and the frontend, as `up`'s does: set up as `up` sets it up once ready
            ready_to_serve()
            deadline = time.monotonic() + 30  # the frontend learns which quota types exist (a 250 ms refresh)
            while time.monotonic() < deadline and (
                cluster.frontend.enabled_quotas is None
                or cluster.frontend.enabled_quotas.request != args.with_request_quota
            ):
                time.sleep(0.05)
            frontend = run_frontend(cluster.frontend_port, args)
            stats = cluster.frontend.stats
            backend = cluster.frontend.backend
            frontend["server"] = {
                "unexpected_errors": stats.unexpected_errors,
                "backend_errors": stats.backend_errors,
                "throttled_responses": stats.throttled_responses,
                "rpc_batches": {name: b.batches for name, b in backend.batchers.items()},
                "rpc_items": {name: b.items for name, b in backend.batchers.items()},
            }
            # let the frontend's connections go (their instances are evicted) before the gateway-only run
            deadline = time.monotonic() + 30
            while stats.connections_open and time.monotonic() < deadline:
                time.sleep(0.1)
            gateway_only = run_gateway_only(cluster.gateway_address, args)
        finally:
            cluster.close()
    alone = None if args.skip_frontend_alone else run_frontend_alone(args)
    report = {
        "benchmark": "frontend",
        "workload": {
            "clients": args.clients,
            "client_processes": args.client_processes,
            "push_seconds": args.seconds,
            "push_interval_ms": args.interval_ms,
            "payload_bytes_compressed": len(body),
            "payload_bytes_raw": raw_size,
            "compression": "zstd",
            "metrics_per_push": len(PRODUCER_METRICS),
            "shards": args.shards,
            "quick": args.quick,
            "request_quota_recorded": args.with_request_quota,
            "frontend_event_loop": _frontend_loop_kind(),
            "launcher_gc_thresholds": list(gc.get_threshold()),
        },
        "figures": {"frontend": frontend, "gateway_only": gateway_only, "frontend_alone": alone},
        "notes": (
            "frontend: real TCP sockets, Kafka framing and the codec on both sides, ConnectionService admission, "
            "request-quota recording per request, requests of all connections read in one pass of the "
            "frontend's event loop batched into one gateway RPC. gateway_only: the same requests as gRPC "
            "batches straight to TelemetryService. frontend_alone: the same load on a frontend whose gateway "
            "answers at once with constants (an echo in its own process): the frontend's own cost. Clients, "
            "frontend, gateway, shards and Ray share this machine's cores; each push waits one interval after "
            "its answer, so pushes_per_s is bounded by clients / (interval + latency)."
        ),
        "machine": machine(),
    }
    print(json.dumps(report, indent=2))
    ok = all(
        run["server"]["unexpected_errors"] == 0 and run["concurrent_connections"] == args.clients
        for run in (frontend, alone)
        if run is not None
    )
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
