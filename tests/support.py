"""Small helpers shared by the test packages (tests/actors, tests/services, tests/deploy, tests/spark)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: The options of the JVMs the tests start (the session's local Spark, tests/spark's standalone cluster): C1 only
#: and the serial collector. The suite's Spark jobs are small and short: C2's compile threads, which pay back only
#: on long runs, otherwise take about half of those JVMs' CPU time (measured on the 2-core machine: 110 s of CPU
#: for the standalone test against 55 s). A start-up choice: nothing of Spark's behaviour or the jobs' changes.
FAST_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: The benchmarks (``bench/*.py``), which the smoke tests run as a user does.
BENCH = Path(__file__).resolve().parents[1] / "bench"


@contextmanager
def environment(kept: tuple[str, ...] = (), **changes: str | None) -> Iterator[None]:
    """Sets each of ``changes`` in ``os.environ`` (``None`` unsets it) and, on exit, puts those and the ``kept``
    names (left as they are, but restored: code run meanwhile may set them) back as they were, absent included."""
    saved = {name: os.environ.get(name) for name in (*kept, *changes)}
    try:
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def short_temp_dir(prefix: str) -> Iterator[Path]:
    """A fresh directory right under the system's temp dir, removed on exit. Ray's unix sockets live ~60 bytes
    below its ``temp_dir`` (``session_<date>_<pid>/sockets/plasma_store``) and a socket path may not pass 107
    bytes: pytest's tmp paths are too deep for that, more so under xdist (``.../popen-gw1/...``)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def ray_nodes(head: Mapping[str, Any], workers: Sequence[Mapping[str, Any]] = ()) -> Iterator[Any]:
    """A ``ray.cluster_utils.Cluster`` of raylets on this host: a head with ``head`` (its ``temp_dir`` under a
    ``short_temp_dir`` of its own, which becomes ``RAY_TMPDIR``: Ray writes ``ray_current_cluster`` there) and one
    worker raylet per entry of ``workers``; shut down, the directory removed and the environment put back on
    leaving. This process is not connected to it.

    Started once more, as the launcher's private Ray is, when a node did not come up within Ray's 30 s
    (``start_node_retrying_once``): a flake of a loaded 2-core machine that otherwise fails a whole module."""
    from ray.cluster_utils import Cluster

    from quotaplane.services.launcher._ray import forget_ray_auth_token, refresh_ray_config, start_node_retrying_once

    started: list[Any] = []

    def start() -> None:
        for cluster in started:  # the first attempt's raylets, if it got that far
            cluster.shutdown()
        started.clear()
        cluster = Cluster(initialize_head=True, head_node_args={**head, "temp_dir": str(root / "ray")}, connect=False)
        started.append(cluster)
        for args in workers:
            cluster.add_node(**args)
        cluster.wait_for_nodes()

    # Ray's settings as the environment says: a launcher that ran earlier in this process leaves Ray's token mode
    # on, and a head started with token mode on and no token anywhere (a fresh machine has no ~/.ray/auth_token)
    # ends the process
    refresh_ray_config()
    forget_ray_auth_token()
    with short_temp_dir("qpn-") as root, environment(RAY_TMPDIR=str(root)):
        (root / "ray").mkdir()
        try:
            start_node_retrying_once(start, root)
            yield started[0]
        finally:
            for cluster in started:
                cluster.shutdown()


class SharedContext(Generic[T]):
    """A context several test modules share: entered on first use (``get``), left by ``close``.

    A process holds one Ray at a time, and most test modules start their own: so the modules sharing one run one
    after the other (``run_modules_together``) and it is closed when the next test is in a module that does not
    use it (``leaves_modules``), not at the end of the session. A module asking for it after that gets a new
    one: slower, never wrong."""

    def __init__(self) -> None:
        self._stack: ExitStack | None = None
        self.value: T | None = None

    def get(self, enter: Callable[[], AbstractContextManager[T]]) -> T:
        if self._stack is None:
            stack = ExitStack()
            self.value = stack.enter_context(enter())
            self._stack = stack
        return self.value  # type: ignore[return-value]

    @property
    def open(self) -> bool:
        return self._stack is not None

    def close(self) -> None:
        stack, self._stack, self.value = self._stack, None, None
        if stack is not None:
            stack.close()


def run_modules_together(items: list[Any], fixture: str) -> set[object]:
    """Reorder ``items`` (pytest's collected tests) so the modules with a test using ``fixture`` run one after
    the other, where the first of them is (the modules between them move after them); those modules."""
    using = {getattr(item, "module", None) for item in items if fixture in getattr(item, "fixturenames", ())}
    if len(using) >= 2:
        first = next(i for i, item in enumerate(items) if getattr(item, "module", None) in using)
        grouped = [item for item in items if getattr(item, "module", None) in using]
        rest = [item for item in items if getattr(item, "module", None) not in using]
        items[:] = [*rest[:first], *grouped, *rest[first:]]
    return using


def leaves_modules(nextitem: Any, modules: set[object]) -> bool:
    """Whether the next test (None: the session ends) is outside ``modules``: a shared context closes then."""
    return nextitem is None or getattr(nextitem, "module", None) not in modules


def free_port() -> int:
    """A TCP port free on loopback now (the OS's pick for a bind to port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_gone(pid: int, timeout_s: float = 30.0, *, why: str = "killed") -> None:
    """Until process ``pid`` of this host is gone (a killed actor's process may outlive the kill call for a
    while, and a call made meanwhile could still be answered by it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"process {pid} alive {timeout_s} s after it was {why}"
        time.sleep(0.01)


def sigkill(pid: int, timeout_s: float = 30.0) -> None:
    """SIGKILL ``pid`` and wait until it is gone."""
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid, timeout_s, why="sent SIGKILL")


def run_threads(target: Callable[[int], None], n: int, *, timeout_s: float = 60.0) -> None:
    """``target(0)`` ... ``target(n - 1)`` on ``n`` threads at once; fails with every error any thread raised."""
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            target(t)
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    assert not errors, errors


def run_bench(
    script: str,
    *args: str,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    exit_codes: Sequence[int] = (0,),
) -> Any:
    """``bench/<script> args`` in its own process on this interpreter, as a user runs it; the JSON report it
    prints. Fails with the end of its stderr if it exits with a code not in ``exit_codes`` or runs past ``timeout``."""
    try:
        done = subprocess.run(
            [sys.executable, str(BENCH / script), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            env=env,
        )
    except subprocess.TimeoutExpired as e:  # what it printed before it was killed says where it was
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
        raise AssertionError(
            f"bench/{script} ran past {timeout:g} s; the end of its stderr:\n{stderr[-3000:]}"
        ) from None
    assert done.returncode in exit_codes, done.stderr[-3000:]
    return json.loads(done.stdout)
