"""The Prometheus endpoint of a quotaplane cluster: Kafka's quota metrics fleet-wide, plus the service's own.

A broker exposes its quota sensors over JMX, one broker at a time; here the sensors of every entity live
on the ShardActors, so one scrape of this endpoint shows the whole fleet. It is a custom
``prometheus_client`` collector on its own ``CollectorRegistry`` (no process or platform collectors from
the global registry: the endpoint describes the quota plane, not the launcher's Python process), served
by ``prometheus_client``'s threaded HTTP server.

**On each scrape** the collector asks the controller for its end offset and every shard for
``metrics_snapshot(now_ms)`` and ``applied_offset()``, all at once, and waits for them together for at
most ``timeout_s`` (one deadline for the whole scrape, so N slow shards cost one timeout, not N). A shard
that does not answer in time, or fails, is left out of this scrape and counted in
``quotaplane_scrape_shard_errors_total{shard}``; its ``quotaplane_shard_up`` is 0. A shard whose call
from an earlier scrape is still pending is not asked again (counted as an error too): a hung shard then
holds at most one queued call from the endpoint, however often Prometheus scrapes. Scrapes are
serialised (a lock), so two Prometheus servers scraping at once do not double the load on the shards.

**Kafka's metrics** keep Kafka's (JMX-style) names, mechanically mapped so a Kafka engineer finds them:

=========================  ============================================  =============================================
Kafka group                Prometheus name                               example
=========================  ============================================  =============================================
``Produce``                ``kafka_quota_produce_<name>``                ``kafka_quota_produce_byte_rate``
``Fetch``                  ``kafka_quota_fetch_<name>``                  ``kafka_quota_fetch_throttle_time``
``Request``                ``kafka_quota_request_<name>``                ``kafka_quota_request_request_time``
``ControllerMutation``     ``kafka_quota_controllermutation_<name>``     ``kafka_quota_controllermutation_tokens``
``ProducerIds``            ``kafka_quota_producerids_<name>``            ``kafka_quota_producerids_rate``
``socket-server-metrics``  ``kafka_socket_server_<name>``                ``kafka_socket_server_connection_accept_rate``
``client-metrics``         ``kafka_client_metrics_<name>``               ``kafka_client_metrics_plugin_error_count``
``kafka-metrics-count``    ``kafka_metrics_count``                       (metrics registered, per shard)
any other group            ``kafka_quota_<group>_<name>``                ``kafka_quota_leaderreplication_byte_rate``
=========================  ============================================  =============================================

``<group>`` is lower-cased with every run of characters outside ``[a-z0-9]`` made one ``_``; ``<name>``
the same (``byte-rate`` -> ``byte_rate``, ``quota-value`` -> ``quota_value``, KIP-786, present when
``client.quota.value.metric.enable`` is true; an entity without a quota shows Kafka's bound
``Long.MAX_VALUE``). Kafka tag names become label names the same way (``client-id`` -> ``client_id``;
``user``, ``ip``, ``listener`` unchanged) and tag values are kept as Kafka has them (``user`` is
Kafka-sanitized; an empty tag such as ``user=""`` under a client-id quota is, for Prometheus, no label).
Every Kafka metric is a gauge (Kafka's stats are measured at the scrape: windowed rates, averages, token
counts). Units are Kafka's (bytes/s, ms, percent), not renamed to Prometheus' base units.

**No ``shard`` label on entity metrics.** A metric tagged with an entity (``user``, ``client-id`` or
``ip``) has one sensor fleet-wide, on the shard that owns the entity, so the series is the entity's and
needs no shard label (and keeps its identity when entities move between shards). If two shards report
the same series anyway (mis-routing, or usage recorded on a shard directly), the larger value is kept and
``quotaplane_series_duplicates_total{metric}`` counts it. Metrics without an entity tag (per-listener
connection rates, ``exempt-request-time``, ``kafka_metrics_count`` ...) are per shard by nature: they
carry a ``shard`` label, since every shard has its own (``sum without (shard)`` gives the total).

**Cardinality is bounded by configuration**: at most ``max_series_per_metric`` series per Prometheus
metric name (default 10,000) are exposed per scrape; the rest are dropped and counted in
``quotaplane_series_dropped_total{metric}``. The series kept are those with the highest values (the
busiest, most throttled entities: the ones an operator looks at), except ``..._quota_value``: a bound
says nothing about activity (an unlimited entity's is ``Long.MAX_VALUE``), so its series are ranked by
the same entity's usage metric (``byte_rate`` for Produce and Fetch, ``request_time`` for Request), and
the entities whose usage is exposed keep their bound too, which keeps usage / quota-value ratios whole.
The ``metric`` label of the two counters is bounded by the number of metric names (tens).

**Service metrics**

====================================================  ================================================
``quotaplane_config_end_offset``                      the config log's end offset (controller)
``quotaplane_shard_applied_offset{shard}``            events the shard has applied
``quotaplane_shard_lag_events{shard}``                end offset - applied offset (>= 0)
``quotaplane_shard_up{shard}``                        1 if the shard answered this scrape, else 0
``quotaplane_shard_restarts_total{shard}``            restarts seen (each restarted the shard's usage windows)
``quotaplane_throttle_archive_dropped_total{shard}``  throttle decisions left out of the throttle archive
``quotaplane_scrape_shard_errors_total{shard}``       shard calls that failed or timed out
``quotaplane_scrape_controller_errors_total``         controller calls that failed or timed out
``quotaplane_series_dropped_total{metric}``           series left out by ``max_series_per_metric``
``quotaplane_series_duplicates_total{metric}``        series reported by more than one shard
``quotaplane_scrape_duration_seconds``                time this scrape spent gathering
====================================================  ================================================

The ``_total`` counters count since the endpoint started.
"""

