"""Kafka's ``ClientMetricsManagerTest`` ported, plus export, cache, expiry and eviction cases.

Ported from Kafka's trunk of October 2024 unless a case says "Kafka 4.x". How the port differs:

- Time is ``now_ms``; Kafka's ``MockTime`` never moved between requests unless slept, so requests
  in a "concurrent" case arrive at one ``now_ms`` and run one after the other (the manager owns no
  threads and no locks). The expiration timer is ``manager.expire(now_ms)``.
- Kafka pushes the bytes ``"test-data"`` to a receiver that never reads them; quotaplane decodes every
  payload, so the ports push a real OTLP ``MetricsData`` (``otlp_payload``).
- Kafka registers the throttle and plugin sensors per client instance (tagged client_instance_id) and
  counts its registry (12 metrics with one client, 20 with two, 4 after expiry). quotaplane keeps those
  sensors at fleet level, so the per-instance counts are asserted as fleet totals and the registry
  size is asserted to stay the same whatever the number of clients.
- Kafka's ``clientConnectionIdMap`` gets an entry per instance creation and keeps it; quotaplane maps
  each instance to the connection it was last seen on (see the connection cases at the end).
"""

from __future__ import annotations

import math

import pytest

from quotaplane.errors import Errors, InvalidRequestError
from quotaplane.kafka_uuid import ONE_UUID, ZERO_UUID, random_uuid
from quotaplane.telemetry import (
    ANONYMOUS_PRINCIPAL,
    OTLP_CONTENT_TYPE,
    ClientMetricsManager,
    CompressionType,
    compress,
    decode_metrics_data,
)
from quotaplane.telemetry._instance import ESTIMATED_INSTANCE_BYTES, ESTIMATED_LABELS_BYTES, Removal

from .conftest import (
    CLIENT_ADDRESS,
    CLIENT_ID,
    CLIENT_PORT,
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    DEFAULT_CLIENT_MATCH_PATTERNS,
    DEFAULT_INTERVAL_MS,
    DEFAULT_METRICS,
    DEFAULT_PUSH_INTERVAL_MS,
    START_MS,
    RecordingExporter,
    default_properties,
    get_subscriptions,
    metrics_data_payload,
    push,
    request_context,
)

ALL_METRICS_EVERY_100_MS = {"metrics": "*", "interval.ms": "100"}


def stat(manager: ClientMetricsManager, name: str, now_ms: int = START_MS) -> float:
    return manager.stats.value(name, now_ms)


def assert_no_export_recorded(manager: ClientMetricsManager) -> None:
    assert stat(manager, "plugin-export-count") == 0
    assert math.isnan(stat(manager, "plugin-export-time-avg"))
    assert math.isnan(stat(manager, "plugin-export-time-max"))


def assert_export_time_recorded(manager: ClientMetricsManager) -> None:
    # The stepping hi-res clock of the fixture makes every export take exactly 1 ms.
    assert stat(manager, "plugin-export-time-avg") == 1.0
    assert stat(manager, "plugin-export-time-max") == 1.0


# --- subscriptions -------------------------------------------------------------------------------


def test_update_subscription(manager: ClientMetricsManager) -> None:
    assert len(manager.subscriptions) == 0
    assert manager.subscriptions.version == 0

    manager.update_subscription("sub-1", default_properties())

    assert len(manager.subscriptions) == 1
    info = manager.subscriptions.get("sub-1")
    assert info is not None
    assert set(info.metrics) == set(DEFAULT_METRICS.split(","))
    assert len(info.metrics) == len(DEFAULT_METRICS.split(","))
    assert info.interval_ms == DEFAULT_PUSH_INTERVAL_MS
    assert len(info.match_patterns) == len(DEFAULT_CLIENT_MATCH_PATTERNS)
    for pattern in DEFAULT_CLIENT_MATCH_PATTERNS:
        selector, regex = pattern.split("=")
        assert info.match_patterns[selector].pattern == regex
    assert manager.subscriptions.version == 1
    # No instance is created by a subscription change.
    assert stat(manager, "instance-count") == 0
    assert manager.list_client_metrics_resources() == ["sub-1"]
    assert manager.describe_client_metrics_resource("sub-1") == default_properties()


def test_update_subscription_with_empty_properties(manager: ClientMetricsManager) -> None:
    manager.update_subscription("sub-1", {})
    # Nothing is added, and deleting what does not exist is no change.
    assert len(manager.subscriptions) == 0
    assert manager.subscriptions.version == 0


def test_update_subscription_with_null_properties(manager: ClientMetricsManager) -> None:
    # Kafka: NullPointerException. None is a programming error here too, and changes nothing.
    with pytest.raises(TypeError):
        manager.update_subscription("sub-1", None)  # type: ignore[arg-type]
    assert len(manager.subscriptions) == 0
    assert manager.subscriptions.version == 0


def test_update_subscription_with_invalid_metrics_properties(manager: ClientMetricsManager) -> None:
    with pytest.raises(InvalidRequestError):
        manager.update_subscription("sub-1", {"random": "random"})
    assert len(manager.subscriptions) == 0
    assert manager.subscriptions.version == 0


