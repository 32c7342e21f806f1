"""The fleet view's data: one scrape of the metrics endpoint turned into tenant rows (usage against quota).

Pure (text in, rows out), so it is tested on real exposition text without a cluster. A row is one quota
entity's sensor for one quota type: Kafka names a sensor by its metric tags (``user``, ``client-id``), which
are those of the quota that applies (``user`` alone for a user quota, ``client-id`` alone for a client-id
quota, both for a ``<user, client-id>`` quota), so a row *is* a tenant as Kafka's quota managers see it.
The usage is Kafka's own usage sensor (``byte-rate`` for Produce and Fetch, ``request-time``, a percentage,
for Request), the quota is KIP-786's ``quota-value`` series of the same tags when the endpoint exposes it,
else what the quota ``lookup`` (the admin API's DescribeClientQuotas, resolved by Kafka's precedence) says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from quotaplane.quota import DEFAULT as DEFAULT_ENTITY
from quotaplane.quota import ClientQuotaEntity, ClientQuotaType, DefaultQuotaCallback
from quotaplane.services.metrics import prometheus_name

__all__ = [
    "QUOTA_KEYS",
    "QUOTA_TYPES",
    "SORTS",
    "UNLIMITED",
    "QuotaLookup",
    "QuotaType",
    "Scrape",
    "TenantRow",
    "missing_quota_values",
    "parse_scrape",
    "quota_lookup",
    "sort_rows",
    "tenant_rows",
]

#: Kafka's ``Long.MAX_VALUE`` as a double: the quota-value of an entity no quota applies to.
UNLIMITED = float(2**63 - 1)


@dataclass(frozen=True)
class QuotaType:
    """One quota type the view shows: Kafka's group, its usage metric, the quota key setting its bound."""

    label: str  # as the view prints it
    group: str  # Kafka's metric group
    usage: str  # the usage sensor's metric name in that group
    quota_key: str  # the client-quota key (kafka-configs.sh --add-config)
    unit: str  # "B/s" or "%"

    @property
    def usage_series(self) -> str:
        return prometheus_name(self.usage, self.group)

    @property
    def quota_series(self) -> str:
        return prometheus_name("quota-value", self.group)

    @property
    def throttle_series(self) -> str:
        return prometheus_name("throttle-time", self.group)


QUOTA_TYPES = (
    QuotaType("produce", "Produce", "byte-rate", "producer_byte_rate", "B/s"),
    QuotaType("fetch", "Fetch", "byte-rate", "consumer_byte_rate", "B/s"),
    QuotaType("request", "Request", "request-time", "request_percentage", "%"),
)
#: quota key -> the view's label of its quota type
QUOTA_KEYS = {t.quota_key: t.label for t in QUOTA_TYPES}

#: The sort orders ``s`` cycles through, the first the default.
SORTS = ("usage/quota", "rate", "throttle", "tenant")

#: ``lookup(type label, user tag, client-id tag)``: the bound of a sensor with these tags, None for none.
QuotaLookup = Callable[[str, str, str], float | None]

#: One scrape: series name -> ``(user tag, client-id tag)`` -> value (entity series only).
Scrape = dict[str, dict[tuple[str, str], float]]


@dataclass(frozen=True)
class TenantRow:
    """One sensor: a quota type and an entity's tags, its usage now, its bound, its throttle time now."""

    quota_type: str
    user: str
    client_id: str
    rate: float
    quota: float | None  # None: no quota applies (or none is known)
    quota_source: str | None  # "metric" (quota-value series), "admin" (DescribeClientQuotas) or None
    throttle_ms: float
    unit: str

    @property
    def ratio(self) -> float | None:
        """Usage over quota (1.0: at the quota); None without a quota. A zero quota with usage is infinite."""
        if self.quota is None:
            return None
        if self.quota == 0:
            return math.inf if self.rate > 0 else 0.0
        return self.rate / self.quota


