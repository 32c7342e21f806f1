"""The throttle report: quotaplane's throttle decisions joined with what the throttled clients pushed.

Kafka tells a client how long to wait (``throttle_time_ms``) and trusts it to. Shards archive every
non-zero decision to the ``throttle`` stream (``actors/_throttle_archive.py``: one record per
decision, ``time_ms`` = the decision's ``now_ms``, labels ``quota_type`` / ``user`` / ``client_id`` /
``throttle_time_ms``, empty body), beside the ``telemetry`` stream of the same root. This job joins
the two, by user and client id, per minute, and names two kinds of client:

- **silent**: throttled in a minute, pushing telemetry around it, yet reporting no throttle: none of
  the pushes made from that minute until one push interval (plus a minute) later holds a throttle
  metric above zero. The throttle metrics are those KIP-714 defines and librdkafka and the Java
  client push: ``org.apache.kafka.producer.produce.throttle.time.avg|max`` for Produce quotas,
  ``org.apache.kafka.consumer.fetch.manager.fetch.throttle.time.avg|max`` (the Java consumer's
  fetch-throttle-time under KIP-714's naming; librdkafka pushes no consumer throttle metric) for
  Fetch quotas, and any ``*.throttle.time.*`` metric for Request and ControllerMutation quotas.
- **ignoring**: sends while it should be waiting. A client that honours ``throttle_time_ms`` makes
  no request to that broker until the delay is over, so its next decision comes at least that late;
  a decision that comes earlier (for the same quota type, user and client id) is an early request.
  A minute with at least ``min_decisions`` decisions of which at least ``early_fraction`` are early
  is a minute at full rate while throttled. (Decisions of different brokers share the record, so a
  client spreading requests over brokers looks early more often: hence a fraction, not a count.)

Telemetry comes from ``compact-telemetry``'s ``points`` table (the principal label ``User:alice`` is
matched to the throttle record's user ``alice``). Outputs, Parquet, overwritten as a whole:
``<output>/minutes`` (one row per throttled user, client id, quota type and minute, with the verdict)
and ``<output>/clients`` (one row per user and client id: minutes throttled, silent, ignoring), and
``<output>/report.html``: a static page rendered from those two tables (``_report_html``): the
``top_n`` worst tenants' throttle time and throttled requests per minute as matplotlib plots (PNG,
embedded), and the tables of clients ignoring throttles and of clients reporting none.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from quotaplane.archive import ArchiveRecord
from quotaplane.exporters.archive import THROTTLE_STREAM

from ._archive import list_hour_dirs, read_stream
from ._report_html import render_report
from ._session import JobInputError
from ._util import SetAccumulator, hadoop_path_exists

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "FETCH_THROTTLE_PREFIX",
    "PRODUCE_THROTTLE_PREFIX",
    "THROTTLE_SCHEMA",
    "THROTTLE_STREAM",
    "ThrottleReport",
    "decisions_of_record",
    "throttle_report",
]

PRODUCE_THROTTLE_PREFIX = "org.apache.kafka.producer.produce.throttle.time."
FETCH_THROTTLE_PREFIX = "org.apache.kafka.consumer.fetch.manager.fetch.throttle.time."
THROTTLE_SCHEMA = "time_ms long, quota_type string, user string, client_id string, throttle_time_ms long"


@dataclass(frozen=True, slots=True)
class ThrottleReport:
    minutes_dir: str
    clients_dir: str
    decisions: int
    silent_clients: tuple[tuple[str, str], ...]  # (user, client_id) throttled yet reporting no throttle
    ignoring_clients: tuple[tuple[str, str], ...]  # (user, client_id) sending at full rate while throttled
    errors: tuple[tuple[str, str], ...]
    html_path: str  # <output>/report.html


def _user_of(principal: str | None) -> str | None:
    """``User:alice`` -> ``alice`` (Kafka's quota user is the principal's name)."""
    if principal is None:
        return None
    return principal[5:] if principal.startswith("User:") else principal


def decisions_of_record(path: str, hour_ms: int, record: ArchiveRecord) -> Iterator[tuple]:
    """The ``THROTTLE_SCHEMA`` row of one throttle record; ValueError for a record not in that format."""
    labels = record.labels
    try:
        throttle = int(labels["throttle_time_ms"])
        row = (record.time_ms, labels["quota_type"], _user_of(labels["user"]), labels["client_id"], throttle)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"not a throttle record (labels {sorted(labels)}): {exc}") from None
    yield row


def _reported(quota_type: Column, produce: Column, fetch: Column, other: Column) -> Column:
    from pyspark.sql import functions as F

    return (
        F.when(quota_type == "Produce", produce)
        .when(quota_type == "Fetch", fetch)
        .otherwise(F.greatest(produce, fetch, other))
    )


def throttle_report(
    spark: SparkSession,
    roots: Sequence[str],
    points: str | DataFrame,
    output: str,
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
    min_decisions: int = 2,
    early_fraction: float = 0.5,
    top_n: int = 5,
) -> ThrottleReport:
    """Join the throttle archive of ``roots`` with the telemetry ``points`` (a path or a DataFrame of
    ``compact_telemetry``'s points) and write the report under ``output`` (module docstring)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if isinstance(points, str):
        if not hadoop_path_exists(spark, points):
            raise JobInputError(f"no telemetry points table at {points} (run compact-telemetry first)")
        points = spark.read.parquet(points)
    hour_dirs = list_hour_dirs(spark, roots, THROTTLE_STREAM, start_ms=start_ms, end_ms=end_ms)
    errors = SetAccumulator.create(spark.sparkContext)
    decisions = spark.createDataFrame(read_stream(spark, hour_dirs, decisions_of_record, errors), THROTTLE_SCHEMA)
    if start_ms is not None:
        decisions = decisions.where(F.col("time_ms") >= start_ms)
    if end_ms is not None:
        decisions = decisions.where(F.col("time_ms") < end_ms)

    # early: a decision before the previous one's throttle was over (same quota type, user, client id)
    stream = Window.partitionBy("quota_type", "user", "client_id").orderBy("time_ms")
    previous_end = F.lag(F.col("time_ms") + F.col("throttle_time_ms")).over(stream)
    throttled = (
        decisions.withColumn("early", F.coalesce(F.col("time_ms") < previous_end, F.lit(False)))
        .withColumn("minute_ms", F.col("time_ms") - F.col("time_ms") % 60_000)
        .groupBy("quota_type", "user", "client_id", "minute_ms")
        .agg(
            F.count("*").alias("decisions"),
            F.sum("throttle_time_ms").alias("throttle_time_ms_total"),
            F.max("throttle_time_ms").alias("throttle_time_ms_max"),
            F.sum(F.col("early").cast("int")).alias("early_decisions"),
        )
    )

    name = F.col("metric")
    value = F.coalesce(F.col("value"), F.lit(0.0))
    telemetry = (
        points.select(
            F.regexp_replace("principal", "^User:", "").alias("t_user"),
            F.col("client_id").alias("t_client_id"),
            (F.col("time_ms") - F.col("time_ms") % 60_000).alias("t_minute_ms"),
            F.col("received_ms"),
            F.col("labels").getItem("push_interval_ms").cast("long").alias("push_interval_ms"),
            F.when(name.startswith(PRODUCE_THROTTLE_PREFIX), value).alias("produce"),
            F.when(name.startswith(FETCH_THROTTLE_PREFIX), value).alias("fetch"),
            F.when(name.contains(".throttle.time."), value).alias("other"),
        )
        .groupBy("t_user", "t_client_id", "t_minute_ms")
        .agg(
            F.countDistinct("received_ms").alias("pushes"),
            F.max("push_interval_ms").alias("push_interval_ms"),
            F.max("produce").alias("produce"),
            F.max("fetch").alias("fetch"),
            F.max("other").alias("other"),
        )
    )
    lookahead = F.coalesce(F.col("push_interval_ms"), F.lit(300_000)) + 60_000
    joined = throttled.join(
        telemetry,
        (throttled.user == telemetry.t_user)
        & (throttled.client_id == telemetry.t_client_id)
        & (telemetry.t_minute_ms >= throttled.minute_ms)
        & (telemetry.t_minute_ms <= throttled.minute_ms + lookahead),
        "left",
    )
    keys = ["quota_type", "user", "client_id", "minute_ms"]
    minutes = (
        joined.groupBy(*keys)
        .agg(
            F.first("decisions").alias("decisions"),
            F.first("throttle_time_ms_total").alias("throttle_time_ms_total"),
            F.first("throttle_time_ms_max").alias("throttle_time_ms_max"),
            F.first("early_decisions").alias("early_decisions"),
            F.coalesce(F.sum("pushes"), F.lit(0)).alias("pushes_after"),
            F.max(_reported(F.col("quota_type"), F.col("produce"), F.col("fetch"), F.col("other"))).alias(
                "reported_throttle_max"
            ),
        )
        .withColumn(
            "verdict",
            F.when(F.col("pushes_after") == 0, "no_telemetry")
            .when(F.coalesce(F.col("reported_throttle_max"), F.lit(0.0)) > 0, "reports_throttle")
            .otherwise("no_throttle_reported"),
        )
        .withColumn(
            "sends_while_throttled",
            (F.col("decisions") >= min_decisions) & (F.col("early_decisions") >= F.col("decisions") * early_fraction),
        )
        .withColumn("minute", F.timestamp_millis("minute_ms"))
    )
    output = output.rstrip("/") or output
    minutes_dir, clients_dir = f"{output}/minutes", f"{output}/clients"
    minutes.orderBy(*keys).write.mode("overwrite").parquet(minutes_dir)
    if errors.value and not hadoop_path_exists(spark, minutes_dir):
        raise JobInputError("; ".join(sorted(m for _, m in errors.value)))
    written = spark.read.parquet(minutes_dir)
    clients = written.groupBy("user", "client_id").agg(
        F.countDistinct("minute_ms").alias("throttled_minutes"),
        F.sum("decisions").alias("decisions"),
        F.sum((F.col("verdict") == "no_throttle_reported").cast("int")).alias("silent_minutes"),
        F.sum((F.col("verdict") == "reports_throttle").cast("int")).alias("reporting_minutes"),
        F.sum((F.col("verdict") == "no_telemetry").cast("int")).alias("no_telemetry_minutes"),
        F.sum(F.col("sends_while_throttled").cast("int")).alias("ignoring_minutes"),
    )
    clients.orderBy("user", "client_id").write.mode("overwrite").parquet(clients_dir)
    summary = spark.read.parquet(clients_dir).collect()
    # only the worst tenants' per-minute sums reach the driver, however many clients were throttled
    totals = written.groupBy("user").agg(F.sum("throttle_time_ms_total").alias("total"))
    worst = [r.user for r in totals.orderBy(F.desc("total"), "user").limit(top_n).collect()]
    plotted = (
        written.where(F.col("user").isin(worst))
        .groupBy("user", "minute_ms")
        .agg(F.sum("decisions").alias("decisions"), F.sum("throttle_time_ms_total").alias("throttle_time_ms_total"))
        .collect()
    )
    page = render_report(
        [r.asDict() for r in plotted],
        [r.asDict() for r in summary],
        top_n=top_n,
        generated_ms=int(time.time() * 1000),
    )
    html_path = f"{output}/report.html"
    _write_text(spark, html_path, page)
    return ThrottleReport(
        minutes_dir=minutes_dir,
        clients_dir=clients_dir,
        decisions=sum(r.decisions for r in summary),
        silent_clients=tuple(
            (r.user, r.client_id) for r in summary if r.silent_minutes > 0 and r.reporting_minutes == 0
        ),
        ignoring_clients=tuple((r.user, r.client_id) for r in summary if r.ignoring_minutes > 0),
        errors=tuple(sorted(errors.value)),
        html_path=html_path,
    )


def _write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through Hadoop's file system API, as the tables beside it are: a
    local path or any URI Spark writes (``hdfs://``, ``s3a://``...)."""
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.create(hadoop_path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()
