"""A private Ray whose node times out during start-up is started once more (a fault Ray itself causes at
random, so it is simulated here: ``ray.init`` is replaced for the two calls), after the failed node's processes
are killed; any other error is not retried."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray

from quotaplane.services.launcher import _ray

TIMEOUT = Exception("The current node timed out during startup. This could happen because some of the raylet ...")
#: Ray's words when the GCS did not write its port file within 30 s (seen in a CI run on 2 cores).
GCS_PORT_TIMEOUT = Exception("Timed out waiting for file /tmp/qp-ray-x/session_1/gcs_server_port_7c2f")


def run(
    monkeypatch: pytest.MonkeyPatch, failures: list[Exception], temp_dir: Path = Path("/nonexistent/qp-ray")
) -> list[str]:
    calls: list[str] = []

    def init(**kwargs: object) -> None:
        calls.append(f"init {kwargs['_temp_dir']}")
        if failures:
            raise failures.pop(0)

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    _ray._start_private_ray(
        SimpleNamespace(ray_temp_dir=temp_dir, ray_dashboard_port=None, ray_dashboard_url=None), 1, {}
    )
    return calls


@pytest.mark.parametrize("timeout", [TIMEOUT, GCS_PORT_TIMEOUT], ids=["raylet", "gcs-port-file"])
def test_a_node_start_timeout_is_retried_once(monkeypatch: pytest.MonkeyPatch, timeout: Exception) -> None:
    assert run(monkeypatch, [timeout]) == ["init /nonexistent/qp-ray", "shutdown", "init /nonexistent/qp-ray"]


def test_a_second_timeout_and_other_errors_are_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(Exception, match="timed out during startup"):
        run(monkeypatch, [TIMEOUT, TIMEOUT])
    with pytest.raises(Exception, match="Timed out waiting for file"):
        run(monkeypatch, [GCS_PORT_TIMEOUT, GCS_PORT_TIMEOUT])
    with pytest.raises(ValueError, match="bad resources"):
        run(monkeypatch, [ValueError("bad resources")])


def test_the_failed_nodes_processes_are_killed_by_their_session_dir(tmp_path: Path) -> None:
    """Real processes stand in for the failed node's GCS and raylet: those naming the cluster's Ray directory
    on their command line are killed, others are left alone."""
    session = tmp_path / "ray"
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen([*sleeper, f"--session-dir={session / 'session_1'}"])
    other = subprocess.Popen([*sleeper, str(tmp_path / "elsewhere")])
    try:
        deadline = time.monotonic() + 5  # until the child has exec'd (its command line is then its own)
        while b"session_1" not in Path(f"/proc/{ours.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _ray._kill_session_processes(session) == [ours.pid]
        assert ours.wait(timeout=5) == -signal.SIGKILL
        assert other.poll() is None
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()
