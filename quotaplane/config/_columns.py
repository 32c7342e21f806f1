"""The columnar batch payload of the log and of snapshots (``EventColumns``), and the entity ids it uses.

An ``Event`` is the logical record, shaped as Kafka's metadata records. On disk a batch of events is
stored by column: with upb, touching a protobuf message costs a few hundred nanoseconds per field,
while turning a repeated scalar field into a Python list is one C call. A replay reads each column once
and then runs on plain lists, which is what lets an image catch up at several hundred thousand events
per second.

A client-quota entity is stored as its canonical id: the JSON array of its ``[type, name or null]``
pairs sorted by type (``[["client-id",null],["user","alice"]]``). Equal entities have equal ids, the
image keys its dicts by them (a string caches its hash, a tuple of tuples does not), and an id is
decoded once per process (:func:`entity_of`).

Every column upb hands out is turned into new Python objects at each read (a string is decoded again, an
int or float allocated), which is most of what a replay costs. So :func:`decode_columns` reads the kinds
and the entity ids once, for its checks, and keeps those two lists for the batch it parsed last:
:func:`kinds_and_entities` gives them to the replay instead of a second conversion (and the ids come
with their hashes computed, which the image's dict lookups reuse). A decoded batch is read-only, as the
log and the followers hand it out: one grown or shrunk afterwards gets fresh lists, one whose values were
overwritten in place would not.

>>> from quotaplane.v1 import config_events_pb2 as pb
>>> event = pb.Event(commit_time_ms=5, principal="User:ops", request_id="r1")
>>> event.client_quota.entity.add(entity_type="user", entity_name="alice")
entity_type: "user"
entity_name: "alice"
<BLANKLINE>
>>> event.client_quota.key, event.client_quota.value = "producer_byte_rate", 1024.0
>>> columns = decode_columns(encode_events([event]))
>>> list(columns.quota_entity), events_of(columns) == [event]
(['[["user","alice"]]'], True)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Final

from ..v1 import config_events_pb2 as pb
from ._client_quotas import EntityKey
from ._records import client_quota_event

__all__ = [
    "KIND_CLIENT_METRICS",
    "KIND_CLIENT_QUOTA",
    "KIND_CONFIG",
    "check_records",
    "decode_columns",
    "encode_events",
    "encoded_size_bound",
    "entity_id",
    "entity_of",
    "events_of",
    "kinds_and_entities",
    "record_entity_id",
    "slice_columns",
]

KIND_CLIENT_QUOTA: Final = pb.RECORD_KIND_CLIENT_QUOTA
KIND_CLIENT_METRICS: Final = pb.RECORD_KIND_CLIENT_METRICS
KIND_CONFIG: Final = pb.RECORD_KIND_CONFIG

#: Entity ids already checked canonical: a batch whose ids are all here costs one set lookup per event
#: (the id's hash, which the str then caches) instead of a set build and a cached ``entity_of`` call per
#: distinct id. Bounded as ``entity_of``'s cache: cleared when full (the ids are then checked again).
_CANONICAL_IDS_LIMIT: Final = 1 << 16
_canonical_ids: set[str] = set()

#: ``(columns, kinds, entity ids)`` of the batch ``decode_columns`` parsed last (see ``kinds_and_entities``);
#: replaced whole, so a reader on another thread sees one batch's lists or another's, never a mix.
_last_decoded: tuple[pb.EventColumns | None, list[int], list[str]] = (None, [], [])


def entity_id(entity: EntityKey) -> str:
    """The canonical id of an entity key (pairs sorted by type)."""
    return json.dumps([list(pair) for pair in sorted(entity, key=lambda pair: pair[0])], separators=(",", ":"))


@lru_cache(maxsize=1 << 16)
def _pairs_id(pairs: tuple[tuple[str, str | None], ...]) -> str:
    return entity_id(pairs)


def record_entity_id(record: pb.ClientQuotaRecord) -> str:
    """The canonical id of a record's entity, as ``entity_id(record_entity(record))`` (cached by its pairs
    as written: an appender pays one read of the entity's fields, not a sort and a JSON encoding)."""
    return _pairs_id(
        tuple((e.entity_type, e.entity_name if e.HasField("entity_name") else None) for e in record.entity)
    )


