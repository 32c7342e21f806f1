"""The gateway: the gRPC services in front of the shard actors (QuotaService, ProducerIdService,
TelemetryService, ConnectionService), and what they share.

A broker, broker plugin, Kafka proxy or the Kafka-wire frontend sends batches of items; the gateway checks
each batch, finds the shard owning each item and answers with what the shards answered, in the items'
order, so one entity has one budget across the fleet. The gateway is a Ray driver (it joins the cluster of
``quotaplane up``) and keeps no quota state of its own: only a replica of the config, to route.

One module per concern:

- ``_checks``: the limits (:class:`GatewayConfig`), the per-item checks every servicer uses, and the error
  contract (:class:`InvalidArgument`, :class:`Exhausted`, :class:`Unavailable` and their gRPC statuses);
- ``_replica``: the config replica that resolves Kafka's metric tags (:class:`ConfigReplica`);
- ``_batching``: request batches and the per-shard worker threads that micro-batch them;
- ``_routing``: the :class:`Gateway` (admission, resolution, routing, ``submit`` / ``dispatch``);
- ``_quota_service``, ``_producer_id_service``, ``_telemetry_service``, ``_connection_service``: one servicer
  each, with the checks of its own requests;
- ``_server``: :func:`serve_gateway`, the gRPC server with all of them, health and reflection.
"""

from ._checks import (
    GATEWAY_ERRORS,
    RETRY_AFTER_TRAILER,
    Exhausted,
    GatewayConfig,
    InvalidArgument,
    Unavailable,
    item_time,
)
from ._connection_service import (
    CONNECTION_KIND,
    CONNECTION_SERVICE_NAME,
    ConnectionServicer,
    add_connection_service,
    node_key,
)
from ._producer_id_service import PRODUCER_ID_SERVICE_NAME, ProducerIdServicer, add_producer_id_service
from ._quota_service import QUOTA_SERVICE_NAME, QuotaServicer, add_quota_service
from ._replica import ConfigReplica
from ._routing import Gateway
from ._server import DEFAULT_GATEWAY_PORT, MAX_MESSAGE_BYTES, GatewayServer, serve_gateway
from ._telemetry_service import TELEMETRY_KIND, TELEMETRY_SERVICE_NAME, TelemetryServicer, add_telemetry_service

__all__ = [
    "CONNECTION_KIND",
    "CONNECTION_SERVICE_NAME",
    "DEFAULT_GATEWAY_PORT",
    "GATEWAY_ERRORS",
    "MAX_MESSAGE_BYTES",
    "PRODUCER_ID_SERVICE_NAME",
    "QUOTA_SERVICE_NAME",
    "RETRY_AFTER_TRAILER",
    "TELEMETRY_KIND",
    "TELEMETRY_SERVICE_NAME",
    "ConfigReplica",
    "ConnectionServicer",
    "Exhausted",
    "Gateway",
    "GatewayConfig",
    "GatewayServer",
    "InvalidArgument",
    "ProducerIdServicer",
    "QuotaServicer",
    "TelemetryServicer",
    "Unavailable",
    "add_connection_service",
    "add_producer_id_service",
    "add_quota_service",
    "add_telemetry_service",
    "item_time",
    "node_key",
    "serve_gateway",
]
