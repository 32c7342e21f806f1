"""The Kafka-facing frontend: an asyncio server speaking the Kafka protocol, backed by the gateway.

Real Kafka clients (librdkafka, the Java client, kafka-python) connect here as to a broker: they
learn this frontend as the only broker from Metadata, then push KIP-714 telemetry
(GetTelemetrySubscriptions / PushTelemetry, served by the gateway's TelemetryService, i.e. by the shard
owning the client instance) and use the admin APIs for client quotas and client-metrics resources
(DescribeClientQuotas, AlterClientQuotas, DescribeConfigs, IncrementalAlterConfigs,
ListClientMetricsResources, served by the AdminService, i.e. by the config controller).

Why it is built this way:

- **One event loop, one thread.** Kafka connections are long-lived and mostly idle between pushes, so
  thousands of them are thousands of coroutines on one loop (a thread per connection would not scale).
  The loop runs in a thread of its own, so ``quotaplane up`` (a synchronous Ray driver) and tests can
  start and stop it like the gRPC servers.
- **Batch at every hop.** Requests of all connections read in one pass of the event loop are collected
  per kind and sent as one batched RPC (``_batcher.py``, ``_backend.py``): natural batching, no timer.
- **The gateway decides, the frontend enforces.** Connection quotas (ConnectionService), the request
  quota (QuotaService.RecordRequestTime) and telemetry gating are fleet-wide state held by the shards;
  the frontend applies their answers to its sockets as a Kafka broker's network layer does
  (``_connection.py``), so several frontends presenting one node id share one budget.
- **Kafka's limits and errors** (``_connection.py``): ``socket.request.max.bytes``,
  ``connections.max.idle.ms``, closing on unknown APIs and malformed frames, ApiVersions' fallback.

Use :func:`serve_frontend` (starts it and returns once it listens); ``FrontendServer.close()`` stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import secrets
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any

from quotaplane.protocol import ApiVersionsResponse, supported_versions
from quotaplane.services.proxy import ProxyConfig, UpstreamClosedError, UpstreamProxy

from ._backend import Backend, GrpcTarget
from ._config import (
    DEFAULT_FRONTEND_PORT,
    DEFAULT_MAX_REQUEST_BYTES,
    FrontendConfig,
    FrontendStats,
    KafkaListener,
    tls_context,
)
from ._connection import serve_connection
from ._handlers import SERVED_APIS, KafkaApis
from ._loop import new_event_loop
from ._quotas import refresh_enabled_quotas
from ._sasl import PlainCredentials, ScramServer

__all__ = [
    "DEFAULT_FRONTEND_PORT",
    "DEFAULT_MAX_REQUEST_BYTES",
    "FrontendConfig",
    "FrontendServer",
    "FrontendStats",
    "GrpcTarget",
    "KafkaListener",
    "serve_frontend",
    "tls_context",
]

log = logging.getLogger(__name__)

#: At most one log line per interval for failures of the gateway (each reports how many were suppressed).
_BACKEND_LOG_INTERVAL_S = 10.0


class FrontendServer:
    """A running frontend: its loop thread, listener and gRPC backend."""

    def __init__(self, config: FrontendConfig) -> None:
        self.config = config
        self.stats = FrontendStats()
        self.versions = {k: v for k, v in supported_versions().items() if k in SERVED_APIS}
        self.supported = [ApiVersionsResponse.ApiVersion(k, lo, hi) for k, (lo, hi) in self.versions.items()]
        self.apis = KafkaApis(self)
        self.port = 0
        #: proxy mode: the upstream cluster, and the listener of each upstream broker's proxy port
        self.proxy: UpstreamProxy | None = None
        #: the gateway's latest EnabledQuotaTypes (None: unknown, every type counts as enabled)
        self.enabled_quotas: Any = None
        self._enabled_refresher: asyncio.Task[None] | None = None
        #: (user, client id) -> (fetch cap, monotonic expiry): see _quotas.fetch_cap
        self.fetch_caps: dict[tuple[str, str], tuple[float, float]] = {}
        self.broker_servers: dict[int, asyncio.base_events.Server] = {}
        self._gateway_failed_at: float | None = None
        self.backend: Backend = None  # type: ignore[assignment]  # created on the loop
        self._frontend_id = config.frontend_id or f"kafka-{secrets.token_hex(4)}"
        self._connection_numbers = iter(range(1, 2**62))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped: asyncio.Event | None = None
        self._last_backend_log = 0.0
        self._suppressed = 0
        self._closed = False
        #: connection id -> its SCRAM exchange between SaslHandshake and the last SaslAuthenticate
        self.scram_exchanges: dict[str, ScramServer] = {}

    # --- identity --------------------------------------------------------------------------------------
    def next_connection_id(self) -> str:
        return f"{self._frontend_id}-{next(self._connection_numbers)}"

    @property
    def address(self) -> str:
        host = self.config.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def note_backend_error(self, what: str, exc: BaseException) -> None:
        """Count a failed gateway / admin call; log at most one line per interval."""
        self.stats.backend_errors += 1
        now = time.monotonic()
        if now - self._last_backend_log < _BACKEND_LOG_INTERVAL_S:
            self._suppressed += 1
            return
        more = f" ({self._suppressed} more since the last report)" if self._suppressed else ""
        self._suppressed = 0
        self._last_backend_log = now
        self._gateway_failed_at = now
        detail = getattr(exc, "details", None)
        text = detail() if callable(detail) else str(exc)
        log.warning("frontend: %s failed: %s: %s%s", what, type(exc).__name__, text, more)

    def gateway_answered(self) -> None:
        """A gateway call succeeded: the outage (if any) is over."""
        if self._gateway_failed_at is not None:
            self._gateway_failed_at = None
            log.info("frontend: the gateway answers again")

    @property
    def gateway_down(self) -> bool:
        """Whether the last gateway call failed (and none has succeeded since)."""
        return self._gateway_failed_at is not None

    # --- life cycle --------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 30.0) -> None:
        """Start the loop thread and return once the listener is bound (or raise its error)."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._main(ready, failure))
            except BaseException as e:  # pragma: no cover - _main reports its own start-up errors
                if not ready.is_set():
                    failure.append(e)
                    ready.set()
            finally:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"frontend-{self._frontend_id}", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            self.close(5.0)  # do not leave the loop thread (and its channels) behind
            raise OSError(f"the Kafka frontend did not start within {timeout_s:g} s")
        if failure:
            self._thread.join(5)
            raise failure[0]

    async def _main(self, ready: threading.Event, failure: list[BaseException]) -> None:
        config = self.config
        self._stopped = asyncio.Event()
        self.backend = Backend(config.gateway, config.admin, linger_s=config.linger_s)
        try:
            self._server = await asyncio.start_server(
                self._accept,
                config.host,
                config.port,
                ssl=config.ssl_context,
                backlog=4096,
                reuse_address=True,
                limit=64 * 1024,
            )
        except OSError as e:
            await self.backend.close()
            where = f"[{config.host}]:{config.port}" if ":" in config.host else f"{config.host}:{config.port}"
            reason = "the port is in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
            failure.append(OSError(f"cannot listen on {where} for the Kafka frontend: {reason}"))
            ready.set()
            return
        self.port = self._server.sockets[0].getsockname()[1]
        if config.upstream is not None:
            try:
                await self._start_proxy(config.upstream)
            except (UpstreamClosedError, OSError) as e:
                self._server.close()
                await self._close_brokers()
                await self.backend.close()
                failure.append(OSError(f"the Kafka proxy cannot start: {e}"))
                ready.set()
                return
        if self._enabled_refresher is None and config.request_quotas:
            # without a request quota anywhere Kafka records no request time: the round trip is skipped then
            self._enabled_refresher = asyncio.get_running_loop().create_task(refresh_enabled_quotas(self))
        ready.set()
        await self._stopped.wait()
        self._server.close()
        await self._close_brokers()
        if self._enabled_refresher is not None:
            self._enabled_refresher.cancel()
            await asyncio.gather(self._enabled_refresher, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.backend.close()

    async def _start_proxy(self, upstream: ProxyConfig) -> None:
        """Ask the upstream for its versions and brokers, and listen on each broker's proxy port."""
        self.proxy = UpstreamProxy(upstream, self.advertised[0], self._listen_for_brokers)
        await self.proxy.start()
        self._enabled_refresher = asyncio.get_running_loop().create_task(refresh_enabled_quotas(self))
        self.versions = self.proxy.versions
        self.supported = [ApiVersionsResponse.ApiVersion(k, lo, hi) for k, (lo, hi) in self.versions.items()]
        log.info(
            "Kafka proxy on %s in front of %s: brokers %s on ports %d+node id",
            self.address,
            upstream.bootstrap,
            self.proxy.brokers.nodes,
            upstream.broker_port_base,
        )

    async def _listen_for_brokers(self, nodes: list[int]) -> None:
        """Start the proxy port of each upstream broker not served yet (brokers that join are served as soon
        as a Metadata names them; a port stays open when its broker leaves, and refuses to forward)."""
        assert self.proxy is not None
        for node in nodes:
            port = self.proxy.brokers.proxy_port(node)
            if node in self.broker_servers or port is None:
                continue
            self.broker_servers[node] = await asyncio.start_server(
                functools.partial(self._accept, node=node),
                self.config.host,
                port,
                ssl=self.config.ssl_context,
                backlog=4096,
                reuse_address=True,
                limit=64 * 1024,
            )

    async def _close_brokers(self) -> None:
        for server in self.broker_servers.values():
            server.close()
        self.broker_servers.clear()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, node: int | None = None) -> None:
        task = asyncio.get_running_loop().create_task(serve_connection(self, reader, writer, node))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def advertised(self) -> tuple[str, int]:
        return self.config.advertised_host or self.config.host, self.config.advertised_port or self.port

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop listening, end every connection (each releases its count and instances), close the channels."""
        if self._closed:
            return
        self._closed = True
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopped.set)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> FrontendServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_frontend(
    gateway: GrpcTarget | str,
    admin: GrpcTarget | str,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_FRONTEND_PORT,
    advertised_host: str | None = None,
    advertised_port: int | None = None,
    node_id: int = 0,
    sasl_credentials: PlainCredentials | None = None,
    operators: Iterable[str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    **options: Any,
) -> FrontendServer:
    """Start a frontend in a thread of its own and return it once it listens.

    ``gateway`` / ``admin``: the gRPC addresses (plaintext) or :class:`GrpcTarget` s. When
    ``advertised_port`` is None, Metadata advertises the port actually bound (so ``port=0`` works).
    """
    server = FrontendServer(
        FrontendConfig(
            gateway=gateway if isinstance(gateway, GrpcTarget) else GrpcTarget(gateway),
            admin=admin if isinstance(admin, GrpcTarget) else GrpcTarget(admin),
            host=host,
            port=port,
            advertised_host=advertised_host,
            advertised_port=advertised_port,
            node_id=node_id,
            sasl_credentials=sasl_credentials,
            operators=None if operators is None else frozenset(operators),
            ssl_context=ssl_context,
            **options,
        )
    )
    server.start()
    return server