@lru_cache(maxsize=1 << 16)
def entity_of(entity_id_: str) -> EntityKey:
    """The entity key of a canonical id (cached: a fleet has far fewer entities than config events)."""
    try:
        pairs = json.loads(entity_id_)
        key = tuple((t, n) for t, n in pairs)
        canonical = all(isinstance(t, str) and (n is None or isinstance(n, str)) for t, n in key)
    except (ValueError, TypeError) as e:
        raise ValueError(f"not a client-quota entity id: {entity_id_!r}") from e
    if not key or not canonical or entity_id(key) != entity_id_:
        raise ValueError(f"not a canonical client-quota entity id: {entity_id_!r}")
    return key


#: What ``encode_events`` and ``check_records`` say of an event without a record (a batch column needs its kind).
_NO_RECORD: Final = "an event must carry a record (client_quota, client_metrics or config)"

#: ``encoded_size_bound``'s factor and per-event slack. ``encode_events`` writes an event's strings as the event
#: holds them, except a client quota's entity, written as its JSON id: ``json.dumps`` escapes one byte of a name
#: into at most six (``\u0000``; a non-ASCII character's UTF-8 bytes into 6 or 12), and each pair's brackets,
#: quotes, comma and ``null`` (10 bytes for ``["",null],``) are fewer than six times the 2 bytes of tag and
#: length the pair takes at least in the event. A column value the event leaves out when it is zero or empty (the
#: time, the quota value, the remove flag, the kind, an empty principal's tag and length) and the per-call tags
#: and lengths of the columns are the slack.
_SIZE_FACTOR: Final = 6
_SIZE_SLACK: Final = 128


def encoded_size_bound(events: Sequence[pb.Event]) -> int:
    """An upper bound of ``len(encode_events(events))`` from the events' own serialized sizes (``ByteSize``,
    cheaper than encoding): what the event log checks an append against before it encodes the append with the
    rest of its round."""
    return sum(_SIZE_FACTOR * event.ByteSize() + _SIZE_SLACK for event in events)


def check_records(events: Sequence[pb.Event]) -> None:
    """ValueError unless every event carries a record, as ``encode_events`` raises it: the one thing about an
    event that encoding it can refuse."""
    for event in events:
        if event.WhichOneof("record") is None:
            raise ValueError(_NO_RECORD)


def encode_events(events: Sequence[pb.Event], offsets: Iterable[int] | None = None) -> bytes:
    """Serialize events as one ``EventColumns`` (``offsets`` for snapshot frames only)."""
    columns = pb.EventColumns()
    if offsets is not None:
        columns.offset.extend(offsets)
        if len(columns.offset) != len(events):
            raise ValueError(f"{len(columns.offset)} offsets for {len(events)} events")
    times, principals, request_ids, kinds = [], [], [], []
    entities, keys, values, removes = [], [], [], []
    for event in events:
        times.append(event.commit_time_ms)
        principals.append(event.principal)
        request_ids.append(event.request_id)
        kind = event.WhichOneof("record")
        if kind == "client_quota":
            record = event.client_quota
            kinds.append(KIND_CLIENT_QUOTA)
            entities.append(record_entity_id(record))
            keys.append(record.key)
            values.append(record.value)
            removes.append(record.remove)
        elif kind == "client_metrics":
            kinds.append(KIND_CLIENT_METRICS)
            columns.client_metrics.append(event.client_metrics)
        elif kind == "config":
            kinds.append(KIND_CONFIG)
            columns.config.append(event.config)
        else:
            raise ValueError(_NO_RECORD)
    columns.commit_time_ms.extend(times)
    columns.principal.extend(principals)
    columns.request_id.extend(request_ids)
    columns.kind.extend(kinds)
    columns.quota_entity.extend(entities)
    columns.quota_key.extend(keys)
    columns.quota_value.extend(values)
    columns.quota_remove.extend(removes)
    return columns.SerializeToString()


