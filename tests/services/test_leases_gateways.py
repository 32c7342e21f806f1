"""Leased budgets on 4 real gateways (issue 19): ``quotaplane.lease.quota.types=PRODUCE`` on a real Ray cluster,
each gateway a gRPC server of its own deciding within its lease, the owning shard's book splitting the quota.

The clock is simulated (the gateways' and the items' ``now_ms``), so the run is exact and repeatable: 4 clients
of one user, one per gateway, with skewed demand (55 / 25 / 15 / 5 % of twice the user's quota), each waiting
out the throttles it is answered (KIP-219), and the same schedule decided by one in-process Kafka core (exact
mode, one broker) for reference. Checked: what the gateways admit stays within the accuracy docs/scaling.md
states against the core, the live shares never add up to more than the quota, shares follow demand, most
decisions are made at the gateways, and leases end when the mode is switched off or a gateway stops renewing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import grpc
import pytest
import ray

from quotaplane.quota import ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from quotaplane.services.gateway import serve_gateway
from quotaplane.services.metrics import QuotaplaneCollector
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import quota_pb2 as pb
from quotaplane.v1 import quota_pb2_grpc

from .conftest import FakeClock, entity, wait_propagated

QUOTA = 100_000.0  # bytes/s of the user, across the fleet
SKEW = (0.55, 0.25, 0.15, 0.05)  # each gateway's part of the user's demand
OVERLOAD = 2.0
STEP_MS = 100
RENEW_MS = 500  # a renewal round every 500 ms of the simulated clock, called by the test
#: so long that the gateways' own renewal threads (every half lease period of real time) never run in a test:
#: the test renews at simulated times, and the run is the same every time
LEASE_MS = 600_000
WARMUP_MS = 12_000  # a whole quota window (11 s) and a second
RUN_MS = 30_000
Resource = admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource
Config = admin_pb.IncrementalAlterConfigsRequest.AlterableConfig


def set_broker_configs(admin, **configs: str | None) -> None:
    ops = [
        Config(name=name.replace("_", "."), config_operation=admin_pb.ALTER_CONFIG_OP_TYPE_SET, value=value)
        if value is not None
        else Config(name=name.replace("_", "."), config_operation=admin_pb.ALTER_CONFIG_OP_TYPE_DELETE)
        for name, value in configs.items()
    ]
    request = admin_pb.IncrementalAlterConfigsRequest(
        resources=[Resource(resource_type=admin_pb.RESOURCE_TYPE_BROKER, resource_name="", configs=ops)]
    )
    response = admin.IncrementalAlterConfigs(request)
    assert [r.error_code for r in response.responses] == [0], response


def set_user_quota(admin, user: str, bound: float) -> None:
    op = admin_pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=bound)
    entry = admin_pb.AlterClientQuotasRequest.EntryData(entity=entity(user, None), ops=[op])
    response = admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry]))
    assert [e.error_code for e in response.entries] == [0], response


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="module")
def gateways(cluster, admin, clock) -> Iterator[list]:
    """4 gateways with their own gRPC servers and the same simulated clock, leases on for PRODUCE."""
    set_broker_configs(admin, quotaplane_lease_quota_types="PRODUCE", quotaplane_lease_ms=str(LEASE_MS))
    started = [serve_gateway(cluster.controller, cluster.shards, clock=clock) for _ in range(4)]
    try:
        wait_propagated(cluster, *(gateway for _, _, gateway in started))
        _past_quiet_periods(cluster, admin, started[0], clock)
        yield started
    finally:
        for server, _, _ in started:
            server.stop(1).wait()


def _past_quiet_periods(cluster, admin, started: tuple, clock: FakeClock) -> None:
    """A shard's book grants nothing for a lease period from its first renewal (leases of an earlier
    incarnation may still be live): start every shard's, then let the simulated clock run past them."""
    _, port, gateway = started
    users = {}
    for n in range(64):  # a user with a quota on each shard
        users.setdefault(gateway.placement.owner(f"PRODUCE\x00primer-{n}\x00"), f"primer-{n}")
        if len(users) == len(cluster.shards):
            break
    for user in users.values():
        set_user_quota(admin, user, QUOTA)
    wait_propagated(cluster, gateway)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = quota_pb2_grpc.QuotaServiceStub(channel)
        for user in users.values():
            produce(stub, user, "c", 1.0, clock.now_ms)
        assert gateway.leases.renew() == 0  # quiet: no lease yet
        clock.advance(LEASE_MS)
        for user in users.values():
            produce(stub, user, "c", 1.0, clock.now_ms)
        assert gateway.leases.renew() == len(users)