def test_update_subscription_with_properties_deletion(manager: ClientMetricsManager) -> None:
    manager.update_subscription("sub-1", {"interval.ms": "100"})
    assert len(manager.subscriptions) == 1
    assert manager.subscriptions.get("sub-1") is not None
    assert manager.subscriptions.version == 1

    # All configs removed: the subscription goes.
    manager.update_subscription("sub-1", {})
    assert len(manager.subscriptions) == 0
    assert manager.subscriptions.version == 2
    assert manager.describe_client_metrics_resource("sub-1") is None


def test_invalid_update_keeps_the_old_subscription(manager: ClientMetricsManager) -> None:
    manager.update_subscription("sub-1", default_properties())
    with pytest.raises(InvalidRequestError):
        manager.update_subscription("sub-1", {**default_properties(), "interval.ms": "10"})
    info = manager.subscriptions.get("sub-1")
    assert info is not None and info.interval_ms == DEFAULT_PUSH_INTERVAL_MS
    assert manager.subscriptions.version == 1


# --- GetTelemetrySubscriptions --------------------------------------------------------------------


def test_get_telemetry(manager: ClientMetricsManager) -> None:
    manager.update_subscription("sub-1", default_properties())

    response = get_subscriptions(manager)

    assert response.error_code == Errors.NONE
    assert response.client_instance_id != ZERO_UUID
    assert response.subscription_id != 0
    assert sorted(response.requested_metrics) == sorted(DEFAULT_METRICS.split(","))
    # In Kafka's order of preference.
    assert response.accepted_compression_types == (
        CompressionType.ZSTD,
        CompressionType.LZ4,
        CompressionType.GZIP,
        CompressionType.SNAPPY,
    )
    assert response.push_interval_ms == DEFAULT_PUSH_INTERVAL_MS
    assert response.delta_temporality is True
    assert response.telemetry_max_bytes == 100

    instance = manager.client_instance(response.client_instance_id)
    assert instance is not None
    assert instance.last_known_error == Errors.NONE
    assert instance.subscription_id == response.subscription_id
    assert stat(manager, "instance-count") == 1
    for meter in ("unknown-subscription-request", "throttle", "plugin-export", "plugin-error"):
        assert stat(manager, f"{meter}-count") == 0
        assert stat(manager, f"{meter}-rate") == 0
    assert_no_export_recorded(manager)


def test_get_telemetry_without_subscription(manager: ClientMetricsManager) -> None:
    response = get_subscriptions(manager)

    assert response.error_code == Errors.NONE
    assert response.client_instance_id != ZERO_UUID
    assert response.subscription_id != 0
    assert response.requested_metrics == ()
    assert len(response.accepted_compression_types) == 4
    assert response.push_interval_ms == DEFAULT_INTERVAL_MS
    assert response.delta_temporality is True
    assert response.telemetry_max_bytes == 100
    instance = manager.client_instance(response.client_instance_id)
    assert instance is not None
    assert instance.last_known_error == Errors.NONE


def test_get_telemetry_after_push_interval_time(manager: ClientMetricsManager) -> None:
    response = get_subscriptions(manager)
    assert response.error_code == Errors.NONE

    again = get_subscriptions(manager, START_MS + DEFAULT_INTERVAL_MS, response.client_instance_id)

    assert again.error_code == Errors.NONE
    assert again.client_instance_id == response.client_instance_id


def test_get_telemetry_all_metric_subscribed_subscription(manager: ClientMetricsManager) -> None:
    manager.update_subscription("sub-1", default_properties())
    manager.update_subscription("sub-2", {"metrics": "*"})
    assert len(manager.subscriptions) == 2

    response = get_subscriptions(manager)

    assert response.error_code == Errors.NONE
    assert response.subscription_id != 0
    assert response.requested_metrics == ("*",)
    assert len(response.accepted_compression_types) == 4
    # The smallest interval of the matching subscriptions (sub-2 has the 5-minute default).
    assert response.push_interval_ms == DEFAULT_PUSH_INTERVAL_MS
    assert response.delta_temporality is True
    assert response.telemetry_max_bytes == 100
    instance = manager.client_instance(response.client_instance_id)
    assert instance is not None and instance.last_known_error == Errors.NONE


def test_get_telemetry_same_client_immediate_retry_fail(manager: ClientMetricsManager) -> None:
    response = get_subscriptions(manager)
    assert response.error_code == Errors.NONE

    again = get_subscriptions(manager, START_MS, response.client_instance_id)

    assert again.error_code == Errors.THROTTLING_QUOTA_EXCEEDED
    assert stat(manager, "instance-count") == 1
    assert stat(manager, "throttle-count") == 1
    assert stat(manager, "throttle-rate") > 0


