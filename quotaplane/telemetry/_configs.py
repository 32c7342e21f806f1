"""Client-metrics config resources (KIP-714 subscriptions): parsing and validation as Kafka 4.x does it.

A resource is a name and three configs, all given as strings the way ``kafka-configs.sh`` and
IncrementalAlterConfigs send them:

- ``metrics``: comma-separated metric-name prefixes; ``*`` means all, an empty value means none.
- ``interval.ms``: the push interval, 100..3,600,000 (default 300,000).
- ``match``: comma-separated ``selector=regex`` pairs over client_instance_id, client_id,
  client_software_name, client_software_version, client_source_address, client_source_port. A value
  matches when the regex matches the whole attribute (Java's ``Matcher.matches()``); regexes are RE2
  (google-re2 here, RE2/J in Kafka), so matching is linear-time whatever an operator writes.

Validation follows Kafka's ``ClientMetricsConfigs.validate``: unknown keys and the interval range are
INVALID_REQUEST; unparsable values, duplicate or empty list entries and bad match patterns are
INVALID_CONFIG; match patterns are compiled strictly only when ``match`` is new or changed.

>>> sub = parse_subscription("sub-1", {"metrics": "org.apache.kafka.producer., org.apache.kafka.consumer.",
...                                     "interval.ms": "30000", "match": "client_software_name=apache-kafka-java"})
>>> sub.metrics, sub.interval_ms, sub.is_match({"client_software_name": "apache-kafka-java"})
(('org.apache.kafka.producer.', 'org.apache.kafka.consumer.'), 30000, True)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import re2

from ..errors import InvalidConfigurationError, InvalidRequestError
from ._java_collections import java_hash_set_copy_capacity, java_hash_set_order_exact

__all__ = [
    "ALLOWED_MATCH_PARAMS",
    "ALL_SUBSCRIBED_METRICS",
    "CLIENT_ID",
    "CLIENT_INSTANCE_ID",
    "CLIENT_SOFTWARE_NAME",
    "CLIENT_SOFTWARE_VERSION",
    "CLIENT_SOURCE_ADDRESS",
    "CLIENT_SOURCE_PORT",
    "CONFIG_NAMES",
    "INTERVAL_MS_CONFIG",
    "INTERVAL_MS_DEFAULT",
    "MATCH_CONFIG",
    "MAX_INTERVAL_MS",
    "METRICS_CONFIG",
    "MIN_INTERVAL_MS",
    "SubscriptionInfo",
    "matches",
    "parse_list",
    "parse_subscription",
    "validate",
]

METRICS_CONFIG = "metrics"
INTERVAL_MS_CONFIG = "interval.ms"
MATCH_CONFIG = "match"
CONFIG_NAMES = frozenset({METRICS_CONFIG, INTERVAL_MS_CONFIG, MATCH_CONFIG})

CLIENT_INSTANCE_ID = "client_instance_id"
CLIENT_ID = "client_id"
CLIENT_SOFTWARE_NAME = "client_software_name"
CLIENT_SOFTWARE_VERSION = "client_software_version"
CLIENT_SOURCE_ADDRESS = "client_source_address"
CLIENT_SOURCE_PORT = "client_source_port"
ALLOWED_MATCH_PARAMS = frozenset(
    {
        CLIENT_INSTANCE_ID,
        CLIENT_ID,
        CLIENT_SOFTWARE_NAME,
        CLIENT_SOFTWARE_VERSION,
        CLIENT_SOURCE_ADDRESS,
        CLIENT_SOURCE_PORT,
    }
)

#: ``*`` in ``metrics`` subscribes a client to every metric.
ALL_SUBSCRIBED_METRICS = "*"
INTERVAL_MS_DEFAULT = 5 * 60 * 1000
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3_600_000

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
# ConfigDef's COMMA_WITH_WHITESPACE: Java's \s is [ \t\n\x0B\f\r], narrower than Python's.
_COMMA_WITH_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]*,[ \t\n\x0b\f\r]*")
_JAVA_INT = re.compile(r"[+-]?[0-9]+")

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is a validation error for the caller, not a log line


def _java_trim(s: str) -> str:
    """``String.trim()``: strips every character <= U+0020, and nothing else."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


def parse_list(value: str) -> list[str]:
    """ConfigDef's LIST parsing: trim, then split on commas with surrounding whitespace, keeping empties.

    >>> parse_list(" a , b,,c "), parse_list("  ")
    (['a', 'b', '', 'c'], [])
    """
    trimmed = _java_trim(value)
    return _COMMA_WITH_WHITESPACE.split(trimmed) if trimmed else []


def _parse_int(name: str, value: str) -> int:
    trimmed = _java_trim(value)
    if not _JAVA_INT.fullmatch(trimmed) or not _INT_MIN <= int(trimmed) <= _INT_MAX:
        raise InvalidConfigurationError(f"Invalid value {value} for configuration {name}: Not a number of type INT")
    return int(trimmed)


def _validate_list(name: str, values: list[str]) -> None:
    """``ValidList.anyNonDuplicateValues(isEmptyAllowed=true, isNullAllowed=false)`` (Kafka 4.x)."""
    if len(set(values)) != len(values):
        raise InvalidConfigurationError(f"Configuration '{name}' values must not be duplicated.")
    if any(v == "" for v in values):
        raise InvalidConfigurationError(f"Configuration '{name}' values must not be empty.")