from __future__ import annotations

import heapq
import math
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = [
    "DEFAULT_MAX_SERIES_PER_METRIC",
    "DEFAULT_METRICS_PORT",
    "DEFAULT_SCRAPE_TIMEOUT_S",
    "MetricsEndpoint",
    "QuotaplaneCollector",
    "label_name",
    "prometheus_name",
    "start_metrics_endpoint",
    "stop_metrics_endpoint",
]

#: The port ``quotaplane up`` serves metrics on by default (``deploy/prometheus/prometheus.yml`` scrapes it).
DEFAULT_METRICS_PORT = 9464
DEFAULT_MAX_SERIES_PER_METRIC = 10_000
#: Well under Prometheus' default 10 s scrape timeout: a slow shard must not cost the whole scrape.
DEFAULT_SCRAPE_TIMEOUT_S = 2.0

#: Tags that name an entity: a series with one of them lives on exactly one shard.
_ENTITY_TAGS = frozenset({"user", "client-id", "ip"})
#: Groups with their own prefix; every other group is ``kafka_quota_<group>_``.
_GROUP_PREFIX = {"socket-server-metrics": "kafka_socket_server_", "client-metrics": "kafka_client_metrics_"}
#: The usage metric that ranks an entity's ``quota-value`` series (by group).
_USAGE_OF_GROUP = {"Produce": "byte-rate", "Fetch": "byte-rate", "Request": "request-time"}
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")
_NOT_LABEL = re.compile(r"[^a-zA-Z0-9_]+")

Snapshot = list[tuple[str, str, str, dict[str, str], float]]


def _snake(text: str) -> str:
    return _NOT_ALNUM.sub("_", text.lower()).strip("_")


def prometheus_name(name: str, group: str) -> str:
    """The Prometheus name of Kafka's metric ``name`` in ``group`` (the module docstring's table)."""
    if group == "kafka-metrics-count" and name == "count":
        return "kafka_metrics_count"
    prefix = _GROUP_PREFIX.get(group)
    if prefix is None:
        prefix = f"kafka_quota_{_snake(group)}_"
    return prefix + _snake(name)


def label_name(tag: str) -> str:
    """A Kafka tag name as a Prometheus label name (``client-id`` -> ``client_id``)."""
    label = _NOT_LABEL.sub("_", tag).strip("_") or "tag"  # no leading ``__``: Prometheus reserves it
    return "_" + label if label[0].isdigit() else label


@dataclass
class _Series:
    labels: dict[str, str]
    value: float
    rank: float


@dataclass
class _Family:
    name: str
    documentation: str
    series: dict[tuple[tuple[str, str], ...], _Series] = field(default_factory=dict)


