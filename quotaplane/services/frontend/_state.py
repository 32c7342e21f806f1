"""What one Kafka connection knows (Kafka's ``RequestContext`` plus SASL state and the client instances seen),
and the exception that ends it; shared by the connection loop and the handlers it calls."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from quotaplane.v1 import telemetry_pb2 as tele_pb

if TYPE_CHECKING:
    from quotaplane.services.proxy import UpstreamConnection

__all__ = ["ANONYMOUS", "CloseConnection", "ConnectionState"]

ANONYMOUS = "User:ANONYMOUS"


class CloseConnection(Exception):
    """End this connection; ``reason`` is logged once (None: a normal end, nothing to log)."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason or "")
        self.reason = reason


class ConnectionState:
    """What Kafka's ``RequestContext`` knows about a connection, plus its SASL state and the client
    instances seen on it."""

    __slots__ = (
        "_context",
        "address",
        "authenticated",
        "client_id",
        "client_software_name",
        "client_software_version",
        "connection_id",
        "instances",
        "port",
        "principal",
        "raw_sasl",
        "sasl_mechanism",
        "upstream",
        "upstream_node",
        "waited_ns",
    )

    def __init__(self, connection_id: str, address: str, port: int, *, sasl: bool) -> None:
        self.connection_id = connection_id
        self.address = address
        self.port = port
        self.principal = ANONYMOUS
        self.authenticated = not sasl
        self.sasl_mechanism: str | None = None
        self.raw_sasl = False  # SaslHandshake v0: the next frame is a bare token
        self.client_id = ""
        self.client_software_name: str | None = None
        self.client_software_version: str | None = None
        self.instances: set[bytes] = set()
        self.waited_ns = 0
        #: proxy mode: the upstream broker this connection's port stands for (None: the bootstrap port), and
        #: the upstream connection behind it (opened on the first forwarded request)
        self.upstream_node: int | None = None
        self.upstream: UpstreamConnection | None = None
        #: (the fields it was built from, the TelemetryService's RequestContext, that message serialized)
        self._context: tuple[tuple[Any, ...], tele_pb.RequestContext, bytes] | None = None

    def telemetry_context(self) -> tele_pb.RequestContext:
        """The connection's context for the TelemetryService (GetTelemetrySubscriptions carries it as a message).
        The caller must not modify it (a message given to another message's constructor is copied)."""
        return self._telemetry_context()[1]

    def telemetry_context_wire(self) -> bytes:
        """The same context serialized, as a columnar push batch carries it."""
        return self._telemetry_context()[2]

    def _telemetry_context(self) -> tuple[tuple[Any, ...], tele_pb.RequestContext, bytes]:
        """The context, built and serialized again only when one of its fields changed (a client sends the same
        client id on every request): a protobuf message, or its serialization, per push is measurable."""
        key = (self.client_id, self.principal, self.client_software_name, self.client_software_version)
        cached = self._context
        if cached is not None and cached[0] == key:
            return cached
        context = tele_pb.RequestContext(
            connection_id=self.connection_id,
            client_id=self.client_id,
            client_source_address=self.address,
            client_source_port=self.port,
            principal=self.principal,
        )
        if self.client_software_name is not None:
            context.client_software_name = self.client_software_name
            context.client_software_version = self.client_software_version or ""
        cached = self._context = (key, context, context.SerializeToString())
        return cached

    async def wait(self, awaitable: Any) -> Any:
        """Await the gateway, and keep that time out of the request time charged to the client."""
        start = time.perf_counter_ns()
        try:
            return await awaitable
        finally:
            self.waited_ns += time.perf_counter_ns() - start

    @property
    def user(self) -> str:
        """The quota ``user`` of the principal: its name (Kafka's ``KafkaPrincipal.getName``)."""
        return self.principal.partition(":")[2] or self.principal
