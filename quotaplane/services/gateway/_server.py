"""``serve_gateway``: one gRPC server with every gateway service, in front of one :class:`Gateway`.

The server carries the QuotaService, ProducerIdService, TelemetryService and ConnectionService (with health
and reflection, built by ``grpcutil.start_server``). Its health follows the gateway's config: after
``config_stale_s`` without a successful poll of the controller every service reports NOT_SERVING, so a load
balancer moves traffic to a gateway that sees the config, and SERVING again once a poll succeeds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from .._security import ServerSecurity
from ..grpcutil import start_server
from ._checks import GatewayConfig, wall_clock_ms
from ._connection_service import add_connection_service
from ._producer_id_service import add_producer_id_service
from ._quota_service import add_quota_service
from ._routing import Gateway
from ._telemetry_service import add_telemetry_service

__all__ = ["DEFAULT_GATEWAY_PORT", "MAX_MESSAGE_BYTES", "GatewayServer", "serve_gateway"]

DEFAULT_GATEWAY_PORT = 9094
#: Largest request message the gateway accepts (gRPC's default is 4 MiB: four 1 MiB telemetry pushes).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class GatewayServer:
    """The gRPC server and its gateway: ``stop`` stops both (as ``grpc.Server.stop`` is called)."""

    def __init__(self, server: grpc.Server, gateway: Gateway) -> None:
        self.server = server
        self.gateway = gateway

    def stop(self, grace: float | None) -> threading.Event:
        event = self.server.stop(grace)
        self.gateway.close()
        return event

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        return self.server.wait_for_termination(timeout)


def serve_gateway(
    controller: Any,
    shards: Mapping[str, Any],
    address: str = "127.0.0.1:0",
    *,
    config: GatewayConfig | None = None,
    max_workers: int = 32,
    clock: Callable[[], int] = wall_clock_ms,
    security: ServerSecurity | None = None,
    shard_lookup: Callable[[str], Any] | None = None,
) -> tuple[GatewayServer, int, Gateway]:
    """Start a gateway (config replica loaded before it listens) with QuotaService, ProducerIdService,
    TelemetryService, ConnectionService, health and reflection; return the server (``stop(grace)``), its
    port and the gateway.

    Must run in a Ray driver connected to the cluster of ``controller`` and ``shards`` (shard id ->
    ShardActor handle; every gateway of a fleet must be given the same ids). ``max_workers`` bounds the
    concurrent RPCs: each open stream holds one. ``shard_lookup``: the handle of a shard a reshard adds, by id
    (without it the gateway knows only ``shards``). TLS / mutual TLS when ``security`` says; no operator check.
    """
    gateway = Gateway(controller, shards, config=config, clock=clock, shard_lookup=shard_lookup)
    try:
        running = start_server(
            [
                lambda server: add_quota_service(server, gateway),
                lambda server: add_producer_id_service(server, gateway),
                lambda server: add_telemetry_service(server, gateway),
                lambda server: add_connection_service(server, gateway),
            ],
            address,
            max_workers=max_workers,
            thread_name_prefix="gateway-grpc",
            security=security,
            # a PushTelemetry batch carries several pushes of up to telemetry.max.bytes (1 MiB) each
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        )
    except OSError:
        gateway.close()
        raise
    gateway.on_config_health = running.set_serving
    return GatewayServer(running.server, gateway), running.port, gateway
