"""The cluster id: one per data directory, in every AdminService answer, checked by the CLI when it is told one.

With fixed default ports and no credential, a second instance (or a test) on the same host would answer in the
first one's place; the id makes that impossible to miss. The AdminService runs in this process over a real
ConfigStore; the CLI as a subprocess, as an operator runs it; one ``launch`` checks the wiring of ``up``.
"""

from __future__ import annotations

import os
import pickle
import subprocess
from pathlib import Path

import grpc
import pytest

from quotaplane.actors.controller import ConfigController
from quotaplane.kafka_uuid import random_uuid
from quotaplane.meta_properties import InconsistentClusterIdError, read_cluster_id
from quotaplane.services._security import ServerSecurity
from quotaplane.services.admin import CLUSTER_ID_TRAILER
from quotaplane.services.launcher import LaunchError, launch
from quotaplane.services.launcher._cluster_id import META_PROPERTIES, data_dir_cluster_id, is_cluster_id
from quotaplane.v1 import admin_pb2 as pb
from quotaplane.v1 import admin_pb2_grpc

from .conftest import COMMAND

_TOKEN = "cluster-id-test-token"


def test_one_id_per_data_directory(tmp_path: Path):
    (tmp_path / "a").mkdir()
    first = data_dir_cluster_id(tmp_path / "a")
    assert is_cluster_id(first)
    assert data_dir_cluster_id(tmp_path / "a") == first  # a restart reads it back
    (tmp_path / "b").mkdir()
    assert data_dir_cluster_id(tmp_path / "b") != first
    assert f"cluster.id={first}\n" in (tmp_path / "a" / META_PROPERTIES).read_text()
    assert [p.name for p in (tmp_path / "a").iterdir()] == [META_PROPERTIES]  # no temporary file left behind

    # a damaged file is refused, never replaced: the data would get a new identity its clients refuse
    (tmp_path / "b" / META_PROPERTIES).write_text("version=1\ncluster.id=not-an-id\n")
    with pytest.raises(LaunchError, match="is not a cluster id"):
        data_dir_cluster_id(tmp_path / "b")
    (tmp_path / "b" / META_PROPERTIES).write_text("version=1\n")
    with pytest.raises(LaunchError, match=r"has no cluster\.id= line"):
        data_dir_cluster_id(tmp_path / "b")
    assert not is_cluster_id("x" * 21) and not is_cluster_id("A" * 22 + "=") and not is_cluster_id("é" * 22)


def _trailer(trailers) -> str | None:
    return next((v for k, v in trailers or () if k == CLUSTER_ID_TRAILER), None)


