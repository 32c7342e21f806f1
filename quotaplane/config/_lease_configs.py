"""Leased budgets' settings as an image holds them (issue 19: ``quotaplane.lease.quota.types``, ``.lease.ms``).

Both are cluster-wide BROKER configs (resource ``""``) in the log, so every gateway and every shard reads the
same ones at the same offset: a gateway decides an item locally only if the image it resolved the item at says
its quota type is leased, and the owning shard sizes the lease's life from the same image. Node overrides are
accepted by the config checks (as for every broker config) and ignored here: a lease is fleet-wide.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._binding import effective_broker_config
from ._dynamic_configs import (
    BROKER_CONFIGS,
    LEASE_MS_CONFIG,
    LEASE_QUOTA_TYPES_CONFIG,
    parse_config_value,
    parse_lease_quota_types,
)
from ._image import ConfigImage

__all__ = ["LeaseSettings", "lease_settings"]


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """Which client quota types are leased (their ``QuotaType`` names) and how long a lease lives (ms)."""

    quota_types: frozenset[str]
    lease_ms: int

    @property
    def enabled(self) -> bool:
        return bool(self.quota_types)


def lease_settings(image: ConfigImage) -> LeaseSettings:
    """The cluster-wide lease settings of ``image`` (defaults: nothing leased, 1000 ms)."""
    types = effective_broker_config(image, LEASE_QUOTA_TYPES_CONFIG, None)
    lease_ms = effective_broker_config(image, LEASE_MS_CONFIG, None)
    spec = BROKER_CONFIGS[LEASE_MS_CONFIG]
    return LeaseSettings(
        quota_types=parse_lease_quota_types(types) if types else frozenset(),
        lease_ms=int(parse_config_value(spec, lease_ms if lease_ms is not None else str(spec.default))),  # type: ignore[call-overload]
    )
