"""KIP-714 client telemetry of the client instances a shard owns: one ``ClientMetricsManager`` plus exporters.

Telemetry state is keyed by client instance id: the gateway routes every GetTelemetrySubscriptions,
PushTelemetry and disconnect to the shard owning ``str(client_instance_id)`` (rendezvous placement), so
one manager sees all the requests of an instance, whichever frontend they came through, and answers them
exactly as Kafka's broker-side ``ClientMetricsManager`` (the core does all of it; this host only adapts
plain tuples to the core's request objects). Subscriptions reach the manager through the shard's
``ManagerBinding(telemetry=host.manager)``, in config-log order.

**Items** (plain tuples, cheap to pickle through Ray; ``now_ms`` is always last, where the shard reads
its callers' clock):

- ``("get", client_instance_id, context, now_ms)``
- ``("push", client_instance_id, subscription_id, terminating, compression_type, metrics, context, now_ms)``
- ``("disconnect", connection_id, client_instance_id, now_ms)``

``client_instance_id`` is ``bytes`` of length 16, or empty for the zero id (a push with it is answered
INVALID_REQUEST, as Kafka; a get with it gets an id picked here, which is right for a single shard only:
the gateway always picks the id itself, so that the shard answering is the one owning it). ``context`` is
``(connection_id, client_id, client_software_name | None, client_software_version | None,
client_source_address | None, client_source_port | None, principal)``.

**Results**, one per item in order:

- get: ``(error_code, error_message | None, client_instance_id (16 bytes), subscription_id,
  accepted_compression_types (tuple of int), push_interval_ms, telemetry_max_bytes, delta_temporality,
  requested_metrics (tuple of str))``
- push: ``(error_code, error_message | None)``
- disconnect: ``True`` if an instance last seen on the connection was evicted.

Kafka-level errors (THROTTLING_QUOTA_EXCEEDED, UNKNOWN_SUBSCRIPTION_ID, ...) are results, never
exceptions. A malformed item raises ``ValueError`` naming it, and then nothing of the batch is applied.

**Archive.** With a ``data_dir`` (the shard's own directory), every accepted push goes to the telemetry
archive's ``telemetry`` stream under it: ``<data_dir>/telemetry/date=.../hour=.../<ms>-<writer id>-<seq>.seg``
(see ``docs/archive-format.md``). The writer id is ``shard_<shard id>_<random>``: a segment names the
shard that wrote it, and a restarted shard (or several shards given one directory) never writes under
another writer's id, as the format requires of writers sharing a stream.

**Restarts.** Instances live in memory only. A restarted shard creates an instance again on the client's
next request; the subscription id is derived from the subscription and the client's id, so a push with
the id the client already has is accepted, and only the gating state (last get and push times, the
terminating flag) is lost, as when Kafka's broker restarts.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable, Container, Sequence
from pathlib import Path
from typing import Any

from quotaplane.config import StartupConfigs
from quotaplane.exporters.archive import TELEMETRY_STREAM, TelemetryArchiveExporter
from quotaplane.kafka_uuid import ZERO_UUID, Uuid
from quotaplane.metrics import Metrics
from quotaplane.telemetry import (
    ANONYMOUS_PRINCIPAL,
    ClientMetricsManager,
    ClientMetricsManagerConfig,
    ClientTelemetryExporter,
    GetTelemetrySubscriptionsRequest,
    InstanceSnapshot,
    PushTelemetryRequest,
    RequestContext,
    export_instances,
    forget_instances,
    import_instances,
)

__all__ = [
    "NO_NODE_ID",
    "TELEMETRY_OPS",
    "ContextTuple",
    "GetResult",
    "PushResult",
    "TelemetryHost",
    "archive_writer_id",
]

#: What ``TelemetryHost.serve`` takes, by the first element of an item.
TELEMETRY_OPS = ("get", "push", "disconnect")
#: The ``node_id`` label of a shard serving the whole fleet: Kafka's ``Node.noNode()`` id.
NO_NODE_ID = -1
#: ``max_decompressed_bytes`` of the manager unless ``telemetry.max.bytes`` is larger (the core's default).
_MAX_DECOMPRESSED_BYTES = 16 * 1024 * 1024
_INT32 = (-(2**31), 2**31 - 1)
#: Request contexts kept by a host (one per live connection; see ``TelemetryHost._contexts``).
_MAX_CACHED_CONTEXTS = 65_536
_INT8 = (-128, 127)

#: ``(connection_id, client_id, software_name, software_version, source_address, source_port, principal)``
ContextTuple = tuple[str, str, str | None, str | None, str | None, int | None, str]
GetResult = tuple[int, str | None, bytes, int, tuple[int, ...], int, int, bool, tuple[str, ...]]
PushResult = tuple[int, str | None]


def archive_writer_id(shard_id: str | int) -> str:
    """``shard_<id>_<8 random hex>``: names the shard in segment names, unique per process (the format
    allows ``[A-Za-z0-9][A-Za-z0-9_]{0,63}``; other characters of the shard id become ``_``)."""
    safe = re.sub(r"[^A-Za-z0-9_]", "_", str(shard_id))[:40]
    return f"shard_{safe}_{secrets.token_hex(4)}"


def _is_int(value: object, low: int, high: int) -> bool:
    """An int in range; not a bool (``True`` is no port or id), an ``IntEnum`` is fine."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_id(index: int, value: object) -> None:
    if not isinstance(value, bytes) or len(value) not in (0, 16):
        raise ValueError(f"item {index}: client_instance_id must be 16 bytes (or empty for the zero id)")


