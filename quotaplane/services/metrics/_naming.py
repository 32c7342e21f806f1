"""Kafka's metric, group and tag names as Prometheus names: the package docstring's table, in code.

Kept apart from the gathering so the mapping a Kafka engineer reads (JMX-style group and name, mechanically
snake-cased) is one short module, testable without Ray or HTTP.
"""

from __future__ import annotations

import re

__all__ = ["ENTITY_TAGS", "USAGE_OF_GROUP", "label_name", "prometheus_name"]

#: Tags that name an entity: a series with one of them lives on exactly one shard.
ENTITY_TAGS = frozenset({"user", "client-id", "ip"})
#: The usage metric that ranks an entity's ``quota-value`` series (by group).
USAGE_OF_GROUP = {"Produce": "byte-rate", "Fetch": "byte-rate", "Request": "request-time"}
#: Groups with their own prefix; every other group is ``kafka_quota_<group>_``.
_GROUP_PREFIX = {"socket-server-metrics": "kafka_socket_server_", "client-metrics": "kafka_client_metrics_"}
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")
_NOT_LABEL = re.compile(r"[^a-zA-Z0-9_]+")


def _snake(text: str) -> str:
    return _NOT_ALNUM.sub("_", text.lower()).strip("_")


def prometheus_name(name: str, group: str) -> str:
    """The Prometheus name of Kafka's metric ``name`` in ``group`` (the package docstring's table).

    >>> prometheus_name("byte-rate", "Produce")
    'kafka_quota_produce_byte_rate'
    >>> prometheus_name("connection-accept-rate", "socket-server-metrics")
    'kafka_socket_server_connection_accept_rate'
    """
    if group == "kafka-metrics-count" and name == "count":
        return "kafka_metrics_count"
    prefix = _GROUP_PREFIX.get(group)
    if prefix is None:
        prefix = f"kafka_quota_{_snake(group)}_"
    return prefix + _snake(name)


def label_name(tag: str) -> str:
    """A Kafka tag name as a Prometheus label name (``client-id`` -> ``client_id``).

    >>> label_name("client-id")
    'client_id'
    """
    label = _NOT_LABEL.sub("_", tag).strip("_") or "tag"  # no leading ``__``: Prometheus reserves it
    return "_" + label if label[0].isdigit() else label