def test_get_telemetry_same_client_immediate_retry_after_push_fail(
    manager: ClientMetricsManager, make_manager, exporter: RecordingExporter, otlp_payload: bytes
) -> None:
    response = get_subscriptions(manager)
    assert response.error_code == Errors.NONE

    # A new server: no instance yet, but the subscription id it computes is the same, so the push is
    # accepted, and a get right after it is throttled.
    new_server = make_manager([exporter])
    pushed = push(new_server, response.client_instance_id, response.subscription_id, metrics=otlp_payload)
    assert pushed.error_code == Errors.NONE

    again = get_subscriptions(new_server, START_MS, response.client_instance_id)

    assert again.error_code == Errors.THROTTLING_QUOTA_EXCEEDED
    assert stat(new_server, "throttle-count") == 1
    assert stat(new_server, "throttle-rate") > 0


def test_get_telemetry_update_subscription(manager: ClientMetricsManager) -> None:
    manager.update_subscription("sub-1", default_properties())
    response = get_subscriptions(manager)
    assert response.error_code == Errors.NONE
    assert response.subscription_id != 0

    manager.update_subscription("sub-2", {"metrics": "*"})
    assert len(manager.subscriptions) == 2
    again = get_subscriptions(manager, START_MS, response.client_instance_id)

    # No throttle: the subscriptions changed, so the client gets the new one at once.
    assert again.error_code == Errors.NONE
    assert again.subscription_id != response.subscription_id
    assert again.requested_metrics == ("*",)


def test_get_telemetry_concurrent_request_new_client_instance(manager: ClientMetricsManager) -> None:
    # Kafka: two threads send the same get with a client-chosen id. Here: one after the other, same now_ms.
    client_instance_id = random_uuid()

    responses = [get_subscriptions(manager, START_MS, client_instance_id) for _ in range(2)]

    assert [r.error_code for r in responses] == [Errors.NONE, Errors.THROTTLING_QUOTA_EXCEEDED]
    # A non-zero id the client chose is kept, as Kafka does.
    assert responses[0].client_instance_id == client_instance_id
    assert stat(manager, "instance-count") == 1
    assert stat(manager, "throttle-count") == 1
    assert stat(manager, "throttle-rate") > 0


def test_get_telemetry_concurrent_request_after_subscription_update(manager: ClientMetricsManager) -> None:
    client_instance_id = random_uuid()
    first = get_subscriptions(manager, START_MS, client_instance_id)
    assert manager.client_instance(first.client_instance_id) is not None

    manager.update_subscription("sub-1", default_properties())
    responses = [get_subscriptions(manager, START_MS, client_instance_id) for _ in range(2)]

    # The first is re-evaluated and answered at once; the second is within the interval.
    assert [r.error_code for r in responses] == [Errors.NONE, Errors.THROTTLING_QUOTA_EXCEEDED]
    assert responses[0].subscription_id != first.subscription_id
    assert stat(manager, "throttle-count") == 1
    assert stat(manager, "throttle-rate") > 0


def test_get_telemetry_with_reserved_one_uuid_gets_a_fresh_id(manager: ClientMetricsManager) -> None:
    # quotaplane only: Kafka replaces just ZERO_UUID, and would then reject every push from ONE_UUID.
    response = get_subscriptions(manager, START_MS, ONE_UUID)

    assert response.error_code == Errors.NONE
    assert response.client_instance_id not in (ZERO_UUID, ONE_UUID)
    assert manager.client_instance(ONE_UUID) is None


# --- PushTelemetry -------------------------------------------------------------------------------


def test_push_telemetry(manager: ClientMetricsManager, exporter: RecordingExporter, otlp_payload: bytes) -> None:
    manager.update_subscription("sub-1", default_properties())
    sub = get_subscriptions(manager)
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None

    response = push(manager, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload)

    assert response.error_code == Errors.NONE
    assert instance.terminating is False
    assert instance.last_known_error == Errors.NONE
    assert len(exporter.exports) == 1
    assert stat(manager, "instance-count") == 1
    assert stat(manager, "unknown-subscription-request-count") == 0
    assert stat(manager, "throttle-count") == 0
    assert stat(manager, "plugin-export-count") == 1
    assert stat(manager, "plugin-export-rate") > 0
    assert stat(manager, "plugin-error-count") == 0
    assert stat(manager, "plugin-error-rate") == 0
    assert_export_time_recorded(manager)


def test_push_telemetry_on_new_server(
    manager: ClientMetricsManager, make_manager, exporter: RecordingExporter, otlp_payload: bytes
) -> None:
    sub = get_subscriptions(manager)
    new_server = make_manager([exporter])

    # No compression type set: NONE.
    response = push(new_server, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload)

    assert response.error_code == Errors.NONE
    assert stat(new_server, "instance-count") == 1
    assert stat(new_server, "unknown-subscription-request-count") == 0
    assert stat(new_server, "throttle-count") == 0
    assert stat(new_server, "plugin-export-count") == 1
    assert stat(new_server, "plugin-error-count") == 0
    assert_export_time_recorded(new_server)


def test_push_telemetry_after_push_interval_time(manager: ClientMetricsManager, otlp_payload: bytes) -> None:
    manager.update_subscription("sub-1", default_properties())
    sub = get_subscriptions(manager)

    first = push(manager, sub.client_instance_id, sub.subscription_id, START_MS, metrics=otlp_payload)
    second = push(
        manager, sub.client_instance_id, sub.subscription_id, START_MS + DEFAULT_PUSH_INTERVAL_MS, metrics=otlp_payload
    )

    assert first.error_code == Errors.NONE
    assert second.error_code == Errors.NONE


