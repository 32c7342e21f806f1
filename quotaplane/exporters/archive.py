"""``TelemetryArchiveExporter``: every accepted KIP-714 push, archived durably to the ``telemetry`` stream.

The manager calls ``export_metrics`` on the request path, so it only turns the push into its record (the
instance's labels are encoded once and kept, ``telemetry_record``) and puts that on a bounded queue: no I/O,
no batch encoding, a lock held for an append. When the queue is full the push is dropped and counted
(``dropped``): a slow disk costs telemetry, never request latency. The record, not the push, waits in the
queue: a push holds its decoded OTLP message too, and letting up to a batch of those live until the
thread took them, to be freed there, cost the request path more than the record costs to make (measured in
docs/performance.md, "The archive's queue holds records"). One
background thread drains the queue into an ``ArchiveWriter``, taking pushes by the batch (once
``linger_records`` wait, the oldest has waited ``linger_ms`` or a flush asks; see ``_wake``), and flushes
durably (fsync) when
``flush_max_records`` records are pending or ``flush_max_ms`` has passed since the first unflushed
one, whichever comes first; with the defaults (1000 records, 1000 ms) a quiet broker's pushes reach
disk within about a second and a busy one does one fsync per thousand pushes.

One record per push (see ``docs/archive-format.md``, "The telemetry stream"):

- time: ``context.received_ms``, which picks the hour partition;
- labels: ``payload.resource_attributes`` (the broker-side labels: client_instance_id, client_id,
  ..., node_id), then ``push_interval_ms``, ``compression_type``, ``terminating`` and
  ``content_type`` (these four win over a resource attribute of the same name);
- body: ``payload.data``, the decompressed OTLP ``MetricsData`` bytes exactly as the client sent them.
  The labels ride alongside instead of being merged in, so a reader rebuilds what the broker saw
  (``metrics_data``) and can still tell the client's own resource attributes from ours.

**Errors.** An I/O error on flush is counted (``errors``) and logged at most once per
``error_log_interval_ms`` (with the number suppressed); the records stay pending and the flush is
retried after ``retry_backoff_ms``, in a new segment (the writer abandons a segment that failed).
While it retries, the thread takes no more from the queue, so memory stays bounded and new pushes are
dropped once the queue is full. A record the format cannot hold (a label that is not a str) is
counted in ``errors`` and ``dropped``. Nothing raises into the request path, and the thread survives
every ``Exception``.

**Delivery** is at least once across an I/O error (a batch whose fsync failed may still be on disk
and is written again) and exactly once otherwise; ``close`` drains the queue and flushes once: if that
flush fails, what it held is dropped (counted) rather than hanging shutdown.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from ..archive import DEFAULT_MAX_SEGMENT_BYTES, ArchiveRecord, ArchiveWriter, EncodedLabels
from ._log_limit import LogLimiter

if TYPE_CHECKING:  # annotations only: the exporter does not pull in the telemetry engine
    from ..telemetry._exporter import ClientTelemetryContext, ClientTelemetryPayload

__all__ = [
    "LABEL_COMPRESSION_TYPE",
    "LABEL_CONTENT_TYPE",
    "LABEL_PUSH_INTERVAL_MS",
    "LABEL_TERMINATING",
    "TELEMETRY_STREAM",
    "THROTTLE_STREAM",
    "ArchiveExporterStats",
    "RecordSink",
    "TelemetryArchiveExporter",
    "telemetry_labels",
    "telemetry_record",
]

_log = logging.getLogger(__name__)

TELEMETRY_STREAM = "telemetry"
#: The shards' throttle decisions (``actors/_throttle_archive.py``), read by the Spark throttle report.
THROTTLE_STREAM = "throttle"
#: The push labels added to the resource attributes (values are strings, as every label).
LABEL_PUSH_INTERVAL_MS = "push_interval_ms"  # decimal, the interval the client was given
LABEL_COMPRESSION_TYPE = "compression_type"  # decimal Kafka CompressionType id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
LABEL_TERMINATING = "terminating"  # "true" or "false"
LABEL_CONTENT_TYPE = "content_type"  # "application/x-protobuf" for OTLP


class RecordSink(Protocol):
    """What the exporter needs of its writer: ``ArchiveWriter``'s interface (a test double can stand in).

    ``pending_records`` is the number appended and not yet durable; ``bytes_written`` is cumulative.
    """

    pending_records: int
    bytes_written: int

    def append(self, record: ArchiveRecord) -> None: ...

    def flush(self, *, fsync: bool = True) -> int: ...

    def discard_pending(self) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ArchiveExporterStats:
    """A consistent snapshot of the exporter's counters (all since start)."""

    exported: int  # records made durable
    dropped: int  # pushes not archived: queue full, exporter closed, unencodable, or lost at close
    flushes: int  # successful durable flushes
    bytes_written: int  # bytes appended to segment files
    errors: int  # I/O errors and records the writer refused
    queued: int  # pushes waiting in the queue now


