"""kafka-configs.sh's entity options: ``--entity-type`` with ``--entity-name`` / ``--entity-default``.

Shared by ``quotas``, ``configs`` and ``log``, which pair the options the way kafka-configs.sh does (in
the order given, the default entity as ""), so the same command line names the same entity in each.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["QUOTA_ENTITY_TYPES", "add_entity_options", "describe_components", "entity_data", "entity_pairs"]

#: kafka-configs.sh's entity types for client quotas, and the entity type each one names.
QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}


def add_entity_options(parser: argparse.ArgumentParser, types: Sequence[str]) -> None:
    parser.add_argument(
        "--entity-type", action="append", choices=types, help=f"entity type ({', '.join(types)}); repeatable"
    )
    parser.add_argument("--entity-name", action="append", dest="entity_names", help="name of the entity")
    parser.add_argument(
        "--entity-default",
        action="append_const",
        const="",
        dest="entity_names",
        help="the default entity of the matching --entity-type",
    )


def entity_pairs(
    parser: argparse.ArgumentParser, types: Sequence[str] | None, names: Sequence[str] | None
) -> list[tuple[str, str | None]]:
    """kafka-configs.sh's pairing of ``--entity-type`` with ``--entity-name`` / ``--entity-default`` (in the
    order given; "" is the default; a type without a name is ``None``: any name)."""
    types, names = list(types or ()), list(names or ())
    if len(names) > len(types):
        parser.error("More entity names specified than entity types")
    return [(t, names[i] if i < len(names) else None) for i, t in enumerate(types)]


def describe_components(pairs: Sequence[tuple[str, str | None]]) -> list:
    """The pairs as DescribeClientQuotas' filter: a name matches exactly, "" the default, None any name."""
    from quotaplane.v1 import admin_pb2 as pb

    components = []
    for entity_type, name in pairs:
        component = pb.DescribeClientQuotasRequest.ComponentData(entity_type=QUOTA_ENTITY_TYPES[entity_type])
        if name is None:
            component.match_type = pb.MATCH_TYPE_SPECIFIED
        elif name == "":
            component.match_type = pb.MATCH_TYPE_DEFAULT
        else:
            component.match_type, component.match = pb.MATCH_TYPE_EXACT, name
        components.append(component)
    return components


def entity_data(pairs: Sequence[tuple[str, str | None]]) -> list:
    """The named pairs as the config log's ``EntityData`` (the default entity has no name)."""
    from quotaplane.v1 import config_events_pb2 as events_pb

    entity = []
    for entity_type, name in pairs:
        data = events_pb.EntityData(entity_type=QUOTA_ENTITY_TYPES[entity_type])
        if name:
            data.entity_name = name
        entity.append(data)
    return entity
