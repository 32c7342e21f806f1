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

**The request-id window.** The image remembers the last ``max_applied_requests`` request ids with
their (first, last) offsets, trimmed in bulk at the end of each replayed frame. When every request
id's events are contiguous in the log (what ``ConfigStore`` writes: one request, one append) that
window is "the last N ids by first offset", computed by a Spark aggregation. Otherwise (an id reused
after others), the window depends on when the bulk trims happened, so the job replays the request-id
runs frame by frame through the image's own bookkeeping on the driver: slower, but identical.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quotaplane.config import (
    DEFAULT_MAX_APPLIED_REQUESTS,
    ConfigImage,
    ConfigResourceType,
    CorruptLogError,
    client_metrics_configs,
    client_metrics_event,
    client_quota_event,
    config_event,
    entity_of,
)
from quotaplane.config.logformat import (
    KIND_CLIENT_METRICS,
    KIND_CLIENT_QUOTA,
    KIND_CONFIG,
    FrameError,
    decode_event_batch,
    list_segments,
    list_snapshots,
    parse_frame,
    read_snapshot_batches,
    write_snapshot,
)
from quotaplane.durable import fsync_directory
from quotaplane.v1 import config_events_pb2 as pb

from ._session import JobInputError
from ._util import SetAccumulator, hadoop_path_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["HISTORY_COLUMNS", "LogCompaction", "compact_log", "decode_segment_file"]

QUOTA, METRICS, CONFIG = "client-quota", "client-metrics", "config"

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

