"""The frontend's calls to the gateway's quotas for one request: its request time and, in proxy mode, its
produce / fetch bytes, the producer ids it carries, a fetch's cap, and taking back a throttled fetch.

Every call fails open: a request that was (or is being) served is never failed by a quota outage; the outage
is counted (``stats.gateway_fail_open``) and logged once (``FrontendServer.note_backend_error``). Names the
gateway would refuse for a whole batch (``gateway_safe``) are not sent: such a client goes unmetered, as the
frontend's own requests do.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from quotaplane.v1 import quota_pb2 as quota_pb

from ._handlers import gateway_safe

if TYPE_CHECKING:
    from ._batcher import Batcher
    from ._connection import ConnectionState
    from .server import FrontendServer

__all__ = ["fetch_cap", "record_producer_ids", "record_usage", "request_throttle", "unrecord_usage"]

#: How long a fetch cap (the quota's max value in one window) is reused before the gateway is asked again:
#: a quota change reaches fetch caps within this (plus its propagation), as it reaches a broker's config cache.
FETCH_CAP_TTL_S = 1.0
_MAX_CACHED_CAPS = 100_000


def _safe(state: ConnectionState) -> bool:
    return gateway_safe(state.client_id) and gateway_safe(state.user)


async def _ask(server: FrontendServer, what: str, batcher: Batcher[Any, Any], item: Any, default: Any) -> Any:
    try:
        answer = await batcher.submit(item)
    except Exception as e:
        server.stats.gateway_fail_open += 1
        server.note_backend_error(what, e)
        return default
    server.gateway_answered()
    return answer


async def request_throttle(server: FrontendServer, state: ConnectionState, handled_ns: int, now_ms: int) -> int:
    """Kafka's request quota (KIP-219): the time this process spent on the request; its throttle."""
    if not _safe(state):
        return 0
    item = quota_pb.RequestTimeItem(
        user=state.user, client_id=state.client_id, request_thread_time_nanos=handled_ns, now_ms=now_ms
    )
    return int(await _ask(server, "QuotaService.RecordRequestTime", server.backend.request_time_batcher, item, 0))


def _usage(state: ConnectionState, quota_type: int, size: int, now_ms: int) -> quota_pb.UsageItem:
    return quota_pb.UsageItem(
        quota_type=quota_type, user=state.user, client_id=state.client_id, value=float(size), now_ms=now_ms
    )


async def record_usage(server: FrontendServer, state: ConnectionState, quota_type: int, size: int, now_ms: int) -> int:
    """Record ``size`` bytes produced or fetched; the bandwidth throttle (``maybeRecordAndGetThrottleTimeMs``)."""
    if not _safe(state):
        return 0
    item = _usage(state, quota_type, size, now_ms)
    return int(await _ask(server, "QuotaService.RecordUsageBatch", server.backend.usage_batcher, item, 0))


async def unrecord_usage(
    server: FrontendServer, state: ConnectionState, quota_type: int, size: int, now_ms: int
) -> None:
    """Kafka's ``unrecordQuotaSensor``: a throttled fetch's bytes were not sent, so they do not count."""
    if _safe(state):
        item = _usage(state, quota_type, size, now_ms)
        await _ask(server, "QuotaService.UnrecordUsage", server.backend.unrecord_batcher, item, 0)


async def record_producer_ids(server: FrontendServer, state: ConnectionState, ids: list[int], now_ms: int) -> int:
    """KIP-936: each producer id of the request against the principal's ``producer_ids_rate``; the largest
    throttle (a new id beyond the rate throttles the request)."""
    if not ids or not gateway_safe(state.user):
        return 0
    batcher = server.backend.producer_id_batcher
    what = "ProducerIdService.RecordProducerIds"
    throttles = await asyncio.gather(
        *(
            _ask(server, what, batcher, quota_pb.ProducerIdItem(user=state.user, producer_id=pid, now_ms=now_ms), 0)
            for pid in ids
        )
    )
    return int(max(throttles))


async def fetch_cap(server: FrontendServer, state: ConnectionState) -> float:
    """The most this client may fetch at once (Kafka's ``getMaxValueInQuotaWindow``), cached for
    ``FETCH_CAP_TTL_S``; +inf (no cap) when the gateway cannot answer."""
    if not _safe(state):
        return float("inf")
    key = (state.user, state.client_id)
    caps = server.fetch_caps
    now = time.monotonic()
    cached = caps.get(key)
    if cached is not None and cached[1] > now:
        return cached[0]
    item = _usage(state, quota_pb.FETCH, 0, 0)
    cap = float(
        await _ask(server, "QuotaService.MaxValueInQuotaWindow", server.backend.max_value_batcher, item, float("inf"))
    )
    if len(caps) >= _MAX_CACHED_CAPS:
        caps.clear()
    caps[key] = (cap, now + FETCH_CAP_TTL_S)
    return cap
