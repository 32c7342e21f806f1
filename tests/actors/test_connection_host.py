"""ConnectionHost: one Kafka ``ConnectionQuotas`` per node id, built from the config log and kept in step.

No Ray: a real ConfigStore (the controller's core) appends the configs and tells the host each delta, as
the shard's follower does. Cases are ConnectionQuotasTest's and SocketServerTest's (apache/kafka), told
through the host's items, with Kafka's numbers; one test checks a random workload against the core fed
the same configs and calls directly.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quotaplane.actors._connection_host import NODE_METRIC_TAG, ConnectionHost
from quotaplane.config import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    OpType,
    changes_between,
)
from quotaplane.quota import ConnectionQuotas, ConnectionQuotasConfig

T0 = 1_700_000_000_000
EXTERNAL, ADMIN, REPLICATION = "EXTERNAL", "ADMIN", "REPLICATION"
#: Each listener's client address, as in ConnectionQuotasTest.
LISTENER_IPS = {EXTERNAL: "192.168.1.1", ADMIN: "192.168.1.2", REPLICATION: "192.168.1.3"}
KNOWN_HOST = "192.168.10.0"
BROKER = ConfigResourceType.BROKER


def no_dns(host: str) -> str:
    raise OSError(f"no DNS in tests: {host}")


class Cluster:
    """The log's single writer and one shard's connection host, told every delta in order."""

    def __init__(self, store: ConfigStore) -> None:
        self.store = store
        self.host = ConnectionHost(lambda: store.image, resolver=no_dns)
        store.subscribe(lambda delta: self.host.apply(delta, store.image))

    def set(self, name: str, value: str | None, node: str = "") -> None:
        op = AlterConfigOp(name, OpType.SET if value is not None else OpType.DELETE, value)
        results = self.store.incremental_alter_configs([(ConfigResource(BROKER, node), [op])], now_ms=T0)
        assert all(r.ok for r in results), results

    def ip_rate(self, ip: str | None, rate: float | None) -> None:
        results = self.store.alter_client_quotas(
            [ClientQuotaAlteration({"ip": ip}, [("connection_creation_rate", rate)])], now_ms=T0
        )
        assert all(r.ok for r in results), results

    def admit(
        self, listener: str, ip: str, now_ms: int, *, node: int = 0, attempt: int | None = None
    ) -> tuple[Any, ...]:
        return self.host.serve([("admit", node, listener, ip, attempt, now_ms)])[0]

    def admit_n(self, listener: str, ip: str, n: int, now_ms: int, *, node: int = 0) -> None:
        """n connections in one batch, all of which must be admitted."""
        results = self.host.serve([("admit", node, listener, ip, None, now_ms)] * n)
        assert [r[0] for r in results] == ["ADMIT"] * n, results

    def release(self, listener: str, ip: str, now_ms: int, *, node: int = 0, n: int = 1) -> list[bool]:
        return [r[0] for r in self.host.serve([("release", node, listener, ip, now_ms)] * n)]

    def count(self, ip: str, node: int = 0) -> int:
        quotas = self.host.quotas(node)
        return 0 if quotas is None else quotas.get(ip)

    def metric(self, name: str, now_ms: int, node: int = 0, **tags: str) -> float:
        want = {**tags, NODE_METRIC_TAG: str(node)}
        rows = [r for r in self.host.metrics_snapshot(now_ms) if r[0] == name and r[3] == want]
        assert len(rows) == 1, (name, want, rows)
        return rows[0][4]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    store = ConfigStore.open(tmp_path / "log", fsync=False)
    try:
        yield Cluster(store)
    finally:
        store.close()


# === ConnectionQuotasTest, through the host ===============================================================
def test_max_connections_per_ip(cluster: Cluster) -> None:
    """ConnectionQuotasTest.testMaxConnectionsPerIp."""
    cluster.set("max.connections.per.ip", "17")
    ip = LISTENER_IPS[EXTERNAL]
    cluster.admit_n(EXTERNAL, ip, 17, T0)
    assert cluster.count(ip) == 17

    # counted, then refused: the caller closes the socket and releases it (Kafka's acceptor does)
    for _ in range(2):
        assert cluster.admit(EXTERNAL, ip, T0) == ("REJECT", 0, "max.connections.per.ip", 17, 0, True)
    assert cluster.count(ip) == 19

    # another IP on the same listener is not affected
    cluster.admit_n(EXTERNAL, KNOWN_HOST, 17, T0)

    # release the two refused ones and two more: room for two
    assert cluster.release(EXTERNAL, ip, T0, n=4) == [True] * 4
    assert cluster.count(ip) == 15
    cluster.admit_n(EXTERNAL, ip, 2, T0)
    assert cluster.count(ip) == 17


def test_max_connections_per_ip_overrides(cluster: Cluster) -> None:
    """SocketServerTest.testMaxConnectionsPerIpOverrides / testZeroMaxConnectionsPerIp: an override replaces
    the default for its address; an IPv6 address is one address however it is written."""
    cluster.set("max.connections.per.ip.overrides", "192.168.1.1:5,::1:1")
    cluster.set("max.connections.per.ip", "0")  # zero is allowed once overrides exist
    cluster.admit_n(EXTERNAL, "192.168.1.1", 5, T0)
    assert cluster.admit(EXTERNAL, "192.168.1.1", T0)[:4] == ("REJECT", 0, "max.connections.per.ip", 5)
    assert cluster.admit(EXTERNAL, "::1", T0)[0] == "ADMIT"
    assert cluster.admit(EXTERNAL, "0:0:0:0:0:0:0:1", T0)[:4] == ("REJECT", 0, "max.connections.per.ip", 1)
    assert cluster.count("::1") == 2
    # any other address gets the default of zero
    assert cluster.admit(EXTERNAL, "10.1.2.3", T0)[:4] == ("REJECT", 0, "max.connections.per.ip", 0)


def test_max_broker_wide_connection_limit(cluster: Cluster) -> None:
    """ConnectionQuotasTest.testMaxBrokerWideConnectionLimit: a caller waits for a slot (THROTTLE with no
    delay), is admitted after a release; quotaplane protects no listener, so REPLICATION waits too."""
    cluster.set("max.connections", "800")
    ip = LISTENER_IPS[EXTERNAL]
    cluster.admit_n(EXTERNAL, ip, 800, T0)
    assert cluster.count(ip) == 800
    assert not cluster.host.quotas(0).max_connections_exceeded(EXTERNAL)

    waiting = cluster.admit(EXTERNAL, ip, T0 + 10)
    decision, throttle_ms, limit, maximum, attempt, counted = waiting
    assert (decision, throttle_ms, limit, maximum, counted) == ("THROTTLE", 0, "max.connections", 800, False)
    assert attempt > 0
    # asking again while no slot is free: the same attempt, still waiting, recorded once
    assert cluster.admit(EXTERNAL, ip, T0 + 20, attempt=attempt) == waiting
    assert cluster.count(ip) == 800

    # a release frees a slot: the waiting connection gets it
    assert cluster.release(EXTERNAL, ip, T0 + 30) == [True]
    assert cluster.admit(EXTERNAL, ip, T0 + 40, attempt=attempt) == ("ADMIT", 0, "", None, 0, True)
    assert cluster.count(ip) == 800

    replication = cluster.admit(REPLICATION, LISTENER_IPS[REPLICATION], T0 + 50)
    assert replication[:4] == ("THROTTLE", 0, "max.connections", 800)
    admin = cluster.admit(ADMIN, LISTENER_IPS[ADMIN], T0 + 50)
    assert admin[:4] == ("THROTTLE", 0, "max.connections", 800)

    # two releases: both waiters get in
    assert cluster.release(EXTERNAL, ip, T0 + 60, n=2) == [True, True]
    assert cluster.admit(ADMIN, LISTENER_IPS[ADMIN], T0 + 70, attempt=admin[4])[0] == "ADMIT"
    assert cluster.admit(REPLICATION, LISTENER_IPS[REPLICATION], T0 + 70, attempt=replication[4])[0] == "ADMIT"
    assert cluster.host.quotas(0).total_count == 800


def test_max_listener_connection_limits(cluster: Cluster) -> None:
    """ConnectionQuotasTest.testMaxListenerConnectionLimits: each listener takes up to its own limit, then
    waits; set before the listener exists (read when it is added) or after (applied in place)."""
    cluster.set("max.connections", "800")
    cluster.set("listener.name.external.max.connections", "200")
    cluster.set("listener.name.admin.max.connections", "200")
    cluster.admit_n(REPLICATION, LISTENER_IPS[REPLICATION], 1, T0)  # REPLICATION exists, unlimited
    cluster.set("listener.name.replication.max.connections", "200")
    assert cluster.host.quotas(0).listener_limits(REPLICATION)[0] == 200

    for listener, ip in LISTENER_IPS.items():
        cluster.admit_n(listener, ip, 200 - cluster.count(ip), T0)
        assert cluster.count(ip) == 200

    waiting = {}
    for listener, ip in LISTENER_IPS.items():
        result = cluster.admit(listener, ip, T0 + 1)
        limit = f"listener.name.{listener.lower()}.max.connections"
        assert result[:4] == ("THROTTLE", 0, limit, 200)
        waiting[listener] = result[4]
    for listener, ip in LISTENER_IPS.items():
        assert cluster.release(listener, ip, T0 + 2) == [True]
        assert cluster.admit(listener, ip, T0 + 3, attempt=waiting[listener])[0] == "ADMIT"
        assert cluster.count(ip) == 200


def test_broker_connection_rate_exact_throttle_times(cluster: Cluster) -> None:
    """ConnectionQuotasTest.testBrokerConnectionRateLimitWhenActualRateAboveLimit with QuotaUtils' numbers
    (2 samples of 1 s, as the Kafka test's broker): the delay, asking again, recording once."""
    cluster.set("quota.window.num", "2")  # read when the node's state is built
    cluster.set("max.connection.creation.rate", "5")
    ip = LISTENER_IPS[EXTERNAL]
    cluster.admit_n(EXTERNAL, ip, 5, T0)
    # 6/s over 5/s in a 1 s window: (6 - 5) / 5 * 1000 = 200 ms
    sixth = cluster.admit(EXTERNAL, ip, T0)
    assert sixth[:4] == ("THROTTLE", 200, "max.connection.creation.rate", None)
    seventh = cluster.admit(EXTERNAL, ip, T0)
    assert seventh[:2] == ("THROTTLE", 400)
    assert seventh[4] != sixth[4]

    early = cluster.admit(EXTERNAL, ip, T0 + 150, attempt=sixth[4])
    assert early[:2] == ("THROTTLE", 50) and early[4] == sixth[4]
    assert cluster.admit(EXTERNAL, ip, T0 + 200, attempt=sixth[4])[0] == "ADMIT"
    # 7 recordings in the padded window of 1.2 s: asking again records nothing
    assert cluster.metric("broker-connection-accept-rate", T0 + 200) == pytest.approx(7 / 1.2)
    assert cluster.metric("connection-accept-rate", T0 + 200, listener=EXTERNAL) == pytest.approx(7 / 1.2)
    assert cluster.metric("connection-accept-throttle-time", T0 + 200, listener=EXTERNAL) == 300.0
    assert cluster.admit(EXTERNAL, ip, T0 + 400, attempt=seventh[4])[0] == "ADMIT"
    assert cluster.count(ip) == 7
    # a decided attempt is gone: asking with it again is a new connection (recorded again)
    assert cluster.admit(EXTERNAL, ip, T0 + 400, attempt=seventh[4])[0] in ("ADMIT", "THROTTLE")
    assert cluster.metric("broker-connection-accept-rate", T0 + 400) == pytest.approx(8 / 1.4)


def test_listener_connection_rate_names_the_listener_limit(cluster: Cluster) -> None:
    """ConnectionQuotasTest.testListenerConnectionRateLimitWhenActualRateAboveLimit: the listener's rate."""
    cluster.set("quota.window.num", "2")
    cluster.set("max.connection.creation.rate", "125")
    cluster.set("listener.name.external.max.connection.creation.rate", "3")
    ip = LISTENER_IPS[EXTERNAL]
    cluster.admit_n(EXTERNAL, ip, 3, T0)
    # (4 - 3) / 3 * 1000 = 333 ms
    assert cluster.admit(EXTERNAL, ip, T0)[:3] == (
        "THROTTLE",
        333,
        "listener.name.external.max.connection.creation.rate",
    )
    cluster.admit_n(ADMIN, LISTENER_IPS[ADMIN], 20, T0)  # another listener: only the broker's 125/s


def test_ip_connection_rate_rejects(cluster: Cluster) -> None:
    """ConnectionQuotasTest.testRejectedIpConnectionUnrecordedFromConnectionRateQuotas and
    testIpConnectionRateWhenActualRateAboveLimit: an IP over its connection_creation_rate is refused,
    un-recorded from every rate, not counted; the default ip entity applies to IPs without their own."""
    cluster.set("quota.window.num", "2")
    ip = LISTENER_IPS[EXTERNAL]
    cluster.ip_rate(ip, 1.0)  # the controller takes only > 0, as Kafka's
    assert cluster.admit(EXTERNAL, ip, T0)[0] == "ADMIT"
    # (2 - 1) / 1 * 1000 = 1000 ms, the cap of one window
    assert cluster.admit(EXTERNAL, ip, T0) == ("REJECT", 1000, "connection_creation_rate", None, 0, False)
    assert cluster.count(ip) == 1
    # un-recorded everywhere: one connection in the padded 1 s window
    assert cluster.metric("connection-accept-rate", T0, ip=ip) == 1.0
    assert cluster.metric("connection-accept-rate", T0, listener=EXTERNAL) == 1.0
    assert cluster.metric("broker-connection-accept-rate", T0) == 1.0
    assert cluster.release(EXTERNAL, ip, T0, n=2) == [True, False]  # only the admitted one was counted

    # 40/s offered over the default entity's 20/s: about 20/s admitted, the rest refused
    cluster.ip_rate(None, 20.0)
    admin_ip = LISTENER_IPS[ADMIN]
    start, now, admitted, rejected = T0 + 10_000, T0 + 10_000, 0, 0
    for _ in range(80):
        result = cluster.admit(ADMIN, admin_ip, now)
        if result[0] == "ADMIT":
            admitted += 1
        else:
            assert result[:3] == ("REJECT", result[1], "connection_creation_rate") and result[1] > 0
            rejected += 1
        now += 25
    assert rejected > 0
    assert admitted / ((now - start) / 1000) == pytest.approx(20, abs=1)
    assert cluster.metric("ip-connection-accept-throttle-time", now, listener=ADMIN) > 0


# === config changes ======================================================================================
def test_config_changes_keep_counts(cluster: Cluster) -> None:
    """A limit change reconfigures the live ConnectionQuotas: counts and rates are kept."""
    ip = LISTENER_IPS[EXTERNAL]
    cluster.admit_n(EXTERNAL, ip, 3, T0)
    cluster.set("max.connections.per.ip", "3")
    assert cluster.admit(EXTERNAL, ip, T0)[:4] == ("REJECT", 0, "max.connections.per.ip", 3)
    assert cluster.count(ip) == 4
    cluster.set("max.connections.per.ip", "6")
    cluster.admit_n(EXTERNAL, ip, 2, T0)
    assert cluster.count(ip) == 6
    cluster.set("max.connections.per.ip", None)  # deleted: Kafka's default, no limit
    cluster.admit_n(EXTERNAL, ip, 10, T0)
    assert cluster.metric("connection-accept-rate", T0, listener=EXTERNAL) == pytest.approx(16 / 10)


def test_node_override_and_cluster_default(cluster: Cluster) -> None:
    """A node's own BROKER config wins over the cluster default "", for that node only."""
    ip = "10.0.0.9"
    cluster.set("max.connections.per.ip", "3")
    cluster.set("max.connections.per.ip", "1", node="1")
    cluster.admit_n(EXTERNAL, ip, 3, T0, node=0)
    cluster.admit_n(EXTERNAL, ip, 1, T0, node=1)
    assert cluster.admit(EXTERNAL, ip, T0, node=1)[:4] == ("REJECT", 0, "max.connections.per.ip", 1)
    assert cluster.admit(EXTERNAL, ip, T0, node=0)[:4] == ("REJECT", 0, "max.connections.per.ip", 3)
    cluster.set("max.connections.per.ip", "5", node="2")  # another node's override: no effect here
    assert cluster.host.quotas(0).max_connections_per_ip == 3
    assert cluster.host.quotas(1).max_connections_per_ip == 1
    cluster.set("max.connections.per.ip", None, node="1")  # back to the cluster default
    assert cluster.host.quotas(1).max_connections_per_ip == 3
    cluster.set("max.connections.per.ip", "4")
    assert [cluster.host.quotas(n).max_connections_per_ip for n in (0, 1)] == [4, 4]


def test_two_nodes_are_independent(cluster: Cluster) -> None:
    """Counts, rates and metrics are per node id: one node's connections never use another's budget."""
    cluster.set("max.connections.per.ip", "2")
    ip = LISTENER_IPS[EXTERNAL]
    cluster.admit_n(EXTERNAL, ip, 2, T0, node=0)
    cluster.admit_n(EXTERNAL, ip, 2, T0, node=7)
    assert cluster.admit(EXTERNAL, ip, T0, node=0)[0] == "REJECT"
    assert cluster.release(EXTERNAL, ip, T0, node=7) == [True]
    assert (cluster.count(ip, 0), cluster.count(ip, 7)) == (3, 1)
    assert cluster.host.nodes == [0, 7]
    assert cluster.metric("connection-accept-rate", T0, node=0, listener=EXTERNAL) == pytest.approx(3 / 10)
    assert cluster.metric("connection-accept-rate", T0, node=7, listener=EXTERNAL) == pytest.approx(2 / 10)


def test_snapshot_jump_applies_the_differences(cluster: Cluster) -> None:
    """``apply_changes(changes_between(old, new), new)``: what the follower does after a snapshot jump."""
    ip = LISTENER_IPS[EXTERNAL]
    cluster.set("max.connections.per.ip", "5")
    cluster.admit_n(EXTERNAL, ip, 2, T0)
    old = cluster.store.image.copy()
    host = cluster.host
    other = ConnectionHost(lambda: old, resolver=no_dns)
    other.serve([("admit", 0, EXTERNAL, ip, None, T0)] * 2)
    assert other.quotas(0).max_connections_per_ip == 5
    cluster.set("max.connections.per.ip", "2")
    cluster.set("listener.name.external.max.connections", "9")
    new = cluster.store.image
    other.apply_changes(changes_between(old, new), new)
    for quotas in (host.quotas(0), other.quotas(0)):
        assert quotas.max_connections_per_ip == 2
        assert quotas.listener_limits(EXTERNAL)[0] == 9
        assert quotas.get(ip) == 2


def test_listener_names_are_kafka_normalised(cluster: Cluster) -> None:
    """A listener is added by the first admit naming it; names compare case-insensitively (upper case)."""
    cluster.set("listener.name.client_2.max.connections", "1")
    assert cluster.admit("client_2", "10.0.0.1", T0)[0] == "ADMIT"
    assert cluster.admit("CLIENT_2", "10.0.0.2", T0)[:3] == ("THROTTLE", 0, "listener.name.client_2.max.connections")
    assert cluster.host.quotas(0).listeners == ["CLIENT_2"]
    assert cluster.release("Client_2", "10.0.0.1", T0) == [True]


def test_peer_addresses_follow_the_cores_rule(cluster: Cluster) -> None:
    """The host checks items with the core's ``peer_address``: a mapped IPv6 peer is its IPv4 address (one
    count, one attempt); a padded literal is a host name to Java, so the item is refused."""
    cluster.set("max.connections.per.ip", "1")
    assert cluster.admit(EXTERNAL, "::ffff:10.0.0.1", T0)[0] == "ADMIT"
    assert cluster.admit(EXTERNAL, "10.0.0.1", T0)[:3] == ("REJECT", 0, "max.connections.per.ip")
    assert cluster.count("::ffff:10.0.0.1") == 2
    assert cluster.release(EXTERNAL, "10.0.0.1", T0, n=2) == [True, True]
    with pytest.raises(ValueError, match=r"item 0: ip ' 10\.0\.0\.1' is not an IP address"):
        cluster.admit(EXTERNAL, " 10.0.0.1", T0)
    with pytest.raises(ValueError, match="item 0: a listener name cannot be an IP address"):
        cluster.admit("10.0.0.1", "10.0.0.1", T0)


# === items, attempts, housekeeping ===========================================================================
@pytest.mark.parametrize(
    ("item", "message"),
    [
        (("admit", 0, EXTERNAL, "not-an-ip", None, T0), "not an IPv4 or IPv6 literal"),
        (("admit", 0, EXTERNAL, "10.0.0.1", 0, T0), "attempt_id"),
        (("admit", -1, EXTERNAL, "10.0.0.1", None, T0), "node_id"),
        (("admit", 2**31, EXTERNAL, "10.0.0.1", None, T0), "node_id"),
        (("admit", 0, "EXT.ERNAL", "10.0.0.1", None, T0), "listener"),
        (("admit", 0, "", "10.0.0.1", None, T0), "listener"),
        (("admit", 0, EXTERNAL, "10.0.0.1", None, -5), "now_ms"),
        (("admit", 0, EXTERNAL, "10.0.0.1", None, True), "now_ms"),
        (("admit", 0, EXTERNAL, "10.0.0.1", T0), "takes 6 fields"),
        (("release", 0, EXTERNAL, 12, T0), "literal string"),
        (("abandon", 0, "x", T0), "attempt_id"),
        (("connect", 0, EXTERNAL, "10.0.0.1", T0), "unknown op"),
        ("admit", "expected a tuple"),
    ],
)
def test_a_bad_item_changes_nothing(cluster: Cluster, item: object, message: str) -> None:
    good = ("admit", 0, EXTERNAL, "10.0.0.1", None, T0)
    with pytest.raises(ValueError, match=message) as info:
        cluster.host.serve([good, good, item])
    assert str(info.value).startswith("item 2: ")
    assert cluster.host.nodes == []  # the valid items before it were not applied either


def test_a_bad_item_leaves_existing_state_alone(cluster: Cluster) -> None:
    ip = LISTENER_IPS[EXTERNAL]
    cluster.admit_n(EXTERNAL, ip, 2, T0)
    with pytest.raises(ValueError):
        cluster.host.serve([("release", 0, EXTERNAL, ip, T0), ("admit", 0, ADMIN, "10.0.0.300", None, T0)])
    assert cluster.count(ip) == 2
    assert cluster.host.quotas(0).listeners == [EXTERNAL]
    with pytest.raises(ValueError, match="empty"):
        cluster.host.serve([])


def test_listeners_per_node_are_bounded(tmp_path: Path) -> None:
    with ConfigStore.open(tmp_path / "log", fsync=False) as store:
        host = ConnectionHost(lambda: store.image, max_listeners_per_node=2)
        host.serve([("admit", 0, "A", "10.0.0.1", None, T0)])
        with pytest.raises(ValueError, match="more than 2 listeners"):
            host.serve([("admit", 0, "B", "10.0.0.1", None, T0), ("admit", 0, "C", "10.0.0.1", None, T0)])
        assert host.quotas(0).listeners == ["A"]
        host.serve([("admit", 0, "B", "10.0.0.1", None, T0), ("admit", 1, "C", "10.0.0.1", None, T0)])


def test_releases_and_attempts_the_node_does_not_know(cluster: Cluster) -> None:
    """After a shard restart the counts are gone: releases answer False; an unknown (or another connection's)
    attempt is asked as a new connection; abandoning drops a pending attempt once."""
    assert cluster.release(EXTERNAL, "10.0.0.1", T0) == [False]  # no such node yet
    assert cluster.host.nodes == []
    cluster.set("max.connections", "1")
    cluster.admit_n(EXTERNAL, "10.0.0.1", 1, T0)
    assert cluster.release(ADMIN, "10.0.0.1", T0) == [False]  # a listener the node does not have
    assert cluster.release(EXTERNAL, "10.0.0.2", T0) == [False]  # an IP it does not count

    waiting = cluster.admit(EXTERNAL, "10.0.0.2", T0)
    assert waiting[:2] == ("THROTTLE", 0)
    # another connection naming this attempt does not spend it; it waits as a new connection
    other = cluster.admit(EXTERNAL, "10.0.0.3", T0, attempt=waiting[4])
    assert other[:2] == ("THROTTLE", 0) and other[4] != waiting[4]
    assert cluster.admit(EXTERNAL, "10.0.0.2", T0, attempt=12345)[4] not in (0, 12345, waiting[4])
    assert cluster.host.serve([("abandon", 0, waiting[4], T0)]) == [(True,)]
    assert cluster.host.serve([("abandon", 0, waiting[4], T0), ("abandon", 3, 1, T0)]) == [(False,), (False,)]
    assert len(cluster.host.quotas(0).pending_attempts) == 2


def test_housekeeping_abandons_idle_attempts(cluster: Cluster) -> None:
    cluster.set("max.connections", "1")
    cluster.admit_n(EXTERNAL, "10.0.0.1", 1, T0)
    idle = cluster.admit(EXTERNAL, "10.0.0.2", T0)[4]
    polling = cluster.admit(EXTERNAL, "10.0.0.3", T0)[4]
    assert cluster.admit(EXTERNAL, "10.0.0.3", T0 + 50_000, attempt=polling)[4] == polling
    assert cluster.host.housekeeping(T0 + 60_001) == 1  # idle for over a minute; polling asked 10 s ago
    assert [a.ip for a in cluster.host.quotas(0).pending_attempts] == ["10.0.0.3"]
    assert cluster.host.serve([("abandon", 0, idle, T0 + 60_001)]) == [(False,)]
    assert cluster.host.abandoned_attempts == 1


def test_housekeeping_expires_idle_ip_sensors(cluster: Cluster) -> None:
    """Kafka drops an IP's rate sensor an hour after its last connection."""
    cluster.ip_rate(None, 100.0)
    cluster.admit_n(EXTERNAL, "10.0.0.1", 1, T0)
    assert cluster.metric("connection-accept-rate", T0, ip="10.0.0.1") > 0
    cluster.host.housekeeping(T0 + 3_600_001)
    assert not [r for r in cluster.host.metrics_snapshot(T0 + 3_600_001) if r[3].get("ip") == "10.0.0.1"]


# === the host decides as the core does ==========================================================================
def test_random_workload_matches_the_core(cluster: Cluster) -> None:
    """Admits, retries, releases and abandons in random batches give exactly the core's decisions, with the
    core built from the same configs and called one by one."""
    cluster.set("quota.window.num", "2")
    cluster.set("max.connections", "12")
    cluster.set("max.connections.per.ip", "4")
    cluster.set("max.connection.creation.rate", "30")
    cluster.set("listener.name.admin.max.connections", "5")
    cluster.set("listener.name.admin.max.connection.creation.rate", "10")
    cluster.ip_rate(None, 12.0)
    cluster.ip_rate("10.0.0.3", 4.0)
    core = ConnectionQuotas(
        ConnectionQuotasConfig(
            num_quota_samples=2, max_connections=12, max_connections_per_ip=4, max_connection_creation_rate=30
        ),
        now_ms=T0,
        resolver=no_dns,
    )
    core.update_ip_connection_rate_quota(None, 12)
    core.update_ip_connection_rate_quota("10.0.0.3", 4)
    added: set[str] = set()

    rng = random.Random(714)
    ips = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "::1"]
    counted: list[tuple[str, str]] = []
    pending: list[tuple[int, Any, str, str]] = []  # (host attempt id, core attempt, listener, ip)
    now = T0
    decisions = 0
    for _ in range(300):
        now += rng.choice((0, 5, 20, 60, 250))
        batch: list[tuple[Any, ...]] = []
        expected: list[tuple[Any, ...]] = []
        for _ in range(rng.randint(1, 6)):
            roll = rng.random()
            if roll < 0.2 and pending:
                wire, attempt, listener, ip = pending.pop(rng.randrange(len(pending)))
                batch.append(("admit", 0, listener, ip, wire, now))
                expected.append(("retry", core.inc(listener, ip, now, attempt=attempt), listener, ip))
            elif roll < 0.3 and pending:
                wire, attempt, _, _ = pending.pop(rng.randrange(len(pending)))
                batch.append(("abandon", 0, wire, now))
                expected.append(("abandon", core.abandon(attempt)))
            elif roll < 0.55 and counted:
                listener, ip = counted.pop(rng.randrange(len(counted)))
                batch.append(("release", 0, listener, ip, now))
                core.dec(listener, ip, now)
                expected.append(("release", True))
            else:
                listener, ip = rng.choice((EXTERNAL, ADMIN)), rng.choice(ips)
                if listener not in added:
                    limits = {"max_connections": 5, "max_connection_creation_rate": 10} if listener == ADMIN else {}
                    core.add_listener(listener, now_ms=now, **limits)
                    added.add(listener)
                batch.append(("admit", 0, listener, ip, None, now))
                expected.append(("new", core.inc(listener, ip, now), listener, ip))
        results = cluster.host.serve(batch)
        for want, got in zip(expected, results, strict=True):
            if want[0] in ("release", "abandon"):
                assert got == (want[1],)
                continue
            decision, listener, ip = want[1], want[2], want[3]
            limit = "" if decision.limit is None else decision.limit.value.replace("<listener>", listener.lower())
            assert got[:4] == (decision.kind.name, decision.throttle_ms, limit, decision.max_connections)
            assert got[5] == decision.counted
            if decision.counted:
                counted.append((listener, ip))
            if decision.throttled:
                pending.append((got[4], decision.attempt, listener, ip))
            decisions += 1
    assert decisions > 500
    quotas = cluster.host.quotas(0)
    assert {ip: quotas.get(ip) for ip in ips} == {ip: core.get(ip) for ip in ips}
    kinds = {r[0] for r in cluster.host.metrics_snapshot(now)}
    assert {"broker-connection-accept-rate", "connection-accept-rate", "connection-accept-throttle-time"} <= kinds
