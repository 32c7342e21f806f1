"""What every gateway servicer checks, and the errors a gateway request ends with.

A gateway refuses a bad batch whole, before anything reaches a shard (INVALID_ARGUMENT naming the item, so
nothing of it is recorded and the stream goes on); the limits are one :class:`GatewayConfig`, shared by the
QuotaService, ProducerIdService, TelemetryService and ConnectionService. The three errors and their gRPC
statuses (:data:`GATEWAY_ERRORS`) are the gateway's whole error contract: INVALID_ARGUMENT for bad input,
RESOURCE_EXHAUSTED with a ``retry-after-ms`` trailer when the gateway is full, UNAVAILABLE when a shard or
the controller cannot answer.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import grpc

from ..grpcutil import ErrorStatus, StatusRule, Trailers

__all__ = [
    "GATEWAY_ERRORS",
    "RETRY_AFTER_TRAILER",
    "Exhausted",
    "GatewayConfig",
    "InvalidArgument",
    "Unavailable",
    "item_time",
    "wall_clock_ms",
]

#: Trailing metadata of RESOURCE_EXHAUSTED: milliseconds to wait before sending again.
RETRY_AFTER_TRAILER = "retry-after-ms"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class InvalidArgument(Exception):
    """INVALID_ARGUMENT: the batch is refused as a whole (the message names the item)."""


class Unavailable(Exception):
    """UNAVAILABLE: the shards (or the controller) cannot answer now."""


class Exhausted(Exception):
    """RESOURCE_EXHAUSTED: the gateway is full; ``retry_after_ms`` goes to the caller as a trailer."""

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


def _retry_after(exc: Exhausted) -> Trailers:
    return ((RETRY_AFTER_TRAILER, str(exc.retry_after_ms)),) if exc.retry_after_ms else ()


#: The gateway's errors as gRPC statuses (every gateway servicer's handlers are ``GATEWAY_ERRORS.unary``).
GATEWAY_ERRORS = ErrorStatus(
    [
        StatusRule(InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
        StatusRule(Exhausted, grpc.StatusCode.RESOURCE_EXHAUSTED, trailers=_retry_after),
        StatusRule(Unavailable, grpc.StatusCode.UNAVAILABLE),
    ],
    log=logging.getLogger("quotaplane.services.gateway"),
    server="the gateway",
)


def _where(index: int, field: str | None) -> str:
    """How a message names item ``index`` of a batch: ``item 3``, or ``requests[3]`` when the caller names
    the batch's repeated ``field`` (the TelemetryService's messages)."""
    return f"item {index}" if field is None else f"{field}[{index}]"


def item_time(index: int, item: Any, now_ms: int, field: str | None = None) -> int:
    """The item's ``now_ms`` if it set one, else ``now_ms``; INVALID_ARGUMENT if negative."""
    t = item.now_ms if item.HasField("now_ms") else now_ms
    if t < 0:
        raise InvalidArgument(f"{_where(index, field)}: now_ms must be >= 0, got {t}")
    return t


@dataclass(frozen=True)
class GatewayConfig:
    """Limits of one gateway (the defaults suit a 2-core machine)."""

    #: Items per request batch, above which a batch is INVALID_ARGUMENT.
    max_batch_items: int = 10_000
    #: Longest user / client id, in characters (Kafka sets none; this bounds the gateway's memory).
    max_name_length: int = 1024
    #: Items per actor call to one shard.
    max_shard_batch_items: int = 1000
    #: Bytes per actor call to one shard (counted for items that declare a size: telemetry pushes), so a
    #: micro-batch of 1 MiB pushes never makes a 1 GiB call; a single larger request still goes alone.
    max_shard_batch_bytes: int = 8 * 1024 * 1024
    #: How long a shard's worker waits for more items before sending a partial micro-batch. 0: batches form
    #: while the previous call is in flight (natural batching), so an idle shard adds no delay.
    linger_s: float = 0.0
    #: Send micro-batches over each shard's direct TCP channel (~20 µs a round trip) rather than as Ray actor
    #: calls (~0.5–0.9 ms); the actor call remains for shards without a channel.
    direct_shard_calls: bool = True
    #: Micro-batches on a shard's direct connection at once: the next is sent while the shard serves the one
    #: before (the shard still serves them one at a time, in order). 1: each waits for the previous answer.
    shard_pipeline_depth: int = 2
    #: Items queued or in flight at once, gateway-wide (back-pressure beyond).
    max_in_flight_items: int = 200_000
    #: Request batches in flight per stream (answers still go out in order).
    max_stream_in_flight: int = 32
    #: How long a stream's batch waits for room before it is refused in-band with RESOURCE_EXHAUSTED.
    stream_wait_s: float = 5.0
    #: How often the config replica asks the controller for new events.
    poll_interval_s: float = 0.05
    #: Longest wait for a shard's answer before UNAVAILABLE.
    shard_timeout_s: float = 30.0
    #: Re-routes of one item after shards reported newer config, before UNAVAILABLE.
    max_reroutes: int = 8
    #: How long config polls may fail before gRPC health says NOT_SERVING.
    config_stale_s: float = 2.0

    # The limits applied to a request batch (every servicer's checks); ``field``: see ``_where``.
    def check_size(self, count: int, field: str | None = None) -> None:
        """INVALID_ARGUMENT for an empty batch or one over ``max_batch_items`` (every servicer's first check)."""
        if count == 0:
            raise InvalidArgument("empty batch: send at least one item" + (f" in {field}" if field else ""))
        if count > self.max_batch_items:
            raise InvalidArgument(f"batch of {count} items is over the limit of {self.max_batch_items}")

    def check_name(
        self,
        index: int,
        what: str,
        name: str,
        *,
        allow_empty: bool = True,
        field: str | None = None,
        empty_hint: str = " (the principal's name)",
    ) -> str:
        """``name``; INVALID_ARGUMENT if empty (unless allowed), over ``max_name_length`` or holding NUL."""
        if not name and not allow_empty:
            raise InvalidArgument(f"{_where(index, field)}: {what} must not be empty{empty_hint}")
        if len(name) > self.max_name_length:
            raise InvalidArgument(f"{_where(index, field)}: {what} is longer than {self.max_name_length} characters")
        if "\x00" in name:
            raise InvalidArgument(f"{_where(index, field)}: {what} contains a NUL character")
        return name
