"""KIP-786's quota-value metric in quotaplane: on by default, and a dynamic switch.

Kafka's ``client.quota.value.metric.enable`` is a read-only broker config, off by default (its class default
stays off: tests/quota/test_client_quota_value_metric.py ports Kafka's tests). quotaplane's broker config
(``QuotaConfig``, the config log) is on by default and dynamic: off removes the quota-value sensors of live
clients, on adds one per live quota sensor holding its current bound. The reference for the switch is a
manager that was on all along: whenever the switched one is on, its registry must be the reference's.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.config import (
    BROKER_CONFIGS,
    AlterConfigOp,
    ClientQuotaAlteration,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    ManagerBinding,
    OpType,
    startup_configs,
)
from quotaplane.quota import (
    DEFAULT,
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ClientRequestQuotaManager,
    DefaultQuotaCallback,
    QuotaConfig,
    QuotaType,
    build_quota_managers,
)

from ._client_quota_support import START_MS, metric_values

KIP_786 = "client.quota.value.metric.enable"
CLUSTER = ConfigResource(ConfigResourceType.BROKER, "")


def quota_values(metrics, now_ms: int = START_MS) -> dict[tuple[str, tuple], float]:
    """``(group, tags) -> value`` of every quota-value metric of a registry."""
    return {
        (name.group, tuple(sorted(name.tags.items()))): metric.measurable_value(now_ms)
        for name, metric in metrics.metrics.items()
        if name.name == "quota-value"
    }


def without_quota_values(values: dict) -> dict:
    """Metric values but the quota-value metrics and Kafka's count of metrics (which counts those)."""
    return {name: v for name, v in values.items() if name.name != "quota-value" and name.group != "kafka-metrics-count"}


# --- the default ---------------------------------------------------------------------------------------
def test_on_by_default_in_the_config_log_and_the_managers_a_shard_builds(tmp_path: Path) -> None:
    spec = BROKER_CONFIGS[KIP_786]
    assert (spec.default, spec.dynamic) == ("true", True)
    assert QuotaConfig().client_quota_value_metric_enable is True
    with ConfigStore.open(tmp_path) as store:
        startup = startup_configs(store.image)  # an empty log: the defaults
        [entry] = [e for e in store.describe_configs(CLUSTER) if e.name == KIP_786]
    assert (entry.value, entry.is_default) == ("true", True)
    assert startup.quota.client_quota_value_metric_enable is True
    managers = build_quota_managers(startup.quota, now_ms=START_MS)
    managers.produce.update_quota(ClientQuotaEntity(user="alice"), 4096.0)
    managers.produce.record_batch([("alice", "c1", 10.0)], START_MS)
    managers.request.update_quota(ClientQuotaEntity(user="alice"), 50.0)
    managers.request.record_and_get_throttle_time_ms("alice", "c1", 1.0, START_MS)
    assert quota_values(managers.metrics) == {
        ("Produce", (("client-id", ""), ("user", "alice"))): 4096.0,
        ("Request", (("client-id", ""), ("user", "alice"))): 50.0,
    }
    # Kafka's class keeps Kafka's default (off): the ported ClientQuotaManagerTest runs against it
    assert ClientQuotaManagerConfig().client_quota_value_metric_enable is False


# --- the switch on a manager -----------------------------------------------------------------------------
def test_off_removes_and_on_restores_every_live_sensor_with_its_current_bound() -> None:
    mgr = ClientQuotaManager(ClientQuotaManagerConfig(client_quota_value_metric_enable=True), QuotaType.PRODUCE)
    mgr.update_quota(ClientQuotaEntity(user="alice"), 40.0)
    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), 20.0)
    mgr.record_batch([("alice", "c1", 1.0), ("bob", "c1", 1.0)], START_MS)
    mgr.record_and_get_throttle_time_ms("carol", "c9", 1.0, START_MS + 500)
    before = quota_values(mgr.metrics)
    assert len(before) == 3
    usage = without_quota_values(metric_values(mgr.metrics, START_MS + 600))
    count = mgr.metrics.metric(mgr.metrics.metric_name("count", "kafka-metrics-count"))

    mgr.set_quota_value_metric_enabled(False)
    assert not mgr.quota_value_metric_enabled
    assert quota_values(mgr.metrics) == {}
    assert [name for name in mgr.metrics.sensors if "QuotaValue" in name] == []
    assert without_quota_values(metric_values(mgr.metrics, START_MS + 600)) == usage  # usage untouched
    assert count.measurable_value(START_MS) == len(mgr.metrics.metrics)  # the registry shrank
    # while off, a new client gets no quota-value sensor, and a new bound goes nowhere
    mgr.record_batch([("dave", "c1", 1.0)], START_MS + 600)
    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), 25.0)
    assert quota_values(mgr.metrics) == {}
    assert mgr.get_or_create_quota_sensors("dave", "c1", START_MS + 600).quota_value_sensor is None

    mgr.set_quota_value_metric_enabled(True)
    restored = quota_values(mgr.metrics)
    assert restored == {
        ("Produce", (("client-id", ""), ("user", "alice"))): 40.0,
        ("Produce", (("client-id", ""), ("user", "bob"))): 25.0,  # the bound of now, not of before
        ("Produce", (("client-id", ""), ("user", "carol"))): 25.0,
        ("Produce", (("client-id", ""), ("user", "dave"))): 25.0,
    }
    # restored sensors are idle since their client's last recording: they expire with its other sensors
    assert mgr.metrics.get_sensor("ProduceQuotaValue-carol:").last_record_time_ms == START_MS + 500
    assert mgr.metrics.get_sensor("ProduceQuotaValue-alice:").last_record_time_ms == START_MS
    expired = mgr.expire_sensors(START_MS + 3_600_001)
    assert {"Produce-alice:", "ProduceQuotaValue-alice:", "Produce-bob:", "ProduceQuotaValue-bob:"} <= set(expired)
    assert "ProduceQuotaValue-carol:" not in expired
    # and a new bound shows at once again
    mgr.update_quota(ClientQuotaEntity(user="carol"), 70.0)
    assert quota_values(mgr.metrics)[("Produce", (("client-id", ""), ("user", "carol")))] == 70.0


