"""The HTTP side of the metrics endpoint: the collector on its own registry, served by ``prometheus_client``.

Its own ``CollectorRegistry`` (no process or platform collectors from the global registry): the endpoint
describes the quota plane, not the launcher's Python process. ``prometheus_client``'s threaded HTTP server
serves it; :class:`MetricsEndpoint` is the handle the launcher keeps to close it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from ._collector import DEFAULT_MAX_SERIES_PER_METRIC, DEFAULT_SCRAPE_TIMEOUT_S, QuotaplaneCollector

__all__ = ["DEFAULT_METRICS_PORT", "MetricsEndpoint", "start_metrics_endpoint", "stop_metrics_endpoint"]

#: The port ``quotaplane up`` serves metrics on by default (``deploy/prometheus/prometheus.yml`` scrapes it).
DEFAULT_METRICS_PORT = 9464


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
    gateways: Sequence[Any] = (),
) -> tuple[MetricsEndpoint, int]:
    """Serve the cluster's metrics at ``http://host:port/metrics`` (``port=0``: a free port, returned).

    ``gateways``: the usage gateways of this process, whose own counts the endpoint reports
    (``quotaplane_over_admission_bound_bytes``). Returns ``(endpoint, port)``; ``endpoint.close()`` (or
    :func:`stop_metrics_endpoint`) stops it.
    An ``OSError`` (port in use, unknown host) is raised before anything is left running.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be in 0..65535, got {port!r}")
    collector = QuotaplaneCollector(
        controller, shards, max_series_per_metric=max_series_per_metric, timeout_s=timeout_s, gateways=gateways
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server, thread = start_http_server(port, addr=host, registry=registry)
    bound_port = int(server.server_address[1])
    return MetricsEndpoint(host, bound_port, collector, registry, server, thread), bound_port


def stop_metrics_endpoint(endpoint: MetricsEndpoint) -> None:
    """Stop an endpoint started by :func:`start_metrics_endpoint` (the same as ``endpoint.close()``)."""
    endpoint.close()
