"""Fixtures shared across test packages: one local SparkSession for the whole run (starting one costs
seconds; the Spark job tests and the frontend's end-to-end check share it), scratch under a temp dir."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from quotaplane.spark import spark_session

    session = spark_session(
        "local[2]",
        app_name="quotaplane-tests",
        scratch_dir=tmp_path_factory.mktemp("spark-scratch"),
        shuffle_partitions=4,
        extra_conf={"spark.default.parallelism": "4", "spark.sql.adaptive.enabled": "false"},
    )
    yield session
    session.stop()
