"""ConfigImage: the state the config log replays into, and the delta each event makes.

The image is Kafka's ``MetadataImage`` reduced to what quotaplane keeps: client quotas by entity, KIP-714
client-metrics resources by name, and dynamic configs by (resource type, resource name). Besides the
values it keeps, for every live config key, which event set it (offset, commit time, principal, request
id): that answers "which change set alice's quota?" without rereading the log, and lets a snapshot carry
the history's last word for each key. It also remembers the most recent request ids, so a retried admin
request is applied once.

The writer's view ahead of the log (the image plus events not yet durable) is ``_working_image``.

Offsets are Kafka's convention: 0-based, and an image's ``end_offset`` is the offset of the next event
it expects (so ``end_offset`` events have been applied; a snapshot at ``end_offset`` k holds the image
of the first k events).

Two ways in, one semantics: ``apply(offset, event)`` returns a :class:`ConfigDelta` for the managers
(``ManagerBinding``); ``replay_columns(base_offset, columns)`` applies a whole log batch (``EventColumns``)
from plain lists without building deltas, which is how a shard catches up from the log. Client-quota
state is keyed by the entity's canonical id string (``_columns.entity_id``) inside, by ``EntityKey``
outside.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from sys import intern
from typing import Final

from ..v1 import config_events_pb2 as pb
from ._client_quotas import EntityKey, entity_key
from ._columns import (
    KIND_CLIENT_METRICS,
    KIND_CLIENT_QUOTA,
    KIND_CONFIG,
    entity_id,
    entity_of,
    kinds_and_entities,
    record_entity_id,
)
from ._dynamic_configs import ConfigResourceType
from ._records import client_metrics_configs, client_metrics_event, client_quota_event, config_event, record_entity

__all__ = [
    "DEFAULT_MAX_APPLIED_REQUESTS",
    "SNAPSHOT_VERSION",
    "ClientMetricsChange",
    "ClientQuotaChange",
    "ConfigChange",
    "ConfigDelta",
    "ConfigImage",
    "ConfigKey",
    "CorruptEventError",
    "OffsetGapError",
    "Provenance",
]

#: How many recent request ids an image remembers for exactly-once retries.
DEFAULT_MAX_APPLIED_REQUESTS: Final = 10_000
SNAPSHOT_VERSION: Final = 1

QUOTA: Final = "client-quota"
CLIENT_METRICS: Final = "client-metrics"
CONFIG: Final = "config"

#: The key a value lives under (and what compaction keeps the last event of):
#: ``("client-quota", entity_key, quota_key)``, ``("client-metrics", name)`` or
#: ``("config", resource_type, resource_name, config_name)``.
ConfigKey = tuple
#: A live client-quota value with the provenance of the event that set it:
#: ``(value, offset, commit_time_ms, principal, request_id)``.
QuotaCell = tuple[float, int, int, str, str]


class OffsetGapError(ValueError):
    """An event arrived out of offset order: the image must catch up from the log first."""


class CorruptEventError(ValueError):
    """An event the image cannot apply (no record, unknown resource type): names the offset."""


@dataclass(frozen=True, slots=True)
class Provenance:
    """The event that set a value: where it is in the log, when, by whom, in which request."""

    offset: int
    commit_time_ms: int
    principal: str
    request_id: str


@dataclass(frozen=True, slots=True)
class ClientQuotaChange:
    entity: EntityKey
    key: str
    old: float | None
    new: float | None


@dataclass(frozen=True, slots=True)
class ClientMetricsChange:
    name: str
    old: Mapping[str, str] | None
    new: Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class ConfigChange:
    resource_type: ConfigResourceType
    resource_name: str
    name: str
    old: str | None
    new: str | None


Change = ClientQuotaChange | ClientMetricsChange | ConfigChange


@dataclass(frozen=True, slots=True)
class ConfigDelta:
    """What one event changed (``changes`` is empty when it changed nothing, e.g. a repeated removal)."""

    offset: int
    provenance: Provenance
    changes: tuple[Change, ...] = field(default=())


#: A remembered request's offsets: ``offset`` for a one-event request, else ``(first_offset, last_offset)``;
#: always the int when they are equal, so equal windows are equal dicts.
RequestSpan = int | tuple[int, int]


#: ``entity_id`` of an entity key, cached: an admin change looks its entity up on the working state and
#: the committed image, and a fleet has far fewer entities than changes.
_entity_id = lru_cache(maxsize=1 << 16)(entity_id)


def _span(first: int, last: int) -> RequestSpan:
    return first if first == last else (first, last)


def _first_last(span: RequestSpan) -> tuple[int, int]:
    return (span, span) if isinstance(span, int) else span


def _stamped(event: pb.Event, commit_time_ms: int, principal: str, request_id: str) -> pb.Event:
    event.commit_time_ms, event.principal, event.request_id = commit_time_ms, principal, request_id
    return event


class ConfigImage:
    """The replayed config state (mutable, single-threaded; copy with ``copy()``)."""

    __slots__ = (
        "_applied_requests",
        "_client_metrics",
        "_configs",
        "_max_applied_requests",
        "_other_provenance",
        "_quotas",
        "end_offset",
        "last_commit_time_ms",
    )

    def __init__(self, *, max_applied_requests: int = DEFAULT_MAX_APPLIED_REQUESTS) -> None:
        if max_applied_requests < 0:
            raise ValueError(f"max_applied_requests must be >= 0, got {max_applied_requests}")
        self.end_offset = 0
        self.last_commit_time_ms = 0
        self._max_applied_requests = max_applied_requests
        # entity id -> {quota key: (value, offset, commit_time_ms, principal, request_id)}: the value and its
        # provenance in one cell, so a replayed event is one dict lookup and one store (``_replay_quotas``)
        self._quotas: dict[str, dict[str, QuotaCell]] = {}
        self._client_metrics: dict[str, dict[str, str]] = {}
        self._configs: dict[tuple[int, str], dict[str, str]] = {}
        # ("client-metrics", name) / ("config", type, name, key) -> (offset, commit_time_ms, principal, request_id)
        self._other_provenance: dict[ConfigKey, tuple[int, int, str, str]] = {}
        # request id -> its span, oldest first (trimmed in bulk, see _trim_requests): the offset of a
        # one-event request, else (first_offset, last_offset) (``_span``). Immutable values: a batch of new
        # one-event requests is then one C-level pass of dict.setdefault over ids and offsets
        # (_remember_requests).
        self._applied_requests: dict[str, RequestSpan] = {}

    # --- reading ---------------------------------------------------------------------------------
    def client_quotas(self) -> dict[EntityKey, dict[str, float]]:
        """Every entity with its quotas (copies)."""
        return {entity_of(eid): {key: cell[0] for key, cell in cells.items()} for eid, cells in self._quotas.items()}

    def client_quota(self, entity: EntityKey | Mapping[str, str | None]) -> dict[str, float]:
        """The quotas set on exactly this entity (empty if none)."""
        key = entity if isinstance(entity, tuple) else entity_key(entity)
        return {quota_key: cell[0] for quota_key, cell in self._quotas.get(_entity_id(key), {}).items()}

    def client_metrics(self) -> dict[str, dict[str, str]]:
        """Every client-metrics resource with its configs as set (copies)."""
        return {name: dict(configs) for name, configs in self._client_metrics.items()}

    def client_metrics_resource(self, name: str) -> dict[str, str] | None:
        configs = self._client_metrics.get(name)
        return None if configs is None else dict(configs)

    def configs(self, resource_type: ConfigResourceType, resource_name: str) -> dict[str, str]:
        """The dynamic configs set on one BROKER (``""`` = cluster default) or TOPIC resource."""
        return dict(self._configs.get((int(resource_type), resource_name), {}))

    def config_resources(self) -> list[tuple[ConfigResourceType, str]]:
        return [(ConfigResourceType(t), name) for t, name in self._configs]

    def provenance(self, key: ConfigKey) -> Provenance | None:
        """The event that set the live value under ``key`` (see :data:`ConfigKey`), or None."""
        if key and key[0] == QUOTA:
            _, entity, quota_key = key
            cell = self._quotas.get(_entity_id(entity), {}).get(quota_key)
            return None if cell is None else Provenance(*cell[1:])
        found = self._other_provenance.get(key)
        return None if found is None else Provenance(*found)

    def applied_request(self, request_id: str) -> tuple[int, int] | None:
        """The (first, last) offsets of a remembered request's events, or None."""
        span = self._applied_requests.get(request_id)
        return None if span is None else _first_last(span)

    def __len__(self) -> int:
        """The number of live config keys (what a snapshot holds)."""
        return sum(len(values) for values in self._quotas.values()) + len(self._other_provenance)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigImage):
            return NotImplemented
        self._trim_requests(force=True)
        other._trim_requests(force=True)
        return (
            self.end_offset == other.end_offset
            and self.last_commit_time_ms == other.last_commit_time_ms
            and self._quotas == other._quotas
            and self._client_metrics == other._client_metrics
            and self._configs == other._configs
            and self._other_provenance == other._other_provenance
            and list(self._applied_requests.items()) == list(other._applied_requests.items())
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"ConfigImage(end_offset={self.end_offset}, client_quota_entities={len(self._quotas)}, "
            f"client_metrics={len(self._client_metrics)}, config_resources={len(self._configs)})"
        )

    def copy(self) -> ConfigImage:
        image = ConfigImage(max_applied_requests=self._max_applied_requests)
        image.end_offset = self.end_offset
        image.last_commit_time_ms = self.last_commit_time_ms
        image._quotas = {k: dict(v) for k, v in self._quotas.items()}
        image._client_metrics = {k: dict(v) for k, v in self._client_metrics.items()}
        image._configs = {k: dict(v) for k, v in self._configs.items()}
        image._other_provenance = dict(self._other_provenance)
        self._trim_requests(force=True)
        image._applied_requests = dict(self._applied_requests)
        return image

    # --- applying one event (the delta path) -----------------------------------------------------------
    def apply(self, offset: int, event: pb.Event) -> ConfigDelta:
        """Apply the event at ``offset`` (which must be ``end_offset``) and return what it changed."""
        if offset != self.end_offset:
            raise OffsetGapError(f"expected the event at offset {self.end_offset}, got offset {offset}")
        provenance = (offset, event.commit_time_ms, event.principal, event.request_id)
        change = self._apply_event(offset, event, provenance)
        self._remember_request(event.request_id, offset)
        self.end_offset = offset + 1
        self.last_commit_time_ms = event.commit_time_ms
        return ConfigDelta(offset, Provenance(*provenance), () if change is None else (change,))

    def replay(self, base_offset: int, events: Iterable[pb.Event]) -> int:
        """Apply consecutive ``Event`` messages from ``base_offset`` (already applied ones are skipped);
        returns the new end offset. The log's fast path is :meth:`replay_columns`."""
        offset = base_offset
        if offset > self.end_offset:
            raise OffsetGapError(f"expected the event at offset {self.end_offset}, got offset {offset}")
        for event in events:
            if offset >= self.end_offset:
                self.apply(offset, event)
            offset += 1
        return self.end_offset

    def _apply_event(self, offset: int, event: pb.Event, provenance: tuple[int, int, str, str]) -> Change | None:
        kind = event.WhichOneof("record")
        if kind == "client_quota":
            record = event.client_quota
            entity = record_entity(record)
            new = None if record.remove else record.value
            old = self._set_quota(record_entity_id(record), record.key, new, provenance)
            return ClientQuotaChange(entity, record.key, old, new) if old != new else None
        if kind == "client_metrics":
            return self._apply_client_metrics(event.client_metrics, provenance)
        if kind == "config":
            return self._apply_config(offset, event.config, provenance)
        raise CorruptEventError(f"the event at offset {offset} carries no record")

    def _set_quota(
        self, eid: str, key: str, value: float | None, provenance: tuple[int, int, str, str]
    ) -> float | None:
        cells = self._quotas.get(eid)
        old = None if cells is None else cells.get(key)
        if value is None:
            if old is not None:
                del cells[key]  # type: ignore[union-attr]
                if not cells:
                    del self._quotas[eid]
        elif cells is None:
            self._quotas[eid] = {key: (value, *provenance)}
        else:
            cells[key] = (value, *provenance)
        return None if old is None else old[0]

    def _apply_client_metrics(
        self, record: pb.ClientMetricsRecord, provenance: tuple[int, int, str, str]
    ) -> ClientMetricsChange | None:
        name = record.name
        old = self._client_metrics.get(name)
        configs = client_metrics_configs(record)
        ckey = (CLIENT_METRICS, name)
        if not configs:  # Kafka: a resource without configs does not exist
            if old is None:
                return None
            del self._client_metrics[name]
            del self._other_provenance[ckey]
            configs = None
        else:
            self._client_metrics[name] = configs
            self._other_provenance[ckey] = provenance
        return ClientMetricsChange(name, old, configs) if old != configs else None

    def _apply_config(
        self, offset: int, record: pb.ConfigRecord, provenance: tuple[int, int, str, str]
    ) -> ConfigChange | None:
        rtype = record.resource_type
        if rtype != ConfigResourceType.BROKER and rtype != ConfigResourceType.TOPIC:
            raise CorruptEventError(f"the event at offset {offset} has an unknown config resource type {rtype}")
        resource = (rtype, record.resource_name)
        name = record.name
        values = self._configs.get(resource)
        old = None if values is None else values.get(name)
        ckey = (CONFIG, rtype, record.resource_name, name)
        if record.HasField("value"):
            new: str | None = record.value
            if values is None:
                self._configs[resource] = {name: record.value}
            else:
                values[name] = record.value
            self._other_provenance[ckey] = provenance
        else:
            if old is None:
                return None
            del values[name]  # type: ignore[union-attr]
            if not values:
                del self._configs[resource]
            del self._other_provenance[ckey]
            new = None
        if old == new:
            return None
        return ConfigChange(ConfigResourceType(rtype), record.resource_name, name, old, new)

    def _remember_request(self, request_id: str, offset: int) -> None:
        if request_id:
            span = self._applied_requests.get(request_id)
            if span is None:
                self._applied_requests[request_id] = offset
                self._trim_requests()
            else:  # a new value keeps the key's place
                self._applied_requests[request_id] = _span(_first_last(span)[0], offset)

    def _trim_requests(self, *, force: bool = False) -> None:
        """Forget the oldest request ids beyond the limit; done in bulk once the dict holds twice as many
        (a replay then pays one dict insert per request), or now with ``force``.

        The oldest are popped in place by one C-level pass: measured cheaper than building a dict of the
        survivors (which grows, and rehashes, as it fills); the next growth of the dict compacts it.
        """
        requests = self._applied_requests
        excess = len(requests) - self._max_applied_requests
        if excess > (0 if force else self._max_applied_requests + 1024):
            deque(map(requests.pop, list(islice(requests, excess))), maxlen=0)

    # --- applying a batch (the replay path) ------------------------------------------------------------
    def replay_columns(self, base_offset: int, columns: pb.EventColumns) -> int:
        """Apply a log batch (events at consecutive offsets from ``base_offset``) from its columns.

        Events below ``end_offset`` are skipped (a batch may straddle it); a batch starting above it is an
        OffsetGapError. Returns the new end offset.
        """
        kinds, entities = kinds_and_entities(columns)
        end = self.end_offset
        if base_offset > end:
            raise OffsetGapError(f"expected the event at offset {end}, got offset {base_offset}")
        skip = end - base_offset
        if skip >= len(kinds):
            return end
        # a list, not a range: the cells and the request window then share each offset's int
        self._replay(list(range(base_offset, base_offset + len(kinds))), kinds, entities, columns, skip)
        self.end_offset = base_offset + len(kinds)
        return self.end_offset

    def _replay(
        self, offsets: list[int] | range, kinds: list[int], entities: list[str], columns: pb.EventColumns, skip: int
    ) -> None:
        """Apply events ``skip..`` of a batch: one pass over the columns for the records, one for request ids.

        Each column is converted to a list once, by a slice (one C loop in upb, measured ~20 ns an event
        cheaper for four columns than zipping the protobuf containers, which Python iterates an index at
        a time); the kinds and entity ids come from ``decode_columns`` (``kinds_and_entities``).
        """
        times: list[int] = columns.commit_time_ms[:]
        principals: list[str] = columns.principal[:]
        request_ids: list[str] = columns.request_id[:]
        quota_columns: tuple[list, list, list, list] = (
            entities,
            columns.quota_key[:],
            columns.quota_value[:],
            columns.quota_remove[:],
        )
        if skip:
            q = kinds[:skip].count(KIND_CLIENT_QUOTA)
            quota_columns = tuple(column[q:] for column in quota_columns)  # type: ignore[assignment]
            metrics_start = kinds[:skip].count(KIND_CLIENT_METRICS)
            config_start = kinds[:skip].count(KIND_CONFIG)
            offsets, kinds, times = offsets[skip:], kinds[skip:], times[skip:]
            principals, request_ids = principals[skip:], request_ids[skip:]
        else:
            metrics_start = config_start = 0
        if kinds.count(KIND_CLIENT_QUOTA) == len(kinds):  # the common batch: client quotas only
            self._replay_quotas(*quota_columns, offsets, times, principals, request_ids)
        else:
            self._replay_mixed(
                offsets, kinds, times, principals, request_ids, quota_columns, columns, metrics_start, config_start
            )
        self._remember_requests(offsets, request_ids)
        self.last_commit_time_ms = times[-1]

    def _replay_quotas(
        self,
        eids: Sequence[str],
        keys: Sequence[str],
        values: Sequence[float],
        removes: list[bool],
        offsets: Sequence[int],
        times: Sequence[int],
        principals: Sequence[str],
        request_ids: Sequence[str],
    ) -> None:
        """Apply client-quota rows; a batch without removals is one lookup and one store per event."""
        cells = zip(values, offsets, times, principals, request_ids, strict=True)
        if True in removes:
            for eid, key, remove, cell in zip(eids, keys, removes, cells, strict=True):
                self._replay_quota(eid, key, remove, cell)
            return
        quotas = self._quotas
        rows = zip(eids, keys, cells, strict=True)
        while True:
            try:
                for eid, key, cell in rows:
                    quotas[eid][key] = cell  # the common row: an entity that has quotas already
                return
            except KeyError:  # only ``quotas[eid]`` raises it: a new entity (eid, key, cell: that row)
                entity_of(eid)  # a non-canonical id is corruption: fail here, not on first use
                # interned: the entities then share one object per quota key, which the later rows'
                # lookups compare against while it is in cache (measured a few percent of the loop)
                quotas[eid] = {intern(key): cell}

    def _replay_quota(self, eid: str, key: str, remove: bool, cell: QuotaCell) -> None:
        """One client-quota row (``cell`` = value and provenance), as ``apply`` would."""
        held = self._quotas.get(eid)
        if remove:
            if held is not None and key in held:
                self._set_quota(eid, key, None, cell[1:])
        elif held is None:
            entity_of(eid)
            self._quotas[eid] = {intern(key): cell}
        else:
            held[key] = cell

    def _replay_mixed(
        self,
        offsets: list[int] | range,
        kinds: list[int],
        times: list[int],
        principals: list[str],
        request_ids: list[str],
        quota_columns: tuple[list, list, list, list],
        columns: pb.EventColumns,
        metrics_index: int,
        config_index: int,
    ) -> None:
        quota_rows = zip(*quota_columns, strict=True)
        for offset, kind, time_ms, principal, request_id in zip(
            offsets, kinds, times, principals, request_ids, strict=True
        ):
            if kind == KIND_CLIENT_QUOTA:
                eid, key, value, remove = next(quota_rows)
                self._replay_quota(eid, key, remove, (value, offset, time_ms, principal, request_id))
            elif kind == KIND_CLIENT_METRICS:
                provenance = (offset, time_ms, principal, request_id)
                self._apply_client_metrics(columns.client_metrics[metrics_index], provenance)
                metrics_index += 1
            elif kind == KIND_CONFIG:
                provenance = (offset, time_ms, principal, request_id)
                self._apply_config(offset, columns.config[config_index], provenance)
                config_index += 1
            else:
                raise CorruptEventError(f"the event at offset {offset} has an unknown record kind {kind}")

    def _remember_requests(self, offsets: Sequence[int], request_ids: Sequence[str]) -> None:
        """Record each request's (first, last) offsets, as ``_remember_request`` per event would, then trim.

        One C-level pass of ``dict.setdefault`` (one hash-table probe per event; an emptiness check and
        an insert were two): a new id gets its first offset in the batch, in first-appearance order, and
        a remembered one keeps its span and its place. The common batch brings only new ids, each once,
        and is then done; else (an id repeats in the batch, was remembered, or is empty: no request)
        each id's span becomes (its first offset, as the dict now holds it, its last in the batch).
        """
        if len(offsets) != len(request_ids):
            raise ValueError(f"{len(offsets)} offsets for {len(request_ids)} request ids")
        requests = self._applied_requests
        before = len(requests)
        deque(map(requests.setdefault, request_ids, offsets), maxlen=0)
        if len(requests) - before != len(request_ids) or "" in requests:
            requests.pop("", None)
            lasts = dict(zip(request_ids, offsets, strict=True))  # each id's last offset in the batch
            lasts.pop("", None)
            for request_id, last in lasts.items():
                requests[request_id] = _span(_first_last(requests[request_id])[0], last)
        self._trim_requests()

    # --- snapshots -------------------------------------------------------------------------------
    def snapshot_header(self) -> pb.SnapshotHeader:
        self._trim_requests(force=True)
        return pb.SnapshotHeader(
            version=SNAPSHOT_VERSION,
            end_offset=self.end_offset,
            last_commit_time_ms=self.last_commit_time_ms,
            applied_requests=[
                pb.AppliedRequest(request_id=rid, first_offset=first, last_offset=last)
                for rid, (first, last) in ((rid, _first_last(span)) for rid, span in self._applied_requests.items())
            ],
            entry_count=len(self),
        )

    def snapshot_events(self) -> list[tuple[int, pb.Event]]:
        """For every live config key, the event that set it as it is now, in offset order.

        Replaying them (``from_snapshot``) gives back an equal image: each is the original event's record
        for that key (a quota value, a whole client-metrics resource, a config value) with its offset,
        commit time, principal and request id.
        """
        entries: list[tuple[int, pb.Event]] = []
        for eid, cells in self._quotas.items():
            entity = entity_of(eid)
            for key, (value, offset, *envelope) in cells.items():
                entries.append((offset, _stamped(client_quota_event(entity, key, value), *envelope)))
        for ckey, (offset, *envelope) in self._other_provenance.items():
            if ckey[0] == CLIENT_METRICS:
                event = client_metrics_event(ckey[1], self._client_metrics[ckey[1]])
            else:
                _, rtype, rname, name = ckey
                event = config_event(rtype, rname, name, self._configs[(rtype, rname)][name])
            entries.append((offset, _stamped(event, *envelope)))
        entries.sort(key=lambda entry: entry[0])
        return entries

    @classmethod
    def from_snapshot(
        cls,
        header: pb.SnapshotHeader,
        frames: Iterable[pb.EventColumns],
        *,
        max_applied_requests: int = DEFAULT_MAX_APPLIED_REQUESTS,
    ) -> ConfigImage:
        """Rebuild the image a snapshot holds from its header and its ``EventColumns`` frames."""
        if header.version != SNAPSHOT_VERSION:
            raise CorruptEventError(f"unsupported snapshot version {header.version} (this build reads 1)")
        image = cls(max_applied_requests=max_applied_requests)
        last = -1
        count = 0
        for columns in frames:
            offsets = list(columns.offset)
            kinds, entities = kinds_and_entities(columns)
            if len(offsets) != len(kinds):
                raise CorruptEventError(f"a snapshot frame has {len(offsets)} offsets for {len(kinds)} events")
            if not kinds:
                continue
            if offsets != sorted(set(offsets)) or offsets[0] <= last or offsets[-1] >= header.end_offset:
                raise CorruptEventError(
                    f"snapshot offsets must increase and stay below end offset {header.end_offset}: "
                    f"{offsets[0]}..{offsets[-1]} after {last}"
                )
            image._replay(offsets, kinds, entities, columns, 0)
            last = offsets[-1]
            count += len(kinds)
        if count != header.entry_count:
            raise CorruptEventError(f"snapshot holds {count} entries, its header says {header.entry_count}")
        image.end_offset = header.end_offset
        image.last_commit_time_ms = header.last_commit_time_ms
        image._seed_requests(header.applied_requests)
        return image

    def _seed_requests(self, applied_requests: Sequence[pb.AppliedRequest]) -> None:
        """Start the request window from a snapshot header's (oldest first), as far as this image keeps."""
        limit = self._max_applied_requests
        self._applied_requests = {
            r.request_id: _span(r.first_offset, r.last_offset) for r in (applied_requests[-limit:] if limit else ())
        }

    @classmethod
    def applied_request_window(
        cls,
        seed: Sequence[pb.AppliedRequest],
        batches: Iterable[tuple[Sequence[int], Sequence[str]]],
        *,
        max_applied_requests: int = DEFAULT_MAX_APPLIED_REQUESTS,
    ) -> list[pb.AppliedRequest]:
        """The applied-request window (what ``snapshot_header`` holds) of an image that starts from
        ``seed`` (a snapshot header's window) and replays the log batches ``(offsets, request_ids)`` in
        order, bulk trims included, without applying any record. A run of one request id may be given
        as its first and last event only."""
        image = cls(max_applied_requests=max_applied_requests)
        image._seed_requests(seed)
        for offsets, request_ids in batches:
            image._remember_requests(offsets, request_ids)
        return list(image.snapshot_header().applied_requests)

    # --- convenience for tests and audits -----------------------------------------------------------
    @classmethod
    def replayed(cls, events: Iterable[pb.Event], **kwargs: int) -> ConfigImage:
        """A new image with ``events`` applied from offset 0."""
        image = cls(**kwargs)
        image.replay(0, events)
        return image
