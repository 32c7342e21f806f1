"""What the proxy changes in the upstream's answers: broker addresses, and the API versions it offers.

**Addresses.** Clients must only ever see proxy addresses. The responses that carry broker addresses at the
versions the proxy offers are Metadata (brokers), FindCoordinator (the coordinator, or v4+ one per key) and
DescribeCluster (brokers): each is decoded with the core's codec, every (node id, host, port) is replaced
by the advertised proxy host and the node's proxy port, and the response is encoded again. A broker whose
node id has no proxy port is left out of Metadata / DescribeCluster (a coordinator on it is answered
COORDINATOR_NOT_AVAILABLE, so the client asks again later).

**Versions** (``offered_versions``): for each API the upstream supports, the range the proxy can carry:
- APIs the proxy decodes (the address carriers above, Produce, whose response gets the throttle time, and the
  topic mutations CreateTopics / DeleteTopics / CreatePartitions, charged to the controller mutation quota) are
  capped at the versions its codec reads, so no request or response it must read is ever beyond it;
- APIs whose newer versions carry addresses the proxy does not rewrite are capped below them: Fetch at v15
  (v16 adds NodeEndpoints), DescribeQuorum at v1; ShareFetch / ShareAcknowledge (KIP-932, NodeEndpoints from
  v0) are not offered;
- the APIs quotaplane answers itself (ApiVersions, SASL, KIP-714 telemetry, client quotas,
  ListClientMetricsResources) are offered at the proxy's versions whatever the upstream supports;
- everything else: the upstream's own range, forwarded untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from quotaplane.errors import Errors
from quotaplane.protocol import (
    ApiKey,
    DescribeClusterResponse,
    FindCoordinatorResponse,
    MetadataResponse,
    decode_response,
    encode_response,
    supported_versions,
)

from ._brokers import BrokerMap

__all__ = ["LOCAL_APIS", "REWRITTEN_APIS", "offered_versions", "rewrite_response"]

#: Answered by quotaplane itself, never forwarded.
LOCAL_APIS = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS,
        ApiKey.PUSH_TELEMETRY,
        ApiKey.LIST_CLIENT_METRICS_RESOURCES,
        ApiKey.DESCRIBE_CLIENT_QUOTAS,
        ApiKey.ALTER_CLIENT_QUOTAS,
    }
)
#: Forwarded, with broker addresses rewritten in the response.
REWRITTEN_APIS = frozenset({ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER})
#: Forwarded, but decoded by the proxy (so capped at the codec's versions): the topic mutations are charged to
#: the controller mutation quota, and a strict one may be answered in part by the proxy.
DECODED_APIS = REWRITTEN_APIS | {
    ApiKey.PRODUCE,
    ApiKey.DESCRIBE_CONFIGS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
    ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS,
    ApiKey.CREATE_PARTITIONS,
}
#: Newest version without broker addresses the proxy does not rewrite; -1: never offered.
_ADDRESS_CAPS = {ApiKey.FETCH: 15, 55: 1, 78: -1, 79: -1}


def offered_versions(upstream: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) the proxy offers clients, given the upstream's ApiVersions.

    >>> offered = offered_versions({0: (0, 11), 1: (0, 17), 3: (0, 13), 18: (0, 4), 19: (2, 7), 78: (0, 1)})
    >>> offered[0], offered[1], offered[3], offered[19], 78 in offered, offered[72]
    ((3, 9), (0, 15), (0, 12), (2, 7), False, (0, 0))
    """
    ours = supported_versions()
    out = {}
    for key, (lo, hi) in upstream.items():
        if key in LOCAL_APIS:
            continue
        if key in DECODED_APIS:
            mine = ours[key]
            lo, hi = max(lo, mine[0]), min(hi, mine[1])
        hi = min(hi, _ADDRESS_CAPS.get(key, hi))
        if lo <= hi:
            out[key] = (lo, hi)
    for key in LOCAL_APIS:
        out[key] = ours[key]
    return dict(sorted(out.items()))


def _brokers(id_field: str) -> Callable[[Any, Callable[[int], tuple[str, int] | None]], None]:
    """Rewrite a response's ``brokers`` list (each broker's id in ``id_field``): mapped addresses, and the
    brokers without a proxy port left out."""

    def rewrite(body: Any, address: Callable[[int], tuple[str, int] | None]) -> None:
        brokers = []
        for broker in body.brokers:
            mapped = address(getattr(broker, id_field))
            if mapped is not None:
                broker.host, broker.port = mapped
                brokers.append(broker)
        body.brokers = brokers

    return rewrite


def _coordinator(entry: Any, address: Callable[[int], tuple[str, int] | None]) -> None:
    if entry.error_code or entry.node_id < 0:
        return
    mapped = address(entry.node_id)
    if mapped is None:
        entry.error_code = Errors.COORDINATOR_NOT_AVAILABLE
        entry.node_id, entry.host, entry.port = -1, "", -1
    else:
        entry.host, entry.port = mapped


def _find_coordinator(body: Any, address: Callable[[int], tuple[str, int] | None]) -> None:
    if body.coordinators:
        for entry in body.coordinators:
            _coordinator(entry, address)
    else:
        _coordinator(body, address)


_REWRITES: dict[int, tuple[type, Callable[[Any, Callable[[int], tuple[str, int] | None]], None]]] = {
    ApiKey.METADATA: (MetadataResponse, _brokers("node_id")),
    ApiKey.FIND_COORDINATOR: (FindCoordinatorResponse, _find_coordinator),
    ApiKey.DESCRIBE_CLUSTER: (DescribeClusterResponse, _brokers("broker_id")),
}


def upstream_brokers(api_key: int, body: Any) -> list[tuple[int, str, int]]:
    """The (node id, host, port) an address-carrying response names, before rewriting."""
    if api_key == ApiKey.METADATA:
        return [(b.node_id, b.host, b.port) for b in body.brokers]
    if api_key == ApiKey.DESCRIBE_CLUSTER:
        return [(b.broker_id, b.host, b.port) for b in body.brokers]
    return []


def rewrite_response(
    api_key: int, api_version: int, frame: bytes, brokers: BrokerMap, advertised_host: str
) -> tuple[bytearray, list[int]]:
    """The upstream response with every broker address replaced (a frame without its size prefix, as it
    came), and the node ids the response taught ``brokers`` (new or moved)."""
    decoded = decode_response(api_key, api_version, frame)
    body = decoded.body
    learned = brokers.learn(upstream_brokers(api_key, body), complete=api_key != ApiKey.FIND_COORDINATOR)

    def address(node_id: int) -> tuple[str, int] | None:
        port = brokers.proxy_port(node_id)
        return None if port is None else (advertised_host, port)

    _REWRITES[api_key][1](body, address)
    return bytearray(memoryview(encode_response(api_key, api_version, decoded.correlation_id, body))[4:]), learned
