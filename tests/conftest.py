"""Fixtures shared across test packages: one local SparkSession for the whole run (starting one costs
seconds; the Spark job tests and the frontend's end-to-end check share it), scratch under a temp dir, its JVM
started for short runs (``tests.support.FAST_START_JAVA_OPTIONS``); the environment and a short data-dir parent
for tests that run ``quotaplane up`` as a subprocess (tests/services, tests/deploy)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import FAST_START_JAVA_OPTIONS, short_temp_dir


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
        extra_conf={
            "spark.default.parallelism": "4",
            "spark.sql.adaptive.enabled": "false",
            # put before the session's own extraJavaOptions (its Derby home)
            "spark.driver.defaultJavaOptions": FAST_START_JAVA_OPTIONS,
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session", autouse=True)
def spark_before_anything(request: pytest.FixtureRequest) -> None:
    """Starts the session's ``spark`` before the run's first test when any collected test needs it. PySpark
    forks the JVM's launcher from this process, and a fork while gRPC threads of an earlier test are busy
    crashed the child (SIGSEGV, JAVA_GATEWAY_EXITED: every Spark test of a CI run failed). Before the first
    test no gRPC has run in this process, so the fork cannot meet it, whatever the order of the tests. Under
    ``make test`` each xdist worker is such a process, with a session of its own."""
    if any("spark" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue("spark")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of every ``quotaplane`` subprocess: no inherited Ray or admin settings (from a developer's
    shell), a private HOME."""
    home = tmp_path / "home"
    home.mkdir()
    drop = {"RAY_ADDRESS", "RAY_TMPDIR", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "QUOTAPLANE_ADMIN", "QUOTAPLANE_PRINCIPAL"}
    return {k: v for k, v in os.environ.items() if k not in drop} | {"HOME": str(home)}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A data-dir parent short enough that Ray's sockets fit under ``DATA_DIR/ray`` (pytest's tmp paths are too
    deep: there the launcher would fall back to a temp dir, tested in tests/services/test_up.py)."""
    with short_temp_dir("qpu-") as path:
        yield path
