"""Leased budgets against exact mode: what 4 gateways admit under skewed overload, entity by entity.

What it runs
    A discrete-event simulation on the real Kafka core (``ClientQuotaManager``) and the real lease code
    (``LeaseBook`` on the owning shard, one ``LeaseHolder`` per gateway), in simulated time. ``--entities`` tenants
    (users), each with a produce quota of ``--quota`` bytes/s and ``--clients`` producers spread over 4
    gateways with a skew (55 / 25 / 15 / 5 % of the tenant's traffic, rotated per tenant so every gateway is hot
    for some); together they offer ``--overload`` times the quota. A producer sends a ``--request-bytes``
    request, and sends the next one after its own interval or after the throttle time it was given, whichever
    is later (KIP-219: the client waits out the throttle). Halfway through, every tenant's skew rotates by one
    gateway (demand moves), so the leases must follow.

    - **exact**: every request is decided by the one manager that owns the tenant (Kafka's single broker, as
      quotaplane's exact mode): the reference.
    - **leased**: a request on a gateway holding a live lease for the tenant is decided there, by the
      gateway's own core against its share; the others go to the shard's manager (exact), which also records
      what the gateways decided locally at each renewal (every half lease period, staggered per gateway).

What it reports
    Per tenant, the bytes admitted (sent by the producers) from the end of the warm-up to the end, in both
    modes; over-admission = leased - exact where positive, under-admission = exact - leased where positive,
    both as a fraction of exact; their max and mean over tenants, separately for the steady phase before the
    demand moves and the phase after it. Also the share of decisions made locally, the shard calls per second
    of each mode (requests decided there plus renewals), and the in-process cost of a local decision against
    an exact one (the time leased mode saves per request on a real deployment is the gateway -> shard round
    trip, ~0.6-0.8 ms for one item in ``bench/cluster_quota.py``, which this simulation does not add).

Output: one JSON object on stdout. Run: ``.venv/bin/python bench/leases.py [--quick] [--lease-ms N]``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from _machine import machine

from quotaplane.quota import ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from quotaplane.quota._lease import Lease, LeaseBook, LeaseHolder

START_MS = 1_700_000_000_000
GATEWAYS = 4
SKEW = (0.55, 0.25, 0.15, 0.05)


@dataclass
class Producer:
    user: str
    client_id: str
    gateway: int
    interval_ms: float
    phase: int  # the skew phase it belongs to: it sends only while the phase is on (0: first half, 1: second)


@dataclass
class Run:
    """What one mode admitted, and what it cost."""

    admitted: dict[tuple[str, int], float] = field(default_factory=dict)  # (user, phase) -> bytes
    decisions: int = 0
    local_decisions: int = 0
    shard_calls: int = 0


def producers(entities: int, clients: int, quota: float, overload: float, request_bytes: int) -> list[Producer]:
    """Each tenant's clients per gateway and phase, offering ``overload * quota`` in each phase."""
    out = []
    for e in range(entities):
        user = f"tenant-{e}"
        for phase in (0, 1):
            shift = e + phase  # the second phase moves every tenant's hot gateway by one
            for g in range(GATEWAYS):
                fraction = SKEW[(g - shift) % GATEWAYS]
                n = max(1, round(clients * fraction))
                rate = overload * quota * fraction / n  # bytes/s per client
                for c in range(n):
                    out.append(Producer(user, f"{user}-g{g}-p{phase}-{c}", g, request_bytes * 1000.0 / rate, phase))
    return out


