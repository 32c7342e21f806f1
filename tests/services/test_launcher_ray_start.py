"""A private Ray whose node times out during start-up is started once more (a fault Ray itself causes at
random, so it is simulated here: ``ray.init`` is replaced for the two calls); any other error is not retried."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import ray

from quotaplane.services.launcher import _ray

TIMEOUT = Exception("The current node timed out during startup. This could happen because some of the raylet ...")


def run(monkeypatch: pytest.MonkeyPatch, failures: list[Exception]) -> list[str]:
    calls: list[str] = []

    def init(**kwargs: object) -> None:
        calls.append(f"init {kwargs['_temp_dir']}")
        if failures:
            raise failures.pop(0)

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    _ray._start_private_ray(SimpleNamespace(ray_temp_dir=Path("/tmp/qp-ray")), 1, {})
    return calls


def test_a_node_start_timeout_is_retried_once(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(monkeypatch, [TIMEOUT]) == ["init /tmp/qp-ray", "shutdown", "init /tmp/qp-ray"]


def test_a_second_timeout_and_other_errors_are_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(Exception, match="timed out during startup"):
        run(monkeypatch, [TIMEOUT, TIMEOUT])
    with pytest.raises(ValueError, match="bad resources"):
        run(monkeypatch, [ValueError("bad resources")])
