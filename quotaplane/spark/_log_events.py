"""The executor side of the event-log compaction: closed segments decoded column-wise, in chunks.

Why columns: a log frame is already an ``EventColumns`` (one repeated field per attribute, parsed by
one C call), so the events of a chunk are kept as plain per-column lists, extended frame by frame,
and handed on as Arrow arrays. Nothing is built per event except the value texts the history stores
(``repr`` of a quota, the JSON of a client-metrics resource). A frame of quota changes only, the
common one, costs a few C-level passes.

Why chunks: a segment can hold most of a log (the writer rolls by size), so a task per segment
leaves cores idle. A chunk is a run of consecutive ``SegmentRange``s: the frames of a segment whose
base offsets fall in ``[lo, hi)``. Its task steps over the frames before ``lo`` by their headers
alone (each header has its own CRC) and verifies and decodes only its own, so every frame is verified
exactly once, by the chunk that owns it; a range that ends its segment also checks that the segment
ends where the next one begins.

Each chunk is read twice (``eventlog``'s docstring): ``summarize`` reports what the driver needs to
seed the second pass (each config key's last event in the chunk, the request ids frame by frame,
counts); ``history_batch`` then gives the chunk's history rows, old values starting from the values
the driver computed for the chunk.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import pyarrow as pa
import zstandard

from quotaplane.config import ConfigResourceType, CorruptLogError, client_metrics_configs
from quotaplane.config.logformat import (
    KIND_CLIENT_METRICS,
    KIND_CLIENT_QUOTA,
    KIND_CONFIG,
    FrameError,
    decode_event_batch,
    kinds_and_entities,
    parse_frame,
    parse_frame_header,
)
from quotaplane.v1 import config_events_pb2 as pb

__all__ = [
    "CONFIG",
    "ENTRY_SCHEMA",
    "HISTORY_SCHEMA",
    "METRICS",
    "QUOTA",
    "Chunk",
    "ChunkSummary",
    "ConfigKey",
    "Frame",
    "LogEvents",
    "SegmentRange",
    "chunk_events",
    "chunk_frames",
    "deleted_message",
    "events_of_batch",
    "frames_of",
    "history_batch",
    "last_rows",
    "summarize",
]

QUOTA, METRICS, CONFIG = "client-quota", "client-metrics", "config"

#: A config key (what a snapshot holds one entry for): (kind, entity, key). The entity text names the
#: config resource with its type (``broker:0``), and a client-metrics resource is its own key.
ConfigKey = tuple[str, str, str]

HISTORY_SCHEMA = (
    "offset long, commit_time_ms long, principal string, request_id string, kind string, entity string, "
    "key string, old_value string, new_value string, segment long"
)


def _value_json(configs: dict[str, str]) -> str:
    return json.dumps(configs, sort_keys=True, separators=(",", ":"))


@dataclass(slots=True)
class LogEvents:
    """Events in offset order, column by column: the history's columns and what a snapshot entry needs."""

    offset: list[int] = field(default_factory=list)
    commit_time_ms: list[int] = field(default_factory=list)
    principal: list[str] = field(default_factory=list)
    request_id: list[str] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)
    entity: list[str] = field(default_factory=list)
    key: list[str] = field(default_factory=list)
    new_value: list[str | None] = field(default_factory=list)  # the text the history stores; None: removed
    removed: list[bool] = field(default_factory=list)
    quota_value: list[float | None] = field(default_factory=list)
    record: list[bytes | None] = field(default_factory=list)  # a client-metrics or config record, serialized

    def __len__(self) -> int:
        return len(self.kind)

    def extend(self, other: LogEvents, lo: int = 0, hi: int | None = None) -> None:
        """Append ``other``'s events ``[lo, hi)``."""
        whole = lo == 0 and (hi is None or hi >= len(other))
        for name in _FIELDS:
            column = getattr(other, name)
            getattr(self, name).extend(column if whole else column[lo:hi])

    def take(self, rows: Sequence[int]) -> LogEvents:
        """The events at ``rows`` (ascending)."""
        return LogEvents(*([column[i] for i in rows] for column in (getattr(self, name) for name in _FIELDS)))

    def config_keys(self) -> Iterator[ConfigKey]:
        return zip(self.kind, self.entity, self.key, strict=True)

    def table(self) -> pa.Table:
        """The events as an Arrow table (``ENTRY_SCHEMA``)."""
        return pa.Table.from_arrays(
            [pa.array(getattr(self, name), type_) for name, type_ in _ENTRY_TYPES], schema=ENTRY_SCHEMA
        )


