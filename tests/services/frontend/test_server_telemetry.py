"""KIP-714 through the frontend of a running ``quotaplane up`` with real librdkafka clients (no mocks).

A confluent-kafka Producer and Consumer with ``enable.metrics.push=true`` bootstrap from the frontend,
learn it as their broker, subscribe and push; the pushes are read back from the telemetry archive the
shards write. The Consumer cannot consume (there is no data plane: FindCoordinator is not offered), but
its telemetry runs on its own, as section L of the Kafka notes says.

Clients run in child processes (librdkafka may abort a process on a malformed response, which must
fail the test, not kill pytest). Each closes right after a push was answered (it waits for librdkafka's
"PushTelemetryRequest succeeded" log line), because librdkafka skips the terminating push when close()
lands while a regular push is in flight.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import confluent_kafka
import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from quotaplane.kafka_uuid import ZERO_UUID
from quotaplane.protocol import (
    ApiVersionsRequest,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
)

from .conftest import Running, WireClient, wait_until

SUBSCRIPTION = "frontend-test"
BROKER_LABELS = {
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
    "principal",
    "node_id",
}

CLIENT = textwrap.dedent(
    """
    import logging, sys, threading, time
    from confluent_kafka import Consumer, Producer

    kind, port, seconds, client_id = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    answered = []

    class Pushes(logging.Handler):
        def emit(self, record):
            if "PushTelemetryRequest succeeded" in record.getMessage():
                answered.append(time.monotonic())

    logger = logging.getLogger("rdkafka")
    logger.addHandler(Pushes())
    logger.setLevel(logging.DEBUG)
    config = {"bootstrap.servers": "127.0.0.1:" + port, "client.id": client_id, "enable.metrics.push": True,
              "debug": "telemetry", "logger": logger}
    if kind == "consumer":
        client = Consumer({**config, "group.id": "qp-frontend-test", "session.timeout.ms": 6000})
        client.subscribe(["qp-frontend-topic"])
        step = lambda: client.poll(0.05)
    else:
        client = Producer(config)
        step = lambda: client.poll(0.05)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        step()
    # close right after a push was answered, so the terminating push is not skipped
    seen = len(answered)
    deadline = time.monotonic() + 5
    while len(answered) == seen and time.monotonic() < deadline:
        step()
    if kind == "consumer":
        client.close()
    else:
        client.flush(1)
        del client
    print("pushes answered", len(answered), flush=True)
    """
)


def start_client(running: Running, kind: str, seconds: float, client_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CLIENT, kind, str(running.port), str(seconds), client_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout_s: float = 60) -> str:
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    assert process.returncode == 0, f"client failed ({process.returncode}): {stderr[-3000:]}"
    return stdout


def by_client(records: list[Any], client_id: str) -> list[Any]:
    return [r for r in records if r.labels.get("client_id") == client_id]


def metric_names_and_temporalities(record: Any) -> tuple[set[str], set[int]]:
    data = metrics_pb2.MetricsData.FromString(record.body)
    names, temporalities = set(), set()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                names.add(metric.name)
                kind = metric.WhichOneof("data")
                if kind in ("sum", "histogram"):
                    temporalities.add(getattr(metric, kind).aggregation_temporality)
    return names, temporalities


@pytest.fixture(scope="module")
def subscribed(running: Running) -> Running:
    running.cli(
        "client-metrics", "--alter", "--name", SUBSCRIPTION, "--metrics", "org.apache.kafka.", "--interval", "1000"
    )
    running.cluster.wait_caught_up(timeout_s=30)
    return running


def test_producer_and_consumer_push_through_the_frontend_to_the_archive(subscribed: Running) -> None:
    running = subscribed
    producer = start_client(running, "producer", 2.5, "qp-producer")
    consumer = start_client(running, "consumer", 2.5, "qp-consumer")
    assert "pushes answered" in finish(producer)
    assert "pushes answered" in finish(consumer)

    def both_terminated() -> list[Any] | None:
        records = running.archived()
        done = all(
            any(r.labels.get("terminating") == "true" for r in by_client(records, c))
            for c in ("qp-producer", "qp-consumer")
        )
        return records if done else None

    records = wait_until(both_terminated) or running.archived()
    expected = {"qp-producer": "org.apache.kafka.producer.", "qp-consumer": "org.apache.kafka.consumer."}
    for client_id, prefix in expected.items():
        mine = by_client(records, client_id)
        assert len(mine) >= 2, (client_id, [r.labels for r in records])
        instance_ids = {r.labels["client_instance_id"] for r in mine}
        assert len(instance_ids) == 1  # one client instance, one id, across its reconnect to the learned broker
        for record in mine:
            labels = record.labels
            assert set(labels) >= BROKER_LABELS, labels
            assert labels["client_software_name"] == "confluent-kafka-python"
            assert labels["client_software_version"].startswith(confluent_kafka.version()[0])
            assert labels["client_source_address"] == "127.0.0.1"
            assert 0 < int(labels["client_source_port"]) < 65536
            assert labels["principal"] == "User:ANONYMOUS"
            assert labels["push_interval_ms"] == "1000"
        names: set[str] = set()
        temporalities: set[int] = set()
        for record in mine:
            n, t = metric_names_and_temporalities(record)
            names |= n
            temporalities |= t
        assert names and all(name.startswith(prefix) for name in names), names
        assert temporalities == {metrics_pb2.AGGREGATION_TEMPORALITY_DELTA}
        assert [r.labels["terminating"] for r in mine].count("true") == 1  # the terminating push on close
        assert mine[-1].labels["terminating"] == "true"
    stats = running.frontend.stats
    assert stats.unexpected_errors == 0


def test_a_changed_subscription_is_unknown_and_the_client_resubscribes(subscribed: Running) -> None:
    running = subscribed
    before = running.frontend.stats.responses[72, 117]
    producer = start_client(running, "producer", 5.5, "qp-resubscriber")
    try:
        assert wait_until(lambda: by_client(running.archived(), "qp-resubscriber"), timeout_s=15)
        running.cli("client-metrics", "--alter", "--name", SUBSCRIPTION, "--interval", "1500")
        running.cluster.wait_caught_up(timeout_s=30)

        def pushed_after_change() -> bool:
            return any(r.labels["push_interval_ms"] == "1500" for r in by_client(running.archived(), "qp-resubscriber"))

        assert wait_until(pushed_after_change, timeout_s=15)
    finally:
        finish(producer)
        running.cli("client-metrics", "--alter", "--name", SUBSCRIPTION, "--interval", "1000")
    mine = by_client(running.archived(), "qp-resubscriber")
    assert len({r.labels["client_instance_id"] for r in mine}) == 1  # the same client, re-subscribed by itself
    assert running.frontend.stats.responses[72, 117] > before  # it was told UNKNOWN_SUBSCRIPTION_ID


def test_pushing_faster_than_the_interval_is_throttling_quota_exceeded(subscribed: Running) -> None:
    client = WireClient(subscribed.port, client_id="qp-hand-rolled")
    try:
        versions = client.call(18, 3, ApiVersionsRequest("qp-hand-rolled", "1.0"))
        assert versions.error_code == 0
        sub = client.call(71, 0, GetTelemetrySubscriptionsRequest(ZERO_UUID))
        assert sub.error_code == 0 and sub.push_interval_ms == 1000
        assert sub.client_instance_id != ZERO_UUID
        first = client.call(72, 0, PushTelemetryRequest(sub.client_instance_id, sub.subscription_id, False, 0, b""))
        assert first.error_code == 0  # a push right after the get is allowed
        second = client.call(72, 0, PushTelemetryRequest(sub.client_instance_id, sub.subscription_id, False, 0, b""))
        assert second.error_code == 89  # THROTTLING_QUOTA_EXCEEDED
        assert subscribed.frontend.stats.responses[72, 89] >= 1
    finally:
        client.close()


def test_spark_compacts_what_real_clients_pushed(subscribed: Running, spark: Any, tmp_path: Any) -> None:
    """Issue 8's check on real pushes: librdkafka -> frontend -> shards' archive -> compact-telemetry, the
    points and rollups agreeing with a plain decode of the same archive records."""
    from collections import Counter

    from quotaplane.spark import compact_telemetry

    running = subscribed
    finish(start_client(running, "producer", 2.5, "qp-spark"))
    assert wait_until(
        lambda: any(r.labels.get("terminating") == "true" for r in by_client(running.archived(), "qp-spark"))
    )
    expected: Counter[str] = Counter()
    for record in by_client(running.archived(), "qp-spark"):
        data = metrics_pb2.MetricsData.FromString(record.body)
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    expected[metric.name] += len(getattr(metric, metric.WhichOneof("data")).data_points)
    assert expected

    roots = [str(p) for p in sorted((running.cluster.data_dir / "shards").glob("*"))]
    compact_telemetry(spark, roots, str(tmp_path / "tables"))
    points = spark.read.parquet(str(tmp_path / "tables" / "points")).where("client_id = 'qp-spark'")
    got = Counter(
        {row["metric"]: row["n"] for row in points.groupBy("metric").count().withColumnRenamed("count", "n").collect()}
    )
    assert got == expected
    rollups = spark.read.parquet(str(tmp_path / "tables" / "rollups"))
    instance = {r.labels["client_instance_id"] for r in by_client(running.archived(), "qp-spark")}
    mine = rollups.where(rollups.client_instance_id.isin(list(instance)))
    assert sum(row["count"] for row in mine.select("count").collect()) == sum(expected.values())
