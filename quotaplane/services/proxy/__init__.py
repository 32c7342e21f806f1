"""Proxy mode of the Kafka-facing frontend: quotaplane in front of real Kafka brokers.

Clients bootstrap to the frontend; every request quotaplane does not answer itself reaches the upstream
cluster over one upstream connection per client connection, with Kafka's own quotas applied on the way back
(the frontend's ``_forward.py``). This package is the upstream side: which proxy port stands for which
broker (``_brokers.py``), the upstream connections and discovery (``_upstream.py``), the address rewriting
and the versions offered (``_rewrite.py``), and the shared state of one proxy (``_proxy.py``).
"""

from ._brokers import BrokerMap, parse_bootstrap
from ._proxy import DEFAULT_BROKER_PORT_BASE, ProxyConfig, UpstreamProxy
from ._rewrite import LOCAL_APIS, REWRITTEN_APIS, offered_versions, rewrite_response
from ._upstream import UpstreamClosedError, UpstreamConnection, UpstreamInfo, UpstreamSasl, discover

__all__ = [
    "DEFAULT_BROKER_PORT_BASE",
    "LOCAL_APIS",
    "REWRITTEN_APIS",
    "BrokerMap",
    "ProxyConfig",
    "UpstreamClosedError",
    "UpstreamConnection",
    "UpstreamInfo",
    "UpstreamProxy",
    "UpstreamSasl",
    "discover",
    "offered_versions",
    "parse_bootstrap",
    "rewrite_response",
]
