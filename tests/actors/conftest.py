"""One real local Ray cluster for the whole session, with every file it writes under pytest's tmp dir."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import ray

from quotaplane.services.launcher._ray import forget_ray_auth_token
from tests.support import environment

T = TypeVar("T")


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``ray.init`` once per module (and ``ray.shutdown`` after it, so later tests, e.g. ``launch()`` in
    tests/services, can start their own Ray in this process).

    Ray 2.60 writes its session under ``/tmp/ray`` and a generated auth token to
    ``~/.ray/auth_token`` unless told otherwise: the temp dir goes to pytest's tmp dir and the token is
    given in the environment (token auth stays on; workers inherit it; ``RAY_AUTH_MODE`` is read once
    at import, so it is left unset and Ray enables token mode when it finds ``RAY_AUTH_TOKEN``).
    Note: plain ``ray`` with opentelemetry-proto installed hangs in ``ray.init``; ``ray[default]`` does not."""
    temp_dir = tmp_path_factory.mktemp("ray")
    # RAY_AUTH_MODE unset: Ray finds the token and turns token auth on itself
    with environment(RAY_TMPDIR=str(temp_dir), RAY_AUTH_MODE=None, RAY_AUTH_TOKEN=secrets.token_hex(32)):
        # Ray caches the token per process: without this a module's Ray after another's runs its GCS with the
        # new token while the driver sends the old one ("Failed to start GCS")
        forget_ray_auth_token()
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            _temp_dir=str(temp_dir),
            namespace="quotaplane-tests",
            log_to_driver=False,
        )
        try:
            yield
        finally:
            ray.shutdown()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "config-log"


def wait_for(fn: Callable[[], T], *, until: Callable[[T], bool], timeout_s: float = 20.0) -> T:
    """Poll ``fn`` until ``until`` holds of its value (errors while an actor restarts count as not yet)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = fn()
            if until(last):
                return last
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in {timeout_s} s; last value {last!r}")
        time.sleep(0.05)
