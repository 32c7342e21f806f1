"""Benchmark of KIP-936's producer-id quota: ``ProducerIdQuotaManager`` checks and filter memory.

What it measures
    Producer-id checks per second through ``record_and_get_throttle_time_ms`` (one call per check)
    and through ``record_batch(items, now_ms)`` (batches of 100 and 1000 checks sharing one
    ``now_ms``; and the batches of 1000 again with ``(user, pid, now_ms)`` items, the form the shard
    gets from the gateway: ``batch_1000_timed_items``), on one core, with KIP-936's defaults (11
    windows of 3600 s, filters of 10,000 ids at 1 % false positives). The owner's
    ``cleanup(now_ms)`` runs after every 1000 checks on every path.

    Workload (seeded): 2,000 users under a ``<default>`` user quota of 0.05 new ids/s, 2 % of them
    with their own quota. Each user has a Zipf popularity (s = 1) and 1 to 50 long-lived producers;
    98 % of checks reuse one of the user's producers, 2 % bring a new producer id (ids are handed
    out sequentially, as a controller does), and one "churner" user that opens a new producer for
    every request gets 1 % of the traffic. The clock starts at 1_700_000_000_000 ms and the checks
    are spread over 2.5 windows (9,000 s), so filters rotate, expire and users are cleaned up.
    A second workload has only new ids (the worst case: every check records into the token bucket).

    Each path runs on a fresh manager; an untimed warm-up takes the first 10 % of the stream, the rest
    is timed with ``time.perf_counter``, best of 3 repeats, garbage collector on.

Memory
    For n = 10,000 ids and p = 1 %: the theoretical optimum ``-n ln p / ln² 2`` bits, computed in the
    same run; rbloom's bit array; and the resident memory (RSS) growth per user of a fresh process
    tracking 1,000 users, each with one filter of 10,000 ids and then with two (the overlap between 1
    and 1.5 windows, KIP-936's peak), including the user's sensors and metrics. The false-positive
    rate of one filter holding 10,000 ids is measured too (200,000 queries).

Correctness check (not timed)
    Each batch size, with two- and three-element items, must give exactly the throttle times of
    one-by-one calls made with the batch's ``now_ms``, and every repeat must give the same list;
    otherwise the script exits with status 1.

Output: one JSON object on stdout. Run: ``.venv/bin/python bench/producer_ids.py [--checks N]
[--users N] [--seed N] [--quick] [--profile]``.
"""

from __future__ import annotations

import argparse
import bisect
import cProfile
import gc
import io
import itertools
import json
import math
import os
import pstats
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from _machine import machine

from quotaplane.quota import (
    DEFAULT,
    ClientQuotaEntity,
    ProducerIdQuotaManager,
    ProducerIdQuotaManagerConfig,
    TimedBloomFilter,
)
from quotaplane.quota._bloom import optimal_bits

START_MS = 1_700_000_000_000
BATCH_SIZES = (100, 1000)
CLEANUP_EVERY = 1000  # checks between two cleanup calls, on every path
NEW_ID_FRACTION = 0.02
CHURNER_FRACTION = 0.01
DEFAULT_RATE = 0.05  # new ids per second per user: a burst of 11 * 3600 * 0.05 = 1980 ids
N_ITEMS, FP_RATE = 10_000, 0.01
WARM_USERS = 100  # memory: users created before the baseline, not counted

Item = tuple[str, int]


@dataclass(frozen=True)
class Workload:
    name: str
    quotas: list[tuple[ClientQuotaEntity, float | None]]
    items: list[Item]
    times: list[int]
    warmup: int


