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
    decoded and written by a task of its own (``one_task_per_segment``), with no shuffle.
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
from ._util import SetAccumulator

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

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


def _kind_code() -> Column:
    """A point's (type, temporality) as one int: 3 x (type's place in ``_TYPES``, from 1) + (temporality's in
    ``_TEMPORALITIES``, from 1; 0 for null). Why: a string in an aggregation's buffer (``first("type")``)
    is not hash-aggregatable, and made Spark sort the points for the minute groups. A value outside
    those fails the job (it would not come back as it went in)."""
    from pyspark.sql import functions as F

    kind, temporality = F.col("type"), F.col("temporality")
    type_at = F.array_position(F.array(*map(F.lit, _TYPES)), kind)
    temporality_at = F.coalesce(F.array_position(F.array(*map(F.lit, _TEMPORALITIES)), temporality), F.lit(0))
    unknown = (type_at == 0) | (temporality.isNotNull() & (temporality_at == 0))
    message = F.concat(F.lit("rollups: unknown metric type or temporality: "), F.concat_ws("/", kind, temporality))
    return F.when(unknown, F.raise_error(message)).otherwise(type_at * 3 + temporality_at).cast("int")


def _kind_columns(code: Column) -> tuple[Column, Column]:
    """``_kind_code``'s (type, temporality) back."""
    from pyspark.sql import functions as F

    temporality_at = code % 3
    return (
        F.element_at(F.array(*map(F.lit, _TYPES)), (code / 3).cast("int")).alias("type"),
        F.when(temporality_at == 0, F.lit(None).cast("string"))
        .otherwise(F.element_at(F.array(*map(F.lit, _TEMPORALITIES)), temporality_at))
        .alias("temporality"),
    )


def rollups_of(points: DataFrame) -> DataFrame:
    """Per (date, hour, client_instance_id, metric, minute) rollups of ``points`` (module docstring),
    sorted within each task by the group keys (the writer's (date, hour) order first).

    One shuffle, by (date, hour, client_instance_id, metric): the series window (partitioned by those
    and the series' sorted attribute entries, ordered by time) and the minute groups (those keys and
    the minute) need no other, and an hour's rollups are computed by as many tasks as there are cores.
    The series is part of the window's partition, not only of its order, so a series' first point
    has no previous row at all: two lags (value, start time), where telling the previous row's series
    from this one's took seven (three of them of the attribute array, each compared) and an eighth of
    the rollups' time.

    The minute groups are hash aggregations, three nested ones, with no sort of the points: ``last``
    is the value of the latest point by (time, receive time), the largest value among points equal in
    both (as ``max_by(value, struct(time_ms, received_ms, value))`` had it, whose struct buffer, like
    ``first`` of a string, made Spark sort every point for a sort aggregation). The first aggregation
    (by the minute, time and receive time) takes the largest value of equal points, the second (by the
    minute and time) the value of the latest receive time, the third (by the minute) that of the
    latest time: each a ``max_by`` over a primitive, whose ordering has no ties in its group. The
    groups' count, min, max and sum fold through the three.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    no_attributes = F.create_map().cast("map<string,string>")
    series_key = F.array_sort(F.map_entries(F.coalesce("attributes", no_attributes)))
    keys = ("date", "hour", "client_instance_id", "metric")
    by_series = Window.partitionBy(*keys, "_series").orderBy("time_ms", "received_ms")
    prev, prev_start = F.col("_prev"), F.col("_prev_start")
    reset = (F.col("value") < prev) | ~F.col("start_time_ms").eqNullSafe(prev_start)
    cumulative_increase = (
        F.when(prev.isNull(), F.lit(None).cast("double")).when(reset, F.col("value")).otherwise(F.col("value") - prev)
    )
    columns = (*keys, "type", "temporality", "attributes", "time_ms", "received_ms", "value", "start_time_ms")
    with_increase = (
        points.select(*columns)
        .repartition(*keys)
        .withColumn("_series", series_key)
        .withColumn("_prev", F.lag("value").over(by_series))
        .withColumn("_prev_start", F.lag("start_time_ms").over(by_series))
        .withColumn(
            "_increase",
            F.when(F.col("temporality") == "cumulative", cumulative_increase).otherwise(F.col("value")),
        )
        .withColumn("bucket_ms", F.col("time_ms") - F.col("time_ms") % 60_000)
        .withColumn("_kind", _kind_code())
    )
    minute = (*keys, "bucket_ms")
    moments = with_increase.groupBy(*minute, "time_ms", "received_ms").agg(
        F.first("_kind").alias("_kind"),
        F.count("value").alias("count"),
        F.min("value").alias("min"),
        F.max("value").alias("max"),
        F.sum("_increase").alias("sum"),
    )
    times = moments.groupBy(*minute, "time_ms").agg(
        F.first("_kind").alias("_kind"),
        F.sum("count").alias("count"),
        F.min("min").alias("min"),
        F.max("max").alias("max"),
        F.sum("sum").alias("sum"),
        F.max_by("max", "received_ms").alias("last"),
    )
    minutes = times.groupBy(*minute).agg(
        F.first("_kind").alias("_kind"),
        F.sum("count").alias("count"),
        F.min("min").alias("min"),
        F.max("max").alias("max"),
        F.sum("sum").alias("sum"),
        F.max_by("last", "time_ms").alias("last"),
    )
    return minutes.select(
        *minute,
        *_kind_columns(F.col("_kind")),
        "count",
        "min",
        "max",
        "sum",
        "last",
        F.timestamp_millis(F.col("bucket_ms")).alias("bucket"),
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
    with one_task_per_segment(spark):
        (
            # No shuffle: a segment holds one archive hour, so each task writes one file, in its hour's
            # partition. (Gathering an hour into one task, for one file per hour, cost a tenth of the
            # job and left one core to write a whole hour.) In the order of Spark's writer, (date,
            # hour): a sort by more columns before it costs as much again.
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
    rollups = rollups_of(fresh)
    rollups.observe(rollups_written, rows).write.mode("overwrite").partitionBy("date", "hour").parquet(rollups_dir)
    return TelemetryCompaction(
        points_dir=points_dir,
        rollups_dir=rollups_dir,
        hours=hours,
        points=points_written.get["rows"],
        rollups=rollups_written.get["rows"],
        errors=tuple(sorted(errors.value)),
    )
