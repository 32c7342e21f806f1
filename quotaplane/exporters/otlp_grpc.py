"""OtlpGrpcForwarder: hand accepted KIP-714 pushes on to an OpenTelemetry collector over OTLP/gRPC.

The telemetry manager calls ``export_metrics`` on the request path, so this exporter only appends the
payload object to a bounded queue (no serialization, no copy) and returns. A sender thread takes pushes
in FIFO order, batches them, copies their ``resource_metrics`` (the broker's labels already merged in)
into one ``ExportMetricsServiceRequest`` and calls ``MetricsService/Export``::

    request path                  sender thread                              collector
    export_metrics ─► queue ─► up to max_batch_pushes / max_batch_bytes ─► Export(deadline) ─► ok
                        │      or max_batch_delay_ms after the first       │ retryable: backoff, retry
                 full: dropped                                             │ otherwise: failed_pushes

**Retries follow the OTLP/gRPC table** (opentelemetry-proto ``docs/specification.md``, "Failures"):
CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE and DATA_LOSS are retried, up to
``max_retries`` times, with exponential backoff and jitter; RESOURCE_EXHAUSTED only when the server
attaches a ``google.rpc.RetryInfo`` ("recovery is possible"); every other code drops the batch at once.
A ``RetryInfo`` delay is a floor for the next wait (both capped at ``max_backoff_ms``). A partial
success is never retried: its ``rejected_data_points`` are counted.

``RetryInfo`` is read with ``google.rpc`` from googleapis-common-protos, a direct dependency.

**Counters** are plain ints for a stats layer to read: ``enqueued``, ``dropped`` (queue full, or pushed
after ``close``), ``sent_batches``, ``sent_pushes``, ``failed_batches``, ``failed_pushes`` (enqueued but
given up: failed batches and, at ``close``, what was still queued), ``retries``, ``rejected_data_points``.
Once the sender is idle, ``enqueued == sent_pushes + failed_pushes``. Failures are logged at most once
per ``log_interval_ms`` per kind, with the number of lines held back.
"""

from __future__ import annotations

import logging
import math
import random
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import grpc
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import MetricsServiceStub

from ._log_limit import LogLimiter

if TYPE_CHECKING:
    from ..telemetry._exporter import ClientTelemetryContext, ClientTelemetryPayload

__all__ = ["RETRYABLE_CODES", "OtlpGrpcForwarder", "OtlpGrpcForwarderConfig", "backoff_delay_ms", "is_retryable"]

_log = logging.getLogger(__name__)

#: Codes the OTLP spec calls retryable. RESOURCE_EXHAUSTED is not here: it is retried only with RetryInfo.
RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)

_STATUS_DETAILS_KEY = "grpc-status-details-bin"
# gRPC metadata keys: lowercase; "-bin" keys carry bytes and "grpc-" is reserved, so neither is allowed here.
_HEADER_KEY = re.compile(r"[0-9a-z_.-]+")


