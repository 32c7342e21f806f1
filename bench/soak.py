"""Soak benchmark: ``quotaplane up``'s pieces under a steady half load for a bounded time, sampled for leaks.

What it measures
    ``launch()`` starts a private local Ray, the controller, ``--shards`` shards, the usage gateway and the
    Kafka frontend in this process (as ``up`` runs them). Three loads then run together for ``--minutes``
    (default 30; ``--quick``: 2):

    - **usage**: one spawned client process sends ``UsageBatch`` es of ``UsageColumns`` to the gateway on
      ``--streams`` long-lived ``RecordUsage`` bidi streams plus one lane of unary ``RecordUsageBatch``
      calls, paced open loop (latency from each batch's due time, so a late send is not hidden) at
      ``--decisions-per-s`` over all lanes; by default half of what a closed-loop burst of
      ``--burst-s`` measured first on the same cluster (as ``cluster_quota``'s ``half_load_paced``).
      The items are ``cluster_quota``'s workload (``--users`` users, a ``<default>`` quota and 5 % of
      the users with their own, so many decisions throttle), stamped by the gateway's clock.
    - **telemetry**: ``--kafka-clients`` simulated KIP-714 clients (``bench/frontend.py``'s) over real TCP
      to the Kafka frontend: each handshakes once (ApiVersions, GetTelemetrySubscriptions) and then pushes
      a librdkafka-sized payload every ``--interval-ms`` on the same connection, for the whole run.
    - **admin**: every ``--admin-every-s`` an ``AlterClientQuotas`` through the AdminService sets, changes or
      removes ``producer_byte_rate`` of one of 20 users in turn (a bounded set: the config log grows by one
      event per change, the number of quotas does not).

    Every ``--sample-s`` (default 10 s) it reads, from ``/proc``, the resident set size, open file
    descriptors and threads of this (the launching) process and of every Ray worker process of the shards
    and the controller (found by command line among this process's descendants; Ray's raylet and GCS are
    sampled too, for information), and the p50 / p99 latency, count and errors of the usage batches and of
    the pushes answered in that interval, and of the admin calls.

    **Flat.** The samples are cut in thirds; the first third is warm-up (imports, first windows, pools
    filling). A process's RSS is flat if its mean over the last third is < 5 % above its mean over the second
    third; its fds and threads are flat if the last third's highest value is at most the second third's
    highest + ``FD_THREAD_SLACK`` (pools that start a thread on demand). Latency p99 is flat if the last
    third's median is at most 1.5 x the second third's (the machine is shared, so latency is noisy). A
    least-squares slope per hour over the last two thirds is reported beside each. The verdict
    (``flat``) covers the launching process, the shards and the controller, and no errors anywhere.

Output: the full report (with every sample) as ``soak.json`` and one panel per series over time as
``soak.png`` in ``--out`` (default a new temporary directory); the report without the samples on stdout and
both paths on stderr. Run: ``.venv/bin/python bench/soak.py [--quick | --minutes M] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cpu import descendants, ray_process_role
from _machine import machine
from cluster_quota import percentile, quotas, split, workload
from frontend import _KafkaClients, _new_event_loop, _Pusher, _PushRun

SUBSCRIPTION = "soak"
FD_THREAD_SLACK = 2
RSS_GROWTH_LIMIT = 0.05
LATENCY_GROWTH_LIMIT = 1.5
ADMIN_USERS = 20
#: batches outstanding per lane before the client waits (the wait still counts: latency runs from the due time)
MAX_OUTSTANDING = 64
POOL_ITEMS = 200_000
JUDGED_ROLES = ("launcher", "shard", "controller")


# --- the usage client (its own process) ----------------------------------------------------------------------
def _usage_client(address: str, args: dict[str, Any], out: Any, stop_event: Any) -> None:
    """Lanes of ``UsageBatch`` es: ``streams`` RecordUsage streams and one RecordUsageBatch lane, each paced at
    ``rate / lanes`` items/s (closed loop, ``in_flight`` outstanding, if ``rate`` is None) until ``seconds``
    have passed or ``stop_event`` is set. Every second it puts ``("usage", latencies, items, errors)`` on
    ``out``; at the end ``("usage_done", total items, seconds)``."""
    import grpc

    from quotaplane.v1 import quota_pb2 as pb
    from quotaplane.v1 import quota_pb2_grpc

    items = workload(args["users"], POOL_ITEMS, args["seed"])
    lanes = args["streams"] + 1
    batch = args["batch"]
    pools: list[list[Any]] = []
    for part in split(items, lanes):
        pool = []
        for start in range(0, len(part) - batch + 1, batch):
            types, users, clients, values, _ = zip(*part[start : start + batch], strict=True)
            # no now_ms: the gateway stamps its own clock, so one pool serves a run of any length
            pool.append(pb.UsageColumns(quota_type=types, user=users, client_id=clients, value=values))
        pools.append(pool)
    rate = args.get("rate")
    interval = batch * lanes / rate if rate else 0.0
    deadline = time.monotonic() + args["seconds"]
    lock = threading.Lock()
    latencies: list[float] = []
    counts = Counter[str]()

    def answered(due: float, answer: Any) -> None:
        took = time.monotonic() - due
        with lock:
            if answer.HasField("error"):
                counts["errors"] += 1
            else:
                latencies.append(took)
                counts["items"] += len(answer.throttle_time_ms)

    def schedule(pool: list[Any], room: threading.Semaphore, sent: dict[int, float]) -> Iterator[Any]:
        first = time.monotonic()
        b = 0
        while not stop_event.is_set() and time.monotonic() < deadline:
            if interval:
                due = first + b * interval
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            room.acquire()
            sent[b] = due if interval else time.monotonic()
            yield pb.UsageBatch(batch_id=b, columns=pool[b % len(pool)])
            b += 1

    def stream_lane(pool: list[Any], channel: Any) -> None:
        stub = quota_pb2_grpc.QuotaServiceStub(channel)
        room = threading.Semaphore(args["in_flight"] if not interval else MAX_OUTSTANDING)
        sent: dict[int, float] = {}
        try:
            for answer in stub.RecordUsage(schedule(pool, room, sent)):
                room.release()
                answered(sent.pop(answer.batch_id), answer)
        except grpc.RpcError:
            with lock:
                counts["errors"] += 1

    def unary_lane(pool: list[Any], channel: Any) -> None:
        stub = quota_pb2_grpc.QuotaServiceStub(channel)
        room = threading.Semaphore(args["in_flight"] if not interval else MAX_OUTSTANDING)
        sent: dict[int, float] = {}

        def done(b: int, future: Any) -> None:
            room.release()
            try:
                answered(sent.pop(b), future.result())
            except grpc.RpcError:
                with lock:
                    counts["errors"] += 1

        for request in schedule(pool, room, sent):
            future = stub.RecordUsageBatch.future(request, timeout=60)
            future.add_done_callback(lambda f, b=request.batch_id: done(b, f))
        drain_until = time.monotonic() + 60
        while sent and time.monotonic() < drain_until:
            time.sleep(0.05)

    options = [("grpc.max_receive_message_length", 64 << 20)]
    channel = grpc.insecure_channel(address, options=options)
    threads = [threading.Thread(target=stream_lane, args=(pools[i], channel)) for i in range(args["streams"])]
    threads.append(threading.Thread(target=unary_lane, args=(pools[-1], channel)))
    started = time.monotonic()
    for t in threads:
        t.start()
    total = 0

    def flush() -> None:
        nonlocal total
        with lock:
            taken, latencies[:] = list(latencies), []
            got = dict(counts)
            counts.clear()
        total += got.get("items", 0)
        out.put(("usage", taken, got.get("items", 0), got.get("errors", 0)))

    while any(t.is_alive() for t in threads):
        time.sleep(1.0)
        flush()
    flush()
    channel.close()
    out.put(("usage_done", total, time.monotonic() - started))


# --- the Kafka clients (their own process) ---------------------------------------------------------------------
def _kafka_client(port: int, args: dict[str, Any], out: Any) -> None:
    """``bench/frontend.py``'s clients: handshake all, then push every interval until ``seconds`` have passed,
    putting ``("push", latencies, accepted, errors, codes)`` on ``out`` every second."""
    clients = _KafkaClients(port, args["clients"], args["seconds"], args["interval_ms"], 200, args["seed"])
    loop = _new_event_loop()
    shake = loop.run_until_complete(clients.handshakes())
    out.put(("handshakes", shake["connections"], dict(clients.codes)))
    loop.run_until_complete(_push_forever(clients, args["seconds"], out))
    loop.close()


async def _push_forever(clients: _KafkaClients, seconds: float, out: Any) -> None:
    from quotaplane.protocol import PushTelemetryRequest, encode_request

    rng = random.Random(clients.seed)
    loop = asyncio.get_running_loop()
    run = _PushRun(loop, time.perf_counter() + seconds, clients.interval_ms / 1000, clients.codes)
    for _, writer, sub in clients.connections:
        request = PushTelemetryRequest(sub.client_instance_id, sub.subscription_id, False, 4, clients.body)
        frame = bytearray(encode_request(72, 0, 3, request, client_id="qp-soak"))
        pusher = _Pusher(run, writer.transport, frame)
        writer.transport.set_protocol(pusher)
        loop.call_later(rng.uniform(0, run.interval_s), pusher.push)
    reported: Counter[str] = Counter(run.codes)  # the handshakes' codes: reported with them

    def flush() -> None:
        taken, run.latencies = run.latencies, []
        codes = Counter(run.codes)
        delta = codes - reported
        reported.update(delta)
        errors = sum(n for code, n in delta.items() if code != "72:0")
        out.put(("push", taken, delta.get("72:0", 0), errors, dict(delta)))

    while run.running and not run.done.done():
        await asyncio.sleep(1.0)
        flush()
    flush()
    for _, writer, _ in clients.connections:
        writer.close()


# --- process sampling from /proc --------------------------------------------------------------------------------
def _status(pid: int) -> dict[str, int] | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError):
        return None
    return {
        "rss_kb": int(fields["VmRSS"].split()[0]) if "VmRSS" in fields else 0,
        "fds": fds,
        "threads": int(fields["Threads"]),
    }


def find_processes() -> dict[str, int]:
    """Name -> pid of the processes sampled: ``launcher`` (this one), ``shard-i`` (by pid order),
    ``controller``, ``raylet``, ``gcs_server``."""
    found: dict[str, list[int]] = {}
    for pid in descendants():
        role = ray_process_role(pid)
        if role is not None:
            found.setdefault(role, []).append(int(pid))
    out = {"launcher": os.getpid()}
    for role, pids in sorted(found.items()):
        pids.sort()
        if role == "shard":
            out.update({f"shard-{i}": pid for i, pid in enumerate(pids)})
        else:
            out[role] = pids[0]
    return out


def _judged(name: str) -> bool:
    return name.split("-", 1)[0] in JUDGED_ROLES


# --- trends ------------------------------------------------------------------------------------------------------
def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _median(values: Sequence[float]) -> float | None:
    return percentile(values, 0.5) if values else None


def _slope_per_hour(times: Sequence[float], values: Sequence[float]) -> float | None:
    """Least-squares slope, units per hour."""
    if len(values) < 2:
        return None
    mt, mv = sum(times) / len(times), sum(values) / len(values)
    den = sum((t - mt) ** 2 for t in times)
    return round(sum((t - mt) * (v - mv) for t, v in zip(times, values, strict=True)) / den * 3600, 3) if den else None


def thirds(n: int) -> tuple[range, range, range]:
    k = n // 3
    return range(0, k), range(k, 2 * k), range(2 * k, n)


def trend(times: Sequence[float], values: Sequence[float | None], kind: str) -> dict[str, Any]:
    """One series' trend and whether it is flat (the criterion by ``kind``: rss, count, latency)."""
    first, second, last = thirds(len(values))

    def part(r: range) -> list[float]:
        return [v for i in r if (v := values[i]) is not None]

    a, b, c = part(first), part(second), part(last)
    tail = [(times[i], v) for i in [*second, *last] if (v := values[i]) is not None]
    out: dict[str, Any] = {
        "first_third_mean": _round(_mean(a)),
        "second_third_mean": _round(_mean(b)),
        "last_third_mean": _round(_mean(c)),
        "first_to_last_pct": _pct(_mean(a), _mean(c)),
        "second_to_last_pct": _pct(_mean(b), _mean(c)),
        "slope_per_hour_after_warmup": _slope_per_hour([t for t, _ in tail], [v for _, v in tail]),
    }
    if not b or not c:
        out["flat"] = None
    elif kind == "rss":
        out["flat"] = _mean(c) < _mean(b) * (1 + RSS_GROWTH_LIMIT)
    elif kind == "count":
        out["second_third_max"], out["last_third_max"] = max(b), max(c)
        out["flat"] = max(c) <= max(b) + FD_THREAD_SLACK
    else:
        out["second_third_median"], out["last_third_median"] = _round(_median(b)), _round(_median(c))
        out["flat"] = _median(c) <= _median(b) * LATENCY_GROWTH_LIMIT
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _pct(before: float | None, after: float | None) -> float | None:
    return round((after - before) / before * 100, 2) if before and after is not None else None


