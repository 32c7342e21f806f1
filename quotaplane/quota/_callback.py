"""The quota plug-in point (Kafka's ``ClientQuotaCallback``) and the default callback.

The default callback implements Kafka's two-stage resolution. **Metric tags** decide which clients
share one sensor (one budget); the **quota limit** is then looked up from those tags:

=====  =========================  ==================  ====================================
level  entity configured          metric tags (U, C)  limit lookup from the tags
=====  =========================  ==================  ====================================
1      ``U / C``                  ``(U, C)``          ``U/C, U/<def>, <def>/C, <def>/<def>``
2      ``U / <default>``          ``(U, C)``          same
3      ``U``                      ``(U, "")``         ``U, <def>``
4      ``<default> / C``          ``(U, C)``          ``U/C, U/<def>, <def>/C, <def>/<def>``
5      ``<default> / <default>``  ``(U, C)``          same
6      ``<default>`` user         ``(U, "")``         ``U, <def>``
7, 8   ``C``, ``<default>`` C     ``("", C)``         ``C, <def>``
=====  =========================  ==================  ====================================

When only one kind of entity is configured (client-id only, user only, or user/client-id only) the
tags are fixed and the ladder is skipped: Kafka's fast paths, kept exactly, since they decide which
sensor a client shares. A custom callback turns the fast paths off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol, runtime_checkable

from ._types import DEFAULT, ClientQuotaEntity, ClientQuotaType, EntityName, sanitize

__all__ = [
    "CLIENT_ID_QUOTA_ENABLED",
    "CLIENT_ID_TAG",
    "CUSTOM_QUOTAS",
    "NO_QUOTAS",
    "USER_CLIENT_ID_QUOTA_ENABLED",
    "USER_QUOTA_ENABLED",
    "USER_TAG",
    "ClientQuotaCallback",
    "DefaultQuotaCallback",
]

USER_TAG: Final = "user"
CLIENT_ID_TAG: Final = "client-id"

# Kafka's quotaTypesEnabled bitmask.
NO_QUOTAS: Final = 0
CLIENT_ID_QUOTA_ENABLED: Final = 1
USER_QUOTA_ENABLED: Final = 2
USER_CLIENT_ID_QUOTA_ENABLED: Final = 4
CUSTOM_QUOTAS: Final = 8  # no metric-update optimizations with custom quotas

_NAMED: Final = object()  # in the ladder: "the request's own user / client id"

# (user component, client-id component, tags keep the client id?) for levels 1-6, in order.
_TAG_LADDER: Final = (
    (_NAMED, _NAMED, True),
    (_NAMED, DEFAULT, True),
    (_NAMED, None, False),
    (DEFAULT, _NAMED, True),
    (DEFAULT, DEFAULT, True),
    (DEFAULT, None, False),
)

EntityKey = tuple[EntityName, EntityName]


@runtime_checkable
class ClientQuotaCallback(Protocol):
    """Customizes how clients share quotas and what their limits are.

    Costs, as Kafka states them: ``quota_metric_tags`` runs on every recording that is not cached
    (a custom callback is never cached), ``quota_reset_required`` on every recording and must be a
    cheap flag, ``quota_limit`` when a sensor is created and after each quota or metadata change.
    """

    def quota_metric_tags(self, quota_type: ClientQuotaType, user: str, client_id: str) -> dict[str, str]:
        """Tags naming the sensor this request records into; clients with equal tags share a quota."""
        ...

    def quota_limit(self, quota_type: ClientQuotaType, metric_tags: Mapping[str, str]) -> float | None:
        """The bound for a sensor with these tags, or None if no quota applies to them."""
        ...

    def update_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity, new_value: float) -> None: ...

    def remove_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity) -> None: ...

    def quota_reset_required(self, quota_type: ClientQuotaType) -> bool:
        """True if limits may have changed outside update/remove since the last call."""
        ...

    def update_cluster_metadata(self, cluster: Any) -> bool:
        """Cluster metadata changed; True if quota limits may have changed with it."""
        ...

    def close(self) -> None: ...


class DefaultQuotaCallback:
    """Kafka's built-in callback: quotas per user, client id and ``<user, client-id>`` with defaults.

    It also keeps ``quota_types_enabled``: the bit of each entity kind that has at least one quota.
    Kafka 4.x reference-counts entities per kind, so removing the last quota of a kind clears its
    bit and clients return to the single-level fast path.
    """

    def __init__(self) -> None:
        self._quotas: dict[EntityKey, float] = {}
        self._entities_per_type: dict[int, int] = {}
        self.quota_types_enabled = NO_QUOTAS

    # --- configuration ---------------------------------------------------------------------------
    def update_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity, new_value: float) -> None:
        key = entity.key
        if key not in self._quotas:
            self._count(key, +1)
        self._quotas[key] = float(new_value)

    def has_quota(self, entity: ClientQuotaEntity) -> bool:
        """Whether ``entity`` has a quota now (changing its bound then changes no client's metric tags)."""
        return entity.key in self._quotas

    def remove_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity) -> None:
        key = entity.key
        if self._quotas.pop(key, None) is not None:
            self._count(key, -1)

    def _count(self, key: EntityKey, delta: int) -> None:
        user, client_id = key
        if user is not None and client_id is not None:
            kind = USER_CLIENT_ID_QUOTA_ENABLED
        elif user is not None:
            kind = USER_QUOTA_ENABLED
        else:
            kind = CLIENT_ID_QUOTA_ENABLED
        count = self._entities_per_type.get(kind, 0) + delta
        self._entities_per_type[kind] = count
        if count > 0:
            self.quota_types_enabled |= kind
        else:
            self.quota_types_enabled &= ~kind

    def configured(self) -> dict[EntityKey, float]:
        """The configured quotas by (sanitized user, client id) key; read-only view for callers."""
        return dict(self._quotas)

    # --- stage 1: metric tags ----------------------------------------------------------------------
    def quota_metric_tags(self, quota_type: ClientQuotaType, user: str, client_id: str) -> dict[str, str]:
        user_tag, client_tag = self.metric_tags(sanitize(user), client_id)
        return {USER_TAG: user_tag, CLIENT_ID_TAG: client_tag}

    def metric_tags(self, sanitized_user: str, client_id: str) -> tuple[str, str]:
        """``(user tag, client-id tag)`` for a request, from the table in the module docstring."""
        enabled = self.quota_types_enabled
        if enabled in (NO_QUOTAS, CLIENT_ID_QUOTA_ENABLED):
            return ("", client_id)
        if enabled == USER_QUOTA_ENABLED:
            return (sanitized_user, "")
        if enabled == USER_CLIENT_ID_QUOTA_ENABLED:
            return (sanitized_user, client_id)
        quotas = self._quotas
        for user_part, client_part, keeps_client in _TAG_LADDER:
            key = (
                sanitized_user if user_part is _NAMED else user_part,
                client_id if client_part is _NAMED else client_part,
            )
            if key in quotas:
                return (sanitized_user, client_id if keeps_client else "")
        return ("", client_id)

    # --- stage 2: the limit for a set of tags --------------------------------------------------------
    def quota_limit(self, quota_type: ClientQuotaType, metric_tags: Mapping[str, str]) -> float | None:
        user = metric_tags.get(USER_TAG)
        client_id = metric_tags.get(CLIENT_ID_TAG)
        if user is None or client_id is None:
            return None
        return self.limit_for_tags(user, client_id)

    def limit_for_tags(self, user: str, client_id: str) -> float | None:
        quotas = self._quotas
        if user and client_id:
            candidates: tuple[EntityKey, ...] = (
                (user, client_id),
                (user, DEFAULT),
                (DEFAULT, client_id),
                (DEFAULT, DEFAULT),
            )
        elif user:
            candidates = ((user, None), (DEFAULT, None))
        elif client_id:
            candidates = ((None, client_id), (None, DEFAULT))
        else:
            return None
        for key in candidates:
            bound = quotas.get(key)
            if bound is not None:
                return bound
        return None

    def quota_reset_required(self, quota_type: ClientQuotaType) -> bool:
        return False

    def update_cluster_metadata(self, cluster: Any) -> bool:
        return False  # the default callback does not use cluster metadata

    def close(self) -> None:
        pass