def test_the_switch_is_idempotent_and_ignored_where_kafka_has_no_quota_value_metric() -> None:
    managers = build_quota_managers(now_ms=START_MS)
    managers.controller_mutation.update_quota(ClientQuotaEntity(user="alice"), 10.0)
    managers.controller_mutation.record_and_get_throttle_time_ms("alice", "c1", 1.0, START_MS)
    managers.produce.record_batch([("alice", "c1", 1.0)], START_MS)
    managers.set_quota_value_metric_enabled(True)  # already on: nothing added twice
    assert len(quota_values(managers.metrics)) == 1  # produce's; controller mutations have none, as in Kafka
    managers.set_quota_value_metric_enabled(False)
    managers.set_quota_value_metric_enabled(False)
    assert quota_values(managers.metrics) == {}
    assert not managers.controller_mutation.quota_value_metric_enabled


# --- the switch against a manager that was on all along (hypothesis) ------------------------------------------
USERS = ["alice", "bob", "User:carol smith"]
CLIENTS = ["p1", "p2"]
entities = st.builds(
    ClientQuotaEntity,
    user=st.sampled_from([None, DEFAULT, *USERS]),
    client_id=st.sampled_from([DEFAULT, *CLIENTS]),
)
items = st.lists(
    st.tuples(st.sampled_from(USERS), st.sampled_from(CLIENTS), st.integers(0, 30_000).map(float)), min_size=1
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("batch"), items, st.integers(0, 4_000)),
        st.tuples(st.just("one"), items, st.integers(0, 4_000)),
        st.tuples(
            st.just("quota"), st.tuples(entities, st.one_of(st.none(), st.integers(1, 20_000).map(float))), st.just(0)
        ),
        st.tuples(st.just("switch"), st.booleans(), st.just(0)),
        st.tuples(st.just("expire"), st.just(None), st.integers(0, 3_700_000)),
    ),
    max_size=25,
)


def sensor_times(mgr: ClientQuotaManager) -> dict[str, int]:
    """When each sensor last recorded: what decides its expiry."""
    return {name: sensor.last_record_time_ms for name, sensor in mgr.metrics.sensors.items()}


def new_manager(quota_type: QuotaType, enabled: bool, *, literal: bool = False) -> ClientQuotaManager:
    """A manager; ``literal``: Kafka's built-in callback passed as a custom one, which caches no sensors, so every
    recording takes Kafka's literal path (the bound recorded into the quota-value sensor each time): the
    reference for the fast paths, which only touch that sensor's time."""
    config = ClientQuotaManagerConfig(client_quota_value_metric_enable=enabled)
    callback = DefaultQuotaCallback() if literal else None
    if quota_type is QuotaType.REQUEST:
        return ClientRequestQuotaManager(config, now_ms=START_MS, quota_callback=callback)
    return ClientQuotaManager(config, quota_type, quota_callback=callback)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(quota_type=st.sampled_from([QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST]), ops=ops)
