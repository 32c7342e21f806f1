"""Client-quota entities, their config keys, and Kafka's controller-side validation of a change.

A client-quota entity is Kafka's ``ClientQuotaEntity``: a map from entity type (``user``, ``client-id``,
``ip``) to a name, or to ``None`` for the ``<default>`` entity of that type. In the image it is an
:data:`EntityKey`, the same pairs sorted by type, so equal entities are equal keys whatever order a
client sent them in.

Validation follows ``ClientQuotaControlManager`` (Kafka 4.x): the entity first (known types, no
duplicates, no empty names), then the combination (``ip`` alone, or ``user`` and/or ``client-id``), then
each key and value (known key for the combination, value > 0, integral types whole and in range).
Every failure is INVALID_REQUEST with Kafka's message, which names the offending field.

Every name must also be one Kafka can carry back (:func:`validate_string`, the one rule every admin door
calls): a Kafka STRING holds at most 32,767 bytes of UTF-8, and Kafka's generated readers and writers
refuse anything longer, so a longer name stored here would make every DescribeClientQuotas that matches
it fail for every client; and it must be valid Unicode (no lone surrogates, which UTF-8 cannot encode).
Control characters are accepted, as Kafka accepts them (``ClientQuotaControlManager`` checks only for
empty names); the tools escape them when they print a name.

quotaplane adds one key Kafka does not have yet: ``producer_ids_rate`` (KIP-936), valid on ``user``
entities only (a user or the default user), as the KIP specifies, typed DOUBLE.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final

from ..errors import ApiError, InvalidRequestError
from ..quota import DEFAULT, ClientQuotaEntity, default_resolver, ip_literal

__all__ = [
    "CLIENT_ID",
    "CLIENT_QUOTA_KEYS",
    "CONNECTION_CREATION_RATE",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "ENTITY_TYPES",
    "IP",
    "IP_QUOTA_KEYS",
    "MAX_STRING_BYTES",
    "PRODUCER_BYTE_RATE",
    "PRODUCER_IDS_RATE",
    "REQUEST_PERCENTAGE",
    "USER",
    "USER_QUOTA_KEYS",
    "EntityKey",
    "QuotaValueType",
    "Resolver",
    "config_keys_for_entity",
    "entity_key",
    "entity_map",
    "format_entity",
    "is_valid_ip_entity",
    "shown",
    "string_problem",
    "to_client_quota_entity",
    "validate_entity",
    "validate_quota_key_value",
    "validate_string",
]

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
ENTITY_TYPES: Final = frozenset({USER, CLIENT_ID, IP})

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
PRODUCER_IDS_RATE: Final = "producer_ids_rate"
CONNECTION_CREATION_RATE: Final = "connection_creation_rate"

#: The most bytes of UTF-8 a Kafka STRING or COMPACT_STRING carries: Kafka's generated readers refuse a
#: longer length ("string field ... had invalid length") and its writers a longer value ("... is too long
#: to be serialized"); a classic STRING's INT16 length cannot say more.
MAX_STRING_BYTES: Final = 32_767

#: What :func:`shown` escapes: a backslash, C0 / DEL / C1 controls, line and paragraph separators, and
#: lone surrogates (none of which prints as itself on one line).
_UNPRINTABLE = re.compile(r"[\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_ESCAPES: Final = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: The characters of a name an error message quotes before it elides the rest.
_SHOWN_CHARS: Final = 64

#: An entity as the image keys it: ``((type, name or None), ...)`` sorted by type.
EntityKey = tuple[tuple[str, str | None], ...]

#: Resolves a host name; raises OSError when it cannot (``socket.getaddrinfo`` by default, which, as
#: Java's ``InetAddress.getByName``, takes a name with only IPv6 addresses).
Resolver = Callable[[str], object]


class QuotaValueType(Enum):
    """The ConfigDef type of a quota key, which decides its range and whether it may be fractional."""

    LONG = "LONG"
    INT = "INT"
    DOUBLE = "DOUBLE"


_LONG_MAX: Final = float(2**63 - 1)
_INT_MAX: Final = float(2**31 - 1)

#: ``QuotaConfig.userAndClientQuotaConfigs()``: the keys of user and/or client-id entities.
USER_AND_CLIENT_QUOTA_KEYS: Final[Mapping[str, QuotaValueType]] = {
    PRODUCER_BYTE_RATE: QuotaValueType.LONG,
    CONSUMER_BYTE_RATE: QuotaValueType.LONG,
    REQUEST_PERCENTAGE: QuotaValueType.DOUBLE,
    CONTROLLER_MUTATION_RATE: QuotaValueType.DOUBLE,
}
#: A ``user`` entity alone (user or default user) also takes KIP-936's ``producer_ids_rate``.
USER_QUOTA_KEYS: Final[Mapping[str, QuotaValueType]] = {
    **USER_AND_CLIENT_QUOTA_KEYS,
    PRODUCER_IDS_RATE: QuotaValueType.DOUBLE,
}
#: ``QuotaConfig.ipConfigs()``.
IP_QUOTA_KEYS: Final[Mapping[str, QuotaValueType]] = {CONNECTION_CREATION_RATE: QuotaValueType.INT}
#: Every client-quota key quotaplane knows.
CLIENT_QUOTA_KEYS: Final = frozenset(USER_QUOTA_KEYS) | frozenset(IP_QUOTA_KEYS)


@dataclass(frozen=True, slots=True)
class _Checked:
    key: EntityKey
    config_keys: Mapping[str, QuotaValueType]


def string_problem(value: str) -> str | None:
    """Why ``value`` cannot travel as a Kafka STRING (not valid UTF-8, or too long), or None if it can."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as e:
        return f"not valid UTF-8 (a lone surrogate U+{ord(value[e.start]):04X} at character {e.start})"
    if size > MAX_STRING_BYTES:
        return f"{size} bytes of UTF-8, above the {MAX_STRING_BYTES} a Kafka string can carry"
    return None


