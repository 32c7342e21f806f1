"""Pushes counted by the client software they come from (quotaplane's ``push-count`` / ``push-error-count``,
tagged ``client_software_name`` / ``client_software_version`` / ``error``): what the dashboard's "by client
software" panels read."""

from __future__ import annotations

from quotaplane.errors import Errors
from quotaplane.kafka_uuid import ONE_UUID
from quotaplane.metrics import MetricName
from quotaplane.telemetry import ClientMetricsManager
from quotaplane.telemetry import _stats as stats_module

from .conftest import (
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    START_MS,
    get_subscriptions,
    push,
    request_context,
)

ALL_EVERY_100_MS = {"metrics": "*", "interval.ms": "100"}


def counts(manager: ClientMetricsManager) -> dict[tuple[str, ...], float]:
    """``(metric name, software name, version[, error]) -> count`` of the push counters."""
    out = {}
    for name, metric in manager.metrics.metrics.items():
        assert isinstance(name, MetricName)
        if name.group == "client-metrics" and name.name in ("push-count", "push-error-count"):
            tags = name.tags
            key = (name.name, tags["client_software_name"], tags["client_software_version"])
            out[(*key, tags["error"]) if "error" in tags else key] = metric.measurable_value(START_MS)
    return out


def test_pushes_are_counted_by_software_and_outcome(manager: ClientMetricsManager, otlp_payload: bytes) -> None:
    manager.update_subscription("all", ALL_EVERY_100_MS)
    librdkafka = request_context("conn-2", client_software_name="librdkafka", client_software_version="2.6.0")
    java = request_context()  # the conftest's apache-kafka-java client
    bare = request_context("conn-3", client_software_name=None, client_software_version=None)

    rd = get_subscriptions(manager, context=librdkafka)
    jv = get_subscriptions(manager, context=java)
    nb = get_subscriptions(manager, context=bare)
    assert (
        push(manager, rd.client_instance_id, rd.subscription_id, metrics=otlp_payload, context=librdkafka).error_code
        == 0
    )
    # too early for the java client's second push: THROTTLING_QUOTA_EXCEEDED, counted as its error
    assert push(manager, jv.client_instance_id, jv.subscription_id, metrics=otlp_payload, context=java).error_code == 0
    too_soon = push(manager, jv.client_instance_id, jv.subscription_id, START_MS + 1, context=java)
    assert too_soon.error_code == Errors.THROTTLING_QUOTA_EXCEEDED
    wrong_id = push(manager, rd.client_instance_id, rd.subscription_id + 1, START_MS + 200, context=librdkafka)
    assert wrong_id.error_code == Errors.UNKNOWN_SUBSCRIPTION_ID
    assert push(manager, ONE_UUID, 0, context=librdkafka).error_code == Errors.INVALID_REQUEST  # reserved id
    assert push(manager, nb.client_instance_id, nb.subscription_id, context=bare).error_code == 0

    assert counts(manager) == {
        ("push-count", "librdkafka", "2.6.0"): 1.0,
        ("push-count", CLIENT_SOFTWARE_NAME, CLIENT_SOFTWARE_VERSION): 1.0,
        ("push-error-count", CLIENT_SOFTWARE_NAME, CLIENT_SOFTWARE_VERSION, "THROTTLING_QUOTA_EXCEEDED"): 1.0,
        ("push-error-count", "librdkafka", "2.6.0", "UNKNOWN_SUBSCRIPTION_ID"): 1.0,
        ("push-error-count", "librdkafka", "2.6.0", "INVALID_REQUEST"): 1.0,
        ("push-count", "unknown", "unknown"): 1.0,  # Kafka's name for software a client did not announce
    }


def test_distinct_software_is_bounded(monkeypatch, manager: ClientMetricsManager) -> None:
    """A client inventing a version per connection cannot grow the registry: past the bound, ``(other)``."""
    monkeypatch.setattr(stats_module, "MAX_SOFTWARE", 3)
    manager.update_subscription("all", ALL_EVERY_100_MS)
    for i in range(6):
        context = request_context(f"conn-{i}", client_software_name="fuzzer", client_software_version=f"1.{i}")
        sub = get_subscriptions(manager, context=context)
        assert push(manager, sub.client_instance_id, sub.subscription_id, context=context).error_code == 0
    assert counts(manager) == {
        ("push-count", "fuzzer", "1.0"): 1.0,
        ("push-count", "fuzzer", "1.1"): 1.0,
        ("push-count", "fuzzer", "1.2"): 1.0,
        ("push-count", "(other)", "(other)"): 3.0,
    }
    manager.close()
    assert counts(manager) == {}  # unregistered with the rest of the group