def parse_scrape(text: str) -> Scrape:
    """The entity series of the view's metrics on one exposition page (Prometheus text format).

    An empty label is an absent one for Prometheus: ``user=""`` and no ``user`` label are the same tag.
    A ``ValueError`` (prometheus_client's) for a page that is not exposition text.
    """
    wanted = {name for t in QUOTA_TYPES for name in (t.usage_series, t.quota_series, t.throttle_series)}
    scrape: Scrape = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in wanted or not math.isfinite(sample.value):
                continue
            user, client_id = sample.labels.get("user", ""), sample.labels.get("client_id", "")
            if not user and not client_id:
                continue
            scrape.setdefault(sample.name, {})[(user, client_id)] = float(sample.value)
    return scrape


def missing_quota_values(scrape: Scrape) -> bool:
    """True if a sensor with usage has no quota-value series (KIP-786's switch is off): a lookup is needed."""
    return any(key not in scrape.get(t.quota_series, {}) for t in QUOTA_TYPES for key in scrape.get(t.usage_series, {}))


def tenant_rows(scrape: Scrape, lookup: QuotaLookup | None = None) -> list[TenantRow]:
    """Every sensor with usage or a throttle time on the page, as rows (unsorted).

    The bound is the sensor's quota-value series (``Long.MAX_VALUE`` there means no quota), else ``lookup``'s.
    """
    rows = []
    for t in QUOTA_TYPES:
        usage = scrape.get(t.usage_series, {})
        values = scrape.get(t.quota_series, {})
        throttles = scrape.get(t.throttle_series, {})
        for user, client_id in sorted(usage.keys() | throttles.keys()):
            key = (user, client_id)
            quota: float | None
            if key in values:
                quota, source = (None, None) if values[key] >= UNLIMITED else (values[key], "metric")
            else:
                quota = lookup(t.label, user, client_id) if lookup is not None else None
                source = "admin" if quota is not None else None
            rows.append(
                TenantRow(t.label, user, client_id, usage.get(key, 0.0), quota, source, throttles.get(key, 0.0), t.unit)
            )
    return rows


def sort_rows(rows: Iterable[TenantRow], sort: str) -> list[TenantRow]:
    """``rows`` in one of :data:`SORTS`: the largest first (ties by tenant; rows without a quota after those
    with one under ``usage/quota``), ``tenant`` alphabetically."""
    keys: dict[str, Callable[[TenantRow], tuple]] = {
        "usage/quota": lambda r: (r.ratio is None, -(r.ratio or 0.0), -r.rate),
        "rate": lambda r: (-r.rate,),
        "throttle": lambda r: (-r.throttle_ms, -r.rate),
        "tenant": lambda r: (),
    }
    if sort not in keys:
        raise ValueError(f"unknown sort {sort!r}; one of {', '.join(SORTS)}")
    key = keys[sort]
    return sorted(rows, key=lambda r: (*key(r), r.user, r.client_id, r.quota_type))


def quota_lookup(entries: Iterable[tuple[Mapping[str, str | None], Mapping[str, float]]]) -> QuotaLookup:
    """A lookup from DescribeClientQuotas' entries (``{entity type: name or None for <default>}``, ``{key:
    value}``), resolving a sensor's tags by Kafka's precedence (the default callback's ``limit_for_tags``:
    ``U/C, U/<default>, <default>/C, <default>/<default>``, ``U, <default>``, ``C, <default>``)."""
    callbacks = {t.label: DefaultQuotaCallback() for t in QUOTA_TYPES}
    kinds = {t.quota_key: (t.label, ClientQuotaType(t.group)) for t in QUOTA_TYPES}
    for entity, values in entries:
        if set(entity) - {"user", "client-id"} or not entity:
            continue  # ip quotas are connection-rate quotas: not a row of this view
        parts = {kind: DEFAULT_ENTITY if name is None else name for kind, name in entity.items()}
        quota_entity = ClientQuotaEntity(user=parts.get("user"), client_id=parts.get("client-id"))
        for key, value in values.items():
            if key in kinds:
                label, kind = kinds[key]
                callbacks[label].update_quota(kind, quota_entity, value)

    def lookup(quota_type: str, user: str, client_id: str) -> float | None:
        callback = callbacks.get(quota_type)
        return None if callback is None else callback.limit_for_tags(user, client_id)

    return lookup