def decode_columns(payload: bytes) -> pb.EventColumns:
    """Parse a batch payload; a payload that is not ``EventColumns``, whose columns disagree in length or
    that holds a malformed entity id is a ValueError.

    The batch is for reading: its kind and entity-id lists are kept for the replay (``kinds_and_entities``),
    which notices a batch grown or shrunk afterwards but not a value overwritten in place.
    """
    try:
        columns = pb.EventColumns.FromString(payload)
    except Exception as e:  # protobuf's DecodeError
        raise ValueError(f"batch payload is not an EventColumns message: {e}") from None
    # list.count runs in C: the checks cost a few nanoseconds per event, not a Python loop over the kinds
    kinds = list(columns.kind)
    count = len(kinds)
    quota_count = kinds.count(KIND_CLIENT_QUOTA)
    lengths = (
        len(columns.commit_time_ms),
        len(columns.principal),
        len(columns.request_id),
    )
    if any(n != count for n in lengths) or (columns.offset and len(columns.offset) != count):
        raise ValueError(f"batch columns disagree: {count} kinds, {lengths} time/principal/request ids")
    quota_lengths = (
        len(columns.quota_entity),
        len(columns.quota_key),
        len(columns.quota_value),
        len(columns.quota_remove),
    )
    if any(n != quota_count for n in quota_lengths):
        raise ValueError(f"batch columns disagree: {quota_count} client-quota events, columns {quota_lengths}")
    others = {
        KIND_CLIENT_METRICS: len(columns.client_metrics),
        KIND_CONFIG: len(columns.config),
    }
    for kind, n in others.items():
        if kinds.count(kind) != n:
            raise ValueError(f"batch columns disagree: {n} records of kind {kind}")
    # a malformed id is the batch's ValueError here, not a surprise to a later reader
    entities = columns.quota_entity[:]  # a slice is one C loop, a little faster than list()
    if not _canonical_ids.issuperset(entities):
        _check_entity_ids(entities)
    global _last_decoded
    _last_decoded = (columns, kinds, entities)
    return columns


def _check_entity_ids(entities: list[str]) -> None:
    """``entity_of`` on each id not yet known canonical (ValueError for a malformed one), then remember them."""
    unknown = set(entities).difference(_canonical_ids)
    for eid in unknown:
        entity_of(eid)
    if len(_canonical_ids) + len(unknown) > _CANONICAL_IDS_LIMIT:
        _canonical_ids.clear()
    _canonical_ids.update(unknown)


def kinds_and_entities(columns: pb.EventColumns) -> tuple[list[int], list[str]]:
    """The batch's ``kind`` and ``quota_entity`` columns as lists (shared: not to be modified): those
    ``decode_columns`` built when it parsed this very batch last (its checks read them), else a fresh
    conversion."""
    held, kinds, entities = _last_decoded
    if held is columns and len(kinds) == len(columns.kind) and len(entities) == len(columns.quota_entity):
        return kinds, entities
    return list(columns.kind), columns.quota_entity[:]


def events_of(columns: pb.EventColumns) -> list[pb.Event]:
    """The events of a batch as ``Event`` messages (the slow path: audits, reads, tools)."""
    events = []
    quota = metrics = config = 0
    for i, kind in enumerate(columns.kind):
        event = pb.Event(
            commit_time_ms=columns.commit_time_ms[i], principal=columns.principal[i], request_id=columns.request_id[i]
        )
        if kind == KIND_CLIENT_QUOTA:
            value = None if columns.quota_remove[quota] else columns.quota_value[quota]
            record = client_quota_event(entity_of(columns.quota_entity[quota]), columns.quota_key[quota], value)
            event.client_quota.CopyFrom(record.client_quota)
            quota += 1
        elif kind == KIND_CLIENT_METRICS:
            event.client_metrics.CopyFrom(columns.client_metrics[metrics])
            metrics += 1
        elif kind == KIND_CONFIG:
            event.config.CopyFrom(columns.config[config])
            config += 1
        else:
            raise ValueError(f"unknown record kind {kind} in a batch")
        events.append(event)
    return events


def slice_columns(columns: pb.EventColumns, start: int, stop: int) -> pb.EventColumns:
    """The events ``[start, stop)`` of a batch, as a batch (for reads that begin or end inside a frame)."""
    kinds = list(columns.kind)
    start, stop = max(0, start), min(len(kinds), stop)
    out = pb.EventColumns()
    if start >= stop:
        return out

    def span(kind: int) -> slice:
        first = kinds[:start].count(kind)
        return slice(first, first + kinds[start:stop].count(kind))

    quota, metrics, config = span(KIND_CLIENT_QUOTA), span(KIND_CLIENT_METRICS), span(KIND_CONFIG)
    if columns.offset:
        out.offset.extend(columns.offset[start:stop])
    out.commit_time_ms.extend(columns.commit_time_ms[start:stop])
    out.principal.extend(columns.principal[start:stop])
    out.request_id.extend(columns.request_id[start:stop])
    out.kind.extend(kinds[start:stop])
    out.quota_entity.extend(columns.quota_entity[quota])
    out.quota_key.extend(columns.quota_key[quota])
    out.quota_value.extend(columns.quota_value[quota])
    out.quota_remove.extend(columns.quota_remove[quota])
    out.client_metrics.extend(columns.client_metrics[metrics])
    out.config.extend(columns.config[config])
    return out