@pytest.mark.parametrize("client_instance_id", [None, ZERO_UUID], ids=["null", "zero"])
def test_push_telemetry_client_instance_id_invalid(manager: ClientMetricsManager, client_instance_id) -> None:
    response = push(manager, client_instance_id, 0)

    assert response.error_code == Errors.INVALID_REQUEST
    assert stat(manager, "instance-count") == 0


def test_push_telemetry_throttle_error(
    manager: ClientMetricsManager, exporter: RecordingExporter, otlp_payload: bytes
) -> None:
    sub = get_subscriptions(manager)

    # The push right after a get is accepted; the next one, within the interval, is not.
    first = push(manager, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload)
    second = push(manager, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload)

    assert first.error_code == Errors.NONE
    assert second.error_code == Errors.THROTTLING_QUOTA_EXCEEDED
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None
    assert instance.terminating is False
    assert instance.last_known_error == Errors.THROTTLING_QUOTA_EXCEEDED
    assert stat(manager, "throttle-count") == 1
    assert stat(manager, "throttle-rate") > 0
    assert stat(manager, "plugin-export-count") == 1
    assert stat(manager, "plugin-error-count") == 0
    assert len(exporter.exports) == 1
    assert_export_time_recorded(manager)


def test_push_telemetry_terminating_flag(
    manager: ClientMetricsManager, exporter: RecordingExporter, otlp_payload: bytes
) -> None:
    sub = get_subscriptions(manager)
    first = push(manager, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload)
    assert first.error_code == Errors.NONE

    # A terminating push is never throttled: the client is closing and sends its last metrics.
    last = push(manager, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload, terminating=True)

    assert last.error_code == Errors.NONE
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None
    assert instance.terminating is True
    assert instance.last_known_error == Errors.NONE
    assert stat(manager, "plugin-export-count") == 2
    assert stat(manager, "plugin-export-rate") > 0
    assert stat(manager, "plugin-error-count") == 0
    assert [p.is_terminating for p in exporter.payloads] == [False, True]
    assert_export_time_recorded(manager)


def test_push_telemetry_next_request_post_terminating_flag(manager: ClientMetricsManager) -> None:
    sub = get_subscriptions(manager)
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None

    first = push(manager, sub.client_instance_id, sub.subscription_id, terminating=True)
    assert first.error_code == Errors.NONE
    assert instance.terminating is True
    assert instance.last_known_error == Errors.NONE

    second = push(manager, sub.client_instance_id, sub.subscription_id, terminating=True)

    assert second.error_code == Errors.INVALID_REQUEST
    assert instance.terminating is True
    assert instance.last_known_error == Errors.INVALID_REQUEST


def test_push_telemetry_subscription_id_invalid(manager: ClientMetricsManager, otlp_payload: bytes) -> None:
    sub = get_subscriptions(manager)
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None

    response = push(manager, sub.client_instance_id, 1234, metrics=otlp_payload)

    assert response.error_code == Errors.UNKNOWN_SUBSCRIPTION_ID
    assert instance.terminating is False
    assert instance.last_known_error == Errors.UNKNOWN_SUBSCRIPTION_ID
    assert stat(manager, "unknown-subscription-request-count") == 1
    assert stat(manager, "plugin-error-count") == 0
    assert_no_export_recorded(manager)


def test_push_telemetry_compression_type_invalid(manager: ClientMetricsManager) -> None:
    sub = get_subscriptions(manager)
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None

    response = push(manager, sub.client_instance_id, sub.subscription_id, compression_type=100)

    assert response.error_code == Errors.UNSUPPORTED_COMPRESSION_TYPE
    assert instance.terminating is False
    assert instance.last_known_error == Errors.UNSUPPORTED_COMPRESSION_TYPE


def test_push_telemetry_null_metrics_data(manager: ClientMetricsManager, exporter: RecordingExporter) -> None:
    sub = get_subscriptions(manager)
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None

    # No metrics (null or empty on the wire): accepted, nothing exported.
    response = push(manager, sub.client_instance_id, sub.subscription_id, metrics=b"")

    assert response.error_code == Errors.NONE
    assert instance.terminating is False
    assert instance.last_known_error == Errors.NONE
    assert exporter.exports == []
    assert stat(manager, "instance-count") == 1
    assert stat(manager, "plugin-error-count") == 0
    assert_no_export_recorded(manager)


def test_push_telemetry_metrics_too_large(make_manager, exporter: RecordingExporter) -> None:
    # Kafka builds this manager with telemetry.max.bytes 1 to force the error.
    manager = make_manager([exporter], telemetry_max_bytes=1)
    sub = get_subscriptions(manager)
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None

    response = push(manager, sub.client_instance_id, sub.subscription_id, metrics=b"ab")

    assert response.error_code == Errors.TELEMETRY_TOO_LARGE
    assert instance.terminating is False
    assert instance.last_known_error == Errors.TELEMETRY_TOO_LARGE
    assert exporter.exports == []


