"""compact_telemetry and throttle_report on a real local Spark, over archives written by the project's
own writers (TelemetryArchiveExporter's record format via ArchiveWriter, real OTLP MetricsData)."""

from __future__ import annotations

from collections import defaultdict
from datetime import date as date_
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m

from quotaplane.archive import ArchiveRecord, ArchiveWriter
from quotaplane.exporters.archive import telemetry_record
from quotaplane.spark import JobInputError, compact_telemetry, throttle_report
from quotaplane.telemetry._exporter import ClientTelemetryContext, ClientTelemetryPayload

T0 = 1_700_002_800_000  # 2023-11-14 23:00 UTC: the pushes cross into the next day's hour 00
NS = 1_000_000
CUM, DELTA = m.AGGREGATION_TEMPORALITY_CUMULATIVE, m.AGGREGATION_TEMPORALITY_DELTA
THROTTLE_MAX = "org.apache.kafka.producer.produce.throttle.time.max"
SENT = "org.apache.kafka.producer.record.send.total"


def _push(client: int, k: int, t_ms: int) -> bytes:
    """One client's push: a gauge, a cumulative counter (reset at push 25 for client 1), a delta sum."""
    md = m.MetricsData()
    metrics = md.resource_metrics.add().scope_metrics.add().metrics
    g = metrics.add(name=THROTTLE_MAX).gauge.data_points.add(time_unix_nano=t_ms * NS)
    g.as_double = 0.0 if client == 1 else float((k * 7) % 50)  # client 1 never reports a throttle
    counter = metrics.add(name=SENT).sum
    counter.aggregation_temporality, counter.is_monotonic = CUM, True
    for node in (1, 2):
        total = (k + 1) * 10 * node if not (client == 1 and k >= 25) else (k - 24) * 3 * node
        start = T0 if not (client == 1 and k >= 25) else T0 + 25 * 20_000
        p = counter.data_points.add(time_unix_nano=t_ms * NS, start_time_unix_nano=start * NS, as_int=total)
        p.attributes.append(KeyValue(key="node.id", value={"string_value": str(node)}))
    delta = metrics.add(name="org.apache.kafka.producer.connection.creation.total").sum
    delta.aggregation_temporality = DELTA
    delta.data_points.add(time_unix_nano=t_ms * NS, start_time_unix_nano=(t_ms - 20_000) * NS, as_int=k % 3)
    return md.SerializeToString()


def _record(client: int, k: int) -> ArchiveRecord:
    t = T0 + 3_000_000 + k * 20_000  # pushes every 20 s from 23:50 to 00:05
    context = ClientTelemetryContext(push_interval_ms=20_000, request_context=None, received_ms=t + 5, node_id=0)
    data = _push(client, k, t)
    payload = ClientTelemetryPayload(
        client_instance_id=None,
        is_terminating=False,
        content_type="application/x-protobuf",
        compression_type=4,
        compressed_size=len(data),
        data=data,
        resource_attributes={
            "client_instance_id": f"id-{client}",
            "client_id": f"producer-{client}",
            "principal": f"User:u{client}",
            "node_id": "0",
        },
        metrics_data=m.MetricsData.FromString(data),
    )
    return telemetry_record(context, payload)


PUSHES = 45


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("data")
    for shard in (0, 1):
        root = data_dir / "shards" / str(shard)
        with ArchiveWriter(root, "telemetry", writer_id=f"s{shard}") as writer:
            for client in (shard, shard + 2):
                for k in range(PUSHES):
                    writer.append(_record(client, k))
                    if k % 10 == 9:
                        writer.flush()  # several batches per segment
            writer.flush()
        with ArchiveWriter(root, "throttle", writer_id=f"s{shard}") as writer:
            for client in (shard, shard + 2):
                for j in range(30):
                    # client 2 asks again 100 ms after a 500 ms throttle: it ignores throttle_time_ms
                    t = T0 + 3_000_000 + j * (100 if client == 2 else 2_000)
                    labels = {
                        "quota_type": "Produce",
                        "user": f"u{client}",
                        "client_id": f"producer-{client}",
                        "throttle_time_ms": "500",
                    }
                    writer.append(ArchiveRecord(t, labels, b""))
            writer.flush()
    return data_dir


def _roots(archive: Path) -> list[str]:
    return [str(p) for p in sorted((archive / "shards").iterdir())]