def shown(value: str, limit: int = _SHOWN_CHARS) -> str:
    """``value`` as an error message or a tool's line may quote it: escaped (``\\n``, ``\\x1b``, ``\\ud800``,
    a backslash doubled) so it stays one line of valid text, and cut after ``limit`` characters.

    >>> shown("a\\nb"), shown("x" * 70, limit=4)
    ('a\\\\nb', 'xxxx...(66 more characters)')
    """
    head = value if len(value) <= limit else value[:limit]
    text = _UNPRINTABLE.sub(_escape, head) if _UNPRINTABLE.search(head) else head
    return text if head is value else f"{text}...({len(value) - limit} more characters)"


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    escaped = _ESCAPES.get(char)
    if escaped is not None:
        return escaped
    return f"\\x{ord(char):02x}" if ord(char) <= 0xFF else f"\\u{ord(char):04x}"


def validate_string(value: object, what: str, error: type[ApiError] = InvalidRequestError) -> str:
    """``value`` if a Kafka client can receive it back (a str of at most 32,767 bytes of valid UTF-8), else
    ``error`` (INVALID_REQUEST unless the caller's API answers another code) naming ``what`` it is.

    The one check every admin door and the config layer call, so each refuses the same names the same way.
    """
    if not isinstance(value, str):
        raise error(f"Invalid {what} {value!r}: expected a string")
    problem = string_problem(value)
    if problem is not None:
        raise error(f"Invalid {what} '{shown(value)}': {problem}")
    return value


def entity_key(entity: Mapping[str, str | None] | Iterable[tuple[str, str | None]]) -> EntityKey:
    """The canonical key of an entity given as a mapping or as (type, name) pairs (no validation)."""
    pairs = entity.items() if isinstance(entity, Mapping) else entity
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


def entity_map(key: EntityKey) -> dict[str, str | None]:
    """The entity as Kafka's map form, ``{"user": "alice", "client-id": None}``."""
    return dict(key)


def format_entity(key: EntityKey | Mapping[str, str | None]) -> str:
    """Kafka's ``ClientQuotaEntity.toString`` shape: ``ClientQuotaEntity(entries={user=alice})``; a long or
    unprintable name is escaped and cut, so a message naming the entity is itself a carriable string."""
    pairs = key.items() if isinstance(key, Mapping) else key
    inner = ", ".join(f"{t}={'null' if n is None else _quoted(n)}" for t, n in pairs)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def is_valid_ip_entity(ip: str | None, resolver: Resolver | None = None) -> bool:
    """Kafka's ``isValidIpEntity``: the default IP entity, an IP literal, or a host name that resolves."""
    if ip is None or ip_literal(ip) is not None:
        return True
    try:
        (resolver or default_resolver)(ip)
    except (OSError, UnicodeError, ValueError):
        return False
    return True


