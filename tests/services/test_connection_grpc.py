"""ConnectionService end to end: gRPC -> gateway -> the shard owning the node -> Kafka's ConnectionQuotas.

One real local cluster for the module (conftest's ``cluster``: ``launch`` with a controller, 2 shards,
AdminService and gateway). Limits are set as an operator sets them, through AdminService
IncrementalAlterConfigs, and reach the node's ConnectionQuotas through the config log.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from quotaplane.services.launcher import Cluster
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc, connection_pb2_grpc
from quotaplane.v1 import connection_pb2 as pb

from .conftest import wait_propagated

ADMIT, THROTTLE, REJECT = pb.AdmitResult.ADMIT, pb.AdmitResult.THROTTLE, pb.AdmitResult.REJECT
Resource = admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource
Config = admin_pb.IncrementalAlterConfigsRequest.AlterableConfig


@pytest.fixture(scope="module")
def connections(
    cluster: Cluster, admin: admin_pb2_grpc.AdminServiceStub
) -> Iterator[connection_pb2_grpc.ConnectionServiceStub]:
    """The stub, once the cluster default ``max.connections.per.ip=3`` has reached the gateway."""
    set_broker_config(cluster, admin, "", "max.connections.per.ip", "3")
    assert cluster.gateway_address is not None
    with grpc.insecure_channel(cluster.gateway_address) as channel:
        yield connection_pb2_grpc.ConnectionServiceStub(channel)


def set_broker_config(
    cluster: Cluster, admin: admin_pb2_grpc.AdminServiceStub, node: str, name: str, value: str
) -> None:
    """SET a BROKER config (node "" = the cluster default) and wait until the gateway's replica has it
    (items are then sent at that offset, and a shard behind it catches up before serving them)."""
    response = admin.IncrementalAlterConfigs(
        admin_pb.IncrementalAlterConfigsRequest(
            resources=[
                Resource(
                    resource_type=admin_pb.RESOURCE_TYPE_BROKER,
                    resource_name=node,
                    configs=[Config(name=name, config_operation=admin_pb.ALTER_CONFIG_OP_TYPE_SET, value=value)],
                )
            ]
        )
    )
    assert [r.error_code for r in response.responses] == [0], response
    wait_propagated(cluster, cluster.gateway, timeout_s=5.0)


def admit(node: int, listener: str, ip: str, attempt_id: int | None = None) -> pb.AdmitItem:
    item = pb.AdmitItem(node_id=node, listener=listener, ip=ip)
    if attempt_id is not None:
        item.attempt_id = attempt_id
    return item


def closed(node: int, listener: str, ip: str) -> pb.ReleaseItem:
    return pb.ReleaseItem(node_id=node, listener=listener, ip=ip)


def test_per_ip_limit_admit_reject_release(connections: connection_pb2_grpc.ConnectionServiceStub) -> None:
    """``max.connections.per.ip=3``: 3 ADMIT then a counted REJECT; after releases, ADMIT again."""
    ip = "10.1.0.1"
    answer = connections.Admit(pb.AdmitBatch(batch_id=7, items=[admit(1, "EXTERNAL", ip)] * 4))
    assert answer.batch_id == 7
    assert [r.decision for r in answer.results] == [ADMIT, ADMIT, ADMIT, REJECT]
    rejected = answer.results[3]
    assert (rejected.limit, rejected.max_connections, rejected.counted) == ("max.connections.per.ip", 3, True)
    assert all(r.counted and not r.limit and not r.HasField("max_connections") for r in answer.results[:3])
    assert answer.config_offset >= 1

    # the refused socket is closed and released, then one client goes away: room for one
    released = connections.Release(pb.ReleaseBatch(batch_id=8, items=[closed(1, "EXTERNAL", ip)] * 2))
    assert (released.batch_id, list(released.released)) == (8, [True, True])
    again = connections.Admit(pb.AdmitBatch(items=[admit(1, "EXTERNAL", ip)] * 2))
    assert [r.decision for r in again.results] == [ADMIT, REJECT]

    # another node has its own budget for the same IP
    other = connections.Admit(pb.AdmitBatch(items=[admit(2, "EXTERNAL", ip)]))
    assert other.results[0].decision == ADMIT


def test_many_nodes_in_one_batch_keep_each_nodes_order(
    connections: connection_pb2_grpc.ConnectionServiceStub,
) -> None:
    """Items of 20 nodes interleaved, routed to both shards: each node's items are decided in order."""
    nodes = range(100, 120)
    items = [admit(node, "PLAINTEXT", "10.2.0.1") for _ in range(4) for node in nodes]
    answer = connections.Admit(pb.AdmitBatch(items=items))
    by_node: dict[int, list[int]] = {}
    for item, result in zip(items, answer.results, strict=True):
        by_node.setdefault(item.node_id, []).append(result.decision)
    assert by_node == {node: [ADMIT, ADMIT, ADMIT, REJECT] for node in nodes}