def simulate(
    clients: list[Producer],
    decide: Callable[[Producer, int, int], int],
    tick: Callable[[int], None] | None,
    tick_ms: int,
    duration_ms: int,
    warmup_ms: int,
    request_bytes: int,
    seed: int,
) -> dict[tuple[str, int], float]:
    """Run the producers for ``duration_ms``: each request is ``decide(producer, bytes, now)`` -> throttle ms."""
    rng = random.Random(seed)
    half = duration_ms // 2
    admitted: dict[tuple[str, int], float] = {}
    events: list[tuple[int, int, int]] = []  # (time, order, producer index or -1 for a tick)
    for i, p in enumerate(clients):
        start = (0 if p.phase == 0 else half) + int(rng.random() * p.interval_ms)
        events.append((START_MS + start, i, i))
    if tick is not None:
        events.append((START_MS, -1, -1))
    heapq.heapify(events)
    end = START_MS + duration_ms
    order = len(clients)
    while events:
        now, _, i = heapq.heappop(events)
        if now >= end:
            break
        if i < 0:
            tick(now)  # type: ignore[misc]
            heapq.heappush(events, (now + tick_ms, -1, -1))
            continue
        p = clients[i]
        if p.phase == 0 and now >= START_MS + half:
            continue  # its phase is over
        throttle = decide(p, request_bytes, now)
        if now >= START_MS + warmup_ms + (half if p.phase == 1 else 0):
            admitted[(p.user, p.phase)] = admitted.get((p.user, p.phase), 0.0) + request_bytes
        order += 1
        heapq.heappush(events, (now + max(math.ceil(p.interval_ms), throttle, 1), order, i))
    return admitted


def key_of(user: str) -> str:
    return f"PRODUCE\x00{user}\x00"


def run_exact(args: argparse.Namespace, clients: list[Producer], config: ClientQuotaManagerConfig) -> Run:
    shard = new_shard(args, config, clients)
    run = Run()

    def decide(p: Producer, size: int, now: int) -> int:
        run.decisions += 1
        run.shard_calls += 1
        return shard.record_and_get_throttle_time_ms(p.user, p.client_id, size, now)

    run.admitted = simulate(clients, decide, None, 0, args.duration_ms, args.warmup_ms, args.request_bytes, args.seed)
    return run


