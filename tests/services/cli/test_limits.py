"""The ``quotaplane`` admin commands (real subprocesses, a real AdminService on loopback) with names Kafka
cannot carry, bytes that are not UTF-8, and names holding control characters.

Kafka accepts any character in an entity name, control characters included, so quotaplane does too; what
the CLI must not do is let such a name break its own output: every name it prints is escaped (``\\n``,
``\\x1b``, a backslash doubled), one line per entity. What Kafka cannot carry (over 32,767 bytes of UTF-8, or
an argument that is not UTF-8 at all) is one ``Error:`` line, exit 1, no traceback, and nothing written.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from quotaplane.config import MAX_STRING_BYTES, ClientQuotaFilterComponent

from ..conftest import COMMAND

Arg = str | bytes


def run(server, *args: Arg) -> subprocess.CompletedProcess[bytes]:
    """``quotaplane ARGS`` against ``server``; arguments may be bytes (what a shell passes, undecoded)."""
    env = {k: v for k, v in os.environ.items() if k not in ("QUOTAPLANE_ADMIN", "QUOTAPLANE_PRINCIPAL")}
    env["QUOTAPLANE_ADMIN"] = server.address
    return subprocess.run([*COMMAND, *args], capture_output=True, env=env, timeout=60, check=False)


def ok(server, *args: Arg) -> list[str]:
    done = run(server, *args)
    assert (done.returncode, done.stderr) == (0, b""), done
    return done.stdout.decode().splitlines()


def error_line(server, *args: Arg) -> str:
    """Run a command that must be refused: its one ``Error:`` line (exit 1, nothing on stdout)."""
    done = run(server, *args)
    assert done.returncode == 1, done
    assert b"Traceback" not in done.stderr and done.stdout == b""
    [line] = done.stderr.decode().splitlines()
    assert line.startswith("Error: ")
    return line


OVERRIDES = b"max.connections.per.ip.overrides=h\xfe:1"


def alter_user(name: Arg, *rest: Arg) -> tuple[Arg, ...]:
    return ("quotas", "--alter", "--entity-type", "users", "--entity-name", name,
            "--add-config", "producer_byte_rate=1024", *rest)  # fmt: skip


def describe_users() -> tuple[str, ...]:
    return ("quotas", "--describe", "--entity-type", "users")


def test_a_32768_byte_name_is_one_error_line_and_nothing_is_written(admin_server) -> None:
    line = error_line(admin_server, *alter_user("u" * (MAX_STRING_BYTES + 1)))
    assert line == "Error: argument --entity-name: 32768 bytes of UTF-8, above the 32767 a Kafka string can carry"
    assert admin_server.store.end_offset == 0
    assert ok(admin_server, *describe_users()) == []


def test_a_32767_byte_name_is_set_and_described(admin_server) -> None:
    name = "u" * MAX_STRING_BYTES
    assert ok(admin_server, *alter_user(name)) == [f"Completed updating config for user {name}."]
    assert ok(admin_server, *describe_users()) == [
        f"Quota configs for user-principal '{name}' are producer_byte_rate=1024.0"
    ]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (alter_user(b"bad\xff"), "--entity-name"),
        (("quotas", "--describe", "--entity-type", "users", "--entity-name", b"\xc3("), "--entity-name"),
        (("client-metrics", "--alter", "--name", b"m\x80", "--interval", "1000"), "--name"),
        (
            ("configs", "--alter", "--entity-type", "brokers", "--entity-default", "--add-config", OVERRIDES),
            "--add-config",
        ),
        (("log", "history", "--client-metrics", b"\xed\xa0\x80"), "--client-metrics"),  # an encoded surrogate
    ],
    ids=["alter-name", "describe-name", "client-metrics-name", "config-value", "history"],
)
def test_an_argument_that_is_not_utf8_is_one_error_line(admin_server, args: tuple[Arg, ...], option: str) -> None:
    line = error_line(admin_server, *args)
    assert line.startswith(f"Error: argument {option}: not valid UTF-8 (byte 0x")
    assert admin_server.store.end_offset == 0


def test_a_newline_in_a_name_is_kept_and_printed_escaped_one_line_per_entity(admin_server) -> None:
    name = "multi\nline\\name\x1b[31m"
    assert ok(admin_server, *alter_user(name)) == ["Completed updating config for user multi\\nline\\\\name\\x1b[31m."]
    ok(admin_server, *alter_user("plain"))
    # stored as given, control characters included, as Kafka stores them
    stored = admin_server.store.describe_client_quotas([ClientQuotaFilterComponent.of_entity("user", name)])
    assert [entity for entity, _ in stored] == [{"user": name}]
    assert ok(admin_server, *describe_users()) == [
        "Quota configs for user-principal 'multi\\nline\\\\name\\x1b[31m' are producer_byte_rate=1024.0",
        "Quota configs for user-principal 'plain' are producer_byte_rate=1024.0",
    ]
    history = ok(admin_server, "log", "history", "--entity-type", "users", "--entity-name", name)
    assert len(history) == 1 and history[0].endswith("producer_byte_rate: (unset) -> 1024.0")


def test_client_metrics_names_and_values_print_escaped(admin_server) -> None:
    name = "sub\r\nscription"
    ok(admin_server, "client-metrics", "--alter", "--name", name, "--metrics", "org.apache.kafka.\u2028x")
    assert ok(admin_server, "client-metrics", "--list") == ["sub\\r\\nscription"]
    assert ok(admin_server, "client-metrics", "--describe", "--name", name) == [
        "Client metrics configs for sub\\r\\nscription are:",
        "  metrics=org.apache.kafka.\\u2028x",
    ]


def test_an_error_quoting_a_name_with_a_newline_is_one_line(admin_server) -> None:
    line = error_line(admin_server, "client-metrics", "--alter", "--name", "m", "--interval", "1\n2")
    assert "1\\n2" in line


@pytest.mark.parametrize("principal", ["User:élise", "User:a\nb"])
def test_a_principal_grpc_metadata_cannot_carry_is_one_error_line(admin_server, principal: str) -> None:
    line = error_line(admin_server, *alter_user("u", "--principal", principal))
    assert line.endswith("is not printable ASCII, all gRPC metadata can carry")
    assert admin_server.store.end_offset == 0
