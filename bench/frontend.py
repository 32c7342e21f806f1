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
      refused for coming early), for ``--seconds``. Every Kafka request also goes through the request
      quota (RecordRequestTime), as on a Kafka broker.
    - ``gateway_only``: the same numbers of GetTelemetrySubscriptions and PushTelemetry (same payload)
      sent straight to the gateway's TelemetryService over gRPC in batches of ``--grpc-batch`` with
      ``--grpc-in-flight`` calls outstanding: what the frontend's sockets, Kafka framing, per-request
      batching and request quota add on top.

    Figures: handshakes/s (phase 1 wall time), accepted pushes/s in phase 2, push latency p50 / p99
    (request written to answer read, per connection), error codes counted, and the frontend's own
    counters (batches sent per RPC kind, so the batching is visible).

Output: one JSON object on stdout. Run: ``.venv/bin/python bench/frontend.py [--quick] [--clients N]
[--seconds S] [--client-processes P]``.
"""

from __future__ import annotations

import argparse
import asyncio
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


# --- the Kafka clients (one process) -------------------------------------------------------------------------
async def _kafka_clients(port: int, n: int, seconds: float, interval_ms: int, concurrency: int, seed: int) -> dict:
    from quotaplane.kafka_uuid import ZERO_UUID
    from quotaplane.protocol import (
        ApiVersionsRequest,
        GetTelemetrySubscriptionsRequest,
        PushTelemetryRequest,
        decode_response,
        encode_request,
    )

    body, _ = payload(seed)
    codes: Counter[str] = Counter()

    async def call(reader: Any, writer: Any, key: int, version: int, correlation: int, request: Any) -> Any:
        writer.write(encode_request(key, version, correlation, request, client_id="qp-bench"))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        return decode_response(key, version, await reader.readexactly(size)).body

    gate = asyncio.Semaphore(concurrency)

    async def handshake(i: int) -> Any:
        async with gate:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                versions = await call(reader, writer, 18, 3, 1, ApiVersionsRequest("qp-bench", "1.0"))
                sub = await call(reader, writer, 71, 0, 2, GetTelemetrySubscriptionsRequest(ZERO_UUID))
            except (OSError, asyncio.IncompleteReadError) as e:
                codes[f"handshake:{type(e).__name__}"] += 1
                return None
            codes[f"71:{sub.error_code}"] += 1
            if versions.error_code or sub.error_code:
                writer.close()
                return None
            return reader, writer, sub

    started = time.perf_counter()
    connections = [c for c in await asyncio.gather(*(handshake(i) for i in range(n))) if c is not None]
    handshake_s = time.perf_counter() - started

    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    interval_s = interval_ms / 1000

    async def pusher(reader: Any, writer: Any, sub: Any, first_delay: float) -> int:
        accepted = 0
        correlation = 3
        await asyncio.sleep(first_delay)
        while time.perf_counter() < stop:
            request = PushTelemetryRequest(sub.client_instance_id, sub.subscription_id, False, 4, body)
            t = time.perf_counter()
            try:
                answer = await call(reader, writer, 72, 0, correlation, request)
            except (OSError, asyncio.IncompleteReadError) as e:
                codes[f"push:{type(e).__name__}"] += 1
                return accepted
            latencies.append(time.perf_counter() - t)
            correlation += 1
            codes[f"72:{answer.error_code}"] += 1
            accepted += answer.error_code == 0
            await asyncio.sleep(interval_s + answer.throttle_time_ms / 1000)
        return accepted

    rng = random.Random(seed)
    push_started = time.perf_counter()
    accepted = await asyncio.gather(*(pusher(r, w, s, rng.uniform(0, interval_s)) for r, w, s in connections))
    push_s = time.perf_counter() - push_started
    for _, writer, _ in connections:
        writer.close()
    return {
        "connections": len(connections),
        "handshake_s": handshake_s,
        "pushes_accepted": sum(accepted),
        "push_s": push_s,
        "latencies": latencies,
        "codes": dict(codes),
    }


def _kafka_client_process(args: tuple) -> dict:
    return asyncio.run(_kafka_clients(*args))


def run_frontend(port: int, args: argparse.Namespace) -> dict:
    processes = args.client_processes
    share = [args.clients // processes + (1 if i < args.clients % processes else 0) for i in range(processes)]
    jobs = [
        (port, k, args.seconds, args.interval_ms, args.connect_concurrency, args.seed + i) for i, k in enumerate(share)
    ]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        parts = pool.map(_kafka_client_process, jobs)
    latencies = [x for p in parts for x in p["latencies"]]
    codes: Counter[str] = Counter()
    for p in parts:
        codes.update(p["codes"])
    handshake_s = max(p["handshake_s"] for p in parts)
    push_s = max(p["push_s"] for p in parts)
    connections = sum(p["connections"] for p in parts)
    accepted = sum(p["pushes_accepted"] for p in parts)
    return {
        "concurrent_connections": connections,
        "handshakes": connections,
        "handshakes_per_s": round(connections / handshake_s, 1),
        "pushes_accepted": accepted,
        "pushes_per_s": round(accepted / push_s, 1),
        "push_latency_p50_ms": round(_percentile(latencies, 0.5) * 1000, 2),
        "push_latency_p99_ms": round(_percentile(latencies, 0.99) * 1000, 2),
        "response_codes": dict(sorted(codes.items())),
    }


# --- the gateway-only path (one process) ------------------------------------------------------------------------
def _gateway_process(args: tuple) -> dict:
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

    def run_batches(make: Any, kind: str, chunks: list[list[int]]) -> list[Any]:
        results: list[Any] = []
        pending: list[Any] = []
        for chunk in chunks:
            pending.append(make(chunk))
            if len(pending) >= in_flight:
                results.extend(pending.pop(0).result().results)
        for future in pending:
            results.extend(future.result().results)
        for r in results:
            codes[f"{kind}:{r.error_code}"] += 1
        return results

    chunks = [list(range(i, min(n, i + batch))) for i in range(0, n, batch)]
    started = time.perf_counter()
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
    push_started = time.perf_counter()
    stop = push_started + seconds
    pending: list[tuple[int, Any]] = []

    def collect(k: int, future: Any) -> None:
        nonlocal accepted
        for r in future.result().results:
            codes[f"72:{r.error_code}"] += 1
            accepted += r.error_code == 0
        answered_at[k] = time.perf_counter()

    while time.perf_counter() < stop:
        for k, chunk in enumerate(chunks):
            while any(j == k for j, _ in pending):  # its previous push must be answered first
                collect(*pending.pop(0))
            wait = answered_at[k] + interval_ms / 1000 * 1.05 - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            pending.append((k, push_batch(chunk)))
            if len(pending) >= in_flight:
                collect(*pending.pop(0))
        rounds += 1
    for k, future in pending:
        collect(k, future)
    push_s = time.perf_counter() - push_started
    channel.close()
    return {
        "instances": n,
        "handshakes_per_s": round(n / handshake_s, 1),
        "pushes_accepted": accepted,
        "pushes_per_s": round(accepted / push_s, 1),
        "push_rounds": rounds,
        "grpc_batch": batch,
        "grpc_in_flight": in_flight,
        "response_codes": dict(sorted(codes.items())),
    }


def run_gateway_only(address: str, args: argparse.Namespace) -> dict:
    job = (address, args.clients, args.seconds, args.interval_ms, args.grpc_batch, args.grpc_in_flight, args.seed)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_gateway_process, (job,))


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
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.quick:
        args.clients, args.seconds = min(args.clients, 200), min(args.seconds, 3.0)

    import grpc

    from quotaplane.services.launcher import launch
    from quotaplane.v1 import admin_pb2 as admin_pb
    from quotaplane.v1 import admin_pb2_grpc

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
                admin_pb2_grpc.AdminServiceStub(channel).IncrementalAlterConfigs(
                    admin_pb.IncrementalAlterConfigsRequest(resources=[resource])
                )
            cluster.wait_caught_up(timeout_s=60)
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
        },
        "figures": {"frontend": frontend, "gateway_only": gateway_only},
        "notes": (
            "frontend: real TCP sockets, Kafka framing and the codec on both sides, ConnectionService admission, "
            "request-quota recording per request, requests of all connections batched per ms into the gateway's "
            "RPCs. gateway_only: the same requests as gRPC batches straight to TelemetryService. Clients, "
            "frontend, gateway, shards and Ray share this machine's cores; each push waits one interval after "
            "its answer, so pushes_per_s is bounded by clients / (interval + latency)."
        ),
        "machine": machine(),
    }
    print(json.dumps(report, indent=2))
    ok = frontend["server"]["unexpected_errors"] == 0 and frontend["concurrent_connections"] == args.clients
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