def produce(stub, user: str, client_id: str, value: float, now_ms: int) -> int:
    item = pb.UsageItem(quota_type=pb.PRODUCE, user=user, client_id=client_id, value=value, now_ms=now_ms)
    answer = stub.RecordUsageBatch(pb.UsageBatch(batch_id=1, items=[item]), timeout=10)
    return answer.throttle_time_ms[0]


def run_skewed(user: str, decide, on_round, clock: FakeClock) -> float:
    """The 4 clients for ``RUN_MS`` of simulated time, ``decide(g, client_id, bytes, now) -> throttle ms``;
    ``on_round(now)`` every ``RENEW_MS``. The bytes admitted after the warm-up."""
    resume = [0] * len(SKEW)
    admitted = 0.0
    start = clock.now_ms
    for step in range(RUN_MS // STEP_MS):
        now = start + step * STEP_MS
        clock.now_ms = now
        if on_round is not None and step % (RENEW_MS // STEP_MS) == 0 and step:
            on_round(now)
        for g, part in enumerate(SKEW):
            if now < resume[g]:
                continue  # waiting out its throttle, as a KIP-219 client does
            size = OVERLOAD * QUOTA * part * STEP_MS / 1000
            throttle = decide(g, f"{user}-app-{g}", size, now)
            resume[g] = now + max(STEP_MS, throttle)
            if now - start >= WARMUP_MS:
                admitted += size
    return admitted


def test_four_gateways_decide_locally_within_shares_that_never_exceed_the_quota(cluster, admin, gateways, clock):
    user = "leaser"
    set_user_quota(admin, user, QUOTA)
    wait_propagated(cluster, *(gateway for _, _, gateway in gateways))
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for _, port, _ in gateways]
    stubs = [quota_pb2_grpc.QuotaServiceStub(channel) for channel in channels]
    key = f"PRODUCE\x00{user}\x00"
    sums: list[float] = []
    shares: list[list[float]] = []

    def renew_all(now: int) -> None:
        for _, _, gateway in gateways:
            gateway.leases.renew()
        held = [gw.leases._holders["PRODUCE"].lease(key, now) for _, _, gw in gateways]
        shares.append([lease.share if lease is not None else 0.0 for lease in held])
        sums.append(math.fsum(shares[-1]))

    try:
        leased = run_skewed(user, lambda g, c, size, now: produce(stubs[g], user, c, size, now), renew_all, clock)
    finally:
        for channel in channels:
            channel.close()
    renew_all(clock.now_ms)  # reports what was decided locally since the last round

    # the owning shard's sensor saw the whole traffic: what each gateway admitted locally reached it at the
    # renewals (shifted by up to a renewal round; and each sensor's samples start when it first recorded, so
    # the 11 samples of the shard's window and of a gateway's do not cover the same instants: up to one sample,
    # 1/11 of the window, apart, hence the margin; without the reports it would see only what it decided)
    _, _, first = gateways[0]
    owner = cluster.shards[first.placement.owner(key)]
    rows = ray.get(owner.metrics_snapshot.remote(clock.now_ms))
    [shard_rate] = [v for name, group, _, tags, v in rows if name == "byte-rate" and tags.get("user") == user]
    # the throttles the gateways answered were reported to the owning shard, as it records its own: the
    # throttle-time metric of the user's sensor (Kafka's tags: the quota is the user's) and the archive
    reported = sum(gw.leases.stats()["throttles_reported"] for _, _, gw in gateways)
    assert reported > 0 and ray.get(owner.info.remote())["leases"]["reported_throttles"] == reported
    assert any(name == "throttle-time" and tags.get("user") == user and v > 0 for name, _, _, tags, v in rows)
    total = math.fsum(gw.leases._holders["PRODUCE"].rate(key, clock.now_ms) for _, _, gw in gateways)
    assert shard_rate == pytest.approx(total, rel=0.15), (shard_rate, total)

    # the same schedule on one Kafka core: exact mode, one broker
    core = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    core.update_quota(ClientQuotaEntity(user=user), QUOTA)
    exact_clock = FakeClock(clock.now_ms + 60_000)
    exact = run_skewed(
        user, lambda g, c, size, now: core.record_and_get_throttle_time_ms(user, c, size, now), None, exact_clock
    )

    # the book's invariant, as the gateways hold their leases: never more than the quota between them
    assert max(sums) <= QUOTA * (1 + 1e-9), max(sums)
    # converged: every gateway holds a lease, in the order of its demand
    assert all(share > 0 for share in shares[-1])
    assert shares[-1] == sorted(shares[-1], reverse=True)
    # the accuracy docs/scaling.md states against exact mode: over-admission within 1 %, under within 10 %
    assert exact * 0.90 <= leased <= exact * 1.01, (leased, exact)
    print(f"admitted after the warm-up: leased {leased:.0f} B, exact {exact:.0f} B, shares {shares[-1]}")
    stats = [gateway.leases.stats() for _, _, gateway in gateways]
    local = sum(s["local_decisions"] for s in stats)
    shard = sum(s["shard_decisions"] for s in stats)
    assert local / (local + shard) > 0.8, stats
    assert all(s["renewal_failures"] == 0 for s in stats)
    # what the metrics endpoint of a process with these gateways exports
    collector = QuotaplaneCollector(cluster.controller, cluster.shards, gateways=[gw for _, _, gw in gateways])
    samples = {(s.name, tuple(s.labels.items())): s.value for m in collector.collect() for s in m.samples}
    assert samples[("quotaplane_lease_decisions_total", (("where", "local"),))] == local
    assert samples[("quotaplane_lease_decisions_total", (("where", "shard"),))] == shard
    assert samples[("quotaplane_leases", ())] == sum(s["leases"] for s in stats) >= 4


def test_leases_end_when_not_renewed_and_when_the_mode_is_switched_off(cluster, admin, gateways, clock):
    user = "expiring"
    set_user_quota(admin, user, QUOTA)
    wait_propagated(cluster, *(gateway for _, _, gateway in gateways))
    _, port, gateway = gateways[0]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = quota_pb2_grpc.QuotaServiceStub(channel)
        produce(stub, user, "c", 1000.0, clock.now_ms)  # no lease yet: the shard decides
        assert gateway.leases.renew() >= 1
        before = gateway.leases.stats()
        produce(stub, user, "c", 1000.0, clock.now_ms)
        assert gateway.leases.stats()["local_decisions"] == before["local_decisions"] + 1
        # a throttled fetch's bytes are taken back (Kafka's unrecordQuotaSensor): from this gateway's window too
        holder = gateway.leases._holders["PRODUCE"]
        key = f"PRODUCE\x00{user}\x00"
        held = holder.rate(key, clock.now_ms)
        item = pb.UsageItem(quota_type=pb.PRODUCE, user=user, client_id="c", value=1000.0, now_ms=clock.now_ms)
        stub.UnrecordUsage(pb.UsageBatch(batch_id=2, items=[item]), timeout=10)
        assert 0 < holder.rate(key, clock.now_ms) < held

        clock.advance(LEASE_MS)  # the lease has expired and was not renewed: back to the shard
        produce(stub, user, "c", 1000.0, clock.now_ms)
        after = gateway.leases.stats()
        assert after["local_decisions"] == before["local_decisions"] + 1
        assert after["shard_decisions"] == before["shard_decisions"] + 1

        assert gateway.leases.renew() >= 1
        set_broker_configs(admin, quotaplane_lease_quota_types=None)  # exact mode again
        wait_propagated(cluster, gateway)
        produce(stub, user, "c", 1000.0, clock.now_ms)
        off = gateway.leases.stats()
        assert off["local_decisions"] == after["local_decisions"] and off["leases"] == 0
        set_broker_configs(admin, quotaplane_lease_quota_types="PRODUCE")
        wait_propagated(cluster, *(gateway for _, _, gateway in gateways))
