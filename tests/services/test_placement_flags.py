"""``up``'s placement flags: ``--shard-resource``, ``--controller-resource``, ``--spread-shards``.

The parsing is checked in process; ``launch()`` with a private Ray must offer the requested resources itself
(else the actors would never be placed); joining a Ray cluster that offers none of a requested resource
fails at once, in one line, for ``launch()`` and for the CLI. Where the actors land on a multi-node
cluster is tested in tests/actors/test_placement_resources.py.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from quotaplane.services.cli import build_parser as _parser
from quotaplane.services.launcher import LaunchError, launch, parse_resource_flags
from tests.support import environment, ray_nodes

from .conftest import COMMAND
from .test_up import fails_with_one_line


def test_up_parses_the_placement_flags() -> None:
    flags = ["--shard-resource", "quotaplane_shard", "--shard-resource", "pool=0.5", "--spread-shards"]
    args = _parser().parse_args(["up", *flags, "--controller-resource", "quotaplane_controller=2"])
    assert args.spread_shards is True
    assert parse_resource_flags("--shard-resource", args.shard_resource) == {"quotaplane_shard": 1.0, "pool": 0.5}
    assert parse_resource_flags("--controller-resource", args.controller_resource) == {"quotaplane_controller": 2.0}
    defaults = _parser().parse_args(["up"])
    assert (defaults.spread_shards, defaults.shard_resource, defaults.controller_resource) == (False, None, None)
    assert defaults.shard_standby == "auto"  # standbys where two raylets offer the shard resources
    assert _parser().parse_args(["up", "--shard-standby", "off"]).shard_standby == "off"
    with pytest.raises(SystemExit):
        _parser().parse_args(["up", "--shard-standby", "maybe"])
    assert parse_resource_flags("--shard-resource", defaults.shard_resource) is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["=2"], "--shard-resource must be NAME or NAME=AMOUNT, got '=2'"),
        (["qp="], "--shard-resource must be NAME or NAME=AMOUNT, got 'qp='"),
        (["qp=lots"], "the amount must be a number, got 'lots'"),
        (["qp=0"], "the amount of 'qp' must be > 0"),
        (["qp=-1"], "the amount of 'qp' must be > 0"),
        (["qp=inf"], "the amount of 'qp' must be > 0"),
        (["CPU=1"], "one of Ray's predefined resources"),
        (["qp", "qp=2"], "--shard-resource 'qp' is given twice"),
    ],
)
def test_bad_resource_flags_are_one_line(values: list[str], message: str) -> None:
    with pytest.raises(LaunchError) as raised:
        parse_resource_flags("--shard-resource", values)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_launch_rejects_bad_resources_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=r"^--controller-resource: the amount of 'qp' must be > 0"):
        launch(tmp_path / "d", admin_port=0, gateway_port=None, metrics_port=None, controller_resources={"qp": 0})
    assert not (tmp_path / "d").exists()


def test_a_private_ray_offers_the_requested_resources_and_the_actors_take_them(tmp_path: Path) -> None:
    options = dict(admin_port=0, gateway_port=None, metrics_port=None, fsync=False, ready_timeout_s=20)
    with launch(
        tmp_path / "d",
        shards=2,
        shard_resources={"quotaplane_shard": 1},
        controller_resources={"quotaplane_controller": 0.5},
        spread_shards=True,
        **options,
    ) as cluster:
        assert cluster.status().caught_up
        offered = ray.cluster_resources()
        assert (offered["quotaplane_shard"], offered["quotaplane_controller"]) == (10_000, 10_000)
        free = ray.available_resources()  # what the two shards and the controller hold
        assert (free["quotaplane_shard"], free["quotaplane_controller"]) == (9_998, 9_999.5)


@pytest.fixture(scope="module")
def ray_cluster_address() -> Iterator[str]:
    """A one-node Ray cluster (``ray.cluster_utils``) offering ``quotaplane_shard`` but no
    ``quotaplane_controller``; this process is not connected to it (``launch`` joins it)."""
    head = {"num_cpus": 1, "resources": {"quotaplane_shard": 10}, "include_dashboard": False}
    with environment(RAY_AUTH_MODE=None, RAY_AUTH_TOKEN=secrets.token_hex(32)), ray_nodes(head) as cluster:
        yield cluster.address


def test_joining_a_cluster_without_the_resource_fails_fast_in_one_line(ray_cluster_address: str, tmp_path: Path):
    started = time.monotonic()
    with pytest.raises(LaunchError) as raised:
        launch(
            tmp_path / "d",
            admin_port=0,
            gateway_port=None,
            metrics_port=None,
            ray_address=ray_cluster_address,
            shard_resources={"quotaplane_shard": 1},  # offered
            controller_resources={"quotaplane_controller": 1},  # not offered
            ready_timeout_s=60,
        )
    message = str(raised.value)
    assert message == (
        "--controller-resource quotaplane_controller: the Ray cluster has no raylet offering resource "
        "'quotaplane_controller'; start the raylets that may run the controller with "
        """ray start --resources='{"quotaplane_controller": 1000}'"""
    )
    assert time.monotonic() - started < 30  # not the ready timeout
    assert not ray.is_initialized()  # launch left the cluster again


def test_up_on_a_cluster_without_the_resource_is_one_line(ray_cluster_address: str, env, tmp_path: Path):
    env = {**env, "RAY_AUTH_TOKEN": os.environ["RAY_AUTH_TOKEN"]}
    ports = ["--admin-port", "0", "--gateway-port", "0", "--metrics-port", "-1", "--frontend-port", "-1"]
    join = ["--data-dir", str(tmp_path / "d"), "--ray-address", ray_cluster_address]
    done = subprocess.run(
        [*COMMAND, "up", *ports, *join, "--shard-resource", "quotaplane_gpu_pool=2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    line = fails_with_one_line(done)
    assert line.startswith("Error: --shard-resource quotaplane_gpu_pool: the Ray cluster has no raylet offering")
    assert "ray start --resources='" in line