@dataclass(frozen=True, slots=True, kw_only=True)
class OtlpGrpcForwarderConfig:
    """Where and how to forward. Only ``target`` is required::

        OtlpGrpcForwarderConfig(target="otel-collector:4317")                       # plaintext, defaults
        OtlpGrpcForwarderConfig(target="otel.example:4317", insecure=False,         # TLS, system roots
                                headers=(("authorization", "Bearer ..."),), compression="gzip")

    ``max_batch_bytes`` bounds a request by the pushes' ``len(data)`` (the client's uncompressed
    MetricsData; the broker labels add a little): the collector refuses messages over its
    ``max_recv_msg_size_mib`` (4 MiB by default) with a non-retryable RESOURCE_EXHAUSTED, so the
    default leaves 1 MiB of room. A single push over the bound is still sent, alone.
    ``queue_max_bytes`` bounds the memory the queue keeps alive (by the same measure; the decoded
    MetricsData each payload also holds is a few times larger).
    """

    target: str
    #: Plaintext when True (the default, as for a collector sidecar); TLS when False.
    insecure: bool = True
    #: PEM roots for TLS; None means the system's. Only with ``insecure=False``.
    root_certificates: bytes | None = None
    #: gRPC metadata sent with every call, e.g. ``(("authorization", "Bearer ..."),)``.
    headers: tuple[tuple[str, str], ...] = ()
    compression: Literal["none", "gzip"] = "none"
    queue_size: int = 2048
    queue_max_bytes: int = 64 * 1024 * 1024
    max_batch_pushes: int = 256
    max_batch_bytes: int = 3 * 1024 * 1024
    max_batch_delay_ms: int = 200
    #: Deadline of one Export call.
    timeout_ms: int = 10_000
    #: Retries after the first attempt; 0 sends each batch once.
    max_retries: int = 5
    initial_backoff_ms: int = 500
    backoff_multiplier: float = 2.0
    #: Caps every wait between attempts, the server's RetryInfo included.
    max_backoff_ms: int = 30_000
    #: Each wait is scaled by a uniform factor in [1 - jitter, 1 + jitter].
    jitter: float = 0.2
    #: gRPC's own reconnect backoff grows to 120 s by default, and calls fail at once while it runs:
    #: capped so that a collector that comes back is used again within seconds.
    max_reconnect_backoff_ms: int = 5_000
    #: At most one log line per kind of failure in this interval.
    log_interval_ms: int = 30_000

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or not self.target:
            raise ValueError(f"target must be a non-empty 'host:port', got {self.target!r}")
        if self.insecure and self.root_certificates is not None:
            raise ValueError("root_certificates need insecure=False")
        if self.compression not in ("none", "gzip"):
            raise ValueError(f"compression must be 'none' or 'gzip', got {self.compression!r}")
        for key, value in self.headers:
            if not _HEADER_KEY.fullmatch(key) or key.endswith("-bin") or key.startswith("grpc-"):
                raise ValueError(f"header {key!r}: gRPC metadata keys are lowercase [0-9a-z_.-], not -bin or grpc-")
            if not isinstance(value, str):
                raise ValueError(f"header {key!r}: the value must be a str, got {type(value).__name__}")
        for name in ("queue_size", "queue_max_bytes", "max_batch_pushes", "max_batch_bytes", "timeout_ms"):
            _check_int(name, getattr(self, name), minimum=1)
        for name in ("max_batch_delay_ms", "max_retries", "initial_backoff_ms", "max_backoff_ms", "log_interval_ms"):
            _check_int(name, getattr(self, name), minimum=0)
        _check_int("max_reconnect_backoff_ms", self.max_reconnect_backoff_ms, minimum=1)
        if self.max_batch_pushes > self.queue_size:
            raise ValueError(f"max_batch_pushes ({self.max_batch_pushes}) exceeds queue_size ({self.queue_size})")
        if not (math.isfinite(self.backoff_multiplier) and self.backoff_multiplier >= 1):
            raise ValueError(f"backoff_multiplier must be ≥ 1, got {self.backoff_multiplier!r}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be in [0, 1], got {self.jitter!r}")


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if type(value) is not int or value < minimum:
        raise ValueError(f"{name} must be an int ≥ {minimum}, got {value!r}")


def backoff_delay_ms(config: OtlpGrpcForwarderConfig, retry: int, unit: float, *, floor_ms: float = 0.0) -> float:
    """The wait before retry number ``retry`` (0 for the first retry), in ms.

    ``initial * multiplier**retry`` scaled by a jitter factor picked by ``unit`` (a uniform draw in
    [0, 1): 0 gives ``1 - jitter``, 0.5 gives 1), never below the server's ``floor_ms`` (RetryInfo),
    and capped at ``max_backoff_ms``. The jitter keeps forwarders that failed together from retrying
    in lockstep against a collector that is coming back.

    >>> config = OtlpGrpcForwarderConfig(target="collector:4317", initial_backoff_ms=100, max_backoff_ms=1_000)
    >>> [backoff_delay_ms(config, retry, 0.5) for retry in range(5)]
    [100.0, 200.0, 400.0, 800.0, 1000.0]
    >>> backoff_delay_ms(config, 0, 0.0), backoff_delay_ms(config, 0, 0.0, floor_ms=300)
    (80.0, 300.0)
    """
    # min() first keeps multiplier**retry from overflowing a float on a long retry count.
    base = min(float(config.max_backoff_ms), config.initial_backoff_ms * config.backoff_multiplier ** min(retry, 64))
    jittered = base * (1 - config.jitter + 2 * config.jitter * unit)
    return min(float(config.max_backoff_ms), max(jittered, float(floor_ms)))


def is_retryable(code: grpc.StatusCode, *, has_retry_info: bool) -> bool:
    """The OTLP table: RESOURCE_EXHAUSTED counts only when the server says recovery is possible.

    >>> is_retryable(grpc.StatusCode.UNAVAILABLE, has_retry_info=False)
    True
    >>> [is_retryable(grpc.StatusCode.RESOURCE_EXHAUSTED, has_retry_info=info) for info in (False, True)]
    [False, True]
    >>> is_retryable(grpc.StatusCode.INVALID_ARGUMENT, has_retry_info=True)
    False
    """
    return code in RETRYABLE_CODES or (code is grpc.StatusCode.RESOURCE_EXHAUSTED and has_retry_info)


