"""``quotaplane up`` as an operator runs it: real processes, a real local Ray, the real CLI against it.

One ``up`` process is started per phase (Ray's start-up costs seconds, so the phases share a test): the
admin commands go through gRPC to the ConfigController actor, the shards are seen to apply the change
(``up`` prints each shard's applied offset when it moves), a restart on the same data dir still has the
quota (durability through the whole stack), SIGTERM exits 0 and leaves no Ray process behind. Every
subprocess runs with a private ``HOME``, and nothing may appear in ``/tmp/ray`` or ``~/.ray``.
"""

from __future__ import annotations

import json
import queue
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from quotaplane.quota import ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from quotaplane.services.launcher import ray_temp_dir_for
from quotaplane.v1 import quota_pb2 as quota_pb
from quotaplane.v1 import quota_pb2_grpc
from tests.support import free_port

from .conftest import COMMAND

#: the usage gateway, the metrics endpoint and the Kafka frontend on free ports, so tests never depend on
#: 9094 / 9464 / 9092 being free
_T0 = 1_700_000_000_000
# no Ray dashboard unless a test asks for one: it costs a few processes and seconds of start-up
_FREE_PORTS = ("--gateway-port", "0", "--metrics-port", "0", "--frontend-port", "0", "--ray-dashboard-port", "-1")
_READY_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 20.0
_ALICE = ("--entity-type", "users", "--entity-name", "alice")


@dataclass(frozen=True)
class _Proc:
    pid: int
    name: str


def _processes_of(marker: str, *, exclude: int) -> list[_Proc]:
    """Processes (a /proc scan; psutil is only Ray's vendored copy here) whose command line names
    ``marker`` or whose RAY_TMPDIR is under it: Ray's daemons name their session dir on the command line,
    and every process Ray starts (workers too, whose command line Ray rewrites) inherits RAY_TMPDIR."""
    found = []
    needle = f"RAY_TMPDIR={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == exclude:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
            name = (entry / "comm").read_text().strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if marker.encode() in cmdline or any(v.startswith(needle) for v in environ.split(b"\0")):
            found.append(_Proc(int(entry.name), name))
    return found


def _snapshot(path: Path) -> set[str] | None:
    """What is in ``path`` (None when it does not exist), to prove a run added nothing there."""
    if not path.exists():
        return None
    return {str(p.relative_to(path)) for p in path.rglob("*")}


