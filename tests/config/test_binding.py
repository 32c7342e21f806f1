"""ManagerBinding: config deltas update the live managers in place, and never reset usage."""

from __future__ import annotations

from pathlib import Path

from quotaplane.config import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    ManagerBinding,
    OpType,
    startup_configs,
)
from quotaplane.quota import ClientQuotaEntity as Entity
from quotaplane.quota import (
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ConnectionQuotas,
    ProducerIdQuotaManager,
    QuotaType,
    build_quota_managers,
)
from quotaplane.telemetry import ClientMetricsManager

T0 = 1_700_000_000_000
BROKER = ConfigResourceType.BROKER


def _managers(node_id: int | None = None) -> ManagerBinding:
    return ManagerBinding(
        quotas=build_quota_managers(now_ms=T0),
        connections=ConnectionQuotas(now_ms=T0),
        producer_ids=ProducerIdQuotaManager(),
        telemetry=ClientMetricsManager(now_ms=T0),
        node_id=node_id,
    )


def _state(binding: ManagerBinding) -> dict:
    """What the managers were told, read back through their own APIs."""
    quotas = binding.quotas
    assert quotas is not None and binding.connections and binding.producer_ids and binding.telemetry
    pairs = [(u, c) for u in ("alice", "bob", "zed") for c in ("app", "other")]
    return {
        "produce": {p: quotas.produce.quota(*p).bound for p in pairs},
        "fetch": {p: quotas.fetch.quota(*p).bound for p in pairs},
        "request": {p: quotas.request.quota(*p).bound for p in pairs},
        "producer_ids": dict(binding.producer_ids.quotas()),
        "ip_rate": {ip: binding.connections.connection_rate_for_ip(ip) for ip in ("10.0.0.1", "10.0.0.2")},
        "max_connections": binding.connections.max_connections,
        "leader_rate": quotas.leader.upper_bound,
        "subscriptions": {
            n: binding.telemetry.describe_client_metrics_resource(n)
            for n in binding.telemetry.list_client_metrics_resources()
        },
        "throttled": quotas.leader.is_throttled("orders", 0),
    }