def validate_entity(
    entity: Mapping[str, str | None] | Iterable[tuple[str | None, str | None]], resolver: Resolver | None = None
) -> _Checked:
    """Check an entity's types and names, then their combination; return its key and valid config keys.

    Raises InvalidRequestError with Kafka's message (``validateEntity`` then ``configKeysForEntityType``).
    """
    pairs = _entity_pairs(entity)
    if not pairs:
        raise InvalidRequestError("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for entity_type, entity_name in pairs:
        if not isinstance(entity_type, str) or entity_type not in ENTITY_TYPES:
            # Kafka's message (a null type prints as "null"; a type Kafka could not carry, escaped and cut)
            named = "null" if entity_type is None else _quoted(entity_type)
            raise InvalidRequestError(f"Unhandled client quota entity type: {named}")
        if entity_type in seen:
            raise InvalidRequestError(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_name is not None and not isinstance(entity_name, str):
            raise InvalidRequestError(f"Invalid {entity_type} name {entity_name!r}: expected a string or null")
        seen[entity_type] = entity_name
        if entity_name == "":
            raise InvalidRequestError(f"Empty {entity_type} not supported")
        if entity_name is not None:
            validate_string(entity_name, f"{entity_type} name")
    return _Checked(entity_key(seen), config_keys_for_entity(seen, resolver))


def _quoted(value: object) -> str:
    """A value as Kafka's messages print it, unless Kafka could not carry it: then escaped and cut."""
    if not isinstance(value, str):
        return repr(value)
    return value if string_problem(value) is None and len(value) <= 4 * _SHOWN_CHARS else shown(value)


def _entity_pairs(entity: object) -> list[tuple[object, object]]:
    """The (type, name) pairs of an entity given as a mapping or pairs; INVALID_REQUEST if it is neither."""
    if isinstance(entity, Mapping):
        return list(entity.items())
    if isinstance(entity, str | bytes) or not isinstance(entity, Iterable):
        raise InvalidRequestError(f"Invalid client quota entity {entity!r}: expected a map of entity type to name")
    pairs = []
    for pair in entity:
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise InvalidRequestError(f"Invalid client quota entity entry {pair!r}: expected (entity type, name)")
        pairs.append((pair[0], pair[1]))
    return pairs


def config_keys_for_entity(
    entity: Mapping[str, str | None], resolver: Resolver | None = None
) -> Mapping[str, QuotaValueType]:
    """Kafka's ``configKeysForEntityType``: which keys the combination of entity types takes."""
    has_user, has_client, has_ip = USER in entity, CLIENT_ID in entity, IP in entity
    if has_ip:
        if has_user or has_client:
            # Kafka's message, missing space included.
            raise InvalidRequestError(
                "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
            )
        if not is_valid_ip_entity(entity[IP], resolver):
            raise InvalidRequestError(f"{entity[IP]} is not a valid IP or resolvable host.")
        return IP_QUOTA_KEYS
    if has_user and not has_client:
        return USER_QUOTA_KEYS
    if has_user or has_client:
        return USER_AND_CLIENT_QUOTA_KEYS
    raise InvalidRequestError("Invalid empty client quota entity")


def validate_quota_key_value(config_keys: Mapping[str, QuotaValueType], key: object, value: object) -> float:
    """Kafka's ``validateQuotaKeyValue``; returns the value as a float."""
    value_type = config_keys.get(key) if isinstance(key, str) else None
    if value_type is None:
        raise InvalidRequestError(f"Invalid configuration key {'null' if key is None else _quoted(key)}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequestError(f"Quota {key} must be a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any double: as Kafka's double, it is infinite
        number = math.inf
    if math.isnan(number):
        raise InvalidRequestError(f"Quota {key} must be a number, got NaN")
    if number <= 0.0:
        raise InvalidRequestError(f"Quota {key} must be greater than 0")
    if value_type is QuotaValueType.DOUBLE:
        if math.isinf(number):
            raise InvalidRequestError(f"Quota {key} must be finite")
        return number
    if value_type is QuotaValueType.INT and number > _INT_MAX:
        raise InvalidRequestError(f"Proposed value for {key} is too large for an INT.")
    if value_type is QuotaValueType.LONG and number > _LONG_MAX:
        raise InvalidRequestError(f"Proposed value for {key} is too large for a LONG.")
    if abs(math.fmod(number, 1.0)) > 1e-6:
        raise InvalidRequestError(f"{key} cannot be a fractional value.")
    return number


def to_client_quota_entity(key: EntityKey) -> ClientQuotaEntity:
    """The quota core's entity for a user and/or client-id key (``None`` names become ``DEFAULT``)."""
    user: str | object | None = None
    client_id: str | object | None = None
    for entity_type, name in key:
        if entity_type == USER:
            user = DEFAULT if name is None else name
        elif entity_type == CLIENT_ID:
            client_id = DEFAULT if name is None else name
        else:
            raise ValueError(f"{format_entity(key)} is not a user / client-id entity")
    return ClientQuotaEntity(user=user, client_id=client_id)
