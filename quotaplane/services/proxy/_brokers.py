"""Which proxy address stands for which upstream broker: port per broker, from the upstream's own node ids.

A Kafka client connects to every broker it learns from Metadata, so a proxy must give each upstream broker
an address of its own and rewrite every broker address the upstream returns. quotaplane uses one port per
broker: node ``n`` is served on ``broker_port_base + n``. The mapping is a pure function of the node id, so it
is the same on every proxy of the fleet and across restarts (a client that cached Metadata before a proxy
restarted reconnects to the right broker), and needs no state to share. Kroxylicious' "port per broker"
scheme does the same with a node-id range; a node id outside ``0..max_brokers-1`` has no port and is left
out of what clients see (logged once), as an unreachable broker would be.

The upstream addresses are learned from the upstream's Metadata (every response the proxy forwards and its
own refreshes), so brokers that join are served as soon as they appear in one.

>>> brokers = BrokerMap(["127.0.0.1:9092"], broker_port_base=19100, max_brokers=100)
>>> brokers.learn([(1, "10.0.0.1", 9092), (2, "10.0.0.2", 9092)])
[1, 2]
>>> brokers.proxy_port(2), brokers.upstream(2), brokers.node_of_port(19101)
(19102, ('10.0.0.2', 9092), 1)
>>> brokers.proxy_port(100) is None
True
>>> brokers.learn([(2, "10.0.0.2", 9092)]), brokers.nodes  # a complete answer without broker 1: it left
([], [2])
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

__all__ = ["BrokerMap", "parse_bootstrap"]

log = logging.getLogger(__name__)


def parse_bootstrap(text: str | Sequence[str]) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` (IPv6 as ``[::1]:9092``) as (host, port) pairs; a clear ``ValueError``
    otherwise.

    >>> parse_bootstrap("kafka-1:9092,[::1]:9093")
    [('kafka-1', 9092), ('::1', 9093)]
    """
    parts = [p.strip() for p in (text.split(",") if isinstance(text, str) else text)]
    out = []
    for part in parts:
        host, sep, port = part.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"upstream bootstrap address {part!r} is not HOST:PORT with a port in 1..65535")
        out.append((host, int(port)))
    if not out:
        raise ValueError("the upstream bootstrap list is empty")
    return out


class BrokerMap:
    """Upstream node id -> upstream (host, port) and proxy port. Mutated only on the proxy's event loop."""

    def __init__(self, bootstrap: Sequence[str] | str, *, broker_port_base: int, max_brokers: int = 100) -> None:
        if not 1 <= max_brokers <= 10_000:
            raise ValueError(f"max_brokers must be in 1..10000, got {max_brokers}")
        if not broker_port_base >= 1 or broker_port_base + max_brokers - 1 > 65535:
            raise ValueError(
                f"broker ports {broker_port_base}..{broker_port_base + max_brokers - 1} do not fit in 1..65535"
            )
        self.bootstrap = parse_bootstrap(bootstrap)
        self.broker_port_base = broker_port_base
        self.max_brokers = max_brokers
        self._upstream: dict[int, tuple[str, int]] = {}
        self._unmapped: set[int] = set()

    def proxy_port(self, node_id: int) -> int | None:
        """The proxy port serving ``node_id``; None when the id is outside the mapped range."""
        return self.broker_port_base + node_id if 0 <= node_id < self.max_brokers else None

    def node_of_port(self, port: int) -> int | None:
        node = port - self.broker_port_base
        return node if 0 <= node < self.max_brokers else None

    def upstream(self, node_id: int) -> tuple[str, int] | None:
        return self._upstream.get(node_id)

    @property
    def nodes(self) -> list[int]:
        return sorted(self._upstream)

    def learn(self, brokers: Iterable[tuple[int, str, int]], *, complete: bool = True) -> list[int]:
        """Record the upstream's brokers from a Metadata / DescribeCluster answer; returns the node ids that
        are new or moved (their listeners may need starting). ``complete``: the answer lists every live broker
        (Metadata and DescribeCluster do), so a known broker missing from it has left the cluster and is
        forgotten: a client on its port is then refused instead of forwarded to a stale address."""
        brokers = list(brokers)
        changed = []
        if complete and brokers:
            for gone in sorted(set(self._upstream) - {node_id for node_id, _, _ in brokers}):
                log.warning("upstream broker %d (%s:%d) left the upstream's Metadata", gone, *self._upstream[gone])
                del self._upstream[gone]
        for node_id, host, port in brokers:
            if self.proxy_port(node_id) is None:
                if node_id not in self._unmapped:
                    self._unmapped.add(node_id)
                    log.error(
                        "upstream broker %d (%s:%d) has no proxy port: node ids must be in 0..%d "
                        "(--upstream-max-brokers); clients will not see it",
                        node_id,
                        host,
                        port,
                        self.max_brokers - 1,
                    )
                continue
            if self._upstream.get(node_id) != (host, port):
                self._upstream[node_id] = (host, port)
                changed.append(node_id)
        return changed
