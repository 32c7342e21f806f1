"""Telemetry-archive compaction on Spark: one Parquet row per OTLP data point, and per-minute rollups.

``compact_telemetry(spark, roots, output)`` reads the ``telemetry`` stream of each archive root (each
shard writes its own: ``<data-dir>/shards/<id>/telemetry/``), decodes every archived push (the
broker-side labels, then the OTLP ``MetricsData`` body exactly as the client sent it) in the
executors, and writes:

``<output>/points/date=YYYY-MM-DD/hour=HH/``
    one row per data point: ``time`` / ``time_ms`` (the point's own time, the push's receive time if
    the client left it 0), ``received_ms``, ``client_instance_id``, ``client_id``, ``principal``,
    ``node_id``, every broker-added label (``labels``, a map), ``metric``, ``type`` (gauge, sum,
    histogram, exponential_histogram, summary), ``temporality`` (delta, cumulative; null for gauges
    and summaries), ``monotonic``, the point's ``attributes`` (a map of strings), ``value`` (the
    number; a histogram's or summary's sum), ``count`` (histograms and summaries), ``start_time_ms``,
    and ``segment`` (the file it came from). One Parquet file per archive segment: each segment is
    decoded and written by a task of its own (``one_task_per_segment``), with no shuffle and no sort.
``<output>/rollups/date=YYYY-MM-DD/hour=HH/``
    one row per (client_instance_id, metric, 1-minute bucket of the point time): ``count``, ``min``,
    ``max``, ``last`` of the values, and ``sum``: for DELTA sums the values added up, for CUMULATIVE
    sums the increases between consecutive points of each series (a series is a client instance,
    metric and attribute set), where a point whose value dropped or whose start time changed is a
    counter reset (its whole value is the increase since the reset) and the first point of a series
    in the run has no known predecessor (it adds nothing); for gauges the values added up.

**Partitioned by the archive's hour**, i.e. when the broker received the push, not the point's own
time: input hour H maps to output partition H and nothing else, so a re-run over the same hours
rewrites exactly those partitions (``partitionOverwriteMode=dynamic``) and is idempotent. The price:
a minute bucket whose points arrived in two archive hours (a push just after the hour carrying points
from before it) appears as a row in each; add their counts and sums to merge them.

**Bad input.** A corrupt segment is named in ``TelemetryCompaction.errors`` and skipped; the others
are written. An hour whose every segment is corrupt writes nothing, so an earlier run's partition
for it stays. A missing root, or no segments in the range, is a ``JobInputError`` before anything is
written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from quotaplane.exporters.archive import TELEMETRY_STREAM

from ._archive import list_hour_dirs, one_task_per_segment, read_stream_arrow
from ._arrow_telemetry import POINT_ARROW_SCHEMA, segment_push_batches
from ._session import JobInputError
from ._util import SetAccumulator, writes_without_sort

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["POINT_SCHEMA", "TELEMETRY_STREAM", "TelemetryCompaction", "compact_telemetry", "decode_telemetry"]

POINT_SCHEMA = (
    "date date, hour int, time_ms long, received_ms long, client_instance_id string, client_id string, "
    "principal string, node_id string, labels map<string,string>, metric string, type string, "
    "temporality string, monotonic boolean, attributes map<string,string>, value double, count long, "
    "start_time_ms long, segment string"
)
#: What the executors' Python hands the JVM: a row per push, its points in a list (``PUSH_ARROW_SCHEMA``).
PUSH_SCHEMA = (
    "date date, hour int, received_ms long, client_instance_id string, client_id string, principal string, "
    "node_id string, labels map<string,string>, segment string, points array<struct<time_ms: long, "
    "metric: string, type: string, temporality: string, monotonic: boolean, attributes: map<string,string>, "
    "value: double, count: long, start_time_ms: long>>"
)


@dataclass(frozen=True, slots=True)
class TelemetryCompaction:
    """What a run wrote, and the files it skipped (path, reason)."""

    points_dir: str
    rollups_dir: str
    hours: int  # archive hours read
    points: int
    rollups: int
    errors: tuple[tuple[str, str], ...]


def decode_telemetry(
    spark: SparkSession,
    roots: Sequence[str],
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
    stream: str = TELEMETRY_STREAM,
) -> tuple[DataFrame, SetAccumulator, int]:
    """The data points of the archived pushes (``POINT_SCHEMA``), the error accumulator (filled as the
    DataFrame is computed) and the number of archive hours read."""
    points, errors, hours, _ = _decode(spark, roots, start_ms, end_ms, stream)
    return points, errors, hours


def _decode(
    spark: SparkSession, roots: Sequence[str], start_ms: int | None, end_ms: int | None, stream: str
) -> tuple[DataFrame, SetAccumulator, int, SetAccumulator]:
    hour_dirs = list_hour_dirs(spark, roots, stream, start_ms=start_ms, end_ms=end_ms)
    errors = SetAccumulator.create(spark.sparkContext)
    seen = SetAccumulator.create(spark.sparkContext)
    pushes = read_stream_arrow(spark, hour_dirs, segment_push_batches, PUSH_SCHEMA, errors, seen)
    return points_of(pushes), errors, len({h.hour_ms for h in hour_dirs}), seen


def points_of(pushes: DataFrame) -> DataFrame:
    """``PUSH_SCHEMA`` rows spread into ``POINT_SCHEMA`` rows, a row per data point, by ``inline`` in the JVM.

    Why not a row per point from Python: a push's broker labels, client names and segment path (some
    350 of a point row's 500 bytes) then crossed from Python to the JVM, and were turned into Spark's
    rows, once per point rather than once per push.
    """
    from pyspark.sql import functions as F

    spread = pushes.select(*(c for c in pushes.columns if c != "points"), F.inline("points"))
    return spread.select(*POINT_ARROW_SCHEMA.names)


#: The values the decoder gives ``type`` (OTLP's five kinds of metric data) and ``temporality`` (or null): the
#: rollups carry them through their aggregations as one small number (``_kind_code``), which Spark can hash.
_TYPES = ("gauge", "sum", "histogram", "exponential_histogram", "summary")
_TEMPORALITIES = ("delta", "cumulative")


def _sql_array(values: Sequence[str]) -> str:
    return f"array({', '.join(repr(v) for v in values)})"


#: A point's (type, temporality) as one int (SQL): 3 x (type's place in ``_TYPES``, from 1) + (temporality's
#: in ``_TEMPORALITIES``, from 1; 0 for null). Why: a string in an aggregation's buffer (``first(type)``) is
#: not hash-aggregatable, and made Spark sort the points for the minute groups. A value outside those fails
#: the job (it would not come back as it went in).
_TYPE_AT = f"array_position({_sql_array(_TYPES)}, type)"
_TEMPORALITY_AT = f"coalesce(array_position({_sql_array(_TEMPORALITIES)}, temporality), 0)"
_KIND_CODE = (
    f"CAST(CASE WHEN {_TYPE_AT} = 0 OR (temporality IS NOT NULL AND {_TEMPORALITY_AT} = 0) "
    "THEN raise_error(concat('rollups: unknown metric type or temporality: ', concat_ws('/', type, temporality))) "
    f"ELSE {_TYPE_AT} * 3 + {_TEMPORALITY_AT} END AS INT)"
)
#: ``_KIND_CODE``'s (type, temporality) back, from the column ``_kind``.
_KIND_COLUMNS = (
    f"element_at({_sql_array(_TYPES)}, CAST(_kind / 3 AS INT)) AS type",
    "CASE WHEN _kind % 3 = 0 THEN CAST(NULL AS STRING) "
    f"ELSE element_at({_sql_array(_TEMPORALITIES)}, _kind % 3) END AS temporality",
)
_CUMULATIVE = _TEMPORALITIES.index("cumulative") + 1  # a cumulative point's ``_kind % 3``


#: The most points one rollup task takes (``rollup_partitions``): a few hundred bytes each in its sort and
#: hash maps, which spill beyond their memory, so this bounds the spilling rather than correctness.
POINTS_PER_ROLLUP_TASK = 2_000_000


def rollup_partitions(points: int, cores: int) -> int:
    """How many tasks the rollups of ``points`` points take: a multiple of ``cores`` (each core as many),
    enough that none takes more than ``POINTS_PER_ROLLUP_TASK``.

    Why not Spark's default (``spark.sql.shuffle.partitions``, coalesced by adaptive execution): the
    coalescing packs the equal shuffle partitions into groups of about a core's share, and groups of
    equal partitions rarely come out even (the bench's 8 became 3 on 2 cores: a second wave of one
    task, with one core idle); more tasks than that each write their own file per hour, which cost
    the rollups about a fifth more CPU at 8 tasks than at 2 (bench, 1M points).
    """
    cores = max(1, cores)
    waves = max(1, -(-points // (POINTS_PER_ROLLUP_TASK * cores)))
    return waves * cores


def rollups_of(points: DataFrame, partitions: int | None = None) -> DataFrame:
    """Per (date, hour, client_instance_id, metric, minute) rollups of ``points`` (module docstring),
    sorted within each task by the group keys (the writer's (date, hour) order first).

    One shuffle, by (date, hour, client_instance_id, metric), into ``partitions`` tasks (default:
    Spark's ``spark.sql.shuffle.partitions``, as adaptive execution coalesces them): the series window
    (partitioned by those and the series' sorted attribute entries, ordered by time) and the minute
    groups (those keys and the minute) need no other. The series is part of the window's partition,
    not only of its order, so a series' first point has no previous row at all: two lags (value,
    start time), where telling the previous row's series from this one's took seven (three of them of
    the attribute array, each compared) and an eighth of the rollups' time. (type, temporality) cross
    the shuffle as one int (``_KIND_CODE``), not as two strings.

    The minute groups are hash aggregations, three nested ones, with no sort of the points: ``last``
    is the value of the latest point by (time, receive time), the largest value among points equal in
    both (as ``max_by(value, struct(time_ms, received_ms, value))`` had it, whose struct buffer, like
    ``first`` of a string, made Spark sort every point for a sort aggregation). The first aggregation
    (by the minute, time and receive time) takes the largest value of equal points, the second (by the
    minute and time) the value of the latest receive time, the third (by the minute) that of the
    latest time: each a ``max_by`` over a primitive, whose ordering has no ties in its group. The
    groups' count, min, max and sum fold through the three.

    The plan is written in SQL expressions, a ``selectExpr`` or ``F.expr`` each: built from Python
    columns (a ``F.col`` / ``F.lit`` / operator each a call to the JVM, 1,400 of them) it took the driver
    0.3-0.45 s of each run, with the executors idle; about half that now, most of it Spark's analysis.
    """
    from pyspark.sql import functions as F

    keys = ("date", "hour", "client_instance_id", "metric")
    series = f"OVER (PARTITION BY {', '.join(keys)}, _series ORDER BY time_ms, received_ms)"
    prev, prev_start = f"lag(value) {series}", f"lag(start_time_ms) {series}"
    shuffled = points.selectExpr(
        *keys,
        f"{_KIND_CODE} AS _kind",
        "array_sort(map_entries(coalesce(attributes, CAST(map() AS MAP<STRING, STRING>)))) AS _series",
        "time_ms",
        "received_ms",
        "value",
        "start_time_ms",
    ).repartition(*((partitions,) if partitions else ()), *keys)
    with_increase = shuffled.selectExpr(
        *keys,
        "_kind",
        "time_ms",
        "received_ms",
        "value",
        f"CASE WHEN _kind % 3 = {_CUMULATIVE} THEN "
        f"CASE WHEN {prev} IS NULL THEN CAST(NULL AS DOUBLE) "
        f"WHEN value < {prev} OR NOT start_time_ms <=> {prev_start} THEN value "
        f"ELSE value - {prev} END "
        "ELSE value END AS _increase",
        "time_ms - time_ms % 60000 AS bucket_ms",
    )
    minute = (*keys, "bucket_ms")

    def aggregate(frame: DataFrame, by: Sequence[str], *aggregates: str) -> DataFrame:
        return frame.groupBy(*by).agg(*map(F.expr, aggregates))

    moments = aggregate(
        with_increase,
        (*minute, "time_ms", "received_ms"),
        "first(_kind) AS _kind",
        "count(value) AS `count`",
        "min(value) AS `min`",
        "max(value) AS `max`",
        "sum(_increase) AS `sum`",
    )
    folded = ("first(_kind) AS _kind", "sum(`count`) AS `count`", "min(`min`) AS `min`", "max(`max`) AS `max`")
    times = aggregate(
        moments, (*minute, "time_ms"), *folded, "sum(`sum`) AS `sum`", "max_by(`max`, received_ms) AS `last`"
    )
    minutes = aggregate(times, minute, *folded, "sum(`sum`) AS `sum`", "max_by(`last`, time_ms) AS `last`")
    return minutes.selectExpr(
        *minute,
        *_KIND_COLUMNS,
        "`count`",
        "`min`",
        "`max`",
        "`sum`",
        "`last`",
        "timestamp_millis(bucket_ms) AS bucket",
    ).sortWithinPartitions(*minute)


def compact_telemetry(
    spark: SparkSession,
    roots: Sequence[str],
    output: str,
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> TelemetryCompaction:
    """Decode the archive hours in ``[start_ms, end_ms)`` (default: all) of ``roots`` and write points and
    rollups under ``output`` (module docstring). Raises ``JobInputError`` before writing anything if
    there is nothing to read."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    output = output.rstrip("/") or output
    # the rows each write wrote, counted as it writes them (where a count of the written files cost a job
    # of its own each, a listing and a read of every file's footer)
    points_written, rollups_written = Observation(), Observation()
    rows = F.count(F.lit(1)).alias("rows")
    points, errors, hours, hours_with_rows = _decode(spark, roots, start_ms, end_ms, TELEMETRY_STREAM)
    points_dir, rollups_dir = f"{output}/points", f"{output}/rollups"
    # (a task holds one segment, of one hour: one writer; a second is a margin, and any further partition a
    # task met would be sorted and written as before)
    with one_task_per_segment(spark), writes_without_sort(spark, max_writers=2):
        (
            # No shuffle: a segment holds one archive hour, so each task writes one file, in its hour's
            # partition. (Gathering an hour into one task, for one file per hour, cost a tenth of the
            # job and left one core to write a whole hour.) No sort either (``writes_without_sort``):
            # the writer's sort by (date, hour) copied every row to order rows of one hour; a sort by
            # more columns before it cost as much again.
            points.withColumn("time", F.timestamp_millis("time_ms"))
            .observe(points_written, rows)
            .write.mode("overwrite")
            .partitionBy("date", "hour")
            .parquet(points_dir)
        )
    # Everything is decoded once; the rollups read back what was just written (only the hours that
    # got rows: an hour whose every segment was corrupt keeps what an earlier run wrote, as do its rollups).
    hours_read = sorted(hours_with_rows.value)
    if not hours_read:
        bad = "; ".join(sorted(m for _, m in errors.value))
        raise JobInputError(f"no data points decoded from {hours} archive hour(s){': ' + bad if bad else ''}")
    written = spark.read.parquet(points_dir)
    condition = None
    for hour_ms in hours_read:
        start = datetime.fromtimestamp(hour_ms / 1000, UTC)
        c = (F.col("date") == F.lit(start.date())) & (F.col("hour") == start.hour)
        condition = c if condition is None else condition | c
    fresh = written.where(condition)
    points_count = points_written.get["rows"]
    rollups = rollups_of(fresh, rollup_partitions(points_count, spark.sparkContext.defaultParallelism))
    rollups.observe(rollups_written, rows).write.mode("overwrite").partitionBy("date", "hour").parquet(rollups_dir)
    return TelemetryCompaction(
        points_dir=points_dir,
        rollups_dir=rollups_dir,
        hours=hours,
        points=points_count,
        rollups=rollups_written.get["rows"],
        errors=tuple(sorted(errors.value)),
    )
