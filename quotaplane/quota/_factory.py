"""One function that builds every quota manager of a broker (Kafka's ``QuotaFactory``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..metrics import Metrics
from ._callback import ClientQuotaCallback
from ._client import ClientQuotaManager, ClientQuotaManagerConfig
from ._controller_mutation import ControllerMutationQuotaManager
from ._replication import ReplicationQuotaManager, ReplicationQuotaManagerConfig
from ._request import ClientRequestQuotaManager
from ._types import QuotaType

__all__ = ["QuotaConfig", "QuotaManagers", "build_quota_managers"]


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaConfig:
    """Kafka's quota settings, by their broker config names in snake_case (defaults are Kafka's, except
    ``client_quota_value_metric_enable``: KIP-786's quota-value series exist as soon as a quota applies to an
    active entity, without an operator setting a read-only config and restarting as Kafka asks)."""

    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    controller_quota_window_num: int = 11
    controller_quota_window_size_seconds: int = 1
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    alter_log_dirs_replication_quota_window_num: int = 11
    alter_log_dirs_replication_quota_window_size_seconds: int = 1
    client_quota_value_metric_enable: bool = True


@dataclass(frozen=True, slots=True)
class QuotaManagers:
    fetch: ClientQuotaManager
    produce: ClientQuotaManager
    request: ClientRequestQuotaManager
    controller_mutation: ControllerMutationQuotaManager
    leader: ReplicationQuotaManager
    follower: ReplicationQuotaManager
    alter_log_dirs: ReplicationQuotaManager
    metrics: Metrics

    def client_manager(self, quota_type: QuotaType | str) -> ClientQuotaManager:
        """The client quota manager for PRODUCE, FETCH, REQUEST or CONTROLLER_MUTATION."""
        quota_type = QuotaType.parse(quota_type)
        managers = {
            QuotaType.PRODUCE: self.produce,
            QuotaType.FETCH: self.fetch,
            QuotaType.REQUEST: self.request,
            QuotaType.CONTROLLER_MUTATION: self.controller_mutation,
        }
        try:
            return managers[quota_type]
        except KeyError:
            raise ValueError(f"{quota_type} is not a client quota type") from None

    def expire_sensors(self, now_ms: int) -> list[str]:
        return self.metrics.expire_sensors(now_ms)

    def set_quota_value_metric_enabled(self, enabled: bool) -> None:
        """``client.quota.value.metric.enable`` at runtime: KIP-786's quota-value metric of the produce, fetch and
        request managers (the ones Kafka gives one) added for every live sensor, or removed."""
        for manager in (self.produce, self.fetch, self.request):
            manager.set_quota_value_metric_enabled(enabled)


def build_quota_managers(
    config: QuotaConfig | None = None,
    *,
    metrics: Metrics | None = None,
    quota_callback: ClientQuotaCallback | None = None,
    now_ms: int = 0,
) -> QuotaManagers:
    """Every quota manager, sharing one metrics registry (and the custom callback, if any)."""
    config = config if config is not None else QuotaConfig()
    metrics = metrics if metrics is not None else Metrics()
    client = ClientQuotaManagerConfig(
        num_quota_samples=config.quota_window_num,
        quota_window_size_seconds=config.quota_window_size_seconds,
        client_quota_value_metric_enable=config.client_quota_value_metric_enable,
    )
    mutation = ClientQuotaManagerConfig(
        num_quota_samples=config.controller_quota_window_num,
        quota_window_size_seconds=config.controller_quota_window_size_seconds,
    )
    replication = ReplicationQuotaManagerConfig(
        config.replication_quota_window_num, config.replication_quota_window_size_seconds
    )
    alter_log_dirs = ReplicationQuotaManagerConfig(
        config.alter_log_dirs_replication_quota_window_num,
        config.alter_log_dirs_replication_quota_window_size_seconds,
    )
    return QuotaManagers(
        fetch=ClientQuotaManager(client, QuotaType.FETCH, metrics=metrics, quota_callback=quota_callback),
        produce=ClientQuotaManager(client, QuotaType.PRODUCE, metrics=metrics, quota_callback=quota_callback),
        request=ClientRequestQuotaManager(client, metrics=metrics, quota_callback=quota_callback, now_ms=now_ms),
        controller_mutation=ControllerMutationQuotaManager(mutation, metrics=metrics, quota_callback=quota_callback),
        leader=ReplicationQuotaManager(replication, QuotaType.LEADER_REPLICATION, metrics=metrics),
        follower=ReplicationQuotaManager(replication, QuotaType.FOLLOWER_REPLICATION, metrics=metrics),
        alter_log_dirs=ReplicationQuotaManager(alter_log_dirs, QuotaType.ALTER_LOG_DIRS_REPLICATION, metrics=metrics),
        metrics=metrics,
    )
