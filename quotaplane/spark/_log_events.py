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

Each chunk is decoded once (``eventlog``'s docstring): ``first_pass`` builds the chunk's history rows
with the old values the chunk itself knows (``local_history``: every event's but the first of each
config key), keeps them on the executor's local disk for the second pass (``cache_rows``), and reports
what the driver needs (each config key's last event in the chunk, the request ids frame by frame,
counts). ``history_rows`` then fills in the first events' old values, which the driver computed from the
chunks before, and decodes the chunk again only if its rows are not on this machine (another executor
ran the first pass, or it is gone).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
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
from quotaplane.gc_pause import gc_paused
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
    "cache_path",
    "chunk_events",
    "chunk_frames",
    "deleted_message",
    "events_of_batch",
    "first_pass",
    "frames_of",
    "history_rows",
    "last_rows",
    "local_history",
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
        """The events at ``rows``, in that order."""
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
#: A config key's last event, as ``first_pass`` reports it and the snapshot is built from.
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


def chunk_events(
    chunk: Chunk,
    start: int,
    up_to: int,
    segments: list[tuple[int, int]] | None = None,
    frame_sizes: list[int] | None = None,
) -> LogEvents:
    """The chunk's events in ``[start, up_to)``; raises ``CorruptLogError`` (or ``FileNotFoundError``),
    as ``chunk_frames`` does. ``segments``, if given, gets ``(segment base, events)`` per segment read,
    ``frame_sizes`` the events read of each frame."""
    out = LogEvents()
    for frame in chunk_frames(chunk, start, up_to):
        out.extend(frame.events(), frame.lo, frame.hi)
        if segments is not None:
            _count_in_segment(segments, frame)
        if frame_sizes is not None:
            frame_sizes.append(frame.hi - frame.lo)
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
    """What the first pass learns of one chunk: enough to check coverage, fill in the second pass's old
    values and write the snapshot, without sending the chunk's events back."""

    chunk: Chunk
    error: str | None = None
    events: int = 0
    last_offset: int = -1
    last_commit_time_ms: int = 0
    # each config key's last event in the chunk, in the order of the keys' first events in it (the order
    # of the rows whose old values the driver supplies): an Arrow IPC stream of ENTRY_SCHEMA
    last: bytes = b""
    segments: list[tuple[int, int]] = field(default_factory=list)  # (segment base, events) per range read
    frame_sizes: list[int] = field(default_factory=list)  # events per frame, in order
    request_ids: list[str] = field(default_factory=list)  # every event's request id, in order
    cache: str | None = None  # where the executor left the chunk's rows (``cache_rows``), if it could

    def last_table(self) -> pa.Table:
        return pa.ipc.open_stream(self.last).read_all()


def last_rows(events: LogEvents) -> list[int]:
    """The row of each config key's last event in ``events``, in offset order."""
    return sorted(dict(zip(events.config_keys(), range(len(events)), strict=False)).values())


_FIRST = object()  # a key's first event in a chunk: its old value comes from before the chunk

#: The history rows as a chunk knows them (``HISTORY_SCHEMA``, then ``first``).
LOCAL_NAMES = [column.split()[0] for column in HISTORY_SCHEMA.split(", ")] + ["first"]


def local_history(events: LogEvents, segments: Sequence[tuple[int, int]]) -> tuple[pa.RecordBatch, list[int]]:
    """The history rows of a chunk's ``events`` (``LOCAL_NAMES``) as far as the chunk knows them: each
    event's old value is its key's previous value in the chunk, except at each key's first event, where it
    is null and ``first`` is true (``history_rows`` fills those in, in row order); and the row of each
    key's last event, in the order of the keys' first events (dict order: an update keeps a key's place).
    ``segments``: the ``(segment base, events)`` runs the events come from."""
    keys = list(events.config_keys())
    values: dict[ConfigKey, str | None] = {}
    get = values.get
    old: list[Any] = []
    append = old.append
    for key, new in zip(keys, events.new_value, strict=True):
        append(get(key, _FIRST))
        values[key] = new
    first = [value is _FIRST for value in old]
    last = list(dict(zip(keys, range(len(keys)), strict=True)).values())
    string = pa.string()
    rows = pa.RecordBatch.from_arrays(
        [
            pa.array(events.offset, pa.int64()),
            pa.array(events.commit_time_ms, pa.int64()),
            pa.array(events.principal, string),
            pa.array(events.request_id, string),
            pa.array(events.kind, string),
            pa.array(events.entity, string),
            pa.array(events.key, string),
            pa.array([None if value is _FIRST else value for value in old], string),
            pa.array(events.new_value, string),
            # a chunk may own no frame at all (frames larger than chunks): no rows, and no run to concatenate
            pa.concat_arrays([pa.repeat(pa.scalar(base, pa.int64()), n) for base, n in segments])
            if segments
            else pa.array([], pa.int64()),
            pa.array(first, pa.bool_()),
        ],
        names=LOCAL_NAMES,
    )
    return rows, last


def cache_path(token: str, index: int) -> str:
    """Where an executor keeps chunk ``index``'s rows between the passes of run ``token``: in Spark's local
    directory for this executor (``SPARK_LOCAL_DIRS``, which Spark deletes when the executor stops), else
    the temporary directory. Another machine's executor does not find it there and decodes the chunk."""
    local_dirs = os.environ.get("SPARK_LOCAL_DIRS")
    directory = local_dirs.split(",")[0] if local_dirs else tempfile.gettempdir()
    return os.path.join(directory, f"quotaplane-log-{token}-{index}.arrow")


def cache_rows(rows: pa.RecordBatch, path: str) -> str | None:
    """Write ``rows`` to ``path`` (Arrow IPC file, renamed into place whole: a retried task rewrites it);
    ``path``, or None if it could not be written (the second pass then decodes the chunk again)."""
    staging = f"{path}.{os.getpid()}.tmp"
    try:
        with pa.OSFile(staging, "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
            writer.write_batch(rows)
        os.replace(staging, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(staging)
        return None
    return path


def _cached_rows(path: str | None, events: int) -> pa.RecordBatch | None:
    """The rows ``cache_rows`` left at ``path`` (removed once read), or None if they are not on this machine."""
    if path is None:
        return None
    try:
        with pa.memory_map(path) as source:
            reader = pa.ipc.open_file(source)
            rows = reader.get_batch(0) if reader.num_record_batches == 1 else None
        os.remove(path)
    except (OSError, pa.ArrowInvalid):
        return None
    if rows is None or rows.num_rows != events or rows.schema.names != LOCAL_NAMES:
        return None
    return rows


def first_pass(chunk: Chunk, start: int, up_to: int, cache: str | None) -> ChunkSummary:
    """The first pass over one chunk (in an executor); a bad chunk is a summary with ``error`` set.

    The chunk is decoded and its history rows built as far as it knows them (``local_history``); those are
    kept at ``cache`` (``cache_path``, None: not kept) for the second pass, and the summary carries each
    key's last event and the request ids.
    """
    segments: list[tuple[int, int]] = []
    frame_sizes: list[int] = []
    with gc_paused():
        try:
            events = chunk_events(chunk, start, up_to, segments=segments, frame_sizes=frame_sizes)
        except CorruptLogError as exc:
            return ChunkSummary(chunk, error=str(exc))
        except FileNotFoundError as exc:
            return ChunkSummary(chunk, error=deleted_message(str(exc.filename)))
        rows, last = local_history(events, segments)
        entries = events.take(last).table()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ENTRY_SCHEMA) as writer:
        writer.write_table(entries)
    summary = ChunkSummary(
        chunk,
        events=len(events),
        last=sink.getvalue().to_pybytes(),
        segments=segments,
        frame_sizes=frame_sizes,
        request_ids=events.request_id,
        cache=cache_rows(rows, cache) if cache is not None and len(events) else None,
    )
    if len(events):
        summary.last_offset, summary.last_commit_time_ms = events.offset[-1], events.commit_time_ms[-1]
    return summary


def history_rows(
    chunk: Chunk, start: int, up_to: int, cache: str | None, events: int, before: pa.Array
) -> pa.RecordBatch:
    """The second pass over one chunk: its history rows (``HISTORY_SCHEMA``), from the rows the first pass
    kept at ``cache`` if this machine has them (``events`` of them), else decoded again (raising as
    ``chunk_events`` does); ``before`` holds the old value of each key's first event in the chunk, in the
    order of those events (None: the key had no value)."""
    rows = _cached_rows(cache, events)
    if rows is None:
        segments: list[tuple[int, int]] = []
        with gc_paused():
            rows, _ = local_history(chunk_events(chunk, start, up_to, segments=segments), segments)
    first = rows.column("first")
    if first.true_count != len(before):
        raise RuntimeError(f"{first.true_count} keys start in the chunk, and {len(before)} values before it")
    old = pc.replace_with_mask(rows.column("old_value"), first, before)
    columns = rows.columns[:-1]
    columns[LOCAL_NAMES.index("old_value")] = old
    return pa.RecordBatch.from_arrays(columns, names=LOCAL_NAMES[:-1])


def frames_of(
    frame_sizes: Sequence[int], first_offset: int, request_ids: Sequence[str]
) -> Iterator[tuple[range, Sequence[str]]]:
    """``(offsets, request_ids)`` per frame, as ``ConfigImage.applied_request_window`` takes them."""
    position = 0
    for size in frame_sizes:
        yield range(first_offset + position, first_offset + position + size), request_ids[position : position + size]
        position += size
