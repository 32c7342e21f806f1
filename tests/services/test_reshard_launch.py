"""``up --shards N`` and the count in the log: a new cluster logs its count, a restart without ``--shards`` starts
the log's count, and one with another ``--shards`` reshards to it (how the Helm chart's value drives the count)."""

from __future__ import annotations

from pathlib import Path

import grpc
import ray

from quotaplane.config import SHARD_COUNT_CONFIG, ConfigResource, ConfigResourceType
from quotaplane.services.launcher import launch
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc


def _history(cluster) -> list[tuple[object, object, str]]:
    entries = ray.get(
        cluster.controller.history.remote(
            resource=ConfigResource(ConfigResourceType.BROKER, ""), key=SHARD_COUNT_CONFIG
        )
    )
    return [(e.old, e.new, e.principal) for e in entries]


def _start(data_dir: Path, shards: int | None):
    return launch(data_dir, shards=shards, admin_port=0, gateway_port=0, metrics_port=None, fsync=False, num_cpus=2)


def test_the_count_lives_in_the_log_and_shards_drives_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "d"
    with _start(data_dir, 2) as cluster:
        assert set(cluster.shards) == {"0", "1"}
        assert _history(cluster) == [(None, "2", "User:quotaplane-up")]

    with _start(data_dir, None) as cluster:  # no --shards: the log's count
        assert set(cluster.shards) == {"0", "1"}
        assert len(_history(cluster)) == 1

    with _start(data_dir, 3) as cluster:  # another --shards: a reshard, logged as one
        assert set(cluster.shards) == {"0", "1", "2"}
        assert _history(cluster)[-1] == ("2", "3", "User:quotaplane-up")
        assert cluster.gateway.stats()["shards"].keys() == {"0", "1", "2"}
        with grpc.insecure_channel(cluster.admin_address) as channel:
            described = admin_pb2_grpc.AdminServiceStub(channel).DescribeShards(admin_pb.DescribeShardsRequest())
        assert described.shard_count == 3 and [s.shard_id for s in described.shards] == ["0", "1", "2"]
