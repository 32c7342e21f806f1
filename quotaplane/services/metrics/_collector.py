"""The ``prometheus_client`` collector of the endpoint: one ``collect()`` is one scrape of the cluster.

It only ties the parts together: :class:`~._gather.ShardGatherer` asks the cluster, :mod:`._families` builds
Kafka's families from the answers, and the service's own metrics (offsets, lag, up, the counters) are
written here. Scrapes are serialised by a lock, so two Prometheus servers scraping at once do not double the
load on the shards.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ._families import bounded, counter, kafka_families
from ._gather import ShardGatherer

__all__ = ["DEFAULT_MAX_SERIES_PER_METRIC", "DEFAULT_SCRAPE_TIMEOUT_S", "QuotaplaneCollector"]

DEFAULT_MAX_SERIES_PER_METRIC = 10_000
#: Well under Prometheus' default 10 s scrape timeout: a slow shard must not cost the whole scrape.
DEFAULT_SCRAPE_TIMEOUT_S = 2.0


class QuotaplaneCollector(Collector):
    """Gathers the cluster's metrics on each ``collect()`` (one scrape); see the package docstring.

    ``shards`` is read at each scrape, so a mapping the launcher updates (shards added or removed) is
    followed without restarting the endpoint. A sequence is named by index.
    """

    def __init__(
        self,
        controller: Any,
        shards: Mapping[str, Any] | Sequence[Any],
        *,
        max_series_per_metric: int = DEFAULT_MAX_SERIES_PER_METRIC,
        timeout_s: float = DEFAULT_SCRAPE_TIMEOUT_S,
        gateways: Sequence[Any] = (),
    ) -> None:
        """``gateways``: the gateways in this process (their ``stats()``), for what they count themselves."""
        if isinstance(max_series_per_metric, bool) or not isinstance(max_series_per_metric, int):
            raise ValueError(f"max_series_per_metric must be an int, got {max_series_per_metric!r}")
        if max_series_per_metric < 1:
            raise ValueError(f"max_series_per_metric must be at least 1, got {max_series_per_metric}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self._gatherer = ShardGatherer(controller, shards)
        self.gateways = list(gateways)
        self.max_series_per_metric = max_series_per_metric
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        #: series left out by ``max_series_per_metric`` (by metric name), since the endpoint started
        self.dropped: dict[str, int] = {}
        #: series reported by more than one shard (by metric name), since the endpoint started
        self.duplicates: dict[str, int] = {}

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not scrape the cluster (names are known only by scraping)."""
        return []

    @property
    def pending_shards(self) -> list[str]:
        """Shards whose call from an earlier scrape had not come back (they are not asked again until it does)."""
        return self._gatherer.pending_shards

    @property
    def shard_errors(self) -> dict[str, int]:
        """Shard calls that failed or timed out, by shard."""
        return self._gatherer.shard_errors

    @property
    def controller_errors(self) -> int:
        """Controller calls that failed or timed out."""
        return self._gatherer.controller_errors

    @property
    def shard_restarts(self) -> dict[str, int]:
        """Restarts of each shard seen by this endpoint (each lost the usage windows of its entities)."""
        return self._gatherer.shard_restarts

    @property
    def throttle_archive_dropped(self) -> dict[str, int]:
        """Throttle decisions each shard's current incarnation did not archive (rate bound or full queue)."""
        return self._gatherer.throttle_archive_dropped

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # built whole under the lock: a client that hangs up mid-page cannot hold it
            families = list(self._collect())
        yield from families

    def _collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        now_ms = int(time.time() * 1000)
        end_offset, answers = self._gatherer.gather(now_ms, self.timeout_s)
        for family in sorted(kafka_families(answers, self.duplicates).values(), key=lambda f: f.name):
            metric = Metric(family.name, family.documentation, "gauge")
            for s in bounded(family, self.max_series_per_metric, self.dropped):
                metric.add_sample(family.name, s.labels, s.value)
            yield metric
        yield from self._service_families(end_offset, answers)
        yield GaugeMetricFamily(
            "quotaplane_scrape_duration_seconds",
            "Time the last scrape spent gathering from the cluster",
            value=time.monotonic() - started,
        )

    def _service_families(self, end_offset: int | None, answers: Mapping[str, Any]) -> Iterator[Metric]:
        """The service's own metrics (the package docstring's second table) but the scrape duration."""
        if end_offset is not None:
            yield GaugeMetricFamily(
                "quotaplane_config_end_offset", "The config log's end offset (events written)", value=end_offset
            )
        names = [name for name, _ in self._gatherer.shard_items()]
        applied = GaugeMetricFamily(
            "quotaplane_shard_applied_offset", "Config events the shard has applied", labels=["shard"]
        )
        lag = GaugeMetricFamily(
            "quotaplane_shard_lag_events", "Config events the shard has still to apply", labels=["shard"]
        )
        up = GaugeMetricFamily("quotaplane_shard_up", "1 if the shard answered this scrape in time", labels=["shard"])
        for name in names:
            answer = answers.get(name)
            up.add_metric([name], 1.0 if answer is not None else 0.0)
            if answer is None:
                continue
            applied.add_metric([name], answer[1])
            if end_offset is not None:
                lag.add_metric([name], max(0, end_offset - answer[1]))
        yield applied
        yield lag
        yield up
        yield counter(
            "quotaplane_shard_restarts",
            "Shard restarts seen (Ray restarted the actor; its entities' usage windows came back from its last "
            "usage checkpoint, or started over without one)",
            "shard",
            self.shard_restarts,
        )
        restored = GaugeMetricFamily(
            "quotaplane_shard_restored_usage_age_seconds",
            "Age of the usage windows the shard restored from its checkpoint at its last start: the usage of that "
            "interval was lost (absent: it restored none)",
            labels=["shard"],
        )
        for name, age_ms in sorted(self._gatherer.restored_usage_age_ms.items()):
            restored.add_metric([name], age_ms / 1000.0)
        yield restored
        yield counter(
            "quotaplane_shard_hand_over_failures",
            "Reshard hand-overs the shard could not get (the giver unreachable): the state of those keys started "
            "empty on it, up to a quota window of over-admission (resets with the shard)",
            "shard",
            self._gatherer.hand_over_failures,
        )
        yield counter(
            "quotaplane_throttle_archive_dropped",
            "Throttle decisions not archived for the throttle report (rate bound or full queue; resets with the shard)",
            "shard",
            self.throttle_archive_dropped,
        )
        yield counter(
            "quotaplane_scrape_shard_errors",
            "Shard calls of the metrics endpoint that failed or timed out",
            "shard",
            self.shard_errors,
        )
        yield CounterMetricFamily(
            "quotaplane_scrape_controller_errors",
            "Controller calls of the metrics endpoint that failed or timed out",
            value=self.controller_errors,
        )
        bound: dict[str, float] = {"checkpoint": 0.0, "no_checkpoint": 0.0}
        decisions = {"local": 0, "shard": 0}
        leases_held = renewal_failures = 0
        for gateway in self.gateways:
            stats = gateway.stats()
            for cause, value in stats.get("over_admission_bound_bytes", {}).items():
                bound[cause] = bound.get(cause, 0.0) + value
            leases = stats.get("leases", {})
            decisions["local"] += leases.get("local_decisions", 0)
            decisions["shard"] += leases.get("shard_decisions", 0)
            leases_held += leases.get("leases", 0)
            renewal_failures += leases.get("renewal_failures", 0)
        yield counter(
            "quotaplane_over_admission_bound_bytes",
            "Usage bytes this process's gateway sent to shards that then restarted without them (after the "
            "checkpoint the new incarnation restored, or all the window held without one): the bound of what the "
            "restarts over-admitted",
            "cause",
            bound,
        )
        yield counter(
            "quotaplane_lease_decisions",
            "Usage items of leased quota types (quotaplane.lease.quota.types) this process's gateway decided: "
            "within its leased share (local) or on the owning shard (shard: no live lease)",
            "where",
            decisions,
        )
        yield GaugeMetricFamily(
            "quotaplane_leases", "Leased shares of entities' quotas this process's gateway holds", value=leases_held
        )
        yield CounterMetricFamily(
            "quotaplane_lease_renewal_failures",
            "Lease renewal rounds of this process's gateway that failed (its leases then expire; exact mode)",
            value=renewal_failures,
        )
        yield counter("quotaplane_series_dropped", "Series left out by max_series_per_metric", "metric", self.dropped)
        yield counter(
            "quotaplane_series_duplicates", "Series reported by more than one shard", "metric", self.duplicates
        )
