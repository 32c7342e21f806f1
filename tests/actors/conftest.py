"""One real local Ray cluster shared by the modules using ``ray_cluster``, with every file it writes under a temp dir
of its own (removed when it stops)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import pytest
import ray

from quotaplane.services.launcher._ray import forget_ray_auth_token, start_node_retrying_once
from tests.support import SharedContext, environment, leaves_modules, run_modules_together, short_temp_dir

T = TypeVar("T")


def _start_ray() -> ExitStack:
    """``ray.init`` of a private local Ray, undone (``ray.shutdown``, the environment put back) by closing the stack.

    Ray 2.60 writes its session under ``/tmp/ray`` and a generated auth token to
    ``~/.ray/auth_token`` unless told otherwise: the temp dir goes to a short temp dir of its own and the token is
    given in the environment (token auth stays on; workers inherit it; ``RAY_AUTH_MODE`` is read once
    at import, so it is left unset and Ray enables token mode when it finds ``RAY_AUTH_TOKEN``).
    Note: plain ``ray`` with opentelemetry-proto installed hangs in ``ray.init``; ``ray[default]`` does not."""
    stack = ExitStack()
    temp_dir = stack.enter_context(short_temp_dir("qpa-"))  # Ray's socket paths: see short_temp_dir
    # RAY_AUTH_MODE unset: Ray finds the token and turns token auth on itself
    stack.enter_context(environment(RAY_TMPDIR=str(temp_dir), RAY_AUTH_MODE=None, RAY_AUTH_TOKEN=secrets.token_hex(32)))
    try:
        # Ray caches the token per process: without this a module's Ray after another's runs its GCS with the
        # new token while the driver sends the old one ("Failed to start GCS")
        forget_ray_auth_token()
        start_node_retrying_once(
            lambda: ray.init(
                num_cpus=2,
                include_dashboard=False,
                _temp_dir=str(temp_dir),
                namespace="quotaplane-tests",
                log_to_driver=False,
            ),
            temp_dir,
        )
    except BaseException:
        stack.close()
        raise
    stack.callback(ray.shutdown)
    return stack


#: The Ray every module asking for ``ray_cluster`` shares, started on first use (starting one costs seconds). The
#: modules name their actors with prefixes of their own and kill them after each test, so they do not meet in the
#: shared namespace.
_RAY: SharedContext[ExitStack] = SharedContext()
#: the modules with a test using ``ray_cluster``, as collected
_RAY_MODULES: set[object] = set()


@pytest.fixture(scope="session")
def _shared_ray() -> Iterator[SharedContext[ExitStack]]:
    """Stops the shared Ray at the end of the session at the latest (normally it stops earlier)."""
    try:
        yield _RAY
    finally:
        _RAY.close()


@pytest.fixture(scope="module")
def ray_cluster(_shared_ray: SharedContext[ExitStack]) -> None:
    """A local Ray for the module, shared with the other modules of tests/actors using it (``SharedContext``)."""
    _shared_ray.get(_start_ray)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the modules using ``ray_cluster`` one after the other, so that one Ray serves them all."""
    _RAY_MODULES.clear()
    _RAY_MODULES.update(run_modules_together(items, "ray_cluster"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the module fixtures' teardown: stop the shared Ray if the next test's module does not use it (it may
    start a Ray of its own)."""
    result = yield
    if _RAY.open and leaves_modules(nextitem, _RAY_MODULES):
        _RAY.close()
    return result


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