def test_every_answer_carries_the_cluster_id(start_admin, tmp_path: Path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{_TOKEN}\n")
    address = start_admin(ServerSecurity.load(tokens_file=tokens), cluster_id="AAAAAAAAAAAAAAAAAAAAAQ").address
    with grpc.insecure_channel(address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        token = (("authorization", f"Bearer {_TOKEN}"),)
        _, call = stub.GetLogOffsets.with_call(pb.GetLogOffsetsRequest(), metadata=token)
        assert _trailer(call.trailing_metadata()) == "AAAAAAAAAAAAAAAAAAAAAQ"
        with pytest.raises(grpc.RpcError) as refused:  # INVALID_ARGUMENT: with the Kafka error code's trailer
            stub.EntityHistory(pb.EntityHistoryRequest(), metadata=token)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        trailers = refused.value.trailing_metadata()
        assert _trailer(trailers) == "AAAAAAAAAAAAAAAAAAAAAQ" and ("x-kafka-error-code", "42") in trailers
        with pytest.raises(grpc.RpcError) as refused:  # refused before the servicer: still this cluster's answer
            stub.GetLogOffsets(pb.GetLogOffsetsRequest())
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert _trailer(refused.value.trailing_metadata()) == "AAAAAAAAAAAAAAAAAAAAAQ"
    with grpc.insecure_channel(start_admin().address) as channel:  # serve without an id: no trailer
        _, call = admin_pb2_grpc.AdminServiceStub(channel).GetLogOffsets.with_call(pb.GetLogOffsetsRequest())
        assert _trailer(call.trailing_metadata()) is None


def _quotaplane(address: str, *args: str, cluster_id: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUOTAPLANE_")}
    if cluster_id is not None:
        env["QUOTAPLANE_CLUSTER_ID"] = cluster_id
    return subprocess.run(
        [*COMMAND, *args, "--bootstrap-server", address], capture_output=True, text=True, env=env, timeout=60
    )


def test_the_cli_shows_the_cluster_id_and_refuses_another(start_admin):
    ours, theirs = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"
    address = start_admin(cluster_id=ours).address
    done = _quotaplane(address, "cluster-id")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"Cluster ID: {ours}\n", "")
    done = _quotaplane(address, "log", "offsets", cluster_id=ours)
    assert done.returncode == 0 and done.stdout.splitlines() == ["Log start offset: 0", "Log end offset: 0"]

    alter = ("quotas", "--alter", "--add-config", "producer_byte_rate=1", "--entity-type", "users")
    for done in (
        _quotaplane(address, *alter, "--entity-name", "u", "--cluster-id", theirs),
        _quotaplane(address, *alter, "--entity-name", "u", cluster_id=theirs),
    ):
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.splitlines() == [
            f"Error: the admin service at {address} is cluster {ours}, not the expected {theirs} "
            "(another instance on this address?)"
        ]
    # an error answer from the wrong cluster is that mismatch, not the error
    done = _quotaplane(address, "log", "history", "--client-metrics", "", "--cluster-id", theirs)
    assert done.returncode == 1 and done.stderr.splitlines()[0].startswith(f"Error: the admin service at {address} is")
    done = _quotaplane(start_admin().address, "log", "offsets", "--cluster-id", ours)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        f"Error: the admin service at 127.0.0.1:{done.args[-1].rsplit(':', 1)[1]} does not say its cluster id; "
        f"expected cluster {ours}"
    ]


def test_up_keeps_its_data_directory_id(tmp_path: Path):
    data_dir = tmp_path / "d"
    data_dir.mkdir()
    earlier = data_dir_cluster_id(data_dir)  # as a previous run left it
    with launch(data_dir, shards=1, admin_port=0, gateway_port=None, metrics_port=None, fsync=False, num_cpus=1) as c:
        assert c.cluster_id == earlier
        with grpc.insecure_channel(c.admin_address) as channel:
            _, call = admin_pb2_grpc.AdminServiceStub(channel).GetLogOffsets.with_call(pb.GetLogOffsetsRequest())
        assert _trailer(call.trailing_metadata()) == earlier
        # the controller's log directory names the same cluster: the id every joining up takes
        assert read_cluster_id(c.config_dir) == earlier


def test_the_controller_refuses_a_log_directory_of_another_cluster(tmp_path: Path):
    ours, theirs = str(random_uuid()), str(random_uuid())
    controller = ConfigController(tmp_path / "log", cluster_id=ours)
    try:
        assert controller.cluster_id() == ours == controller.info()["cluster_id"]
    finally:
        controller._store.close()
    assert read_cluster_id(tmp_path / "log") == ours
    # reopened by the same cluster (Ray's restart passes the same id), or by a caller that expects none: its id
    for expected in (ours, None):
        controller = ConfigController(tmp_path / "log", cluster_id=expected)
        assert controller.cluster_id() == ours
        controller._store.close()
    # another cluster's: refused before the log is opened; the error survives Ray's pickling to the caller
    with pytest.raises(InconsistentClusterIdError, match=f"belongs to cluster {ours}, not to cluster {theirs}") as e:
        ConfigController(tmp_path / "log", cluster_id=theirs)
    again = pickle.loads(pickle.dumps(e.value))
    assert (again.stored, again.expected, str(again)) == (ours, theirs, str(e.value))
    # a new directory without an expected id gets a fresh one
    fresh = ConfigController(tmp_path / "fresh")
    assert is_cluster_id(fresh.cluster_id()) and fresh.cluster_id() != ours
    fresh._store.close()
