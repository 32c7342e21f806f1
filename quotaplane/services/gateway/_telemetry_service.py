"""gRPC ``TelemetryService``: KIP-714 client telemetry served by the shards, fronted by the gateway.

A Kafka-facing frontend (or a proxy) sends batches of GetTelemetrySubscriptions / PushTelemetry requests
and closed connections, each with its connection's context. This servicer checks every request of a
batch, turns them into the shard's item tuples (see ``quotaplane.actors._telemetry_host``) and hands
them to the gateway's ``dispatch``: each item goes to the shard owning ``str(client_instance_id)``,
micro-batched per shard with everything else queued for it, and the results come back in the order of
the requests. Telemetry is routed by the client instance id alone (no config is needed to route it), so
the kind is not fenced: a shard behind the gateway's config catches up first, one ahead just serves.

**A client's first get** carries the zero id. The shard would pick an id itself, but then the shard
answering might not be the one owning the id, and the client's next request would land on another
shard that never heard of it. So the gateway picks the id here (``random_uuid``, Kafka's
``Uuid.randomUuid``: never ZERO or ONE) and routes by it; the core then creates the instance under
that id exactly as it creates one under an id it generated. ONE_UUID is replaced too, as the core
replaces it (it never hands it out). 122 random bits make a clash with a live instance as unlikely as
in Kafka.

**Errors.** A batch that cannot be served is refused whole (``InvalidArgument``: INVALID_ARGUMENT naming
the request) and nothing of it reaches a shard: empty or oversized batch, an id neither empty nor 16
bytes (a disconnect's must be a real id), a missing or empty connection_id, strings over the gateway's
``max_name_length`` or holding NUL, a port outside 0..65535, a compression type outside Kafka's int8
(another id within int8 is Kafka's UNSUPPORTED_COMPRESSION_TYPE, answered by the core), a negative
now_ms. Kafka-level outcomes (THROTTLING_QUOTA_EXCEEDED, UNKNOWN_SUBSCRIPTION_ID, INVALID_REQUEST for a
push with a zero id, ...) are per-request results, exactly as the core answers. Full gateway:
RESOURCE_EXHAUSTED; shard restarting: UNAVAILABLE (``GATEWAY_ERRORS`` maps them).

**Two forms of a push batch.** ``requests`` (a ``PushTelemetryRequest`` per push) or ``columns``
(``PushTelemetryColumns``: one repeated field per request field, each push's context serialized), the
frontend's form: each column is one C call to build and to read, and a connection's context is serialized
once by the frontend instead of once a push here. Both give the shards the same items
(``tests/telemetry/test_push_fast_paths.py``); a column's request is named ``columns[i]`` in errors. A batch
setting both is INVALID_ARGUMENT, and so are columns of unequal lengths and a context that is not a
``RequestContext``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from quotaplane.kafka_uuid import RESERVED, ZERO_UUID, Uuid, random_uuid
from quotaplane.telemetry import ANONYMOUS_PRINCIPAL
from quotaplane.v1 import telemetry_pb2 as pb
from quotaplane.v1 import telemetry_pb2_grpc

from ._checks import GATEWAY_ERRORS, InvalidArgument, item_time

__all__ = ["TELEMETRY_KIND", "TELEMETRY_SERVICE_NAME", "TelemetryServicer", "add_telemetry_service"]

TELEMETRY_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TelemetryService"].full_name
#: The ``ShardActor.serve_at`` kind the shard hands to its ``TelemetryHost``.
TELEMETRY_KIND = "telemetry"
_INT8_MIN, _INT8_MAX = -128, 127
_ZERO_KEY = str(ZERO_UUID)


# The gateway's checks name a request ``requests[i]`` (a disconnect ``connections[i]``): the batches'
# repeated fields.
_REQUESTS = "requests"
_CONNECTIONS = "connections"
_COLUMNS = "columns"


def _instance_id(field: str, index: int, raw: bytes, *, required: bool = False) -> Uuid:
    if len(raw) not in (0, 16):
        raise InvalidArgument(
            f"{field}[{index}]: client_instance_id must be 16 bytes (a Kafka Uuid) or empty, got {len(raw)}"
        )
    uuid = Uuid(raw) if raw else ZERO_UUID
    if required and uuid in RESERVED:
        raise InvalidArgument(f"{field}[{index}]: client_instance_id must be a client's id, not {uuid}")
    return uuid


def _context(config: Any, index: int, ctx: pb.RequestContext, field: str = _REQUESTS) -> tuple:
    """The host's context tuple: (connection_id, client_id, software name, version, address, port,
    principal); an empty principal is Kafka's anonymous one. ``field``: how errors name the request."""
    port = ctx.client_source_port if ctx.HasField("client_source_port") else None
    if port is not None and not 0 <= port <= 65535:
        raise InvalidArgument(f"{field}[{index}]: client_source_port must be in 0..65535, got {port}")
    check, has = config.check_name, ctx.HasField
    return (
        check(index, "context.connection_id", ctx.connection_id, allow_empty=False, field=field, empty_hint=""),
        check(index, "context.client_id", ctx.client_id, field=field),
        check(index, "context.client_software_name", ctx.client_software_name, field=field)
        if has("client_software_name")
        else None,
        check(index, "context.client_software_version", ctx.client_software_version, field=field)
        if has("client_software_version")
        else None,
        check(index, "context.client_source_address", ctx.client_source_address, field=field)
        if has("client_source_address")
        else None,
        port,
        check(index, "context.principal", ctx.principal, field=field) or ANONYMOUS_PRINCIPAL,
    )


