"""KIP-786 (``client.quota.value.metric.enable``): a ``quota-value`` metric per resolved quota entity.

Group = the quota type, tags = the sensor's ``user`` / ``client-id`` tags, value = the bound enforced
for that sensor. With the flag off (the default) no such sensor or metric exists at all.
"""

from __future__ import annotations

import pytest

from quotaplane.quota import (
    DEFAULT,
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ClientRequestQuotaManager,
    QuotaType,
)

from ._client_quota_support import START_MS, UNLIMITED

ENABLED = ClientQuotaManagerConfig(client_quota_value_metric_enable=True)


def new_manager(quota_type: QuotaType, config: ClientQuotaManagerConfig) -> ClientQuotaManager:
    if quota_type is QuotaType.REQUEST:
        return ClientRequestQuotaManager(config, now_ms=START_MS)
    return ClientQuotaManager(config, quota_type)


def quota_value(mgr: ClientQuotaManager, user_tag: str, client_tag: str) -> float | None:
    name = mgr.metrics.metric_name("quota-value", str(mgr.quota_type), tags={"user": user_tag, "client-id": client_tag})
    metric = mgr.metrics.metric(name)
    return None if metric is None else metric.measurable_value(START_MS)


def quota_value_names(mgr: ClientQuotaManager) -> list:
    return [name for name in mgr.metrics.metrics if name.name == "quota-value"]


@pytest.mark.parametrize("quota_type", [QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST])
def test_quota_value_metric_holds_the_enforced_bound(quota_type: QuotaType) -> None:
    """KIP-786: quota-value per resolved entity, updated by each record and by update_quota."""
    mgr = new_manager(quota_type, ENABLED)
    mgr.update_quota(ClientQuotaEntity(user="alice"), 40.0)
    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), 20.0)
    now = START_MS

    mgr.record_and_get_throttle_time_ms("alice", "c1", 1.0, now)
    mgr.record_and_get_throttle_time_ms("bob", "c1", 1.0, now)
    mgr.record_and_get_throttle_time_ms("bob", "c2", 1.0, now)  # same user tag: same entity as bob/c1
    assert quota_value(mgr, "alice", "") == 40.0
    assert quota_value(mgr, "bob", "") == 20.0
    names = quota_value_names(mgr)
    assert len(names) == 2
    assert {name.group for name in names} == {str(quota_type)}
    assert all(set(name.tags) == {"user", "client-id"} for name in names)

    # a named entity's new bound shows at once, and stays after the next record
    mgr.update_quota(ClientQuotaEntity(user="alice"), 55.0)
    assert quota_value(mgr, "alice", "") == 55.0
    mgr.record_and_get_throttle_time_ms("alice", "c1", 1.0, now + 10)
    assert quota_value(mgr, "alice", "") == 55.0

    # a default's new bound reaches every sensor it applies to
    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), 25.0)
    assert quota_value(mgr, "bob", "") == 25.0
    assert quota_value(mgr, "alice", "") == 55.0

    # removing alice's own quota leaves her on the default
    mgr.update_quota(ClientQuotaEntity(user="alice"), None)
    assert quota_value(mgr, "alice", "") == 25.0


def test_quota_value_metric_with_no_applicable_quota() -> None:
    """KIP-786: a sensor with no quota shows Kafka's unlimited bound (Long.MAX_VALUE)."""
    mgr = ClientQuotaManager(ENABLED, QuotaType.PRODUCE)
    mgr.update_quota(ClientQuotaEntity(user="alice"), 40.0)
    mgr.record_and_get_throttle_time_ms("bob", "c1", 1.0, START_MS)
    assert quota_value(mgr, "bob", "") == UNLIMITED


def test_quota_value_metric_set_when_the_sensor_is_created() -> None:
    """KIP-786: a sensor created without a record (throttle, max value in window) already shows its bound."""
    mgr = ClientQuotaManager(ENABLED, QuotaType.FETCH)
    mgr.update_quota(ClientQuotaEntity(client_id=DEFAULT), 300.0)
    mgr.max_value_in_quota_window("alice", "consumer-1", START_MS)
    assert quota_value(mgr, "", "consumer-1") == 300.0


def test_quota_value_sensor_expires_with_the_client() -> None:
    """KIP-786 sensors expire with the client's other sensors after an hour idle."""
    mgr = ClientQuotaManager(ENABLED, QuotaType.PRODUCE)
    mgr.update_quota(ClientQuotaEntity(client_id="c1"), 300.0)
    mgr.record_and_get_throttle_time_ms("alice", "c1", 1.0, START_MS)
    assert mgr.metrics.get_sensor("ProduceQuotaValue-:c1") is not None

    expired = mgr.expire_sensors(START_MS + 3_600_001)
    assert "ProduceQuotaValue-:c1" in expired
    assert quota_value_names(mgr) == []


@pytest.mark.parametrize("quota_type", [QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST])
def test_no_quota_value_metric_by_default(quota_type: QuotaType) -> None:
    """KIP-786 is off by default: no quota-value sensor or metric exists at all."""
    mgr = new_manager(quota_type, ClientQuotaManagerConfig())
    mgr.update_quota(ClientQuotaEntity(user="alice"), 40.0)
    mgr.record_and_get_throttle_time_ms("alice", "c1", 1.0, START_MS)
    mgr.throttle("alice", "c1", 100, START_MS)
    mgr.update_quota(ClientQuotaEntity(user="alice"), 50.0)
    mgr.record_and_get_throttle_time_ms("alice", "c1", 1.0, START_MS)

    assert quota_value_names(mgr) == []
    assert [name for name in mgr.metrics.sensors if "QuotaValue" in name] == []
    assert mgr.get_or_create_quota_sensors("alice", "c1", START_MS).quota_value_sensor is None
    # the client's own sensors do exist: the absence above is the flag, not a missing client
    assert mgr.metrics.get_sensor(f"{quota_type}-alice:") is not None
