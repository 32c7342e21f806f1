"""The job's own decoding path, end to end in Spark: a row per push from Python (``PUSH_SCHEMA``), spread
into point rows by ``inline`` in the JVM (``telemetry.points_of``), gives exactly the per-record reference's
rows (``points_of_record``) on random pushes, empty pushes, bad bodies and torn tails included.

``test_arrow_bulk_telemetry`` holds the Python decoder to the same reference without Spark; this holds the
JVM's half (the push columns repeated over the points, the point fields in ``POINT_SCHEMA`` order, pushes
without points giving no row)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.spark.telemetry import decode_telemetry

from .test_arrow_bulk_telemetry import MAP_COLUMNS, _reference, _segment, records

NAME = "1700002800000-w-000000.seg"


def _hashable(row: tuple) -> tuple:
    """A point row with its maps (``labels``, ``attributes``) as sorted entries, to count rows in a Counter."""
    return tuple(tuple(sorted(v.items())) if isinstance(v, dict) else v for v in row)


def _row(row: Any) -> tuple:
    return _hashable(
        tuple((dict(v) if v is not None else None) if k in MAP_COLUMNS else v for k, v in row.asDict().items())
    )


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batches=st.lists(records, min_size=1, max_size=3), torn=st.sampled_from([b"", b"QB\x01"]))
def test_spark_points_equal_the_per_record_reference(spark, tmp_path_factory: Any, batches: list, torn: bytes) -> None:
    root = tmp_path_factory.mktemp("root")
    hour_dir = root / "telemetry" / "date=2023-11-14" / "hour=23"
    hour_dir.mkdir(parents=True)
    data = _segment(batches, torn)
    (hour_dir / NAME).write_bytes(data)
    path = f"file:{hour_dir / NAME}"  # as Spark's file source names it
    points, errors, hours = decode_telemetry(spark, [str(root)])
    got = Counter(_row(r) for r in points.collect())
    want, bad = _reference(path, data)  # (the reference's hour, HOUR, is the directory's)
    assert hours == 1
    assert got == Counter(map(_hashable, want))
    assert errors.value == {(path, f"{path}: record at {b.replace(': ', ' ms skipped: ', 1)}") for b in bad}