def get_items(
    gateway: Any, batch: pb.GetTelemetrySubscriptionsBatch, now_ms: int, new_id: Callable[[], Uuid] = random_uuid
) -> tuple[list[tuple], list[str]]:
    """The host's ``("get", id, context, now_ms)`` items and their routing keys; a zero or reserved id
    replaced by a fresh one (routed by it)."""
    gateway.config.check_size(len(batch.requests), _REQUESTS)
    items: list[tuple] = []
    keys: list[str] = []
    for index, request in enumerate(batch.requests):
        uuid = _instance_id(_REQUESTS, index, request.client_instance_id)
        context = _context(gateway.config, index, request.context)
        t = item_time(index, request, now_ms, _REQUESTS)
        if uuid in RESERVED:
            uuid = new_id()
        items.append(("get", bytes(uuid), context, t))
        keys.append(str(uuid))
    return items, keys


def push_items(
    gateway: Any, batch: pb.PushTelemetryBatch, now_ms: int, cache: _ContextCache | None = None
) -> tuple[list[tuple], list[str]]:
    """The host's push items and their routing keys. A zero or reserved id stays: the core answers it
    INVALID_REQUEST, as Kafka (those items all go to the shard owning the zero id's key).

    Every push carries its connection's context, the same on every push of that connection: a context that
    passed the checks is kept by its wire form (``_ContextCache``), so a push costs one serialization and a
    lookup instead of seven checked field reads, and an instance's routing key is kept by its id. A context
    that fails a check is never kept: it is checked, and refused with its index, each time. ``cache`` belongs to
    the caller, one per gateway (the checks depend on its config); None: one for this batch alone.
    ``tests/telemetry/test_push_fast_paths.py`` compares this with the field-by-field reading on random batches.
    """
    config = gateway.config
    if cache is None:
        cache = _ContextCache()
    if batch.HasField("columns"):
        if batch.requests:
            raise InvalidArgument("set either requests or columns, not both")
        return _push_columns(config, batch.columns, now_ms, cache)
    config.check_size(len(batch.requests), _REQUESTS)
    items: list[tuple] = []
    keys: list[str] = []
    for index, request in enumerate(batch.requests):
        raw = request.client_instance_id
        key = cache.keys.get(raw)
        if key is None:
            raw, key = _new_instance_key(cache, _REQUESTS, index, raw)
        compression_type = request.compression_type
        if not _INT8_MIN <= compression_type <= _INT8_MAX:
            raise _not_int8(_REQUESTS, index, compression_type)
        ctx = request.context
        wire = ctx.SerializeToString()
        context = cache.contexts.get(wire)
        if context is None:
            context = cache.context(wire, _context(config, index, ctx))
        t = item_time(index, request, now_ms, _REQUESTS)
        items.append(
            ("push", raw, request.subscription_id, request.terminating, compression_type, request.metrics, context, t)
        )
        keys.append(key)
    return items, keys


