"""Starting a SparkSession for the jobs, and the errors every job shares.

The jobs run the same code on an embedded ``local[*]`` Spark and on a cluster (``--master``). Two
things must hold wherever they run:

- the executors' Python is one that has quotaplane installed (its framing, zstd and crc32c code
  runs inside the executors), so ``PYSPARK_PYTHON`` defaults to the interpreter running the driver;
- Spark's scratch space (local dirs, the warehouse, Derby's metastore log, Ivy's cache) goes to a
  temporary directory, never the current directory: a job started from a source checkout must not
  leave ``spark-warehouse/`` or ``derby.log`` behind.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MASTER", "JobInputError", "spark_session"]

DEFAULT_MASTER = "local[*]"


class JobInputError(Exception):
    """Input a job cannot use (a missing path, nothing to read, an offset out of range): one line to show.

    Raised before anything is written, so a failed run leaves earlier outputs as they were.
    """


def spark_session(
    master: str = DEFAULT_MASTER,
    *,
    app_name: str = "quotaplane",
    scratch_dir: str | os.PathLike[str] | None = None,
    shuffle_partitions: int | None = None,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession (``getOrCreate``: an existing one is reused) configured as the module docstring says.

    ``scratch_dir`` is where Spark's local dirs, warehouse and Derby/Ivy files go (default: a new
    directory under the system's temp dir). ``partitionOverwriteMode=dynamic`` makes an ``overwrite``
    write replace only the partitions it writes: the telemetry job relies on it to be idempotent.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    scratch = Path(scratch_dir) if scratch_dir is not None else Path(tempfile.mkdtemp(prefix="quotaplane-spark-"))
    scratch.mkdir(parents=True, exist_ok=True)
    for sub in ("local", "warehouse", "derby", "ivy"):
        (scratch / sub).mkdir(exist_ok=True)
    from pyspark.sql import SparkSession

    derby = f"-Dderby.system.home={scratch / 'derby'}"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.local.dir", str(scratch / "local"))
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.jars.ivy", str(scratch / "ivy"))
        .config("spark.driver.extraJavaOptions", derby)
        .config("spark.executor.extraJavaOptions", derby)
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"])
    )
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
