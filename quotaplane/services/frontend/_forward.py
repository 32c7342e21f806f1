"""Proxy mode: a client request quotaplane does not answer itself goes to the upstream broker, and its answer
comes back with Kafka's throttling applied (see ``quotaplane.services.proxy`` for the upstream side).

Where Kafka applies quotas, so does the proxy (KafkaApis.handleProduceRequest):

- **Produce**: the request's size in bytes (the frame, as Kafka's ``request.sizeInBytes``) is recorded on the
  produce quota of the connection's ``<user, client-id>``; the response carries
  ``max(produce throttle, request throttle)`` in ``throttle_time_ms`` and the connection is muted (not read)
  that long. With ``acks=0`` there is no response, but the connection is still muted.
- **Producer ids** (KIP-936): the producer ids of the request's idempotent / transactional record batches, read
  from the batch headers (``quotaplane.protocol.records``; nothing is decompressed), go through the principal's
  ``producer_ids_rate``; a new id beyond the rate throttles the request like the bandwidth quotas (KIP-936 says
  the client "will receive a throttling time"; Kafka itself never shipped the KIP).
- **Fetch** (consumers): ``max_bytes`` is capped by the fetch quota's max value in one quota window (Kafka's
  ``getMaxValueInQuotaWindow``, cached for a second), the response's size is recorded once the upstream
  answers, and a throttled fetch (bandwidth or request quota) is un-recorded and answered with Kafka's empty
  throttled response: the consumer fetches the same offsets again, nothing is lost or skipped. Fetch sessions:
  see ``quotaplane.protocol.fetch`` for the one place the proxy must answer differently from a broker.
- **Topic mutations** (CreateTopics, DeleteTopics, CreatePartitions): charged to the controller mutation quota,
  strict or permissive by version, a strictly refused topic answered THROTTLING_QUOTA_EXCEEDED by the proxy and
  never forwarded (``_mutations.py``): the one decision taken before forwarding.
- **Every forwarded request** is metered by the request quota as the frontend's own requests are (the time
  this process spent on it; not the wait for the upstream or the gateway).

**The decision is not on the critical path.** The produce usage goes to the gateway *while* the upstream
works (both stamped with the time the request arrived), and the answer is applied when the upstream
responds. A fetch's size is known only from its response, so its decision follows the upstream's answer,
as in Kafka; its cap comes from a cache. A gateway that cannot be reached costs nothing but the quota: the
request is forwarded unthrottled, counted (``stats.gateway_fail_open``) and logged once per outage, unless the proxy is
configured to fail closed, in which case client connections are closed instead of forwarded while the
gateway is down.

Frames are forwarded untouched (record batches are never decompressed); only the address-carrying
responses (Metadata, FindCoordinator, DescribeCluster) are decoded and re-encoded, and a throttle time is
written in place into the responses that carry one first (``quotaplane.protocol.frames``).
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from quotaplane.protocol import (
    ApiKey,
    ProtocolError,
    decode_request,
    decode_response,
    encode_response,
)
from quotaplane.protocol.fetch import (
    FetchLimits,
    cap_fetch_bytes,
    fetch_limits,
    fetch_response_size,
    throttled_fetch_response,
)
from quotaplane.protocol.frames import peek_client_id, peek_request, produce_acks, set_throttle_time
from quotaplane.protocol.records import producer_ids
from quotaplane.services.proxy import LOCAL_APIS, REWRITTEN_APIS, UpstreamClosedError, rewrite_response
from quotaplane.v1 import quota_pb2 as quota_pb

from ._mutations import MUTATION_APIS, forward_mutation
from ._quotas import enabled, fetch_cap, record_producer_ids, record_usage, request_throttle, unrecord_usage

if TYPE_CHECKING:
    from ._connection import ConnectionState
    from .server import FrontendServer

__all__ = [
    "Forwarded",
    "UpstreamError",
    "answer_proxied",
    "apply_throttle",
    "forward_request",
    "is_local",
    "write_framed",
]

_SIZE = struct.Struct(">i")
#: Kafka's ConfigResource.Type of client-metrics resources: answered by quotaplane (KIP-714 is served here).
_CLIENT_METRICS = 16
_CONFIG_APIS = frozenset({ApiKey.DESCRIBE_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS})


class UpstreamError(Exception):
    """The upstream side of a connection failed: close the client connection as a broker going away would."""


def is_local(api_key: int, frame: bytes) -> bool:
    """Whether quotaplane answers this request itself: its own APIs, and configs requests naming only
    client-metrics resources (anything else in them belongs to the upstream's brokers and topics)."""
    if api_key in LOCAL_APIS:
        return True
    if api_key in _CONFIG_APIS:
        try:
            body = decode_request(frame).body
        except ProtocolError:
            return True  # answered (or refused) by the frontend's own decoding, as before
        return bool(body.resources) and all(r.resource_type == _CLIENT_METRICS for r in body.resources)
    return False


@dataclass
class Forwarded:
    """One forwarded request and what the quotas made of it."""

    api_key: int
    api_version: int
    correlation_id: int
    #: the upstream's answer, addresses rewritten, without its size prefix; None: none expected (acks=0)
    response: bytes | bytearray | None
    #: the largest throttle of the bandwidth (produce / fetch) and producer-id quotas
    throttle_ms: int = 0
    #: Fetch: the request's limits and the response bytes recorded on the fetch quota
    fetch: FetchLimits | None = None
    fetched_bytes: int = 0


async def _produce_quotas(
    server: FrontendServer, state: ConnectionState, frame: bytes, api_version: int, now_ms: int
) -> tuple[bool, Any]:
    """(whether a response is expected, the pending throttle): the request's bytes and producer ids go to the
    gateway now, while the upstream works. Only ``acks`` is read from the frame; the record batches' headers are
    read (nothing decompressed) only when some producer-id quota exists."""
    acks = produce_acks(frame, api_version)
    ids: list[int] = []
    if enabled(server, "producer_ids"):
        try:
            body = decode_request(frame).body
            ids = [
                pid for topic in body.topic_data for part in topic.partition_data for pid in producer_ids(part.records)
            ]
        except ProtocolError as e:
            raise ProtocolError(f"malformed Produce request: {e}") from None

    async def throttle() -> int:
        produce, pids = await asyncio.gather(
            record_usage(server, state, quota_pb.PRODUCE, len(frame), now_ms),
            record_producer_ids(server, state, list(dict.fromkeys(ids)), now_ms),
        )
        return max(produce, pids)

    return acks != 0, asyncio.ensure_future(throttle())


async def _exchange(
    server: FrontendServer, state: ConnectionState, frame: bytes, correlation_id: int, *, answered: bool = True
) -> bytes:
    """One request over the connection's upstream connection (opened on first use) and its answer (b"" when
    none is ``answered``); raises :class:`UpstreamClosedError`."""
    proxy = server.proxy
    assert proxy is not None
    if state.upstream is None:
        state.upstream = await state.wait(proxy.connect(state.upstream_node))
    await state.upstream.send(frame, answered=answered)
    if not answered:
        return b""
    return await state.wait(state.upstream.receive(correlation_id, timeout_s=proxy.config.request_timeout_s))


async def forward_request(server: FrontendServer, state: ConnectionState, frame: bytes, now_ms: int) -> Forwarded:
    """Forward one request to the upstream broker behind this connection and apply the bandwidth quotas;
    raises :class:`UpstreamError` when the upstream fails."""
    proxy = server.proxy
    assert proxy is not None
    api_key, api_version, correlation_id = peek_request(frame)
    client_id = peek_client_id(frame)
    if client_id is not None:
        state.client_id = client_id
    if proxy.config.fail_closed and server.gateway_down:
        raise UpstreamError("the gateway is unreachable and the proxy fails closed")
    pending: asyncio.Future[int] | None = None
    expects_response = True
    limits = None
    if api_key in MUTATION_APIS:
        try:
            mutated, throttle_ms = await forward_mutation(
                server, state, frame, now_ms, partial(_exchange, server, state)
            )
        except UpstreamClosedError as e:
            raise UpstreamError(str(e)) from None
        return Forwarded(api_key, api_version, correlation_id, mutated, throttle_ms=throttle_ms)
    if api_key == ApiKey.PRODUCE:
        expects_response, pending = await _produce_quotas(server, state, frame, api_version, now_ms)
    elif api_key == ApiKey.FETCH:
        limits = fetch_limits(frame, api_version)
        cap = await state.wait(fetch_cap(server, state))
        if limits.max_bytes_at is not None and cap < limits.max_bytes:
            frame = bytes(cap_fetch_bytes(frame, limits, int(cap)))
    try:
        answer = await _exchange(server, state, frame, correlation_id, answered=expects_response)
    except UpstreamClosedError as e:
        if pending is not None:
            pending.cancel()
        raise UpstreamError(str(e)) from None
    response = answer if expects_response else None
    server.stats.forwarded_requests += 1
    forwarded = Forwarded(api_key, api_version, correlation_id, response, fetch=limits)
    if pending is not None:
        forwarded.throttle_ms = await state.wait(pending)
    if response is None:
        return forwarded
    if limits is not None:  # Kafka records the response's size, then decides (handleFetchRequest)
        forwarded.fetched_bytes = fetch_response_size(response, api_version)
        forwarded.throttle_ms = await state.wait(
            record_usage(server, state, quota_pb.FETCH, forwarded.fetched_bytes, now_ms)
        )
    elif api_key in REWRITTEN_APIS:
        try:
            forwarded.response, learned = rewrite_response(
                api_key, api_version, response, proxy.brokers, proxy.advertised_host
            )
        except ProtocolError as e:
            raise UpstreamError(f"cannot rewrite the upstream's {api_key} v{api_version} response: {e}") from None
        await proxy.learned(learned)
    return forwarded


async def answer_proxied(
    server: FrontendServer,
    state: ConnectionState,
    frame: bytes,
    writer: asyncio.StreamWriter,
    now_ms: int,
    start_ns: int,
) -> bool:
    """Proxy mode: forward the request unless quotaplane answers it (False: the caller handles it), then
    answer with Kafka's throttling: ``max(bandwidth, request)`` throttle, muting the connection that long; a
    throttled Fetch is taken back from the fetch quota and answered empty, as Kafka answers it."""
    api_key = peek_request(frame)[0]
    if is_local(api_key, frame):
        return False
    if not state.authenticated:
        raise ProtocolError(f"unexpected Kafka request of type {api_key} during SASL handshake")
    forwarded = await forward_request(server, state, frame, now_ms)
    server.stats.count(forwarded.api_key, 0)
    throttle_ms = forwarded.throttle_ms
    if server.config.request_quotas:
        handled_ns = max(0, time.perf_counter_ns() - start_ns - state.waited_ns)
        throttle_ms = max(throttle_ms, await request_throttle(server, state, handled_ns, now_ms))
    response = forwarded.response
    if response is not None and throttle_ms > 0:
        if forwarded.fetch is not None:
            await unrecord_usage(server, state, quota_pb.FETCH, forwarded.fetched_bytes, now_ms)
            response = throttled_fetch_response(
                forwarded.api_version, forwarded.correlation_id, throttle_ms, forwarded.fetch
            )
            server.stats.throttled_fetches += 1
        else:
            try:
                response = apply_throttle(forwarded.api_key, forwarded.api_version, response, throttle_ms)
            except ProtocolError as e:
                raise UpstreamError(f"cannot set the throttle time of a {api_key} response: {e}") from None
    if response is not None:
        write_framed(writer, response)
        await writer.drain()
    if throttle_ms > 0:  # muted, with or without a response (Produce acks=0), as Kafka mutes the channel
        server.stats.throttled_responses += 1
        await asyncio.sleep(throttle_ms / 1000)
    return True


def apply_throttle(api_key: int, api_version: int, response: bytes | bytearray, throttle_ms: int) -> bytearray:
    """The response with ``throttle_time_ms`` set: patched where it is the body's first field (the only copy of
    a forwarded response the proxy makes, and only when it throttles), through the schema for Produce (where it
    is last); responses without one are returned unchanged."""
    if api_key == ApiKey.PRODUCE:
        decoded = decode_response(api_key, api_version, response)
        body: Any = decoded.body
        body.throttle_time_ms = min(throttle_ms, 2**31 - 1)
        return bytearray(memoryview(encode_response(api_key, api_version, decoded.correlation_id, body))[4:])
    patched = bytearray(response)
    set_throttle_time(api_key, api_version, patched, throttle_ms)
    return patched


def write_framed(writer: asyncio.StreamWriter, response: bytes | bytearray) -> None:
    """The size prefix, then the response as it is (no concatenated copy of a megabyte Fetch answer)."""
    writer.writelines((_SIZE.pack(len(response)), response))