_FIELDS = tuple(f.name for f in fields(LogEvents))
_ENTRY_TYPES = (
    ("offset", pa.int64()),
    ("commit_time_ms", pa.int64()),
    ("principal", pa.string()),
    ("request_id", pa.string()),
    ("kind", pa.string()),
    ("entity", pa.string()),
    ("key", pa.string()),
    ("new_value", pa.string()),
    ("removed", pa.bool_()),
    ("quota_value", pa.float64()),
    ("record", pa.binary()),
)
#: A config key's last event, as ``summarize`` reports it and the snapshot is built from.
ENTRY_SCHEMA = pa.schema(list(_ENTRY_TYPES))


def events_of_batch(columns: pb.EventColumns, offsets: Sequence[int]) -> LogEvents:
    """The events of one frame (or snapshot batch) at ``offsets``, as ``decode_columns`` decoded it (its
    columns' lengths and entity ids checked there). Raises ValueError for an unknown kind or config
    resource type, as the log's replay does."""
    kinds, entities = kinds_and_entities(columns)  # the lists decode_columns built for its checks
    n = len(kinds)
    n_quota, n_metrics, n_config = (kinds.count(k) for k in (KIND_CLIENT_QUOTA, KIND_CLIENT_METRICS, KIND_CONFIG))
    if n_quota + n_metrics + n_config != n:
        i, unknown = next(
            (i, k) for i, k in enumerate(kinds) if k not in (KIND_CLIENT_QUOTA, KIND_CLIENT_METRICS, KIND_CONFIG)
        )
        raise ValueError(f"the event at offset {offsets[i]} has an unknown record kind {unknown}")
    keys, values, removes = list(columns.quota_key), list(columns.quota_value), list(columns.quota_remove)
    if not len(entities) == len(keys) == len(values) == len(removes) == n_quota:  # as decode_columns checks
        raise ValueError(f"the batch at offset {offsets[0]} has {n_quota} quota events and columns of other lengths")
    if True in removes:
        quota_values = [None if remove else value for value, remove in zip(values, removes, strict=True)]
        quota_texts = [None if value is None else repr(value) for value in quota_values]
    else:  # the common frame: values set, none removed
        quota_values, quota_texts = values, list(map(repr, values))
    events = LogEvents(list(offsets), list(columns.commit_time_ms), list(columns.principal), list(columns.request_id))
    if n_quota == n:
        events.kind, events.entity, events.key = [QUOTA] * n, entities, keys
        events.new_value, events.removed, events.quota_value, events.record = (
            quota_texts,
            removes,
            quota_values,
            [None] * n,
        )
        return events
    quota, metrics, configs = iter(range(n_quota)), iter(columns.client_metrics), iter(columns.config)
    for i, kind in enumerate(kinds):
        if kind == KIND_CLIENT_QUOTA:
            q = next(quota)
            row: tuple[Any, ...] = (QUOTA, entities[q], keys[q], quota_texts[q], removes[q], quota_values[q], None)
        elif kind == KIND_CLIENT_METRICS:
            message = next(metrics)
            cm = client_metrics_configs(message)
            text = _value_json(cm) if cm else None
            row = (METRICS, message.name, message.name, text, not cm, None, message.SerializeToString())
        else:
            message = next(configs)
            rtype, rname = message.resource_type, message.resource_name
            if rtype not in (ConfigResourceType.BROKER, ConfigResourceType.TOPIC):
                raise ValueError(f"the event at offset {offsets[i]} has an unknown config resource type {rtype}")
            has = message.HasField("value")
            entity = f"{ConfigResourceType(rtype).name.lower()}:{rname}"
            row = (
                CONFIG,
                entity,
                message.name,
                message.value if has else None,
                not has,
                None,
                message.SerializeToString(),
            )
        for column, value in zip(
            (
                events.kind,
                events.entity,
                events.key,
                events.new_value,
                events.removed,
                events.quota_value,
                events.record,
            ),
            row,
            strict=True,
        ):
            column.append(value)
    return events


@dataclass(frozen=True, slots=True)
class SegmentRange:
    """The frames of segment ``path`` (first offset ``base``) whose base offsets are in ``[lo, hi)``;
    ``hi`` None: to the segment's end, which must be where the next segment (``next_base``) begins."""

    path: str
    base: int
    next_base: int | None
    lo: int
    hi: int | None


@dataclass(frozen=True, slots=True)
class Chunk:
    """What one task reads: consecutive ranges of one or more segments (dense offsets: its events are
    contiguous)."""

    ranges: tuple[SegmentRange, ...]


