"""Kafka's ``ClientMetricsInstanceTest`` and ``ClientMetricsInstanceMetadataTest`` ported, plus matching.

The Kafka tests read ``System.currentTimeMillis()``; these take a fixed realistic clock. Kafka's source
address is the test host's address; here it is the fixture's 127.0.0.1. Patterns are compiled with
RE2, as Kafka 4.x does; a value matches only when the whole attribute matches (``Matcher.matches()``).
"""

from __future__ import annotations

import pytest
import re2

from quotaplane.errors import Errors
from quotaplane.kafka_uuid import random_uuid
from quotaplane.telemetry import ClientMetricsInstance, ClientMetricsInstanceMetadata, parse_subscription
from quotaplane.telemetry._subscription import Subscriptions

from .conftest import (
    CLIENT_ADDRESS,
    CLIENT_PORT,
    DEFAULT_INTERVAL_MS,
    START_MS,
    get_subscriptions,
    request_context,
    request_context_with_null_client_info,
)


def patterns(**regexes: str) -> dict:
    return {selector: re2.compile(regex) for selector, regex in regexes.items()}


@pytest.fixture
def uuid():
    return random_uuid()


@pytest.fixture
def metadata(uuid) -> ClientMetricsInstanceMetadata:
    return ClientMetricsInstanceMetadata.from_context(uuid, request_context())


@pytest.fixture
def instance(uuid, metadata: ClientMetricsInstanceMetadata) -> ClientMetricsInstance:
    # No subscription: Kafka's default interval of 5 minutes.
    resolved = Subscriptions().resolve(metadata)
    assert resolved.push_interval_ms == DEFAULT_INTERVAL_MS
    return ClientMetricsInstance(uuid, metadata, resolved, 0, "conn-1")


# --- ClientMetricsInstanceTest ------------------------------------------------------------------


def test_new_instance_state(instance: ClientMetricsInstance) -> None:
    assert instance.terminating is False
    assert instance.last_known_error == Errors.NONE
    assert instance.last_get_request_ms == instance.last_push_request_ms == 0
    assert instance.metrics == ()


def test_maybe_update_request_timestamp_valid(instance: ClientMetricsInstance) -> None:
    # The first requests are accepted.
    assert instance.maybe_update_get_request_timestamp(START_MS)
    assert instance.maybe_update_push_request_timestamp(START_MS)


def test_maybe_update_get_request_after_elapsed_time_valid(instance: ClientMetricsInstance) -> None:
    assert instance.maybe_update_get_request_timestamp(START_MS - DEFAULT_INTERVAL_MS)
    # A full interval since the last request.
    assert instance.maybe_update_get_request_timestamp(START_MS)
    assert instance.last_get_request_ms == START_MS


def test_maybe_update_get_request_with_immediate_retry_fail(instance: ClientMetricsInstance) -> None:
    assert instance.maybe_update_get_request_timestamp(START_MS)
    assert not instance.maybe_update_get_request_timestamp(START_MS)


def test_maybe_update_push_request_after_elapsed_time_valid(instance: ClientMetricsInstance) -> None:
    assert instance.maybe_update_push_request_timestamp(START_MS - DEFAULT_INTERVAL_MS)
    assert instance.maybe_update_push_request_timestamp(START_MS)


def test_maybe_update_get_request_with_immediate_retry_after_push_fail(instance: ClientMetricsInstance) -> None:
    assert instance.maybe_update_push_request_timestamp(START_MS)
    # A get counts the interval from the last push too.
    assert not instance.maybe_update_get_request_timestamp(START_MS + 1)


def test_maybe_update_push_request_with_immediate_retry_fail(instance: ClientMetricsInstance) -> None:
    assert instance.maybe_update_push_request_timestamp(START_MS)
    assert not instance.maybe_update_push_request_timestamp(START_MS)


def test_maybe_update_push_request_with_immediate_retry_after_get_valid(instance: ClientMetricsInstance) -> None:
    assert instance.maybe_update_push_request_timestamp(START_MS - DEFAULT_INTERVAL_MS)
    assert instance.maybe_update_get_request_timestamp(START_MS)
    # The push right after a get is accepted (clients jitter their first push).
    assert instance.maybe_update_push_request_timestamp(START_MS + 1)


