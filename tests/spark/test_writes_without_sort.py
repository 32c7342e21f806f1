"""The jobs' cheaper write and rollup paths against what they replace: ``writes_without_sort`` (a partitioned
write that keeps a file open per partition instead of sorting each task's rows) writes the same rows into
the same files, in the order they came, and puts the session's settings back; the rollups computed in
``rollup_partitions`` tasks (or any other number) equal the plain reference computation."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.spark._util import writes_without_sort
from quotaplane.spark.telemetry import POINTS_PER_ROLLUP_TASK, rollup_partitions

from .test_compact_telemetry import _reference_rollups, _rollup_rows, spark_rollups

_SETTINGS = ("spark.sql.optimizer.plannedWrite.enabled", "spark.sql.maxConcurrentOutputFileWriters")


def _files(directory: Path) -> dict[str, list[list[int]]]:
    """Each partition's files, each as its rows' ids in file order (read with pyarrow, not Spark)."""
    out: dict[str, list[list[int]]] = defaultdict(list)
    for file in sorted(directory.glob("part=*/*.parquet")):
        out[file.parent.name].append(pq.read_table(file).column("id").to_pylist())
    return out


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(st.integers(0, 5), min_size=1, max_size=60),
    tasks=st.integers(1, 4),
    max_writers=st.integers(1, 4),
)
def test_writes_without_sort_give_the_files_of_the_sorted_write(
    spark: Any, tmp_path_factory: Any, parts: list[int], tasks: int, max_writers: int
) -> None:
    """Rows of several partitions per task, more partitions than writers included (the writer sorts what
    no open file takes): every row written once, each task's rows of a partition in one file, in the
    order the task had them; the same files (per partition, their rows) as the write with the sort."""
    rows = [(i, p) for i, p in enumerate(parts)]
    # tasks of consecutive ids, in order (slices of the list: no shuffle)
    frame = spark.createDataFrame(spark.sparkContext.parallelize(rows, tasks), "id long, part int")
    before = {key: spark.conf.get(key, None) for key in _SETTINGS}
    root = tmp_path_factory.mktemp("writes")
    frame.write.mode("overwrite").partitionBy("part").parquet(str(root / "sorted"))
    with writes_without_sort(spark, max_writers=max_writers):
        frame.write.mode("overwrite").partitionBy("part").parquet(str(root / "unsorted"))
    assert {key: spark.conf.get(key, None) for key in _SETTINGS} == before
    unsorted, sorted_ = _files(root / "unsorted"), _files(root / "sorted")
    assert Counter(i for files in unsorted.values() for ids in files for i in ids) == Counter(range(len(rows)))
    for files in unsorted.values():
        for ids in files:
            assert ids == sorted(ids)  # a task's rows in the order it had them
    assert {p: sorted(files) for p, files in unsorted.items()} == {p: sorted(files) for p, files in sorted_.items()}


@given(points=st.integers(1, 10 * POINTS_PER_ROLLUP_TASK), cores=st.integers(1, 64))
def test_rollup_partitions_are_whole_waves_of_bounded_tasks(points: int, cores: int) -> None:
    n = rollup_partitions(points, cores)
    assert n % cores == 0 and n >= cores
    assert -(-points // n) <= POINTS_PER_ROLLUP_TASK  # no task above the bound
    assert n == cores or -(-points // (n - cores)) > POINTS_PER_ROLLUP_TASK  # and no wave more than needed


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_rollup_rows(), partitions=st.sampled_from([1, 2, 3, 7]))
def test_rollups_in_any_number_of_tasks_equal_a_plain_computation(
    spark: Any, rows: list[tuple], partitions: int
) -> None:
    assert spark_rollups(spark, rows, partitions) == _reference_rollups(rows)
