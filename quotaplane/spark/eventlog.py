"""Event-log compaction on Spark: a snapshot the log opens, and a Parquet history of every change.

``compact_log(spark, log_dir, history_dir)`` reads the config event log's **closed** segments up to an
offset (default: the base offset of the live segment, so the segment the controller appends to is
never opened), decodes them in the executors with the log's own format functions
(``quotaplane.config.logformat``: both CRC32Cs, dense offsets, the zstd-compressed ``EventColumns``),
and writes:

(a) ``<log_dir>/%020d.snapshot`` at that offset: the last event per config key (a client-quota entity
    and key, a client-metrics resource, a config resource and name) with removals dropped, plus the
    image-wide state (``last_commit_time_ms``, the window of applied request ids). Entries are built
    with the same record builders ``ConfigImage.snapshot_events`` uses and written with the log's own
    ``write_snapshot``, so ``ConfigStore.open`` / ``EventLog`` replay starts from it and the replayed
    image equals the full log's (the tests check ``ConfigImage`` equality and the snapshot bytes). The
    file is written in a hidden staging directory beside the log, read back and replayed there, and
    only then renamed into place (and the directory fsynced): a bad run never leaves a bad snapshot.
(b) ``<history_dir>/segment=<base offset>/``: one Parquet row per event (offset, commit time,
    principal, request id, kind, entity, key, old value, new value), partitioned by the segment the
    event is in, written with dynamic partition overwrite. A re-run rewrites the same partitions with
    the same rows, and partitions of segments that retention deleted since stay as they are.

**Why it is safe while the log is appended to:** the live segment is the last one listed at the
start; closed segments never change (the writer only appends to the live one), so a run reads a
fixed prefix of the log. Nothing in ``log_dir`` is modified except adding the snapshot.

**When retention has deleted the log's head** (the first segment is not offset 0), the job starts
from the newest valid snapshot the remaining segments continue (as ``ConfigStore.open`` does): its
entries seed the state and the history's old values, and history rows start at its end offset. The
partition of a segment that snapshot cuts through is only written if it does not exist yet, so a
complete earlier partition is never replaced by a partial one.

**How it runs: two passes, no shuffle, one decode.** The range ``[start, up_to)`` is cut into equal chunks
(at least one per core, across and inside segments; ``_log_events``). Pass one decodes every chunk in
parallel, builds its history rows with the old values the chunk itself knows (all but each key's first
event's), leaves them on the executor's local disk, and sends back only each config key's last event in
the chunk and the chunk's request ids; the driver folds those in offset order into the value each key had
before each chunk (the old values of the chunk's first events, a column a chunk) and its last event
overall (the snapshot's entries). Pass two fills in those old values and writes each chunk's rows
straight into the segments' partitions, in the order they come: no window, no shuffle, no sort
(``writes_without_sort``: a file open per segment a chunk holds). A pass-two task that does not find its
chunk's rows on its machine (on a cluster, another machine's executor ran pass one) decodes the chunk
again: the same rows. The old values equal a window ``lag`` over each key in offset order, and the
snapshot the image's own (tests compare both with the log's own reader and ``ConfigStore``).

**The request-id window.** The image remembers the last ``max_applied_requests`` request ids with
their (first, last) offsets, trimmed in bulk at the end of each replayed frame, so the window depends on
where frames end. The driver replays the request ids, frame by frame, through the image's own
bookkeeping (``ConfigImage.applied_request_window``): one C-level dict pass per frame.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from quotaplane.config import (
    DEFAULT_MAX_APPLIED_REQUESTS,
    ConfigImage,
    CorruptLogError,
    client_metrics_configs,
    client_metrics_event,
    config_event,
)
from quotaplane.config.logformat import (
    ENTRIES_PER_FRAME,
    KIND_CLIENT_METRICS,
    KIND_CLIENT_QUOTA,
    KIND_CONFIG,
    list_segments,
    list_snapshots,
    read_snapshot_batches,
    write_snapshot_columns,
)
from quotaplane.durable import fsync_directory
from quotaplane.gc_pause import gc_paused
from quotaplane.v1 import config_events_pb2 as pb

from ._log_events import (
    HISTORY_SCHEMA,
    METRICS,
    QUOTA,
    Chunk,
    ChunkSummary,
    ConfigKey,
    LogEvents,
    SegmentRange,
    cache_path,
    deleted_message,
    events_of_batch,
    first_pass,
    frames_of,
    history_rows,
    last_rows,
)
from ._session import JobInputError
from ._util import SetAccumulator, hadoop_path_exists, writes_without_sort

if TYPE_CHECKING:
    from pyspark import Broadcast
    from pyspark.sql import SparkSession

__all__ = ["HISTORY_COLUMNS", "LogCompaction", "compact_log"]


#: The history table's columns (plus the partition column ``segment``).
HISTORY_COLUMNS = (
    "offset",
    "commit_time_ms",
    "commit_time",
    "principal",
    "request_id",
    "kind",
    "entity",
    "key",
    "old_value",
    "new_value",
)


@dataclass(frozen=True, slots=True)
class LogCompaction:
    """What a run did: the snapshot written, the offsets covered, the rows written."""

    snapshot: Path
    start_offset: int  # the first event read (0, or the end offset of the seed snapshot)
    end_offset: int  # the snapshot's end offset: events [0, end_offset) are in it
    segments: int  # segment files read
    events: int  # events read
    entries: int  # live config keys in the snapshot
    history_rows: int
    history_dir: str
    seed_snapshot: Path | None


# --- driver side --------------------------------------------------------------------------------------
def _choose_seed(log_dir: Path, start: int, up_to: int) -> tuple[Path, pb.SnapshotHeader, list] | None:
    """The newest valid snapshot with ``start <= end_offset <= up_to`` (what ``ConfigStore.open`` would use)."""
    for end, path in reversed(list_snapshots(log_dir)):
        if start <= end <= up_to:
            try:
                header, frames = read_snapshot_batches(path)
                ConfigImage.from_snapshot(header, frames)  # verify it replays before trusting it
            except Exception:  # a bad snapshot is skipped, as ConfigStore.open skips it
                continue
            return path, header, frames
    return None


#: The most events one task holds in memory (a few hundred bytes each as Python lists).
MAX_CHUNK_EVENTS = 250_000


def _plan_chunks(
    segments: Sequence[tuple[int, Path]],
    start: int,
    up_to: int,
    parallelism: int,
    max_chunk_events: int | None = None,
) -> list[Chunk]:
    """``[start, up_to)`` cut into equal chunks, at least one per core and at most ``MAX_CHUNK_EVENTS``
    each, whatever the segments' sizes: a few big segments still keep every core busy, and the first
    pass's summaries (one entry per key a chunk touches) stay as few as the cores allow.

    A frame belongs to the chunk its base offset falls in; the first chunk also owns the frames of the
    first segment below ``start`` (after retention, the seed snapshot cuts through it), which are
    verified and dropped.
    """
    total = up_to - start
    n = min(total, max(1, parallelism, -(-total // (max_chunk_events or MAX_CHUNK_EVENTS))))
    bounds = [start + k * total // n for k in range(n + 1)]
    reading = []
    for (base, path), following in zip(segments, [*segments[1:], None], strict=True):
        next_base = following[0] if following is not None else None
        if base < up_to and (next_base is None or next_base > start):
            reading.append((base, str(path), next_base))
    chunks = []
    for c_lo, c_hi in itertools.pairwise(bounds):
        ranges = []
        for base, path, next_base in reading:
            if base >= c_hi or (next_base is not None and next_base <= c_lo):
                continue
            lo = base if c_lo <= max(base, start) else c_lo
            hi = None if next_base is not None and next_base <= c_hi else c_hi
            ranges.append(SegmentRange(path, base, next_base, lo, hi))
        chunks.append(Chunk(tuple(ranges)))
    return chunks


@dataclass(slots=True)
class _State:
    """Each config key's last event so far: its value (the history's old values) and where its entry is."""

    values: dict[ConfigKey, str | None] = field(default_factory=dict)
    entries: dict[ConfigKey, tuple[int, int]] = field(default_factory=dict)  # (table, row)
    tables: list[dict[str, list]] = field(default_factory=list)

    def fold(self, table: pa.Table) -> list[str | None]:
        """Apply a chunk's last events (a key once each); the values their keys had before it, row for row
        (None: no value)."""
        columns = table.to_pydict()
        keys = list(zip(columns["kind"], columns["entity"], columns["key"], strict=True))
        values = self.values
        before = list(map(values.get, keys))
        values.update(zip(keys, columns["new_value"], strict=True))
        t = len(self.tables)
        self.tables.append(columns)
        self.entries.update(zip(keys, zip(itertools.repeat(t), range(len(keys)), strict=False), strict=True))
        return before

    def snapshot_batches(self) -> Iterator[pb.EventColumns]:
        """The live keys' entries in offset order, as the snapshot's entry frames (``ENTRIES_PER_FRAME``
        each): the columns ``write_snapshot`` would encode from ``ConfigImage.snapshot_events``'s events,
        built without an event per quota entry (client-metrics and config entries go through the same
        record builders, which normalise them)."""
        live = []
        for t, row in self.entries.values():
            columns = self.tables[t]
            if not columns["removed"][row]:
                live.append((columns["offset"][row], t, row))
        live.sort()
        for first in range(0, len(live), ENTRIES_PER_FRAME):
            batch = pb.EventColumns()
            offsets, times, principals, request_ids, kinds = [], [], [], [], []
            entities, keys, values = [], [], []
            for offset, t, row in live[first : first + ENTRIES_PER_FRAME]:
                columns = self.tables[t]
                offsets.append(offset)
                times.append(columns["commit_time_ms"][row])
                principals.append(columns["principal"][row])
                request_ids.append(columns["request_id"][row])
                kind = columns["kind"][row]
                if kind == QUOTA:
                    kinds.append(KIND_CLIENT_QUOTA)
                    entities.append(columns["entity"][row])
                    keys.append(columns["key"][row])
                    values.append(columns["quota_value"][row])
                elif kind == METRICS:
                    record = pb.ClientMetricsRecord.FromString(columns["record"][row])
                    kinds.append(KIND_CLIENT_METRICS)
                    event = client_metrics_event(record.name, client_metrics_configs(record))
                    batch.client_metrics.append(event.client_metrics)
                else:
                    record = pb.ConfigRecord.FromString(columns["record"][row])
                    kinds.append(KIND_CONFIG)
                    event = config_event(record.resource_type, record.resource_name, record.name, record.value)
                    batch.config.append(event.config)
            batch.offset.extend(offsets)
            batch.commit_time_ms.extend(times)
            batch.principal.extend(principals)
            batch.request_id.extend(request_ids)
            batch.kind.extend(kinds)
            batch.quota_entity.extend(entities)
            batch.quota_key.extend(keys)
            batch.quota_value.extend(values)
            batch.quota_remove.extend([False] * len(entities))
            yield batch


def _seed_table(frames: Sequence[pb.EventColumns]) -> pa.Table:
    """A seed snapshot's entries as a chunk's last events (state for old values, never history)."""
    events = LogEvents()
    for columns in frames:
        events.extend(events_of_batch(columns, list(columns.offset)))
    return events.take(last_rows(events)).table()


def compact_log(
    spark: SparkSession,
    log_dir: str | os.PathLike[str],
    history_dir: str,
    *,
    up_to_offset: int | None = None,
    max_applied_requests: int = DEFAULT_MAX_APPLIED_REQUESTS,
    fsync: bool = True,
) -> LogCompaction:
    """Compact ``log_dir`` up to ``up_to_offset`` (default: the live segment's base); see the module docstring.

    Raises ``JobInputError`` (nothing written) for a missing directory, a log without closed segments,
    an offset inside the live segment or below what the log and its snapshots hold, and corruption.
    """
    log_path = Path(log_dir)
    if not log_path.is_dir():
        raise JobInputError(f"no event log directory at {log_path}")
    segments = list_segments(log_path)
    if len(segments) < 2:
        raise JobInputError(
            f"{log_path}: no closed segment to compact ({len(segments)} segment file(s); the last is the live one)"
        )
    live = segments[-1][0]
    up_to = live if up_to_offset is None else up_to_offset
    if up_to > live:
        raise JobInputError(
            f"--up-to-offset {up_to} is inside the live segment (starting at {live}); the live segment is "
            f"never read: use at most {live}"
        )
    start = segments[0][0]
    seed = None
    if start > 0:
        seed = _choose_seed(log_path, start, up_to)
        if seed is None:
            raise JobInputError(
                f"{log_path}: the log starts at offset {start} (older segments deleted) and no valid snapshot "
                f"between {start} and {up_to} holds the events before it"
            )
        start = seed[1].end_offset
    if up_to <= start:
        raise JobInputError(f"{log_path}: nothing to compact: up-to offset {up_to} is not above {start}")

    sc = spark.sparkContext
    chunks = _plan_chunks(segments, start, up_to, sc.defaultParallelism)
    token = secrets.token_hex(8)
    # First pass: every chunk verified, decoded into its history rows (kept on the executor) and reduced to
    # its keys' last events, in parallel.
    summaries: list[ChunkSummary] = (
        sc.parallelize(list(enumerate(chunks)), len(chunks))
        .map(lambda chunk: first_pass(chunk[1], start, up_to, cache_path(token, chunk[0])))
        .collect()
    )
    try:
        return _compact(
            spark, summaries, chunks, seed, log_path, history_dir, start, up_to, max_applied_requests, fsync
        )
    finally:  # what pass two did not read (it failed, or it ran on another machine), if it is on this one
        for summary in summaries:
            if summary.cache is not None:
                with contextlib.suppress(OSError):
                    os.remove(summary.cache)


def _compact(
    spark: SparkSession,
    summaries: list[ChunkSummary],
    chunks: list[Chunk],
    seed: tuple[Path, pb.SnapshotHeader, list] | None,
    log_path: Path,
    history_dir: str,
    start: int,
    up_to: int,
    max_applied_requests: int,
    fsync: bool,
) -> LogCompaction:
    """``compact_log`` after the first pass: the fold, the second pass, the snapshot."""
    if bad := sorted({s.error for s in summaries if s.error}):
        raise JobInputError("; ".join(bad))
    n_read = sum(s.events for s in summaries)
    last_read = max(summaries, key=lambda s: s.last_offset)
    if n_read != up_to - start or last_read.last_offset != up_to - 1:
        raise JobInputError(
            f"{log_path}: read {n_read} events for offsets [{start}, {up_to}): the segments do not cover them"
        )
    # Each key's value before each chunk (the old values of the chunk's first events), and its last event
    # (the snapshot). The driver's own work is a few million objects, none in a cycle: no collections.
    state = _State()
    with gc_paused():
        if seed is not None:
            state.fold(_seed_table(seed[2]))
        values_before = [state.fold(s.last_table()) for s in summaries]
    rows_written = _write_history(spark, summaries, values_before, history_dir, start, up_to)
    with gc_paused():
        header = pb.SnapshotHeader(
            end_offset=up_to,
            last_commit_time_ms=last_read.last_commit_time_ms,
            applied_requests=_request_window(summaries, seed[1] if seed else None, max_applied_requests),
        )
        snapshot, entries = _write_snapshot(
            state.snapshot_batches(), header, log_path, max_applied_requests, fsync=fsync
        )
    return LogCompaction(
        snapshot=snapshot,
        start_offset=start,
        end_offset=up_to,
        segments=len({r.path for c in chunks for r in c.ranges}),
        events=n_read,
        entries=entries,
        history_rows=rows_written,
        history_dir=history_dir,
        seed_snapshot=seed[0] if seed else None,
    )


def _history_pass(
    summaries: Sequence[ChunkSummary],
    values_before: Sequence[Broadcast],
    start: int,
    up_to: int,
    skip_segment: int | None,
    errors: SetAccumulator,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The second pass (``mapInArrow`` over ``spark.range(len(summaries))``): chunk ``i``'s history rows, the
    old values of its keys' first events from ``values_before[i].value`` (one broadcast a chunk: a task
    loads only its own), none of segment ``skip_segment``. A chunk gives all its rows or none."""

    chunks = [(s.chunk, s.cache, s.events) for s in summaries]  # not the summaries' request ids and entries

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column("id").to_pylist():
                chunk, cache, events = chunks[i]
                if not events:  # a chunk that owns no frame
                    continue
                try:
                    rows = history_rows(chunk, start, up_to, cache, events, values_before[i].value)
                except CorruptLogError as exc:
                    errors.add((exc.path, str(exc)))
                    continue
                except FileNotFoundError as exc:
                    errors.add((str(exc.filename), deleted_message(str(exc.filename))))
                    continue
                if skip_segment is not None:
                    rows = rows.filter(pc.not_equal(rows.column("segment"), skip_segment))
                if rows.num_rows:
                    yield rows

    return run


def _write_history(
    spark: SparkSession,
    summaries: Sequence[ChunkSummary],
    values_before: Sequence[list[str | None]],
    history_dir: str,
    start: int,
    up_to: int,
) -> int:
    """The second pass: each chunk's history rows, written by the task that decodes them into their
    segments' partitions (no shuffle: the rows come in offset order)."""
    from pyspark.sql import functions as F

    skip = None
    first = summaries[0].chunk.ranges[0]
    if first.base < start and hadoop_path_exists(spark, f"{history_dir}/segment={first.base}"):
        # the segment the seed snapshot cuts through holds only part of its events here: write it only
        # if no earlier run wrote it whole
        skip = first.base
    rows_written = sum(n for s in summaries for base, n in s.segments if base != skip)
    if not rows_written:
        return 0
    sc = spark.sparkContext
    errors = SetAccumulator.create(sc)
    values = [sc.broadcast(pa.array(v, pa.string())) for v in values_before]
    try:
        rows = spark.range(len(summaries), numPartitions=len(summaries)).mapInArrow(
            _history_pass(summaries, values, start, up_to, skip, errors), HISTORY_SCHEMA
        )
        history = rows.withColumn("commit_time", F.timestamp_millis("commit_time_ms")).select(
            *HISTORY_COLUMNS, "segment"
        )
        # a task's rows come in (segment, offset) order already: written as they come, a file open per
        # segment of its chunk, where the writer's sort copied them all to put them in the same order
        with writes_without_sort(spark, max_writers=max(len(s.chunk.ranges) for s in summaries)):
            history.write.mode("overwrite").partitionBy("segment").parquet(history_dir)
    finally:
        for broadcast in values:
            broadcast.destroy()
    if errors.value:  # a segment deleted between the passes: no snapshot, and a clear message
        raise JobInputError("; ".join(sorted(message for _, message in errors.value)))
    return rows_written


def _request_window(
    summaries: Sequence[ChunkSummary], seed_header: pb.SnapshotHeader | None, max_applied_requests: int
) -> list[pb.AppliedRequest]:
    """The applied-request window of the image at the end of the events read: their request ids, frame by
    frame, through the image's own bookkeeping (it trims at the end of each frame, as a replay does)."""
    if max_applied_requests == 0:
        return []
    frames = itertools.chain.from_iterable(
        frames_of(s.frame_sizes, s.last_offset - s.events + 1, s.request_ids) for s in summaries
    )
    seed = seed_header.applied_requests if seed_header is not None else ()
    return ConfigImage.applied_request_window(seed, frames, max_applied_requests=max_applied_requests)


def _write_snapshot(
    batches: Iterator[pb.EventColumns],
    header: pb.SnapshotHeader,
    log_path: Path,
    max_applied_requests: int,
    *,
    fsync: bool,
) -> tuple[Path, int]:
    """Write, verify and rename the snapshot into ``log_path``; ``(path, entries)``."""
    up_to = header.end_offset
    staging = log_path / f".compact-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        staged = write_snapshot_columns(staging, header, batches, fsync=fsync)
        checked_header, frames = read_snapshot_batches(staged)  # every CRC, the counts, the name
        image = ConfigImage.from_snapshot(checked_header, frames, max_applied_requests=max_applied_requests)
        entries = checked_header.entry_count
        if image.end_offset != up_to or len(image) != entries:
            raise RuntimeError(f"the staged snapshot {staged} does not replay to {entries} keys at {up_to}")
        final = log_path / staged.name
        os.replace(staged, final)
        if fsync:
            fsync_directory(log_path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final, entries