def build_workload(users: int, checks: int, seed: int, *, all_new: bool = False) -> Workload:
    rng = random.Random(seed)
    names = [f"CN=svc-{i:05d},OU=kafka" if i % 50 == 0 else f"svc-{i:05d}" for i in range(users)]
    quotas: list[tuple[ClientQuotaEntity, float | None]] = [(ClientQuotaEntity(user=DEFAULT), DEFAULT_RATE)]
    for name in rng.sample(names, max(1, users // 50)):
        quotas.append((ClientQuotaEntity(user=name), rng.choice([0.01, 0.2, 1.0])))
    next_id = itertools.count(1_000_000)
    producers = {name: [next(next_id) for _ in range(rng.randint(1, 50))] for name in names}
    cum_weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(users)))
    total = cum_weights[-1]
    churner = "churner"
    items: list[Item] = []
    for _ in range(checks):
        if all_new:
            items.append((names[rng.randrange(users)], next(next_id)))
            continue
        r = rng.random()
        if r < CHURNER_FRACTION:
            items.append((churner, next(next_id)))
            continue
        user = names[min(bisect.bisect_left(cum_weights, rng.random() * total), users - 1)]
        if r < CHURNER_FRACTION + NEW_ID_FRACTION:
            pid = next(next_id)
            producers[user].append(pid)  # a new producer that then lives on
        else:
            pid = rng.choice(producers[user])
        items.append((user, pid))
    span_ms = 9_000_000  # 2.5 windows of 3600 s
    times = [START_MS + i * span_ms // checks for i in range(checks)]
    warmup = (checks // 10) // max(BATCH_SIZES) * max(BATCH_SIZES)
    return Workload("all_new" if all_new else "mixed", quotas, items, times, warmup)


def new_manager(workload: Workload) -> ProducerIdQuotaManager:
    manager = ProducerIdQuotaManager(ProducerIdQuotaManagerConfig())
    for entity, bound in workload.quotas:
        manager.update_quota(entity, bound)
    return manager


def batches_of(
    items: Sequence[Item], times: Sequence[int], size: int, *, timed_items: bool = False
) -> list[tuple[list, int]]:
    """Consecutive batches, each at its last item's time; with ``timed_items`` every item carries that
    time as ``(user, pid, now_ms)`` (the form the shard receives from the gateway)."""
    batches = [(list(items[s : s + size]), times[min(s + size, len(items)) - 1]) for s in range(0, len(items), size)]
    if timed_items:
        batches = [([(user, pid, now_ms) for user, pid in batch], now_ms) for batch, now_ms in batches]
    return batches


# --- paths ------------------------------------------------------------------------------------------
def per_call(manager: ProducerIdQuotaManager, batches: Sequence[tuple[list[Item], int]]) -> list[int]:
    """One call per check, each at its batch's ``now_ms`` (so results compare with the batch paths)."""
    record = manager.record_and_get_throttle_time_ms
    cleanup = manager.cleanup
    out: list[int] = []
    append = out.append
    done = 0
    for batch, now_ms in batches:
        for user, pid in batch:
            append(record(user, pid, now_ms))
        done += len(batch)
        if done % CLEANUP_EVERY == 0:
            cleanup(now_ms)
    return out


def batched(manager: ProducerIdQuotaManager, batches: Sequence[tuple[list[Item], int]]) -> list[int]:
    record_batch = manager.record_batch
    cleanup = manager.cleanup
    out: list[int] = []
    extend = out.extend
    done = 0
    for batch, now_ms in batches:
        extend(record_batch(batch, now_ms))
        done += len(batch)
        if done % CLEANUP_EVERY == 0:
            cleanup(now_ms)
    return out


@dataclass
class Path:
    name: str
    size: int
    run: Callable[[ProducerIdQuotaManager, Sequence[tuple[list[Item], int]]], list[int]]
    best_s: float = math.inf
    throttles: list[int] | None = None
    timed_items: bool = False


def measure(workload: Workload, repeats: int) -> tuple[dict[str, Path], int]:
    w = workload.warmup
    paths = [Path("per_call", max(BATCH_SIZES), per_call)]
    paths += [Path(f"batch_{size}", size, batched) for size in BATCH_SIZES]
    paths.append(Path(f"batch_{max(BATCH_SIZES)}_timed_items", max(BATCH_SIZES), batched, timed_items=True))
    timed_n = len(workload.items) - w
    for _ in range(repeats):
        for path in paths:
            manager = new_manager(workload)
            timed_items = path.timed_items
            warm = path.run(
                manager, batches_of(workload.items[:w], workload.times[:w], path.size, timed_items=timed_items)
            )
            timed = batches_of(workload.items[w:], workload.times[w:], path.size, timed_items=timed_items)
            gc.collect()
            t0 = time.perf_counter()
            result = path.run(manager, timed)
            elapsed = time.perf_counter() - t0
            path.best_s = min(path.best_s, elapsed)
            if path.throttles is None:
                path.throttles = warm + result
            elif path.throttles != warm + result:
                _fail(f"{workload.name}/{path.name}: repeats differ", path.throttles, warm + result)
    return {p.name: p for p in paths}, timed_n


def check_batches(workload: Workload) -> None:
    """record_batch == one-by-one calls at the batch's now_ms, for each batch size."""
    for size in BATCH_SIZES:
        batches = batches_of(workload.items, workload.times, size)
        expected = per_call(new_manager(workload), batches)
        got = batched(new_manager(workload), batches)
        if got != expected:
            _fail(f"{workload.name}: record_batch(size={size}) vs one-by-one", expected, got)
        got = batched(new_manager(workload), batches_of(workload.items, workload.times, size, timed_items=True))
        if got != expected:
            _fail(f"{workload.name}: record_batch(size={size}, timed items) vs one-by-one", expected, got)


def _fail(what: str, expected: Sequence[int], got: Sequence[int]) -> None:
    index = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), None)
    detail = f"lengths {len(expected)} != {len(got)}" if index is None else f"first difference at {index}"
    print(f"producer_ids: MISMATCH {what}; {detail}", file=sys.stderr)
    sys.exit(1)


