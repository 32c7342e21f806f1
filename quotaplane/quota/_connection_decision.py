"""What Kafka's acceptor does with a new connection, as values: ``ConnectionQuotas.inc`` answers one of these.

Kafka's acceptor thread *blocks* inside ``ConnectionQuotas.inc``; a service cannot block its caller, so
the outcome is a ``ConnectionDecision`` (ADMIT, THROTTLE or REJECT, with the ``ConnectionLimit`` behind
it) and a blocked connection is a ``ConnectionAttempt`` token the caller asks again with. They are plain
frozen values so callers (the connection host, the gRPC service) can read them without the manager.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ._connection_config import (
    IP_CONNECTION_RATE_OVERRIDE_CONFIG,
    LISTENER_CONFIG_PREFIX,
    MAX_CONNECTION_CREATION_RATE_CONFIG,
    MAX_CONNECTIONS_CONFIG,
    MAX_CONNECTIONS_PER_IP_CONFIG,
)

__all__ = ["Admission", "ConnectionAttempt", "ConnectionDecision", "ConnectionLimit"]


class Admission(enum.Enum):
    """What ``inc`` decided."""

    ADMIT = "admit"
    THROTTLE = "throttle"
    REJECT = "reject"


class ConnectionLimit(enum.Enum):
    """The limit behind a THROTTLE or REJECT; values are Kafka's config names."""

    BROKER_CONNECTIONS = MAX_CONNECTIONS_CONFIG
    LISTENER_CONNECTIONS = LISTENER_CONFIG_PREFIX + "<listener>." + MAX_CONNECTIONS_CONFIG
    IP_CONNECTIONS = MAX_CONNECTIONS_PER_IP_CONFIG
    BROKER_CONNECTION_RATE = MAX_CONNECTION_CREATION_RATE_CONFIG
    LISTENER_CONNECTION_RATE = LISTENER_CONFIG_PREFIX + "<listener>." + MAX_CONNECTION_CREATION_RATE_CONFIG
    IP_CONNECTION_RATE = IP_CONNECTION_RATE_OVERRIDE_CONFIG


@dataclass(frozen=True, slots=True)
class ConnectionAttempt:
    """A connection that Kafka's acceptor would be blocked on; pass it back to ``inc`` to ask again.

    It was recorded once, on the broker and listener rate sensors, when it first arrived
    (``started_ms``); asking again with it records nothing more there. ``throttle_end_ms`` is when
    its rate delay ends (``started_ms`` if it only waits for a slot). ``rate_limit`` names the rate
    limit that set the delay. A token is valid until ``inc`` admits or rejects it, ``abandon`` drops
    it, or its listener is removed.
    """

    attempt_id: int
    listener: str
    ip: str
    started_ms: int
    throttle_end_ms: int
    rate_limit: ConnectionLimit | None = None


@dataclass(frozen=True, slots=True)
class ConnectionDecision:
    """The answer to ``inc``.

    ============== ===========================================================================
    ``kind``       ADMIT, THROTTLE or REJECT
    ``throttle_ms`` THROTTLE: ms left of a rate delay (0: waiting for a free slot).
                   REJECT by ``IP_CONNECTION_RATE``: ms to hold the socket before closing it.
    ``limit``      the limit behind a THROTTLE or REJECT
    ``max_connections`` the count limit named by ``limit`` (count limits only)
    ``attempt``    THROTTLE only: the token to ask again with
    ============== ===========================================================================
    """

    kind: Admission
    listener: str
    ip: str
    throttle_ms: int = 0
    limit: ConnectionLimit | None = None
    max_connections: int | None = None
    attempt: ConnectionAttempt | None = None

    @property
    def admitted(self) -> bool:
        return self.kind is Admission.ADMIT

    @property
    def throttled(self) -> bool:
        return self.kind is Admission.THROTTLE

    @property
    def rejected(self) -> bool:
        return self.kind is Admission.REJECT

    @property
    def waiting_for_slot(self) -> bool:
        """THROTTLE with no rate delay left: a broker or listener ``max.connections`` is reached."""
        return self.kind is Admission.THROTTLE and self.throttle_ms == 0

    @property
    def counted(self) -> bool:
        """True if the connection is in the counts, so the caller must call ``dec`` when it closes.

        True for ADMIT and for a ``max.connections.per.ip`` REJECT (Kafka counts it, then closes it).
        """
        return self.kind is Admission.ADMIT or self.limit is ConnectionLimit.IP_CONNECTIONS
