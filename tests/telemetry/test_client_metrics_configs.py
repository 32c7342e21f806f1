"""Validation of client-metrics resources: Kafka's validator and ``ClientMetricsConfigsTest`` cases.

From ``ControllerConfigurationValidatorTest`` (its client-metrics cases are the same in Kafka's
October 2024 trunk and in 4.x) and ``ClientMetricsConfigsTest``. Where the versions differ quotaplane
follows Kafka 4.x, and the case says so: duplicate and empty list entries are rejected, a match
pattern is split at its first '=', and regexes are RE2, with "Client match pattern `k=v` is not a
valid regular expression: ...". Messages are asserted where Kafka's tests assert them.
"""

from __future__ import annotations

import pytest

from quotaplane.errors import Errors, InvalidConfigurationError, InvalidRequestError
from quotaplane.telemetry import parse_subscription, validate
from quotaplane.telemetry._configs import parse_list

from .conftest import DEFAULT_INTERVAL_MS, default_properties


def test_valid_client_metrics_config() -> None:
    configs = {
        "interval.ms": "2000",
        "metrics": "org.apache.kafka.client.producer.partition.queue.,"
        "org.apache.kafka.client.producer.partition.latency",
        "match": "client_instance_id=b69cc35a-7a54-4790-aa69-cc2bd4ee4538,client_id=1,"
        "client_software_name=apache-kafka-java,client_software_version=2.8.0-SNAPSHOT,"
        "client_source_address=127.0.0.1,client_source_port=1234",
    }
    validate("subscription-1", configs)

    info = parse_subscription("subscription-1", configs)
    assert info.interval_ms == 2000
    assert len(info.metrics) == 2
    assert sorted(info.match_patterns) == [
        "client_id",
        "client_instance_id",
        "client_software_name",
        "client_software_version",
        "client_source_address",
        "client_source_port",
    ]


def test_default_properties_parse() -> None:
    info = parse_subscription("sub-1", default_properties())

    assert info.metrics == (
        "org.apache.kafka.client.producer.partition.queue.",
        "org.apache.kafka.client.producer.partition.latency",
    )
    assert info.interval_ms == 30_000
    assert {k: v.pattern for k, v in info.match_patterns.items()} == {
        "client_software_name": "apache-kafka-java",
        "client_software_version": "3.5.*",
    }


@pytest.mark.parametrize("name", ["", None])
def test_invalid_subscription_name(name) -> None:
    with pytest.raises(InvalidRequestError) as e:
        validate(name, {})
    assert str(e.value) == "Subscription name can't be empty"
    assert e.value.error == Errors.INVALID_REQUEST


@pytest.mark.parametrize("interval", ["10", "99", "3600001", "0", "-5"])
def test_invalid_interval(interval: str) -> None:
    with pytest.raises(InvalidRequestError) as e:
        validate("subscription-1", {"interval.ms": interval})
    assert (
        str(e.value) == f"Invalid value {interval} for interval.ms, interval must be between 100 and 3600000 (1 hour)"
    )


@pytest.mark.parametrize("interval", ["100", "3600000", " 2000 "])
def test_interval_bounds_are_inclusive_and_values_trimmed(interval: str) -> None:
    info = parse_subscription("subscription-1", {"interval.ms": interval})

    assert info.interval_ms == int(interval)


@pytest.mark.parametrize("interval", ["abc", "", "1.5", "30s", "2147483648", "0x10"])
def test_non_integer_interval(interval: str) -> None:
    # ConfigDef's type error: Kafka parses the value as a Java int before the range check.
    with pytest.raises(InvalidConfigurationError) as e:
        validate("subscription-1", {"interval.ms": interval})
    assert str(e.value) == f"Invalid value {interval} for configuration interval.ms: Not a number of type INT"
    assert e.value.error == Errors.INVALID_CONFIG


def test_undefined_config() -> None:
    with pytest.raises(InvalidRequestError) as e:
        validate("subscription-1", {"random": "10"})
    assert str(e.value) == "Unknown client metrics configuration: random"


def test_unknown_key_is_reported_before_bad_values() -> None:
    with pytest.raises(InvalidRequestError, match="Unknown client metrics configuration: intervalms"):
        validate("subscription-1", {"interval.ms": "abc", "intervalms": "100"})


def test_invalid_match() -> None:
    with pytest.raises(InvalidConfigurationError) as e:
        validate("subscription-1", {"match": "10"})
    assert str(e.value) == "Illegal client matching pattern: 10"


@pytest.mark.parametrize("pattern", ["client_id", "unknown_param=foo", "=foo", "client-id=foo", "*=foo"])
def test_illegal_match_selector(pattern: str) -> None:
    # ClientMetricsConfigsTest.testParseMatchingPatternsInvalid: no '=', or a selector that is not one of six.
    with pytest.raises(InvalidConfigurationError) as e:
        validate("subscription-1", {"match": pattern})
    assert str(e.value) == f"Illegal client matching pattern: {pattern}"


def test_parse_matching_patterns() -> None:
    info = parse_subscription("sub-1", {"match": "client_id=consumer-.*,client_software_name=kafka"})

    assert {k: v.pattern for k, v in info.match_patterns.items()} == {
        "client_id": "consumer-.*",
        "client_software_name": "kafka",
    }


