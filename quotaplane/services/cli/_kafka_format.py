"""The text of Kafka's tools, in and out: what kafka-configs.sh prints and the values it parses.

An operator's scripts and muscle memory carry over only if the lines are Kafka's, character for character:
quota values as Java's ``Double.toString`` (``1048576.0``, ``1.0E7``), entities named as kafka-configs.sh
names them, config lists split as kafka-configs.sh splits them (commas inside ``[...]`` kept). Kept apart
from the commands so each command's module is about what it asks the AdminService, not how it prints.

One difference, on purpose: Kafka accepts any character in a name or value, control characters included,
and so does quotaplane, but kafka-configs.sh prints them raw, so a name holding a newline splits its describe
line in two. Every name and value printed here goes through :func:`escaped` (``quotaplane.config.shown``:
``\\n``, ``\\x1b``, ``\\u2028``, a backslash doubled), so each entity stays one line and the escaping can be
undone; names without such characters or a backslash print as Kafka's tools print them.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from quotaplane.v1 import admin_pb2 as pb

__all__ = [
    "escaped",
    "history_value",
    "iso_ms",
    "java_double",
    "print_quotas",
    "quota_line",
    "split_configs",
    "time_ms",
]

#: How kafka-configs.sh names each entity type when it describes quotas.
_DESCRIBED_TYPE = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


def escaped(text: str) -> str:
    """``text`` on one line: control characters, line separators, lone surrogates and backslashes escaped.

    >>> escaped("alice"), escaped("a\\nb"), escaped("DOMAIN\\\\bob")
    ('alice', 'a\\\\nb', 'DOMAIN\\\\\\\\bob')
    """
    from quotaplane.config import shown  # lazily: building the parser stays light

    return shown(text, limit=len(text))


def java_double(value: float) -> str:
    """Java's ``Double.toString``, as kafka-configs.sh prints quota values (1048576.0, 1.0E7).

    >>> [java_double(v) for v in (1048576.0, 1e7, 0.5, 1.5e-4, -0.0)]
    ['1048576.0', '1.0E7', '0.5', '1.5E-4', '-0.0']
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        return repr(value)  # Python's repr is the shortest round-trip decimal, fixed-point in this range
    sign, digits, exponent = decimal.Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    power = exponent + len(digits) - 1
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def iso_ms(time_ms: int) -> str:
    """Epoch milliseconds as ISO 8601 in UTC, to the millisecond.

    >>> iso_ms(1_700_000_000_123)
    '2023-11-14T22:13:20.123Z'
    """
    moment = datetime.datetime.fromtimestamp(time_ms // 1000, datetime.UTC).replace(microsecond=time_ms % 1000 * 1000)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def time_ms(text: str) -> int:
    """A time given as epoch milliseconds or ISO 8601 (a time without zone is UTC); an argparse type."""
    text = text.strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: expected ISO 8601 (2024-05-01T12:00:00Z) or milliseconds since the epoch"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (moment - epoch) // datetime.timedelta(milliseconds=1)


def split_configs(text: str) -> list[str]:
    """kafka-configs.sh's config list: comma-separated, commas inside [...] kept (``k=[a,b],k2=v``).

    >>> split_configs("k=[a,b], k2=v,")
    ['k=[a,b]', 'k2=v']
    """
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def quota_line(entry: pb.DescribeClientQuotasResponse.EntryData) -> str:
    """kafka-configs.sh's describe line: ``Quota configs for user-principal 'alice' are k=v, ...``."""
    names = {e.entity_type: (e.entity_name if e.HasField("entity_name") else None) for e in entry.entity}
    parts = []
    for entity_type in ("user", "client-id", "ip"):
        if entity_type in names:
            shown = _DESCRIBED_TYPE[entity_type]
            name = names[entity_type]
            parts.append(f"the default {shown}" if name is None else f"{shown} '{escaped(name)}'")
    values = ", ".join(f"{escaped(v.key)}={java_double(v.value)}" for v in entry.values)
    return f"Quota configs for {', '.join(parts)} are {values}"


def print_quotas(entries: Sequence[pb.DescribeClientQuotasResponse.EntryData]) -> None:
    for line in sorted(quota_line(e) for e in entries):
        print(line)


def history_value(value: pb.HistoryValue) -> str:
    """A value in the config log's history: a quota as kafka-configs.sh prints it, a config as given, a
    client-metrics resource as its set fields, ``(unset)`` for none."""
    kind = value.WhichOneof("value")
    if kind is None:
        return "(unset)"
    if kind == "quota_value":
        return java_double(value.quota_value)
    if kind == "config_value":
        return escaped(value.config_value)
    record = value.client_metrics
    shown = []
    if record.HasField("metrics"):
        shown.append(f"metrics={escaped(record.metrics)}")
    if record.HasField("interval_ms"):
        shown.append(f"interval.ms={record.interval_ms}")
    if record.HasField("match"):
        shown.append(f"match={escaped(record.match)}")
    return "{" + ", ".join(shown) + "}"