def _expected_rollups() -> dict[tuple, tuple]:
    """The rollups computed plainly from the same pushes (see compact_telemetry's docstring)."""
    points = defaultdict(list)  # (hour key, client, metric) -> [(time, received, attrs, value, temporality, start)]
    for client in range(4):
        for k in range(PUSHES):
            record = _record(client, k)
            hour = record.time_ms // 3_600_000
            md = m.MetricsData.FromString(record.body)
            for metric in md.resource_metrics[0].scope_metrics[0].metrics:
                kind = metric.WhichOneof("data")
                data = getattr(metric, kind)
                temporality = {1: "delta", 2: "cumulative"}.get(getattr(data, "aggregation_temporality", 0))
                for p in data.data_points:
                    value = float(p.as_int) if p.WhichOneof("value") == "as_int" else p.as_double
                    attrs = tuple((a.key, a.value.string_value) for a in p.attributes)
                    points[(hour, f"id-{client}", metric.name)].append(
                        (
                            p.time_unix_nano // NS,
                            record.time_ms,
                            attrs,
                            value,
                            temporality,
                            p.start_time_unix_nano // NS,
                        )
                    )
    out = {}
    for (hour, client, metric), pts in points.items():
        increases = {}
        series = defaultdict(list)
        for pt in pts:
            series[pt[2]].append(pt)
        for s in series.values():
            s.sort(key=lambda x: (x[0], x[1]))
            prev = None
            for pt in s:
                if pt[4] != "cumulative":
                    inc = pt[3]
                elif prev is None:
                    inc = None
                elif pt[3] < prev[3] or pt[5] != prev[5]:
                    inc = pt[3]
                else:
                    inc = pt[3] - prev[3]
                increases[id(pt)] = inc
                prev = pt
        buckets = defaultdict(list)
        for pt in pts:
            buckets[pt[0] - pt[0] % 60_000].append(pt)
        for bucket, bpts in buckets.items():
            values = [p[3] for p in bpts]
            incs = [increases[id(p)] for p in bpts if increases[id(p)] is not None]
            last = max(bpts, key=lambda p: (p[0], p[1], p[3]))[3]
            out[(hour, client, metric, bucket)] = (
                len(values),
                min(values),
                max(values),
                sum(incs) if incs else None,
                last,
            )
    return out


