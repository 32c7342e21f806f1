"""The proxy's view of the upstream cluster: its configuration, its brokers, the versions it offers.

:class:`UpstreamProxy` is shared by every connection of one frontend in proxy mode. It learns the upstream's
brokers from :func:`~._upstream.discover` at start and from every address-carrying response it forwards,
starts a listener for each new broker (through the ``on_new_brokers`` callback the frontend gives it), and
opens the upstream connection behind each client connection. Refreshes are rate-limited: a client connecting
to the port of a broker the proxy does not know triggers at most one discovery per ``refresh_interval_s``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ._brokers import BrokerMap, parse_bootstrap
from ._rewrite import offered_versions
from ._upstream import UpstreamClosedError, UpstreamConnection, UpstreamSasl, discover

__all__ = ["DEFAULT_BROKER_PORT_BASE", "ProxyConfig", "UpstreamProxy"]

log = logging.getLogger(__name__)

#: Node ``n`` of the upstream is served on ``DEFAULT_BROKER_PORT_BASE + n``.
DEFAULT_BROKER_PORT_BASE = 19092


@dataclass(frozen=True)
class ProxyConfig:
    """Proxy mode of the frontend: the upstream Kafka cluster and how brokers map to proxy ports."""

    #: ``HOST:PORT[,HOST:PORT...]`` of upstream brokers to bootstrap from.
    bootstrap: str
    broker_port_base: int = DEFAULT_BROKER_PORT_BASE
    #: Node ids ``0..max_brokers-1`` get a proxy port.
    max_brokers: int = 1000
    connect_timeout_s: float = 10.0
    #: The longest the proxy waits for one upstream answer (a JoinGroup may wait a rebalance timeout).
    request_timeout_s: float = 330.0
    #: With the gateway unreachable: False forwards unthrottled (counted, logged once per outage); True
    #: closes client connections instead of forwarding.
    fail_closed: bool = False
    refresh_interval_s: float = 1.0
    #: The proxy's own SASL/PLAIN credentials for the upstream; None: plaintext, no SASL.
    sasl: UpstreamSasl | None = None

    def __post_init__(self) -> None:
        parse_bootstrap(self.bootstrap)  # a clear ValueError at start-up
        BrokerMap(self.bootstrap, broker_port_base=self.broker_port_base, max_brokers=self.max_brokers)


class UpstreamProxy:
    """Brokers, offered versions and upstream connections of one proxying frontend (on its event loop)."""

    def __init__(
        self,
        config: ProxyConfig,
        advertised_host: str,
        on_new_brokers: Callable[[list[int]], Awaitable[None]],
    ) -> None:
        self.config = config
        self.advertised_host = advertised_host
        self.brokers = BrokerMap(
            config.bootstrap, broker_port_base=config.broker_port_base, max_brokers=config.max_brokers
        )
        self.versions: dict[int, tuple[int, int]] = {}
        self.cluster_id: str | None = None
        self._on_new_brokers = on_new_brokers
        self._last_refresh = 0.0
        self._refreshing: asyncio.Lock | None = None

    async def start(self) -> None:
        """Discover the upstream once; raises :class:`UpstreamClosedError` when no bootstrap broker answers."""
        self._refreshing = asyncio.Lock()
        await self._discover()

    async def _discover(self) -> None:
        info = await discover(self.brokers.bootstrap, timeout_s=self.config.connect_timeout_s, sasl=self.config.sasl)
        self._last_refresh = time.monotonic()
        self.versions = offered_versions(info.versions)
        self.cluster_id = info.cluster_id
        await self.learned(self.brokers.learn(info.brokers))

    async def learned(self, nodes: list[int]) -> None:
        """Brokers new or moved: let the frontend start their listeners."""
        if nodes:
            await self._on_new_brokers(nodes)

    async def refresh(self) -> None:
        """Discover again, at most once per ``refresh_interval_s``; failures are logged, not raised."""
        assert self._refreshing is not None
        async with self._refreshing:
            if time.monotonic() - self._last_refresh < self.config.refresh_interval_s:
                return
            try:
                await self._discover()
            except UpstreamClosedError as e:
                self._last_refresh = time.monotonic()
                log.warning("proxy: refreshing the upstream's brokers failed: %s", e)

    async def connect(self, node_id: int | None) -> UpstreamConnection:
        """The upstream connection behind a client connection on ``node_id``'s port (None: the bootstrap
        port, served by the first bootstrap broker that accepts). A broker that cannot be reached makes the
        proxy ask the upstream again: if it moved, the new address is tried; if it left the cluster, the
        client is refused with that reason."""
        timeout_s = self.config.connect_timeout_s
        sasl = self.config.sasl
        if node_id is None:
            failures = []
            for host, port in self.brokers.bootstrap:
                try:
                    return await UpstreamConnection.open(host, port, timeout_s=timeout_s, sasl=sasl)
                except UpstreamClosedError as e:
                    failures.append(str(e))
            raise UpstreamClosedError("; ".join(failures))
        address = self.brokers.upstream(node_id)
        if address is not None:
            try:
                return await UpstreamConnection.open(*address, timeout_s=timeout_s, sasl=sasl)
            except UpstreamClosedError:
                pass  # moved or gone: ask the upstream
        self._last_refresh = 0.0  # a broker we cannot reach is reason enough to ask now
        await self.refresh()
        moved = self.brokers.upstream(node_id)
        if moved is None:
            raise UpstreamClosedError(f"upstream broker {node_id} is not in the upstream's Metadata")
        return await UpstreamConnection.open(*moved, timeout_s=timeout_s, sasl=sasl)
