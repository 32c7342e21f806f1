"""The ``quotaplane`` command line: the demo's numbers come from the real engine, bad input exits non-zero."""

import json
import subprocess
import sys

import pytest

from quotaplane.services.cli import build_parser, main
from quotaplane.services.proxy import ProxyConfig


def run_demo(capsys, seconds: int) -> dict:
    assert main(["demo", "--seconds", str(seconds), "--json"]) == 0
    return {row["client_id"]: row for row in json.loads(capsys.readouterr().out)["clients"]}


def test_demo_converges_clients_that_honour_throttles_to_their_quota(capsys):
    rows = run_demo(capsys, 120)
    orders = rows["orders"]
    # offered 3.2 MiB/s against 1 MiB/s: throttling brings it to the quota plus the initial burst
    assert orders["quota_bytes_per_s"] == 1_048_576.0
    assert orders["quota_bytes_per_s"] <= orders["achieved_bytes_per_s"] < 1.1 * orders["quota_bytes_per_s"]
    assert orders["throttle_ms_total"] > 0
    # under quota: never throttled, gets all it offers
    assert rows["audit"]["throttle_ms_total"] == 0
    assert rows["audit"]["achieved_bytes_per_s"] == rows["audit"]["offered_bytes_per_s"]
    # bob's two clients share one <user> quota of 512 KiB/s
    shared = rows["etl-1"]["achieved_bytes_per_s"] + rows["etl-2"]["achieved_bytes_per_s"]
    assert 524_288.0 <= shared < 1.1 * 524_288.0
    # a client that ignores throttle_time_ms keeps sending: the engine still reports it throttled
    greedy = rows["greedy"]
    assert greedy["achieved_bytes_per_s"] == greedy["offered_bytes_per_s"]
    assert greedy["throttle_ms_total"] > 0


def test_demo_prints_a_table(capsys):
    assert main(["demo", "--seconds", "5"]) == 0
    out = capsys.readouterr().out
    assert "ignores throttle_time_ms" in out
    assert "mallory" in out


@pytest.mark.parametrize("argv", [["demo", "--seconds", "0"], ["demo", "--seconds", "x"], ["nope"], []])
def test_bad_arguments_exit_non_zero_with_one_line_error(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("quotaplane")
    assert "error:" in err[-1]


def test_the_command_line_starts_without_ray_grpc_spark_or_the_kafka_protocol():
    """Every command (``--help``, the admin commands) pays for what ``import quotaplane.services.cli`` and
    building its parser import: none of the heavy packages, which ``up`` and the Spark jobs import when run."""
    heavy = ("ray", "grpc", "pyspark", "quotaplane.protocol", "quotaplane.services.proxy")
    code = (
        "import sys\n"
        "from quotaplane.services.cli import build_parser\n"
        "build_parser()\n"
        f"print(sorted(m for m in sys.modules for h in {heavy!r} if m == h or m.startswith(h + '.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_up_help_names_the_proxy_defaults_it_leaves_to_proxy_config(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    defaults = ProxyConfig(bootstrap="kafka:9092")
    assert f"this port + N (default {defaults.broker_port_base})" in help_text
    assert f"proxy port (default {defaults.max_brokers})" in help_text