def test_rejected_requests_do_not_move_the_timestamps(instance: ClientMetricsInstance) -> None:
    assert instance.maybe_update_push_request_timestamp(START_MS)
    assert not instance.maybe_update_push_request_timestamp(START_MS + 10)
    assert not instance.maybe_update_get_request_timestamp(START_MS + 20)
    assert (instance.last_get_request_ms, instance.last_push_request_ms) == (0, START_MS)
    assert instance.maybe_update_push_request_timestamp(START_MS + DEFAULT_INTERVAL_MS)


# --- ClientMetricsInstanceMetadataTest ---------------------------------------------------------


def test_is_match_valid(uuid, metadata: ClientMetricsInstanceMetadata) -> None:
    # No patterns match every client.
    assert metadata.is_match({})
    assert metadata.is_match(patterns(client_id=".*"))
    assert metadata.is_match(patterns(client_id="producer-1"))
    assert metadata.is_match(patterns(client_id="producer.*"))
    assert metadata.is_match(patterns(client_instance_id=str(uuid)))
    assert metadata.is_match(patterns(client_software_name="apache-kafka-java"))
    assert metadata.is_match(patterns(client_software_version="3.5.2"))
    assert metadata.is_match(patterns(client_source_address=CLIENT_ADDRESS))
    assert metadata.is_match(patterns(client_source_port=str(CLIENT_PORT)))


def test_is_match_multiple_pattern_valid(uuid, metadata: ClientMetricsInstanceMetadata) -> None:
    assert metadata.is_match(
        patterns(
            client_id="producer-1",
            client_instance_id=str(uuid),
            client_software_name="apache-kafka-.*",
            client_software_version="3.5.2",
            client_source_address=CLIENT_ADDRESS,
            client_source_port=str(CLIENT_PORT),
        )
    )


def test_is_match_mismatch_fail(uuid, metadata: ClientMetricsInstanceMetadata) -> None:
    matching = {
        "client_instance_id": str(uuid),
        "client_id": "producer-1",
        "client_software_name": "apache-kafka-.*",
        "client_software_version": "3.5.2",
        "client_source_address": CLIENT_ADDRESS,
        "client_source_port": str(CLIENT_PORT),
    }
    assert metadata.is_match(patterns(**matching))
    different = {
        "client_id": "producer-2",
        "client_instance_id": f"{uuid}random",
        "client_software_name": "apache-kafka-java-1",
        "client_software_version": "3.5.x",
        "client_source_address": "1.2.3.4",
        "client_source_port": "8080",
    }
    # One selector off at a time is enough to miss.
    for selector, regex in different.items():
        assert not metadata.is_match(patterns(**{**matching, selector: regex})), selector


def test_is_match_with_invalid_key_fail(metadata: ClientMetricsInstanceMetadata) -> None:
    assert not metadata.is_match({"unknown": re2.compile(".*")})
    # '*' is no selector.
    assert not metadata.is_match({"*": re2.compile(".*")})
    # principal is an attribute exporters see, but not one a subscription can select on.
    assert not metadata.is_match({"principal": re2.compile(".*")})


def test_is_match_with_null_value_fail(uuid) -> None:
    metadata = ClientMetricsInstanceMetadata.from_context(uuid, request_context_with_null_client_info())

    # A missing attribute matches nothing, not even ".*".
    assert not metadata.is_match(patterns(client_software_name=".*"))
    assert not metadata.is_match(patterns(client_software_version=".*"))
    assert metadata.is_match(patterns(client_id=".*"))


def test_missing_source_port_matches_nothing(uuid) -> None:
    metadata = ClientMetricsInstanceMetadata.from_context(uuid, request_context(client_source_port=None))

    assert not metadata.is_match(patterns(client_source_port=".*"))
    assert metadata.get("client_source_port") is None


