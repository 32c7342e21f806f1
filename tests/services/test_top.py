"""``quotaplane top`` against a real cluster: a tenant driven over its quota shows up throttled in the view.

The cluster is tests/services/conftest.py's (one per module: private local Ray, 2 shards, gateway, admin
service and metrics endpoint on free ports). A producer_byte_rate quota is set through AdminService and usage
sent through the gateway's QuotaService, as a client's broker does, from a thread that keeps the tenant over
its quota for the whole test. The full-screen view runs in a real terminal (a private tmux server, 160x50)
and is read with ``capture-pane``; ``--once`` and the error on an unreachable endpoint run as subprocesses.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import config_events_pb2 as events_pb
from quotaplane.v1 import quota_pb2 as quota_pb
from tests.prometheus_server import wait_for

from .conftest import COMMAND
from .test_quota_value_endpoint import alter_switch

TENANT = "topuser"
QUOTA_BYTES_PER_S = 1000.0

# tmux comes with `make test` (test-packages); without it the terminal tests fail rather than hide


@pytest.fixture(scope="module")
def throttled(cluster, admin, quota) -> Iterator[None]:
    """TENANT under a 1000 B/s producer_byte_rate quota, sent 2000 bytes every 0.1 s (~20 kB/s) until the
    module ends: its ratio stays far above 1 and every decision throttles it."""
    entry = admin_pb.AlterClientQuotasRequest.EntryData(
        entity=[events_pb.EntityData(entity_type="user", entity_name=TENANT)],
        ops=[admin_pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=QUOTA_BYTES_PER_S)],
    )
    answer = admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry]))
    assert [e.error_code for e in answer.entries] == [0], answer
    stop = threading.Event()
    throttles: list[int] = []

    def drive() -> None:
        item = quota_pb.UsageItem(quota_type=quota_pb.PRODUCE, user=TENANT, client_id="app", value=2000.0)
        while not stop.is_set():
            throttles.extend(quota.RecordUsageBatch(quota_pb.UsageBatch(items=[item]), timeout=30).throttle_time_ms)
            stop.wait(0.1)

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    wait_for(lambda: list(throttles), lambda t: any(ms > 0 for ms in t), timeout_s=30, what="a throttle decision")
    yield
    stop.set()
    thread.join(timeout=30)


def tenant_cells(lines: list[str], user: str = TENANT) -> list[str] | None:
    """The cells of the user's produce row in the tenants' table (the first table), or None: 9 cells with a
    quota (rate and quota each a number and a unit), 8 without (quota and ratio each ``-``)."""
    for line in lines:
        cells = line.split()
        if cells[:2] == ["produce", user] and len(cells) in (8, 9):
            return cells
    return None


def throttled_over_quota(lines: list[str]) -> bool:
    """The tenant's row: its quota (from the quota-value series) and a ratio > 1 with a throttle time, and it
    is listed among the throttled clients."""
    cells = tenant_cells(lines)
    if (
        cells is None
        or len(cells) != 9
        or cells[5:7] != ["1000", "B/s"]
        or float(cells[7]) <= 1
        or float(cells[8]) <= 0
    ):
        return False
    section = lines[next(i for i, line in enumerate(lines) if line.startswith("THROTTLED CLIENTS")) :]
    return any(line.split()[:2] == ["produce", TENANT] and float(line.split()[3]) > 0 for line in section[2:])


def run_top(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "top", *args], capture_output=True, text=True, timeout=timeout_s)


class Tmux:
    """A private tmux server (its own socket) with one 160x50 session running ``command``; its exit code is
    written to ``rc_file`` when it ends."""

    def __init__(self, command: list[str], workdir: Path) -> None:
        self.socket = f"quotaplane-top-{os.getpid()}"
        self.rc_file = workdir / "rc"
        shell = f"{shlex.join(command)}; echo $? > {shlex.quote(str(self.rc_file))}"
        self.tmux("new-session", "-d", "-s", "top", "-x", "160", "-y", "50", shell)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        # without COLUMNS / LINES: the server passes its first client's environment to the pane, and a size there
        # (a test runner's 80x24) wins over the terminal's for ``shutil.get_terminal_size``
        env = {name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES")}
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10, env=env)

    def screen(self) -> list[str]:
        return self.tmux("capture-pane", "-p", "-t", "top").stdout.splitlines()

    def close(self) -> None:
        self.tmux("kill-server")


def test_top_in_a_terminal_shows_the_throttled_tenant_refreshes_sorts_and_quits(cluster, throttled, tmp_path):
    command = [*COMMAND, "top", "--metrics", cluster.metrics_url, "--bootstrap-server", cluster.admin_address]
    term = Tmux([*command, "--interval", "0.5"], tmp_path)
    try:
        first = wait_for(term.screen, throttled_over_quota, timeout_s=30, what="the throttled tenant on screen")
        assert first[0].startswith("quotaplane top") and "sort: usage/quota" in first[0]
        # a refreshed frame: a later scrape's time on the status line, the tenant still over its quota
        wait_for(
            term.screen,
            lambda lines: bool(lines) and lines[0] != first[0] and throttled_over_quota(lines),
            timeout_s=10,
            what="a refreshed frame",
        )
        term.tmux("send-keys", "-t", "top", "s")
        wait_for(term.screen, lambda lines: bool(lines) and "sort: rate" in lines[0], timeout_s=5, what="sort: rate")
        term.tmux("send-keys", "-t", "top", "q")
        rc = wait_for(
            lambda: term.rc_file.read_text().strip() if term.rc_file.exists() else None,
            lambda text: text is not None,
            timeout_s=10,
            what="top's exit after q",
        )
        assert rc == "0"
        assert term.tmux("has-session", "-t", "top").returncode != 0  # the session ended with the view
    finally:
        term.close()


def test_once_prints_one_plain_frame_and_reads_the_throttle_report(cluster, throttled, tmp_path) -> None:
    clients = tmp_path / "report" / "clients"
    clients.mkdir(parents=True)
    row = {"user": TENANT, "client_id": "app", "throttled_minutes": 3, "decisions": 40, "silent_minutes": 0,
           "reporting_minutes": 3, "no_telemetry_minutes": 0, "ignoring_minutes": 2}  # fmt: skip
    pq.write_table(pa.Table.from_pylist([row]), clients / "part-00000.parquet")
    args = ["--metrics", cluster.metrics_url, "--bootstrap-server", cluster.admin_address]
    done = wait_for(
        lambda: run_top(*args, "--once", "--throttle-report", str(tmp_path / "report")),
        lambda p: p.returncode == 0 and throttled_over_quota(p.stdout.splitlines()),
        timeout_s=30,
        what="the throttled tenant in --once",
    )
    lines = done.stdout.splitlines()
    assert "\x1b" not in done.stdout and done.stderr == ""  # plain text: no terminal control
    assert "(once)" in lines[0]
    at = next(i for i, line in enumerate(lines) if line.startswith("IGNORING THROTTLES"))
    assert lines[at + 2].split() == [TENANT, "app", "ignoring", "2", "0", "3"]
    # stdout not a terminal: one frame even without --once
    piped = run_top(*args)
    assert piped.returncode == 0 and tenant_cells(piped.stdout.splitlines()) is not None


def test_quotas_come_from_the_admin_service_when_the_quota_value_series_are_off(cluster, admin, throttled) -> None:
    def page() -> str:
        with urllib.request.urlopen(cluster.metrics_url, timeout=10) as response:
            return response.read().decode()

    alter_switch(admin, "false")
    try:
        wait_for(page, lambda text: "_quota_value{" not in text, timeout_s=20, what="no quota-value series")
        args = ["--metrics", cluster.metrics_url, "--bootstrap-server", cluster.admin_address, "--once"]
        done = wait_for(
            lambda: run_top(*args),
            lambda p: throttled_over_quota(p.stdout.splitlines()),
            timeout_s=30,
            what="the tenant's quota from DescribeClientQuotas",
        )
        assert f"DescribeClientQuotas at {cluster.admin_address}" in done.stdout
        # the admin service unreachable too: usage and throttles still shown, the bounds said to be unknown
        port = free_port()
        blind = run_top("--metrics", cluster.metrics_url, "--bootstrap-server", f"127.0.0.1:{port}", "--once")
        assert blind.returncode == 0, blind.stderr
        cells = tenant_cells(blind.stdout.splitlines())
        assert cells is not None and cells[5:7] == ["-", "-"]
        assert f"! quotas unknown: cannot ask the admin service at 127.0.0.1:{port}" in blind.stdout
    finally:
        alter_switch(admin, None)
    wait_for(page, lambda text: "kafka_quota_produce_quota_value{" in text, timeout_s=20, what="quota-value back")


def free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_endpoint_is_one_error_line_and_exit_3() -> None:
    port = free_port()
    started = time.monotonic()
    done = run_top("--metrics", f"127.0.0.1:{port}", "--once")
    assert done.returncode == 3 and done.stdout == ""
    url = f"http://127.0.0.1:{port}/metrics"
    assert done.stderr == f"Error: cannot reach the metrics endpoint at {url}: [Errno 111] Connection refused\n"
    assert time.monotonic() - started < 30
    # the full-screen view fails the same way before touching the terminal
    assert run_top("--metrics", f"127.0.0.1:{port}").returncode == 3
