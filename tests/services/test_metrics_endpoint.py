"""The metrics endpoint against a real cluster (``launch()``: private local Ray, controller, shards), scraped
over HTTP (tests/deploy/test_prometheus.py has a real Prometheus scrape a running ``up`` with the shipped rules).

One cluster for the module (Ray's start-up costs seconds); each test records usage under its own user
names, so the tests do not see each other's series. Usage is recorded at the real clock's time, since the
endpoint measures Kafka's windowed rates at the scrape's wall-clock time.
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families

from quotaplane.config import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    OpType,
)
from quotaplane.services.launcher import Cluster, launch
from quotaplane.services.metrics import (
    MetricsEndpoint,
    label_name,
    prometheus_name,
    start_metrics_endpoint,
    stop_metrics_endpoint,
)

ALICE_QUOTA = 5_200.0


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data_dir = tmp_path_factory.mktemp("qp")
    # KIP-786's quota-value metric, set in the log (it is on by default too: test_quota_value_endpoint.py).
    with ConfigStore.open(data_dir / "config", fsync=False) as store:
        ops = [AlterConfigOp("client.quota.value.metric.enable", OpType.SET, "true")]
        results = store.incremental_alter_configs(
            [(ConfigResource(ConfigResourceType.BROKER, ""), ops)], now_ms=now_ms()
        )
        assert all(r.ok for r in results), results
        alteration = ClientQuotaAlteration({"user": "alice", "client-id": "c1"}, [("producer_byte_rate", ALICE_QUOTA)])
        results = store.alter_client_quotas([alteration], now_ms=now_ms())
        assert all(r.ok for r in results), results
    # no usage gateway: usage is recorded on the shards directly, and a fixed gateway port could clash
    with launch(data_dir, shards=2, admin_port=0, gateway_port=None, metrics_port=None, fsync=False) as running:
        yield running


@pytest.fixture(scope="module")
def endpoint(cluster: Cluster) -> Iterator[MetricsEndpoint]:
    server, port = start_metrics_endpoint(cluster.controller, cluster.shards, host="127.0.0.1", port=0)
    assert port == server.port and port > 0
    yield server
    stop_metrics_endpoint(server)


Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(url: str) -> Samples:
    """Every sample of the page by sample name (counters appear as ``..._total``)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def values(samples: Samples, name: str, **labels: str) -> list[float]:
    return [v for lbls, v in samples.get(name, []) if all(lbls.get(k) == x for k, x in labels.items())]


def record(shard: Any, user: str, client_id: str, value: float) -> int:
    throttles = ray.get(shard.record_batch.remote("PRODUCE", [(user, client_id, value)], now_ms()), timeout=30)
    return throttles[0]


# --- pure mapping --------------------------------------------------------------------------------------
def test_kafka_names_map_to_prometheus_names() -> None:
    assert prometheus_name("byte-rate", "Produce") == "kafka_quota_produce_byte_rate"
    assert prometheus_name("quota-value", "Fetch") == "kafka_quota_fetch_quota_value"
    assert prometheus_name("throttle-time", "ControllerMutation") == "kafka_quota_controllermutation_throttle_time"
    assert prometheus_name("tokens", "ProducerIds") == "kafka_quota_producerids_tokens"
    assert prometheus_name("connection-accept-rate", "socket-server-metrics") == (
        "kafka_socket_server_connection_accept_rate"
    )
    assert prometheus_name("count", "kafka-metrics-count") == "kafka_metrics_count"
    assert prometheus_name("plugin-error-count", "client-metrics") == "kafka_client_metrics_plugin_error_count"
    assert label_name("client-id") == "client_id"
    assert label_name("user") == "user"
    assert label_name("__x") == "x"
    assert label_name("9lives") == "_9lives"


# --- the endpoint on a real cluster ----------------------------------------------------------------------
def test_scrape_shows_alices_usage_quota_value_and_offsets(cluster: Cluster, endpoint: MetricsEndpoint) -> None:
    assert record(cluster.shards["0"], "alice", "c1", 100_000.0) > 0
    samples = scrape(endpoint.url)

    [byte_rate] = values(samples, "kafka_quota_produce_byte_rate", user="alice", client_id="c1")
    assert byte_rate > 0
    assert values(samples, "kafka_quota_produce_quota_value", user="alice", client_id="c1") == [ALICE_QUOTA]
    # over quota (100 kB against 5.2 kB/s over ~10 s): throttled, and the shard recorded the throttle
    [throttle] = values(samples, "kafka_quota_produce_throttle_time", user="alice", client_id="c1")
    assert throttle > 0
    # entity series carry no shard label; per-shard metrics do
    for labels, _ in samples["kafka_quota_produce_byte_rate"]:
        assert "shard" not in labels
    assert {labels["shard"] for labels, _ in samples["kafka_metrics_count"]} == {"0", "1"}

    end = ray.get(cluster.controller.end_offset.remote())
    assert end == 3  # the two changes made before the launch, and the shard count the launch logged
    assert values(samples, "quotaplane_config_end_offset") == [end]
    for shard in ("0", "1"):
        assert values(samples, "quotaplane_shard_applied_offset", shard=shard) == [end]
        assert values(samples, "quotaplane_shard_lag_events", shard=shard) == [0]
        assert values(samples, "quotaplane_shard_up", shard=shard) == [1]
    assert values(samples, "quotaplane_scrape_controller_errors_total") == [0]
    assert not samples.get("quotaplane_scrape_shard_errors_total")