# --- memory -----------------------------------------------------------------------------------------
def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory(users: int) -> dict:
    """Bytes per user, measured as RSS growth in this process (run it in a fresh one: see main)."""
    optimum_bits = optimal_bits(N_ITEMS, FP_RATE)
    optimum_bytes = optimum_bits / 8
    window = 3_600_000

    manager = ProducerIdQuotaManager(ProducerIdQuotaManagerConfig(filter_expected_items=N_ITEMS))
    manager.update_quota(ClientQuotaEntity(user=DEFAULT), 1e9)  # no throttling: this measures memory only
    names = [f"svc-{i:05d}" for i in range(users)]
    warm_names = [f"warm-{i:05d}" for i in range(WARM_USERS)]

    def fill(first_pid: int, now_ms: int, names: Sequence[str] = names) -> None:
        # one id through the manager (creates the user's state or its next filter), the rest straight
        # into the user's filter: a filter's memory does not depend on the path its ids took
        for i, name in enumerate(names):
            base = first_pid + i * N_ITEMS
            manager.record_and_get_throttle_time_ms(name, base, now_ms)
            add = manager.filter_of(name).add
            for pid in range(base + 1, base + N_ITEMS):
                add(pid, now_ms)

    # users that are never counted: they take up the heap the interpreter had already freed, which
    # would otherwise hide the growth (their filters are full too, so a window later they rotate alike)
    fill(2**62, START_MS, warm_names)
    gc.collect()
    rss0 = _rss_bytes()
    fill(0, START_MS)  # every user: one filter holding 10,000 ids
    gc.collect()
    rss1 = _rss_bytes()
    fill(users * N_ITEMS, START_MS + window)  # a window later: a second filter of 10,000 ids (the overlap)
    gc.collect()
    rss2 = _rss_bytes()
    if not all(manager.filter_of(n).filters_held == 2 for n in names):
        raise AssertionError("expected two filters per user")
    one_filter = (rss1 - rss0) / users
    two_filters = (rss2 - rss0) / users

    # false-positive rate of one filter holding n ids (after the RSS figures: its garbage would skew them)
    probe = TimedBloomFilter(N_ITEMS, FP_RATE, window)
    for pid in range(N_ITEMS):
        probe.add(pid, START_MS)
    rng = random.Random(936)
    queries = 200_000
    fp = sum(probe.contains(N_ITEMS + rng.getrandbits(62), START_MS) for _ in range(queries)) / queries
    bits = probe.bits_per_filter
    return {
        "expected_items": N_ITEMS,
        "false_positive_rate": FP_RATE,
        "optimum_bits": round(optimum_bits, 1),
        "optimum_bytes": round(optimum_bytes, 1),
        "filter_bits": bits,
        "filter_bit_array_bytes": bits // 8,
        "filter_vs_optimum": round((bits / 8) / optimum_bytes, 4),
        "measured_false_positive_rate_at_n": round(fp, 5),
        "users_measured": users,
        "rss_bytes_per_user_one_filter": round(one_filter),
        "rss_bytes_per_user_two_filters": round(two_filters),
        "one_filter_user_vs_optimum": round(one_filter / optimum_bytes, 3),
        "two_filter_user_vs_optimum": round(two_filters / optimum_bytes, 3),
        "note": (
            "RSS growth of a fresh process per tracked user, each filter holding 10,000 ids, including the "
            "user's sensors, metrics and dict entries. A user holds one filter for the second half of each "
            "window and two (KIP-936's overlap) for the first half."
        ),
    }