class QuotaplaneCollector(Collector):
    """Gathers the cluster's metrics on each ``collect()`` (one scrape); see the module docstring.

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
    ) -> None:
        if isinstance(max_series_per_metric, bool) or not isinstance(max_series_per_metric, int):
            raise ValueError(f"max_series_per_metric must be an int, got {max_series_per_metric!r}")
        if max_series_per_metric < 1:
            raise ValueError(f"max_series_per_metric must be at least 1, got {max_series_per_metric}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self._controller = controller
        self._shards = shards
        self.max_series_per_metric = max_series_per_metric
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._pending: dict[str, list[Any]] = {}
        self.shard_errors: dict[str, int] = {}
        self.controller_errors = 0
        self.dropped: dict[str, int] = {}
        self.duplicates: dict[str, int] = {}
        #: restarts of each shard seen by this endpoint (each lost the usage windows of its entities)
        self.shard_restarts: dict[str, int] = {}
        self._incarnations: dict[str, Any] = {}
        #: throttle decisions each shard's current incarnation did not archive (rate bound or full queue)
        self.throttle_archive_dropped: dict[str, int] = {}

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not scrape the cluster (names are known only by scraping)."""
        return []

    @property
    def pending_shards(self) -> list[str]:
        """Shards whose call from an earlier scrape had not come back (they are not asked again until it does)."""
        return sorted(self._pending)

    def _shard_items(self) -> list[tuple[str, Any]]:
        if isinstance(self._shards, Mapping):
            return [(str(name), handle) for name, handle in list(self._shards.items())]
        return [(str(i), handle) for i, handle in enumerate(list(self._shards))]

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # built whole under the lock: a client that hangs up mid-page cannot hold it
            families = list(self._collect())
        yield from families

    # --- gathering -------------------------------------------------------------------------------------
    def _gather(self, now_ms: int) -> tuple[int | None, dict[str, tuple[Snapshot, int]]]:
        """Ask everything at once, wait once; the controller's end offset and each answering shard's
        ``(snapshot, applied offset)``. Failures and timeouts are counted here."""
        import ray

        deadline = time.monotonic() + self.timeout_s
        end_ref = self._controller.end_offset.remote() if self._controller is not None else None
        asked: dict[str, list[Any]] = {}
        for name, handle in self._shard_items():
            pending = self._pending.get(name)
            if pending:
                _, still = ray.wait(pending, num_returns=len(pending), timeout=0)
                if still:
                    self._count_shard_error(name)  # its last call has not come back: do not queue more
                    continue
                del self._pending[name]
            try:
                asked[name] = [handle.metrics_snapshot.remote(now_ms), handle.progress.remote()]
            except Exception:
                self._count_shard_error(name)
        refs = [ref for pair in asked.values() for ref in pair]
        if end_ref is not None:
            refs.append(end_ref)
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))

        end_offset: int | None = None
        if end_ref is not None:
            try:
                end_offset = int(ray.get(end_ref, timeout=0))
            except Exception:
                self.controller_errors += 1
        answers: dict[str, tuple[Snapshot, int]] = {}
        for name, pair in asked.items():
            try:
                snapshot, progress = ray.get(pair, timeout=0)
            except Exception as e:
                if isinstance(e, ray.exceptions.GetTimeoutError):
                    self._pending[name] = pair
                self._count_shard_error(name)
                continue
            self._note_incarnation(name, progress)
            self.throttle_archive_dropped[name] = int(progress.get("throttle_archive_dropped", 0))
            answers[name] = (snapshot, int(progress["applied_offset"]))
        return end_offset, answers

    def _note_incarnation(self, name: str, progress: Mapping[str, Any]) -> None:
        """Count a restart when a shard's incarnation changed since the last scrape, or when the first one
        seen is already a restart (Ray reconstructed it before this endpoint started)."""
        incarnation = progress["incarnation"]
        seen = self._incarnations.get(name)
        if progress["reconstructed"] if seen is None else seen != incarnation:
            self.shard_restarts[name] = self.shard_restarts.get(name, 0) + 1
        self._incarnations[name] = incarnation

    def _count_shard_error(self, name: str) -> None:
        self.shard_errors[name] = self.shard_errors.get(name, 0) + 1

    # --- building the families ---------------------------------------------------------------------------
    def _kafka_families(self, answers: Mapping[str, tuple[Snapshot, int]]) -> dict[str, _Family]:
        families: dict[str, _Family] = {}
        usage: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        value_series: list[tuple[_Family, tuple[tuple[str, str], ...], str]] = []
        for shard, (snapshot, _) in answers.items():
            for name, group, description, tags, value in snapshot:
                if not math.isfinite(value):
                    continue
                prom = prometheus_name(name, group)
                family = families.get(prom)
                if family is None:
                    family = families[prom] = _Family(prom, description or f"Kafka metric {group}/{name}")
                labels = {label_name(tag): str(tag_value) for tag, tag_value in tags.items()}
                if not _ENTITY_TAGS.intersection(tags):
                    labels["shard"] = shard
                key = tuple(sorted(labels.items()))
                existing = family.series.get(key)
                if existing is not None:
                    self.duplicates[prom] = self.duplicates.get(prom, 0) + 1
                    if existing.value >= value:
                        continue
                family.series[key] = _Series(labels, value, value)
                if _USAGE_OF_GROUP.get(group) == name:
                    usage[(group, key)] = max(value, usage.get((group, key), -math.inf))
                elif name == "quota-value" and group in _USAGE_OF_GROUP:
                    value_series.append((family, key, group))
        for family, key, group in value_series:
            series = family.series.get(key)
            if series is not None:
                series.rank = usage.get((group, key), -math.inf)
        return families

    def _bounded(self, family: _Family) -> list[_Series]:
        """At most ``max_series_per_metric`` series, the highest ranked; the rest counted as dropped."""
        series = list(family.series.values())
        limit = self.max_series_per_metric
        if len(series) <= limit:
            return series
        self.dropped[family.name] = self.dropped.get(family.name, 0) + len(series) - limit
        return heapq.nlargest(limit, series, key=lambda s: s.rank)

    def _collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        now_ms = int(time.time() * 1000)
        end_offset, answers = self._gather(now_ms)
        for family in sorted(self._kafka_families(answers).values(), key=lambda f: f.name):
            metric = Metric(family.name, family.documentation, "gauge")
            for s in self._bounded(family):
                metric.add_sample(family.name, s.labels, s.value)
            yield metric

        if end_offset is not None:
            yield GaugeMetricFamily(
                "quotaplane_config_end_offset", "The config log's end offset (events written)", value=end_offset
            )
        names = [name for name, _ in self._shard_items()]
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
        yield _counter(
            "quotaplane_shard_restarts",
            "Shard restarts seen (Ray restarted the actor; the usage windows of its entities started over)",
            "shard",
            self.shard_restarts,
        )
        yield _counter(
            "quotaplane_throttle_archive_dropped",
            "Throttle decisions not archived for the throttle report (rate bound or full queue; resets with the shard)",
            "shard",
            self.throttle_archive_dropped,
        )
        yield _counter(
            "quotaplane_scrape_shard_errors",
            "Shard calls of the metrics endpoint that failed or timed out",
            "shard",
            self.shard_errors,
        )
        controller_errors = CounterMetricFamily(
            "quotaplane_scrape_controller_errors",
            "Controller calls of the metrics endpoint that failed or timed out",
            value=self.controller_errors,
        )
        yield controller_errors
        yield _counter("quotaplane_series_dropped", "Series left out by max_series_per_metric", "metric", self.dropped)
        yield _counter(
            "quotaplane_series_duplicates", "Series reported by more than one shard", "metric", self.duplicates
        )
        yield GaugeMetricFamily(
            "quotaplane_scrape_duration_seconds",
            "Time the last scrape spent gathering from the cluster",
            value=time.monotonic() - started,
        )