def test_push_telemetry_concurrent_request_new_client_instance(
    manager: ClientMetricsManager, make_manager, exporter: RecordingExporter, otlp_payload: bytes
) -> None:
    sub = get_subscriptions(manager)
    new_server = make_manager([exporter])

    responses = [push(new_server, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload) for _ in range(2)]

    assert sorted(r.error_code for r in responses) == [Errors.NONE, Errors.THROTTLING_QUOTA_EXCEEDED]
    assert stat(new_server, "throttle-count") == 1
    assert stat(new_server, "throttle-rate") > 0
    assert stat(new_server, "plugin-export-count") == 1
    assert stat(new_server, "plugin-error-count") == 0
    assert_export_time_recorded(new_server)


def test_push_telemetry_concurrent_request_after_subscription_update(
    manager: ClientMetricsManager, otlp_payload: bytes
) -> None:
    sub = get_subscriptions(manager, context=request_context("conn-a"))
    assert manager.client_instance(sub.client_instance_id) is not None

    manager.update_subscription("sub-1", default_properties())
    responses = [
        push(manager, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload, context=request_context(conn))
        for conn in ("conn-b", "conn-c")
    ]

    # The first is re-evaluated (a new subscription id, so the old one is unknown); the second is
    # within the interval of the first.
    assert [r.error_code for r in responses] == [Errors.UNKNOWN_SUBSCRIPTION_ID, Errors.THROTTLING_QUOTA_EXCEEDED]
    assert stat(manager, "unknown-subscription-request-count") == 1
    assert stat(manager, "unknown-subscription-request-rate") > 0
    assert stat(manager, "throttle-count") == 1
    assert stat(manager, "throttle-rate") > 0
    assert stat(manager, "plugin-error-count") == 0
    assert_no_export_recorded(manager)
    # Kafka keeps a map entry for conn-a (the get) and conn-b (the re-evaluation), since each of its
    # requests came on a fresh connection. quotaplane maps the instance to the connection it was last
    # seen on (every request counts, the throttled one included).
    assert manager.instances.connection_instance("conn-a") is None
    assert manager.instances.connection_instance("conn-b") is None
    assert manager.instances.connection_instance("conn-c") == sub.client_instance_id


def test_push_telemetry_plugin_exception(make_manager, otlp_payload: bytes) -> None:
    failing = RecordingExporter(fail_with=RuntimeError("test exception"))
    manager = make_manager([failing])
    manager.update_subscription("sub-1", default_properties())
    sub = get_subscriptions(manager)
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None

    response = push(manager, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload)

    assert response.error_code == Errors.INVALID_RECORD
    assert instance.terminating is False
    assert instance.last_known_error == Errors.INVALID_RECORD
    assert stat(manager, "unknown-subscription-request-count") == 0
    assert stat(manager, "throttle-count") == 0
    assert stat(manager, "plugin-error-count") == 1
    assert stat(manager, "plugin-error-rate") > 0
    assert_no_export_recorded(manager)


# --- export: the payload exporters get ---------------------------------------------------------


def _resource_attributes(payload) -> list[tuple[str, str]]:
    (resource_metrics,) = payload.metrics_data.resource_metrics
    return [(kv.key, kv.value.string_value) for kv in resource_metrics.resource.attributes]


def test_broker_resource_attributes_reach_exporters(make_manager, otlp_payload: bytes) -> None:
    exporters = [RecordingExporter(), RecordingExporter()]
    manager = make_manager(exporters, node_id=7)
    manager.update_subscription("sub-1", default_properties())
    context = request_context(principal="User:alice")
    sub = get_subscriptions(manager, context=context)

    response = push(
        manager, sub.client_instance_id, sub.subscription_id, START_MS + 5, metrics=otlp_payload, context=context
    )

    assert response.error_code == Errors.NONE
    ((telemetry_context, payload),) = exporters[0].exports
    # Every exporter gets the one payload.
    assert exporters[1].exports == [(telemetry_context, payload)]
    expected = {
        "client_instance_id": str(sub.client_instance_id),
        "client_id": CLIENT_ID,
        "client_software_name": CLIENT_SOFTWARE_NAME,
        "client_software_version": CLIENT_SOFTWARE_VERSION,
        "client_source_address": CLIENT_ADDRESS,
        "client_source_port": str(CLIENT_PORT),
        "principal": "User:alice",
        "node_id": "7",
    }
    attributes = _resource_attributes(payload)
    # The client said client_id "fake"; the broker's value replaces it, and appears once.
    assert [key for key, _ in attributes].count("client_id") == 1
    assert dict(attributes) == expected
    assert dict(payload.resource_attributes) == expected
    # ``data`` is what the client sent (decompressed), without the broker's attributes.
    assert payload.data == otlp_payload
    assert dict(_resource_attributes_of(payload.data)) == {"client_id": "fake"}
    assert payload.client_instance_id == sub.client_instance_id
    assert payload.content_type == OTLP_CONTENT_TYPE
    assert payload.is_terminating is False
    assert payload.compression_type == CompressionType.NONE
    assert payload.compressed_size == len(otlp_payload)
    assert telemetry_context.push_interval_ms == DEFAULT_PUSH_INTERVAL_MS
    assert telemetry_context.request_context == context
    assert telemetry_context.received_ms == START_MS + 5
    assert telemetry_context.node_id == 7
    assert stat(manager, "plugin-export-count") == 1


