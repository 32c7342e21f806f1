"""``quotaplane configs`` (kafka-configs.sh for broker and topic configs), run as the installed console script
against a real AdminService over a real ConfigStore, as ``test_cli_admin.py`` runs the other admin commands.

One server for the module (the commands are subprocesses; each test uses its own resource and leaves it as
it found it). What a command wrote is checked in the store itself and in ``quotaplane log``, and every
refused command is checked to have appended nothing (the log's end offset does not move).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from quotaplane.config import ConfigResource, ConfigResourceType, ConfigStore

from .conftest import COMMAND, AdminServer, running_admin_server

_DEFAULT = ("--entity-type", "brokers", "--entity-default")
_NODE_1 = ("--entity-type", "brokers", "--entity-name", "1")
_KIP_786 = "client.quota.value.metric.enable"
#: a key Kafka reads at start-up only (KIP-786's switch was one; in quotaplane it is dynamic)
_STARTUP_KEY = "telemetry.max.bytes"
_RESTART_NOTE = "Note: {} is a start-up config: the change takes effect when the shards restart."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminServer]:
    with running_admin_server(tmp_path_factory.mktemp("configs") / "log") as running:
        yield running


def quotaplane(server: AdminServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("QUOTAPLANE_ADMIN", "QUOTAPLANE_PRINCIPAL")}
    env["QUOTAPLANE_ADMIN"] = server.address
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, env=env, timeout=60, check=False)


def ok(server: AdminServer, *args: str) -> list[str]:
    done = quotaplane(server, *args)
    assert (done.returncode, done.stderr) == (0, ""), done
    return done.stdout.splitlines()


def configs(store: ConfigStore, resource_type: ConfigResourceType, name: str) -> dict[str, str | None]:
    """What the store holds for a resource: its configs that are not defaults."""
    return {e.name: e.value for e in store.describe_configs(ConfigResource(resource_type, name)) if not e.is_default}


def test_a_start_up_key_on_the_broker_default_is_set_described_logged_and_deleted(server):
    start = server.store.end_offset
    assert ok(server, "configs", "--alter", *_DEFAULT, "--add-config", f"{_STARTUP_KEY}=2048") == [
        "Completed updating default config for brokers in the cluster.",
        _RESTART_NOTE.format(_STARTUP_KEY),
    ]
    assert server.store.end_offset == start + 1
    assert configs(server.store, ConfigResourceType.BROKER, "") == {_STARTUP_KEY: "2048"}
    assert ok(server, "configs", "--describe", *_DEFAULT) == [
        "Default configs for brokers in the cluster are:",
        f"  {_STARTUP_KEY}=2048",
    ]
    # a node reports the value it uses: the cluster default, as it has no override of its own
    assert ok(server, "configs", "--describe", *_NODE_1) == [
        "Dynamic configs for broker 1 are:",
        f"  {_STARTUP_KEY}=2048",
    ]
    [change] = ok(server, "log", "history", *_DEFAULT, "--key", _STARTUP_KEY)
    assert change.startswith(f"{start}  ")
    assert change.endswith(f"  {_STARTUP_KEY}: (unset) -> 2048")

    # deleting a start-up key waits for a restart as well
    assert ok(server, "configs", "--alter", *_DEFAULT, "--delete-config", _STARTUP_KEY) == [
        "Completed updating default config for brokers in the cluster.",
        _RESTART_NOTE.format(_STARTUP_KEY),
    ]
    assert configs(server.store, ConfigResourceType.BROKER, "") == {}
    assert ok(server, "configs", "--describe", *_DEFAULT) == ["Default configs for brokers in the cluster are:"]
    assert ok(server, "log", "history", *_DEFAULT, "--key", _STARTUP_KEY)[-1].endswith(
        f"  {_STARTUP_KEY}: 2048 -> (unset)"
    )
    assert server.store.end_offset == start + 2


def test_a_dynamic_key_prints_no_restart_note_and_a_mixed_alter_names_only_the_start_up_key(server):
    start = server.store.end_offset
    assert ok(server, "configs", "--alter", *_NODE_1, "--add-config", "max.connections=1000") == [
        "Completed updating config for broker 1."
    ]
    assert configs(server.store, ConfigResourceType.BROKER, "1") == {"max.connections": "1000"}
    assert ok(server, "configs", "--describe", *_NODE_1) == [
        "Dynamic configs for broker 1 are:",
        "  max.connections=1000",
    ]
    # a node's override is not the cluster default
    assert ok(server, "configs", "--describe", *_DEFAULT) == ["Default configs for brokers in the cluster are:"]

    assert ok(
        server, "configs", "--alter", *_NODE_1, "--add-config", "max.connection.creation.rate=50,quota.window.num=5"
    ) == ["Completed updating config for broker 1.", _RESTART_NOTE.format("quota.window.num")]
    assert ok(
        server,
        "configs",
        "--alter",
        *_NODE_1,
        "--delete-config",
        "max.connections,max.connection.creation.rate,quota.window.num",
    ) == ["Completed updating config for broker 1.", _RESTART_NOTE.format("quota.window.num")]
    assert configs(server.store, ConfigResourceType.BROKER, "1") == {}
    assert server.store.end_offset == start + 6  # one record per key named (KAFKA-14136)


def test_a_topic_list_config_in_square_brackets(server):
    topic = ("--entity-type", "topics", "--entity-name", "orders")
    assert ok(
        server, "configs", "--alter", *topic, "--add-config", "leader.replication.throttled.replicas=[0:101,1:102]"
    ) == ["Completed updating config for topic orders."]
    assert configs(server.store, ConfigResourceType.TOPIC, "orders") == {
        "leader.replication.throttled.replicas": "0:101,1:102"
    }
    assert ok(server, "configs", "--describe", *topic) == [
        "Dynamic configs for topic orders are:",
        "  leader.replication.throttled.replicas=0:101,1:102",
    ]
    assert ok(server, "configs", "--alter", *topic, "--delete-config", "leader.replication.throttled.replicas") == [
        "Completed updating config for topic orders."
    ]
    assert ok(server, "configs", "--describe", *topic) == ["Dynamic configs for topic orders are:"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        # refused by the server: the Kafka error of the resource, naming the config
        (
            ["--alter", *_DEFAULT, "--add-config", f"{_KIP_786}=yes"],
            1,
            f"Error: Invalid value yes for configuration {_KIP_786}: Expected value to be either true or false "
            "(INVALID_CONFIG)",
        ),
        (
            ["--alter", *_DEFAULT, "--add-config", "quota.window.num=0"],
            1,
            "Error: Invalid value 0 for configuration quota.window.num: Value must be at least 1 (INVALID_CONFIG)",
        ),
        (
            ["--alter", *_NODE_1, "--add-config", "max.connections=10,bogus.key=1"],
            1,
            "Error: Unknown broker config bogus.key: quotaplane keeps max.connections, ...",  # the whole list
        ),
        (
            ["--alter", "--entity-type", "brokers", "--entity-name", "x", "--add-config", "max.connections=1"],
            1,
            "Error: Unable to parse broker name as a base 10 number. (INVALID_REQUEST)",
        ),
        (
            ["--describe", "--entity-type", "topics", "--entity-name", "a/b"],
            1,
            "Error: Topic name is invalid: 'a/b' contains one or more characters other than ASCII alphanumerics, "
            "'.', '_' and '-' (INVALID_TOPIC_EXCEPTION)",
        ),
        # refused by the tool
        (["--alter", *_DEFAULT, "--delete-config", "max.connections"], 1, "Error: Invalid config(s): max.connections"),
        (
            ["--alter", *_DEFAULT, "--add-config", "max.connections"],
            1,
            'Error: Invalid entity config: all configs to be added must be in the format "key=val" or '
            '"key=[val1,val2]".',
        ),
        # usage errors (argparse: exit 2, its usage, then one error line)
        (
            ["--alter", "--entity-type", "brokers", "--add-config", "max.connections=1"],
            2,
            "quotaplane configs: error: an entity must be specified for --entity-type brokers: "
            "give --entity-name or --entity-default",
        ),
        (
            ["--alter", "--add-config", "max.connections=1"],
            2,
            "quotaplane configs: error: an entity type must be specified with --entity-type (brokers or topics)",
        ),
        (
            ["--alter", *_NODE_1, "--entity-default", "--add-config", "max.connections=1"],
            2,
            "quotaplane configs: error: More entity names specified than entity types",
        ),
        (
            ["--alter", "--entity-type", "groups", "--entity-name", "g", "--add-config", "max.connections=1"],
            2,
            "quotaplane configs: error: argument --entity-type: invalid choice: 'groups' (choose from brokers, topics)",
        ),
        (
            ["--alter", "--entity-type", "topics", "--entity-default", "--add-config", "x=1"],
            2,
            "quotaplane configs: error: topics have no default entity: give --entity-name",
        ),
        (
            ["--alter", *_DEFAULT],
            2,
            "quotaplane configs: error: At least one of --add-config or --delete-config must be specified with --alter",
        ),
        (
            ["--describe", *_DEFAULT, "--add-config", "max.connections=1"],
            2,
            "quotaplane configs: error: --add-config and --delete-config are only valid with --alter",
        ),
    ],
)
def test_bad_input_is_one_error_line_a_non_zero_exit_and_changes_nothing(server, args, code, message):
    start = server.store.end_offset
    done = quotaplane(server, "configs", *args)
    assert done.returncode == code, done
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    if code == 1:
        assert len(lines) == 1, done.stderr
    line = lines[-1].replace("'brokers', 'topics'", "brokers, topics")  # argparse quotes choices since 3.12
    if message.endswith("..."):
        assert line.startswith(message[:-3]), line
        assert line.endswith(" (INVALID_CONFIG)"), line
    else:
        assert line == message
    assert server.store.end_offset == start
    assert configs(server.store, ConfigResourceType.BROKER, "") == {}
    assert configs(server.store, ConfigResourceType.BROKER, "1") == {}
