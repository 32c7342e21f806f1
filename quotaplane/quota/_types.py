"""Quota types, client-quota entities with their ``<default>`` sentinel, and Kafka's name sanitizer."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, unquote

__all__ = [
    "CLIENT_QUOTA_TYPES",
    "DEFAULT",
    "ClientQuotaEntity",
    "ClientQuotaType",
    "Default",
    "QuotaType",
    "desanitize",
    "sanitize",
]


class QuotaType(enum.Enum):
    """What a quota manager limits. ``str()`` is Kafka's name, used as metric group and sensor prefix."""

    FETCH = "Fetch"
    PRODUCE = "Produce"
    REQUEST = "Request"
    CONTROLLER_MUTATION = "ControllerMutation"
    LEADER_REPLICATION = "LeaderReplication"
    FOLLOWER_REPLICATION = "FollowerReplication"
    ALTER_LOG_DIRS_REPLICATION = "AlterLogDirsReplication"
    RLM_COPY = "RLMCopy"
    RLM_FETCH = "RLMFetch"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: str | QuotaType) -> QuotaType:
        """``PRODUCE``, ``produce`` or ``Produce`` → ``QuotaType.PRODUCE``; anything else is a ValueError."""
        if isinstance(name, QuotaType):
            return name
        if isinstance(name, str):
            for member in cls:
                if name in (member.name, member.value) or name.upper() == member.name:
                    return member
        known = ", ".join(m.name for m in cls)
        raise ValueError(f"unknown quota type {name!r}; expected one of {known}")

    def to_client_quota_type(self) -> ClientQuotaType:
        try:
            return ClientQuotaType[self.name]
        except KeyError:
            raise ValueError(f"Not a client quota type: {self}") from None


class ClientQuotaType(enum.Enum):
    """The quota types a ``ClientQuotaCallback`` is asked about (Kafka's ``ClientQuotaType``)."""

    PRODUCE = "Produce"
    FETCH = "Fetch"
    REQUEST = "Request"
    CONTROLLER_MUTATION = "ControllerMutation"


CLIENT_QUOTA_TYPES: Final = frozenset(
    {QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST, QuotaType.CONTROLLER_MUTATION}
)


class Default:
    """The ``<default>`` entity name: the quota every user (or client id) without its own gets.

    A singleton distinct from every string, so a user literally named ``<default>`` is not the default.
    """

    _instance: Default | None = None
    __slots__ = ()

    def __new__(cls) -> Default:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DEFAULT"

    def __str__(self) -> str:
        return "<default>"

    def __reduce__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = Default()

EntityName = str | Default | None


@dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """A quota's owner: a user, a client id, or both; either may be ``DEFAULT``.

    ``ClientQuotaEntity(user="alice", client_id=DEFAULT)`` is Kafka's ``/config/users/alice/clients/<default>``.
    ``None`` means the entity has no such component (a user-only or client-id-only quota).
    """

    user: EntityName = None
    client_id: EntityName = None

    def __post_init__(self) -> None:
        for field_name in ("user", "client_id"):
            value = getattr(self, field_name)
            if value is not None and not isinstance(value, str | Default):
                raise ValueError(f"{field_name} must be a string, DEFAULT or None, got {type(value).__name__}")
        if self.user is None and self.client_id is None:
            raise ValueError("a client quota entity needs a user, a client id, or both")

    @property
    def key(self) -> tuple[EntityName, EntityName]:
        """The entity as the quota callback stores it: the user sanitized, the client id as is."""
        user = sanitize(self.user) if isinstance(self.user, str) else self.user
        return (user, self.client_id)

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append("default user" if self.user is DEFAULT else f"user {self.user}")
        if self.client_id is not None:
            parts.append("default client-id" if self.client_id is DEFAULT else f"client-id {self.client_id}")
        return " ".join(parts)


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encode (UTF-8) with ``*`` and space percent-encoded.

    The result names metrics and sensors safely: ``sanitize("User:a b*")`` is ``"User%3Aa%20b%2A"``.
    Java's URLEncoder keeps ``. - * _`` and letters and digits; Python's ``quote`` also keeps ``~``.
    """
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize`` (URL decoding, ``+`` is a space)."""
    return unquote(name.replace("+", " "))
