"""Resolving a client's subscription: the union of matching resources and Kafka's subscription id.

Kafka's ``ClientMetricsManager.createClientInstance`` walks its subscriptions (a ConcurrentHashMap),
adds the prefixes of every matching one to a fresh ``HashSet``, takes the smallest push interval
(starting from the 5-minute default) and collapses the set to ``["*"]`` if any match subscribes to
all. The subscription id is ``CRC32C(set.toString() + interval) XOR clientInstanceId.hashCode()``.
We reproduce every step, including Java's iteration orders, so the id is the one a Kafka broker with
the same subscriptions would hand out.

>>> from quotaplane.kafka_uuid import Uuid
>>> compute_subscription_id(["org.apache.kafka.producer."], 30_000, Uuid.from_parts(1, 2))
465528063
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import crc32c

from ..kafka_uuid import Uuid
from ._configs import ALL_SUBSCRIBED_METRICS, INTERVAL_MS_DEFAULT, SubscriptionInfo
from ._java_collections import JavaConcurrentHashMapOrder, java_hash_set_order, java_hash_set_order_exact

__all__ = [
    "ResolvedSubscription",
    "Subscriptions",
    "compute_subscription_id",
    "resolve_subscription",
    "subscription_crc",
]


def _to_int32(value: int) -> int:
    value &= 0xFFFF_FFFF
    return value - (1 << 32) if value & 0x8000_0000 else value


def subscription_crc(metrics_in_java_order: Iterable[str], push_interval_ms: int) -> int:
    """``(int) CRC32C(metrics.toString() + pushIntervalMs)`` over the set's Java iteration order."""
    text = "[" + ", ".join(metrics_in_java_order) + "]" + str(push_interval_ms)
    # Java's getBytes(UTF_8) writes '?' for an unpaired surrogate; so does errors="replace".
    return _to_int32(crc32c.crc32c(text.encode("utf-8", "replace")))


def compute_subscription_id(metrics: Iterable[str], push_interval_ms: int, client_instance_id: Uuid) -> int:
    """Kafka's ``computeSubscriptionId``, a signed 32-bit int.

    ``metrics`` are the client's subscribed prefixes in the order Kafka adds them to its
    ``new HashSet<>()`` (for one subscription: that subscription's set order; duplicates ignored); the
    set's own iteration order is computed here. Pass ``["*"]`` for an all-metrics subscription.
    """
    crc = subscription_crc(java_hash_set_order(metrics), push_interval_ms)
    return _to_int32(crc ^ client_instance_id.java_hash_code())


@dataclass(frozen=True, slots=True)
class ResolvedSubscription:
    """What every client matching the same subscriptions shares: its metrics, interval and id CRC.

    ``metrics`` are in the order Kafka's response lists them. The per-client subscription id is
    ``crc ^ client_instance_id.java_hash_code()``.
    """

    metrics: tuple[str, ...]
    push_interval_ms: int
    crc: int
    #: False when a Java tree bin was involved and Kafka's id may differ (see _java_collections).
    kafka_exact: bool = True

    def subscription_id(self, client_instance_id: Uuid) -> int:
        return _to_int32(self.crc ^ client_instance_id.java_hash_code())


def resolve_subscription(
    subscriptions_in_map_order: Iterable[SubscriptionInfo],
    attributes: Mapping[str, str | None],
    *,
    map_order_exact: bool = True,
) -> ResolvedSubscription:
    """Kafka's ``createClientInstance`` minus the instance: which subscriptions match, and their union.

    ``subscriptions_in_map_order`` must come in the order Kafka's subscription map iterates (see
    ``JavaConcurrentHashMapOrder``); that order decides insertion order into the client's set.
    """
    matched = [info for info in subscriptions_in_map_order if info.is_match(attributes)]
    return _resolve_matched(matched, map_order_exact=map_order_exact)


def _resolve_matched(
    matched_in_map_order: Iterable[SubscriptionInfo], *, map_order_exact: bool
) -> ResolvedSubscription:
    """The union of subscriptions already known to match, in Kafka's map order."""
    push_interval_ms = INTERVAL_MS_DEFAULT
    inserted: list[str] = []
    all_metrics = False
    exact = map_order_exact
    for info in matched_in_map_order:
        all_metrics = all_metrics or info.subscribes_all
        inserted.extend(info.metrics_java_order)
        push_interval_ms = min(push_interval_ms, info.interval_ms)
        exact = exact and info.metrics_java_order_exact
    if all_metrics:
        metrics: tuple[str, ...] = (ALL_SUBSCRIBED_METRICS,)
    else:
        order, set_exact = java_hash_set_order_exact(inserted)
        metrics, exact = tuple(order), exact and set_exact
    return ResolvedSubscription(metrics, push_interval_ms, subscription_crc(metrics, push_interval_ms), exact)


class Subscriptions:
    """The broker's client-metrics subscriptions by name, visited in Kafka's map order.

    ``version`` goes up on every change, as Kafka's ``subscriptionUpdateVersion``: a client instance
    resolved at an older version is re-resolved on its next request. Resolutions are shared by every
    client that matches the same subscriptions, so a million clients cost one tuple of metrics.
    """

    __slots__ = ("_by_name", "_order", "_resolved", "_resolved_version", "version")

    def __init__(self) -> None:
        self._by_name: dict[str, SubscriptionInfo] = {}
        self._order = JavaConcurrentHashMapOrder()
        self._resolved: dict[tuple[str, ...], ResolvedSubscription] = {}
        self._resolved_version = 0
        self.version = 0

    def put(self, info: SubscriptionInfo) -> None:
        self._by_name[info.name] = info
        self._order.put(info.name)
        self.version += 1

    def remove(self, name: str) -> bool:
        """Remove a subscription; removing an unknown name changes nothing (and no version bump)."""
        if self._by_name.pop(name, None) is None:
            return False
        self._order.remove(name)
        self.version += 1
        return True

    def get(self, name: str) -> SubscriptionInfo | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return self._order.order()

    def __len__(self) -> int:
        return len(self._by_name)

    def __iter__(self) -> Iterator[SubscriptionInfo]:
        """In Kafka's iteration order."""
        by_name = self._by_name
        return (by_name[name] for name in self._order.order())

    def resolve(self, attributes: Mapping[str, str | None]) -> ResolvedSubscription:
        """The resolved subscription for a client with these attributes, at the current version."""
        if self._resolved_version != self.version:
            self._resolved.clear()
            self._resolved_version = self.version
        matched = [info for info in self if info.is_match(attributes)]
        key = tuple(info.name for info in matched)
        resolved = self._resolved.get(key)
        if resolved is None:
            # Already matched: resolving must not match again (against no attributes nothing with a
            # selector would).
            resolved = _resolve_matched(matched, map_order_exact=self._order.exact)
            self._resolved[key] = resolved
        return resolved