class Up:
    """A running ``quotaplane up``: its stdout lines are collected by a thread, so the test can wait on them."""

    def __init__(self, data_dir: Path, port: int, env: dict[str, str], *extra: str) -> None:
        self.data_dir = data_dir
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.stderr_path = data_dir.parent / f"up-{port}-{time.monotonic_ns()}.err"
        self._stderr = self.stderr_path.open("w")
        args = ["up", "--data-dir", str(data_dir), "--admin-port", str(port), "--shards", "2", *_FREE_PORTS, *extra]
        self.proc = subprocess.Popen([*COMMAND, *args], stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_line(self, matches: Callable[[str], bool], timeout_s: float = 20.0) -> str:
        """The first new stdout line that ``matches``; fails with what was printed if none comes in time."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
                eof = False
            else:
                eof = line is None
            if line is not None:
                self.lines.append(line)
                if matches(line):
                    return line
                continue
            raise AssertionError(
                f"{'exited' if eof else 'no matching line in time'}; stdout {self.lines}; "
                f"stderr {self.stderr_path.read_text()[-2000:]!r}"
            )

    def wait_ready(self) -> float:
        started = time.monotonic()
        self.wait_line(lambda line: line == "ready", _READY_TIMEOUT_S)
        return time.monotonic() - started

    def ray_processes(self) -> list[_Proc]:
        """The processes of this ``up``'s Ray session (its own process aside)."""
        return _processes_of(str(self.data_dir), exclude=self.proc.pid)

    def terminate(self) -> tuple[int, float]:
        """SIGTERM; the exit code and the seconds it took."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=_STOP_TIMEOUT_S)
        finally:
            self.kill()
        return code, time.monotonic() - started

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


def quotaplane(env: dict[str, str], address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args, "--bootstrap-server", address],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


def ok(env: dict[str, str], address: str, *args: str) -> list[str]:
    done = quotaplane(env, address, *args)
    assert (done.returncode, done.stderr) == (0, ""), done
    return done.stdout.splitlines()


def fails_with_one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done
    assert "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("Error: "), line
    return line


def run_up(env: dict[str, str], *args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, "up", *_FREE_PORTS, *args], capture_output=True, text=True, env=env, timeout=timeout_s
    )


def _assert_gone(up: Up, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (left := up.ray_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left


def test_up_serves_admin_commands_durably_and_stops_cleanly(env, short_dir):
    tmp_ray, real_home_ray = Path("/tmp/ray"), Path.home() / ".ray"
    before = (_snapshot(tmp_ray), _snapshot(real_home_ray))
    data_dir = short_dir / "data"
    port = free_port()

    up = Up(data_dir, port, env, "--ray-dashboard-port", "0")
    try:
        up.wait_ready()
        assert up.lines[0] == f"quotaplane up: admin gRPC on 127.0.0.1:{port}, 2 shards, data in {data_dir}"
        # what runs where, where the data is and how to stop it, said plainly
        [ray_line] = [line for line in up.lines if "a private Ray for this process" in line]
        assert f"session in {data_dir / 'ray'}, its dashboard on http://127.0.0.1:" in ray_line, ray_line
        dashboard = ray_line.split("its dashboard on ", 1)[1].split(" ", 1)[0]
        token_file = Path(ray_line.split("asks for the token in ", 1)[1].rstrip(")"))
        assert token_file.stat().st_mode & 0o777 == 0o600
        # Ray's own dashboard answers there, to the holder of the token only (it runs jobs)
        version = urllib.request.Request(f"{dashboard}/api/version")
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(version, timeout=10)
        version.add_header("Authorization", f"Bearer {token_file.read_text().strip()}")
        with urllib.request.urlopen(version, timeout=10) as response:
            assert json.loads(response.read())["ray_version"]
        assert f"quotaplane up: data: the config log in {data_dir / 'config'}, each shard's usage checkpoint " in (
            "\n".join(up.lines)
        )
        [stop_line] = [line for line in up.lines if line.startswith("quotaplane up: stop: ")]
        assert f"SIGTERM to pid {up.proc.pid}:" in stop_line and f"--data-dir {data_dir}` resumes it" in stop_line
        # a new cluster's first event is its shard count (quotaplane.shard.count), logged once the shards run
        assert "quotaplane up: config log end offset 1; shards applied 0=1, 1=1" in up.lines
        [kafka] = [line for line in up.lines if line.startswith("quotaplane up: Kafka frontend on 127.0.0.1:")]
        assert _kafka_api_versions_answer(int(kafka.split("127.0.0.1:")[1].split(" ")[0])) == 0
        daemons = {p.name for p in up.ray_processes()}
        assert {"raylet", "gcs_server"} <= daemons, daemons  # the scan used at the end does see Ray

        # a second `up` on the same admin port, or on the same data dir, fails at once in one line
        busy_port = run_up(env, "--data-dir", str(short_dir / "other"), "--admin-port", str(port))
        assert "in use" in fails_with_one_line(busy_port)
        busy_dir = run_up(env, "--data-dir", str(data_dir), "--admin-port", str(free_port()))
        assert "in use" in fails_with_one_line(busy_dir)

        assert ok(env, up.address, "quotas", "--alter", "--add-config", "producer_byte_rate=1048576", *_ALICE) == [
            "Completed updating config for user alice."
        ]
        assert ok(env, up.address, "quotas", "--describe", *_ALICE) == [
            "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0"
        ]
        [history] = ok(env, up.address, "log", "history", *_ALICE)
        assert re.fullmatch(r"1  \S+Z  User:ANONYMOUS  \S+  producer_byte_rate: \(unset\) -> 1048576\.0", history)
        # Kafka's validation happens in the controller actor and comes back as one line
        refused = quotaplane(env, up.address, "quotas", "--alter", "--add-config", "producer_byte_rate=-1", *_ALICE)
        assert fails_with_one_line(refused) == "Error: Quota producer_byte_rate must be greater than 0"
        # both shards applied the change (reported by `up` as the offsets move; no gateway traffic yet)
        up.wait_line(lambda line: line == "quotaplane up: config log end offset 2; shards applied 0=2, 1=2")
        # the quota set through the CLI is enforced by up's gateway (the address it announced)
        [gateway] = [line.split("gateway gRPC on ", 1)[1] for line in up.lines if "gateway gRPC on " in line]
        with grpc.insecure_channel(gateway) as channel:
            stub = quota_pb2_grpc.QuotaServiceStub(channel)
            item = quota_pb.UsageItem(quota_type=quota_pb.PRODUCE, user="alice", value=8 * 1048576.0, now_ms=_T0)
            answer = stub.RecordUsageBatch(quota_pb.UsageBatch(items=[item, item]), timeout=30)
        fresh = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
        fresh.update_quota(ClientQuotaEntity(user="alice"), 1048576.0)
        assert list(answer.throttle_time_ms) == [
            fresh.record_and_get_throttle_time_ms("alice", "", 8 * 1048576.0, _T0) for _ in range(2)
        ]
        assert answer.throttle_time_ms[-1] > 0
        # the metrics endpoint announced at start-up serves the cluster's offsets
        [url] = [line.split("metrics on ", 1)[1] for line in up.lines if "metrics on http" in line]
        with urllib.request.urlopen(url, timeout=10) as response:
            scraped = response.read().decode()
        assert "quotaplane_config_end_offset 2.0" in scraped.splitlines()

        code, took = up.terminate()
        assert code == 0, up.stderr_path.read_text()
        assert took < _STOP_TIMEOUT_S
        assert up.lines[-1] == "quotaplane up: stopped" or up.wait_line(lambda line: line.endswith("stopped"))
        _assert_gone(up)
        assert not token_file.exists()  # the run's token goes with it
    finally:
        up.kill()

    # the same data dir again: the quota is still there, the shards replay it
    again = Up(data_dir, port, env)
    try:
        again.wait_ready()
        assert "quotaplane up: config log end offset 2; shards applied 0=2, 1=2" in again.lines
        assert ok(env, again.address, "quotas", "--describe", *_ALICE) == [
            "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0"
        ]
        assert ok(env, again.address, "log", "offsets") == ["Log start offset: 0", "Log end offset: 2"]
        code, _ = again.terminate()
        assert code == 0, again.stderr_path.read_text()
        _assert_gone(again)
    finally:
        again.kill()

    assert (_snapshot(tmp_ray), _snapshot(real_home_ray)) == before
    assert not (Path(env["HOME"]) / ".ray").exists()
    assert (data_dir / "ray").is_dir()
    assert any((data_dir / "config").glob("*.log"))


def _kafka_api_versions_answer(port: int) -> int:
    """The error code of an ApiVersions v3 request to the Kafka frontend on ``port``."""
    from quotaplane.protocol import ApiVersionsRequest, decode_response, encode_request

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_request(18, 3, 1, ApiVersionsRequest("qp-test-up", "1.0")))
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = sock.recv(65536)
            assert chunk, "the frontend closed the connection"
            data += chunk
    return decode_response(18, 3, data[4:]).body.error_code


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shards", "0"], "--shards must be a positive integer"),
        (["--shards", "two"], "--shards must be an integer"),
        (["--admin-port", "70000"], "--admin-port must be in 0..65535"),
        (["--frontend-port", "70000"], "--frontend-port must be in 0..65535"),
        (["--sasl-credentials-file", "/nonexistent/users"], "cannot read the SASL credentials file"),
        (["--kafka-operators", "admin"], "is not a principal such as User:admin"),
        (["--shard-resource", "=2"], "--shard-resource must be NAME or NAME=AMOUNT, got '=2'"),
        (["--controller-resource", "qp=lots"], "--controller-resource 'qp=lots': the amount must be a number"),
        (["--upstream-bootstrap", "kafka"], "upstream bootstrap address 'kafka' is not HOST:PORT"),
        (["--upstream-bootstrap", "k:9092", "--upstream-broker-port-base", "65000"], "do not fit in 1..65535"),
        (["--upstream-sasl-username", "proxy"], "--upstream-sasl-username needs --upstream-sasl-password-file"),
    ],
)
def test_bad_options_fail_in_one_line(env, tmp_path, args, message):
    done = run_up(env, "--data-dir", str(tmp_path / "data"), *args)
    assert message in fails_with_one_line(done)


def test_unwritable_data_dir_fails_in_one_line(env, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    done = run_up(env, "--data-dir", str(blocker / "data"), "--admin-port", str(free_port()))
    assert fails_with_one_line(done).startswith(f"Error: cannot use data dir {blocker / 'data'}")


def test_port_in_use_fails_before_starting_ray(env, tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        started = time.monotonic()
        done = run_up(env, "--data-dir", str(tmp_path / "data"), "--admin-port", str(port))
    line = fails_with_one_line(done)
    assert line == f"Error: cannot listen on 127.0.0.1:{port} for the admin service: the port is in use"
    assert time.monotonic() - started < 15  # no Ray start-up was paid for it
    assert not (tmp_path / "data" / "ray").exists()


def test_ray_temp_dir_falls_back_when_socket_paths_would_be_too_long(tmp_path):
    assert ray_temp_dir_for(Path("/tmp/q")) == Path("/tmp/q/ray")
    assert ray_temp_dir_for(tmp_path / ("x" * 80)) is None


def test_up_fronts_a_kafka_cluster(env, short_dir, tmp_path):
    """``up --upstream-bootstrap``: the proxy line names the upstream's brokers and their proxy ports, and a real
    producer and consumer go through it to a real Tansu broker."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.services.proxy.conftest import TANSU_NODE_ID, start_tansu

    tansu = start_tansu(tmp_path)
    base = free_port() - TANSU_NODE_ID
    up = Up(
        short_dir / "data",
        free_port(),
        env,
        "--upstream-bootstrap",
        tansu.bootstrap,
        "--upstream-broker-port-base",
        str(base),
    )
    try:
        up.wait_ready()
        [kafka] = [line for line in up.lines if line.startswith("quotaplane up: Kafka frontend on 127.0.0.1:")]
        bootstrap = kafka.split(" on ")[1].split(" ")[0]
        brokers = f"upstream brokers {TANSU_NODE_ID} on 127.0.0.1:{base + TANSU_NODE_ID}"
        proxy_line = f"quotaplane up: Kafka proxy in front of {tansu.bootstrap}: {brokers}"
        assert proxy_line in up.lines
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic("through-up", 1, 1)]).values():
            future.result(15)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i in range(100):
            producer.produce("through-up", value=str(i).encode())
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "up", "enable.auto.commit": False})
        consumer.assign([TopicPartition("through-up", 0, 0)])
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got.append(int(message.value()))
        consumer.close()
        assert got == list(range(100))
        assert up.terminate()[0] == 0
    finally:
        up.kill()
        tansu.stop()


