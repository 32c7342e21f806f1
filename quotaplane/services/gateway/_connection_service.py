"""gRPC ``ConnectionService``: Kafka's acceptor-side connection admission, answered by the shards.

A frontend, broker plugin or Kafka proxy asks before it accepts a burst of sockets (``Admit``) and says
when counted connections close or THROTTLEd attempts are given up (``Release``). Every item is routed by
``node:<node id>`` to the shard owning that node's ``ConnectionQuotas`` (``actors/_connection_host.py``),
so one node's counts and rates live in one place and are Kafka's numbers for one broker; callers that
present the same node id share its budget. The wire format and the decision protocol are documented in
``protos/quotaplane/v1/connection.proto``.

Everything a batch carries is checked here, before anything is sent, so a bad batch is INVALID_ARGUMENT
naming the item and changes nothing (the shard checks again, but it serves micro-batches merged from
several requests, where one request's bad item would fail the others). Items without ``now_ms`` get the
gateway's clock. A dead or restarting shard is UNAVAILABLE; a full gateway RESOURCE_EXHAUSTED with the
``retry-after-ms`` trailer (the gateway's generic ``dispatch``).
"""

from __future__ import annotations

from typing import Any

import grpc

from quotaplane.quota import normalise_listener, peer_address
from quotaplane.v1 import connection_pb2 as pb
from quotaplane.v1 import connection_pb2_grpc

from ._checks import GATEWAY_ERRORS, InvalidArgument, item_time

__all__ = ["CONNECTION_KIND", "CONNECTION_SERVICE_NAME", "ConnectionServicer", "add_connection_service", "node_key"]

CONNECTION_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ConnectionService"].full_name
#: The ``ShardActor.serve_at`` kind of these items.
CONNECTION_KIND = "connection"
_DECISIONS = {"ADMIT": pb.AdmitResult.ADMIT, "THROTTLE": pb.AdmitResult.THROTTLE, "REJECT": pb.AdmitResult.REJECT}


def node_key(node_id: int) -> str:
    """The routing key of a node's connection state (one shard owns all of it)."""
    return f"node:{node_id}"


class ConnectionServicer(connection_pb2_grpc.ConnectionServiceServicer):
    """Admit / Release over the gateway's ``dispatch`` (anything with ``config``, ``clock`` and ``dispatch``)."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway

    # --- validation ------------------------------------------------------------------------------------
    @staticmethod
    def _node(index: int, node_id: int) -> int:
        if node_id < 0:
            raise InvalidArgument(f"item {index}: node_id must be >= 0, got {node_id}")
        return node_id

    @staticmethod
    def _connection(index: int, listener: str, ip: str) -> str:
        """The normalised listener (Kafka's upper case); InvalidArgument for a bad listener or ip."""
        try:
            name = normalise_listener(listener)
            peer_address(ip)
        except ValueError as e:
            raise InvalidArgument(f"item {index}: {e}") from None
        return name

    @staticmethod
    def _attempt(index: int, node_id: int, attempt_id: int, seen: set[tuple[int, int]]) -> int:
        if attempt_id == 0:
            raise InvalidArgument(f"item {index}: attempt_id 0 is no attempt; leave it unset for a new connection")
        if (node_id, attempt_id) in seen:
            raise InvalidArgument(f"item {index}: attempt {attempt_id} of node {node_id} appears twice in the batch")
        seen.add((node_id, attempt_id))
        return attempt_id

    def admit_items(self, batch: pb.AdmitBatch, now_ms: int) -> list[tuple[Any, ...]]:
        """``("admit", node_id, listener, ip, attempt_id | None, now_ms)`` per item, every item checked first."""
        self.gateway.config.check_size(len(batch.items))
        items = []
        seen: set[tuple[int, int]] = set()
        for index, item in enumerate(batch.items):
            node_id = self._node(index, item.node_id)
            listener = self._connection(index, item.listener, item.ip)
            attempt_id = self._attempt(index, node_id, item.attempt_id, seen) if item.HasField("attempt_id") else None
            items.append(("admit", node_id, listener, item.ip, attempt_id, item_time(index, item, now_ms)))
        return items

    def release_items(self, batch: pb.ReleaseBatch, now_ms: int) -> list[tuple[Any, ...]]:
        """``("release", node_id, listener, ip, now_ms)`` or ``("abandon", node_id, attempt_id, now_ms)``."""
        self.gateway.config.check_size(len(batch.items))
        items: list[tuple[Any, ...]] = []
        seen: set[tuple[int, int]] = set()
        for index, item in enumerate(batch.items):
            node_id = self._node(index, item.node_id)
            t = item_time(index, item, now_ms)
            if item.HasField("attempt_id"):
                if item.listener or item.ip:
                    raise InvalidArgument(
                        f"item {index}: an abandoned attempt is named by node_id and attempt_id only; "
                        "leave listener and ip empty"
                    )
                items.append(("abandon", node_id, self._attempt(index, node_id, item.attempt_id, seen), t))
            else:
                listener = self._connection(index, item.listener, item.ip)
                items.append(("release", node_id, listener, item.ip, t))
        return items

    # --- RPCs ------------------------------------------------------------------------------------------
    @GATEWAY_ERRORS.unary
    def Admit(self, request: pb.AdmitBatch, context: grpc.ServicerContext) -> pb.AdmitResults:
        gateway = self.gateway
        items = self.admit_items(request, gateway.clock())
        offset, results = gateway.dispatch(CONNECTION_KIND, items, [node_key(item[1]) for item in items])
        answers = []
        for decision, throttle_ms, limit, max_connections, attempt_id, counted in results:
            answer = pb.AdmitResult(
                decision=_DECISIONS[decision],
                throttle_ms=throttle_ms,
                limit=limit,
                attempt_id=attempt_id,
                counted=counted,
            )
            if max_connections is not None:
                answer.max_connections = max_connections
            answers.append(answer)
        return pb.AdmitResults(batch_id=request.batch_id, results=answers, config_offset=offset)

    @GATEWAY_ERRORS.unary
    def Release(self, request: pb.ReleaseBatch, context: grpc.ServicerContext) -> pb.ReleaseResults:
        gateway = self.gateway
        items = self.release_items(request, gateway.clock())
        offset, results = gateway.dispatch(CONNECTION_KIND, items, [node_key(item[1]) for item in items])
        return pb.ReleaseResults(
            batch_id=request.batch_id, released=[released for (released,) in results], config_offset=offset
        )


def add_connection_service(server: grpc.Server, gateway: Any) -> list[str]:
    """Register ConnectionService on ``server`` over ``gateway``; the full service names (for health and
    reflection)."""
    connection_pb2_grpc.add_ConnectionServiceServicer_to_server(ConnectionServicer(gateway), server)
    return [CONNECTION_SERVICE_NAME]