def _split_match_pattern(pattern: str) -> tuple[str, str]:
    """``param=regex`` split at the first '=' (the regex may contain more), both sides trimmed."""
    parts = pattern.split("=", 1)
    if len(parts) != 2:
        raise InvalidConfigurationError(f"Illegal client matching pattern: {pattern}")
    param = _java_trim(parts[0])
    if param not in ALLOWED_MATCH_PARAMS:
        raise InvalidConfigurationError(f"Illegal client matching pattern: {pattern}")
    return param, _java_trim(parts[1])


def _compile(param: str, regex: str) -> re2._Regexp:
    try:
        return re2.compile(regex, _RE2_OPTIONS)
    except re2.error as e:
        reason = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise InvalidConfigurationError(
            f"Client match pattern `{param}={regex}` is not a valid regular expression: {reason}."
        ) from None


def validate(name: str | None, configs: Mapping[str, str], old_configs: Mapping[str, str] | None = None) -> None:
    """Validate the full set of configs a resource would have after a change (Kafka's ``validate``).

    ``old_configs`` are the resource's current configs: ``match`` is compiled only when it changed,
    as Kafka does so a pattern accepted long ago never blocks an unrelated change.
    """
    _checked(name, configs, old_configs, compile_match=False)


def _checked(
    name: str | None, configs: Mapping[str, str], old_configs: Mapping[str, str] | None, *, compile_match: bool
) -> tuple[list[str], int | None, list[str], dict[str, re2._Regexp]]:
    """Validate in Kafka's order and return what was parsed: metrics, interval (None if unset), match
    patterns and, if ``compile_match`` (or ``match`` changed), the compiled selectors."""
    if not name:
        raise InvalidRequestError("Subscription name can't be empty")
    for key in configs:
        if key not in CONFIG_NAMES:
            raise InvalidRequestError(f"Unknown client metrics configuration: {key}")
    for key, value in configs.items():
        if not isinstance(value, str):
            raise InvalidConfigurationError(f"Invalid value {value!r} for configuration {key}: expected a string")
    metrics = parse_list(configs.get(METRICS_CONFIG, ""))
    _validate_list(METRICS_CONFIG, metrics)
    interval = _parse_int(INTERVAL_MS_CONFIG, configs[INTERVAL_MS_CONFIG]) if INTERVAL_MS_CONFIG in configs else None
    patterns = parse_list(configs.get(MATCH_CONFIG, ""))
    _validate_list(MATCH_CONFIG, patterns)
    if interval is not None and not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise InvalidRequestError(
            f"Invalid value {interval} for {INTERVAL_MS_CONFIG}, interval must be between 100 and 3600000 (1 hour)"
        )
    compiled: dict[str, re2._Regexp] = {}
    if compile_match or configs.get(MATCH_CONFIG) != (old_configs or {}).get(MATCH_CONFIG):
        for pattern in patterns:
            param, regex = _split_match_pattern(pattern)
            compiled[param] = _compile(param, regex)  # a repeated selector: the last wins, as Kafka's HashMap.put
    return metrics, interval, patterns, compiled


def matches(patterns: Mapping[str, re2._Regexp], attributes: Mapping[str, str | None]) -> bool:
    """Kafka's ``isMatch``: every selector matches its whole attribute; a missing attribute never
    matches; no selectors match every client."""
    for param, regex in patterns.items():
        value = attributes.get(param)
        if value is None or regex.fullmatch(value) is None:
            return False
    return True


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """One parsed client-metrics resource, as Kafka's ``ClientMetricsManager.SubscriptionInfo``.

    ``metrics`` keeps the configured order; ``metrics_java_order`` is the order Kafka's
    ``new HashSet<>(metrics)`` iterates them in, which feeds the subscription id.
    """

    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[str, ...]
    match_patterns: Mapping[str, re2._Regexp] = field(repr=False, compare=False)
    metrics_java_order: tuple[str, ...] = field(repr=False, compare=False)
    metrics_java_order_exact: bool = field(repr=False, compare=False)
    configs: Mapping[str, str] = field(repr=False, compare=False)

    @property
    def subscribes_all(self) -> bool:
        return ALL_SUBSCRIBED_METRICS in self.metrics

    def is_match(self, attributes: Mapping[str, str | None]) -> bool:
        return matches(self.match_patterns, attributes)


def parse_subscription(
    name: str, configs: Mapping[str, str], old_configs: Mapping[str, str] | None = None, *, java_version: int = 17
) -> SubscriptionInfo:
    """Validate ``configs`` (the resource's full set after the change) and build its SubscriptionInfo."""
    metrics_list, interval, match_list, patterns = _checked(name, configs, old_configs, compile_match=True)
    metrics, match = tuple(metrics_list), tuple(match_list)
    interval_ms = INTERVAL_MS_DEFAULT if interval is None else interval
    java_order, exact = java_hash_set_order_exact(metrics, java_hash_set_copy_capacity(len(metrics), java_version))
    return SubscriptionInfo(
        name=name,
        metrics=metrics,
        interval_ms=interval_ms,
        match=match,
        match_patterns=patterns,
        metrics_java_order=tuple(java_order),
        metrics_java_order_exact=exact,
        configs=dict(configs),
    )
