"""The Kafka-facing frontend: an asyncio server speaking the Kafka wire protocol, backed by the gateway.

The wire codec it speaks is the core's :mod:`quotaplane.protocol`; this package is the network side: the
listener (``server.py``), one connection as Kafka's network layer leads it (``_connection.py``), the Kafka APIs
it answers (``_handlers.py``), the batched gRPC calls behind them (``_backend.py``, ``_batcher.py``) and
SASL/PLAIN (``_sasl.py``). See ``server.py`` for why it is built this way.
"""

from ._backend import GrpcTarget
from ._config import PROXY_MAX_REQUEST_BYTES
from ._sasl import PlainCredentials, SaslError, ScramCredentials, scram_credential_line
from .server import (
    DEFAULT_FRONTEND_PORT,
    DEFAULT_MAX_REQUEST_BYTES,
    FrontendConfig,
    FrontendServer,
    FrontendStats,
    KafkaListener,
    serve_frontend,
    tls_context,
)

__all__ = [
    "DEFAULT_FRONTEND_PORT",
    "DEFAULT_MAX_REQUEST_BYTES",
    "PROXY_MAX_REQUEST_BYTES",
    "FrontendConfig",
    "FrontendServer",
    "FrontendStats",
    "GrpcTarget",
    "KafkaListener",
    "PlainCredentials",
    "SaslError",
    "ScramCredentials",
    "scram_credential_line",
    "serve_frontend",
    "tls_context",
]