def _push_columns(
    config: Any, columns: pb.PushTelemetryColumns, now_ms: int, cache: _ContextCache
) -> tuple[list[tuple], list[str]]:
    """``push_items`` of a columnar batch: the same items, checks and errors (naming ``columns[i]``), each column
    read into a list by one slice (a C loop in upb) and each push's context taken from the cache by the bytes
    the frontend sent (parsed and checked only when they are new)."""
    instance_ids = columns.client_instance_id[:]
    count = len(instance_ids)
    config.check_size(count, _COLUMNS)
    subscription_ids, terminating, compression_types, metrics, contexts = (
        columns.subscription_id[:],
        columns.terminating[:],
        columns.compression_type[:],
        columns.metrics[:],
        columns.context[:],
    )
    lengths = (len(subscription_ids), len(terminating), len(compression_types), len(metrics), len(contexts))
    if any(n != count for n in lengths):
        raise InvalidArgument(
            f"columns of unequal length: {count} client_instance_id, then subscription_id, terminating, "
            f"compression_type, metrics, context: {', '.join(map(str, lengths))}"
        )
    times = columns.now_ms[:] or [now_ms] * count
    if len(times) != count:
        raise InvalidArgument(f"now_ms has {len(times)} entries for {count} pushes: one per push, or none")
    items: list[tuple] = []
    keys: list[str] = []
    for index, (raw, subscription_id, closing, compression_type, data, wire, t) in enumerate(
        zip(instance_ids, subscription_ids, terminating, compression_types, metrics, contexts, times, strict=True)
    ):
        key = cache.keys.get(raw)
        if key is None:
            raw, key = _new_instance_key(cache, _COLUMNS, index, raw)
        if not _INT8_MIN <= compression_type <= _INT8_MAX:
            raise _not_int8(_COLUMNS, index, compression_type)
        context = cache.contexts.get(wire)
        if context is None:
            context = cache.context(wire, _context(config, index, _parsed_context(index, wire), _COLUMNS))
        if t < 0:
            raise InvalidArgument(f"{_COLUMNS}[{index}]: now_ms must be >= 0, got {t}")
        items.append(("push", raw, subscription_id, closing, compression_type, data, context, t))
        keys.append(key)
    return items, keys


def _new_instance_key(cache: _ContextCache, field: str, index: int, raw: bytes) -> tuple[bytes, str]:
    """A push's instance id and routing key when the cache does not hold them: a 16-byte id is keyed (and kept),
    an empty one is the zero id; any other length is INVALID_ARGUMENT."""
    if len(raw) == 16:
        return raw, cache.key(raw)
    if not raw:
        return _ZERO_BYTES, _ZERO_KEY
    _instance_id(field, index, raw)  # raises its INVALID_ARGUMENT
    raise AssertionError("unreachable")


def _not_int8(field: str, index: int, compression_type: int) -> InvalidArgument:
    return InvalidArgument(f"{field}[{index}]: compression_type {compression_type} is not a Kafka int8 value")


def _parsed_context(index: int, wire: bytes) -> pb.RequestContext:
    try:
        return pb.RequestContext.FromString(wire)
    except Exception as e:  # protobuf's DecodeError
        raise InvalidArgument(f"{_COLUMNS}[{index}]: context is not a serialized RequestContext: {e}") from None


_ZERO_BYTES = bytes(ZERO_UUID)
#: Entries a cache keeps before it starts again (live connections and instances refill it at once).
_CACHE_ENTRIES = 65_536


class _ContextCache:
    """Checked context tuples by their wire form, and routing keys by instance id, for one gateway (the checks
    depend on its config's limits). Bounded: cleared when full. Equal wire forms are equal contexts, so a hit is
    always right; two wire forms of one context (field order) only miss."""

    __slots__ = ("contexts", "keys")

    def __init__(self) -> None:
        self.contexts: dict[bytes, tuple] = {}
        self.keys: dict[bytes, str] = {}

    def context(self, wire: bytes, context: tuple) -> tuple:
        if len(self.contexts) >= _CACHE_ENTRIES:
            self.contexts.clear()
        self.contexts[wire] = context
        return context

    def key(self, raw: bytes) -> str:
        uuid = Uuid(raw)
        key = _ZERO_KEY if uuid == ZERO_UUID else str(uuid)
        if len(self.keys) >= _CACHE_ENTRIES:
            self.keys.clear()
        self.keys[raw] = key
        return key


