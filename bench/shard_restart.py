"""Benchmark of a shard restart: the bytes a SIGKILLed shard over-admits, with and without usage checkpoints.

What it measures
    ``quotaplane up``'s pieces started by ``launch()`` (a private local Ray, the controller, one shard, the
    gateway in this process). One tenant (``producer_byte_rate`` = ``--quota`` B/s) sends PRODUCE usage through
    the gateway's ``RecordUsage`` stream at ``--overload`` times its quota, open loop: ``--item-bytes`` per
    item, one batch every ``--batch-ms`` stamped with the wall clock. After ``--warm-s`` (more than one quota
    window: the windows are full) the shard's process is SIGKILLed; Ray restarts it; the load goes on.

    ``over_admission_bound_bytes`` is what the gateway itself counted as lost by the restart (the usage it had
    sent after the restored checkpoint, all the window held without one; the metric
    ``quotaplane_over_admission_bound_bytes_total``): the bound the service exports, next to the measurement.

    *Admitted* bytes are those of items answered with throttle 0 (the tenant's requests a proxy in front of
    Kafka would let through at once). For each scenario, the bytes admitted in the ``--after-s`` seconds
    from the kill are compared with what one uninterrupted in-process Kafka core (``ClientQuotaManager``, the
    same quota) admits of the same records (every item the cluster answered, in the same order, at the same
    times): the difference is the restart's over-admission.

    Scenarios (same cluster, one tenant each): ``checkpoint`` (the shard's usage checkpoint, written every
    second to its data directory, is restored by the new incarnation) and ``no_checkpoint`` (the checkpoint
    file is deleted just before the kill: the new incarnation starts with empty windows, as before issue 19).
    ``restored_usage_age_ms`` is how old the restored windows were (None: nothing restored).

Output: one JSON object on stdout (workload, figures, machine). Run:
``.venv/bin/python bench/shard_restart.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from _machine import machine

PRODUCE = 1  # quota.proto's QuotaType value
CHECKPOINT_FILE = "usage-checkpoint.bin"  # quotaplane.actors' shard usage checkpoint, in the shard's data dir


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Load:
    """An open-loop tenant on one ``RecordUsage`` stream: a batch every ``batch_ms``, answers collected."""

    def __init__(self, stub: Any, pb: Any, user: str, args: argparse.Namespace) -> None:
        self.stub, self.pb, self.user, self.args = stub, pb, user, args
        self.per_batch = max(1, round(args.quota * args.overload * args.batch_ms / 1000 / args.item_bytes))
        #: batch id -> (item times, throttles or None: an error answer, or none before the stream broke)
        self.answers: dict[int, tuple[list[int], list[int] | None]] = {}
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
            sent: dict[int, list[int]] = {}
            try:
                for answer in self.stub.RecordUsage(self._requests(sent)):
                    times = sent.pop(answer.batch_id)
                    throttles = None if answer.HasField("error") else list(answer.throttle_time_ms)
                    self.answers[answer.batch_id] = (times, throttles)
            except grpc.RpcError:
                time.sleep(0.05)  # the stream broke (the shard restarting): open a new one
            for unanswered, times in list(sent.items()):
                self.answers[unanswered] = (times, None)

    def _requests(self, sent: dict[int, list[int]]) -> Iterator[Any]:
        """Batches due every ``batch_ms`` (open loop), each item stamped with the wall clock when sent."""
        due = time.monotonic()
        while not self._stop.is_set():
            due += self.args.batch_ms / 1000
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            t = _now_ms()
            self._batch_id += 1
            sent[self._batch_id] = [t] * self.per_batch
            yield self.pb.UsageBatch(
                batch_id=self._batch_id,
                items=[
                    self.pb.UsageItem(
                        quota_type=PRODUCE, user=self.user, client_id="c", value=self.args.item_bytes, now_ms=t
                    )
                ]
                * self.per_batch,
            )


def _core_admitted(
    answers: dict[int, tuple[list[int], list[int] | None]], user: str, quota: float, size: float
) -> list[tuple[list[int], list[int], list[int]]]:
    """The same records, in the stream's order (per-sensor order on a shard) and at the same times, through one
    uninterrupted Kafka core: ``(times, the cluster's throttles, the core's)`` per answered batch."""
    from quotaplane.quota import ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType

    core = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    core.update_quota(ClientQuotaEntity(user=user), quota)
    out = []
    for _, (times, throttles) in sorted(answers.items()):
        if throttles is None:
            continue  # never reached a shard: no record anywhere
        got = core.record_batch([(user, "c", size, t) for t in times], times[0])
        out.append((times, throttles, got))
    return out


def scenario(cluster: Any, admin: Any, stub: Any, pbs: Any, name: str, args: argparse.Namespace) -> dict[str, Any]:
    import ray

    admin_pb, events_pb, pb = pbs
    user = f"tenant-{name}"
    entry = admin_pb.AlterClientQuotasRequest.EntryData(
        entity=[events_pb.EntityData(entity_type="user", entity_name=user)],
        ops=[admin_pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=args.quota)],
    )
    response = admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry]))
    if any(e.error_code for e in response.entries):
        raise SystemExit(f"AlterClientQuotas refused: {response}")
    cluster.wait_caught_up()
    shard = cluster.shards["0"]
    load = Load(stub, pb, user, args)
    load.start()
    time.sleep(args.warm_s)
    if name == "no_checkpoint":
        (Path(cluster.data_dir) / "shards" / "0" / CHECKPOINT_FILE).unlink(missing_ok=True)
    bound_before = dict(cluster.gateway.stats()["over_admission_bound_bytes"])
    pid = ray.get(shard.info.remote())["pid"]
    killed_ms = _now_ms()
    os.kill(pid, signal.SIGKILL)
    while True:
        try:
            info = ray.get(shard.info.remote(), timeout=5)
            if info["pid"] != pid:
                break
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        time.sleep(0.05)
    serving_ms = _now_ms()
    remaining = killed_ms / 1000 + args.after_s + 1.0 - time.time()
    time.sleep(max(remaining, 0.0))
    load.stop()
    decided = _core_admitted(load.answers, user, args.quota, args.item_bytes)
    window = (killed_ms, killed_ms + int(args.after_s * 1000))
    cluster_bytes = core_bytes = 0.0
    for times, throttles, core in decided:
        for t, mine, theirs in zip(times, throttles, core, strict=True):
            if window[0] <= t < window[1]:
                cluster_bytes += args.item_bytes * (mine == 0)
                core_bytes += args.item_bytes * (theirs == 0)
    errors = sum(len(times) for times, throttles in load.answers.values() if throttles is None)
    checkpoint = info["usage_checkpoint"]
    bound_after = cluster.gateway.stats()["over_admission_bound_bytes"]
    bound = sum(bound_after[cause] - bound_before.get(cause, 0.0) for cause in bound_after)
    return {
        "tenant": user,
        "restart_ms": serving_ms - killed_ms,
        "restored_usage_age_ms": checkpoint["restored_age_ms"],
        "restored_sensors": checkpoint["restored_sensors"],
        "items_answered": sum(len(t) for t, _, _ in decided),
        "items_failed": errors,
        "admitted_bytes_after_kill": cluster_bytes,
        "core_admitted_bytes_after_kill": core_bytes,
        "over_admission_bytes": cluster_bytes - core_bytes,
        "over_admission_quota_seconds": round((cluster_bytes - core_bytes) / args.quota, 3),
        # what the gateway counted as lost by the restart (quotaplane_over_admission_bound_bytes): the bound
        "over_admission_bound_bytes": bound,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    import grpc
    import ray

    from quotaplane.services.launcher import launch
    from quotaplane.v1 import admin_pb2 as admin_pb
    from quotaplane.v1 import admin_pb2_grpc, quota_pb2_grpc
    from quotaplane.v1 import config_events_pb2 as events_pb
    from quotaplane.v1 import quota_pb2 as pb

    results: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="qp-bench-restart-") as tmp,
        # no warm standby (``quotaplane.actors._standby``): this measures what Ray's restart of the shard loses with
        # and without its checkpoint (a standby would take over, and hand its windows back to the restart)
        launch(
            Path(tmp) / "d",
            shards=1,
            admin_port=0,
            gateway_port=0,
            metrics_port=None,
            fsync=False,
            shard_standby=False,
        ) as cluster,
        grpc.insecure_channel(cluster.admin_address) as admin_channel,
        grpc.insecure_channel(cluster.gateway_address) as channel,
    ):
        admin = admin_pb2_grpc.AdminServiceStub(admin_channel)
        stub = quota_pb2_grpc.QuotaServiceStub(channel)
        for name in ("checkpoint", "no_checkpoint"):
            results[name] = scenario(cluster, admin, stub, (admin_pb, events_pb, pb), name, args)
        results["checkpoint_writer"] = ray.get(cluster.shards["0"].info.remote())["usage_checkpoint"]
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a shorter warm-up (12 s) and window after the kill")
    parser.add_argument("--quota", type=float, default=1_000_000.0, help="producer_byte_rate, B/s")
    parser.add_argument("--overload", type=float, default=2.0, help="the tenant's rate, times its quota")
    parser.add_argument("--item-bytes", type=float, default=10_000.0)
    parser.add_argument("--batch-ms", type=float, default=50.0)
    parser.add_argument("--warm-s", type=float, default=15.0, help="load before the kill (> one quota window)")
    parser.add_argument("--after-s", type=float, default=10.0, help="the window after the kill that is counted")
    args = parser.parse_args(argv)
    if args.quick:
        args.warm_s = min(args.warm_s, 12.0)
    # Ray's driver prints its workers' deaths (the SIGKILL is one) to stdout: the run's output goes to stderr,
    # the report alone to stdout
    report_out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    report = {
        "benchmark": "shard_restart",
        "workload": {
            "quota_bytes_per_s": args.quota,
            "overload": args.overload,
            "item_bytes": args.item_bytes,
            "batch_ms": args.batch_ms,
            "warm_s": args.warm_s,
            "after_s": args.after_s,
            "quota_window": "11 x 1 s (Kafka's defaults)",
            "checkpoint_interval_s": 1.0,
            "shard_standby": False,
            "admitted": "bytes of items answered with throttle 0, items stamped in [kill, kill + after_s)",
        },
        "figures": run(args),
        "machine": machine(),
    }
    report_out.write(json.dumps(report, indent=2) + "\n")
    report_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