def _resource_attributes_of(data: bytes) -> list[tuple[str, str]]:
    decoded = decode_metrics_data(data)
    return [(kv.key, kv.value.string_value) for rm in decoded.resource_metrics for kv in rm.resource.attributes]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.kafka_name)
def test_exporters_get_the_decompressed_payload(make_manager, codec: CompressionType) -> None:
    exporter = RecordingExporter()
    manager = make_manager([exporter], telemetry_max_bytes=4096)
    raw = metrics_data_payload()
    compressed = compress(codec, raw)
    sub = get_subscriptions(manager)

    response = push(manager, sub.client_instance_id, sub.subscription_id, metrics=compressed, compression_type=codec)

    assert response.error_code == Errors.NONE
    (payload,) = exporter.payloads
    assert payload.data == raw
    assert payload.compression_type == codec
    assert payload.compressed_size == len(compressed)
    assert dict(_resource_attributes(payload))["client_id"] == CLIENT_ID


def test_anonymous_client_without_software_info_is_labelled_with_what_is_known(make_manager) -> None:
    exporter = RecordingExporter()
    manager = make_manager([exporter])
    context = request_context(client_software_name=None, client_software_version=None, client_source_port=None)
    sub = get_subscriptions(manager, context=context)

    response = push(
        manager, sub.client_instance_id, sub.subscription_id, metrics=metrics_data_payload(), context=context
    )

    assert response.error_code == Errors.NONE
    attributes = dict(_resource_attributes(exporter.payloads[0]))
    assert attributes["principal"] == ANONYMOUS_PRINCIPAL
    assert "client_software_name" not in attributes
    assert "client_software_version" not in attributes
    assert "client_source_port" not in attributes


def test_failing_exporter_gives_invalid_record_and_counts_a_plugin_error(make_manager, otlp_payload: bytes) -> None:
    failing = RecordingExporter(fail_with=ValueError("disk full"))
    manager = make_manager([failing])
    sub = get_subscriptions(manager)

    response = push(manager, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload)

    assert response.error_code == Errors.INVALID_RECORD
    assert response.error_message == "disk full"
    assert stat(manager, "plugin-error-count") == 1
    assert stat(manager, "plugin-export-count") == 0
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None and instance.last_known_error == Errors.INVALID_RECORD


def test_close_closes_every_exporter_and_unregisters_the_metrics() -> None:
    class FailingClose(RecordingExporter):
        def close(self) -> None:
            raise RuntimeError("cannot close")

    exporters = [FailingClose(), RecordingExporter()]
    manager = ClientMetricsManager(exporters=exporters, now_ms=START_MS)

    manager.close()

    # One exporter failing to close does not keep the next one open.
    assert exporters[1].closed
    assert [n for n in manager.metrics.metrics if n.group == "client-metrics"] == []


def test_stats_are_fleet_level_not_per_instance(manager: ClientMetricsManager, otlp_payload: bytes) -> None:
    # Kafka: 4 metrics before any client, 12 with one, 20 with two, 4 again after expiry.
    registered = len(manager.metrics.metrics)

    subs = [get_subscriptions(manager) for _ in range(2)]
    for sub in subs:
        push(manager, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload)

    # one counter more: pushes by client software (quotaplane's), shared by both clients of the same software
    assert len(manager.metrics.metrics) == registered + 1
    assert stat(manager, "instance-count") == 2
    assert stat(manager, "plugin-export-count") == 2
    assert stat(manager, "push-count") == 2
    manager.expire(START_MS + 3 * DEFAULT_INTERVAL_MS)
    assert len(manager.metrics.metrics) == registered + 1
    assert stat(manager, "instance-count") == 0


# --- cache: expiry, re-evaluation, eviction, disconnect -----------------------------------------


def test_cache_eviction(manager: ClientMetricsManager) -> None:
    manager.update_subscription("sub-1", ALL_METRICS_EVERY_100_MS)
    response = get_subscriptions(manager)
    assert response.error_code == Errors.NONE
    assert stat(manager, "instance-count") == 1
    assert manager.instances.connection_instance("conn-1") == response.client_instance_id

    # Expiry is max(cache expiry 100 ms, 3 x 100 ms) = 300 ms after the last request.
    assert manager.expire(START_MS + 299) == []
    assert manager.expire(START_MS + 300) == [Removal(response.client_instance_id, "expired")]

    assert manager.client_instance(response.client_instance_id) is None
    assert stat(manager, "instance-count") == 0
    assert manager.instances.connection_instance("conn-1") is None
    assert manager.instances.expirations == 1


