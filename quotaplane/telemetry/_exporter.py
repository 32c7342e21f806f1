"""The exporter plug-in interface: what the manager hands on for every accepted push.

Kafka's ``ClientTelemetryExporter.exportMetrics(context, payload)`` in snake case. The manager calls
``export_metrics`` on the request path, so an exporter must return at once: real work (disk, network)
goes to the exporter's own queue and thread. An exporter that raises makes the push fail with
INVALID_RECORD and counts a plugin error, as in Kafka.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

    from ..kafka_uuid import Uuid

__all__ = [
    "ANONYMOUS_PRINCIPAL",
    "OTLP_CONTENT_TYPE",
    "ClientTelemetryContext",
    "ClientTelemetryExporter",
    "ClientTelemetryPayload",
    "DeferredClientTelemetryPayload",
    "RequestContext",
]

ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"
#: KIP-714 payloads are OTLP protobuf ``MetricsData``.
OTLP_CONTENT_TYPE = "application/x-protobuf"


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What the frontend knows about the connection a request came on (Kafka's RequestContext subset).

    ``client_software_name``/``_version`` come from the ApiVersions v3+ request of that connection and
    are ``None`` when the client never sent them.
    """

    connection_id: str
    client_id: str
    client_software_name: str | None = None
    client_software_version: str | None = None
    client_source_address: str | None = None
    client_source_port: int | None = None
    principal: str = ANONYMOUS_PRINCIPAL


@dataclass(frozen=True, slots=True)
class ClientTelemetryContext:
    """Kafka's ClientTelemetryContext: the push interval the client was given and its request context."""

    push_interval_ms: int
    request_context: RequestContext
    received_ms: int
    node_id: int


@dataclass(frozen=True, slots=True)
class ClientTelemetryPayload:
    """One accepted push.

    ``data`` is the decompressed OTLP ``MetricsData`` exactly as the client sent it;
    ``resource_attributes`` are the broker-side labels (client_instance_id, client_id, ... node_id);
    ``metrics_data`` is ``data`` decoded with those labels merged into every resource (ours win on a
    clash). Exporters share one payload and must not modify it. The manager hands out
    :class:`DeferredClientTelemetryPayload` s, which merge the labels on the first read of ``metrics_data``.
    """

    client_instance_id: Uuid
    is_terminating: bool
    content_type: str
    compression_type: int
    compressed_size: int
    data: bytes
    resource_attributes: Mapping[str, str]
    metrics_data: MetricsData


#: The slots of the dataclass's fields (written directly by the deferred payload, whose ``metrics_data`` is a
#: property over the slot).
_SLOTS = {name: ClientTelemetryPayload.__dict__[name] for name in ClientTelemetryPayload.__slots__}


class DeferredClientTelemetryPayload(ClientTelemetryPayload):
    """A ``ClientTelemetryPayload`` whose ``metrics_data`` is the decoded push with ``merge`` applied on its first
    read: once, under a lock (exporters may read it from their own threads).

    Why: the push is decoded on the request path (an undecodable push is INVALID_RECORD), but the archive, the
    exporter every shard runs, stores ``data`` and the labels apart and never reads ``metrics_data``, and merging
    the labels into every resource was a fifth of a push's CPU in the shard. An exporter that reads it sees
    what it saw before, and nothing in the merge can fail (the labels' wire form is prepared, and checked, on
    the request path). A copy (pickle) is a plain, merged ``ClientTelemetryPayload``.

    ``labels_memo`` is a dict the client instance keeps for as long as its ``resource_attributes``: an exporter
    may keep there what it derives from them (the archive keeps the record's labels, encoded), under a key of
    its own, so that it is derived once per instance rather than once per push. Only exporters touch it.
    """

    __slots__ = ("_merge", "labels_memo")

    labels_memo: dict[Any, Any]

    def __init__(
        self,
        client_instance_id: Uuid,
        is_terminating: bool,
        content_type: str,
        compression_type: int,
        compressed_size: int,
        data: bytes,
        resource_attributes: Mapping[str, str],
        decoded: MetricsData,
        merge: Callable[[MetricsData], None],
        labels_memo: dict[Any, Any] | None = None,
    ) -> None:
        # the frozen dataclass's __init__ cannot be used: ``metrics_data`` is a read-only property here
        _set_id(self, client_instance_id)
        _set_terminating(self, is_terminating)
        _set_content_type(self, content_type)
        _set_compression_type(self, compression_type)
        _set_compressed_size(self, compressed_size)
        _set_data(self, data)
        _set_resource_attributes(self, resource_attributes)
        _set_metrics_data(self, decoded)
        _set_merge(self, merge)
        _set_labels_memo(self, {} if labels_memo is None else labels_memo)

    @property  # type: ignore[override]
    def metrics_data(self) -> MetricsData:
        decoded = _SLOTS["metrics_data"].__get__(self)
        if self._merge is not None:
            with _MERGE_LOCK:
                merge = self._merge
                if merge is not None:
                    merge(decoded)
                    object.__setattr__(self, "_merge", None)
        return decoded

    def __reduce__(self) -> tuple[Any, ...]:
        return ClientTelemetryPayload, tuple(getattr(self, name) for name in _SLOTS)


# The slots' setters, called directly (a loop over the slots cost a few microseconds of every push)
_set_id = _SLOTS["client_instance_id"].__set__
_set_terminating = _SLOTS["is_terminating"].__set__
_set_content_type = _SLOTS["content_type"].__set__
_set_compression_type = _SLOTS["compression_type"].__set__
_set_compressed_size = _SLOTS["compressed_size"].__set__
_set_data = _SLOTS["data"].__set__
_set_resource_attributes = _SLOTS["resource_attributes"].__set__
_set_metrics_data = _SLOTS["metrics_data"].__set__
_set_merge = DeferredClientTelemetryPayload.__dict__["_merge"].__set__
_set_labels_memo = DeferredClientTelemetryPayload.__dict__["labels_memo"].__set__


#: Serializes deferred merges (rare: only exporters that read ``metrics_data`` trigger one, once per payload).
_MERGE_LOCK = threading.Lock()


@runtime_checkable
class ClientTelemetryExporter(Protocol):
    """A destination for accepted pushes. ``export_metrics`` must not block; ``close`` drains and stops."""

    def export_metrics(self, context: ClientTelemetryContext, payload: ClientTelemetryPayload) -> None: ...

    def close(self) -> None: ...