def run_leased(args: argparse.Namespace, clients: list[Producer], config: ClientQuotaManagerConfig) -> Run:
    shard = new_shard(args, config, clients)
    book = LeaseBook(lease_ms=args.lease_ms)
    holders = [LeaseHolder(f"gateway-{g}", config) for g in range(GATEWAYS)]
    bounds = {key_of(p.user): args.quota for p in clients}
    run = Run()
    renew_every = max(1, args.lease_ms // 2)
    ticks = [0]

    def decide(p: Producer, size: int, now: int) -> int:
        run.decisions += 1
        key = key_of(p.user)
        holder = holders[p.gateway]
        [throttle] = holder.decide([(key, size)], bounds, now)
        if throttle is not None:
            run.local_decisions += 1
            return throttle
        run.shard_calls += 1
        throttle = shard.record_and_get_throttle_time_ms(p.user, p.client_id, size, now)
        holder.observe(key, size, bounds[key], now)
        return throttle

    def tick(now: int) -> None:
        # one gateway renews per tick, in turn: each renews every half lease period, staggered
        g = ticks[0] % GATEWAYS
        ticks[0] += 1
        holder = holders[g]
        requests = holder.renewal(now)
        if not requests:
            return
        run.shard_calls += 1
        for request in requests:
            if request.decided_locally > 0.0:  # the shard's sensor sees the gateways' local traffic too
                user = request.key.split("\x00")[1]
                shard.record_no_throttle(user, f"leased-{holder.holder}", request.decided_locally, now)
        holder.apply(book.renew(holder.holder, requests, now))

    run.admitted = simulate(
        clients,
        decide,
        tick,
        renew_every // GATEWAYS or 1,
        args.duration_ms,
        args.warmup_ms,
        args.request_bytes,
        args.seed,
    )
    return run


def new_shard(
    args: argparse.Namespace, config: ClientQuotaManagerConfig, clients: list[Producer]
) -> ClientQuotaManager:
    shard = ClientQuotaManager(config, QuotaType.PRODUCE)
    for user in sorted({p.user for p in clients}):
        shard.update_quota(ClientQuotaEntity(user=user), args.quota)
    return shard


def accuracy(exact: Run, leased: Run, phase: int) -> dict:
    over, under = [], []
    for (user, p), sent in exact.admitted.items():
        if p != phase or sent <= 0:
            continue
        got = leased.admitted.get((user, p), 0.0)
        over.append(max(0.0, got - sent) / sent)
        under.append(max(0.0, sent - got) / sent)
    return {
        "entities": len(over),
        "over_admission_max": round(max(over, default=0.0), 4),
        "over_admission_mean": round(statistics.fmean(over), 4) if over else 0.0,
        "under_admission_max": round(max(under, default=0.0), 4),
        "under_admission_mean": round(statistics.fmean(under), 4) if under else 0.0,
    }


def decision_costs(config: ClientQuotaManagerConfig, quota: float, n: int) -> dict:
    """In-process cost of one decision: the exact core's one-item call, and a holder's local one."""
    exact = ClientQuotaManager(config, QuotaType.PRODUCE)
    exact.update_quota(ClientQuotaEntity(user="tenant"), quota)
    holder = LeaseHolder("g", config)
    key = key_of("tenant")
    holder.observe(key, 0.0, quota, START_MS)
    holder.apply({key: Lease(key, "g", quota, quota, START_MS + 10**12)})  # the whole quota, for the whole run
    bounds = {key: quota}
    t0 = time.perf_counter()
    for i in range(n):
        exact.record_and_get_throttle_time_ms("tenant", "c", 100.0, START_MS + i // 10)
    exact_us = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for i in range(n):
        holder.decide([(key, 100.0)], bounds, START_MS + i // 10)
    local_us = (time.perf_counter() - t0) / n * 1e6
    return {"exact_core_one_item_us": round(exact_us, 2), "leased_local_one_item_us": round(local_us, 2)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=40, help="tenants (default 40)")
    parser.add_argument("--clients", type=int, default=12, help="producers per tenant per phase (default 12)")
    parser.add_argument("--quota", type=float, default=1_048_576.0, help="produce quota, bytes/s (default 1 MiB)")
    parser.add_argument("--overload", type=float, default=2.0, help="offered load / quota (default 2)")
    parser.add_argument("--request-bytes", type=int, default=16_384, help="bytes per produce request")
    parser.add_argument("--lease-ms", type=int, default=1000, help="lease period (renewed every half)")
    parser.add_argument("--duration-ms", type=int, default=120_000, help="simulated time (default 120 s)")
    parser.add_argument("--warmup-ms", type=int, default=20_000, help="not counted, at the start of each phase")
    parser.add_argument("--seed", type=int, default=20261127)
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.entities, args.duration_ms, args.warmup_ms = 8, 40_000, 8_000
    config = ClientQuotaManagerConfig()
    clients = producers(args.entities, args.clients, args.quota, args.overload, args.request_bytes)

    started = time.perf_counter()
    exact = run_exact(args, clients, config)
    leased = run_leased(args, clients, config)
    wall_s = time.perf_counter() - started
    counted_s = (args.duration_ms - 2 * args.warmup_ms) / 1000.0
    per_phase_quota = args.quota * counted_s / 2

    def admitted_vs_quota(run: Run) -> float:
        return round(statistics.fmean(v / per_phase_quota for v in run.admitted.values()), 4)

    report = {
        "benchmark": "leases",
        "workload": {
            "gateways": GATEWAYS,
            "skew": list(SKEW),
            "entities": args.entities,
            "clients_per_entity_per_phase": args.clients,
            "quota_bytes_per_s": args.quota,
            "overload": args.overload,
            "request_bytes": args.request_bytes,
            "lease_ms": args.lease_ms,
            "simulated_ms": args.duration_ms,
            "warmup_ms_per_phase": args.warmup_ms,
            "demand_moves_at_ms": args.duration_ms // 2,
            "seed": args.seed,
        },
        "results": {
            "steady": accuracy(exact, leased, 0),
            "after_demand_moved": accuracy(exact, leased, 1),
            "admitted_over_quota_exact": admitted_vs_quota(exact),
            "admitted_over_quota_leased": admitted_vs_quota(leased),
            "local_decision_fraction": round(leased.local_decisions / max(1, leased.decisions), 4),
            "shard_calls_per_simulated_s": {
                "exact": round(exact.shard_calls / (args.duration_ms / 1000.0), 1),
                "leased": round(leased.shard_calls / (args.duration_ms / 1000.0), 1),
            },
            "decisions": {"exact": exact.decisions, "leased": leased.decisions},
            **decision_costs(config, args.quota, 20_000),
            "wall_s": round(wall_s, 2),
        },
        "machine": machine(),
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
