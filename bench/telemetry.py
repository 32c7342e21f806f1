"""Benchmark of the KIP-714 engine: handshakes, pushes, archive bytes and memory per client instance.

What it measures (one core, CPython, garbage collector on, best of 3 repeats)
    - ``decode_only`` (the baseline, same process): zstd stream decompression + ``MetricsData`` parse
      of the push payload, nothing else. Every push costs at least this.
    - ``handshakes``: a new client's GetTelemetrySubscriptions then its first PushTelemetry, through
      ``ClientMetricsManager`` (instance creation, subscription match over 20 subscriptions with
      regex selectors, gating, decompress, decode, broker attributes, export to a no-op exporter).
    - ``pushes``: steady-state pushes of 10,000 live clients, one per client per push interval.
    - ``pushes_archived``: the same with the telemetry archive exporter writing to a temporary
      directory (the write and fsync run on the exporter's thread; the number counts the request
      path); then ``archive_bytes_per_push`` = bytes on disk / pushes after ``close()``, and
      ``cpu_us_per_push_archived``: the process's CPU (the request path and the archive's thread, until
      ``close()`` has written every push) per push.
    - ``memory``: in a fresh child process, RSS growth per live instance after 1,000,000
      GetTelemetrySubscriptions from distinct clients (the default memory budget of 1 GiB holds them
      all; the budget's own estimate is reported next to the measurement).

Workload
    The payload is what librdkafka 2.16 sends for a producer: 10 metrics named
    ``org.apache.kafka.producer.*`` (gauges and delta sums; per-node and per-topic-partition data
    points), nearly empty resource attributes, zstd-compressed as one streaming frame without content
    size (about 430 bytes).

Output: one JSON object on stdout. Run: ``.venv/bin/python bench/telemetry.py [--quick] [--instances N]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m

from quotaplane.exporters.archive import TelemetryArchiveExporter
from quotaplane.telemetry import (
    ClientMetricsManager,
    ClientMetricsManagerConfig,
    CompressionType,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
    RequestContext,
    compress,
    decode_metrics_data,
    decompress,
)
from quotaplane.telemetry._instance import ESTIMATED_INSTANCE_BYTES

START_MS = 1_700_000_000_000
INTERVAL_MS = 30_000

_PRODUCER_METRICS = [
    ("org.apache.kafka.producer.connection.creation.rate", "gauge"),
    ("org.apache.kafka.producer.connection.creation.total", "sum"),
    ("org.apache.kafka.producer.node.request.latency.avg", "gauge"),
    ("org.apache.kafka.producer.node.request.latency.max", "gauge"),
    ("org.apache.kafka.producer.produce.throttle.time.avg", "gauge"),
    ("org.apache.kafka.producer.produce.throttle.time.max", "gauge"),
    ("org.apache.kafka.producer.record.queue.time.avg", "gauge"),
    ("org.apache.kafka.producer.record.queue.time.max", "gauge"),
    ("org.apache.kafka.producer.partition.queue.bytes", "gauge"),
    ("org.apache.kafka.producer.partition.latency.max", "gauge"),
]


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def producer_payload(seed: int = 0) -> bytes:
    """Uncompressed OTLP MetricsData shaped like a librdkafka producer push."""
    data = m.MetricsData()
    rm = data.resource_metrics.add()
    rm.resource.attributes.append(_kv("client_rack", ""))
    sm = rm.scope_metrics.add()
    sm.scope.CopyFrom(InstrumentationScope(name="librdkafka", version="2.16.0"))
    now_ns = (START_MS + seed) * 1_000_000
    for i, (name, kind) in enumerate(_PRODUCER_METRICS):
        metric = sm.metrics.add(name=name)
        # per-partition and per-broker metrics carry one point per partition / broker (3 of each)
        for p in range(3 if "partition" in name or "node" in name else 1):
            if kind == "sum":
                metric.sum.aggregation_temporality = m.AGGREGATION_TEMPORALITY_DELTA
                metric.sum.is_monotonic = True
                dp = metric.sum.data_points.add(as_int=7 + seed % 5, time_unix_nano=now_ns)
            else:
                dp = metric.gauge.data_points.add(as_double=1.5 * i + (seed * 7 + p) % 13 / 3, time_unix_nano=now_ns)
            dp.start_time_unix_nano = now_ns - INTERVAL_MS * 1_000_000
            if "partition" in name:
                dp.attributes.extend([_kv("topic", "orders"), _kv("partition", str((seed + p) % 12))])
            elif "node" in name:
                dp.attributes.append(_kv("node_id", str(p + 1)))
    return data.SerializeToString()


class _NullExporter:
    def export_metrics(self, context, payload) -> None:
        pass

    def close(self) -> None:
        pass


def _manager(exporters=()) -> ClientMetricsManager:
    mgr = ClientMetricsManager(ClientMetricsManagerConfig(), exporters, now_ms=START_MS)
    for i in range(19):  # subscriptions this fleet's clients do not match
        mgr.update_subscription(
            f"team-{i}",
            {"metrics": f"org.apache.kafka.consumer.m{i}.", "interval.ms": "60000", "match": f"client_id=team-{i}-.*"},
        )
    mgr.update_subscription(
        "producers",
        {
            "metrics": "org.apache.kafka.producer.",
            "interval.ms": str(INTERVAL_MS),
            "match": "client_software_name=librdkafka,client_software_version=2\\..*",
        },
    )
    return mgr


def _context(i: int) -> RequestContext:
    return RequestContext(
        connection_id=f"10.0.{i >> 16 & 255}.{i >> 8 & 255}:9092-10.1.{i >> 8 & 255}.{i & 255}:{40000 + i % 20000}-{i}",
        client_id=f"producer-{i % 500}",
        client_software_name="librdkafka",
        client_software_version="2.16.0",
        client_source_address=f"10.1.{i >> 8 & 255}.{i & 255}",
        client_source_port=40000 + i % 20000,
    )


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def bench_decode_only(payloads: list[bytes], repeats: int) -> float:
    def run() -> None:
        for p in payloads:
            decode_metrics_data(decompress(CompressionType.ZSTD, p, 16 << 20))

    return len(payloads) / _best(run, repeats)


def bench_handshakes(payloads: list[bytes], clients: int, repeats: int) -> float:
    contexts = [_context(i) for i in range(clients)]

    def run() -> None:
        mgr = _manager([_NullExporter()])
        get, push = mgr.process_get_telemetry_subscriptions_request, mgr.process_push_telemetry_request
        zero = GetTelemetrySubscriptionsRequest()
        for i, ctx in enumerate(contexts):
            now = START_MS + i
            sub = get(zero, ctx, now)
            resp = push(
                PushTelemetryRequest(
                    sub.client_instance_id, sub.subscription_id, False, 4, payloads[i % len(payloads)]
                ),
                ctx,
                now,
            )
            if resp.error_code:
                raise SystemExit(f"handshake push failed: {resp}")

    return clients / _best(run, repeats)


def _steady_state(mgr: ClientMetricsManager, payloads: list[bytes], clients: int, rounds: int):
    contexts = [_context(i) for i in range(clients)]
    subs = [
        mgr.process_get_telemetry_subscriptions_request(GetTelemetrySubscriptionsRequest(), ctx, START_MS)
        for ctx in contexts
    ]
    requests = [
        [
            PushTelemetryRequest(s.client_instance_id, s.subscription_id, False, 4, payloads[(i + r) % len(payloads)])
            for i, s in enumerate(subs)
        ]
        for r in range(rounds)
    ]

    def run(round_offset: list[int] = [0]) -> None:  # noqa: B006 - a counter shared across repeats
        push = mgr.process_push_telemetry_request
        for r in range(rounds):
            round_offset[0] += 1
            now = START_MS + round_offset[0] * INTERVAL_MS
            for req, ctx in zip(requests[r], contexts, strict=True):
                if push(req, ctx, now).error_code:
                    raise SystemExit("steady-state push failed")

    return run


def bench_pushes(payloads: list[bytes], clients: int, rounds: int, repeats: int) -> float:
    run = _steady_state(_manager([_NullExporter()]), payloads, clients, rounds)
    return clients * rounds / _best(run, repeats)


def bench_archived(payloads: list[bytes], clients: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="quotaplane-bench-") as root:
        exporter = TelemetryArchiveExporter(root, queue_capacity=clients * rounds + 1)
        run = _steady_state(_manager([exporter]), payloads, clients, rounds)
        gc.collect()
        cpu_started = time.process_time()  # every thread of the process: the archive's too
        started = time.perf_counter()
        run()
        request_path_s = time.perf_counter() - started
        exporter.close()
        cpu_s = time.process_time() - cpu_started
        on_disk = sum(f.stat().st_size for f in Path(root).rglob("*") if f.is_file())
        pushes = clients * rounds
        return {
            "pushes_per_s_request_path": round(pushes / request_path_s),
            "archived": exporter.exported,
            "dropped": exporter.dropped,
            "archive_bytes_per_push": round(on_disk / pushes, 1),
            # the request path and the archive's thread until every push is written (close drains it)
            "cpu_us_per_push_archived": round(cpu_s / pushes * 1e6, 1),
        }


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(instances: int) -> None:
    """Runs in a fresh process: RSS growth per live instance after ``instances`` distinct gets."""
    mgr = _manager()
    get = mgr.process_get_telemetry_subscriptions_request
    zero = GetTelemetrySubscriptionsRequest()
    warm = [_context(i) for i in range(1000)]
    for ctx in warm:
        get(zero, ctx, START_MS)
    gc.collect()
    before = _rss_bytes()
    for i in range(1000, instances + 1000):
        get(zero, _context(i), START_MS + i // 1000)
    gc.collect()
    after = _rss_bytes()
    live = len(mgr.instances)
    print(
        json.dumps(
            {
                "instances_requested": instances,
                "live_instances": live - 1000,
                "evictions": mgr.instances.evictions,
                "rss_growth_bytes": after - before,
                "bytes_per_instance": round((after - before) / max(1, live - 1000), 1),
                "budget_estimate_bytes_per_instance": round(mgr.instances.bytes_used / live, 1),
                "rss_total_bytes": after,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--instances", type=int, default=None, help="instances for the memory figure")
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child is not None:
        memory_child(args.memory_child)
        return

    clients = 2_000 if args.quick else 10_000
    rounds = 2 if args.quick else 5
    repeats = 1 if args.quick else 3
    instances = args.instances or (100_000 if args.quick else 1_000_000)
    raw = [producer_payload(seed) for seed in range(64)]
    payloads = [compress(CompressionType.ZSTD, p) for p in raw]

    decode_only = bench_decode_only(payloads * (clients // len(payloads)), repeats)
    handshakes = bench_handshakes(payloads, clients, repeats)
    pushes = bench_pushes(payloads, clients, rounds, repeats)
    archived = bench_archived(payloads, clients, rounds)
    child = subprocess.run(
        [sys.executable, __file__, "--memory-child", str(instances)], capture_output=True, text=True, check=True
    )
    memory = json.loads(child.stdout)

    print(
        json.dumps(
            {
                "benchmark": "telemetry",
                "workload": {
                    "payload": "librdkafka-like producer push, 10 metrics, zstd stream frame without content size",
                    "payload_bytes_compressed_avg": round(sum(map(len, payloads)) / len(payloads), 1),
                    "payload_bytes_uncompressed_avg": round(sum(map(len, raw)) / len(raw), 1),
                    "subscriptions": 20,
                    "clients": clients,
                    "push_rounds": rounds,
                    "memory_instances": instances,
                    "repeats": repeats,
                },
                "results": {
                    "decode_only_per_s": round(decode_only),
                    "handshakes_per_s": round(handshakes),
                    "pushes_per_s": round(pushes),
                    "push_cost_vs_decode_only": round(decode_only / pushes, 2),
                    "archive": archived,
                    "memory": memory,
                    "estimated_instance_bytes_constant": ESTIMATED_INSTANCE_BYTES,
                },
                "machine": machine(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