def test_slot_wait_then_admit_after_release(
    cluster: Cluster,
    admin: admin_pb2_grpc.AdminServiceStub,
    connections: connection_pb2_grpc.ConnectionServiceStub,
) -> None:
    """A node override ``max.connections=1``: the second connection waits (THROTTLE, no delay) with an
    attempt id, and gets the slot once the first is released; an abandoned attempt is released once."""
    set_broker_config(cluster, admin, "5", "max.connections", "1")
    first, second, third = (
        connections.Admit(pb.AdmitBatch(items=[admit(5, "EXTERNAL", ip)])).results[0]
        for ip in ("10.3.0.1", "10.3.0.2", "10.3.0.3")
    )
    assert first.decision == ADMIT
    for waiting in (second, third):
        assert (waiting.decision, waiting.throttle_ms, waiting.limit, waiting.max_connections) == (
            THROTTLE,
            0,
            "max.connections",
            1,
        )
        assert waiting.attempt_id > 0 and not waiting.counted
    assert second.attempt_id != third.attempt_id

    still = connections.Admit(pb.AdmitBatch(items=[admit(5, "EXTERNAL", "10.3.0.2", second.attempt_id)]))
    assert (still.results[0].decision, still.results[0].attempt_id) == (THROTTLE, second.attempt_id)
    given_up = pb.ReleaseItem(node_id=5, attempt_id=third.attempt_id)
    released = connections.Release(pb.ReleaseBatch(items=[closed(5, "EXTERNAL", "10.3.0.1"), given_up]))
    assert list(released.released) == [True, True]
    assert list(connections.Release(pb.ReleaseBatch(items=[given_up])).released) == [False]

    now = connections.Admit(pb.AdmitBatch(items=[admit(5, "EXTERNAL", "10.3.0.2", second.attempt_id)]))
    assert (now.results[0].decision, now.results[0].counted) == (ADMIT, True)


@pytest.mark.parametrize(
    ("batch", "fragment"),
    [
        (pb.AdmitBatch(), "empty batch"),
        (pb.AdmitBatch(items=[admit(0, "EXTERNAL", "10.4.0.1"), admit(-1, "EXTERNAL", "10.4.0.1")]), "item 1: node_id"),
        (pb.AdmitBatch(items=[admit(0, "EXT.ERNAL", "10.4.0.1")]), "item 0: listener"),
        (pb.AdmitBatch(items=[admit(0, "", "10.4.0.1")]), "item 0: listener"),
        (pb.AdmitBatch(items=[admit(0, "EXTERNAL", "broker-1.example")]), "item 0: ip"),
        (pb.AdmitBatch(items=[admit(0, "EXTERNAL", "10.4.0.1", attempt_id=0)]), "item 0: attempt_id 0"),
        (
            pb.AdmitBatch(items=[admit(0, "EXTERNAL", "10.4.0.1", 9), admit(0, "EXTERNAL", "10.4.0.1", 9)]),
            "item 1: attempt 9 of node 0 appears twice",
        ),
        (pb.AdmitBatch(items=[pb.AdmitItem(node_id=0, listener="EXTERNAL", ip="10.4.0.1", now_ms=-1)]), "now_ms"),
        (pb.AdmitBatch(items=[admit(0, "EXTERNAL", "10.4.0.1")] * 10_001), "over the limit"),
        (pb.ReleaseBatch(items=[pb.ReleaseItem(node_id=0, listener="EXTERNAL", attempt_id=3)]), "leave listener"),
        (pb.ReleaseBatch(items=[closed(0, "EXTERNAL", "300.1.1.1")]), "item 0: ip"),
        (pb.ReleaseBatch(), "empty batch"),
    ],
)
def test_bad_input_is_invalid_argument(
    connections: connection_pb2_grpc.ConnectionServiceStub, batch: pb.AdmitBatch | pb.ReleaseBatch, fragment: str
) -> None:
    call = connections.Admit if isinstance(batch, pb.AdmitBatch) else connections.Release
    with pytest.raises(grpc.RpcError) as info:
        call(batch)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in info.value.details()
    # nothing of it was applied, and the service keeps serving
    fresh = connections.Admit(pb.AdmitBatch(items=[admit(0, "EXTERNAL", "10.4.0.1")] * 3))
    assert [r.decision for r in fresh.results] == [ADMIT] * 3
    assert (
        list(connections.Release(pb.ReleaseBatch(items=[closed(0, "EXTERNAL", "10.4.0.1")] * 3)).released) == [True] * 3
    )