def _gapped_log(config_dir: Path) -> None:
    """A config log whose segments lost events a snapshot does not cover: offsets [3, 5) are nowhere, so the
    controller cannot open it (LogGapError), as after segments were deleted by hand or a partial restore."""
    from quotaplane.config import ClientQuotaAlteration, ConfigStore

    def write(users: range) -> None:
        with ConfigStore.open(config_dir, fsync=False, segment_bytes=1) as store:  # one frame per segment
            for i in users:
                entity = {"user": f"u{i}"}
                store.alter_client_quotas([ClientQuotaAlteration(entity, [("producer_byte_rate", 1000.0 + i)])],
                                          now_ms=_T0 + i, request_id=f"r{i}")  # fmt: skip

    config_dir.mkdir(parents=True)
    write(range(3))
    with ConfigStore.open(config_dir, fsync=False, segment_bytes=1) as store:
        store.write_snapshot()  # ends at 3
    write(range(3, 7))
    for base in range(5):
        (config_dir / f"{base:020d}.log").unlink()


def test_a_controller_that_cannot_open_its_log_fails_up_at_once_with_its_error(env, tmp_path):
    """The controller's own error, in one line, as soon as its creation fails: not Ray's "the actor died
    because of an error raised in its creation task", and not the ready timeout."""
    data_dir = tmp_path / "data"
    _gapped_log(data_dir / "config")
    started = time.monotonic()
    done = run_up(env, "--data-dir", str(data_dir), "--admin-port", str(free_port()), "--shards", "1", timeout_s=120)
    took = time.monotonic() - started
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("Error")]  # Ray may log a warning too
    assert line.startswith(f"Error: the config controller on {data_dir / 'config'} did not start: LogGapError: "), line
    assert "offsets [3, 5) are in no segment and no valid snapshot" in line
    assert "creation task" not in line
    assert took < _READY_TIMEOUT_S, took  # failed when the controller did, not when up gave up waiting
