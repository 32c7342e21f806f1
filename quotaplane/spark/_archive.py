"""Finding and reading archive segments (``docs/archive-format.md``) from Spark, for any stream.

The driver lists the ``date=/hour=`` directories of ``<root>/<stream>`` with Hadoop's file system API
(so roots may be local paths or any URI Spark reads: ``hdfs://``, ``s3a://``...), keeps the hours asked
for, and hands those directories to Spark's ``binaryFile`` source (``*.seg`` only: hidden ``.*.tmp``
files of segments being created are skipped). Executors decode each file whole with the archive's
reader (``decode_segment_bytes``, or its bulk form ``iter_segment_batches`` for ``read_stream_arrow``,
which hands Spark Arrow columns instead of pickled rows); a corrupt file is reported (path and reason)
through an accumulator and skipped, so the other files still count. A torn tail (a write in progress, or
a crash) is not an error: the records before it are kept, as every archive reader does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quotaplane.archive import ArchiveCorruptError, decode_segment_bytes, parse_hour_partition, parse_segment_name

from ._session import JobInputError
from ._util import SetAccumulator, session_conf

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import RDD
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["HourDir", "list_hour_dirs", "one_task_per_segment", "read_stream", "read_stream_arrow"]


@dataclass(frozen=True, slots=True)
class HourDir:
    path: str
    hour_ms: int  # the hour's start, epoch ms (UTC)


def list_hour_dirs(
    spark: SparkSession,
    roots: Sequence[str],
    stream: str,
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
    allow_empty: bool = False,
) -> list[HourDir]:
    """Every ``<root>/<stream>/date=…/hour=…`` directory of the hours overlapping ``[start_ms, end_ms)``.

    A root that does not exist is a ``JobInputError``; no hour directory at all is one too unless
    ``allow_empty`` (a stream nobody wrote to yet).
    """
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    found: list[HourDir] = []
    if not roots:
        raise JobInputError("no archive root given")
    for root in roots:
        root_path = jvm.org.apache.hadoop.fs.Path(root)
        fs = root_path.getFileSystem(conf)
        if not fs.exists(root_path):
            raise JobInputError(f"no archive root at {root}")
        pattern = jvm.org.apache.hadoop.fs.Path(f"{root.rstrip('/')}/{stream}/date=*/hour=*")
        for status in fs.globStatus(pattern) or []:
            if not status.isDirectory():
                continue
            path = status.getPath()
            hour_ms = parse_hour_partition(path.getParent().getName(), path.getName())
            if hour_ms is None:
                continue
            if (start_ms is not None and hour_ms + 3_600_000 <= start_ms) or (end_ms is not None and hour_ms >= end_ms):
                continue
            found.append(HourDir(path.toString(), hour_ms))
    if not found and not allow_empty:
        where = ", ".join(f"{r.rstrip('/')}/{stream}" for r in roots)
        raise JobInputError(f"no {stream} segments under {where} (no date=/hour= directories in the range)")
    found.sort(key=lambda h: (h.hour_ms, h.path))
    return found


def _hour_of_path(path: str) -> int | None:
    parts = path.rstrip("/").split("/")
    if len(parts) < 3 or parse_segment_name(parts[-1]) is None:
        return None
    return parse_hour_partition(parts[-3], parts[-2])


def read_stream(
    spark: SparkSession,
    hour_dirs: Iterable[HourDir],
    to_rows: Callable[[str, int, Any], Iterable[tuple]],
    errors: SetAccumulator,
    seen: SetAccumulator | None = None,
) -> RDD:
    """An RDD of ``to_rows(path, hour_ms, record)`` over every record of the segments in ``hour_dirs``.

    Files whose names do not follow the layout are skipped (not segments, per the format). A file that
    is corrupt, or a record ``to_rows`` refuses with ValueError, is added to ``errors`` as
    ``(path, one-line reason)``: the whole file for corruption (its records after the damage are not
    trustworthy), only the record for a bad record. ``seen`` gets the hour (epoch ms) of every file
    that gave at least one row: the partitions a write of these rows replaces.
    """
    paths = [h.path for h in hour_dirs]
    files = spark.read.format("binaryFile").option("pathGlobFilter", "*.seg").load(paths).select("path", "content")

    def decode(row: Any) -> Iterator[tuple]:
        path = row.path
        hour_ms = _hour_of_path(path)
        if hour_ms is None:
            return
        try:
            records = decode_segment_bytes(bytes(row.content), path).records
        except ArchiveCorruptError as exc:
            errors.add((path, str(exc)))
            return
        produced = False
        for record in records:
            try:
                rows = list(to_rows(path, hour_ms, record))
            except ValueError as exc:
                errors.add((path, f"{path}: record at {record.time_ms} ms skipped: {exc}"))
                continue
            if rows:
                produced = True
                yield from rows
        if produced and seen is not None:
            seen.add(hour_ms)

    return files.rdd.flatMap(decode)


#: What ``read_stream_arrow``'s ``to_batches`` is called with: the segment's path, its hour (epoch ms), its
#: bytes, and ``bad_record(record, reason)`` to report a record it skips; it yields Arrow record batches and
#: raises ArchiveCorruptError for a corrupt file (the archive reader's own error).
ToBatches = Callable[[str, int, bytes, Callable[[Any, str], None]], Iterable["pa.RecordBatch"]]


def read_stream_arrow(
    spark: SparkSession,
    hour_dirs: Iterable[HourDir],
    to_batches: ToBatches,
    schema: str,
    errors: SetAccumulator,
    seen: SetAccumulator | None = None,
) -> DataFrame:
    """A DataFrame (``schema``) of ``to_batches(path, hour_ms, content, bad_record)`` over the segments
    in ``hour_dirs``, through ``mapInArrow``: the columnar twin of ``read_stream``, with the same rules
    (files that are not segments skipped, a corrupt file reported whole in ``errors``, a record
    ``to_batches`` refuses reported alone, ``seen`` the hours of the files that gave rows). Rows cross
    from Python to the JVM as Arrow columns, not as pickled tuples.
    """
    paths = [h.path for h in hour_dirs]
    files = spark.read.format("binaryFile").option("pathGlobFilter", "*.seg").load(paths).select("path", "content")

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            paths, contents = batch.column("path"), batch.column("content")
            for i in range(batch.num_rows):  # one file's bytes in Python at a time
                yield from _decode_file(paths[i].as_py(), contents[i].as_py())

    def _decode_file(path: str, content: bytes) -> Iterator[pa.RecordBatch]:
        hour_ms = _hour_of_path(path)
        if hour_ms is None:
            return

        def bad_record(record: Any, reason: str) -> None:
            errors.add((path, f"{path}: record at {record.time_ms} ms skipped: {reason}"))

        try:
            # decode the whole file before handing anything on: a corrupt file gives no rows at all
            out = [b for b in to_batches(path, hour_ms, content, bad_record) if b.num_rows]
        except ArchiveCorruptError as exc:
            errors.add((path, str(exc)))
            return
        if out and seen is not None:
            seen.add(hour_ms)
        yield from out

    return files.mapInArrow(decode, schema)


@contextmanager
def one_task_per_segment(spark: SparkSession) -> Iterator[None]:
    """Within the block, a file scan gives each file a task of its own: run the action of a
    ``read_stream_arrow`` DataFrame in it (the files are split into tasks when an action plans them).

    Why: Spark packs files into tasks by their bytes (``spark.sql.files.maxPartitionBytes``, each file
    counted ``openCostInBytes`` more), which suits files that cost what they weigh to read. A segment's
    bytes are zstd-compressed pushes whose decoding is all the work: left to the default, a few
    segments of a few hundred kilobytes make one task and one core decodes them all. With the open cost
    set to the partition size, no two files share a task (Spark hands out the biggest first). The
    setting is the session's: it is put back on leaving the block.
    """
    with session_conf(spark, {"spark.sql.files.openCostInBytes": spark.conf.get("spark.sql.files.maxPartitionBytes")}):
        yield
