"""Conversions between the AdminService's protobuf messages and the ``quotaplane.config`` types.

The servicer only translates; these are the translations both ways that more than one RPC uses (entities,
describe filters and entries, per-entry results, audit values).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from quotaplane.config import ClientQuotaFilterComponent, MatchType, Result, client_metrics_event, entity_data
from quotaplane.v1 import admin_pb2 as pb
from quotaplane.v1 import config_events_pb2 as events_pb

__all__ = ["entity_pairs", "filter_components", "history_value", "quota_entries", "result_fields"]


def entity_pairs(entity: Iterable[events_pb.EntityData]) -> list[tuple[str, str | None]]:
    """An entity's ``(entity type, name or None for the default)`` pairs."""
    return [(e.entity_type, e.entity_name if e.HasField("entity_name") else None) for e in entity]


def filter_components(
    messages: Iterable[pb.DescribeClientQuotasRequest.ComponentData],
) -> list[ClientQuotaFilterComponent]:
    """A describe filter as the config's components."""
    out = []
    for c in messages:
        # an unknown code goes through as is: the describe refuses it with Kafka's message
        match_type = MatchType(c.match_type) if c.match_type in tuple(MatchType) else c.match_type
        out.append(ClientQuotaFilterComponent(c.entity_type, match_type, c.match if c.HasField("match") else None))
    return out


def quota_entries(
    found: Iterable[tuple[Mapping[str, str | None], Mapping[str, float]]],
) -> list[pb.DescribeClientQuotasResponse.EntryData]:
    """Described ``(entity, quotas)`` as response entries, entities and keys sorted."""
    entry_type = pb.DescribeClientQuotasResponse.EntryData
    value_type = pb.DescribeClientQuotasResponse.ValueData
    return [
        entry_type(
            entity=entity_data(sorted(entity.items())),
            values=[value_type(key=k, value=v) for k, v in sorted(quotas.items())],
        )
        for entity, quotas in found
    ]


def result_fields(result: Result) -> dict[str, Any]:
    """A per-entry Kafka result as response fields (the message only for an error)."""
    fields: dict[str, Any] = {"error_code": int(result.error)}
    if not result.ok:
        fields["error_message"] = result.message or result.error.name
    return fields


def history_value(value: object, kind: str, name: str) -> pb.HistoryValue:
    """An audited old or new value (None: unset) as the response's oneof for the target ``kind``."""
    if value is None:
        return pb.HistoryValue()
    if kind == "entity":
        return pb.HistoryValue(quota_value=float(value))  # type: ignore[arg-type]
    if kind == "client_metrics":
        assert isinstance(value, Mapping)
        return pb.HistoryValue(client_metrics=client_metrics_event(name, value).client_metrics)
    return pb.HistoryValue(config_value=str(value))
