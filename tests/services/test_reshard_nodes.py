"""Resharding on a Ray cluster of several raylets on this host (``ray.cluster_utils.Cluster``, shaped like the
Kubernetes deployment: a head offering ``quotaplane_controller``, two workers offering ``quotaplane_shard``, shards
spread over them): 2 -> 4 -> 3 under two gateways' load, every decision the in-process core's, the new shards
placed on the shard raylets, and the moved state pulled across raylets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import ray

from quotaplane.services.launcher import Cluster, launch
from quotaplane.v1 import admin_pb2_grpc
from tests.support import ray_nodes

from .test_reshard import reshard_2_4_3_under_load

SHARD_RESOURCE = "quotaplane_shard"
CONTROLLER_RESOURCE = "quotaplane_controller"


@pytest.fixture(scope="module")
def nodes() -> Iterator[object]:
    head = {
        "num_cpus": 2,
        "resources": {CONTROLLER_RESOURCE: 1},
        "include_dashboard": False,
    }
    with ray_nodes(head, [{"num_cpus": 0, "resources": {SHARD_RESOURCE: 100}}] * 2) as raylets:
        yield raylets


@pytest.fixture(scope="module")
def cluster(nodes: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data_dir = Path(tmp_path_factory.mktemp("reshard-nodes")) / "d"
    with launch(
        data_dir,
        shards=2,
        admin_port=0,
        gateway_port=0,
        metrics_port=0,
        fsync=False,
        ray_address=nodes.address,  # type: ignore[attr-defined]
        shard_resources={SHARD_RESOURCE: 1},
        controller_resources={CONTROLLER_RESOURCE: 1},
        spread_shards=True,
    ) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[admin_pb2_grpc.AdminServiceStub]:
    with grpc.insecure_channel(cluster.admin_address) as channel:
        yield admin_pb2_grpc.AdminServiceStub(channel)


def test_reshard_2_4_3_across_raylets_decides_as_the_core(
    cluster: Cluster, admin: admin_pb2_grpc.AdminServiceStub
) -> None:
    head = ray.get_runtime_context().get_node_id()
    reshard_2_4_3_under_load(cluster, admin)
    shard_nodes = {ray.get(handle.node.remote()) for handle in cluster.shards.values()}
    assert head not in shard_nodes  # every shard, the new ones too, on the raylets offering quotaplane_shard
    assert len(shard_nodes) == 2  # spread over both
