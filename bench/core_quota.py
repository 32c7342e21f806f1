"""Benchmark of the pure quota core: ``ClientQuotaManager`` recording produce requests.

What it measures
    Records per second through ``ClientQuotaManager.record_and_get_throttle_time_ms`` (one call
    per record) and through ``record_batch(items, now_ms)`` (batches of 100 and 1000 items sharing
    one ``now_ms``), for a PRODUCE manager (11 samples of 1 s) with 10,000 (user, client id)
    entities and quotas at every level of Kafka's precedence ladder: ``<user, client-id>``,
    ``<user, <default>>``, ``<user>``, ``<<default>, client-id>``, the ``<default>`` user, the
    ``<default>`` client id and a few client-id-only quotas. Traffic is Zipf-skewed over the
    entities, request sizes are log-normal (median 2 KiB, capped at 1 MiB), and the clock starts at
    1_700_000_000_000 ms with Poisson arrivals of ~100 records per ms, so windows roll and the hot
    clients are throttled.

    Every path runs on a fresh manager with identical config. An untimed warm-up first records a
    prefix of the stream that touches every entity, so sensors exist and the interpreter has
    specialized; then the rest of the stream is timed with ``time.perf_counter``, best of 3 repeats
    (repeats interleave the paths, so drift hits all of them alike). The garbage collector stays on,
    as in a service.

    In the same process a baseline loop does one dict increment per record over the same items
    (``d[key] = d.get(key, 0.0) + value``): the cheapest per-record work Python can do.

    The paths above run with KIP-786's quota-value metric off (``ClientQuotaManagerConfig``'s default, as in
    Kafka), so their figures compare across commits. quotaplane's shards run with it on by default
    (``client.quota.value.metric.enable``), so ``batch_1000`` and ``per_call`` also run with it on, interleaved
    with the others in the same repeats: ``results.quota_value_metric`` gives both figures and the registry's
    size per entity (sensors, metrics, and bytes allocated, measured with ``tracemalloc`` over the warm-up that
    creates every entity's sensors) with it off and on.

The batch paths run the compiled hot path (``quotaplane/quota/_record_compiled.pyx``) where the package was built
with it; ``batch_1000_pure`` runs the same batches on the pure-Python path, the reference (its throttles must
equal the compiled path's), and ``results.compiled_core`` gives both figures. ``QUOTAPLANE_PURE_CORE=1`` runs
every path pure (the figures of a machine without a compiler).

How to read the ratio
    ``ratios[path] = baseline_dict_increments_per_s / path_records_per_s``: how many times slower
    than a bare dict increment recording one request through that path is. It cancels most of the
    machine's speed, so it is the figure to compare across machines and commits; lower is better,
    and 1.0 would mean quota accounting as cheap as counting bytes in a dict.

Correctness check (not timed)
    Each batch path must give exactly the throttle times of one-by-one calls made with the same
    ``now_ms`` per item, and every repeat must give the same list; otherwise the script writes the
    first difference to stderr and exits with status 1.

Output: one JSON object on stdout. ``--profile`` also writes a cProfile of the batch-1000 path to
stderr. Run: ``.venv/bin/python bench/core_quota.py [--records N] [--entities N] [--seed N]
[--quick]``.
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
import pstats
import random
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from _machine import machine

from quotaplane.quota import (
    DEFAULT,
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    QuotaType,
    compiled_core,
)

START_MS = 1_700_000_000_000
RECORDS_PER_MS = 100.0
BATCH_SIZES = (100, 1000)
NUM_QUOTA_SAMPLES = 11
QUOTA_WINDOW_SIZE_SECONDS = 1
KIB = 1024.0
MIB = 1024.0 * KIB

Item = tuple[str, str, float]


# --- workload -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    pairs: list[tuple[str, str]]
    quotas: list[tuple[ClientQuotaEntity, float]]
    level_counts: dict[str, int]
    resolved_levels: dict[str, int]
    items: list[Item]  # warm-up prefix, then the timed records
    warmup: int  # number of leading items that are not timed
    times: list[int]  # arrival time of each item (ms)


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return float(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def _request_size(rng: random.Random) -> float:
    """A produce request's bytes: log-normal, median 2 KiB, within [64 B, 1 MiB] (max.request.size)."""
    return float(min(max(round(rng.lognormvariate(math.log(2 * KIB), 1.4)), 64), 1 << 20))