def telemetry_labels(context: ClientTelemetryContext, payload: ClientTelemetryPayload) -> dict[str, str]:
    """The labels of a push's record (see the module docstring for the keys)."""
    labels = dict(payload.resource_attributes)
    labels[LABEL_PUSH_INTERVAL_MS] = str(context.push_interval_ms)
    labels[LABEL_COMPRESSION_TYPE] = str(payload.compression_type)
    labels[LABEL_TERMINATING] = "true" if payload.is_terminating else "false"
    labels[LABEL_CONTENT_TYPE] = payload.content_type
    return labels


#: Label sets an instance's memo holds before it starts afresh (an instance pushes with one interval and one
#: compression; only the terminating flag changes, once)
_MEMO_MAX = 8
#: This module's keys in a ``labels_memo`` start with it (other exporters keep their own there)
_MEMO_KEY = "archive"
#: The memo keys in use, each kept once (a tuple an instance was 80 bytes of every client's memory)
_MEMO_KEYS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_MEMO_KEYS_MAX = 1024


def telemetry_record(context: ClientTelemetryContext, payload: ClientTelemetryPayload) -> ArchiveRecord:
    """The archive record of one accepted push (see the module docstring for the label keys).

    A payload with a ``labels_memo`` (the manager's, one per client instance) has its labels encoded once per
    instance and push labels, and kept there as ``EncodedLabels``: every push of a client carries the same
    dozen labels, and encoding them per push was half the archive's CPU. The record's bytes are the same.
    """
    memo = getattr(payload, "labels_memo", None)
    if memo is None:
        return ArchiveRecord(context.received_ms, telemetry_labels(context, payload), payload.data)
    key = (_MEMO_KEY, context.push_interval_ms, payload.compression_type, payload.is_terminating, payload.content_type)
    labels = memo.get(key)
    if labels is None:
        labels = EncodedLabels(telemetry_labels(context, payload))  # ValueError/TypeError: the push is refused
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        if len(_MEMO_KEYS) >= _MEMO_KEYS_MAX:
            _MEMO_KEYS.clear()
        memo[_MEMO_KEYS.setdefault(key, key)] = labels  # one key object for every instance that pushes alike
    return ArchiveRecord(context.received_ms, labels, payload.data)


