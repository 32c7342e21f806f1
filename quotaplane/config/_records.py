"""Building and reading the config records (``quotaplane.v1`` ``Event``s): the one place that knows their
shape, used by the admin planners, the image, its snapshots, the columnar codec and the audits.

>>> event = client_quota_event((("client-id", None), ("user", "alice")), "producer_byte_rate", 1024.0)
>>> record_entity(event.client_quota), event.client_quota.value
((('client-id', None), ('user', 'alice')), 1024.0)
>>> client_metrics_configs(client_metrics_event("sub", {"metrics": "*", "interval.ms": "1000"}).client_metrics)
{'metrics': '*', 'interval.ms': '1000'}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..telemetry import INTERVAL_MS_CONFIG, MATCH_CONFIG, METRICS_CONFIG
from ..v1 import config_events_pb2 as pb
from ._client_quotas import EntityKey
from ._dynamic_configs import ConfigResourceType

__all__ = [
    "client_metrics_configs",
    "client_metrics_event",
    "client_quota_event",
    "config_event",
    "entity_data",
    "record_entity",
]


def record_entity(record: pb.ClientQuotaRecord) -> EntityKey:
    """A client-quota record's entity as its key: (type, name or None for the default) sorted by type."""
    return tuple(
        sorted(
            ((e.entity_type, e.entity_name if e.HasField("entity_name") else None) for e in record.entity),
            key=lambda pair: pair[0],
        )
    )


def entity_data(entity: EntityKey | Iterable[tuple[str, str | None]]) -> list[pb.EntityData]:
    """An entity as the records' (and the admin API's) ``EntityData`` components; no name = the default."""
    return [
        pb.EntityData(entity_type=entity_type)
        if name is None
        else pb.EntityData(entity_type=entity_type, entity_name=name)
        for entity_type, name in entity
    ]


def client_quota_event(entity: EntityKey, key: str, value: float | None) -> pb.Event:
    """Set ``key`` of ``entity`` to ``value``, or remove it (``value`` None)."""
    event = pb.Event()
    record = event.client_quota
    record.entity.extend(entity_data(entity))
    record.key = key
    if value is None:
        record.remove = True
    else:
        record.value = value
    return event


def client_metrics_configs(record: pb.ClientMetricsRecord) -> dict[str, str]:
    """The resource's configs as Kafka's strings (empty for a deletion or a resource with none)."""
    configs: dict[str, str] = {}
    if record.delete:
        return configs
    if record.HasField("metrics"):
        configs[METRICS_CONFIG] = record.metrics
    if record.HasField("interval_ms"):
        configs[INTERVAL_MS_CONFIG] = str(record.interval_ms)
    if record.HasField("match"):
        configs[MATCH_CONFIG] = record.match
    return configs


def client_metrics_event(name: str, configs: Mapping[str, str]) -> pb.Event:
    """The whole resource as it is after a change (validated configs); no configs deletes it."""
    event = pb.Event()
    record = event.client_metrics
    record.name = name
    if not configs:
        record.delete = True
        return event
    if METRICS_CONFIG in configs:
        record.metrics = configs[METRICS_CONFIG]
    if INTERVAL_MS_CONFIG in configs:
        record.interval_ms = int(configs[INTERVAL_MS_CONFIG].strip())
    if MATCH_CONFIG in configs:
        record.match = configs[MATCH_CONFIG]
    return event


def config_event(resource_type: ConfigResourceType | int, resource_name: str, name: str, value: str | None) -> pb.Event:
    """Set (or, ``value`` None, delete) one BROKER or TOPIC config."""
    event = pb.Event()
    record = event.config
    record.resource_type = int(resource_type)
    record.resource_name = resource_name
    record.name = name
    if value is not None:
        record.value = value
    return event