def _describe(error: grpc.RpcError) -> tuple[grpc.StatusCode, str, float | None]:
    """The code, the details and the server's RetryInfo delay (ms, None if absent) of a failed call."""
    if not isinstance(error, grpc.Call):  # every error of a unary call is one; be safe anyway
        return grpc.StatusCode.UNKNOWN, str(error), None
    return error.code(), error.details() or "", _retry_info_ms(error)


def _retry_info_ms(error: grpc.Call) -> float | None:
    """The RetryInfo delay in ms from the ``grpc-status-details-bin`` trailer (a google.rpc.Status)."""
    for key, value in error.trailing_metadata() or ():
        if key != _STATUS_DETAILS_KEY:
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except Exception:  # a malformed trailer is no hint, not a reason to drop the batch
            return None
        for detail in status.details:
            if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                info = error_details_pb2.RetryInfo()
                detail.Unpack(info)
                return info.retry_delay.seconds * 1000 + info.retry_delay.nanos / 1e6
    return None


class OtlpGrpcForwarder:
    """A ``ClientTelemetryExporter`` that forwards pushes to an OTLP/gRPC collector (see the module doc).

    The sender thread and the channel start with the object (gRPC connects on the first call). Use it
    as a context manager or call ``close``; ``close`` is bounded by its timeout even when the
    collector is down, and pushes still queued then are given up (``failed_pushes``).
    """

    def __init__(self, config: OtlpGrpcForwarderConfig) -> None:
        self.config = config
        self.enqueued = 0
        self.dropped = 0
        self.sent_batches = 0
        self.sent_pushes = 0
        self.failed_batches = 0
        self.failed_pushes = 0
        self.retries = 0
        self.rejected_data_points = 0

        # One lock, two conditions: `_work` wakes the sender, `_progress` wakes flush callers, so a
        # notify meant for one can never be taken by the other.
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)
        self._pending: deque[ClientTelemetryPayload] = deque()
        self._pending_bytes = 0
        self._done = 0  # pushes taken off the queue and finished (sent or given up), in FIFO order
        self._flushing = 0  # flush calls waiting: the sender then sends without the batch delay
        self._closed = False
        self._stop = threading.Event()
        self._dropped_logged = 0
        self._log = LogLimiter(_log, config.log_interval_ms / 1000)
        self._random = random.Random()

        self._channel = _open_channel(config)
        self._stub = MetricsServiceStub(self._channel)
        self._thread = threading.Thread(target=self._run, name=f"otlp-grpc-forwarder[{config.target}]", daemon=True)
        self._thread.start()

    # -- the request path ------------------------------------------------------------------------

    def export_metrics(self, context: ClientTelemetryContext, payload: ClientTelemetryPayload) -> None:
        """Queue the push; never blocks. A full queue (or a closed forwarder) drops it and counts ``dropped``.

        ``context`` is not forwarded: the broker's labels are already in ``payload.metrics_data``.
        """
        size = len(payload.data)
        config = self.config
        with self._lock:
            if (
                self._closed
                or len(self._pending) >= config.queue_size
                or (self._pending and self._pending_bytes + size > config.queue_max_bytes)
            ):
                self.dropped += 1
                return
            self._pending.append(payload)
            self._pending_bytes += size
            self.enqueued += 1
            if (
                len(self._pending) == 1
                or len(self._pending) >= config.max_batch_pushes
                or self._pending_bytes >= config.max_batch_bytes
            ):
                self._work.notify()

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the sender thread is alive (False once ``close`` has stopped it)."""
        return self._thread.is_alive()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every push enqueued before this call is sent or given up; False on timeout.

        Batches that are waiting for more pushes go at once while a flush waits.
        """
        with self._lock:
            target = self.enqueued
            self._flushing += 1
            self._work.notify()
            try:
                return self._progress.wait_for(lambda: self._done >= target, timeout=max(0.0, timeout_s))
            finally:
                self._flushing -= 1

    def close(self, timeout_s: float = 5.0) -> None:
        """Flush, then stop the sender and close the channel, all within about ``timeout_s``. Idempotent.

        A quarter of the budget (at most 1 s) is kept for stopping: closing the channel cancels a
        call in flight and the stop event cuts a backoff short, so the thread ends promptly even
        when the collector is down. Pushes arriving from now on are counted as ``dropped``.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + timeout_s
        stop_budget_s = min(1.0, timeout_s / 4)
        self.flush(timeout_s - stop_budget_s)
        self._stop.set()
        with self._lock:
            self._work.notify_all()
        self._channel.close()
        self._thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> OtlpGrpcForwarder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the sender thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while batch := self._next_batch():
            try:
                self._send(batch)
            except Exception:  # the thread must outlive any surprise, or the queue would fill for good
                self._give_up(batch)
                self._log.warning("error", "OTLP export to %s: unexpected error", self.config.target, exc_info=True)
            self._finish(len(batch))
            self._report_dropped()
        self._abandon_pending()
        self._report_dropped()

    def _next_batch(self) -> list[ClientTelemetryPayload]:
        """Block for the next batch; an empty list means stop."""
        config = self.config
        stop = self._stop
        with self._lock:
            while not self._pending and not stop.is_set():
                self._work.wait()
            deadline = time.monotonic() + config.max_batch_delay_ms / 1000
            while (
                len(self._pending) < config.max_batch_pushes
                and self._pending_bytes < config.max_batch_bytes
                and not self._flushing
                and not stop.is_set()
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._work.wait(remaining)
            if stop.is_set():
                return []
            batch: list[ClientTelemetryPayload] = []
            size = 0
            while self._pending and len(batch) < config.max_batch_pushes:
                next_size = len(self._pending[0].data)
                if batch and size + next_size > config.max_batch_bytes:
                    break
                batch.append(self._pending.popleft())
                size += next_size
            self._pending_bytes -= size
            return batch

    def _send(self, batch: list[ClientTelemetryPayload]) -> None:
        config = self.config
        request = ExportMetricsServiceRequest()
        for payload in batch:
            # extend copies each message: the payload, shared with other exporters, is not touched.
            request.resource_metrics.extend(payload.metrics_data.resource_metrics)
        timeout_s = config.timeout_ms / 1000
        retry = 0
        while True:
            try:
                response = self._stub.Export(request, timeout=timeout_s, metadata=config.headers or None)
            except grpc.RpcError as error:
                code, details, hint_ms = _describe(error)
                retryable = is_retryable(code, has_retry_info=hint_ms is not None)
                if retryable and retry < config.max_retries and not self._stop.is_set():
                    delay_ms = backoff_delay_ms(config, retry, self._random.random(), floor_ms=hint_ms or 0.0)
                    if not self._stop.wait(delay_ms / 1000):  # close() cuts the wait short
                        retry += 1
                        self.retries += 1
                        continue
                self._give_up(batch)
                why = "not retryable" if not retryable else "closing" if self._stop.is_set() else "retries spent"
                self._log.warning(
                    "failed",
                    "OTLP export to %s failed (%s, %s, %d retries): %s; %d pushes dropped",
                    config.target,
                    code.name,
                    why,
                    retry,
                    details,
                    len(batch),
                )
                return
            self._accepted(batch, response)
            return

    def _accepted(self, batch: list[ClientTelemetryPayload], response: ExportMetricsServiceResponse) -> None:
        self.sent_batches += 1
        self.sent_pushes += len(batch)
        if not response.HasField("partial_success"):
            return
        partial = response.partial_success
        self.rejected_data_points += partial.rejected_data_points
        if partial.rejected_data_points or partial.error_message:
            self._log.warning(
                "partial",
                "OTLP collector %s rejected %d data points: %s",
                self.config.target,
                partial.rejected_data_points,
                partial.error_message,
            )

    def _give_up(self, batch: list[ClientTelemetryPayload]) -> None:
        self.failed_batches += 1
        self.failed_pushes += len(batch)

    def _finish(self, count: int) -> None:
        with self._lock:
            self._done += count
            self._progress.notify_all()

    def _abandon_pending(self) -> None:
        """At stop: what is still queued is given up (counted, so flush callers and the totals agree)."""
        with self._lock:
            count = len(self._pending)
            self._pending.clear()
            self._pending_bytes = 0
            self.failed_pushes += count
            self._done += count
            self._progress.notify_all()
        if count:
            _log.warning("OTLP forwarder to %s closed with %d pushes unsent", self.config.target, count)

    def _report_dropped(self) -> None:
        dropped = self.dropped
        if dropped > self._dropped_logged:
            self._log.warning(
                "dropped",
                "OTLP forwarder to %s: queue full, %d pushes dropped so far",
                self.config.target,
                dropped,
            )
            self._dropped_logged = dropped


def _open_channel(config: OtlpGrpcForwarderConfig) -> grpc.Channel:
    options = [
        ("grpc.initial_reconnect_backoff_ms", min(1_000, config.max_reconnect_backoff_ms)),
        ("grpc.max_reconnect_backoff_ms", config.max_reconnect_backoff_ms),
    ]
    compression = grpc.Compression.Gzip if config.compression == "gzip" else grpc.Compression.NoCompression
    if config.insecure:
        return grpc.insecure_channel(config.target, options=options, compression=compression)
    credentials = grpc.ssl_channel_credentials(root_certificates=config.root_certificates)
    return grpc.secure_channel(config.target, credentials, options=options, compression=compression)