def test_parse_matching_patterns_empty() -> None:
    for configs in ({}, {"match": ""}, {"match": "  "}):
        assert parse_subscription("sub-1", configs).match_patterns == {}
        # No selectors: the subscription applies to every client.
        assert parse_subscription("sub-1", configs).is_match({})


def test_matching_pattern_may_contain_equals_sign() -> None:
    # Kafka 4.x (KAFKA-21041): only the first '=' separates the selector; the 2024 code split at every '='
    # and rejected it.
    info = parse_subscription("sub-1", {"match": "client_id=foo=bar"})

    assert info.match_patterns["client_id"].pattern == "foo=bar"
    assert info.is_match({"client_id": "foo=bar"})
    assert not info.is_match({"client_id": "foo"})


@pytest.mark.parametrize(
    ("regex", "reason"),
    [
        ("[unclosed", "missing ]: [unclosed"),
        ("*", "no argument for repetition operator: *"),
        ("(unclosed", "missing ): (unclosed"),
        ("a**", "bad repetition operator: **"),
        # RE2 bounds repetition at 1000 (no comma here: a comma would separate two patterns).
        ("x{1001}", "invalid repetition size: {1001}"),
        # Java's Pattern accepts these; RE2 does not (no backtracking constructs).
        ("(?=x)", "invalid perl operator: (?="),
        ("(a)\\1", "invalid escape sequence: \\1"),
    ],
)
def test_invalid_regular_expression(regex: str, reason: str) -> None:
    # Kafka 4.x: RE2 and this message. The 2024 code (java.util.regex) said
    # "Illegal client matching pattern: ..." instead.
    with pytest.raises(InvalidConfigurationError) as e:
        validate("subscription-1", {"match": f"client_id={regex}"})
    assert str(e.value) == f"Client match pattern `client_id={regex}` is not a valid regular expression: {reason}."


def test_a_comma_always_separates_patterns() -> None:
    # Match is a LIST config: "a{2,1}" becomes "client_id=a{2" and "1}", and the second has no '='.
    with pytest.raises(InvalidConfigurationError) as e:
        validate("subscription-1", {"match": "client_id=a{2,1}"})
    assert str(e.value) == "Illegal client matching pattern: 1}"


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"metrics": "a.,b.,a."}, "Configuration 'metrics' values must not be duplicated."),
        ({"metrics": "a., a."}, "Configuration 'metrics' values must not be duplicated."),
        ({"match": "client_id=a,client_id=a"}, "Configuration 'match' values must not be duplicated."),
        ({"metrics": "a.,,b."}, "Configuration 'metrics' values must not be empty."),
        ({"metrics": "a.,"}, "Configuration 'metrics' values must not be empty."),
        ({"match": "client_id=a, ,client_software_name=b"}, "Configuration 'match' values must not be empty."),
    ],
)
def test_duplicate_and_empty_list_entries(configs: dict, message: str) -> None:
    # Kafka 4.x (ValidList.anyNonDuplicateValues); the October 2024 code accepted these lists.
    with pytest.raises(InvalidConfigurationError) as e:
        validate("subscription-1", configs)
    assert str(e.value) == message


def test_only_commas_is_rejected() -> None:
    with pytest.raises(InvalidConfigurationError):
        validate("subscription-1", {"metrics": ","})


def test_same_selector_twice_with_different_regexes_keeps_the_last() -> None:
    # Not duplicate entries: Kafka puts both into a HashMap, and the last wins.
    info = parse_subscription("sub-1", {"match": "client_id=a,client_id=b"})

    assert info.match_patterns["client_id"].pattern == "b"


def test_all_metrics() -> None:
    info = parse_subscription("sub-1", {"metrics": "*"})

    assert info.metrics == ("*",)
    assert info.subscribes_all


def test_empty_metrics_subscribe_to_none() -> None:
    info = parse_subscription("sub-1", {"metrics": ""})

    assert info.metrics == ()
    assert not info.subscribes_all
    assert info.interval_ms == DEFAULT_INTERVAL_MS


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a,b", ["a", "b"]),
        (" a , b ", ["a", "b"]),
        ("a ,\tb\n", ["a", "b"]),
        ("", []),
        ("   ", []),
        ("a,,b", ["a", "", "b"]),  # kept here, rejected by validation
        ("a,", ["a", ""]),  # Java's split(-1) keeps trailing empties
        ("a b,c", ["a b", "c"]),  # whitespace inside an entry is kept
    ],
)
def test_list_parsing(value: str, expected: list[str]) -> None:
    assert parse_list(value) == expected


def test_match_selector_and_regex_are_trimmed() -> None:
    info = parse_subscription("sub-1", {"match": " client_id = producer-1 , client_software_name=kafka "})

    assert {k: v.pattern for k, v in info.match_patterns.items()} == {
        "client_id": "producer-1",
        "client_software_name": "kafka",
    }
    assert info.is_match({"client_id": "producer-1", "client_software_name": "kafka"})


def test_interval_only_subscription_applies_to_everyone() -> None:
    # Kafka's testUpdateSubscriptionWithPropertiesDeletion starts from this resource.
    info = parse_subscription("sub-1", {"interval.ms": "100"})

    assert (info.metrics, info.interval_ms, info.match) == ((), 100, ())
    assert info.is_match({})


def test_non_string_value_is_invalid_config() -> None:
    with pytest.raises(InvalidConfigurationError):
        validate("sub-1", {"interval.ms": 100})  # type: ignore[dict-item]