def test_cache_eviction_with_multiple_clients(manager: ClientMetricsManager) -> None:
    manager.update_subscription("sub-1", ALL_METRICS_EVERY_100_MS)
    first = get_subscriptions(manager, context=request_context("conn-1"))
    second = get_subscriptions(manager, context=request_context("conn-2"))
    assert first.error_code == second.error_code == Errors.NONE
    assert first.client_instance_id != second.client_instance_id
    assert stat(manager, "instance-count") == 2

    removed = manager.expire(START_MS + 300)

    assert {r.client_instance_id for r in removed} == {first.client_instance_id, second.client_instance_id}
    assert stat(manager, "instance-count") == 0
    assert manager.instances.connection_instance("conn-1") is None
    assert manager.instances.connection_instance("conn-2") is None


def test_cache_expiration_task_cancelled_on_instance_update(manager: ClientMetricsManager) -> None:
    response = get_subscriptions(manager, context=request_context("conn-1"))
    old = manager.client_instance(response.client_instance_id)
    assert old is not None
    # No subscription: the 5-minute interval, so 15 minutes of idleness to expire.
    assert old.expires_at_ms == START_MS + 3 * DEFAULT_INTERVAL_MS

    manager.update_subscription("sub-1", default_properties())
    again = get_subscriptions(manager, START_MS + 1, response.client_instance_id, request_context("conn-1"))

    assert again.error_code == Errors.NONE
    assert again.subscription_id != response.subscription_id
    new = manager.client_instance(response.client_instance_id)
    assert new is not None and new is not old
    assert len(manager.instances) == 1
    assert stat(manager, "instance-count") == 1
    assert manager.instances.connection_instance("conn-1") == response.client_instance_id
    # Only the new instance's expiry is pending: 3 x 30 s after the second get.
    assert manager.expire(START_MS + 3 * DEFAULT_PUSH_INTERVAL_MS) == []
    assert manager.expire(START_MS + 1 + 3 * DEFAULT_PUSH_INTERVAL_MS) == [
        Removal(response.client_instance_id, "expired")
    ]
    assert manager.expire(START_MS + 3 * DEFAULT_INTERVAL_MS) == []


def test_expiry_is_the_cache_expiry_when_longer_than_three_intervals(make_manager) -> None:
    manager = make_manager(cache_expiry_ms=10_000)
    manager.update_subscription("sub-1", ALL_METRICS_EVERY_100_MS)
    response = get_subscriptions(manager)

    assert manager.expire(START_MS + 9_999) == []
    assert [r.client_instance_id for r in manager.expire(START_MS + 10_000)] == [response.client_instance_id]


def test_expiry_counts_from_the_last_request_even_a_throttled_one(manager: ClientMetricsManager) -> None:
    # As Kafka, which re-arms the timer before validating: any request shows the client is alive.
    manager.update_subscription("sub-1", ALL_METRICS_EVERY_100_MS)
    response = get_subscriptions(manager)
    sub_id = response.subscription_id
    assert push(manager, response.client_instance_id, sub_id, START_MS + 200).error_code == Errors.NONE
    throttled = push(manager, response.client_instance_id, sub_id, START_MS + 250)
    assert throttled.error_code == Errors.THROTTLING_QUOTA_EXCEEDED

    assert manager.expire(START_MS + 549) == []
    assert [r.reason for r in manager.expire(START_MS + 550)] == ["expired"]


def test_subscription_change_re_evaluates_the_client(manager: ClientMetricsManager, otlp_payload: bytes) -> None:
    manager.update_subscription("sub-1", default_properties())
    sub = get_subscriptions(manager)
    assert (
        push(manager, sub.client_instance_id, sub.subscription_id, START_MS + 1, metrics=otlp_payload).error_code == 0
    )

    manager.update_subscription("sub-1", {**default_properties(), "interval.ms": "60000"})
    # The client's next push carries the old id: UNKNOWN_SUBSCRIPTION_ID, whatever the interval ...
    stale = push(manager, sub.client_instance_id, sub.subscription_id, START_MS + 2, metrics=otlp_payload)
    assert stale.error_code == Errors.UNKNOWN_SUBSCRIPTION_ID
    # ... and then it may ask for the new subscription at once.
    renewed = get_subscriptions(manager, START_MS + 3, sub.client_instance_id)
    assert renewed.error_code == Errors.NONE
    assert renewed.subscription_id not in (0, sub.subscription_id)
    assert renewed.push_interval_ms == 60_000
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None and instance.subscription_id == renewed.subscription_id
    assert instance.subscription_version == manager.subscriptions.version
    # As in Kafka 4.x, that exempted get does not count as a get for the push gate: the failed push
    # used the interval, so the next push is due one interval after it.
    assert instance.last_get_request_ms == 0
    early = push(manager, sub.client_instance_id, renewed.subscription_id, START_MS + 4, metrics=otlp_payload)
    assert early.error_code == Errors.THROTTLING_QUOTA_EXCEEDED
    on_time = push(
        manager, sub.client_instance_id, renewed.subscription_id, START_MS + 2 + 60_000, metrics=otlp_payload
    )
    assert on_time.error_code == Errors.NONE