def _check_context(index: int, context: object) -> None:
    if type(context) is not tuple or len(context) != 7:
        raise ValueError(
            f"item {index}: context must be (connection_id, client_id, software_name, software_version, "
            "source_address, source_port, principal)"
        )
    connection_id, client_id, name, version, address, port, principal = context
    if not isinstance(connection_id, str) or not connection_id:
        raise ValueError(f"item {index}: connection_id must be a non-empty str")
    if not isinstance(client_id, str):
        raise ValueError(f"item {index}: client_id must be a str")
    for what, value in (("client_software_name", name), ("client_software_version", version), ("address", address)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"item {index}: {what} must be a str or None")
    if port is not None and not _is_int(port, 0, 65535):
        raise ValueError(f"item {index}: client_source_port must be an int in 0..65535 or None")
    if not isinstance(principal, str) or not principal:
        raise ValueError(f"item {index}: principal must be a non-empty str (e.g. {ANONYMOUS_PRINCIPAL!r})")


def check_items(items: Sequence[Any], known_contexts: Container[Any] = ()) -> None:
    """Every item well-formed, or ValueError naming the first bad one.

    ``known_contexts``: context tuples that passed these checks before (the host's cache of them). A push's
    context equal to one of them is not checked again: a connection sends the same context with every push,
    and checking its seven fields was most of this function's cost. Equal means equal fields, so only the port
    could differ in kind (``True == 1``): it is checked to be an ``int`` again.
    """
    for index, item in enumerate(items):
        if type(item) is not tuple or not item:
            raise ValueError(f"item {index}: expected a tuple starting with one of {', '.join(TELEMETRY_OPS)}")
        op = item[0]
        if op == "push":
            if len(item) != 8:
                raise ValueError(
                    f"item {index}: expected ('push', client_instance_id, subscription_id, terminating, "
                    "compression_type, metrics, context, now_ms)"
                )
            _, client_instance_id, subscription_id, terminating, compression_type, metrics, context, _now = item
            # each check's exact-type case inline (a push is checked on every shard call), its helper otherwise
            if type(client_instance_id) is not bytes or len(client_instance_id) not in (0, 16):
                _check_id(index, client_instance_id)
            if not (type(subscription_id) is int and _INT32[0] <= subscription_id <= _INT32[1]) and not _is_int(
                subscription_id, *_INT32
            ):
                raise ValueError(f"item {index}: subscription_id must be an int32, got {subscription_id!r}")
            if type(terminating) is not bool:
                raise ValueError(f"item {index}: terminating must be a bool")
            if not (type(compression_type) is int and _INT8[0] <= compression_type <= _INT8[1]) and not _is_int(
                compression_type, *_INT8
            ):
                raise ValueError(f"item {index}: compression_type must be an int8, got {compression_type!r}")
            if not isinstance(metrics, bytes):
                raise ValueError(f"item {index}: metrics must be bytes")
            if not _is_known(context, known_contexts):
                _check_context(index, context)
        elif op == "get":
            if len(item) != 4:
                raise ValueError(f"item {index}: expected ('get', client_instance_id, context, now_ms)")
            _check_id(index, item[1])
            _check_context(index, item[2])
        elif op == "disconnect":
            if len(item) != 4:
                raise ValueError(f"item {index}: expected ('disconnect', connection_id, client_instance_id, now_ms)")
            if not isinstance(item[1], str) or not item[1]:
                raise ValueError(f"item {index}: connection_id must be a non-empty str")
            _check_id(index, item[2])
        else:
            raise ValueError(f"item {index}: unknown op {op!r}; expected one of {', '.join(TELEMETRY_OPS)}")
        now_ms = item[-1]
        # exactly int: the shard reads its callers' clock from the last element of an item with ``type() is int``
        if type(now_ms) is not int or now_ms < 0:
            raise ValueError(f"item {index}: now_ms must be an int >= 0, got {now_ms!r}")


