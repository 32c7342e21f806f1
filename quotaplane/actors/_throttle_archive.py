"""The throttle archive: every non-zero throttle decision a shard makes, for the Spark throttle report.

Kafka tells a client how long to wait (``throttle_time_ms``) and trusts it to wait; nothing records
which clients were told. The shard appends one record per non-zero decision to the ``throttle`` stream
of the archive format (``docs/archive-format.md``), under the shard's data directory beside its
telemetry stream, so a Spark job can join "quotaplane throttled this client" with "this client reported
(or did not report) a throttle in its own KIP-714 metrics" and name the clients that ignore throttles.

A record: ``time_ms`` = the decision's ``now_ms``; labels ``quota_type`` (Kafka's QuotaType string:
``Produce``, ``Fetch``, ``Request``, ``ControllerMutation``, ``ProducerIds``), ``user``, ``client_id``
and ``throttle_time_ms`` (decimal); an empty body.

**Bounded.** A throttled client is often throttled on every request; at most ``max_records_per_s``
records per second of the callers' clock are kept (a token bucket with one second of burst), and the
rest are counted in ``dropped_by_rate``. Records past a full queue (a slow disk) are counted by the
exporter (``stats().dropped``). The request path never blocks on I/O: records are queued and written,
with fsync, by the exporter's thread in batches.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from quotaplane.archive import ArchiveRecord
from quotaplane.exporters.archive import THROTTLE_STREAM, TelemetryArchiveExporter

__all__ = ["THROTTLE_STREAM", "ThrottleArchive", "record_throttles", "throttle_record"]


def throttle_record(item: tuple[int, str, str, str, int]) -> ArchiveRecord:
    """``(now_ms, quota type, user, client_id, throttle_ms)`` as its archive record."""
    now_ms, quota_type, user, client_id, throttle_ms = item
    labels = {"quota_type": quota_type, "user": user, "client_id": client_id, "throttle_time_ms": str(throttle_ms)}
    return ArchiveRecord(now_ms, labels, b"")


class ThrottleArchive:
    """Rate-bounded, queued writes of throttle decisions to ``<root>/throttle/``."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        writer_id: str,
        max_records_per_s: float = 1000.0,
        queue_capacity: int = 10_000,
        flush_max_ms: int = 1000,
    ) -> None:
        if not max_records_per_s > 0:
            raise ValueError(f"max_records_per_s must be > 0, got {max_records_per_s!r}")
        self.max_records_per_s = float(max_records_per_s)
        self._tokens = self.max_records_per_s
        self._last_ms: int | None = None
        self.dropped_by_rate = 0
        self.exporter = TelemetryArchiveExporter(
            root,
            stream=THROTTLE_STREAM,
            writer_id=writer_id,
            queue_capacity=queue_capacity,
            flush_max_ms=flush_max_ms,
            to_record=throttle_record,
        )

    def record(self, now_ms: int, quota_type: str, user: str, client_id: str, throttle_ms: int) -> bool:
        """Queue one decision (the caller passes only non-zero ones); False if the rate bound dropped it."""
        if not self._admit(now_ms):
            return False
        return self.exporter.submit((now_ms, quota_type, user, client_id, throttle_ms))

    def record_batch(self, quota_type: str, items: Iterable[tuple[str, str, int, int]]) -> None:
        """``record(now_ms, quota_type, user, client_id, throttle_ms)`` for each ``(user, client_id,
        throttle_ms, now_ms)``, in order (the shard's micro-batch path): the rate bound per item, then the ones
        it admits queued together (one lock)."""
        admit = self._admit
        self.exporter.submit_many(
            [
                (now_ms, quota_type, user, client_id, throttle_ms)
                for user, client_id, throttle_ms, now_ms in items
                if admit(now_ms)
            ]
        )

    def _admit(self, now_ms: int) -> bool:
        """One record within ``max_records_per_s`` (a token bucket over the decisions' own times), or counted
        in ``dropped_by_rate``."""
        if self._last_ms is not None and now_ms > self._last_ms:
            elapsed_s = (now_ms - self._last_ms) / 1000
            self._tokens = min(self.max_records_per_s, self._tokens + elapsed_s * self.max_records_per_s)
        if self._last_ms is None or now_ms > self._last_ms:
            self._last_ms = now_ms
        if self._tokens < 1.0:
            self.dropped_by_rate += 1
            return False
        self._tokens -= 1.0
        return True

    def flush(self, timeout_s: float | None = None) -> bool:
        return self.exporter.flush(timeout_s)

    def stats(self) -> dict[str, Any]:
        stats = self.exporter.stats()
        return {
            "archived": stats.exported,
            "dropped_by_rate": self.dropped_by_rate,
            "dropped": stats.dropped,
            "errors": stats.errors,
            "queued": stats.queued,
        }

    def close(self) -> None:
        self.exporter.close()


def record_throttles(
    manager: Any, archive: ThrottleArchive | None, quota_type: Any, throttled: list[tuple[str, str, int, int]]
) -> None:
    """Throttles answered ``(user, client_id, throttle_ms, now_ms)``, recorded as a broker records what it answers:
    the clients' ``throttle-time`` sensors (Kafka's ``throttle()``), and the throttle archive when there is one.
    The shard's own answers and those a gateway answered within its leases both go through here."""
    manager.throttle_batch(throttled)
    if archive is not None:
        archive.record_batch(str(quota_type), throttled)