class TelemetryArchiveExporter:
    """A ``ClientTelemetryExporter`` writing every push to ``<root>/<stream>/`` (see the module docstring).

    Give ``root`` (and writer options), or a ready ``writer`` (any ``RecordSink``); the thread starts at
    once. ``to_record`` makes the exporter archive other items given to :meth:`submit` (the shards'
    throttle archive uses it): the same queue, batching, fsync and error handling for any stream; the thread
    calls it. Without it the items are ``(context, payload)`` pushes, made records at once on the caller's
    thread (see the module docstring).
    ``flush()`` waits until everything accepted so far is durable; ``close()`` drains, flushes and stops
    (idempotent; ``export_metrics`` after it drops and counts).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        stream: str = TELEMETRY_STREAM,
        queue_capacity: int = 10_000,
        flush_max_records: int = 1000,
        flush_max_ms: int = 1000,
        retry_backoff_ms: int = 1000,
        error_log_interval_ms: int = 60_000,
        writer_id: str | None = None,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
        writer: RecordSink | None = None,
        to_record: Callable[[Any], ArchiveRecord] | None = None,
        linger_records: int = 256,
        linger_ms: int = 20,
    ) -> None:
        if (root is None) == (writer is None):
            raise ValueError("give exactly one of root and writer")
        if queue_capacity < 1 or flush_max_records < 1 or linger_records < 1:
            raise ValueError("queue_capacity, flush_max_records and linger_records must be >= 1")
        if flush_max_ms < 0 or retry_backoff_ms < 0 or linger_ms < 0:
            raise ValueError("flush_max_ms, retry_backoff_ms and linger_ms must be >= 0")
        if writer is None:
            assert root is not None
            writer = ArchiveWriter(root, stream, writer_id=writer_id, max_segment_bytes=max_segment_bytes)
        self._writer = writer
        #: what the thread makes of a queued item (None: the queue holds records, made by ``_push_record``)
        self._to_record = to_record
        self._capacity = queue_capacity
        self._flush_max_records = flush_max_records
        self._flush_max_s = flush_max_ms / 1000
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._linger_records = linger_records
        self._linger_s = linger_ms / 1000

        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # wakes the thread: new push, flush request, close
        self._done = threading.Condition(self._lock)  # wakes flush() callers: progress, error, stop
        self._queue: deque[Any] = deque()
        self._queued_at = 0.0  # monotonic time the oldest queued push arrived (the queue not empty)
        self._accepted = 0  # pushes ever queued
        self._settled = 0  # of those, durable or given up (the first `_settled` in queue order)
        self._flush_target = 0  # flush() wants `_settled >= _flush_target`
        self._closing = False
        self._stopped = False
        self._exported = 0
        self._dropped = 0
        self._flushes = 0
        self._bytes_written = 0
        self._errors = 0
        self._error_log = LogLimiter(_log, error_log_interval_ms / 1000)

        self._thread = threading.Thread(target=self._run, name="quotaplane-telemetry-archive", daemon=True)
        self._thread.start()

    # --- the request path -----------------------------------------------------------------------------
    def export_metrics(self, context: ClientTelemetryContext, payload: ClientTelemetryPayload) -> None:
        """Queue the push for the archive, or drop and count it if the queue is full. Never blocks on I/O."""
        self.submit((context, payload))

    def submit(self, item: Any) -> bool:
        """Queue one item for ``to_record`` and the archive; False (dropped and counted) if the queue is
        full, the exporter is closing or the push cannot be archived. Never blocks on I/O."""
        if self._to_record is None:
            item = self._push_record(item)
            if item is None:
                return False
        with self._lock:
            if self._closing or len(self._queue) >= self._capacity:
                self._dropped += 1
                return False
            self._queue.append(item)
            self._accepted += 1
            self._wake(1)
            return True

    def submit_many(self, items: Sequence[Any]) -> int:
        """Queue items in order, as ``submit`` would one by one; how many were queued (the rest, past a full
        queue, at closing or pushes the format cannot hold, dropped and counted). One lock and one wake-up of
        the thread for all of them: the shards' throttle archive hands over a micro-batch's throttles this way."""
        if self._to_record is None:
            records = [record for record in map(self._push_record, items) if record is not None]
            return self._queue_many(records) if records else 0
        return self._queue_many(items) if items else 0

    def _queue_many(self, items: Sequence[Any]) -> int:
        with self._lock:
            room = 0 if self._closing else max(0, self._capacity - len(self._queue))
            taken = items if room >= len(items) else items[:room]
            self._queue.extend(taken)
            queued = len(taken)
            self._accepted += queued
            self._dropped += len(items) - queued
            if queued:
                self._wake(queued)
            return queued

    def _push_record(self, push: tuple[ClientTelemetryContext, ClientTelemetryPayload]) -> ArchiveRecord | None:
        """The push's record, or None (dropped, counted and logged) if it cannot be archived: a label the format
        cannot hold, or anything else that is not a push; as on the thread, nothing raises into the request path."""
        try:
            return telemetry_record(*push)
        except Exception as exc:
            with self._lock:
                self._dropped += 1
                suppressed = self._count_error()
            self._log_error("a push could not be archived", exc, suppressed)
            return None

    def _wake(self, added: int) -> None:
        """After ``added`` pushes were queued (lock held): wake the thread when the queue was empty (it starts
        lingering) or just reached ``linger_records``; not for every push in between.

        Why: a push woken for alone is taken alone, and in a process whose request path releases the GIL (zstd
        does) the thread then runs between every two pushes: measured with ``bench/telemetry.py``, the archive's
        thread costing more than the push itself.
        """
        size = len(self._queue)
        if size == added:
            self._queued_at = time.monotonic()
            self._work.notify()
        elif size >= self._linger_records > size - added:
            self._work.notify()

    # --- control --------------------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every push accepted before this call is durable. False if an error happened meanwhile
        (a failed flush, a refused record; the thread keeps retrying), the exporter stopped first, or
        ``timeout`` seconds passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            target = self._accepted
            errors = self._errors
            self._flush_target = max(self._flush_target, target)
            self._work.notify()
            while self._settled < target and self._errors == errors and not self._stopped:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._done.wait(remaining)
            return self._settled >= target and self._errors == errors

    def close(self, timeout: float | None = None) -> None:
        """Drain the queue, flush, close the writer and stop the thread. Idempotent. With ``timeout``,
        returns after that many seconds even if the thread is still writing (a hung disk)."""
        with self._lock:
            self._closing = True
            self._work.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> TelemetryArchiveExporter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- counters -------------------------------------------------------------------------------------
    def stats(self) -> ArchiveExporterStats:
        with self._lock:
            return ArchiveExporterStats(
                self._exported, self._dropped, self._flushes, self._bytes_written, self._errors, len(self._queue)
            )

    @property
    def exported(self) -> int:
        return self._exported

    @property
    def dropped(self) -> int:
        return self._dropped

    @property
    def flushes(self) -> int:
        return self._flushes

    @property
    def bytes_written(self) -> int:
        return self._bytes_written

    @property
    def errors(self) -> int:
        return self._errors

    @property
    def running(self) -> bool:
        """True until the thread has stopped (after ``close``)."""
        return not self._stopped

    # --- the thread -----------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except BaseException:
            _log.exception("telemetry archive thread stopped by an unexpected error; pushes are now dropped")
            raise
        finally:
            with self._lock:
                self._stopped = True
                self._closing = True
                self._dropped += len(self._queue)
                self._queue.clear()
                self._done.notify_all()

    def _loop(self) -> None:
        writer = self._writer
        first_pending_at: float | None = None  # monotonic time of the oldest unflushed record
        retry_at: float | None = None  # after a failed flush, no new work before this
        while True:
            with self._lock:
                while True:
                    now = time.monotonic()
                    pending = writer.pending_records
                    if self._closing:
                        items = list(self._queue)
                        self._queue.clear()
                        action = "close"
                        break
                    if retry_at is not None and now < retry_at:
                        self._work.wait(retry_at - now)
                        continue
                    linger_until = self._queued_at + self._linger_s
                    if (
                        self._queue
                        and pending < self._flush_max_records
                        and (
                            len(self._queue) >= self._linger_records
                            or now >= linger_until
                            or self._flush_target > self._settled
                        )
                    ):
                        n = min(len(self._queue), self._flush_max_records - pending)
                        items = [self._queue.popleft() for _ in range(n)]
                        action = "append"
                        break
                    deadline = None if first_pending_at is None else first_pending_at + self._flush_max_s
                    if pending and (
                        pending >= self._flush_max_records
                        or self._flush_target > self._settled
                        or deadline is None
                        or now >= deadline
                    ):
                        items = []
                        action = "flush"
                        break
                    timeout = None if not pending or deadline is None else deadline - now
                    if self._queue and pending < self._flush_max_records:  # lingering for more pushes
                        timeout = linger_until - now if timeout is None else min(timeout, linger_until - now)
                    self._work.wait(timeout)

            if items:
                self._append(items)
                if first_pending_at is None and writer.pending_records:
                    first_pending_at = time.monotonic()
            if action == "append":
                continue
            io_error = self._flush()
            if action == "close":
                self._finish()
                return
            if io_error:
                retry_at = time.monotonic() + self._retry_backoff_s
            else:
                first_pending_at = None if not writer.pending_records else first_pending_at
                retry_at = None

    def _append(self, items: list[Any]) -> None:
        refused: list[Exception] = []
        to_record = self._to_record
        append = self._writer.append
        for item in items:
            try:
                append(item if to_record is None else to_record(item))
            except Exception as exc:  # a record the format cannot hold: drop it alone
                refused.append(exc)
        with self._lock:
            self._dropped += len(refused)
            log_errors = [(exc, self._count_error()) for exc in refused]
            self._settle()
        for exc, suppressed in log_errors:
            self._log_error("a push could not be archived", exc, suppressed)

    def _flush(self) -> bool:
        """One durable flush of everything pending; True if an I/O error left records to retry."""
        writer = self._writer
        before = writer.pending_records
        error: Exception | None = None
        try:
            if before:
                writer.flush(fsync=True)
        except Exception as exc:
            error = exc
        # Counters change together, so a flush() caller woken by the error sees their final values.
        with self._lock:
            self._exported += max(0, before - writer.pending_records)
            if error is None:
                self._flushes += 1 if before else 0
            elif not isinstance(error, OSError):  # not an I/O error: retrying would fail the same way
                self._dropped += writer.discard_pending()
            suppressed = None if error is None else self._count_error()
            self._bytes_written = writer.bytes_written
            self._settle()
        if error is not None:
            retry = isinstance(error, OSError)
            self._log_error(
                f"archive flush failed; {'will retry' if retry else 'its records are dropped'}", error, suppressed
            )
        return isinstance(error, OSError)

    def _settle(self) -> None:
        """Every taken push not pending in the writer is settled (durable or dropped). Lock held."""
        taken = self._accepted - len(self._queue)
        self._settled = taken - self._writer.pending_records
        self._done.notify_all()

    def _finish(self) -> None:
        """After the final flush at close: drop what it could not write, then close the writer."""
        writer = self._writer
        lost = writer.discard_pending() if writer.pending_records else 0
        error: Exception | None = None
        try:
            writer.close()
        except Exception as exc:
            error = exc
        with self._lock:
            self._dropped += lost
            suppressed = None if error is None else self._count_error()
            self._settle()
        if error is not None:
            self._log_error("closing the archive writer failed", error, suppressed)

    def _count_error(self) -> int | None:
        """Count an error (lock held). The number of errors not logged since the last log if this one is
        to be logged, None if one was logged less than ``error_log_interval_ms`` ago."""
        self._errors += 1
        return self._error_log.allow("error")

    @staticmethod
    def _log_error(message: str, exc: BaseException, suppressed: int | None) -> None:
        if suppressed is None:
            return
        _log.error(
            "%s: %s (%d more errors since the last report)",
            message,
            exc,
            suppressed,
            exc_info=None if isinstance(exc, OSError) else exc,  # a bug deserves its traceback
        )