def memory_in_fresh_process(users: int) -> dict:
    """Run ``memory`` in a new interpreter, so the timed runs' freed heap does not hide the growth."""
    result = subprocess.run(
        [sys.executable, __file__, "--memory-only", "--memory-users", str(users)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


# --- report -----------------------------------------------------------------------------------------
def profile(workload: Workload) -> str:
    manager = new_manager(workload)
    batches = batches_of(workload.items, workload.times, max(BATCH_SIZES))
    profiler = cProfile.Profile()
    profiler.enable()
    batched(manager, batches)
    profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(20)
    return stream.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--checks", type=int, default=500_000, help="checks in the mixed workload (default 500000)")
    parser.add_argument("--users", type=int, default=2_000, help="users (default 2000)")
    parser.add_argument("--seed", type=int, default=936, help="random seed (default 936)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats; the best counts (default 3)")
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--profile", action="store_true", help="write a cProfile of batch_1000 to stderr")
    parser.add_argument("--memory-users", type=int, default=1_000, help="users for the memory figures (default 1000)")
    parser.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_only:
        print(json.dumps(memory(args.memory_users)))
        return 0
    if args.quick:
        args.checks, args.users, args.repeats = min(args.checks, 20_000), min(args.users, 200), 1
        args.memory_users = min(args.memory_users, 20)
    if args.checks < 10 * max(BATCH_SIZES) or args.users < 1 or args.repeats < 1:
        parser.error(f"need --checks >= {10 * max(BATCH_SIZES)}, --users >= 1, --repeats >= 1")

    results: dict[str, dict] = {}
    workloads = [
        build_workload(args.users, args.checks, args.seed),
        build_workload(args.users, max(args.checks // 5, 10 * max(BATCH_SIZES)), args.seed + 1, all_new=True),
    ]
    for workload in workloads:
        check_batches(workload)
        paths, n = measure(workload, args.repeats)
        throttles = paths["per_call"].throttles or []
        results[workload.name] = {
            "checks_timed": n,
            "per_call_checks_per_s": round(n / paths["per_call"].best_s),
            **{f"batch_{size}_checks_per_s": round(n / paths[f"batch_{size}"].best_s) for size in BATCH_SIZES},
            # the same batches with (user, pid, now_ms) items, as the shard gets them from the gateway
            f"batch_{max(BATCH_SIZES)}_timed_items_checks_per_s": round(
                n / paths[f"batch_{max(BATCH_SIZES)}_timed_items"].best_s
            ),
            "throttled_fraction": round(sum(1 for t in throttles if t > 0) / max(1, len(throttles)), 4),
            "best_seconds": {name: round(p.best_s, 4) for name, p in paths.items()},
        }
    report = {
        "benchmark": "producer_ids",
        "workload": {
            "users": args.users,
            "checks": args.checks,
            "config": ProducerIdQuotaManagerConfig().as_properties(),
            "default_user_rate": DEFAULT_RATE,
            "new_id_fraction": NEW_ID_FRACTION,
            "churner_fraction": CHURNER_FRACTION,
            "simulated_ms": 9_000_000,
            "batch_sizes": list(BATCH_SIZES),
            "cleanup_every_checks": CLEANUP_EVERY,
            "repeats": args.repeats,
            "seed": args.seed,
            "quick": args.quick,
        },
        "results": results,
        "memory": memory_in_fresh_process(args.memory_users),
        "check": "record_batch == one-by-one throttle lists for every batch size and workload",
        "machine": machine(),
    }
    print(json.dumps(report, indent=2))
    if args.profile:
        print(profile(workloads[0]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
