"""Benchmark of live resharding: over-admission and latency while the shard count goes 2 -> 4 -> 3 under overload.

What it measures
    ``quotaplane up``'s pieces started by ``launch()`` (a private local Ray, the controller, 2 shards, the gateway
    in this process). ``--tenants`` users share the ``<default>`` user quota (``--quota`` B/s each: every user
    has its own sensor) and send PRODUCE usage at ``--overload`` times it, open loop on one ``RecordUsage``
    stream: one batch every ``--batch-ms`` with one item per tenant, stamped with the wall clock. After
    ``--warm-s`` (more than one quota window: the windows are full) the AdminService reshards to 4 shards
    (``AlterShardCount``), ``--between-s`` later to 3, and the load goes on ``--after-s`` more.

    *Admitted* bytes are those of items answered with throttle 0 (open loop at twice the quota, every item is
    throttled once the windows are full: a usage window lost in a move would show as admitted bytes). Every
    answered item is replayed, in the stream's order and at its time, through one uninterrupted in-process
    Kafka core (``ClientQuotaManager``, the same quota): ``over_admission_bytes`` is what the cluster admitted
    beyond it, per phase (before, during and after the reshards) and for the worst tenant: the bound a reshard
    costs (0 when every moved key took its usage window along; ``decisions_equal_core``: every throttle time
    was the core's). ``reshards`` gives each reshard's wall time (request to the last hand-over done) and
    the quota sensors each receiving shard got. Batch latency (send to answer on the stream) per phase shows
    the pause a reshard causes.

    Baseline in the same run: ``core_admitted_bytes`` (the in-process core), the reference of every figure.

Output: one JSON object on stdout (workload, figures, machine). Run:
``.venv/bin/python bench/reshard.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from _machine import machine

PRODUCE = 1  # quota.proto's QuotaType value


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Load:
    """An open-loop stream of batches (one item per tenant) every ``batch_ms``; answers and latencies kept."""

    def __init__(self, stub: Any, pb: Any, tenants: list[str], args: argparse.Namespace) -> None:
        self.stub, self.pb, self.tenants, self.args = stub, pb, tenants, args
        #: batch id -> (time stamped, send monotonic s, answer monotonic s, throttles or None for an error)
        self.answers: dict[int, tuple[int, float, float, list[int] | None]] = {}
        self._sent: dict[int, tuple[int, float]] = {}
        self._batch_id = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import grpc

        while not self._stop.is_set():
            try:
                for answer in self.stub.RecordUsage(self._requests()):
                    t, sent = self._sent.pop(answer.batch_id)
                    throttles = None if answer.HasField("error") else list(answer.throttle_time_ms)
                    self.answers[answer.batch_id] = (t, sent, time.monotonic(), throttles)
            except grpc.RpcError:
                time.sleep(0.05)
            for batch_id, (t, sent) in list(self._sent.items()):
                self.answers[batch_id] = (t, sent, time.monotonic(), None)
            self._sent.clear()

    def _requests(self) -> Iterator[Any]:
        due = time.monotonic()
        item_bytes = self.args.quota * self.args.overload * self.args.batch_ms / 1000
        while not self._stop.is_set():
            due += self.args.batch_ms / 1000
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            t = _now_ms()
            self._batch_id += 1
            self._sent[self._batch_id] = (t, time.monotonic())
            yield self.pb.UsageBatch(
                batch_id=self._batch_id,
                items=[
                    self.pb.UsageItem(quota_type=PRODUCE, user=user, client_id="c", value=item_bytes, now_ms=t)
                    for user in self.tenants
                ],
            )


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import grpc

    from quotaplane.quota import DEFAULT, ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
    from quotaplane.services.launcher import launch
    from quotaplane.v1 import admin_pb2 as admin_pb
    from quotaplane.v1 import admin_pb2_grpc, quota_pb2_grpc
    from quotaplane.v1 import config_events_pb2 as events_pb
    from quotaplane.v1 import quota_pb2 as pb

    tenants = [f"tenant-{i}" for i in range(args.tenants)]
    marks: dict[str, int] = {}
    reshards = []
    with (
        tempfile.TemporaryDirectory(prefix="qp-bench-reshard-") as tmp,
        launch(Path(tmp) / "d", shards=2, admin_port=0, gateway_port=0, metrics_port=None, fsync=False) as cluster,
        grpc.insecure_channel(cluster.admin_address) as admin_channel,
        grpc.insecure_channel(cluster.gateway_address) as channel,
    ):
        admin = admin_pb2_grpc.AdminServiceStub(admin_channel)
        entry = admin_pb.AlterClientQuotasRequest.EntryData(
            entity=[events_pb.EntityData(entity_type="user")],
            ops=[admin_pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=args.quota)],
        )
        if any(
            e.error_code for e in admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry])).entries
        ):
            raise SystemExit("AlterClientQuotas refused")
        cluster.wait_caught_up()
        load = Load(quota_pb2_grpc.QuotaServiceStub(channel), pb, tenants, args)
        load.start()
        time.sleep(args.warm_s)
        for count, pause in ((4, args.between_s), (3, args.after_s)):
            marks[f"to_{count}_start"] = _now_ms()
            done = admin.AlterShardCount(admin_pb.AlterShardCountRequest(shard_count=count), timeout=300)
            marks[f"to_{count}_end"] = _now_ms()
            reshards.append(
                {
                    "from": done.previous_shard_count,
                    "to": done.shard_count,
                    "elapsed_ms": done.elapsed_ms,
                    "sensors_moved": sum(h.sensors_received for h in done.hand_overs),
                    "hand_over_ms": {h.shard_id: round(h.elapsed_ms, 1) for h in done.hand_overs},
                    "hand_over_failures": sum(h.failures for h in done.hand_overs),
                }
            )
            time.sleep(pause)
        load.stop()

    core = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    core.update_quota(ClientQuotaEntity(user=DEFAULT), args.quota)
    item_bytes = args.quota * args.overload * args.batch_ms / 1000
    phases = {
        "before": (0, marks["to_4_start"]),
        "during_reshards": (marks["to_4_start"], marks["to_3_end"]),
        "after": (marks["to_3_end"], 2**62),
    }
    figures: dict[str, Any] = {
        p: {"cluster_admitted_bytes": 0.0, "core_admitted_bytes": 0.0, "decisions_differing": 0, "latencies_ms": []}
        for p in phases
    }
    per_tenant = dict.fromkeys(tenants, 0.0)
    errors = 0
    for _, (t, sent, answered, throttles) in sorted(load.answers.items()):
        phase = next(name for name, (lo, hi) in phases.items() if lo <= t < hi)
        if throttles is None:
            errors += len(tenants)
            continue
        decided = core.record_batch([(user, "c", item_bytes, t) for user in tenants], t)
        figures[phase]["latencies_ms"].append((answered - sent) * 1000)
        for user, mine, theirs in zip(tenants, throttles, decided, strict=True):
            extra = item_bytes * ((mine == 0) - (theirs == 0))
            figures[phase]["decisions_differing"] += mine != theirs
            figures[phase]["cluster_admitted_bytes"] += item_bytes * (mine == 0)
            figures[phase]["core_admitted_bytes"] += item_bytes * (theirs == 0)
            per_tenant[user] += extra
    for phase in figures.values():
        latencies = phase.pop("latencies_ms")
        phase["over_admission_bytes"] = phase["cluster_admitted_bytes"] - phase["core_admitted_bytes"]
        phase["batches"] = len(latencies)
        phase["batch_p50_ms"] = _percentile(latencies, 0.5)
        phase["batch_p99_ms"] = _percentile(latencies, 0.99)
        phase["batch_max_ms"] = round(max(latencies), 2) if latencies else None
        phase["batch_mean_ms"] = round(statistics.fmean(latencies), 2) if latencies else None
    return {
        "phases": figures,
        "reshards": reshards,
        "over_admission_bytes_total": sum(p["over_admission_bytes"] for p in figures.values()),
        "over_admission_bytes_worst_tenant": max(per_tenant.values()),
        "over_admission_quota_seconds_worst_tenant": round(max(per_tenant.values()) / args.quota, 3),
        "items_failed": errors,
        "decisions_equal_core": all(p["decisions_differing"] == 0 for p in figures.values()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a shorter warm-up (12 s) and pauses (3 s)")
    parser.add_argument("--tenants", type=int, default=200, help="users, each with its own quota sensor")
    parser.add_argument("--quota", type=float, default=100_000.0, help="producer_byte_rate of each user, B/s")
    parser.add_argument("--overload", type=float, default=2.0, help="each tenant's rate, times its quota")
    parser.add_argument("--batch-ms", type=float, default=20.0)
    parser.add_argument("--warm-s", type=float, default=15.0, help="load before the first reshard (> one window)")
    parser.add_argument("--between-s", type=float, default=5.0, help="load between the two reshards")
    parser.add_argument("--after-s", type=float, default=5.0, help="load after the second reshard")
    args = parser.parse_args(argv)
    if args.quick:
        args.warm_s, args.between_s, args.after_s = min(args.warm_s, 12.0), 3.0, 3.0
    report_out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # Ray's driver prints to stdout: only the report goes there
    report = {
        "benchmark": "reshard",
        "workload": {
            "tenants": args.tenants,
            "quota_bytes_per_s": args.quota,
            "overload": args.overload,
            "batch_ms": args.batch_ms,
            "warm_s": args.warm_s,
            "between_s": args.between_s,
            "after_s": args.after_s,
            "shards": "2 -> 4 -> 3",
            "quota_window": "11 x 1 s (Kafka's defaults)",
            "admitted": "bytes of items answered with throttle 0; the baseline is the in-process core",
        },
        "figures": run(args),
        "machine": machine(),
    }
    report_out.write(json.dumps(report, indent=2) + "\n")
    report_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
