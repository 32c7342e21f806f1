"""The frontend's calls to the gateway's quotas for one request: its request time and, in proxy mode, its
produce / fetch bytes, the producer ids it carries, a fetch's cap, and taking back a throttled fetch.

Every call fails open: a request that was (or is being) served is never failed by a quota outage; the outage
is counted (``stats.gateway_fail_open``) and logged once (``FrontendServer.note_backend_error``).

**Types without quotas cost nothing**: Kafka records nothing for a quota type that has no quota configured
anywhere (a manager's ``quotasEnabled`` is false) and answers 0. The frontend (a proxy, or one serving only
quotaplane's own APIs with request quotas on) keeps the gateway's answer to ``GetEnabledQuotaTypes``, refreshed
every ``ENABLED_REFRESH_S`` in the background (``FrontendServer.enabled_quotas``), and skips the round trip
for such a type: a fleet without request quotas pays no request-time call per request (a telemetry push then
makes one gateway round trip, not two). Until the first answer, or while the gateway cannot answer,
every type counts as enabled (the calls are made, as without the cache). A quota set for a type that had none
is applied once the next refresh has seen it (within ``ENABLED_REFRESH_S`` of reaching the gateway), as a
broker applies a quota once its config cache has it. Names the
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

__all__ = [
    "ENABLED_REFRESH_S",
    "enabled",
    "fetch_cap",
    "record_producer_ids",
    "record_usage",
    "refresh_enabled_quotas",
    "request_throttle",
    "unrecord_usage",
]

#: How long a fetch cap (the quota's max value in one window) is reused before the gateway is asked again:
#: a quota change reaches fetch caps within this (plus its propagation), as it reaches a broker's config cache.
FETCH_CAP_TTL_S = 1.0
_MAX_CACHED_CAPS = 100_000


#: How often a frontend asks the gateway which quota types have quotas (see the module docstring).
ENABLED_REFRESH_S = 0.25


def _safe(state: ConnectionState) -> bool:
    return gateway_safe(state.client_id) and gateway_safe(state.user)


def enabled(server: FrontendServer, kind: str) -> bool:
    """Whether quota type ``kind`` (a field of ``EnabledQuotaTypes``) may have a quota: False only when the
    gateway said recently that none is configured."""
    types = server.enabled_quotas
    return types is None or getattr(types, kind)


async def refresh_enabled_quotas(server: FrontendServer) -> None:
    """Keep ``server.enabled_quotas`` current until cancelled."""
    request = quota_pb.EnabledQuotaTypesRequest()
    while True:
        try:
            server.enabled_quotas = await server.backend.quotas.GetEnabledQuotaTypes(
                request, timeout=server.backend.timeout_s
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            server.enabled_quotas = None  # unknown: every call is made
            server.note_backend_error("QuotaService.GetEnabledQuotaTypes", e)
        await asyncio.sleep(ENABLED_REFRESH_S)


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
    if not _safe(state) or not enabled(server, "request"):
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
    kind = "produce" if quota_type == quota_pb.PRODUCE else "fetch"
    if not _safe(state) or not enabled(server, kind):
        return 0
    item = _usage(state, quota_type, size, now_ms)
    return int(await _ask(server, "QuotaService.RecordUsageBatch", server.backend.usage_batcher, item, 0))


async def unrecord_usage(
    server: FrontendServer, state: ConnectionState, quota_type: int, size: int, now_ms: int
) -> None:
    """Kafka's ``unrecordQuotaSensor``: a throttled fetch's bytes were not sent, so they do not count."""
    if _safe(state) and enabled(server, "fetch"):
        item = _usage(state, quota_type, size, now_ms)
        await _ask(server, "QuotaService.UnrecordUsage", server.backend.unrecord_batcher, item, 0)


async def record_producer_ids(server: FrontendServer, state: ConnectionState, ids: list[int], now_ms: int) -> int:
    """KIP-936: each producer id of the request against the principal's ``producer_ids_rate``; the largest
    throttle (a new id beyond the rate throttles the request)."""
    if not ids or not gateway_safe(state.user) or not enabled(server, "producer_ids"):
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
    if not _safe(state) or not enabled(server, "fetch"):
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
