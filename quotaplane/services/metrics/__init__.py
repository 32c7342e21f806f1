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
``Long.MAX_VALUE``). **That switch differs from Kafka's**: on by default, and dynamic (Kafka's is a read-only
broker config, off by default), so an entity's bound is on this page as soon as the entity is active under a
quota, beside its usage; turning it off (``quotaplane configs ... --add-config
client.quota.value.metric.enable=false``) removes the series of every live entity from the shards' registries,
and so from the next scrape, and turning it on again restores them with their current bounds, with no restart.
Kafka tag names become label names the same way (``client-id`` -> ``client_id``; ``user``, ``ip``,
``listener`` unchanged) and tag values are kept as Kafka has them (``user`` is
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

========================================================  ================================================
``quotaplane_config_end_offset``                          the config log's end offset (controller)
``quotaplane_shard_applied_offset{shard}``                events the shard has applied
``quotaplane_shard_lag_events{shard}``                    end offset - applied offset (>= 0)
``quotaplane_shard_up{shard}``                            1 if the shard answered this scrape, else 0
``quotaplane_shard_restarts_total{shard}``                restarts seen (usage windows restored from the checkpoint)
``quotaplane_shard_restored_usage_age_seconds{shard}``    age of the windows restored at the last start (usage lost)
``quotaplane_throttle_archive_dropped_total{shard}``      throttle decisions left out of the throttle archive
``quotaplane_shard_hand_over_failures_total{shard}``      reshard hand-overs not got (those keys started empty)
``quotaplane_over_admission_bound_bytes_total{cause}``   usage this process's gateway sent to shards that then
                                                          restarted without it (cause: checkpoint, no_checkpoint)
``quotaplane_lease_decisions_total{where}``               leased usage items this process's gateway decided
                                                          within its lease (local) or on the shard (shard)
``quotaplane_leases``                                     leased shares this process's gateway holds
``quotaplane_lease_renewal_failures_total``               lease renewal rounds that failed
``quotaplane_scrape_shard_errors_total{shard}``           shard calls that failed or timed out
``quotaplane_scrape_controller_errors_total``             controller calls that failed or timed out
``quotaplane_series_dropped_total{metric}``               series left out by ``max_series_per_metric``
``quotaplane_series_duplicates_total{metric}``            series reported by more than one shard
``quotaplane_scrape_duration_seconds``                    time this scrape spent gathering
========================================================  ================================================

The ``_total`` counters count since the endpoint started.

**Modules** (one job each): ``_naming`` maps Kafka's metric and tag names to Prometheus' (the table above);
``_families`` turns the shards' snapshots into bounded families; ``_gather`` asks the controller and the
shards, once per scrape, under one deadline; ``_collector`` is the ``prometheus_client`` collector tying them
together; ``_endpoint`` serves it over HTTP.
"""

from __future__ import annotations

from ._collector import DEFAULT_MAX_SERIES_PER_METRIC, DEFAULT_SCRAPE_TIMEOUT_S, QuotaplaneCollector
from ._endpoint import DEFAULT_METRICS_PORT, MetricsEndpoint, start_metrics_endpoint, stop_metrics_endpoint
from ._naming import label_name, prometheus_name

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
