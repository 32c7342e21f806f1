"""``up --ray-address``: join a running Ray cluster instead of starting a private one.

A real Ray head is started by the test (``ray start --head --block``, its session in a temp dir, token auth
with a token of the test's own), and ``launch(ray_address=...)`` joins it twice: the controller and the
shards are detached named actors, so they outlive the first ``launch`` and the second finds the same ones
(same process ids) with the config the first acknowledged.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import ray

from quotaplane.kafka_uuid import random_uuid
from quotaplane.meta_properties import read_cluster_id, write_cluster_id
from quotaplane.services.launcher import LaunchError, launch
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc
from tests.support import environment, free_port, short_temp_dir

from .conftest import entity


@pytest.fixture
def ray_head() -> Iterator[str]:
    # the head runs with token auth on; RAY_TMPDIR is the head's own (below), restored in case it moves
    with short_temp_dir("qp-head-") as temp_dir, environment(("RAY_TMPDIR",), RAY_AUTH_TOKEN=secrets.token_hex(32)):
        port = free_port()
        ray_cli = Path(sys.executable).with_name("ray")
        head = subprocess.Popen(
            [
                str(ray_cli),
                "start",
                "--head",
                "--block",
                f"--port={port}",
                "--num-cpus=2",
                "--include-dashboard=false",
                "--disable-usage-stats",
                f"--temp-dir={temp_dir}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "RAY_TMPDIR": str(temp_dir), "RAY_AUTH_MODE": "token"},
        )
        try:
            deadline = time.monotonic() + 60
            while True:  # the GCS port answers once the head is up
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                assert head.poll() is None, "ray start --head exited"
                assert time.monotonic() < deadline, "the Ray head did not start in 60 s"
                time.sleep(0.2)
            yield f"127.0.0.1:{port}"
        finally:
            os.killpg(head.pid, signal.SIGINT)  # `ray start --block` stops its processes on Ctrl-C
            try:
                head.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(head.pid, signal.SIGKILL)
                head.wait()


def _alter(admin_address: str) -> None:
    op = admin_pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=4096.0)
    entry = admin_pb.AlterClientQuotasRequest.EntryData(entity=entity("joined", None), ops=[op])
    with grpc.insecure_channel(admin_address) as channel:
        response = admin_pb2_grpc.AdminServiceStub(channel).AlterClientQuotas(
            admin_pb.AlterClientQuotasRequest(entries=[entry]), timeout=30
        )
    assert [e.error_code for e in response.entries] == [0]


def _describe(admin_address: str) -> dict[str, float]:
    component = admin_pb.DescribeClientQuotasRequest.ComponentData(entity_type="user", match="joined")
    with grpc.insecure_channel(admin_address) as channel:
        response = admin_pb2_grpc.AdminServiceStub(channel).DescribeClientQuotas(
            admin_pb.DescribeClientQuotasRequest(components=[component]), timeout=30
        )
    return {v.key: v.value for e in response.entries for v in e.values}


def test_up_joins_a_running_ray_cluster_and_its_actors_outlive_it(ray_head, tmp_path):
    options = dict(shards=2, admin_port=0, gateway_port=0, metrics_port=None, fsync=True, ray_address=ray_head)
    with launch(tmp_path / "d", **options) as first:
        cluster_id = first.cluster_id
        assert read_cluster_id(tmp_path / "d") == read_cluster_id(first.config_dir) == cluster_id
        _alter(first.admin_address)
        controller_pid = ray.get(first.controller.info.remote())["pid"]
        shard_pids = {name: ray.get(s.info.remote())["pid"] for name, s in first.shards.items()}
        first.wait_caught_up()
    assert not ray.is_initialized()  # this process left the cluster; the actors stayed

    with launch(tmp_path / "d", **options) as second:
        assert ray.get(second.controller.info.remote())["pid"] == controller_pid
        assert {name: ray.get(s.info.remote())["pid"] for name, s in second.shards.items()} == shard_pids
        assert _describe(second.admin_address) == {"producer_byte_rate": 4096.0}
        assert second.status().caught_up
        assert second.cluster_id == cluster_id

    # another host's up (its own, empty data dir) joins the same cluster: it takes the controller's id, so every
    # AdminService of the cluster answers with one id
    with launch(tmp_path / "other-host", **options) as third:
        assert third.cluster_id == cluster_id
        assert read_cluster_id(tmp_path / "other-host") == cluster_id

    # a data dir of another cluster is refused, as Kafka refuses a log dir with another cluster.id
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    write_cluster_id(foreign, str(random_uuid()), written_by="test")
    refused = rf"belongs to cluster \S+, but the cluster at this Ray address is {cluster_id}"
    with pytest.raises(LaunchError, match=refused):
        launch(foreign, **options)


def test_an_unreachable_ray_address_is_one_line(tmp_path):
    with pytest.raises(LaunchError, match=r"cannot join the Ray cluster at 127\.0\.0\.1:1"):
        launch(tmp_path / "d", admin_port=0, gateway_port=None, metrics_port=None, ray_address="127.0.0.1:1")