def _entities(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """``n`` distinct (user, client id) pairs: ~4 client ids per user, client ids shared across users."""
    n_users = max(1, n // 4)
    n_clients = max(2, n // 2)
    users = [
        # a few TLS principals, whose names Kafka's sanitizer must escape
        f"CN=svc-{i:05d},OU=kafka" if i % 50 == 0 else f"svc-{i:05d}"
        for i in range(n_users)
    ]
    apps = ("producer", "ingest", "connect", "rdkafka", "stream")
    clients = [f"{apps[i % len(apps)]}-{i:05d}" for i in range(n_clients)]
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    for user in users:  # every user has at least one client
        pair = (user, rng.choice(clients))
        seen.add(pair)
        pairs.append(pair)
    while len(pairs) < n:
        pair = (rng.choice(users), rng.choice(clients))
        if pair not in seen:
            seen.add(pair)
            pairs.append(pair)
    rng.shuffle(pairs)
    return pairs[:n]


def _quotas(
    rng: random.Random, pairs: Sequence[tuple[str, str]]
) -> tuple[list[tuple[ClientQuotaEntity, float]], dict[str, int]]:
    """Quotas at every level of the ladder, bounds in bytes/s drawn log-uniformly per level."""
    users = sorted({u for u, _ in pairs})
    clients = sorted({c for _, c in pairs})
    quotas: list[tuple[ClientQuotaEntity, float]] = []
    counts: Counter[str] = Counter()

    def add(level: str, entity: ClientQuotaEntity, low: float, high: float) -> None:
        quotas.append((entity, _log_uniform(rng, low, high)))
        counts[level] += 1

    for user, client_id in rng.sample(list(pairs), max(1, len(pairs) * 3 // 100)):
        add("user/client-id", ClientQuotaEntity(user=user, client_id=client_id), 256 * KIB, 8 * MIB)
    for user in rng.sample(users, max(1, len(users) * 5 // 100)):
        add("user/<default>", ClientQuotaEntity(user=user, client_id=DEFAULT), 256 * KIB, 4 * MIB)
    for user in rng.sample(users, max(1, len(users) * 5 // 100)):
        add("user", ClientQuotaEntity(user=user), 1 * MIB, 32 * MIB)
    for client_id in rng.sample(clients, max(1, len(clients) * 2 // 100)):
        add("<default>/client-id", ClientQuotaEntity(user=DEFAULT, client_id=client_id), 128 * KIB, 2 * MIB)
    add("<default> user", ClientQuotaEntity(user=DEFAULT), 2 * MIB, 2 * MIB)
    add("<default> client-id", ClientQuotaEntity(client_id=DEFAULT), 512 * KIB, 512 * KIB)
    for client_id in rng.sample(clients, min(10, len(clients))):
        add("client-id", ClientQuotaEntity(client_id=client_id), 256 * KIB, 4 * MIB)
    return quotas, dict(counts)


def _resolved_levels(pairs: Sequence[tuple[str, str]], quotas: Sequence[tuple[ClientQuotaEntity, float]]) -> dict:
    """Which configured level decides each entity's metric tags (descriptive; the manager decides)."""
    keys = {entity.key for entity, _ in quotas}
    ladder = (
        ("user/client-id", lambda u, c: (u, c)),
        ("user/<default>", lambda u, c: (u, DEFAULT)),
        ("user", lambda u, c: (u, None)),
        ("<default>/client-id", lambda u, c: (DEFAULT, c)),
        ("<default>/<default>", lambda u, c: (DEFAULT, DEFAULT)),
        ("<default> user", lambda u, c: (DEFAULT, None)),
    )
    counts: Counter[str] = Counter()
    for user, client_id in pairs:
        sanitized = ClientQuotaEntity(user=user).key[0]
        level = next((name for name, key in ladder if key(sanitized, client_id) in keys), "client-id levels")
        counts[level] += 1
    return dict(counts)


def build_workload(entities: int, records: int, seed: int) -> Workload:
    rng = random.Random(seed)
    pairs = _entities(rng, entities)
    quotas, level_counts = _quotas(rng, pairs)

    # Zipf-like popularity (s = 1.0) over a random ranking of the entities
    cum_weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(pairs))))
    total_weight = cum_weights[-1]
    # warm-up: every entity once (so all sensors exist), padded with traffic to a multiple of the
    # largest batch size, so batches never straddle the warm-up and the timed part
    largest = max(BATCH_SIZES)
    warmup = -(-len(pairs) // largest) * largest
    chosen = list(pairs)
    rng.shuffle(chosen)
    n_extra = warmup - len(chosen) + records
    picks = [bisect.bisect_left(cum_weights, rng.random() * total_weight) for _ in range(n_extra)]
    chosen.extend(pairs[min(p, len(pairs) - 1)] for p in picks)
    items = [(user, client_id, _request_size(rng)) for user, client_id in chosen]

    # Poisson arrivals, ~RECORDS_PER_MS per millisecond
    times: list[int] = []
    clock = 0.0
    for _ in items:
        clock += rng.expovariate(RECORDS_PER_MS)
        times.append(START_MS + int(clock))
    return Workload(pairs, quotas, level_counts, _resolved_levels(pairs, quotas), items, warmup, times)


def new_manager(workload: Workload, *, quota_value: bool = False, pure: bool = False) -> ClientQuotaManager:
    config = ClientQuotaManagerConfig(
        num_quota_samples=NUM_QUOTA_SAMPLES,
        quota_window_size_seconds=QUOTA_WINDOW_SIZE_SECONDS,
        client_quota_value_metric_enable=quota_value,
    )
    manager = ClientQuotaManager(config, QuotaType.PRODUCE)
    if pure:
        manager.record_compiled = None
    for entity, bound in workload.quotas:
        manager.update_quota(entity, bound)
    return manager


def batches_of(items: Sequence[Item], times: Sequence[int], size: int) -> list[tuple[list[Item], int]]:
    """Consecutive batches of ``size`` items, each recorded at its last item's arrival time."""
    return [(list(items[s : s + size]), times[min(s + size, len(items)) - 1]) for s in range(0, len(items), size)]


def batch_times(times: Sequence[int], size: int) -> list[int]:
    """Per-item times as a batch of ``size`` records them: each item gets its batch's ``now_ms``."""
    out: list[int] = []
    for s in range(0, len(times), size):
        n = min(size, len(times) - s)
        out.extend([times[s + n - 1]] * n)
    return out


# --- timed paths ----------------------------------------------------------------------------------
def per_call(manager: ClientQuotaManager, items: Sequence[Item], times: Sequence[int]) -> list[int]:
    record = manager.record_and_get_throttle_time_ms
    out: list[int] = []
    append = out.append
    for (user, client_id, value), now_ms in zip(items, times, strict=True):
        append(record(user, client_id, value, now_ms))
    return out


def batched(manager: ClientQuotaManager, batches: Sequence[tuple[list[Item], int]]) -> list[int]:
    record_batch = manager.record_batch
    out: list[int] = []
    extend = out.extend
    for batch, now_ms in batches:
        extend(record_batch(batch, now_ms))
    return out


def dict_baseline(items: Sequence[Item]) -> dict[tuple[str, str], float]:
    d: dict[tuple[str, str], float] = {}
    for user, client_id, value in items:
        key = (user, client_id)
        d[key] = d.get(key, 0.0) + value
    return d


@dataclass
class Path:
    name: str
    warm: Callable[[ClientQuotaManager], list[int]] | None  # untimed, on the fresh manager
    timed: Callable[[ClientQuotaManager | None], object]
    best_s: float = math.inf
    throttles: list[int] | None = None
    #: KIP-786's quota-value metric on in the path's manager
    quota_value: bool = False
    #: the pure-Python batch path in the path's manager, even where the compiled one is built
    pure: bool = False


def _timed_run(path: Path, workload: Workload) -> None:
    manager = None
    warm: list[int] = []
    if path.warm is not None:
        manager = new_manager(workload, quota_value=path.quota_value, pure=path.pure)
        warm = path.warm(manager)
    gc.collect()
    t0 = time.perf_counter()
    result = path.timed(manager)
    elapsed = time.perf_counter() - t0
    path.best_s = min(path.best_s, elapsed)
    if path.warm is not None:
        throttles = warm + result  # type: ignore[operator]
        if path.throttles is None:
            path.throttles = throttles
        elif throttles != path.throttles:
            _fail(f"{path.name}: repeats gave different throttle lists", path.throttles, throttles)


def _fail(what: str, expected: Sequence[int], got: Sequence[int]) -> NoReturn:
    index = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), None)
    if index is None:
        detail = f"lengths {len(expected)} != {len(got)}"
    else:
        detail = f"first difference at item {index}: expected {expected[index]}, got {got[index]}"
    print(f"core_quota: MISMATCH {what}; {detail}", file=sys.stderr)
    sys.exit(1)


def check_batches(workload: Workload, batch_sizes: Sequence[int]) -> None:
    """Each batch path equals one-by-one calls at the batch's ``now_ms`` (exit 1 otherwise), with the quota-value
    metric off and on; the throttles never depend on that metric."""
    items, w = workload.items, workload.warmup
    for size in batch_sizes:
        times = workload.times
        per_item = batch_times(times[:w], size) + batch_times(times[w:], size)
        expected = per_call(new_manager(workload), items, per_item)
        for quota_value in (False, True):
            manager = new_manager(workload, quota_value=quota_value)
            got = batched(manager, batches_of(items[:w], times[:w], size)) + batched(
                manager, batches_of(items[w:], times[w:], size)
            )
            if got != expected:
                _fail(
                    f"record_batch(size={size}, quota_value={quota_value}) vs record_and_get_throttle_time_ms",
                    expected,
                    got,
                )
        if size == max(batch_sizes):
            got = per_call(new_manager(workload, quota_value=True), items, per_item)
            if got != expected:
                _fail("per-call with the quota-value metric on vs off", expected, got)


def registry_size(workload: Workload, quota_value: bool) -> dict[str, float]:
    """The registry a manager holds once every entity has recorded (the warm-up), per (user, client id) pair:
    sensors, metrics, and bytes allocated by the manager and the warm-up (tracemalloc)."""
    items, times, w = workload.items, workload.times, workload.warmup
    warm_batches = batches_of(items[:w], times[:w], max(BATCH_SIZES))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        manager = new_manager(workload, quota_value=quota_value)
        batched(manager, warm_batches)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    allocated = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    entities = len(workload.pairs)
    return {
        "sensors": len(manager.metrics.sensors),
        "metrics": len(manager.metrics.metrics),
        "sensors_per_entity": round(len(manager.metrics.sensors) / entities, 3),
        "metrics_per_entity": round(len(manager.metrics.metrics) / entities, 3),
        "bytes_per_entity": round(allocated / entities),
    }


def run(workload: Workload, repeats: int) -> tuple[dict[str, Path], int]:
    items, times, w = workload.items, workload.times, workload.warmup
    warm_items, timed_items = items[:w], items[w:]
    warm_times, timed_times = times[:w], times[w:]
    paths = {
        "per_call": Path(
            "per_call",
            lambda m: per_call(m, warm_items, warm_times),
            lambda m: per_call(m, timed_items, timed_times),
        )
    }
    for size in BATCH_SIZES:
        warm_batches = batches_of(warm_items, warm_times, size)
        timed_batches = batches_of(timed_items, timed_times, size)
        paths[f"batch_{size}"] = Path(
            f"batch_{size}",
            lambda m, b=warm_batches: batched(m, b),
            lambda m, b=timed_batches: batched(m, b),
        )
    # the per-call and largest-batch paths again with KIP-786's quota-value metric on (quotaplane's default), in
    # the same repeats and on the same batches
    for name in ("per_call", f"batch_{max(BATCH_SIZES)}"):
        off = paths[name]
        paths[f"{name}_quota_value_on"] = Path(f"{name}_quota_value_on", off.warm, off.timed, quota_value=True)
    # the largest batches on the pure-Python path as well (the reference the compiled one is tested against)
    big = paths[f"batch_{max(BATCH_SIZES)}"]
    paths[f"batch_{max(BATCH_SIZES)}_pure"] = Path(f"batch_{max(BATCH_SIZES)}_pure", big.warm, big.timed, pure=True)
    paths["baseline"] = Path("baseline", None, lambda _m: dict_baseline(timed_items))
    dict_baseline(warm_items)  # warm the baseline loop too
    for _ in range(repeats):
        for path in paths.values():
            _timed_run(path, workload)
    return paths, len(timed_items)


def profile_batch(workload: Workload, size: int, top: int = 25) -> str:
    items, times, w = workload.items, workload.times, workload.warmup
    manager = new_manager(workload)
    batched(manager, batches_of(items[:w], times[:w], size))
    timed_batches = batches_of(items[w:], times[w:], size)
    profiler = cProfile.Profile()
    profiler.enable()
    batched(manager, timed_batches)
    profiler.disable()
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return stream.getvalue()


# --- report ---------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=300_000, help="timed records per path (default 300000)")
    parser.add_argument("--entities", type=int, default=10_000, help="(user, client id) pairs (default 10000)")
    parser.add_argument("--seed", type=int, default=20_231_114, help="random seed (default 20231114)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per path; the best counts (default 3)")
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--profile", action="store_true", help="also write a cProfile of batch_1000 to stderr")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.entities, args.repeats = min(args.records, 20_000), min(args.entities, 1_000), 1
    if args.records < max(BATCH_SIZES) or args.entities < 1 or args.repeats < 1:
        parser.error(f"need --records >= {max(BATCH_SIZES)}, --entities >= 1 and --repeats >= 1")

    workload = build_workload(args.entities, args.records, args.seed)
    check_batches(workload, BATCH_SIZES)
    paths, n = run(workload, args.repeats)
    rates = {name: n / path.best_s for name, path in paths.items()}
    big = max(BATCH_SIZES)
    if paths[f"batch_{big}_pure"].throttles != paths[f"batch_{big}"].throttles:
        _fail(
            f"batch_{big}: the compiled and pure paths gave different throttles",
            paths[f"batch_{big}_pure"].throttles or [],
            paths[f"batch_{big}"].throttles or [],
        )
    baseline = rates.pop("baseline")
    timed_slice = slice(workload.warmup, None)
    throttled = {
        name: sum(1 for t in path.throttles[timed_slice] if t > 0) / n
        for name, path in paths.items()
        if path.throttles is not None
    }
    manager = new_manager(workload)
    tag_shapes: Counter[str] = Counter()
    for user, client_id in workload.pairs:
        tags = manager.quota_metric(user, client_id).tags
        tag_shapes[f"({'U' if tags['user'] else '-'}, {'C' if tags['client-id'] else '-'})"] += 1

    report = {
        "benchmark": "core_quota",
        "workload": {
            "entities": len(workload.pairs),
            "quota_type": "PRODUCE",
            "num_quota_samples": NUM_QUOTA_SAMPLES,
            "quota_window_size_seconds": QUOTA_WINDOW_SIZE_SECONDS,
            "levels": workload.level_counts,
            "configured_quotas": len(workload.quotas),
            "entities_by_deciding_level": workload.resolved_levels,
            "entities_by_metric_tags": dict(tag_shapes),
            "records": n,
            "warmup_records": workload.warmup,
            "batch_sizes": list(BATCH_SIZES),
            "repeats": args.repeats,
            "seed": args.seed,
            "quick": args.quick,
            "clock": {
                "start_ms": START_MS,
                "records_per_ms": RECORDS_PER_MS,
                "simulated_ms": workload.times[-1] - workload.times[0],
            },
            "value_distribution": "log-normal bytes, median 2 KiB, sigma 1.4, clipped to [64, 1 MiB]",
            "traffic": "Zipf s=1.0 over entities; warm-up touches every entity once",
        },
        "results": {
            "per_call_records_per_s": round(rates["per_call"]),
            **{f"batch_{size}_records_per_s": round(rates[f"batch_{size}"]) for size in BATCH_SIZES},
            "baseline_dict_increments_per_s": round(baseline),
            "ratios": {name: round(baseline / rate, 2) for name, rate in rates.items()},
            "throttled_fraction": round(throttled["per_call"], 4),
            "throttled_fraction_by_path": {name: round(f, 4) for name, f in throttled.items()},
            "best_seconds": {name: round(path.best_s, 4) for name, path in paths.items()},
            "check": "record_batch == per-call throttle lists for every batch size",
            "compiled_core": {
                "note": "the batch paths above run compiled (quotaplane/quota/_record_compiled.pyx) when it is built; "
                "the pure-Python path on the same batches, same repeats",
                "built": compiled_core(),
                f"batch_{big}_records_per_s": round(rates[f"batch_{big}"]),
                f"batch_{big}_pure_records_per_s": round(rates[f"batch_{big}_pure"]),
                "compiled_over_pure": round(rates[f"batch_{big}"] / rates[f"batch_{big}_pure"], 3),
            },
            "quota_value_metric": {
                "note": "KIP-786 quota-value metric off (Kafka's default; the paths above) vs on (quotaplane's "
                "default), same run, same workload",
                f"batch_{big}_off_records_per_s": round(rates[f"batch_{big}"]),
                f"batch_{big}_on_records_per_s": round(rates[f"batch_{big}_quota_value_on"]),
                f"batch_{big}_on_over_off": round(rates[f"batch_{big}_quota_value_on"] / rates[f"batch_{big}"], 3),
                "per_call_off_records_per_s": round(rates["per_call"]),
                "per_call_on_records_per_s": round(rates["per_call_quota_value_on"]),
                "per_call_on_over_off": round(rates["per_call_quota_value_on"] / rates["per_call"], 3),
                "registry_off": registry_size(workload, False),
                "registry_on": registry_size(workload, True),
            },
        },
        "machine": machine(),
    }
    print(json.dumps(report, indent=2))
    if args.profile:
        print(profile_batch(workload, max(BATCH_SIZES)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
