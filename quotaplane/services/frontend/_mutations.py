"""Proxy mode: CreateTopics, DeleteTopics and CreatePartitions charged to the controller mutation quota (KIP-599),
as Kafka's controller charges them (ControllerApis with ReplicationControlManager; the quota is the gateway's
``QuotaService.RecordMutations``: one budget across the fleet).

**What a topic costs** (``permits``): the partitions it creates or deletes, counted only when Kafka's controller
would get as far as the quota (its earlier checks fail a topic without charging it):

- CreateTopics: ``num_partitions``, or the number of manual ``assignments``; nothing for a duplicate name, an
  illegal name, a topic that already exists, or an invalid partition / replication-factor combination.
  ``num_partitions = -1`` (the broker's default) is charged as 1, Kafka's default ``num.partitions``: the
  controller charges the resolved count, and the proxy cannot read the upstream's setting before forwarding.
- DeleteTopics: the topic's current partition count; nothing for a duplicate, a topic named by both name and id
  or by neither, or one that does not exist.
- CreatePartitions: ``count`` minus the current partition count; nothing for a duplicate, an unknown topic, a
  count that is not an increase, or assignments that do not match the increase.

The current partition counts (and which topics exist) come from one Metadata request to the upstream on the
client's own upstream connection, before the request is forwarded (``allow_auto_topic_creation`` false, so the
lookup never creates a topic). Checks the proxy cannot see (configs, replica placement, authorization, name
collisions) are the upstream's: such a topic is charged as the controller would charge a valid one. Validate-only
requests are charged too: Kafka's KRaft controller records the quota before it drops a validate-only request's
records (only the old ZooKeeper path skipped them).

**Strict or permissive** by version, as Kafka picks (``quotaplane.quota.STRICT_SINCE_VERSION``): CreateTopics v6+,
DeleteTopics v5+ and CreatePartitions v3+ are strict. One quota per request, each charged topic recorded in the
request's order (Kafka's CreatePartitions and DeleteTopics go in hash order, which no client can rely on):

- **strict**: a topic the quota refuses is answered THROTTLING_QUOTA_EXCEEDED (89) by the proxy and is *not*
  forwarded: the request is re-encoded without it (not forwarded at all when none remains), and the upstream's
  answer for the others is merged with the proxy's, in the request's order. **The decision is made before
  forwarding**, on the critical path: unlike a produce, a topic created or deleted upstream cannot be taken back,
  so the upstream must never see a topic the quota refuses.
- **permissive**: everything is forwarded, the charge is recorded while the upstream works.

Either way the response's ``throttle_time_ms`` is the quota's throttle time (then ``max`` with the request quota
and the connection muted, as for every forwarded request). A gateway that cannot be reached fails open: the topics
are accepted, unthrottled. A malformed request closes the connection (``ProtocolError``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quotaplane.errors import Errors
from quotaplane.kafka_uuid import ZERO_UUID
from quotaplane.protocol import (
    ApiKey,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    MetadataRequest,
    ProtocolError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from quotaplane.protocol.frames import peek_request
from quotaplane.quota import STRICT_SINCE_VERSION
from quotaplane.services.proxy import UpstreamClosedError
from quotaplane.v1 import quota_pb2 as quota_pb

from ._quotas import _ask, _safe, enabled

if TYPE_CHECKING:
    from ._state import ConnectionState
    from .server import FrontendServer

__all__ = ["MUTATION_APIS", "Exchange", "forward_mutation"]

#: Sends one request frame (without its size) upstream and returns the answer; raises UpstreamClosedError.
Exchange = Callable[[bytes, int], Awaitable[bytes]]

#: Kafka's ``Errors.THROTTLING_QUOTA_EXCEEDED.message``, the message the controller answers a refused topic with.
THROTTLED_MESSAGE = "The throttling quota has been exceeded."
#: Kafka's default ``num.partitions``: what ``num_partitions = -1`` is charged as.
DEFAULT_NUM_PARTITIONS = 1
#: Kafka's ``Topic.validate``: legal characters, at most 249 of them, and not "." or "..".
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
#: Metadata v4 has ``allow_auto_topic_creation``, v10 looks topics up by id.
_METADATA_NO_AUTO_CREATE, _METADATA_BY_ID, _METADATA_MAX = 4, 10, 12


@dataclass(eq=False)
class _Topic:
    """One topic of a mutation request: how the request names it, what the upstream has, and its charge."""

    entry: Any
    name: str | None
    topic_id: bytes = ZERO_UUID
    #: (name, id, partition count) upstream; None: no such topic (or not looked up)
    existing: tuple[str, bytes, int] | None = None
    #: the partitions it creates or deletes; None: Kafka fails it before the quota
    permits: int | None = None

    @property
    def key(self) -> object:
        return self.name if self.name is not None else self.topic_id


@dataclass(frozen=True)
class _Api:
    """One mutation API: its name (Kafka's, for ``STRICT_SINCE_VERSION``), results field and response class."""

    name: str
    results: str
    response: Any


_APIS = {
    ApiKey.CREATE_TOPICS: _Api("CreateTopics", "topics", CreateTopicsResponse),
    ApiKey.DELETE_TOPICS: _Api("DeleteTopics", "responses", DeleteTopicsResponse),
    ApiKey.CREATE_PARTITIONS: _Api("CreatePartitions", "results", CreatePartitionsResponse),
}
#: The APIs charged to the controller mutation quota.
MUTATION_APIS = frozenset(_APIS)


def _topics_field(api_key: int, api_version: int) -> str:
    return "topic_names" if api_key == ApiKey.DELETE_TOPICS and api_version < 6 else "topics"


def _topics(api_key: int, api_version: int, body: Any) -> list[_Topic]:
    if api_key == ApiKey.DELETE_TOPICS and api_version >= 6:
        return [_Topic(t, t.name, t.topic_id) for t in body.topics]
    if api_key == ApiKey.DELETE_TOPICS:
        return [_Topic(name, name) for name in body.topic_names]
    return [_Topic(t, t.name) for t in body.topics]


def _candidates(api_key: int, topics: list[_Topic]) -> list[_Topic]:
    """The topics Kafka takes as far as the quota, as far as the request alone tells: named once (duplicates
    are answered INVALID_REQUEST), by a name or an id but not both (DeleteTopics v6); for CreateTopics, a legal
    name (Kafka's ``Topic.validate``) and a valid partition count (its permits are set here)."""
    named = [t for t in topics if (t.name is None) != (t.topic_id == ZERO_UUID)]
    seen: dict[object, int] = {}
    for t in named:
        seen[t.key] = seen.get(t.key, 0) + 1
    unique = [t for t in named if seen[t.key] == 1]
    if api_key != ApiKey.CREATE_TOPICS:
        return unique
    for t in unique:
        if _LEGAL_TOPIC.fullmatch(t.name or "") and t.name not in (".", ".."):
            t.permits = _create_topic_permits(t.entry)
    return [t for t in unique if t.permits is not None]


def _create_topic_permits(topic: Any) -> int | None:
    """ReplicationControlManager.createTopic's partition count, or None where it fails before the quota."""
    if topic.assignments:
        if topic.replication_factor != -1 or topic.num_partitions != -1:
            return None
        if sorted(a.partition_index for a in topic.assignments) != list(range(len(topic.assignments))):
            return None
        return len(topic.assignments)
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        return None
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        return None
    return DEFAULT_NUM_PARTITIONS if topic.num_partitions == -1 else topic.num_partitions


def _charge(api_key: int, topic: _Topic) -> int | None:
    """A candidate's permits once the upstream's topics are known."""
    if api_key == ApiKey.CREATE_TOPICS:
        return topic.permits if topic.existing is None else None
    if topic.existing is None:
        return None
    if api_key == ApiKey.DELETE_TOPICS:
        return topic.existing[2]
    additional = topic.entry.count - topic.existing[2]
    assignments = topic.entry.assignments
    return additional if additional > 0 and (assignments is None or len(assignments) == additional) else None


async def _look_up(
    server: FrontendServer, state: ConnectionState, topics: list[_Topic], correlation_id: int, exchange: Exchange
) -> None:
    """Set ``existing`` on the topics the upstream has, from one Metadata request that creates nothing."""
    assert server.proxy is not None
    version = min(server.proxy.versions.get(ApiKey.METADATA, (0, -1))[1], _METADATA_MAX)
    if not topics or version < _METADATA_NO_AUTO_CREATE:
        return
    Wanted = MetadataRequest.MetadataRequestTopic
    wanted = [Wanted(name=t.name) for t in topics if t.name is not None]
    if version >= _METADATA_BY_ID:
        wanted += [Wanted(topic_id=t.topic_id, name=None) for t in topics if t.name is None]
    request = MetadataRequest(topics=wanted, allow_auto_topic_creation=False)
    frame = encode_request(ApiKey.METADATA, version, correlation_id, request, client_id=state.client_id)
    answer = await exchange(bytes(memoryview(frame)[4:]), correlation_id)
    try:
        metadata = decode_response(ApiKey.METADATA, version, answer).body
    except ProtocolError as e:
        raise UpstreamClosedError(f"malformed Metadata response from the upstream: {e}") from None
    found: dict[object, tuple[str, bytes, int]] = {}
    for t in metadata.topics:
        if t.error_code == Errors.NONE and t.name:
            found[t.name] = (t.name, t.topic_id, len(t.partitions))
            if t.topic_id != ZERO_UUID:
                found[t.topic_id] = found[t.name]
    for t in topics:
        t.existing = found.get(t.key)


async def _record(server: FrontendServer, state: ConnectionState, strict: bool, permits: list[int], now_ms: int) -> Any:
    """The gateway's MutationResult (fails open: every topic accepted, no throttle)."""
    item = quota_pb.MutationItem(
        user=state.user,
        client_id=state.client_id,
        mode=quota_pb.STRICT if strict else quota_pb.PERMISSIVE,
        permits=[float(p) for p in permits],
        now_ms=now_ms,
    )
    default = quota_pb.MutationResult(accepted=[True] * len(permits), throttle_time_ms=0)
    return await _ask(server, "QuotaService.RecordMutations", server.backend.mutation_batcher, item, default)


def _refused(api_key: int, topic: _Topic) -> Any:
    """The controller's answer for a topic the strict quota refused."""
    error = {"error_code": Errors.THROTTLING_QUOTA_EXCEEDED, "error_message": THROTTLED_MESSAGE}
    if api_key == ApiKey.CREATE_TOPICS:
        return CreateTopicsResponse.CreatableTopicResult(name=topic.name, **error)
    if api_key == ApiKey.CREATE_PARTITIONS:
        return CreatePartitionsResponse.CreatePartitionsTopicResult(name=topic.name, **error)
    assert topic.existing is not None  # only existing topics are charged
    name, topic_id, _ = topic.existing
    return DeleteTopicsResponse.DeletableTopicResult(name=name, topic_id=topic_id, **error)


def _answers(topic: _Topic, result: Any) -> bool:
    if topic.name is not None:
        return bool(result.name == topic.name)
    return bool(getattr(result, "topic_id", None) == topic.topic_id)


def _merge(api_key: int, topics: list[_Topic], refused: set[int], upstream: Sequence[Any]) -> list[Any]:
    """The results in the request's order: the proxy's for the refused topics, the upstream's for the others
    (any more the upstream gives, e.g. one answer for a duplicated name, follow in its order)."""
    left = list(upstream)
    merged = []
    for index, topic in enumerate(topics):
        if index in refused:
            merged.append(_refused(api_key, topic))
            continue
        match = next((r for r in left if _answers(topic, r)), None)
        if match is not None:
            left.remove(match)
            merged.append(match)
    return merged + left


async def forward_mutation(
    server: FrontendServer, state: ConnectionState, frame: bytes, now_ms: int, exchange: Exchange
) -> tuple[bytearray, int]:
    """Charge a CreateTopics / DeleteTopics / CreatePartitions request to the controller mutation quota and forward
    what the quota lets through; (the response without its size prefix, the quota's throttle time)."""
    api_key, api_version, correlation_id = peek_request(frame)
    api = _APIS[api_key]
    try:
        request = decode_request(frame)
    except ProtocolError as e:
        raise ProtocolError(f"malformed {api.name} v{api_version} request: {e}") from None

    async def forward(request_frame: bytes) -> bytearray:
        answer = bytearray(await exchange(request_frame, correlation_id))
        server.stats.forwarded_requests += 1
        return answer

    topics = _topics(api_key, api_version, request.body)
    metered = _safe(state) and enabled(server, "controller_mutation")  # no quota anywhere: Kafka records nothing
    candidates = _candidates(api_key, topics) if metered else []
    await _look_up(server, state, candidates, correlation_id, exchange)
    for topic in topics:
        topic.permits = _charge(api_key, topic) if topic in candidates else None
    charged = [i for i, t in enumerate(topics) if t.permits is not None]
    if not charged:
        return await forward(frame), 0
    strict = api_version >= STRICT_SINCE_VERSION[api.name]
    decision = _record(server, state, strict, [topics[i].permits or 0 for i in charged], now_ms)
    if not strict:  # permissive: recorded while the upstream works
        pending = asyncio.ensure_future(decision)
        try:
            response = await forward(frame)
        except BaseException:
            pending.cancel()
            raise
        return response, int((await state.wait(pending)).throttle_time_ms)
    result = await state.wait(decision)
    throttle_ms = int(result.throttle_time_ms)
    refused = {charged[j] for j, accepted in enumerate(result.accepted) if not accepted}
    if not refused:
        return await forward(frame), throttle_ms
    kept = [t.entry for i, t in enumerate(topics) if i not in refused]
    upstream: list[Any] = []
    if kept:  # the request without the refused topics
        setattr(request.body, _topics_field(api_key, api_version), kept)
        header = request.header
        answer = await forward(
            bytes(encode_request(api_key, api_version, correlation_id, request.body, client_id=header.client_id))[4:]
        )
        try:
            upstream = getattr(decode_response(api_key, api_version, answer).body, api.results)
        except ProtocolError as e:
            raise UpstreamClosedError(f"malformed {api.name} response from the upstream: {e}") from None
    response = api.response(throttle_time_ms=min(throttle_ms, 2**31 - 1))
    setattr(response, api.results, _merge(api_key, topics, refused, upstream))
    return bytearray(memoryview(encode_response(api_key, api_version, correlation_id, response))[4:]), throttle_ms
