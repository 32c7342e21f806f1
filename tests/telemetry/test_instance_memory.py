"""The memory budget of the client-instance cache is honest: what it counts is what Python allocates.

The cache bounds itself by ``memory_budget_bytes`` using a per-instance estimate; if the estimate
undercounted, a budget of 2 GiB could hold instances that take more. tracemalloc measures the real
allocations of 20,000 live instances (instance, metadata, Uuid, cache and expiry entries, the
connection map) and the estimate must cover them.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from quotaplane.archive import _format
from quotaplane.exporters.archive import TelemetryArchiveExporter
from quotaplane.telemetry import (
    ClientMetricsManager,
    ClientMetricsManagerConfig,
    CompressionType,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
    RequestContext,
    compress,
)

START_MS = 1_700_000_000_000


def _context(i: int) -> RequestContext:
    return RequestContext(
        connection_id=f"10.0.0.1:9092-10.1.{i >> 8 & 255}.{i & 255}:{40000 + i % 20000}-{i}",
        client_id=f"producer-{i % 500}",
        client_software_name="librdkafka",
        client_software_version="2.16.0",
        client_source_address=f"10.1.{i >> 8 & 255}.{i & 255}",
        client_source_port=40000 + i % 20000,
    )


def test_budget_estimate_covers_the_measured_allocations() -> None:
    n = 20_000
    mgr = ClientMetricsManager(ClientMetricsManagerConfig(), now_ms=START_MS)
    mgr.update_subscription("all", {"metrics": "org.apache.kafka.", "interval.ms": "30000"})
    contexts = [_context(i) for i in range(n)]  # the contexts belong to the frontend, not the cache
    get = mgr.process_get_telemetry_subscriptions_request
    request = GetTelemetrySubscriptionsRequest()
    get(request, _context(n), START_MS)  # warm: resolution cache, string pool, first queue
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i, ctx in enumerate(contexts):
            assert get(request, ctx, START_MS + i).error_code == 0
        gc.collect()
        measured = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(mgr.instances) == n + 1
    per_instance_measured = measured / n
    per_instance_counted = mgr.instances.bytes_used / len(mgr.instances)
    assert per_instance_measured <= per_instance_counted, (per_instance_measured, per_instance_counted)
    # ... and not wildly above it either, or the budget would hold far fewer instances than it could.
    assert per_instance_counted <= 2 * per_instance_measured


def test_budget_estimate_covers_what_a_push_adds_to_an_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An instance's first push builds its labels (the resource attributes, their OTLP encoding, the archive's
    encoded record labels): the cache counts them from then on, and what it counts covers what is allocated."""
    n = 5_000
    archive = TelemetryArchiveExporter(tmp_path)
    mgr = ClientMetricsManager(ClientMetricsManagerConfig(), [archive], now_ms=START_MS)
    mgr.update_subscription("all", {"metrics": "org.apache.kafka.", "interval.ms": "30000"})
    data = metrics_pb2.MetricsData()
    data.resource_metrics.add().scope_metrics.add().metrics.add(
        name="org.apache.kafka.producer.m"
    ).gauge.data_points.add(as_double=1.0)
    payload = compress(CompressionType.ZSTD, data.SerializeToString())
    contexts = [_context(i) for i in range(n + 1)]
    get = mgr.process_get_telemetry_subscriptions_request
    subs = [get(GetTelemetrySubscriptionsRequest(), ctx, START_MS) for ctx in contexts]
    pushes = [PushTelemetryRequest(s.client_instance_id, s.subscription_id, False, 4, payload) for s in subs]
    push = mgr.process_push_telemetry_request
    assert push(pushes[n], contexts[n], START_MS + 1).error_code == 0  # warm: sensors, the archive's segment
    assert archive.flush(10.0)
    counted_before = mgr.instances.bytes_used
    # the archive's cache of encoded label pairs is the process's, bounded (``_LABEL_CACHE_MAX``), not an
    # instance's: kept out of the measurement
    monkeypatch.setattr(_format, "_LABEL_CACHE_MAX", 0)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for request, ctx in zip(pushes[:n], contexts[:n], strict=True):
            assert push(request, ctx, START_MS + 1).error_code == 0
        assert archive.flush(10.0)  # the records written: what stays is what the instances hold
        gc.collect()
        measured = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        archive.close()
    counted = mgr.instances.bytes_used - counted_before
    assert counted == sum(mgr.client_instance(s.client_instance_id).labels_bytes for s in subs[:n])
    assert measured / n <= counted / n, (measured / n, counted / n)
    assert counted / n <= 2 * measured / n


def test_budget_bounds_the_number_of_live_instances() -> None:
    mgr = ClientMetricsManager(ClientMetricsManagerConfig(memory_budget_bytes=200 * 1024), now_ms=START_MS)
    request = GetTelemetrySubscriptionsRequest()
    for i in range(2_000):
        mgr.process_get_telemetry_subscriptions_request(request, _context(i), START_MS + i)
    assert mgr.instances.bytes_used <= 200 * 1024
    assert mgr.instances.evictions == 2_000 - len(mgr.instances)
    assert 150 < len(mgr.instances) < 300
    # The survivors are the most recent clients (least-recently-used eviction).
    newest = {str(i.instance_metadata.client_source_port) for i in mgr.instances}
    assert str(40000 + 1_999) in newest and str(40000 + 0) not in newest