def _history(store: ConfigStore) -> None:
    alter = store.alter_client_quotas
    alter([ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 1000.0)])], now_ms=T0)
    alter(
        [ClientQuotaAlteration({"user": None}, [("producer_byte_rate", 500.0), ("consumer_byte_rate", 7.0)])], now_ms=T0
    )
    alter([ClientQuotaAlteration({"user": "bob", "client-id": "app"}, [("request_percentage", 50.0)])], now_ms=T0)
    alter([ClientQuotaAlteration({"user": "alice"}, [("producer_ids_rate", 3.0)])], now_ms=T0)
    alter([ClientQuotaAlteration({"ip": "10.0.0.1"}, [("connection_creation_rate", 9.0)])], now_ms=T0)
    alter([ClientQuotaAlteration({"ip": None}, [("connection_creation_rate", 4.0)])], now_ms=T0)
    alter([ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", None)])], now_ms=T0)
    store.alter_client_metrics("sub", metrics="org.apache.kafka.producer.", interval_ms=1000, now_ms=T0)
    store.incremental_alter_configs(
        [(ConfigResource(BROKER, ""), [AlterConfigOp("max.connections", OpType.SET, "100")])], now_ms=T0
    )
    store.incremental_alter_configs(
        [(ConfigResource(BROKER, "1"), [AlterConfigOp("max.connections", OpType.SET, "7")])], now_ms=T0
    )
    store.incremental_alter_configs(
        [(ConfigResource(BROKER, ""), [AlterConfigOp("leader.replication.throttled.rate", OpType.SET, "5000")])],
        now_ms=T0,
    )
    store.incremental_alter_configs(
        [
            (
                ConfigResource(ConfigResourceType.TOPIC, "orders"),
                [AlterConfigOp("leader.replication.throttled.replicas", OpType.SET, "0:1")],
            )
        ],
        now_ms=T0,
    )


def test_streamed_deltas_and_a_loaded_image_give_the_same_managers(tmp_path: Path) -> None:
    for node_id in (None, 1, 2):
        streamed = _managers(node_id)
        directory = tmp_path / f"node-{node_id}"
        with ConfigStore.open(directory) as store:
            store.subscribe(lambda delta, b=streamed, s=store: b.apply(delta, s.image))
            _history(store)
            loaded = _managers(node_id)
            loaded.load(store.image)
        assert _state(streamed) == _state(loaded)
        state = _state(loaded)
        assert state["produce"][("alice", "app")] == 500.0  # alice's own quota was removed: the default user's
        assert state["fetch"][("zed", "other")] == 7.0
        assert state["request"][("bob", "app")] == 50.0
        assert state["producer_ids"] == {"alice": 3.0}
        assert state["ip_rate"] == {"10.0.0.1": 9, "10.0.0.2": 4}
        assert state["max_connections"] == (7 if node_id == 1 else 100)
        assert state["leader_rate"] == 5000
        assert state["subscriptions"] == {"sub": {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"}}
        assert state["throttled"] is (node_id == 1)  # replica 0:1 is throttled on node 1 only


def test_a_quota_change_keeps_the_usage_already_recorded(tmp_path: Path) -> None:
    """Kafka keeps a sensor's samples when its quota changes: the new bound applies to the same usage."""
    config = ClientQuotaManagerConfig()
    reference = ClientQuotaManager(config, QuotaType.PRODUCE)
    binding = ManagerBinding(quotas=build_quota_managers(now_ms=T0))
    with ConfigStore.open(tmp_path) as store:
        store.subscribe(lambda delta: binding.apply(delta, store.image))
        store.alter_client_quotas(
            [ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 10_000.0)])], now_ms=T0
        )
        reference.update_quota(Entity(user="alice"), 10_000.0)
        produce = binding.quotas.produce
        for i in range(5):
            now = T0 + i * 100
            assert produce.record_and_get_throttle_time_ms("alice", "c", 4000.0, now) == (
                reference.record_and_get_throttle_time_ms("alice", "c", 4000.0, now)
            )
        store.alter_client_quotas(
            [ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 1_000.0)])], now_ms=T0
        )
        reference.update_quota(Entity(user="alice"), 1_000.0)
        now = T0 + 600
        throttle = produce.record_and_get_throttle_time_ms("alice", "c", 1.0, now)
        assert throttle == reference.record_and_get_throttle_time_ms("alice", "c", 1.0, now)
        assert throttle > 0  # 20 kB in ~10.6 s against 1 kB/s: only kept usage can throttle a 1-byte request
        fresh = ClientQuotaManager(config, QuotaType.PRODUCE)
        fresh.update_quota(Entity(user="alice"), 1_000.0)
        assert fresh.record_and_get_throttle_time_ms("alice", "c", 1.0, now) == 0


def test_start_up_keys_wait_for_a_restart_and_build_the_next_managers(tmp_path: Path) -> None:
    binding = _managers()
    with ConfigStore.open(tmp_path) as store:
        store.subscribe(lambda delta: binding.apply(delta, store.image))
        store.incremental_alter_configs(
            [
                (
                    ConfigResource(BROKER, ""),
                    [
                        AlterConfigOp("quota.window.num", OpType.SET, "5"),
                        AlterConfigOp("telemetry.max.bytes", OpType.SET, "2048"),
                        AlterConfigOp("client.quota.value.metric.enable", OpType.SET, "false"),
                        AlterConfigOp("producer.id.quota.window.size.seconds", OpType.SET, "60"),
                    ],
                ),
                (ConfigResource(BROKER, "3"), [AlterConfigOp("quota.window.size.seconds", OpType.SET, "2")]),
            ],
            now_ms=T0,
        )
        # KIP-786's switch is dynamic in quotaplane: applied at once (tests/quota/test_quota_value_dynamic.py)
        assert binding.restart_required == {
            "quota.window.num",
            "telemetry.max.bytes",
            "producer.id.quota.window.size.seconds",
        }
        fleet = startup_configs(store.image)
        node3 = startup_configs(store.image, node_id=3)
    assert (fleet.quota.quota_window_num, fleet.quota.quota_window_size_seconds) == (5, 1)
    assert fleet.quota.client_quota_value_metric_enable is False  # read for the next build too (on by default)
    assert fleet.telemetry_max_bytes == 2048
    assert fleet.producer_ids.quota_window_size_seconds == 60
    assert node3.quota.quota_window_size_seconds == 2
    managers = build_quota_managers(fleet.quota, now_ms=T0)
    assert managers.produce.config.num_quota_samples == 5
