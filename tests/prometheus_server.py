"""A real Prometheus server (Debian's package) for tests: start it on a config, query its HTTP API, stop it.

The tests that use it load the project's shipped configurations and rules into it, so what Prometheus itself
accepts and evaluates is checked, not what a test believes about PromQL.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support import free_port

T = TypeVar("T")


def binary(name: str) -> str:
    """``prometheus`` or ``promtool``; fails the test, saying how to install it, when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: these tests need Debian's prometheus package "
            "(apt-get install -y prometheus; do not start its service)"
        )
    return path


def promtool(*args: str) -> str:
    """Run ``promtool`` and return its stdout; fails with its output when it does not exit 0."""
    command = [binary("promtool"), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def wait_for(fn: Callable[[], T], until: Callable[[T], bool], *, timeout_s: float, what: str) -> T:
    """Poll ``fn`` every 0.2 s until ``until`` holds for its value; fails naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if until(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout_s:g} s; last value {value!r}")
        time.sleep(0.2)


class PrometheusServer:
    """``prometheus --config.file=<config>`` on a free loopback port with its TSDB under ``workdir``."""

    def __init__(self, config: Path, workdir: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"prometheus-{self.port}.log"
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / f'tsdb-{self.port}'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def api(self, path: str, **params: str) -> dict[str, Any]:
        """A JSON answer of the HTTP API; ``{"status": "unreachable"}`` while the server is not up."""
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}" if params else f"{self.base}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.load(response)
        except OSError as e:
            return {"status": "unreachable", "error": str(e)}

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector (empty while the server is not up or the query fails)."""
        answer = self.api("/api/v1/query", query=promql)
        return answer.get("data", {}).get("result", []) if answer.get("status") == "success" else []

    def rule_groups(self) -> list[dict[str, Any]]:
        return self.api("/api/v1/rules").get("data", {}).get("groups", [])

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """The active (pending or firing) alerts named ``name``."""
        return [
            a for a in self.api("/api/v1/alerts").get("data", {}).get("alerts", []) if a["labels"]["alertname"] == name
        ]

    def every_rule_evaluated_cleanly(self, timeout_s: float = 15) -> list[dict[str, Any]]:
        """Waits until every rule has been evaluated at least once; fails naming any rule whose last
        evaluation failed (a label-set clash, a bad function on real series)."""
        groups = wait_for(
            self.rule_groups,
            until=lambda gs: (
                bool(gs) and all(r.get("lastEvaluation", "").startswith("2") for g in gs for r in g["rules"])
            ),
            timeout_s=timeout_s,
            what="every rule evaluated",
        )
        bad = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"]
        assert not bad, bad
        return groups

    def assert_running(self) -> None:
        assert self.process.poll() is None, f"prometheus exited:\n{self.log_path.read_text()[-3000:]}"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()
