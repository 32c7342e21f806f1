"""A custom ``ClientQuotaCallback`` (KIP-257), after Kafka's ``CustomQuotaCallbackTest.scala`` and its
``GroupedUserQuotaCallback``: users named ``<group>_<name>`` share one quota per group.

With a custom callback the manager reports ``CUSTOM_QUOTAS``, asks the callback for tags on every
recording (no single-level fast path, no tag cache), updates every quota metric on a quota change,
and re-reads all limits whenever ``quota_reset_required`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping

from quotaplane.quota import (
    CUSTOM_QUOTAS,
    ClientQuotaCallback,
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ClientQuotaType,
    ClientRequestQuotaManager,
    QuotaType,
)

from ._client_quota_support import START_MS, UNLIMITED, quota_metric_value

CONFIG = ClientQuotaManagerConfig()
GROUP_TAG = "group"


class GroupedUserQuotaCallback:
    """Group quotas, configured as user quotas on ``<group>_``; ``_`` is the default group quota.

    ``scale`` stands in for Kafka's partition-ratio scaling from cluster metadata: it changes limits
    outside update/remove, so it raises the ``quota_reset_required`` flag (read once, as Kafka's
    ``AtomicBoolean.getAndSet(false)``).
    """

    def __init__(self) -> None:
        self.quotas: dict[ClientQuotaType, dict[str, float]] = {t: {} for t in ClientQuotaType}
        self.ratio: dict[str, float] = {}
        self._reset_required: dict[ClientQuotaType, bool] = dict.fromkeys(ClientQuotaType, False)
        self.tag_calls = 0
        self.updates: list[tuple[ClientQuotaType, ClientQuotaEntity, float | None]] = []

    @staticmethod
    def group(name: str) -> str:
        return name.split("_", 1)[0] if "_" in name else ""

    def _quota_or_default(self, group: str, quota_type: ClientQuotaType) -> float | None:
        quotas = self.quotas[quota_type]
        limit = quotas.get(group, quotas.get(""))
        return None if limit is None else limit * self.ratio.get(group, 1.0)

    # --- ClientQuotaCallback -------------------------------------------------------------------------
    def quota_metric_tags(self, quota_type: ClientQuotaType, user: str, client_id: str) -> dict[str, str]:
        self.tag_calls += 1
        group = self.group(user)
        if group and self._quota_or_default(group, quota_type) is not None:
            return {GROUP_TAG: group}
        return {}  # unlimited users share one unlimited sensor

    def quota_limit(self, quota_type: ClientQuotaType, metric_tags: Mapping[str, str]) -> float | None:
        group = metric_tags.get(GROUP_TAG)
        return None if group is None else self._quota_or_default(group, quota_type)

    def update_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity, new_value: float) -> None:
        self.updates.append((quota_type, entity, new_value))
        self.quotas[quota_type][self._entity_group(entity)] = new_value

    def remove_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity) -> None:
        self.updates.append((quota_type, entity, None))
        self.quotas[quota_type].pop(self._entity_group(entity), None)

    def quota_reset_required(self, quota_type: ClientQuotaType) -> bool:
        required, self._reset_required[quota_type] = self._reset_required[quota_type], False
        return required

    def update_cluster_metadata(self, cluster: object) -> bool:
        return False

    def close(self) -> None:
        pass

    # --- test controls -------------------------------------------------------------------------------
    def scale(self, group: str, ratio: float) -> None:
        self.ratio[group] = ratio
        self._reset_required = dict.fromkeys(ClientQuotaType, True)

    @staticmethod
    def _entity_group(entity: ClientQuotaEntity) -> str:
        if not isinstance(entity.user, str) or entity.client_id is not None:
            raise ValueError(f"only user entities name group quotas, got {entity}")
        return GroupedUserQuotaCallback.group(entity.user)


def byte_rate_bound(mgr: ClientQuotaManager, tags: dict[str, str]) -> float:
    metric = mgr.metrics.metric(mgr.client_quota_metric_name(tags))
    assert metric is not None
    return metric.config.quota.bound


def test_custom_callback_is_a_client_quota_callback() -> None:
    """ClientQuotaCallback: the test callback satisfies the protocol the manager takes."""
    assert isinstance(GroupedUserQuotaCallback(), ClientQuotaCallback)


def test_custom_callback_group_quotas() -> None:
    """CustomQuotaCallbackTest.scala: users of a group share the group's quota; others are unlimited."""
    callback = GroupedUserQuotaCallback()
    mgr = ClientQuotaManager(CONFIG, QuotaType.PRODUCE, quota_callback=callback)
    assert mgr.quota_types_enabled == CUSTOM_QUOTAS
    assert mgr.quotas_enabled()  # even with no quota configured yet

    mgr.update_quota(ClientQuotaEntity(user="group1_"), 1000.0)
    assert callback.updates == [(ClientQuotaType.PRODUCE, ClientQuotaEntity(user="group1_"), 1000.0)]
    assert mgr.quota("group1_alice", "any").bound == 1000.0
    assert mgr.quota("group2_carol", "any").bound == UNLIMITED

    # alice and bob share group1's sensor: 12,000 bytes over 10 s is 1200 B/s, 20 % over for 10 s
    assert mgr.record_and_get_throttle_time_ms("group1_alice", "p1", 6000, START_MS) == 0
    assert mgr.record_and_get_throttle_time_ms("group1_bob", "p2", 6000, START_MS) == 2000
    assert mgr.metrics.get_sensor("Produce-group1") is not None
    assert mgr.quota_metric("group1_bob", "p2").tags == {GROUP_TAG: "group1"}

    # carol's group has no quota: the shared unlimited sensor
    assert mgr.record_and_get_throttle_time_ms("group2_carol", "p3", 1e9, START_MS) == 0
    assert mgr.metrics.get_sensor("Produce-") is not None


