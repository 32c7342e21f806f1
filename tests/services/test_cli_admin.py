"""The ``quotaplane`` admin commands, run as the installed console script against a real AdminService.

Each command is a subprocess (what an operator runs), the server runs in the test process over a real
ConfigStore with a clock the test moves, so history and ``log image --at`` are exact.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import T0_MS

_SCRIPT = Path(sys.executable).parent / "quotaplane"
_COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "quotaplane.services.cli"]


def quotaplane(server, *args: str, principal: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``quotaplane ARGS`` against ``server`` (through $QUOTAPLANE_ADMIN, as an operator would set it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("QUOTAPLANE_ADMIN", "QUOTAPLANE_PRINCIPAL")}
    if server is not None:
        env["QUOTAPLANE_ADMIN"] = server.address
    if principal:
        env["QUOTAPLANE_PRINCIPAL"] = principal
    return subprocess.run([*_COMMAND, *args], capture_output=True, text=True, env=env, timeout=60, check=False)


def ok(server, *args: str, **kwargs) -> list[str]:
    done = quotaplane(server, *args, **kwargs)
    assert (done.returncode, done.stderr) == (0, ""), done
    return done.stdout.splitlines()


def failed(server, *args: str, code: int = 1) -> str:
    """Run a command that must fail; return its one-line error (argparse's usage lines aside)."""
    done = quotaplane(server, *args)
    assert done.returncode == code, done
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    if code == 2:  # argparse: usage, then one "error:" line
        return done.stderr.strip().splitlines()[-1]
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("Error: ")
    return line


def test_quotas_alter_describe_delete(admin_server):
    alice = ["--entity-type", "users", "--entity-name", "alice"]
    assert ok(admin_server, "quotas", "--alter", "--add-config", "producer_byte_rate=1048576", *alice) == [
        "Completed updating config for user alice."
    ]
    assert ok(
        admin_server,
        "quotas",
        "--alter",
        "--add-config",
        "consumer_byte_rate=2048,request_percentage=50",
        *alice,
        "--entity-type",
        "clients",
        "--entity-default",
    ) == ["Completed updating config for user alice."]
    assert ok(
        admin_server,
        "quotas",
        "--alter",
        "--add-config",
        "producer_byte_rate=10000000",
        "--entity-type",
        "users",
        "--entity-default",
    ) == ["Completed updating default config for users in the cluster."]
    assert ok(admin_server, "quotas", "--describe", *alice) == [
        "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0"
    ]
    # every user entity (the default included), then everything
    assert ok(admin_server, "quotas", "--describe", "--entity-type", "users") == [
        "Quota configs for the default user-principal are producer_byte_rate=1.0E7",
        "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0",
    ]
    assert ok(admin_server, "quotas", "--describe", *alice, "--entity-type", "clients", "--entity-default") == [
        "Quota configs for user-principal 'alice', the default client-id are "
        "consumer_byte_rate=2048.0, request_percentage=50.0"
    ]
    assert len(ok(admin_server, "quotas", "--describe")) == 3

    assert ok(admin_server, "quotas", "--alter", "--delete-config", "producer_byte_rate", *alice) == [
        "Completed updating config for user alice."
    ]
    assert ok(admin_server, "quotas", "--describe", *alice) == []
    assert {tuple(sorted(e.items())): q for e, q in admin_server.store.describe_client_quotas([])} == {
        (("client-id", None), ("user", "alice")): {"consumer_byte_rate": 2048.0, "request_percentage": 50.0},
        (("user", None),): {"producer_byte_rate": 10000000.0},
    }


def test_client_metrics_alter_describe_list_delete(admin_server):
    assert ok(
        admin_server,
        "client-metrics",
        "--alter",
        "--name",
        "producers",
        "--metrics",
        "org.apache.kafka.producer.,org.apache.kafka.consumer.coordinator.",
        "--interval",
        "60000",
        "--match",
        "client_software_name=kafka-python,client_id=app-.*",
    ) == ["Altered client metrics config for producers."]
    [generated] = ok(
        admin_server, "client-metrics", "--alter", "--generate-name", "--metrics", "*", "--interval", "30000"
    )
    name = re.fullmatch(r"Altered client metrics config for ([0-9a-f-]{36})\.", generated).group(1)
    assert sorted(ok(admin_server, "client-metrics", "--list")) == sorted(["producers", name])
    assert ok(admin_server, "client-metrics", "--describe", "--name", "producers") == [
        "Client metrics configs for producers are:",
        "  interval.ms=60000",
        "  match=client_software_name=kafka-python,client_id=app-.*",
        "  metrics=org.apache.kafka.producer.,org.apache.kafka.consumer.coordinator.",
    ]
    # an empty value deletes that config, as kafka-client-metrics.sh does
    ok(admin_server, "client-metrics", "--alter", "--name", "producers", "--match", "")
    described = ok(admin_server, "client-metrics", "--describe")
    assert f"Client metrics configs for {name} are:" in described
    assert not any(line.startswith("  match=") for line in described)

    assert ok(admin_server, "client-metrics", "--delete", "--name", "producers") == [
        "Deleted client metrics config for producers."
    ]
    assert ok(admin_server, "client-metrics", "--list") == [name]
    assert ok(admin_server, "client-metrics", "--describe", "--name", "producers") == [
        "The client metric resource producers doesn't exist and doesn't have dynamic config."
    ]
    assert failed(admin_server, "client-metrics", "--alter", "--name", "x", "--interval", "5") == (
        "Error: Invalid value 5 for interval.ms, interval must be between 100 and 3600000 (1 hour)"
    )


def test_log_history_and_image(admin_server):
    bob = ["--entity-type", "users", "--entity-name", "bob"]
    ok(admin_server, "quotas", "--alter", "--add-config", "producer_byte_rate=1000", *bob, principal="User:ops")
    admin_server.clock.advance(60_000)
    ok(admin_server, "quotas", "--alter", "--add-config", "producer_byte_rate=2000", *bob)
    history = ok(admin_server, "log", "history", *bob)
    assert len(history) == 2
    assert re.fullmatch(
        r"0  2023-11-14T22:13:20\.000Z  User:ops  [0-9a-f-]{36}  producer_byte_rate: \(unset\) -> 1000\.0", history[0]
    )
    assert re.fullmatch(
        r"1  2023-11-14T22:14:20\.000Z  User:ANONYMOUS  \S+  producer_byte_rate: 1000\.0 -> 2000\.0", history[1]
    )
    assert ok(admin_server, "log", "image", "--at", "2023-11-14T22:14:19Z") == [
        "Client quotas at 2023-11-14T22:14:19.000Z (log offsets below 1):",
        "Quota configs for user-principal 'bob' are producer_byte_rate=1000.0",
    ]
    assert ok(admin_server, "log", "image", "--at", str(T0_MS + 60_000))[1:] == [
        "Quota configs for user-principal 'bob' are producer_byte_rate=2000.0"
    ]
    assert ok(admin_server, "log", "offsets") == ["Log start offset: 0", "Log end offset: 2"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            [
                "quotas",
                "--alter",
                "--add-config",
                "producer_byte_rate=-1",
                "--entity-type",
                "users",
                "--entity-name",
                "a",
            ],
            1,
            "Error: Quota producer_byte_rate must be greater than 0",
        ),
        (
            ["quotas", "--alter", "--add-config", "bogus_rate=1", "--entity-type", "users", "--entity-name", "a"],
            1,
            "Error: Invalid configuration key bogus_rate",
        ),
        (
            [
                "quotas",
                "--alter",
                "--add-config",
                "producer_byte_rate=fast",
                "--entity-type",
                "users",
                "--entity-default",
            ],
            1,
            "Error: Cannot parse quota configuration value for producer_byte_rate: fast",
        ),
        (
            [
                "quotas",
                "--alter",
                "--delete-config",
                "producer_byte_rate",
                "--entity-type",
                "users",
                "--entity-name",
                "a",
            ],
            1,
            "Error: Invalid config(s): producer_byte_rate",
        ),
        (
            ["quotas", "--describe", "--entity-type", "groups"],
            2,
            "quotaplane quotas: error: argument --entity-type: invalid choice: 'groups' "
            "(choose from users, clients, ips)",
        ),
        (
            ["quotas", "--alter", "--add-config", "producer_byte_rate=1", "--entity-type", "users"],
            2,
            "quotaplane quotas: error: an entity name must be specified with --alter of users, clients, ips",
        ),
        (
            ["log", "image", "--at", "last tuesday"],
            2,
            "quotaplane log image: error: argument --at: invalid time 'last tuesday': expected ISO 8601 "
            "(2024-05-01T12:00:00Z) or milliseconds since the epoch",
        ),
        (["log", "image", "--at", "-1"], 1, "Error: time_ms must be >= 0 (ms since the epoch), got -1"),
    ],
)
def test_errors_are_one_line_and_an_exit_code(admin_server, args, code, message):
    line = failed(admin_server, *args, code=code)
    assert line.replace("'users', 'clients', 'ips'", "users, clients, ips") == message
    assert admin_server.store.end_offset == 0


def test_an_unreachable_server_exits_3_with_one_line():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = failed(None, "quotas", "--describe", "--bootstrap-server", f"127.0.0.1:{port}", code=3)
    assert line.startswith(f"Error: cannot reach the admin service at 127.0.0.1:{port}: ")
