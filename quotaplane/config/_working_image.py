"""WorkingImage: the config writer's view ahead of the log.

A committed :class:`ConfigImage` plus the events submitted after it and not yet durable: what the next
admin change is decided on (Kafka's controller decides on its in-memory state and answers when the
records commit), while readers, listeners and snapshots see only the committed image.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Final, Protocol

from ..v1 import config_events_pb2 as pb
from ._client_quotas import EntityKey, entity_key
from ._columns import record_entity_id
from ._dynamic_configs import ConfigResourceType
from ._image import CLIENT_METRICS, CONFIG, QUOTA, ConfigImage, CorruptEventError, OffsetGapError, _entity_id
from ._records import client_metrics_configs

__all__ = ["ImageReader", "WorkingImage"]


class ImageReader(Protocol):
    """What the admin planners (``_admin.plan_*``) read of an image: a :class:`ConfigImage` or a
    :class:`WorkingImage`."""

    def client_quota(self, entity: EntityKey | Mapping[str, str | None]) -> dict[str, float]: ...

    def client_metrics_resource(self, name: str) -> dict[str, str] | None: ...

    def configs(self, resource_type: ConfigResourceType, resource_name: str) -> dict[str, str]: ...


#: Where a pending event wrote, for forgetting it once committed: ``(QUOTA, entity id, key)``,
#: ``(CLIENT_METRICS, name)``, ``(CONFIG, (type, name), key)`` or ``(REQUEST, request id)``.
_Write = tuple
REQUEST: Final = "request"


class WorkingImage:
    """A committed :class:`ConfigImage` with the events submitted after it (not yet durable) on top.

    The config writer decides each change on this (validation, "alter then alter" of one key, request-id
    dedup) while the committed image, which readers, listeners and snapshots see, only advances once the
    log acknowledges. The reads are :class:`ImageReader`'s plus ``applied_request``, ``end_offset`` and
    ``last_commit_time_ms``, each what the committed image with every pending event applied in offset
    order would answer (proved against a full replay in ``tests/config/test_store_pipelining.py``).

    Only the values pending events wrote are held, each with the offset of its last write, so the working
    state costs what is in flight, not a second image: ``forget_committed`` drops the values the committed
    image has caught up with, ``reset`` drops everything (the pending events will never be durable).
    """

    __slots__ = (
        "_client_metrics",
        "_committed",
        "_configs",
        "_quotas",
        "_requests",
        "_writes",
        "end_offset",
        "last_commit_time_ms",
    )

    def __init__(self, committed: ConfigImage) -> None:
        self._committed = committed
        # entity id -> {quota key: (value, or None once removed; offset of the last write)}
        self._quotas: dict[str, dict[str, tuple[float | None, int]]] = {}
        # name -> (configs, or None once deleted; offset)
        self._client_metrics: dict[str, tuple[dict[str, str] | None, int]] = {}
        # (resource type, resource name) -> {config name: (value or None; offset)}
        self._configs: dict[tuple[int, str], dict[str, tuple[str | None, int]]] = {}
        # request id -> (first offset, last offset) of a request with pending events
        self._requests: dict[str, tuple[int, int]] = {}
        self._writes: deque[tuple[int, _Write]] = deque()  # in offset order
        self.end_offset = committed.end_offset
        self.last_commit_time_ms = committed.last_commit_time_ms

    @property
    def committed(self) -> ConfigImage:
        return self._committed

    @property
    def pending(self) -> bool:
        """True while some event on top of the committed image is not committed yet."""
        return self.end_offset != self._committed.end_offset

    # --- reading (ImageReader) -----------------------------------------------------------------------
    def client_quota(self, entity: EntityKey | Mapping[str, str | None]) -> dict[str, float]:
        eid = _entity_id(entity if isinstance(entity, tuple) else entity_key(entity))
        quotas = {quota_key: cell[0] for quota_key, cell in self._committed._quotas.get(eid, {}).items()}
        written = self._quotas.get(eid)
        if written:
            for quota_key, (value, _) in written.items():
                if value is None:
                    quotas.pop(quota_key, None)
                else:
                    quotas[quota_key] = value
        return quotas

    def client_metrics_resource(self, name: str) -> dict[str, str] | None:
        written = self._client_metrics.get(name)
        if written is None:
            return self._committed.client_metrics_resource(name)
        configs = written[0]
        return None if configs is None else dict(configs)

    def configs(self, resource_type: ConfigResourceType, resource_name: str) -> dict[str, str]:
        configs = self._committed.configs(resource_type, resource_name)
        written = self._configs.get((int(resource_type), resource_name))
        if written:
            for name, (value, _) in written.items():
                if value is None:
                    configs.pop(name, None)
                else:
                    configs[name] = value
        return configs

    def applied_request(self, request_id: str) -> tuple[int, int] | None:
        """As ``ConfigImage.applied_request``, pending requests included."""
        return self._requests.get(request_id) or self._committed.applied_request(request_id)

    # --- applying ------------------------------------------------------------------------------------
    def apply(self, offset: int, event: pb.Event) -> None:
        """Put the event at ``offset`` (which must be ``end_offset``) on top, as ``ConfigImage.apply`` would."""
        if offset != self.end_offset:
            raise OffsetGapError(f"expected the event at offset {self.end_offset}, got offset {offset}")
        kind = event.WhichOneof("record")
        write: _Write
        if kind == "client_quota":
            record = event.client_quota
            eid = record_entity_id(record)
            value = None if record.remove else record.value
            self._quotas.setdefault(eid, {})[record.key] = (value, offset)
            write = (QUOTA, eid, record.key)
        elif kind == "client_metrics":
            name = event.client_metrics.name
            self._client_metrics[name] = (client_metrics_configs(event.client_metrics) or None, offset)
            write = (CLIENT_METRICS, name)
        elif kind == "config":
            record = event.config
            rtype = record.resource_type
            if rtype != ConfigResourceType.BROKER and rtype != ConfigResourceType.TOPIC:
                raise CorruptEventError(f"the event at offset {offset} has an unknown config resource type {rtype}")
            resource = (rtype, record.resource_name)
            value = record.value if record.HasField("value") else None
            self._configs.setdefault(resource, {})[record.name] = (value, offset)
            write = (CONFIG, resource, record.name)
        else:
            raise CorruptEventError(f"the event at offset {offset} carries no record")
        self._writes.append((offset, write))
        request_id = event.request_id
        if request_id:
            span = self.applied_request(request_id)
            self._requests[request_id] = (offset if span is None else span[0], offset)
            self._writes.append((offset, (REQUEST, request_id)))
        self.end_offset = offset + 1
        self.last_commit_time_ms = event.commit_time_ms

    def forget_committed(self) -> None:
        """Drop what the committed image has caught up with: each value whose last write it applied."""
        end = self._committed.end_offset
        if end > self.end_offset:
            raise OffsetGapError(
                f"the committed image reached offset {end}, beyond the working state's {self.end_offset}"
            )
        writes = self._writes
        while writes and writes[0][0] < end:
            offset, write = writes.popleft()
            what = write[0]
            if what == QUOTA:
                _, eid, key = write
                cells = self._quotas[eid]
                if key in cells and cells[key][1] == offset:
                    del cells[key]
                    if not cells:
                        del self._quotas[eid]
            elif what == CLIENT_METRICS:
                if self._client_metrics[write[1]][1] == offset:
                    del self._client_metrics[write[1]]
            elif what == CONFIG:
                _, resource, name = write
                values = self._configs[resource]
                if name in values and values[name][1] == offset:
                    del values[name]
                    if not values:
                        del self._configs[resource]
            elif self._requests[write[1]][1] == offset:
                del self._requests[write[1]]
        if not writes:
            self.last_commit_time_ms = self._committed.last_commit_time_ms

    def reset(self) -> None:
        """Drop every pending event (they will never be durable): the working state is the committed image."""
        self._quotas.clear()
        self._client_metrics.clear()
        self._configs.clear()
        self._requests.clear()
        self._writes.clear()
        self.end_offset = self._committed.end_offset
        self.last_commit_time_ms = self._committed.last_commit_time_ms