def _is_known(context: Any, known: Container[Any]) -> bool:
    """``context`` equals a checked one, and its port is of a checked kind (see ``check_items``)."""
    try:
        if context not in known:
            return False
    except TypeError:  # unhashable: not a context at all, which _check_context says
        return False
    port = context[5]
    return port is None or type(port) is int


def _uuid(raw: bytes) -> Uuid:
    return ZERO_UUID if not raw else Uuid(raw)


class TelemetryHost:
    """A shard's ``ClientMetricsManager``, its exporters, and the tuple interface ``serve_at`` calls."""

    def __init__(
        self,
        *,
        shard_id: str | int,
        node_id: int | None,
        data_dir: str | os.PathLike[str] | None,
        metrics: Metrics,
        startup: StartupConfigs,
        now_ms: int | None = None,
    ) -> None:
        self.shard_id = shard_id
        max_bytes = startup.telemetry_max_bytes
        config = ClientMetricsManagerConfig(
            **({} if max_bytes is None else {"telemetry_max_bytes": max_bytes}),
            max_decompressed_bytes=max(_MAX_DECOMPRESSED_BYTES, max_bytes or 0),
            node_id=NO_NODE_ID if node_id is None else node_id,
        )
        self.archive: TelemetryArchiveExporter | None = None
        exporters: list[ClientTelemetryExporter] = []
        if data_dir is not None:
            # its thread takes the pushes by the batch, however they are handed to it (``linger_records``)
            self.archive = TelemetryArchiveExporter(
                Path(data_dir), stream=TELEMETRY_STREAM, writer_id=archive_writer_id(shard_id)
            )
            exporters.append(self.archive)
        self.manager = ClientMetricsManager(
            config,
            exporters,
            metrics=metrics,
            now_ms=time.time_ns() // 1_000_000 if now_ms is None else now_ms,
        )
        #: context tuple -> RequestContext: a connection sends the same context with every request, and building
        #: the frozen dataclass (seven fields) per push was a measurable part of a push's shard CPU
        self._contexts: dict[tuple[Any, ...], RequestContext] = {}
        self._closed = False

    # --- requests ----------------------------------------------------------------------------------------
    def serve(self, items: Sequence[Any]) -> list[Any]:
        """One result per item, in order (formats in the module docstring). Items are applied in order, so
        a get and then a push of one instance in one batch behave as two requests would."""
        check_items(items, self._contexts)
        return self._serve(items)

    def _context(self, context: tuple[Any, ...]) -> RequestContext:
        contexts = self._contexts
        found = contexts.get(context)
        if found is None:
            if len(contexts) >= _MAX_CACHED_CONTEXTS:  # a bound, not an LRU: live connections come back at once
                contexts.clear()
            found = contexts[context] = RequestContext(*context)
        return found

    def _serve(self, items: Sequence[Any]) -> list[Any]:
        manager = self.manager
        request_context = self._context
        results: list[Any] = []
        append = results.append
        for item in items:
            op = item[0]
            if op == "get":
                _, raw_id, context, now_ms = item
                got = manager.process_get_telemetry_subscriptions_request(
                    GetTelemetrySubscriptionsRequest(_uuid(raw_id)), request_context(context), now_ms
                )
                append(
                    (
                        got.error_code,
                        got.error_message,
                        bytes(got.client_instance_id),
                        got.subscription_id,
                        tuple(got.accepted_compression_types),
                        got.push_interval_ms,
                        got.telemetry_max_bytes,
                        got.delta_temporality,
                        tuple(got.requested_metrics),
                    )
                )
            elif op == "push":
                _, raw_id, subscription_id, terminating, compression_type, metrics, context, now_ms = item
                pushed = manager.process_push_telemetry_request(
                    PushTelemetryRequest(
                        _uuid(raw_id), int(subscription_id), terminating, int(compression_type), metrics
                    ),
                    request_context(context),
                    now_ms,
                )
                append((pushed.error_code, pushed.error_message))
            else:
                append(manager.on_disconnect(item[1]))
        return results

    # --- hand-over (a reshard moves client instances by ``str(client_instance_id)``) -------------------------
    def export_instances(self, owns: Callable[[str], bool]) -> InstanceSnapshot:
        """A copy of every client instance whose routing key ``owns`` accepts (see ``export_instances``)."""
        return export_instances(self.manager, owns)

    def forget_instances(self, owns: Callable[[str], bool]) -> int:
        """Drop every client instance whose routing key ``owns`` accepts; how many."""
        return forget_instances(self.manager, owns)

    def import_instances(self, snapshot: InstanceSnapshot, now_ms: int) -> int:
        """Take a giver's instances (ValueError, before any change, if the snapshot does not fit); how many."""
        return import_instances(self.manager, snapshot, now_ms)

    # --- lifecycle -----------------------------------------------------------------------------------------
    def expire(self, now_ms: int) -> int:
        """Forget instances idle past ``max(60 s, 3 x their push interval)`` (Kafka's cache expiry); how many."""
        if type(now_ms) is not int or now_ms < 0:
            raise ValueError(f"now_ms must be an int >= 0, got {now_ms!r}")
        return len(self.manager.expire(now_ms))

    def stats(self) -> dict[str, Any]:
        """Instances held and what the cache and the archive did (for ``ShardActor.info``)."""
        cache = self.manager.instances
        out: dict[str, Any] = {
            "instances": len(cache),
            "instance_bytes": cache.bytes_used,
            "evictions": cache.evictions,
            "expirations": cache.expirations,
            "subscriptions": len(self.manager.list_client_metrics_resources()),
        }
        if self.archive is not None:
            archive = self.archive.stats()
            out["archive"] = {
                "exported": archive.exported,
                "dropped": archive.dropped,
                "errors": archive.errors,
                "queued": archive.queued,
            }
        return out

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every push accepted so far is durable in the archive (True without an archive)."""
        return True if self.archive is None else self.archive.flush(timeout_s)

    def close(self) -> None:
        """Drain and close the exporters (the archive flushes what it holds) and unregister the metrics.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.manager.close()
