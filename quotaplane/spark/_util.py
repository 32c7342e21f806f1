"""Small Spark helpers the jobs share: a set accumulator for per-file errors, Hadoop path checks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pyspark.accumulators import Accumulator, AccumulatorParam

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

__all__ = ["SetAccumulator", "hadoop_path_exists", "session_conf", "writes_without_sort"]


class _SetParam(AccumulatorParam):
    """Union of sets: a task that Spark retries adds the same (path, message) again, harmlessly."""

    def zero(self, value: frozenset) -> frozenset:
        return frozenset()

    def addInPlace(self, value1: frozenset, value2: Any) -> frozenset:
        if isinstance(value2, frozenset):
            return value1 | value2
        return value1 | {value2}


class SetAccumulator:
    """A driver-readable set that tasks add to: how a job reports a bad input file and goes on.

    Errors are collected rather than raised so that one corrupt file does not fail the whole stage
    (Spark would retry it, then abort the job with a JVM stack trace instead of the file's name).
    """

    def __init__(self, accumulator: Accumulator) -> None:
        self._accumulator = accumulator

    @classmethod
    def create(cls, sc: SparkContext) -> SetAccumulator:
        return cls(sc.accumulator(frozenset(), _SetParam()))

    def add(self, item: Any) -> None:
        self._accumulator.add(item)

    @property
    def value(self) -> frozenset:
        return self._accumulator.value


def hadoop_path_exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` (any Hadoop file system URI, or a local path) exists, as Spark's writers see it."""
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return bool(fs.exists(hadoop_path))


@contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Within the block, the session's SQL ``settings``; each is put back (or unset) on leaving it."""
    conf = spark.conf
    before = {key: conf.get(key, None) for key in settings}
    for key, value in settings.items():
        conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                conf.unset(key)
            else:
                conf.set(key, value)


@contextmanager
def writes_without_sort(spark: SparkSession, max_writers: int) -> Iterator[None]:
    """Within the block, a partitioned write whose tasks each hold rows of a few partitions writes them as
    they come, a file open per partition (up to ``max_writers`` in a task), instead of sorting them first.

    Why: Spark's planned write sorts every task's rows by the partition columns before writing them,
    whatever they hold: a copy of each row into the sorter's memory (for the telemetry points, 500 bytes
    a point, and 140 MB a task on the bench's segments) to put in order rows that a task of one archive
    hour or one log chunk already has in order. Without the planned write, Spark's writer keeps one open
    file per partition (``spark.sql.maxConcurrentOutputFileWriters``), in the order the rows come, and
    only sorts the rest of a task's rows if it meets more partitions than that. The files and their
    rows are the same as the sort's: a task still writes one file per partition, each in the order its
    rows came (the sort by the partition columns was stable, and a task's rows of one partition kept
    their order through it).
    """
    with session_conf(
        spark,
        {
            "spark.sql.optimizer.plannedWrite.enabled": "false",
            "spark.sql.maxConcurrentOutputFileWriters": str(max_writers),
        },
    ):
        yield