def test_custom_callback_disables_the_fast_path() -> None:
    """ClientQuotaManager with a custom callback: tags on every recording, all metrics on every change."""
    callback = GroupedUserQuotaCallback()
    mgr = ClientQuotaManager(CONFIG, QuotaType.PRODUCE, quota_callback=callback)
    mgr.update_quota(ClientQuotaEntity(user="group1_"), 1000.0)

    # no tag cache: the callback is asked on every recording, even for the same client
    calls = callback.tag_calls
    for _ in range(3):
        mgr.record_and_get_throttle_time_ms("group1_alice", "p1", 100, START_MS)
    assert callback.tag_calls == calls + 3

    # carol records while her group is unlimited, then her group gets a quota through the default
    mgr.record_and_get_throttle_time_ms("group2_carol", "p3", 50_000, START_MS)
    mgr.update_quota(ClientQuotaEntity(user="_"), 2000.0)
    # the next recording follows the callback's new tags at once: group2's own, fresh sensor
    assert mgr.record_and_get_throttle_time_ms("group2_carol", "p3", 100, START_MS) == 0
    assert quota_metric_value(mgr, "group2_carol", "p3", START_MS) == 10.0

    # a named entity's change reaches the metric tagged by group (the single-entity path would look for
    # tags {user: group1_, client-id: ""} and miss it)
    mgr.update_quota(ClientQuotaEntity(user="group1_"), 1500.0)
    assert byte_rate_bound(mgr, {GROUP_TAG: "group1"}) == 1500.0


def test_custom_callback_quota_reset_required() -> None:
    """ClientQuotaCallback.quotaResetRequired: true makes the next recording re-read every quota limit."""
    callback = GroupedUserQuotaCallback()
    mgr = ClientQuotaManager(CONFIG, QuotaType.PRODUCE, quota_callback=callback)
    mgr.update_quota(ClientQuotaEntity(user="group1_"), 1000.0)
    assert mgr.record_and_get_throttle_time_ms("group1_alice", "p1", 8000, START_MS) == 0  # 800 B/s

    # group1 leads half its partitions here now: its limit halves, outside update_quota
    callback.scale("group1", 0.5)
    assert byte_rate_bound(mgr, {GROUP_TAG: "group1"}) == 1000.0  # nothing has asked yet

    # any client's recording asks, and every quota metric gets its new limit, group1's included
    mgr.record_and_get_throttle_time_ms("group2_carol", "p3", 1, START_MS)
    assert byte_rate_bound(mgr, {GROUP_TAG: "group1"}) == 500.0
    # group1's usage is kept: 800 B/s against 500 B/s, 60 % over for 10 s
    assert mgr.record_and_get_throttle_time_ms("group1_alice", "p1", 0, START_MS) == 6000
    assert callback.quota_reset_required(ClientQuotaType.PRODUCE) is False  # the flag was consumed


def test_custom_callback_shared_by_quota_types() -> None:
    """QuotaFactory: one callback instance serves produce, fetch and request, told the quota type each time."""
    callback = GroupedUserQuotaCallback()
    produce = ClientQuotaManager(CONFIG, QuotaType.PRODUCE, quota_callback=callback)
    fetch = ClientQuotaManager(CONFIG, QuotaType.FETCH, quota_callback=callback)
    request = ClientRequestQuotaManager(CONFIG, quota_callback=callback, now_ms=START_MS)

    produce.update_quota(ClientQuotaEntity(user="group1_"), 1000.0)
    fetch.update_quota(ClientQuotaEntity(user="group1_"), 3000.0)
    request.update_quota(ClientQuotaEntity(user="group1_"), 25.0)

    assert produce.quota("group1_alice", "c").bound == 1000.0
    assert fetch.quota("group1_alice", "c").bound == 3000.0
    assert request.quota("group1_alice", "c").bound == 25.0
    assert request.quota_types_enabled == CUSTOM_QUOTAS
    assert [quota_type for quota_type, _, _ in callback.updates] == [
        ClientQuotaType.PRODUCE,
        ClientQuotaType.FETCH,
        ClientQuotaType.REQUEST,
    ]