def test_attributes_are_kafkas_attributes_map(uuid, metadata: ClientMetricsInstanceMetadata) -> None:
    assert metadata.attributes() == {
        "client_instance_id": str(uuid),
        "client_id": "producer-1",
        "client_software_name": "apache-kafka-java",
        "client_software_version": "3.5.2",
        "client_source_address": CLIENT_ADDRESS,
        "client_source_port": str(CLIENT_PORT),
    }


# --- matching through a subscription: anchored (full-match) semantics ----------------------------


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        ("client_id=producer-1", True),
        ("client_id=producer", False),  # a prefix is not a match
        ("client_id=roducer-1", False),  # nor a suffix
        ("client_id=duce", False),  # nor a substring
        ("client_id=^producer-1$", True),  # explicit anchors are harmless
        ("client_id=producer|producer-1", True),  # the alternative that covers the whole value wins
        ("client_id=producer-1|x", True),
        ("client_id=PRODUCER-1", False),  # case-sensitive
        ("client_id=(?i)PRODUCER-1", True),
        ("client_software_version=3.5", False),
        ("client_software_version=3.5.*", True),
        ("client_software_version=3\\.5\\.\\d+", True),
        ("client_source_address=127.0.0.1", True),
        ("client_source_address=127.0.0", False),
        ("client_source_port=56078", True),
        ("client_source_port=5607", False),
        ("client_id=", False),  # an empty regex matches only an empty value
    ],
)
def test_subscription_match_is_a_full_match(
    metadata: ClientMetricsInstanceMetadata, match: str, expected: bool
) -> None:
    info = parse_subscription("sub-1", {"match": match})

    assert info.is_match(metadata) is expected


def test_subscription_match_with_multiple_patterns_needs_all(metadata: ClientMetricsInstanceMetadata) -> None:
    both = parse_subscription("sub-1", {"match": "client_id=producer-.*, client_software_name=apache-kafka-java"})
    one_off = parse_subscription("sub-2", {"match": "client_id=producer-.*, client_software_name=librdkafka"})

    assert both.is_match(metadata)
    assert not one_off.is_match(metadata)


def test_subscription_selecting_a_missing_attribute_does_not_apply(make_manager) -> None:
    manager = make_manager()
    manager.update_subscription("java", {"metrics": "org.apache.kafka.", "match": "client_software_name=.*"})

    without_info = get_subscriptions(manager, context=request_context_with_null_client_info())
    with_info = get_subscriptions(manager, context=request_context())

    assert without_info.requested_metrics == ()
    assert with_info.requested_metrics == ("org.apache.kafka.",)


def test_client_instance_id_selector_targets_one_client(make_manager) -> None:
    # A client may bring its own id (a restarted client keeps it), so an operator can subscribe one client.
    manager = make_manager()
    target, other = random_uuid(), random_uuid()
    manager.update_subscription(
        "debug-one", {"metrics": "*", "interval.ms": "1000", "match": f"client_instance_id={target}"}
    )

    targeted = get_subscriptions(manager, START_MS, target)
    untargeted = get_subscriptions(manager, START_MS, other)

    assert targeted.client_instance_id == target
    assert (targeted.requested_metrics, targeted.push_interval_ms) == (("*",), 1000)
    assert (untargeted.requested_metrics, untargeted.push_interval_ms) == ((), DEFAULT_INTERVAL_MS)


def test_overlapping_subscriptions_union_metrics_and_take_the_smallest_interval(make_manager) -> None:
    manager = make_manager()
    manager.update_subscription("a", {"metrics": "org.apache.kafka.producer., x.", "interval.ms": "60000"})
    manager.update_subscription(
        "b", {"metrics": "x., org.apache.kafka.consumer.", "interval.ms": "5000", "match": "client_id=producer-1"}
    )
    manager.update_subscription("c", {"metrics": "never.", "interval.ms": "100", "match": "client_id=consumer-.*"})

    response = get_subscriptions(manager)

    assert sorted(response.requested_metrics) == ["org.apache.kafka.consumer.", "org.apache.kafka.producer.", "x."]
    assert response.push_interval_ms == 5000
