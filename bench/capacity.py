"""The capacity model of docs/scaling.md, checked by a discrete-event simulation that drives the real core.

The model (``predict``): a fleet of ``--brokers`` Kafka brokers (or proxies) serving ``--clients`` client
instances, each sending ``--requests-per-client-s`` Produce requests a second (one quota decision each) and a
KIP-714 push every ``--push-interval-s``, over ``--entities`` quota entities (users), costs

    decisions/s = clients x requests-per-client-s              pushes/s = clients / push-interval-s
    shard CPU   = decisions/s x c_decision + pushes/s x c_push  (core seconds a second, in the shards)
    fleet CPU   = decisions/s x c_decision x k_decision + pushes/s x c_push x k_push   (every process)
    shards      = ceil(shard CPU / target utilisation)        gateways = ceil((fleet CPU - shard CPU) / target)
    memory      = entities x m_entity + clients x (m_client + m_instance) (spread over the shards)
    network     = decisions/s x b_decision + pushes/s x b_push (broker -> gateway -> shard, each way)

with the unit costs ``c_*`` (CPU seconds) and ``m_*`` (bytes) measured in this run on the real core, and the
cluster factors ``k_*`` (everyone's CPU per decision / push over the core's alone) from bench/cluster_quota.py
and bench/frontend.py (``--cluster-factor-decision``, ``--cluster-factor-push``; docs/performance.md).

The simulation samples the fleet: ``--sample`` of the clients (e.g. 1e-4: 1,000 of 10,000,000) with their
entities (Zipf-skewed over a sampled ``--entities``), Poisson Produce arrivals and pushes every push interval
with a random phase, for ``--sim-s`` simulated seconds, processed in time order through one shard's worth of
real managers (``ClientQuotaManager`` for produce, ``ClientMetricsManager`` for GetTelemetrySubscriptions and
PushTelemetry with a librdkafka-shaped zstd payload). It measures the CPU it took and the memory the managers
hold, scales both by 1 / sample, and compares them with what the model predicts for the full fleet from the
unit costs: ``checks.cpu_ratio`` (simulated / predicted, ~1 when the model holds, also under skew and the mix of
events) and ``checks.memory_ratio``.

Output: one JSON object on stdout (workload, model, simulation, checks, machine). Run:
``.venv/bin/python bench/capacity.py [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import math
import random
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine
from telemetry import _context, producer_payload  # the librdkafka-shaped push and connection of bench/telemetry.py

from quotaplane.quota import DEFAULT, ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from quotaplane.telemetry import (
    ClientMetricsManager,
    ClientMetricsManagerConfig,
    CompressionType,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
    RequestContext,
    compress,
)

START_MS = 1_700_000_000_000
#: bytes on the wire per usage item (type, user, client id, value, time: columns) and per push (payload + context)
DECISION_BYTES = 48
PUSH_OVERHEAD_BYTES = 160


def _telemetry(push_interval_ms: int) -> ClientMetricsManager:
    manager = ClientMetricsManager(ClientMetricsManagerConfig(), [], now_ms=START_MS)
    manager.update_subscription(
        "producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": str(push_interval_ms), "match": ""}
    )
    return manager


def _quotas(bound: float) -> ClientQuotaManager:
    manager = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    manager.update_quota(ClientQuotaEntity(user=DEFAULT), bound)
    return manager


def unit_costs(args: argparse.Namespace, payload: bytes) -> dict[str, float]:
    """c_decision, c_push (CPU s) and m_entity, m_instance (bytes) of the real core, measured here."""
    n = 20_000 if args.quick else 100_000
    quotas = _quotas(args.quota)
    users = [f"u{i}" for i in range(2_000)]
    # 2,000 entities, 100 items a ms (bench/core_quota.py's rate): the unit cost of a hot shard
    items = [(users[i % len(users)], "c", 1000.0, START_MS + i // 100) for i in range(n)]
    quotas.record_batch(items[:2_000], START_MS)
    started = time.process_time()
    for i in range(0, n, 100):
        quotas.record_batch(items[i : i + 100], items[i][3])
    c_decision = (time.process_time() - started) / n

    pushes = 2_000 if args.quick else 10_000
    telemetry = _telemetry(args.push_interval_s * 1000)
    contexts = [_context(i) for i in range(pushes)]
    subs = [
        telemetry.process_get_telemetry_subscriptions_request(GetTelemetrySubscriptionsRequest(), ctx, START_MS)
        for ctx in contexts
    ]
    now = START_MS + args.push_interval_s * 1000
    started = time.process_time()
    for sub, ctx in zip(subs, contexts, strict=True):
        request = PushTelemetryRequest(sub.client_instance_id, sub.subscription_id, False, 4, payload)
        if telemetry.process_push_telemetry_request(request, ctx, now).error_code:
            raise SystemExit("calibration push refused")
    c_push = (time.process_time() - started) / pushes

    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fresh = _quotas(args.quota)
    for i in range(5_000):
        for k in range(11):  # every sample of the window used
            fresh.record_and_get_throttle_time_ms(f"m{i}", "c", 10.0, START_MS + k * 1000)
    m_entity = (tracemalloc.get_traced_memory()[0] - base) / 5_000
    base = tracemalloc.get_traced_memory()[0]
    for i in range(5_000):  # clients of one entity share its sensor; each still has its cached sensor set
        fresh.record_and_get_throttle_time_ms("m0", f"client-{i}", 10.0, START_MS + 10_000)
    m_client = (tracemalloc.get_traced_memory()[0] - base) / 5_000
    base = tracemalloc.get_traced_memory()[0]
    telemetry = _telemetry(args.push_interval_s * 1000)
    for i in range(5_000):
        telemetry.process_get_telemetry_subscriptions_request(GetTelemetrySubscriptionsRequest(), _context(i), START_MS)
    m_instance = (tracemalloc.get_traced_memory()[0] - base) / 5_000
    tracemalloc.stop()
    return {
        "c_decision_s": c_decision,
        "c_push_s": c_push,
        "m_entity_bytes": m_entity,
        "m_client_bytes": m_client,
        "m_instance_bytes": m_instance,
    }


def predict(
    args: argparse.Namespace, costs: dict[str, float], payload_bytes: int, scale: float = 1.0
) -> dict[str, Any]:
    """The model for ``scale`` x the fleet (1.0: all of it)."""
    clients = args.clients * scale
    entities = args.entities * scale
    decisions = clients * args.requests_per_client_s
    pushes = clients / args.push_interval_s
    shard_cpu = decisions * costs["c_decision_s"] + pushes * costs["c_push_s"]
    fleet_cpu = (
        decisions * costs["c_decision_s"] * args.cluster_factor_decision
        + pushes * costs["c_push_s"] * args.cluster_factor_push
    )
    memory = entities * costs["m_entity_bytes"] + clients * (costs["m_client_bytes"] + costs["m_instance_bytes"])
    shards = max(1, math.ceil(shard_cpu / args.target_utilisation))
    return {
        "decisions_per_s": decisions,
        "pushes_per_s": pushes,
        "shard_cpu_cores": shard_cpu,
        "fleet_cpu_cores": fleet_cpu,
        "shards": shards,
        "gateway_and_frontend_cores": max(0.0, fleet_cpu - shard_cpu),
        "gateways": max(1, math.ceil(max(0.0, fleet_cpu - shard_cpu) / args.target_utilisation)),
        "memory_bytes": memory,
        "memory_per_shard_bytes": memory / shards,
        "network_bytes_per_s": decisions * DECISION_BYTES + pushes * (payload_bytes + PUSH_OVERHEAD_BYTES),
        "decisions_per_broker_s": decisions / args.brokers,
    }


def simulate(args: argparse.Namespace, payload: bytes) -> dict[str, Any]:
    """A sampled fleet through one shard's worth of real managers; CPU and memory, unscaled."""
    rng = random.Random(args.seed)
    clients = max(1, round(args.clients * args.sample))
    entities = max(1, round(args.entities * args.sample))
    weights = [1 / (i + 1) ** args.zipf for i in range(entities)]
    owner = rng.choices(range(entities), weights=weights, k=clients)
    users = [f"tenant-{e}" for e in range(entities)]
    horizon_ms = int(args.sim_s * 1000)
    interval_ms = args.push_interval_s * 1000
    events: list[tuple[int, int, int]] = []  # (time, kind 0 produce / 1 push, client)
    for c in range(clients):
        t = rng.expovariate(args.requests_per_client_s) * 1000
        while t < horizon_ms:
            events.append((int(t), 0, c))
            t += rng.expovariate(args.requests_per_client_s) * 1000
        t = rng.uniform(0, interval_ms)
        while t < horizon_ms:
            events.append((int(t), 1, c))
            t += interval_ms
    heapq.heapify(events)
    ordered = [heapq.heappop(events) for _ in range(len(events))]

    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    quotas = _quotas(args.quota)
    telemetry = _telemetry(interval_ms)
    contexts: dict[int, RequestContext] = {}
    subscriptions: dict[int, Any] = {}
    tracemalloc.stop()  # tracing costs CPU: memory is read again at the end, with tracing on for the managers only
    decisions = pushes = refused = 0
    # every client has done its GetTelemetrySubscriptions before (steady state: a client lives far longer than
    # the simulated span; handshakes are priced on their own, c_handshake)
    for c in range(clients):
        contexts[c] = _context(c)
        subscriptions[c] = telemetry.process_get_telemetry_subscriptions_request(
            GetTelemetrySubscriptionsRequest(), contexts[c], START_MS - interval_ms
        )
    sizes = [float(rng.lognormvariate(7.6, 0.8)) for _ in range(4096)]
    record_batch = quotas.record_batch
    push = telemetry.process_push_telemetry_request
    batch: list[tuple[str, str, float, int]] = []
    started = time.process_time()
    for i, (t, kind, c) in enumerate(ordered):
        now = START_MS + t
        if kind == 0:  # the gateway's micro-batches: what queued for the shard while its last call was out
            batch.append((users[owner[c]], f"producer-{c}", sizes[i & 4095], now))
            if len(batch) < args.batch_items:
                continue
        if batch:
            record_batch(batch, batch[0][3])
            decisions += len(batch)
            batch = []
        if kind == 1:
            sub = subscriptions[c]
            request = PushTelemetryRequest(sub.client_instance_id, sub.subscription_id, False, 4, payload)
            refused += push(request, contexts[c], now).error_code != 0
            pushes += 1
    if batch:
        record_batch(batch, batch[0][3])
        decisions += len(batch)
    cpu = time.process_time() - started
    # memory held by what the simulation built: rebuilt under tracing (the same calls, no timing)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    quotas2, telemetry2 = _quotas(args.quota), _telemetry(interval_ms)
    seen: set[int] = set()
    for t, kind, c in ordered:
        if kind == 0:
            quotas2.record_and_get_throttle_time_ms(users[owner[c]], f"producer-{c}", 1000.0, START_MS + t)
        elif c not in seen:
            seen.add(c)
            telemetry2.process_get_telemetry_subscriptions_request(
                GetTelemetrySubscriptionsRequest(), _context(c), START_MS + t
            )
    memory = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return {
        "clients": clients,
        "entities": entities,
        "entities_used": len({owner[c] for c in range(clients)}),
        "simulated_s": args.sim_s,
        "decisions": decisions,
        "pushes": pushes,
        "pushes_refused": refused,
        "cpu_s": cpu,
        "cpu_cores": cpu / args.sim_s,
        "memory_bytes": memory,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller calibration and a shorter simulation")
    parser.add_argument("--brokers", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=10_000_000)
    parser.add_argument("--entities", type=int, default=100_000, help="quota entities (users)")
    parser.add_argument("--requests-per-client-s", type=float, default=0.5, help="Produce requests a client a second")
    parser.add_argument("--push-interval-s", type=int, default=300, help="KIP-714 push interval")
    parser.add_argument("--quota", type=float, default=1_048_576.0, help="producer_byte_rate of every user")
    parser.add_argument("--sample", type=float, default=1e-4, help="the share of the fleet simulated")
    parser.add_argument("--sim-s", type=float, default=900.0, help="simulated seconds")
    parser.add_argument("--zipf", type=float, default=1.1, help="skew of clients over entities")
    parser.add_argument("--target-utilisation", type=float, default=0.5, help="of a core, per shard and gateway")
    parser.add_argument("--cluster-factor-decision", type=float, default=6.5, help="everyone's CPU / the core's")
    parser.add_argument("--cluster-factor-push", type=float, default=3.0, help="everyone's CPU / the shard's")
    parser.add_argument("--batch-items", type=int, default=100, help="usage items of one shard micro-batch")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.quick:
        args.sim_s = min(args.sim_s, 300.0)
    payload = compress(CompressionType.ZSTD, producer_payload())
    costs = unit_costs(args, payload)
    simulated = simulate(args, payload)
    scale = simulated["clients"] / args.clients
    expected = predict(args, costs, len(payload), scale)
    expected_memory = simulated["entities_used"] * costs["m_entity_bytes"] + simulated["clients"] * (
        costs["m_client_bytes"] + costs["m_instance_bytes"]
    )
    report = {
        "benchmark": "capacity",
        "workload": {k: v for k, v in vars(args).items() if k != "quick"},
        "unit_costs": {k: round(v * 1e6, 3) if k.startswith("c_") else round(v) for k, v in costs.items()},
        "unit_costs_units": "c_*: microseconds of CPU; m_*: bytes",
        "model_full_fleet": {k: round(v, 3) for k, v in predict(args, costs, len(payload)).items()},
        "simulation": {k: round(v, 4) if isinstance(v, float) else v for k, v in simulated.items()},
        "model_at_sample": {k: round(v, 6) for k, v in expected.items()},
        "checks": {
            "cpu_ratio": round(simulated["cpu_cores"] / expected["shard_cpu_cores"], 3),
            "memory_ratio": round(simulated["memory_bytes"] / expected_memory, 3),
            "memory_model": "entities used x m_entity + clients x (m_client + m_instance)",
        },
        "machine": machine(),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