def test_a_switched_manager_equals_one_always_on_whenever_it_is_on(quota_type: QuotaType, ops: list) -> None:
    """Throttles and usage never depend on the switch; while on, the quota-value metrics (names, values, and
    sensor times, which decide expiry) are those of a manager that was on all along and recorded one by one on
    Kafka's literal path; while off, there are none."""
    switched, always = new_manager(quota_type, True), new_manager(quota_type, True, literal=True)
    now = START_MS
    for kind, arg, step in ops:
        now += step
        if kind == "batch":  # the reference records one by one: the batch's fast path is checked too
            assert switched.record_batch(arg, now) == [
                always.record_and_get_throttle_time_ms(user, client_id, value, now) for user, client_id, value in arg
            ]
        elif kind == "one":
            for user, client_id, value in arg:
                assert switched.record_and_get_throttle_time_ms(user, client_id, value, now) == (
                    always.record_and_get_throttle_time_ms(user, client_id, value, now)
                )
        elif kind == "quota":
            switched.update_quota(*arg)
            always.update_quota(*arg)
        elif kind == "switch":
            switched.set_quota_value_metric_enabled(arg)
        else:
            expired = set(always.expire_sensors(now))
            if not switched.quota_value_metric_enabled:
                expired = {name for name in expired if "QuotaValue" not in name}
            assert set(switched.expire_sensors(now)) == expired
        got, expected = metric_values(switched.metrics, now), metric_values(always.metrics, now)
        if switched.quota_value_metric_enabled:
            assert got == expected
            assert sensor_times(switched) == sensor_times(always)
        else:
            assert without_quota_values(got) == without_quota_values(expected)


def test_the_batch_fast_path_keeps_the_quota_value_sensor_alive_with_its_client() -> None:
    """record_batch's fast path touches the quota-value sensor's time instead of recording the bound into it
    (the bound is already there): it must still expire with the client's other sensors, not an hour after
    the client was first seen."""
    mgr = ClientQuotaManager(ClientQuotaManagerConfig(client_quota_value_metric_enable=True), QuotaType.PRODUCE)
    mgr.update_quota(ClientQuotaEntity(user="alice"), 40.0)
    mgr.record_batch([("alice", "c1", 1.0)], START_MS)  # creates the sensors (slow path)
    later = START_MS + 3_000_000
    mgr.record_batch([("alice", "c1", 1.0), ("alice", "c1", 2.0)], later)  # cached: the fast path
    assert mgr.metrics.get_sensor("ProduceQuotaValue-alice:").last_record_time_ms == later
    expired = mgr.expire_sensors(START_MS + 3_600_001)
    assert expired == ["ProduceThrottleTime-alice:"]  # never throttled: only its throttle-time sensor is idle
    assert quota_values(mgr.metrics) == {("Produce", (("client-id", ""), ("user", "alice"))): 40.0}


# --- the switch through the config log -------------------------------------------------------------------
def test_the_config_log_switches_the_live_managers_without_a_restart(tmp_path: Path) -> None:
    with ConfigStore.open(tmp_path) as store:
        managers = build_quota_managers(startup_configs(store.image).quota, now_ms=START_MS)
        binding = ManagerBinding(quotas=managers)
        binding.load(store.image)
        store.subscribe(lambda delta: binding.apply(delta, store.image))
        alteration = ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 4096.0)])
        assert all(r.ok for r in store.alter_client_quotas([alteration], now_ms=START_MS))
        managers.produce.record_batch([("alice", "c1", 100.0)], START_MS)
        alice = ("Produce", (("client-id", ""), ("user", "alice")))
        assert quota_values(managers.metrics) == {alice: 4096.0}

        def alter(op: AlterConfigOp) -> None:
            assert all(r.ok for r in store.incremental_alter_configs([(CLUSTER, [op])], now_ms=START_MS))

        alter(AlterConfigOp(KIP_786, OpType.SET, "false"))
        assert quota_values(managers.metrics) == {}
        alter(AlterConfigOp(KIP_786, OpType.DELETE, None))  # back to the default: on
        assert quota_values(managers.metrics) == {alice: 4096.0}
        alter(AlterConfigOp(KIP_786, OpType.SET, "FALSE"))
        assert quota_values(managers.metrics) == {}
        alter(AlterConfigOp(KIP_786, OpType.SET, "true"))
        assert quota_values(managers.metrics) == {alice: 4096.0}
        assert binding.restart_required == set()
        # a node's own override wins over the cluster default, on that node only
        node = ManagerBinding(quotas=build_quota_managers(now_ms=START_MS), node_id=3)
        store.subscribe(lambda delta: node.apply(delta, store.image))
        assert node.quotas is not None
        node.quotas.produce.record_batch([("alice", "c1", 100.0)], START_MS)
        assert all(
            r.ok
            for r in store.incremental_alter_configs(
                [(ConfigResource(ConfigResourceType.BROKER, "3"), [AlterConfigOp(KIP_786, OpType.SET, "false")])],
                now_ms=START_MS,
            )
        )
        assert quota_values(node.quotas.metrics) == {}
        assert quota_values(managers.metrics) == {alice: 4096.0}