def _counter(name: str, documentation: str, label: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key, count in sorted(counts.items()):
        family.add_metric([key], count)
    return family


@dataclass
class MetricsEndpoint:
    """A running endpoint: its address, its collector, and :meth:`close`."""

    host: str
    port: int
    collector: QuotaplaneCollector
    registry: CollectorRegistry
    _server: Any
    _thread: threading.Thread
    _closed: bool = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_metrics_endpoint(
    controller: Any,
    shards: Mapping[str, Any] | Sequence[Any],
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_METRICS_PORT,
    max_series_per_metric: int = DEFAULT_MAX_SERIES_PER_METRIC,
    timeout_s: float = DEFAULT_SCRAPE_TIMEOUT_S,
) -> tuple[MetricsEndpoint, int]:
    """Serve the cluster's metrics at ``http://host:port/metrics`` (``port=0``: a free port, returned).

    Returns ``(endpoint, port)``; ``endpoint.close()`` (or :func:`stop_metrics_endpoint`) stops it.
    An ``OSError`` (port in use, unknown host) is raised before anything is left running.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be in 0..65535, got {port!r}")
    collector = QuotaplaneCollector(
        controller, shards, max_series_per_metric=max_series_per_metric, timeout_s=timeout_s
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server, thread = start_http_server(port, addr=host, registry=registry)
    bound_port = int(server.server_address[1])
    return MetricsEndpoint(host, bound_port, collector, registry, server, thread), bound_port


def stop_metrics_endpoint(endpoint: MetricsEndpoint) -> None:
    """Stop an endpoint started by :func:`start_metrics_endpoint` (the same as ``endpoint.close()``)."""
    endpoint.close()