def disconnect_items(gateway: Any, batch: pb.ClientDisconnectedBatch, now_ms: int) -> tuple[list[tuple], list[str]]:
    """``("disconnect", connection_id, id, now_ms)`` items, routed to the shard holding the instance."""
    gateway.config.check_size(len(batch.connections), _CONNECTIONS)
    items: list[tuple] = []
    keys: list[str] = []
    for index, item in enumerate(batch.connections):
        connection_id = gateway.config.check_name(
            index, "connection_id", item.connection_id, allow_empty=False, field=_CONNECTIONS, empty_hint=""
        )
        uuid = _instance_id(_CONNECTIONS, index, item.client_instance_id, required=True)
        items.append(("disconnect", connection_id, bytes(uuid), item_time(index, item, now_ms, _CONNECTIONS)))
        keys.append(str(uuid))
    return items, keys


def _get_result(result: tuple) -> pb.GetTelemetrySubscriptionsResult:
    error, message, raw, sid, accepted, interval, max_bytes, delta, requested = result
    out = pb.GetTelemetrySubscriptionsResult(
        error_code=error,
        client_instance_id=raw,
        subscription_id=sid,
        accepted_compression_types=accepted,
        push_interval_ms=interval,
        telemetry_max_bytes=max_bytes,
        delta_temporality=delta,
        requested_metrics=requested,
    )
    if message is not None:
        out.error_message = message
    return out


def _push_results(batch_id: int, results: list[tuple], offset: int) -> pb.PushTelemetryResults:
    """The answer of a push batch, each result added in place (a ``PushTelemetryResult`` per push, copied into
    the answer afterwards, cost twice as much)."""
    out = pb.PushTelemetryResults(batch_id=batch_id, config_offset=offset)
    add = out.results.add
    for error, message in results:
        if message is None:
            add(error_code=error)
        else:
            add(error_code=error, error_message=message)
    return out


class TelemetryServicer(telemetry_pb2_grpc.TelemetryServiceServicer):
    """The three batch RPCs over ``gateway.dispatch`` (see the module docstring)."""

    def __init__(self, gateway: Any, *, new_client_instance_id: Callable[[], Uuid] = random_uuid) -> None:
        self.gateway = gateway
        self._new_id = new_client_instance_id
        self._push_cache = _ContextCache()

    @GATEWAY_ERRORS.unary
    def GetTelemetrySubscriptions(
        self, request: pb.GetTelemetrySubscriptionsBatch, context: grpc.ServicerContext
    ) -> pb.GetTelemetrySubscriptionsResults:
        gateway = self.gateway
        items, keys = get_items(gateway, request, gateway.clock(), self._new_id)
        offset, results = gateway.dispatch(TELEMETRY_KIND, items, keys)
        return pb.GetTelemetrySubscriptionsResults(
            batch_id=request.batch_id, results=[_get_result(r) for r in results], config_offset=offset
        )

    @GATEWAY_ERRORS.unary
    def PushTelemetry(self, request: pb.PushTelemetryBatch, context: grpc.ServicerContext) -> pb.PushTelemetryResults:
        gateway = self.gateway
        items, keys = push_items(gateway, request, gateway.clock(), self._push_cache)
        # one actor call carries a bounded number of bytes; measured on the items: each read of a protobuf
        # bytes field copies the payload (up to telemetry.max.bytes)
        sizes = [len(item[5]) for item in items]
        offset, results = gateway.dispatch(TELEMETRY_KIND, items, keys, sizes=sizes)
        return _push_results(request.batch_id, results, offset)

    @GATEWAY_ERRORS.unary
    def ClientDisconnected(
        self, request: pb.ClientDisconnectedBatch, context: grpc.ServicerContext
    ) -> pb.ClientDisconnectedResults:
        gateway = self.gateway
        items, keys = disconnect_items(gateway, request, gateway.clock())
        offset, results = gateway.dispatch(TELEMETRY_KIND, items, keys)
        return pb.ClientDisconnectedResults(
            batch_id=request.batch_id,
            results=[pb.ClientDisconnectedResult(evicted=bool(r)) for r in results],
            config_offset=offset,
        )


def add_telemetry_service(server: grpc.Server, gateway: Any) -> list[str]:
    """Register the TelemetryService on ``server`` over ``gateway``; the full service names (for health
    and reflection)."""
    telemetry_pb2_grpc.add_TelemetryServiceServicer_to_server(TelemetryServicer(gateway), server)
    return [TELEMETRY_SERVICE_NAME]
