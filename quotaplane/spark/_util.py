"""Small Spark helpers the jobs share: a set accumulator for per-file errors, Hadoop path checks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.accumulators import Accumulator, AccumulatorParam

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

__all__ = ["SetAccumulator", "hadoop_path_exists"]


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