def chunk_events(chunk: Chunk, start: int, up_to: int, segments: list[tuple[int, int]] | None = None) -> LogEvents:
    """The chunk's events in ``[start, up_to)``; raises ``CorruptLogError`` (or ``FileNotFoundError``),
    as ``chunk_frames`` does. ``segments``, if given, gets ``(segment base, events)`` per segment read."""
    out = LogEvents()
    for frame in chunk_frames(chunk, start, up_to):
        out.extend(frame.events(), frame.lo, frame.hi)
        if segments is not None:
            _count_in_segment(segments, frame)
    return out


def _count_in_segment(segments: list[tuple[int, int]], frame: Frame) -> None:
    """Add ``frame``'s events to the ``(segment base, events)`` runs."""
    n = frame.hi - frame.lo
    if segments and segments[-1][0] == frame.segment:
        segments[-1] = (frame.segment, segments[-1][1] + n)
    else:
        segments.append((frame.segment, n))


@dataclass(slots=True)
class Frame:
    """One decoded frame of a chunk: its columns, its first offset, the events ``[lo, hi)`` of it that
    are in the range read, and the segment it is in."""

    columns: pb.EventColumns
    base_offset: int
    next_offset: int
    lo: int
    hi: int
    segment: int
    path: str
    position: int

    def events(self) -> LogEvents:
        try:
            return events_of_batch(self.columns, range(self.base_offset, self.next_offset))
        except ValueError as exc:
            raise CorruptLogError(self.path, self.position, str(exc), offset=self.base_offset) from None


def chunk_frames(chunk: Chunk, start: int, up_to: int) -> Iterator[Frame]:
    """The chunk's frames holding events in ``[start, up_to)``, decoded, in order.

    Checked as the log's recovery checks a segment that is not the last (any frame that does not
    verify is corruption, there is no torn tail to forgive): both CRCs of each of the chunk's frames,
    dense offsets from the segment's name, each frame's record count against its payload, and, for a
    range that ends its segment, that the segment ends exactly where the next one begins. Raises
    ``CorruptLogError`` (``FileNotFoundError`` for a segment deleted meanwhile).
    """
    decompressor = zstandard.ZstdDecompressor()
    for segment in chunk.ranges:
        yield from _range_frames(segment, start, up_to, decompressor)


def _range_frames(
    segment: SegmentRange, start: int, up_to: int, decompressor: zstandard.ZstdDecompressor
) -> Iterator[Frame]:
    path = segment.path
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise CorruptLogError(path, 0, "empty segment that is not the last", offset=segment.base)
    hi = up_to if segment.hi is None else min(segment.hi, up_to)
    position, expected = 0, segment.base
    while position < len(data) and expected < hi:
        try:
            # frames before the range: their headers only, to find its first frame (another task verifies them)
            mine = expected >= segment.lo
            header = parse_frame(data, position) if mine else parse_frame_header(data, position)
            if header.base_offset != expected:
                raise CorruptLogError(
                    path, position, f"frame base offset {header.base_offset}, expected {expected}", offset=expected
                )
            if not mine:
                position, expected = header.end, header.next_offset
                continue
            batch = decode_event_batch(data, header, decompressor)
        except FrameError as exc:
            raise CorruptLogError(path, exc.position, exc.reason, offset=expected) from None
        lo, end = max(0, start - expected), min(header.record_count, up_to - expected)
        if end > lo:
            yield Frame(batch, expected, header.next_offset, lo, end, segment.base, path, position)
        position, expected = header.end, header.next_offset
    if segment.hi is None and expected < up_to and segment.next_base is not None and expected != segment.next_base:
        raise CorruptLogError(
            path,
            position,
            f"segment ends at offset {expected}, the next segment starts at {segment.next_base}",
            offset=expected,
        )


def deleted_message(path: str) -> str:
    return f"{path}: segment deleted while the job ran (retention?); run it again"


@dataclass(slots=True)
class ChunkSummary:
    """What the first pass learns of one chunk: enough to check coverage, seed the second pass with each
    key's value before the chunk, and write the snapshot, without sending the chunk's events back."""

    chunk: Chunk
    error: str | None = None
    events: int = 0
    last_offset: int = -1
    last_commit_time_ms: int = 0
    last: bytes = b""  # each config key's last event in the chunk: an Arrow IPC stream of ENTRY_SCHEMA
    segments: list[tuple[int, int]] = field(default_factory=list)  # (segment base, events) per range read
    frame_sizes: list[int] = field(default_factory=list)  # events per frame, in order
    request_ids: list[str] = field(default_factory=list)  # every event's request id, in order

    def last_table(self) -> pa.Table:
        return pa.ipc.open_stream(self.last).read_all()


