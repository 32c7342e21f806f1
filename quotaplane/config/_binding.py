"""ManagerBinding: turns config deltas into in-place updates of the quota, connection, producer-id and
telemetry managers of one shard or node.

A config change never resets usage: a quota change swaps the bound of the live sensors (their samples
stay), a client-metrics change replaces one subscription, a connection limit is reconfigured in place.
Keys Kafka reads only at start-up (quota windows, ``telemetry.max.bytes``, producer-id filter settings)
are collected in ``restart_required`` and read by :func:`startup_configs` when managers are built.
``client.quota.value.metric.enable`` (KIP-786) is read-only in Kafka but dynamic here: :func:`startup_configs`
gives its value to managers being built, and a change switches the live managers' quota-value metric at once.

``node_id`` is the node whose BROKER overrides apply (its own value, else the cluster default ``""``);
``None`` is a fleet-wide shard, which reads the cluster default only and ignores topic throttled
replicas (those are per node).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ..quota import (
    ConnectionQuotas,
    ProducerIdQuotaManager,
    ProducerIdQuotaManagerConfig,
    QuotaConfig,
    QuotaManagers,
    parse_throttled_replicas,
)
from ..telemetry import ClientMetricsManager
from ._client_quotas import (
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    PRODUCER_IDS_RATE,
    REQUEST_PERCENTAGE,
    to_client_quota_entity,
)
from ._dynamic_configs import (
    LEASE_MS_CONFIG,
    LEASE_QUOTA_TYPES_CONFIG,
    LISTENER_CONFIG_PREFIX,
    SHARD_COUNT_CONFIG,
    ConfigResourceType,
    broker_config_spec,
    parse_config_value,
)
from ._image import Change, ClientMetricsChange, ClientQuotaChange, ConfigChange, ConfigDelta, ConfigImage

__all__ = ["ManagerBinding", "StartupConfigs", "changes_between", "effective_broker_config", "startup_configs"]

log = logging.getLogger(__name__)

_CONNECTION_KEYS = frozenset(
    {"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connection.creation.rate"}
)
_REPLICATION_RATE_KEYS = {
    "leader.replication.throttled.rate": "leader",
    "follower.replication.throttled.rate": "follower",
    "replica.alter.log.dirs.io.max.bytes.per.second": "alter_log_dirs",
}
_THROTTLED_REPLICAS_KEYS = {
    "leader.replication.throttled.replicas": "leader",
    "follower.replication.throttled.replicas": "follower",
}
_QUOTA_STARTUP_KEYS = (
    "quota.window.num",
    "quota.window.size.seconds",
    "controller.quota.window.num",
    "controller.quota.window.size.seconds",
    "replication.quota.window.num",
    "replication.quota.window.size.seconds",
    "alter.log.dirs.replication.quota.window.num",
    "alter.log.dirs.replication.quota.window.size.seconds",
    "client.quota.value.metric.enable",  # also dynamic (QUOTA_VALUE_METRIC_CONFIG): read here for a build
)
#: KIP-786's switch: applied to the live managers by ``ManagerBinding`` (a restart is not needed).
QUOTA_VALUE_METRIC_CONFIG = "client.quota.value.metric.enable"
_CLIENT_QUOTA_MANAGERS = {
    PRODUCER_BYTE_RATE: "produce",
    CONSUMER_BYTE_RATE: "fetch",
    REQUEST_PERCENTAGE: "request",
    CONTROLLER_MUTATION_RATE: "controller_mutation",
}


def effective_broker_config(image: ConfigImage, name: str, node_id: int | None) -> str | None:
    """The value a node uses: its own override, else the cluster default, else None (Kafka's default)."""
    if node_id is not None:
        own = image.configs(ConfigResourceType.BROKER, str(node_id)).get(name)
        if own is not None:
            return own
    return image.configs(ConfigResourceType.BROKER, "").get(name)


def _typed(name: str, value: str | None) -> object:
    if value is None:
        return None
    spec = broker_config_spec(name)
    assert spec is not None, name
    return parse_config_value(spec, value)


@dataclass(frozen=True, slots=True)
class StartupConfigs:
    """The start-up settings an image holds for one node, as the managers' config objects take them."""

    quota: QuotaConfig
    producer_ids: ProducerIdQuotaManagerConfig
    telemetry_max_bytes: int | None
    connection_configs: dict[str, object]


def startup_configs(image: ConfigImage, node_id: int | None = None) -> StartupConfigs:
    """What a shard needs to build its managers from the log (quota windows, KIP-786 switch, producer-id
    filter shape, ``telemetry.max.bytes``, the connection limits)."""

    def value(name: str) -> object:
        return _typed(name, effective_broker_config(image, name, node_id))

    quota_kwargs = {}
    for config_name in _QUOTA_STARTUP_KEYS:
        parsed = value(config_name)
        if parsed is not None:
            quota_kwargs[config_name.replace(".", "_")] = parsed  # QuotaConfig's fields are the names in snake_case
    producer_props = {
        name: parsed for name in ProducerIdQuotaManagerConfig.PROPERTY_NAMES if (parsed := value(name)) is not None
    }
    connection = {
        name: parsed
        for name in [*sorted(_CONNECTION_KEYS), "quota.window.num", "quota.window.size.seconds"]
        if (parsed := effective_broker_config(image, name, node_id)) is not None
    }
    max_bytes = value("telemetry.max.bytes")
    return StartupConfigs(
        quota=QuotaConfig(**quota_kwargs),
        producer_ids=ProducerIdQuotaManagerConfig.from_properties(producer_props),
        telemetry_max_bytes=max_bytes if isinstance(max_bytes, int) else None,
        connection_configs=connection,
    )


def changes_between(old: ConfigImage, new: ConfigImage) -> list[Change]:
    """The changes that turn ``old`` into ``new`` (to resynchronise managers after a catch-up)."""
    changes: list[Change] = []
    old_quotas, new_quotas = old.client_quotas(), new.client_quotas()
    for entity in old_quotas.keys() | new_quotas.keys():
        before, after = old_quotas.get(entity, {}), new_quotas.get(entity, {})
        for key in before.keys() | after.keys():
            if before.get(key) != after.get(key):
                changes.append(ClientQuotaChange(entity, key, before.get(key), after.get(key)))
    old_metrics, new_metrics = old.client_metrics(), new.client_metrics()
    for name in old_metrics.keys() | new_metrics.keys():
        if old_metrics.get(name) != new_metrics.get(name):
            changes.append(ClientMetricsChange(name, old_metrics.get(name), new_metrics.get(name)))
    resources = set(old.config_resources()) | set(new.config_resources())
    for rtype, rname in sorted(resources):
        before, after = old.configs(rtype, rname), new.configs(rtype, rname)
        for key in sorted(before.keys() | after.keys()):
            if before.get(key) != after.get(key):
                changes.append(ConfigChange(rtype, rname, key, before.get(key), after.get(key)))
    return changes


class ManagerBinding:
    """Applies config changes to the managers it holds (any of them may be absent)."""

    def __init__(
        self,
        *,
        quotas: QuotaManagers | None = None,
        connections: ConnectionQuotas | None = None,
        producer_ids: ProducerIdQuotaManager | None = None,
        telemetry: ClientMetricsManager | None = None,
        node_id: int | None = None,
    ) -> None:
        self.quotas = quotas
        self.connections = connections
        self.producer_ids = producer_ids
        self.telemetry = telemetry
        self.node_id = node_id
        #: start-up keys changed since the managers were built: they apply on the next start
        self.restart_required: set[str] = set()

    def load(self, image: ConfigImage) -> None:
        """Push a whole image into freshly built managers."""
        self.apply_changes(changes_between(ConfigImage(), image), image)

    def apply(self, delta: ConfigDelta, image: ConfigImage) -> None:
        """Apply one event's delta; ``image`` is the image after it (for effective broker values)."""
        self.apply_changes(delta.changes, image)

    def apply_changes(self, changes: Iterable[Change], image: ConfigImage) -> None:
        for change in changes:
            if isinstance(change, ClientQuotaChange):
                self._client_quota(change)
            elif isinstance(change, ClientMetricsChange):
                if self.telemetry is not None:
                    self.telemetry.update_subscription(change.name, change.new or {})
            elif change.resource_type is ConfigResourceType.BROKER:
                self._broker_config(change, image)
            else:
                self._topic_config(change)

    def _client_quota(self, change: ClientQuotaChange) -> None:
        key, bound = change.key, change.new
        manager_name = _CLIENT_QUOTA_MANAGERS.get(key)
        if manager_name is not None:
            if self.quotas is not None:
                getattr(self.quotas, manager_name).update_quota(to_client_quota_entity(change.entity), bound)
        elif key == PRODUCER_IDS_RATE:
            if self.producer_ids is not None:
                self.producer_ids.update_quota(to_client_quota_entity(change.entity), bound)
        elif key == CONNECTION_CREATION_RATE:
            if self.connections is not None:
                ip = dict(change.entity)[IP]
                self.connections.update_ip_connection_rate_quota(ip, None if bound is None else int(bound))
        else:
            log.warning("ignoring unknown client quota key %s of %s", key, change.entity)

    def _broker_config(self, change: ConfigChange, image: ConfigImage) -> None:
        if change.resource_name not in ("", str(self.node_id) if self.node_id is not None else ""):
            return  # another node's override
        name = change.name
        value = effective_broker_config(image, name, self.node_id)
        if name in _CONNECTION_KEYS or name.startswith(LISTENER_CONFIG_PREFIX):
            if self.connections is not None:
                try:
                    self.connections.reconfigure({name: value})
                except ValueError as e:  # e.g. a listener this node does not have (yet)
                    log.warning("connection config %s=%s not applied on this node: %s", name, value, e)
        elif name in _REPLICATION_RATE_KEYS:
            if self.quotas is not None:
                rate = _typed(name, value)
                getattr(self.quotas, _REPLICATION_RATE_KEYS[name]).update_quota(
                    None if rate is None else float(rate)  # type: ignore[arg-type]
                )
        elif name == QUOTA_VALUE_METRIC_CONFIG:
            if self.quotas is not None:
                # unset (deleted): the spec's default (on), what a shard built now would use
                spec = broker_config_spec(name)
                assert spec is not None and spec.default is not None
                enabled = _typed(name, value if value is not None else spec.default)
                self.quotas.set_quota_value_metric_enabled(enabled is True)
        elif name not in (SHARD_COUNT_CONFIG, LEASE_QUOTA_TYPES_CONFIG, LEASE_MS_CONFIG):
            # the shard count is placement, acted on by the shard host; the lease settings are read from the
            # image where they are used (``lease_settings``): neither waits for a restart
            self.restart_required.add(name)

    def _topic_config(self, change: ConfigChange) -> None:
        manager_name = _THROTTLED_REPLICAS_KEYS.get(change.name)
        if manager_name is None or self.quotas is None or self.node_id is None:
            return
        manager = getattr(self.quotas, manager_name)
        if change.new is None:
            manager.remove_throttle(change.resource_name)
        else:
            manager.mark_throttled_replicas(
                change.resource_name, parse_throttled_replicas(change.new, name=change.name), self.node_id
            )