_EVENT_SCHEMA = (
    "offset long, segment long, frame_base long, commit_time_ms long, principal string, request_id string, "
    "kind string, entity string, key string, config_key string, new_value string, removed boolean, "
    "quota_value double, record binary"
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


# --- executor side ------------------------------------------------------------------------------------
def _value_json(configs: dict[str, str]) -> str:
    return json.dumps(configs, sort_keys=True, separators=(",", ":"))


def _quota_text(value: float) -> str:
    return repr(float(value))


def _rows_of_batch(
    columns: pb.EventColumns, offsets: Sequence[int], segment: int, frame_base: int, stop: int
) -> Iterator[tuple[Any, ...]]:
    """Rows (``_EVENT_SCHEMA``) for the first ``stop`` events of one decoded frame (or snapshot batch)."""
    kinds = list(columns.kind)
    times = list(columns.commit_time_ms)
    principals = list(columns.principal)
    request_ids = list(columns.request_id)
    quota = zip(columns.quota_entity, columns.quota_key, columns.quota_value, columns.quota_remove, strict=True)
    metrics = iter(columns.client_metrics)
    configs = iter(columns.config)
    for i, kind in enumerate(kinds[:stop]):
        offset = offsets[i]
        if kind == KIND_CLIENT_QUOTA:
            eid, key, value, remove = next(quota)
            entity_of(eid)  # a non-canonical entity id is corruption: the log's replay refuses it too
            row = (QUOTA, eid, key, json.dumps([QUOTA, eid, key]), None if remove else _quota_text(value), remove)
            quota_value, record = (None if remove else float(value)), None
        elif kind == KIND_CLIENT_METRICS:
            message = next(metrics)
            cm = client_metrics_configs(message)
            new = _value_json(cm) if cm else None
            row = (METRICS, message.name, message.name, json.dumps([METRICS, message.name]), new, not cm)
            quota_value, record = None, message.SerializeToString()
        elif kind == KIND_CONFIG:
            message = next(configs)
            rtype, rname = message.resource_type, message.resource_name
            if rtype not in (ConfigResourceType.BROKER, ConfigResourceType.TOPIC):
                raise ValueError(f"the event at offset {offset} has an unknown config resource type {rtype}")
            has = message.HasField("value")
            entity = f"{ConfigResourceType(rtype).name.lower()}:{rname}"
            row = (
                CONFIG,
                entity,
                message.name,
                json.dumps([CONFIG, rtype, rname, message.name]),
                message.value if has else None,
                not has,
            )
            quota_value, record = None, message.SerializeToString()
        else:
            raise ValueError(f"the event at offset {offset} has an unknown record kind {kind}")
        yield (offset, segment, frame_base, times[i], principals[i], request_ids[i], *row, quota_value, record)


def decode_segment_file(path: str, base: int, next_base: int | None, up_to: int) -> Iterator[tuple[Any, ...]]:
    """Every event of one closed segment below ``up_to``, as rows; raises ``CorruptLogError``.

    Checked as the log's recovery checks a segment that is not the last (any frame that does not
    verify is corruption, there is no torn tail to forgive): both CRCs of every frame, dense offsets
    from the name, the frame's record count against its payload, and, when the whole segment is
    read, that it ends exactly where the next segment (``next_base``) begins.
    """
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise CorruptLogError(path, 0, "empty segment that is not the last", offset=base)
    position, expected = 0, base
    while position < len(data) and expected < up_to:
        try:
            header = parse_frame(data, position)
            if header.base_offset != expected:
                raise CorruptLogError(
                    path, position, f"frame base offset {header.base_offset}, expected {expected}", offset=expected
                )
            batch = decode_event_batch(data, header)
        except FrameError as exc:
            raise CorruptLogError(path, exc.position, exc.reason, offset=expected) from None
        try:
            count = min(header.record_count, up_to - expected)
            yield from _rows_of_batch(batch, range(expected, expected + count), base, expected, count)
        except ValueError as exc:
            raise CorruptLogError(path, position, str(exc), offset=expected) from None
        position, expected = header.end, header.next_offset
    if expected < up_to and next_base is not None and expected != next_base:
        raise CorruptLogError(
            path,
            position,
            f"segment ends at offset {expected}, the next segment starts at {next_base}",
            offset=expected,
        )


def _decode_task(
    errors: SetAccumulator, up_to: int
) -> Callable[[tuple[str, int, int | None]], Iterator[tuple[Any, ...]]]:
    def run(item: tuple[str, int, int | None]) -> Iterator[tuple[Any, ...]]:
        path, base, next_base = item
        try:
            yield from decode_segment_file(path, base, next_base, up_to)
        except CorruptLogError as exc:
            errors.add((path, str(exc)))
        except FileNotFoundError:
            errors.add((path, f"{path}: segment deleted while the job ran (retention?); run it again"))

    return run


# --- driver side --------------------------------------------------------------------------------------
def _seed_rows(frames: list[pb.EventColumns]) -> list[tuple[Any, ...]]:
    """Rows for a seed snapshot's entries (segment -1: state for old values, never written as history)."""
    rows: list[tuple[Any, ...]] = []
    for columns in frames:
        rows += _rows_of_batch(columns, list(columns.offset), -1, -1, len(columns.kind))
    return rows


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


def _entry_event(row: Any) -> pb.Event:
    """The snapshot entry (as ``ConfigImage.snapshot_events`` builds it) for the last event of a key."""
    if row.kind == QUOTA:
        event = client_quota_event(entity_of(row.entity), row.key, row.quota_value)
    elif row.kind == METRICS:
        record = pb.ClientMetricsRecord.FromString(row.record)
        event = client_metrics_event(record.name, client_metrics_configs(record))
    else:
        record = pb.ConfigRecord.FromString(row.record)
        event = config_event(record.resource_type, record.resource_name, record.name, record.value)
    event.commit_time_ms, event.principal, event.request_id = row.commit_time_ms, row.principal, row.request_id
    return event


def _request_window(
    events: DataFrame, seed_header: pb.SnapshotHeader | None, max_applied_requests: int
) -> list[pb.AppliedRequest]:
    """The applied-request window of the image at the end of ``events`` (module docstring)."""
    from pyspark.sql import functions as F

    if max_applied_requests == 0:
        return []
    ids = events.where(F.col("request_id") != "")
    if seed_header is None:
        spans = ids.groupBy("request_id").agg(
            F.min("offset").alias("first"), F.max("offset").alias("last"), F.count("*").alias("n")
        )
        if spans.where(F.col("n") != F.col("last") - F.col("first") + 1).limit(1).count() == 0:
            newest = spans.orderBy(F.col("first").desc()).limit(max_applied_requests).collect()
            return [
                pb.AppliedRequest(request_id=r.request_id, first_offset=r.first, last_offset=r.last)
                for r in reversed(newest)
            ]
    # Exact path: the request-id runs of each frame, in offset order, through the image's own bookkeeping
    # (it trims at the end of each frame, as a replay of the log does).
    rows = events.where(F.col("segment") >= 0).select("frame_base", "offset", "request_id").orderBy("offset")

    def frames() -> Iterator[tuple[list[int], list[str]]]:
        for _, frame in itertools.groupby(rows.toLocalIterator(), key=lambda r: r.frame_base):
            offsets, request_ids = [], []
            for request_id, run in itertools.groupby(frame, key=lambda r: r.request_id):
                run = list(run)
                offsets += [run[0].offset, run[-1].offset]
                request_ids += [request_id, request_id]
            yield offsets, request_ids

    seed = seed_header.applied_requests if seed_header is not None else ()
    return ConfigImage.applied_request_window(seed, frames(), max_applied_requests=max_applied_requests)


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
    from pyspark.sql import functions as F

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

    tasks = []
    for (base, path), following in zip(segments, [*segments[1:], None], strict=True):
        next_base = following[0] if following is not None else None
        if base < up_to and (next_base is None or next_base > start):
            tasks.append((str(path), base, next_base))
    sc = spark.sparkContext
    errors = SetAccumulator.create(sc)
    rdd = sc.parallelize(tasks, len(tasks)).flatMap(_decode_task(errors, up_to))
    events = spark.createDataFrame(rdd, _EVENT_SCHEMA).where(F.col("offset") >= start)
    if seed is not None:
        seed_df = spark.createDataFrame(_seed_rows(seed[2]), _EVENT_SCHEMA)
        events = seed_df.unionByName(events)
    events = events.persist()
    try:
        counts = events.groupBy((F.col("segment") >= 0).alias("read")).agg(
            F.count("*").alias("n"), F.max("offset").alias("last")
        )
        read = {r.read: r for r in counts.collect()}
        if errors.value:
            raise JobInputError("; ".join(sorted(message for _, message in errors.value)))
        n_read = read[True].n if True in read else 0
        if n_read != up_to - start or (n_read and read[True].last != up_to - 1):
            raise JobInputError(
                f"{log_path}: read {n_read} events for offsets [{start}, {up_to}): the segments do not cover them"
            )
        history_rows = _write_history(spark, events, history_dir, start, seed is not None)
        snapshot = _write_snapshot(events, log_path, seed, up_to, max_applied_requests, fsync=fsync)
    finally:
        events.unpersist()
    return LogCompaction(
        snapshot=snapshot[0],
        start_offset=start,
        end_offset=up_to,
        segments=len(tasks),
        events=n_read,
        entries=snapshot[1],
        history_rows=history_rows,
        history_dir=history_dir,
        seed_snapshot=seed[0] if seed else None,
    )


def _write_history(spark: SparkSession, events: DataFrame, history_dir: str, start: int, seeded: bool) -> int:
    """The history rows of the events read (not the seed), with old values from the key's previous event."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_key = Window.partitionBy("config_key").orderBy("offset")
    history = (
        events.withColumn("old_value", F.lag("new_value").over(by_key))
        .where(F.col("segment") >= 0)
        .withColumn("commit_time", F.timestamp_millis("commit_time_ms"))
        .select(*HISTORY_COLUMNS, "segment")
    )
    if seeded:
        # the segment the seed snapshot cuts through holds only part of its events here: write it only
        # if no earlier run wrote it whole
        first = events.where(F.col("segment") >= 0).agg(F.min("segment")).first()[0]
        if first is not None and first < start and hadoop_path_exists(spark, f"{history_dir}/segment={first}"):
            history = history.where(F.col("segment") != first)
    history = history.repartition("segment").sortWithinPartitions("offset")
    history.write.mode("overwrite").partitionBy("segment").parquet(history_dir)
    return history.count() if seeded else events.where(F.col("segment") >= 0).count()


def _write_snapshot(
    events: DataFrame,
    log_path: Path,
    seed: tuple[Path, pb.SnapshotHeader, list] | None,
    up_to: int,
    max_applied_requests: int,
    *,
    fsync: bool,
) -> tuple[Path, int]:
    """Write, verify and rename the snapshot into ``log_path``; ``(path, entries)``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    latest = Window.partitionBy("config_key").orderBy(F.col("offset").desc())
    live = (
        events.withColumn("_rank", F.row_number().over(latest))
        .where((F.col("_rank") == 1) & ~F.col("removed"))
        .select("offset", "commit_time_ms", "principal", "request_id", "kind", "entity", "key", "quota_value", "record")
        .orderBy("offset")
    )
    entries = [(row.offset, _entry_event(row)) for row in live.toLocalIterator()]
    last_time = events.where(F.col("offset") == up_to - 1).select("commit_time_ms").first()
    header = pb.SnapshotHeader(
        end_offset=up_to,
        last_commit_time_ms=last_time[0],
        applied_requests=_request_window(events, seed[1] if seed else None, max_applied_requests),
    )
    staging = log_path / f".compact-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        staged = write_snapshot(staging, header, entries, fsync=fsync)
        checked_header, frames = read_snapshot_batches(staged)  # every CRC, the counts, the name
        image = ConfigImage.from_snapshot(checked_header, frames, max_applied_requests=max_applied_requests)
        if image.end_offset != up_to or len(image) != len(entries):
            raise RuntimeError(f"the staged snapshot {staged} does not replay to {len(entries)} keys at {up_to}")
        final = log_path / staged.name
        os.replace(staged, final)
        if fsync:
            fsync_directory(log_path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final, len(entries)