def last_rows(events: LogEvents) -> list[int]:
    """The row of each config key's last event in ``events``, in offset order."""
    return sorted(dict(zip(events.config_keys(), range(len(events)), strict=False)).values())


def summarize(chunk: Chunk, start: int, up_to: int) -> ChunkSummary:
    """The first pass over one chunk (in an executor); a bad chunk is a summary with ``error`` set.

    Only what the summary needs is built: each event's config key (for a frame of quota changes, zipped
    from its columns) and request id; whole events only for the frames holding a key's last event.
    """
    summary = ChunkSummary(chunk)
    frames: list[Frame] = []
    winners: dict[ConfigKey, tuple[int, int]] = {}  # key -> (frame, index in the frame) of its last event
    request_ids = summary.request_ids
    try:
        for f, frame in enumerate(chunk_frames(chunk, start, up_to)):
            frames.append(frame)
            columns, lo, hi = frame.columns, frame.lo, frame.hi
            kinds, entities = kinds_and_entities(columns)
            n = hi - lo
            if kinds.count(KIND_CLIENT_QUOTA) == len(kinds):
                keys: Iterable[ConfigKey] = zip(
                    itertools.repeat(QUOTA, n), entities[lo:hi], columns.quota_key[lo:hi], strict=True
                )
            else:
                events = frame.events()
                keys = itertools.islice(events.config_keys(), lo, hi)
            winners.update(zip(keys, zip(itertools.repeat(f, n), range(lo, hi), strict=True), strict=True))
            request_ids += columns.request_id[lo:hi]
            summary.frame_sizes.append(n)
            _count_in_segment(summary.segments, frame)
        last = LogEvents()
        by_frame: dict[int, list[int]] = {}
        for f, i in sorted(winners.values()):
            by_frame.setdefault(f, []).append(i)
        for f, rows in by_frame.items():
            events = frames[f].events()
            last.extend(events.take(rows))
    except CorruptLogError as exc:
        return ChunkSummary(chunk, error=str(exc))
    except FileNotFoundError as exc:
        return ChunkSummary(chunk, error=deleted_message(str(exc.filename)))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ENTRY_SCHEMA) as writer:
        writer.write_table(last.table())
    summary.events, summary.last = len(request_ids), sink.getvalue().to_pybytes()
    if frames:
        final = frames[-1]
        summary.last_offset = final.base_offset + final.hi - 1
        summary.last_commit_time_ms = final.columns.commit_time_ms[final.hi - 1]
    return summary


def history_batch(
    events: LogEvents, values: dict[ConfigKey, str | None], segments: Sequence[tuple[int, int]]
) -> pa.RecordBatch:
    """The history rows (``HISTORY_SCHEMA``) of ``events``: each one's old value is its key's previous
    value, from ``values`` (each key's value before them, carried forward as the rows go); ``segments``
    the ``(segment base, events)`` runs they come from."""
    old_values: list[str | None] = []
    before = values.get
    for key, new in zip(events.config_keys(), events.new_value, strict=True):
        old_values.append(before(key))
        values[key] = new
    string = pa.string()
    return pa.RecordBatch.from_arrays(
        [
            pa.array(events.offset, pa.int64()),
            pa.array(events.commit_time_ms, pa.int64()),
            pa.array(events.principal, string),
            pa.array(events.request_id, string),
            pa.array(events.kind, string),
            pa.array(events.entity, string),
            pa.array(events.key, string),
            pa.array(old_values, string),
            pa.array(events.new_value, string),
            # a chunk may own no frame at all (frames larger than chunks): no rows, and no run to concatenate
            pa.concat_arrays([pa.repeat(pa.scalar(base, pa.int64()), n) for base, n in segments])
            if segments
            else pa.array([], pa.int64()),
        ],
        names=[column.split()[0] for column in HISTORY_SCHEMA.split(", ")],
    )


def frames_of(
    frame_sizes: Sequence[int], first_offset: int, request_ids: Sequence[str]
) -> Iterator[tuple[range, Sequence[str]]]:
    """``(offsets, request_ids)`` per frame, as ``ConfigImage.applied_request_window`` takes them."""
    position = 0
    for size in frame_sizes:
        yield range(first_offset + position, first_offset + position + size), request_ids[position : position + size]
        position += size
