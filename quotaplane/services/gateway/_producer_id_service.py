"""gRPC ``ProducerIdService``: KIP-936's producer-id quota (``producer_ids_rate``), per user.

A broker or proxy asks, per user, whether each producer id is new; the shard owning the user (routed by the
user alone: the quota is per user, no metric tags) counts the new ones and answers the throttle time.
Bad input is INVALID_ARGUMENT naming the item, and nothing of the batch is recorded.
"""

from __future__ import annotations

import grpc

from quotaplane.v1 import quota_pb2 as pb
from quotaplane.v1 import quota_pb2_grpc

from ._checks import GATEWAY_ERRORS, GatewayConfig, InvalidArgument, item_time
from ._routing import Gateway

__all__ = ["PRODUCER_ID_SERVICE_NAME", "ProducerIdServicer", "add_producer_id_service", "producer_id_items"]

PRODUCER_ID_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ProducerIdService"].full_name
_MAX_PRODUCER_ID = 2**63 - 1


def producer_id_items(config: GatewayConfig, batch: pb.ProducerIdBatch, now_ms: int) -> list[tuple[str, int, int]]:
    """``(user, producer_id, now_ms)`` per item, every item checked first."""
    config.check_size(len(batch.items))
    items = []
    for index, item in enumerate(batch.items):
        config.check_name(index, "user", item.user, allow_empty=False)
        if not 0 <= item.producer_id <= _MAX_PRODUCER_ID:
            raise InvalidArgument(f"item {index}: producer_id must be >= 0, got {item.producer_id}")
        items.append((item.user, item.producer_id, item_time(index, item, now_ms)))
    return items


class ProducerIdServicer(quota_pb2_grpc.ProducerIdServiceServicer):
    """RecordProducerIds over the gateway's ``dispatch``, keyed by user."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    @GATEWAY_ERRORS.unary
    def RecordProducerIds(self, request: pb.ProducerIdBatch, context: grpc.ServicerContext) -> pb.ThrottleBatch:
        gateway = self.gateway
        items = producer_id_items(gateway.config, request, gateway.clock())
        offset, results = gateway.dispatch("producer_ids", items, [item[0] for item in items])
        return pb.ThrottleBatch(batch_id=request.batch_id, throttle_time_ms=results, config_offset=offset)


def add_producer_id_service(server: grpc.Server, gateway: Gateway) -> list[str]:
    """Register the ProducerIdService on ``server`` over ``gateway``; the full service names."""
    quota_pb2_grpc.add_ProducerIdServiceServicer_to_server(ProducerIdServicer(gateway), server)
    return [PRODUCER_ID_SERVICE_NAME]