def test_points_and_rollups_match_a_plain_computation(spark, archive: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    result = compact_telemetry(spark, _roots(archive), out)
    assert result.errors == ()
    points = spark.read.parquet(result.points_dir)
    # 4 clients x 45 pushes x (1 gauge + 2 counter points + 1 delta)
    assert points.count() == result.points == 4 * PUSHES * 4
    assert {(r.date.isoformat(), r.hour) for r in points.select("date", "hour").distinct().collect()} == {
        ("2023-11-14", 23),
        ("2023-11-15", 0),
    }
    row = points.where("metric = 'org.apache.kafka.producer.record.send.total'").first()
    assert row.type == "sum" and row.temporality == "cumulative" and row.monotonic is True
    assert set(row.attributes) == {"node.id"} and row.labels["push_interval_ms"] == "20000"
    assert row.principal.startswith("User:") and row.client_id.startswith("producer-")

    got = {}
    for r in spark.read.parquet(result.rollups_dir).collect():
        hour = (r.date.toordinal() - 719163) * 24 + r.hour
        got[(hour, r.client_instance_id, r.metric, r.bucket_ms)] = (r["count"], r["min"], r["max"], r["sum"], r["last"])
    assert got == _expected_rollups()

    # idempotent: the same input again leaves the same tables
    before = sorted(map(tuple, spark.read.parquet(result.rollups_dir).collect()))
    compact_telemetry(spark, _roots(archive), out)
    assert spark.read.parquet(result.points_dir).count() == result.points
    assert sorted(map(tuple, spark.read.parquet(result.rollups_dir).collect())) == before


def test_corrupt_segment_is_named_and_skipped(spark, archive: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(archive, copy)
    segment = sorted((copy / "shards" / "0" / "telemetry").rglob("*.seg"))[0]
    data = bytearray(segment.read_bytes())
    data[60] ^= 0xFF  # inside the first batch, with valid batches after it: corruption, not a torn tail
    segment.write_bytes(bytes(data))
    result = compact_telemetry(spark, _roots(copy), str(tmp_path / "out"))
    assert [path.rsplit("/", 1)[-1] for path, _ in result.errors] == [segment.name]
    clients = {
        r.client_instance_id for r in spark.read.parquet(result.points_dir).select("client_instance_id").collect()
    }
    assert {"id-1", "id-3"} <= clients  # shard 1's segments all kept


def test_bad_input(spark, tmp_path: Path) -> None:
    with pytest.raises(JobInputError, match="no archive root"):
        compact_telemetry(spark, [str(tmp_path / "missing")], str(tmp_path / "out"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(JobInputError, match="no telemetry segments"):
        compact_telemetry(spark, [str(tmp_path / "empty")], str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_throttle_report_names_silent_and_ignoring_clients(spark, archive: Path, tmp_path: Path) -> None:
    telemetry = compact_telemetry(spark, _roots(archive), str(tmp_path / "t"))
    report = throttle_report(spark, _roots(archive), telemetry.points_dir, str(tmp_path / "report"))
    assert report.errors == ()
    assert report.decisions == 4 * 30
    assert report.silent_clients == (("u1", "producer-1"),)
    assert report.ignoring_clients == (("u2", "producer-2"),)
    minutes = spark.read.parquet(report.minutes_dir)
    assert {r.verdict for r in minutes.where("user = 'u0'").collect()} == {"reports_throttle"}


def _reference_rollups(rows: list[tuple]) -> dict[tuple, tuple]:
    """The rollups of ``rows`` (``_ROLLUP_INPUT`` tuples) computed plainly, per the module docstring."""
    series = defaultdict(list)
    for row in rows:
        date, hour, client, metric, _, _, attributes, *_ = row
        series[(date, hour, client, metric, tuple(sorted((attributes or {}).items())))].append(row)
    increase = {}
    for points in series.values():
        prev = None
        for row in sorted(points, key=lambda r: (r[7], r[8])):
            value, temporality, start = row[9], row[5], row[10]
            if temporality != "cumulative":
                increase[id(row)] = value
            elif prev is None or prev[9] is None or value is None:
                increase[id(row)] = None
            elif value < prev[9] or start != prev[10]:
                increase[id(row)] = value
            else:
                increase[id(row)] = value - prev[9]
            prev = row
    groups = defaultdict(list)
    for row in rows:
        groups[(row[0], row[1], row[2], row[3], row[7] - row[7] % 60_000)].append(row)
    out = {}
    for key, members in groups.items():
        values = [r[9] for r in members if r[9] is not None]
        increases = [increase[id(r)] for r in members if increase[id(r)] is not None]
        latest = max(members, key=lambda r: (r[7], r[8], (0,) if r[9] is None else (1, r[9])))
        out[key] = (
            members[0][4],
            members[0][5],
            len(values),
            min(values, default=None),
            max(values, default=None),
            sum(increases) if increases else None,
            latest[9],
        )
    return out


_ROLLUP_INPUT = (
    "date date, hour int, client_instance_id string, metric string, type string, temporality string, "
    "attributes map<string,string>, time_ms long, received_ms long, value double, start_time_ms long"
)
# per metric its type and temporality (a metric keeps them), and whether its values may be missing
_METRICS = {"c": ("sum", "cumulative"), "d": ("sum", "delta"), "g": ("gauge", None), "h": ("histogram", "cumulative")}
_ATTRIBUTE_SETS = [None, {}, {"a": "1"}, {"a": "1", "b": "2"}, {"b": "2", "a": "1"}, {"a": "2"}]


@st.composite
def _rollup_rows(draw: st.DrawFn) -> list[tuple]:
    """Points of two hours, two clients and the four kinds of metric, in series that interleave; every
    (time, receive time) pair once per series (the order of equal ones is not defined), integer values
    (sums exact in any order), resets by a drop or a new start time, missing histogram sums."""
    rows = []
    moments = draw(st.lists(st.tuples(st.integers(0, 400_000), st.integers(0, 3)), unique=True, max_size=60))
    for time_ms, received_extra in moments:
        date, hour = draw(st.sampled_from([(date_(2023, 11, 14), 23), (date_(2023, 11, 15), 0)]))
        metric = draw(st.sampled_from(sorted(_METRICS)))
        kind, temporality = _METRICS[metric]
        value = draw(st.one_of(st.integers(-3, 40).map(float), st.none() if kind == "histogram" else st.nothing()))
        rows.append(
            (
                date,
                hour,
                draw(st.sampled_from(["id-0", "id-1"])),
                metric,
                kind,
                temporality,
                draw(st.sampled_from(_ATTRIBUTE_SETS)),
                T0 + time_ms,
                T0 + time_ms + received_extra,
                value,
                draw(st.sampled_from([None, T0, T0 + 1000])),
            )
        )
    return rows


def spark_rollups(spark: Any, rows: list[tuple], partitions: int | None = None) -> dict[tuple, tuple]:
    """``rollups_of`` over ``rows`` (``_ROLLUP_INPUT``), keyed as ``_reference_rollups`` keys its own."""
    from quotaplane.spark.telemetry import rollups_of

    return {
        (r.date, r.hour, r.client_instance_id, r.metric, r.bucket_ms): (
            r.type,
            r.temporality,
            r["count"],
            r["min"],
            r["max"],
            r["sum"],
            r["last"],
        )
        for r in rollups_of(spark.createDataFrame(rows, _ROLLUP_INPUT), partitions).collect()
    }


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_rollup_rows())
def test_rollups_equal_a_plain_computation_on_random_series(spark, rows: list[tuple]) -> None:
    assert spark_rollups(spark, rows) == _reference_rollups(rows)


def test_each_segment_is_decoded_in_a_task_of_its_own(spark, archive: Path) -> None:
    """Spark would pack the archive's small segments into one task (by bytes); within
    ``one_task_per_segment`` each is its own, and the session's setting is put back after."""
    from quotaplane.spark._archive import one_task_per_segment
    from quotaplane.spark.telemetry import decode_telemetry

    def tasks() -> int:  # a new DataFrame each time: the files are split into tasks when it is planned
        return decode_telemetry(spark, _roots(archive))[0].rdd.getNumPartitions()

    segments = len(list(archive.rglob("telemetry/**/*.seg")))
    assert segments > 2 and tasks() < segments
    before = spark.conf.get("spark.sql.files.openCostInBytes", None)
    with one_task_per_segment(spark):
        assert tasks() == segments
    assert spark.conf.get("spark.sql.files.openCostInBytes", None) == before
    assert tasks() < segments


# every kind of metric data, and its temporality, for the rollups' (type, temporality) code
_ALL_KINDS = {**_METRICS, "e": ("exponential_histogram", "delta"), "s": ("summary", None)}


@st.composite
def _tied_rollup_rows(draw: st.DrawFn) -> list[tuple]:
    """Points whose (time, receive time) pairs repeat across series (a push's points of one metric with
    different attributes): few moments, two minutes, so most minute groups have ties at their latest
    moment, with different values (or missing ones). A series has each moment once (the order of equal
    ones in a series is not defined)."""
    rows, seen = [], set()
    for _ in range(draw(st.integers(0, 40))):
        date, hour = draw(st.sampled_from([(date_(2023, 11, 14), 23), (date_(2023, 11, 15), 0)]))
        client = draw(st.sampled_from(["id-0", "id-1"]))
        metric = draw(st.sampled_from(sorted(_ALL_KINDS)))
        kind, temporality = _ALL_KINDS[metric]
        attributes = draw(st.sampled_from(_ATTRIBUTE_SETS))
        time_ms = T0 + draw(st.sampled_from([0, 1_000, 59_999, 60_000, 61_000]))
        received_ms = time_ms + draw(st.integers(0, 1))
        series = (date, hour, client, metric, tuple(sorted((attributes or {}).items())))
        if (series, time_ms, received_ms) in seen:
            continue
        seen.add((series, time_ms, received_ms))
        value = draw(st.one_of(st.integers(-3, 3).map(float), st.none() if kind == "histogram" else st.nothing()))
        start = draw(st.sampled_from([None, T0]))
        rows.append((date, hour, client, metric, kind, temporality, attributes, time_ms, received_ms, value, start))
    return rows


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_tied_rollup_rows())
def test_rollup_last_of_tied_points_is_their_largest_value(spark, rows: list[tuple]) -> None:
    """``last`` of a minute whose latest (time, receive time) several points share is the largest of
    their values (a missing one the smallest): what ``max_by(value, struct(time_ms, received_ms, value))``
    gave before the minute groups became hash aggregations; and every kind's type and temporality
    come back as they went in."""
    assert spark_rollups(spark, rows) == _reference_rollups(rows)


def test_rollups_fail_on_a_type_they_could_not_give_back(spark) -> None:
    """The rollups carry (type, temporality) as a code of the values the decoder gives: anything else
    fails the job rather than coming back as null or as another type."""
    from quotaplane.spark.telemetry import rollups_of

    row = (date_(2023, 11, 14), 23, "id-0", "g", "gauge", None, None, T0, T0, 1.0, None)
    assert [r.type for r in rollups_of(spark.createDataFrame([row], _ROLLUP_INPUT)).collect()] == ["gauge"]
    for kind, temporality in (("weird", None), ("sum", "sideways")):
        bad = (*row[:4], kind, temporality, *row[6:])
        with pytest.raises(Exception, match="unknown metric type or temporality"):
            rollups_of(spark.createDataFrame([bad], _ROLLUP_INPUT)).collect()