# --- the run -------------------------------------------------------------------------------------------------------
def _alter(admin: Any, admin_pb: Any, events_pb: Any, user: str | None, key: str, value: float | None) -> list[str]:
    entity = (
        events_pb.EntityData(entity_type="user")
        if user is None
        else events_pb.EntityData(entity_type="user", entity_name=user)
    )
    OpData = admin_pb.AlterClientQuotasRequest.OpData
    op = OpData(key=key) if value is None else OpData(key=key, value=value)  # no value: remove the key
    entry = admin_pb.AlterClientQuotasRequest.EntryData(entity=[entity], ops=[op])
    response = admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry]), timeout=30)
    return [e.error_message for e in response.entries if e.error_code]


class _AdminChanges(threading.Thread):
    """Every ``every_s``: set, change or remove ``producer_byte_rate`` of user ``soak-admin-k`` (k cycling over 20
    users), recording each call's latency and refusals."""

    def __init__(self, address: str, every_s: float) -> None:
        super().__init__(name="soak-admin", daemon=True)
        self.address, self.every_s = address, every_s
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.errors = 0
        self.calls = 0

    def take(self) -> tuple[list[float], int, int]:
        with self.lock:
            out = (self.latencies, self.calls, self.errors)
            self.latencies, self.calls, self.errors = [], 0, 0
        return out

    def run(self) -> None:
        import grpc

        from quotaplane.v1 import admin_pb2 as admin_pb
        from quotaplane.v1 import admin_pb2_grpc
        from quotaplane.v1 import config_events_pb2 as events_pb

        with grpc.insecure_channel(self.address) as channel:
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            n = 0
            while not self.stopping.wait(self.every_s):
                user = f"soak-admin-{n % ADMIN_USERS}"
                # rounds of 20: set, change, remove, set, ... so the number of quotas stays bounded
                value = None if (n // ADMIN_USERS) % 3 == 2 else 50_000.0 + 1_000.0 * (n % 97)
                began = time.monotonic()
                try:
                    refused = _alter(admin, admin_pb, events_pb, user, "producer_byte_rate", value)
                except grpc.RpcError:
                    refused = ["rpc error"]
                took = time.monotonic() - began
                with self.lock:
                    self.calls += 1
                    self.errors += bool(refused)
                    if not refused:
                        self.latencies.append(took)
                n += 1


def _ms(values: Sequence[float], q: float) -> float | None:
    return round(percentile(values, q) * 1000, 2) if values else None


def _set_up(cluster: Any, args: argparse.Namespace) -> None:
    import grpc

    from quotaplane.v1 import admin_pb2 as admin_pb
    from quotaplane.v1 import admin_pb2_grpc
    from quotaplane.v1 import config_events_pb2 as events_pb

    with grpc.insecure_channel(cluster.admin_address) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        for key, user, bound in quotas(args.users):
            refused = _alter(admin, admin_pb, events_pb, user, key, bound)
            if refused:
                raise SystemExit(f"AlterClientQuotas refused: {refused[:3]}")
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
        admin.IncrementalAlterConfigs(admin_pb.IncrementalAlterConfigsRequest(resources=[resource]))
    cluster.wait_caught_up(timeout_s=60)


def _usage_args(args: argparse.Namespace, seconds: float, rate: float | None) -> dict[str, Any]:
    return {
        "users": args.users,
        "seed": args.seed,
        "streams": args.streams,
        "batch": args.batch,
        "in_flight": args.in_flight,
        "seconds": seconds,
        "rate": rate,
    }


def measure_burst(context: Any, address: str, args: argparse.Namespace) -> float:
    """Decisions/s of a closed-loop burst of ``--burst-s`` (its first second not counted)."""
    out, stop = context.Queue(), context.Event()
    process = context.Process(target=_usage_client, args=(address, _usage_args(args, args.burst_s, None), out, stop))
    process.start()
    per_second: list[int] = []
    while True:
        message = out.get(timeout=600)
        if message[0] == "usage":
            per_second.append(message[2])
        else:
            break
    process.join(30)
    steady = per_second[1:] or per_second
    return sum(steady) / len(steady) if steady else 0.0


def run(args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    from quotaplane.services.launcher import launch

    seconds = args.minutes * 60
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="qp-soak-") as root:
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
            _set_up(cluster, args)
            burst = None
            rate = args.decisions_per_s
            if rate is None:
                burst = measure_burst(context, cluster.gateway_address, args)
                rate = burst / 2
            out, stop = context.Queue(), context.Event()
            kafka_args = {
                "clients": args.kafka_clients,
                "seconds": seconds + 5,
                "interval_ms": args.interval_ms,
                "seed": args.seed,
            }
            kafka = context.Process(target=_kafka_client, args=(cluster.frontend_port, kafka_args, out))
            kafka.start()
            message = out.get(timeout=300)  # the handshakes are done: the steady state starts
            handshakes = {"connections": message[1], "codes": message[2]}
            usage = context.Process(
                target=_usage_client,
                args=(cluster.gateway_address, _usage_args(args, seconds + 5, rate), out, stop),
            )
            usage.start()
            admin = _AdminChanges(cluster.admin_address, args.admin_every_s)
            admin.start()
            samples = sample_loop(out, seconds, args.sample_s, admin, cluster)
            admin.stopping.set()
            stop.set()
            usage_done = _drain_until(out, "usage_done", 90)
            usage.join(30)
            kafka.join(30)
            for process in (usage, kafka):
                if process.is_alive():
                    process.kill()
            admin.join(30)
            frontend = cluster.frontend.stats.snapshot()
            gateway = cluster.gateway.stats()
        finally:
            cluster.close()
    return {
        "burst_decisions_per_s": round(burst) if burst else None,
        "offered_decisions_per_s": round(rate),
        "handshakes": handshakes,
        "usage_done": usage_done,
        "frontend_stats": {k: v for k, v in frontend.items() if isinstance(v, int | float)},
        "gateway_reroutes": gateway["reroutes"],
        # Ray actor calls to the shards (each one a task event that Ray's GCS keeps, up to its own bound)
        "gateway_shard_calls": sum(s["batches"] for s in gateway["shards"].values()),
        "samples": samples,
    }


def _drain_until(out: Any, kind: str, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            message = out.get(timeout=max(0.1, deadline - time.monotonic()))
        except Exception:  # queue.Empty
            return None
        if message[0] == kind:
            return {"items": message[1], "seconds": round(message[2], 1)}
    return None


def sample_loop(out: Any, seconds: float, sample_s: float, admin: _AdminChanges, cluster: Any) -> list[dict]:
    """Every ``sample_s`` until ``seconds`` have passed: the processes' figures and the interval's latencies."""
    import queue

    started = time.monotonic()
    samples: list[dict] = []
    next_at = started + sample_s
    while True:
        usage_lat: list[float] = []
        push_lat: list[float] = []
        c: Counter[str] = Counter()
        codes: Counter[str] = Counter()
        while True:
            try:
                message = out.get(timeout=max(0.0, next_at - time.monotonic()))
            except queue.Empty:
                break
            if message[0] == "usage":
                usage_lat += message[1]
                c["usage_items"] += message[2]
                c["usage_errors"] += message[3]
            elif message[0] == "push":
                push_lat += message[1]
                c["pushes_accepted"] += message[2]
                c["push_errors"] += message[3]
                codes.update(message[4])
            if time.monotonic() >= next_at:
                break
        now = time.monotonic()
        admin_lat, admin_calls, admin_errors = admin.take()
        processes = {}
        for name, pid in find_processes().items():
            figures = _status(pid)
            if figures is not None:
                processes[name] = {"pid": pid, **figures}
        interval = now - (samples[-1]["t_s"] + started if samples else started)
        samples.append(
            {
                "t_s": round(now - started, 2),
                "processes": processes,
                "usage": {
                    "batches": len(usage_lat),
                    "decisions_per_s": round(c["usage_items"] / interval) if interval > 0 else None,
                    "p50_ms": _ms(usage_lat, 0.5),
                    "p99_ms": _ms(usage_lat, 0.99),
                    "errors": c["usage_errors"],
                },
                "push": {
                    "pushes": len(push_lat),
                    "accepted_per_s": round(c["pushes_accepted"] / interval, 1) if interval > 0 else None,
                    "p50_ms": _ms(push_lat, 0.5),
                    "p99_ms": _ms(push_lat, 0.99),
                    "errors": c["push_errors"],
                    "codes": dict(codes),
                },
                "admin": {"calls": admin_calls, "p50_ms": _ms(admin_lat, 0.5), "errors": admin_errors},
                "frontend_connections_open": cluster.frontend.stats.connections_open,
                "frontend_unexpected_errors": cluster.frontend.stats.unexpected_errors,  # so far
            }
        )
        print(_progress_line(samples[-1]), file=sys.stderr, flush=True)
        if now - started >= seconds - sample_s / 2:
            return samples
        next_at += sample_s


def _progress_line(sample: dict) -> str:
    rss = " ".join(f"{n}={p['rss_kb'] // 1024}M/{p['fds']}fd/{p['threads']}t" for n, p in sample["processes"].items())
    u, p = sample["usage"], sample["push"]
    return (
        f"[soak {sample['t_s']:7.1f}s] usage {u['decisions_per_s']}/s p99 {u['p99_ms']} ms err {u['errors']}; "
        f"push {p['accepted_per_s']}/s p99 {p['p99_ms']} ms err {p['errors']}; {rss}"
    )


def summarize(samples: list[dict]) -> dict[str, Any]:
    """Per-series trend and flatness; ``flat``: every judged process and latency series flat and no errors."""
    times = [s["t_s"] for s in samples]
    names = sorted({n for s in samples for n in s["processes"]})
    series: dict[str, Any] = {}
    restarts: dict[str, list[int]] = {}
    for name in names:
        pids = sorted({s["processes"][name]["pid"] for s in samples if name in s["processes"]})
        if len(pids) > 1:
            restarts[name] = pids
        for metric, kind in (("rss_kb", "rss"), ("fds", "count"), ("threads", "count")):
            values = [s["processes"].get(name, {}).get(metric) for s in samples]
            series[f"{name}.{metric}"] = {"judged": _judged(name), **trend(times, values, kind)}
    for lane in ("usage", "push"):
        for q in ("p50_ms", "p99_ms"):
            values = [s[lane][q] for s in samples]
            series[f"{lane}.{q}"] = {"judged": q == "p99_ms", **trend(times, values, "latency")}
    errors = {
        "usage": sum(s["usage"]["errors"] for s in samples),
        "push": sum(s["push"]["errors"] for s in samples),
        "admin": sum(s["admin"]["errors"] for s in samples),
        "frontend_unexpected": samples[-1]["frontend_unexpected_errors"] if samples else 0,
    }
    not_flat = sorted(k for k, v in series.items() if v["judged"] and v["flat"] is False)
    undecided = sorted(k for k, v in series.items() if v["judged"] and v["flat"] is None)
    return {
        "criterion": (
            f"samples cut in thirds, the first is warm-up; RSS flat: last-third mean < {RSS_GROWTH_LIMIT:.0%} above "
            f"the second third's; fds / threads flat: last-third max <= second-third max + {FD_THREAD_SLACK}; latency "
            f"p99 flat: last-third median <= {LATENCY_GROWTH_LIMIT} x the second third's; judged: the launching "
            "process, the shards, the controller (raylet / gcs_server for information), latency p99, no errors"
        ),
        "flat": not not_flat and not undecided and not any(errors.values()) and not restarts,
        "not_flat": not_flat,
        "undecided": undecided,
        "errors": errors,
        "restarts": restarts,
        "series": series,
    }


def plot(samples: list[dict], path: Path) -> None:
    """One panel per series over time: RSS, fds, threads per process; usage and push latency; throughput; errors."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s["t_s"] / 60 for s in samples]
    names = sorted({n for s in samples for n in s["processes"]})
    panels: list[tuple[str, dict[str, list[Any]]]] = []
    for metric, label, scale in (("rss_kb", "RSS (MB)", 1 / 1024), ("fds", "open fds", 1), ("threads", "threads", 1)):
        lines = {}
        for name in names:
            lines[name] = [s["processes"][name][metric] * scale if name in s["processes"] else None for s in samples]
        panels.append((label, lines))
    panels.append(("usage batch latency (ms)", {q: [s["usage"][q] for s in samples] for q in ("p50_ms", "p99_ms")}))
    panels.append(("push latency (ms)", {q: [s["push"][q] for s in samples] for q in ("p50_ms", "p99_ms")}))
    panels.append(("usage decisions/s", {"decisions/s": [s["usage"]["decisions_per_s"] for s in samples]}))
    panels.append(("pushes accepted/s", {"pushes/s": [s["push"]["accepted_per_s"] for s in samples]}))
    panels.append(
        (
            "errors per interval",
            {lane: [s[lane]["errors"] for s in samples] for lane in ("usage", "push", "admin")},
        )
    )
    figure, axes = plt.subplots(len(panels), 1, figsize=(10, 2.6 * len(panels)), sharex=True)
    for axis, (label, lines) in zip(axes, panels, strict=True):
        for name, values in lines.items():
            axis.plot(minutes, [float("nan") if v is None else v for v in values], label=name, linewidth=1)
        axis.set_ylabel(label)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7, loc="upper left", ncol=4)
    axes[-1].set_xlabel("minutes")
    figure.suptitle("quotaplane soak")
    figure.tight_layout(rect=(0, 0, 1, 0.98))  # room for the title above the first panel's legend
    figure.savefig(path, dpi=90)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the steady phase")
    parser.add_argument("--quick", action="store_true", help="2 minutes")
    parser.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--decisions-per-s", type=float, default=None, help="usage load (default: half the burst)")
    parser.add_argument("--burst-s", type=float, default=10.0, help="the closed-loop burst measuring the machine")
    parser.add_argument("--kafka-clients", type=int, default=300, help="KIP-714 clients on the Kafka frontend")
    parser.add_argument("--interval-ms", type=int, default=1000, help="the subscription's push interval")
    parser.add_argument("--admin-every-s", type=float, default=3.0, help="seconds between quota changes")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--streams", type=int, default=2, help="RecordUsage streams (plus one RecordUsageBatch lane)")
    parser.add_argument("--batch", type=int, default=1000, help="items per UsageBatch")
    parser.add_argument("--in-flight", type=int, default=4, help="batches outstanding per lane in the burst")
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=None, help="directory for soak.json and soak.png (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.quick:
        args.minutes = min(args.minutes, 2.0)
    out_dir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="qp-soak-out-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    result = run(args, out_dir)
    samples = result.pop("samples")
    summary = summarize(samples)
    json_path, png_path = out_dir / "soak.json", out_dir / "soak.png"
    report = {
        "benchmark": "soak",
        "workload": {
            "minutes": args.minutes,
            "sample_s": args.sample_s,
            "shards": args.shards,
            "usage": {
                "streams": args.streams,
                "unary_lanes": 1,
                "batch_items": args.batch,
                "users": args.users,
                "quotas": len(quotas(args.users)),
                "offered_decisions_per_s": result["offered_decisions_per_s"],
                "burst_decisions_per_s": result["burst_decisions_per_s"],
                "wire": "columns",
            },
            "telemetry": {"kafka_clients": args.kafka_clients, "push_interval_ms": args.interval_ms},
            "admin": {"every_s": args.admin_every_s, "users_cycled": ADMIN_USERS},
            "seed": args.seed,
            "quick": args.quick,
        },
        "run": {k: v for k, v in result.items() if k not in ("offered_decisions_per_s", "burst_decisions_per_s")},
        "summary": summary,
        "outputs": {"json": str(json_path), "png": str(png_path)},
        "machine": machine(),
        "samples": samples,
    }
    json_path.write_text(json.dumps(report, indent=1))
    plot(samples, png_path)
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=2))
    print(f"soak: report {json_path}, plot {png_path}", file=sys.stderr)
    return 0 if summary["flat"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