def test_series_reported_by_two_shards_keep_the_larger_and_are_counted(
    cluster: Cluster, endpoint: MetricsEndpoint
) -> None:
    record(cluster.shards["0"], "dup", "c1", 1_000.0)
    record(cluster.shards["1"], "dup", "c1", 9_000.0)
    samples = scrape(endpoint.url)
    [rate] = values(samples, "kafka_quota_produce_byte_rate", user="dup", client_id="c1")
    duplicates = values(samples, "quotaplane_series_duplicates_total", metric="kafka_quota_produce_byte_rate")
    assert duplicates and duplicates[0] >= 1
    # the larger one: shard 1's 9 kB, nine times shard 0's over the same window
    small = ray.get(cluster.shards["0"].metrics_snapshot.remote())
    [small_rate] = [v for n, g, _, t, v in small if (n, g) == ("byte-rate", "Produce") and t.get("user") == "dup"]
    assert rate > small_rate * 5


def test_cardinality_is_bounded_per_metric_keeping_the_highest(cluster: Cluster, endpoint: MetricsEndpoint) -> None:
    clients = 30
    items = [("bob", f"b{i:02d}", 1e6 * (i + 1)) for i in range(clients)]
    ray.get(cluster.shards["1"].record_batch.remote("PRODUCE", items, now_ms()), timeout=30)
    bounded, _ = start_metrics_endpoint(
        cluster.controller, cluster.shards, host="127.0.0.1", port=0, max_series_per_metric=5
    )
    try:
        limited = scrape(bounded.url)
        full = scrape(endpoint.url)
    finally:
        bounded.close()
    total = len(full["kafka_quota_produce_byte_rate"])
    assert total >= clients + 1
    kept = limited["kafka_quota_produce_byte_rate"]
    assert len(kept) == 5
    assert sorted(labels["client_id"] for labels, _ in kept) == [f"b{i}" for i in range(25, 30)]
    assert values(limited, "quotaplane_series_dropped_total", metric="kafka_quota_produce_byte_rate") == [total - 5]
    # quota-value is ranked by the entity's usage: the same five entities keep their bound
    kept_values = limited["kafka_quota_produce_quota_value"]
    assert sorted(labels["client_id"] for labels, _ in kept_values) == [f"b{i}" for i in range(25, 30)]
    for name, samples in limited.items():
        if name.startswith("kafka_"):
            assert len(samples) <= 5, name


def test_a_shard_that_does_not_answer_is_skipped_and_counted(cluster: Cluster) -> None:
    @ray.remote(num_cpus=0)
    class Hung:
        def metrics_snapshot(self, now_ms: int | None = None) -> list:
            time.sleep(20)
            return []

        def progress(self) -> dict:
            return {"applied_offset": 0, "incarnation": (0, 0), "reconstructed": False}

    hung = Hung.remote()
    shards = {**cluster.shards, "hung": hung}
    server, _ = start_metrics_endpoint(cluster.controller, shards, host="127.0.0.1", port=0, timeout_s=0.5)
    try:
        started = time.monotonic()
        first = scrape(server.url)
        second = scrape(server.url)
        elapsed = time.monotonic() - started
    finally:
        server.close()
        ray.kill(hung)
    assert elapsed < 3.0, elapsed  # two scrapes, each bounded by the 0.5 s timeout
    assert values(first, "quotaplane_shard_up", shard="hung") == [0]
    assert values(first, "quotaplane_shard_up", shard="0") == [1]
    assert values(first, "quotaplane_scrape_shard_errors_total", shard="hung") == [1]
    assert values(second, "quotaplane_scrape_shard_errors_total", shard="hung") == [2]
    assert not values(first, "quotaplane_shard_applied_offset", shard="hung")
    assert values(first, "quotaplane_shard_applied_offset", shard="1")
    # the call still pending from the first scrape was not queued again
    assert server.collector.pending_shards == ["hung"]


def test_hand_over_failures_a_shard_reports_are_a_counter_per_shard(cluster: Cluster) -> None:
    """A shard that could not reach a giver in a reshard says so in its progress; the endpoint shows it per shard."""

    @ray.remote(num_cpus=0)
    class Lossy:
        def metrics_snapshot(self, now_ms: int | None = None) -> list:
            return []

        def progress(self) -> dict:
            return {"applied_offset": 0, "incarnation": (1, 1), "reconstructed": False, "hand_over_failures": 3}

    lossy = Lossy.remote()
    server, _ = start_metrics_endpoint(
        cluster.controller, {**cluster.shards, "lossy": lossy}, host="127.0.0.1", port=0, timeout_s=10.0
    )
    try:
        page = scrape(server.url)
    finally:
        server.close()
        ray.kill(lossy)
    assert values(page, "quotaplane_shard_hand_over_failures_total", shard="lossy") == [3]
    assert values(page, "quotaplane_shard_hand_over_failures_total", shard="0") == [0]