def test_deleting_a_subscription_re_evaluates_and_deleting_an_unknown_one_does_not(
    manager: ClientMetricsManager,
) -> None:
    manager.update_subscription("sub-1", default_properties())
    sub = get_subscriptions(manager)
    version = manager.subscriptions.version

    assert manager.delete_subscription("nope") is False
    assert manager.subscriptions.version == version
    # Unchanged subscriptions: a second get is throttled as usual.
    assert get_subscriptions(manager, START_MS + 1, sub.client_instance_id).error_code == (
        Errors.THROTTLING_QUOTA_EXCEEDED
    )

    assert manager.delete_subscription("sub-1") is True
    renewed = get_subscriptions(manager, START_MS + 2, sub.client_instance_id)
    assert renewed.error_code == Errors.NONE
    assert renewed.requested_metrics == ()
    assert renewed.push_interval_ms == DEFAULT_INTERVAL_MS


def test_remove_connection(manager: ClientMetricsManager) -> None:
    response = get_subscriptions(manager, context=request_context("conn-1"))
    assert manager.client_instance(response.client_instance_id) is not None
    assert manager.instances.connection_instance("conn-1") == response.client_instance_id
    assert stat(manager, "instance-count") == 1

    assert manager.on_disconnect("conn-1") is True

    assert manager.client_instance(response.client_instance_id) is None
    assert manager.instances.connection_instance("conn-1") is None
    assert stat(manager, "instance-count") == 0
    # Nothing is left to expire.
    assert manager.expire(START_MS + 3 * DEFAULT_INTERVAL_MS) == []


def test_remove_connection_unknown_connection_id(manager: ClientMetricsManager) -> None:
    response = get_subscriptions(manager, context=request_context("conn-1"))

    assert manager.on_disconnect("conn-2") is False

    assert manager.client_instance(response.client_instance_id) is not None
    assert manager.instances.connection_instance("conn-1") == response.client_instance_id
    assert stat(manager, "instance-count") == 1


def test_disconnect_follows_the_client_to_its_new_connection(manager: ClientMetricsManager, otlp_payload) -> None:
    # quotaplane only: Kafka maps only the connection an instance was created on, so closing that old
    # connection evicts a client that has since moved to a new one.
    sub = get_subscriptions(manager, context=request_context("conn-1"))
    push(manager, sub.client_instance_id, sub.subscription_id, metrics=otlp_payload, context=request_context("conn-2"))

    assert manager.on_disconnect("conn-1") is False
    assert manager.client_instance(sub.client_instance_id) is not None
    assert manager.on_disconnect("conn-2") is True
    assert manager.client_instance(sub.client_instance_id) is None


def test_memory_budget_evicts_the_least_recently_used(make_manager, otlp_payload: bytes) -> None:
    # Connection ids of one length, so every instance costs the same; a push adds its labels (one size for all).
    per_instance = ESTIMATED_INSTANCE_BYTES + len("conn-1") + len(CLIENT_ID) + len(CLIENT_ADDRESS)
    probe = make_manager()
    first = get_subscriptions(probe, START_MS, context=request_context("conn-9"))
    push(probe, first.client_instance_id, first.subscription_id, START_MS + 1, metrics=otlp_payload)
    labels = probe.client_instance(first.client_instance_id).labels_bytes
    assert labels > ESTIMATED_LABELS_BYTES and probe.instances.bytes_used == per_instance + labels
    manager = make_manager(memory_budget_bytes=3 * per_instance + labels)
    a, b, c = (get_subscriptions(manager, START_MS + i, context=request_context(f"conn-{i + 1}")) for i in range(3))
    assert manager.instances.bytes_used == 3 * per_instance
    # a is used again (its push right after its get), so b is now the least recently used.
    touched = push(manager, a.client_instance_id, a.subscription_id, START_MS + 3, metrics=otlp_payload)
    assert touched.error_code == Errors.NONE
    assert manager.client_instance(a.client_instance_id).labels_bytes == labels  # its labels, built on its push
    assert manager.instances.bytes_used == 3 * per_instance + labels and manager.instances.evictions == 0

    d = get_subscriptions(manager, START_MS + 4, context=request_context("conn-4"))

    assert d.error_code == Errors.NONE
    assert manager.instances.evictions == 1
    assert manager.client_instance(b.client_instance_id) is None
    assert manager.instances.connection_instance("conn-2") is None
    for survivor in (a, c, d):
        assert manager.client_instance(survivor.client_instance_id) is not None
    assert manager.instances.bytes_used <= 3 * per_instance + labels
    assert stat(manager, "instance-count") == 3

    # The evicted client loses nothing: its next push recreates it with the same subscription id, which evicts
    # c (now the least recently used), and its labels then take a's room too (a, d: a is the older).
    back = push(
        manager,
        b.client_instance_id,
        b.subscription_id,
        START_MS + 5,
        metrics=otlp_payload,
        context=request_context("conn-2"),
    )
    assert back.error_code == Errors.NONE
    assert manager.instances.evictions == 3
    assert manager.client_instance(c.client_instance_id) is None
    assert manager.client_instance(a.client_instance_id) is None
    assert manager.client_instance(d.client_instance_id) is not None
    assert manager.instances.bytes_used == 2 * per_instance + labels <= 3 * per_instance + labels
