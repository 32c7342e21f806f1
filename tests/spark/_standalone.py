"""A real Spark standalone cluster on loopback for tests: one master and workers started with pyspark's own
``bin/spark-class``, each on free ports, with work and log dirs under a test's temp dir.

Why processes and not ``local-cluster[...]``: the point is the deployment the jobs meet on a cluster
(executors in other JVMs started by workers, Python workers found through ``PYSPARK_PYTHON``, a driver
that talks to a master URL). :func:`standalone_cluster` always stops what it started, even when the
body fails: each daemon is the leader of its own process group, ended by its id.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pyspark

from tests.support import FAST_START_JAVA_OPTIONS

__all__ = ["FAST_START_JAVA_OPTIONS", "StandaloneCluster", "cluster_env", "free_port", "standalone_cluster"]

SPARK_HOME = Path(pyspark.__file__).parent
_START_TIMEOUT_S = 45.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_env(conf_dir: Path) -> dict[str, str]:
    """The environment of the daemons and of a driver: loopback only, this venv's Python, an empty conf dir
    (so no ``spark-defaults.conf`` of the machine changes what is tested); the master's and workers' JVMs
    started with :data:`FAST_START_JAVA_OPTIONS` (``SPARK_DAEMON_JAVA_OPTS``: the daemons only)."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="127.0.0.1",
        SPARK_CONF_DIR=str(conf_dir),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_NO_DAEMONIZE="1",
        SPARK_DAEMON_JAVA_OPTS=FAST_START_JAVA_OPTIONS,
    )
    return env


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    env: dict[str, str]
    logs: tuple[Path, ...]

    def log_tail(self, lines: int = 20) -> str:
        """The end of every daemon's log (for an assertion message when a job fails)."""
        out = []
        for log in self.logs:
            text = log.read_text(errors="replace").splitlines() if log.exists() else []
            out.append(f"--- {log.name}\n" + "\n".join(text[-lines:]))
        return "\n".join(out)


def _wait_for(log: Path, proc: subprocess.Popen, needle: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        if log.exists() and needle in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{log.name} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"{log.name}: no {needle!r} within {_START_TIMEOUT_S} s:\n{tail}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextmanager
def standalone_cluster(base: Path, *, workers: int = 2, worker_memory: str = "1g") -> Iterator[StandaloneCluster]:
    """A master and ``workers`` workers (1 core each) on 127.0.0.1, stopped on exit whatever happens."""
    conf_dir = base / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    env = cluster_env(conf_dir)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []

    def start(name: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        log = base / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [spark_class, *args],
                env=env | {"SPARK_LOG_DIR": str(base / "logs"), "SPARK_PID_DIR": str(base)},
                cwd=base,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped by pid, children included
            )
        procs.append(proc)
        logs.append(log)
        return proc, log

    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        port = free_port()
        master, master_log = start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(free_port()),
            ],
        )
        _wait_for(master_log, master, "I have been elected leader", deadline)
        url = f"spark://127.0.0.1:{port}"
        started = []
        for i in range(workers):
            work_dir = base / f"worker-{i}"
            work_dir.mkdir(exist_ok=True)
            started.append(
                start(
                    f"worker-{i}",
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        *("--host", "127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port())),
                        *("--cores", "1", "--memory", worker_memory, "--work-dir", str(work_dir), url),
                    ],
                )
            )
        for proc, log in started:
            _wait_for(log, proc, "Successfully registered with master", deadline)
        yield StandaloneCluster(url, env, tuple(logs))
    finally:
        for proc in reversed(procs):
            _stop(proc)
