"""The Spark jobs run unchanged on a Spark standalone cluster: a master and two workers (1 core each) started
here on loopback, each job run by the ``quotaplane`` command with ``--master spark://127.0.0.1:P``, and
every output equal to the embedded local run of the same input (same rows; the log's snapshot byte for
byte). The executors are other JVMs started by the workers, reading the archive through Hadoop's file
system API and running quotaplane's decoders in the venv's Python (``PYSPARK_PYTHON``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from quotaplane.archive import ArchiveRecord, ArchiveWriter
from quotaplane.config import ConfigStore
from quotaplane.spark import compact_log, compact_telemetry, throttle_report

from ._standalone import FAST_START_JAVA_OPTIONS, StandaloneCluster, standalone_cluster
from .test_compact_log import _fill
from .test_compact_telemetry import T0, _record, _roots


def _throttle_records(shard: int) -> list[ArchiveRecord]:
    """Produce decisions of 500 ms for two clients per shard; client 2 asks again after 100 ms (ignores it)."""
    records = []
    for client in (shard, shard + 2):
        for j in range(30):
            t = T0 + 3_000_000 + j * (100 if client == 2 else 2_000)
            labels = {"quota_type": "Produce", "user": f"u{client}", "client_id": f"producer-{client}"}
            records.append(ArchiveRecord(t, labels | {"throttle_time_ms": "500"}, b""))
    return records


def _write_inputs(base: Path) -> tuple[Path, Path]:
    """A data dir with two shards' telemetry and throttle archives, and an event log of closed segments."""
    data_dir = base / "data"
    for shard in (0, 1):
        root = data_dir / "shards" / str(shard)
        with ArchiveWriter(root, "telemetry", writer_id=f"s{shard}") as writer:
            for client in (shard, shard + 2):
                for k in range(30):
                    writer.append(_record(client, k))
                    if k % 10 == 9:
                        writer.flush()
        with ArchiveWriter(root, "throttle", writer_id=f"s{shard}") as writer:
            for record in _throttle_records(shard):
                writer.append(record)
    log_dir = data_dir / "config"
    with ConfigStore.open(log_dir, segment_bytes=8 * 1024, fsync=False) as store:
        _fill(store, 400)
    return data_dir, log_dir


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_canonical(v) for v in value)
    return value


def _rows(spark: Any, path: str) -> list[tuple]:
    frame = spark.read.parquet(path)
    return sorted((_canonical(tuple(r)) for r in frame.collect()), key=repr)


# one driver process runs the three commands in turn (as a CronJob runs each): the driver JVM starts once
_DRIVER = (
    "import json, sys\n"
    "from quotaplane.services.cli import main\n"
    "for argv in json.loads(sys.argv[1]):\n"
    "    if main(argv) != 0:\n"
    "        sys.exit(f'{argv[0]} failed')\n"
)
# small inputs: the local session fixture's settings (4 shuffle partitions instead of 200, no adaptive
# execution), given as the CLI's --conf; the driver's and executors' JVMs start as the daemons' do
# (``defaultJavaOptions``: put before the job's own ``extraJavaOptions``, which the session sets)
_CONF = [
    *("--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.default.parallelism=4"),
    *("--conf", "spark.sql.adaptive.enabled=false"),
    *("--conf", f"spark.driver.defaultJavaOptions={FAST_START_JAVA_OPTIONS}"),
    *("--conf", f"spark.executor.defaultJavaOptions={FAST_START_JAVA_OPTIONS}"),
]


def _run_cli(cluster: StandaloneCluster, *commands: list[str]) -> list[dict]:
    argvs = [[*argv, "--master", cluster.master_url, *_CONF] for argv in commands]
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps(argvs)],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{cluster.log_tail()}"
    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == len(commands), done.stdout
    return summaries


def _run_local(spark: Any, data_dir: Path, log_dir: Path, out: Path) -> tuple[Any, Any, Any]:
    """The embedded run (the session's local Spark), through the same public job functions the command calls."""
    roots = _roots(data_dir)
    log_local = compact_log(spark, log_dir, str(out / "history"))
    telemetry_local = compact_telemetry(spark, roots, str(out / "telemetry"))
    report_local = throttle_report(spark, roots, telemetry_local.points_dir, str(out / "report"))
    return log_local, telemetry_local, report_local


def test_jobs_on_a_standalone_cluster_equal_the_local_run(spark, tmp_path: Path) -> None:
    data_dir, log_dir = _write_inputs(tmp_path / "in")
    local_log = tmp_path / "local-config"
    shutil.copytree(log_dir, local_log)
    local, remote = tmp_path / "local", tmp_path / "remote"

    # the local run goes on in a thread while the cluster's JVMs start and its jobs run (independent: their
    # own copy of the log, their own outputs; most of both is waiting on JVMs, not computing)
    with ThreadPoolExecutor(1) as pool:
        local_run = pool.submit(_run_local, spark, data_dir, local_log, local)
        with standalone_cluster(tmp_path / "cluster") as cluster:
            points = str(remote / "telemetry" / "points")
            report_argv = ["throttle-report", "--data-dir", str(data_dir), "--output", str(remote / "report")]
            log_remote, telemetry_remote, report_remote = _run_cli(
                cluster,
                ["compact-log", "--log-dir", str(log_dir), "--history", str(remote / "history")],
                ["compact-telemetry", "--data-dir", str(data_dir), "--output", str(remote / "telemetry")],
                [*report_argv, "--points", points],
            )
            # the work really ran in executors the workers started (one app per command, on both workers)
            executor_logs = list((tmp_path / "cluster").glob("worker-*/app-*/*/stderr"))
            assert {p.parents[2].name for p in executor_logs} == {"worker-0", "worker-1"}
            assert len({p.parents[1].name for p in executor_logs}) == 3
            log_local, telemetry_local, report_local = local_run.result()
    assert telemetry_local.points > 0 and report_local.decisions > 0 and log_local.events > 0

    assert log_remote["events"] == log_local.events and log_remote["end_offset"] == log_local.end_offset
    assert Path(log_remote["snapshot"]).read_bytes() == log_local.snapshot.read_bytes()
    assert _rows(spark, log_remote["history"]) == _rows(spark, log_local.history_dir)

    assert telemetry_remote["data_points"] == telemetry_local.points
    assert _rows(spark, telemetry_remote["points"]) == _rows(spark, telemetry_local.points_dir)
    assert _rows(spark, telemetry_remote["rollups"]) == _rows(spark, telemetry_local.rollups_dir)

    assert report_remote["decisions"] == report_local.decisions
    assert report_remote["ignoring_clients"] == [list(c) for c in report_local.ignoring_clients] != []
    assert report_remote["silent_clients"] == [list(c) for c in report_local.silent_clients] != []
    assert _rows(spark, report_remote["minutes"]) == _rows(spark, report_local.minutes_dir)
    assert _rows(spark, report_remote["clients"]) == _rows(spark, report_local.clients_dir)
    assert Path(report_remote["html"]).read_text().count("<img ") == 2
