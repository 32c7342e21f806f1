"""ConfigStore: the event log, the image it replays into, snapshots, and the admin operations on top.

This is the single writer of a config log (the ConfigController actor wraps one). It pipelines changes
as Kafka's KRaft controller does: under the store's lock an admin request is planned against the
*working* state (the committed image with every change still in flight on top, ``WorkingImage``),
validated the way Kafka's controller does, its records stamped with the commit time, the principal and
the request id, submitted to the log (``EventLog.submit``: offsets assigned now, in the order they will
be on disk) and put on the working state; the lock is released, and the caller waits for the log's
acknowledgement (written and fsynced) outside it, so concurrent requests share one frame and one fsync.
Once durable, the records are applied to the *committed* image in offset order (listeners see each
delta then) and the request is answered. A change that fails validation submits nothing; one whose
answer needs no records (validate-only, a no-op, a retried request id) is answered once every change
it was decided on is durable.

Readers (describe, snapshots, ``end_offset``, the controller's pushes and ``read_from``) see only the
committed image: never a change that is not durable. If the log fails to write or fsync, every change in
flight fails with that error, none becomes visible, and the store takes no more changes
(``EventLogFailedError``) until it is reopened, which recovers what is on disk.

Opening replays the newest valid snapshot and then the log's tail; a snapshot that does not verify is
skipped (and said so), never trusted. A directory of snapshots without segments opens at the newest valid
one (the log then starts at its end offset); events that are in no segment and no valid snapshot refuse
the open (``LogGapError``), never an empty or shortened config. ``image_at`` / ``image_at_time`` rebuild
any past image, and ``history`` lists every change of one entity or resource with its old and new value,
for audits.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..errors import InvalidRequestError
from ..gc_pause import gc_paused
from ..v1 import config_events_pb2 as pb
from ._admin import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ConfigEntry,
    ConfigResource,
    OpType,
    Plan,
    Result,
    describe_client_quotas,
    describe_configs,
    plan_alter_client_quotas,
    plan_incremental_alter_configs,
)
from ._client_quotas import EntityKey, Resolver, entity_key, validate_string
from ._dynamic_configs import ConfigResourceType
from ._image import DEFAULT_MAX_APPLIED_REQUESTS, ConfigDelta, ConfigImage
from ._log import DEFAULT_SEGMENT_BYTES, EventLog, PendingAppend
from ._log_errors import EventLogClosedError, EventLogFailedError, LogGapError
from ._records import client_metrics_configs, record_entity
from ._shard_count import plan_alter_shard_count
from ._snapshot_file import CorruptSnapshotError, list_snapshots, read_snapshot_batches, verify_snapshot, write_snapshot
from ._working_image import ImageReader, WorkingImage

__all__ = [
    "ANONYMOUS",
    "CONFIG_ADMIN_READS",
    "CONFIG_ADMIN_WRITES",
    "ConfigAdmin",
    "ConfigStore",
    "HistoryCompactedError",
    "HistoryEntry",
    "forward_config_admin",
]

log = logging.getLogger(__name__)

ANONYMOUS = "User:ANONYMOUS"


class HistoryCompactedError(LookupError):
    """The events needed to rebuild an image were deleted (a snapshot covers them; the Spark history
    table keeps every change)."""


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One change of a config key: which event made it, and the value before and after."""

    offset: int
    commit_time_ms: int
    principal: str
    request_id: str
    key: str
    old: object
    new: object


DeltaListener = Callable[[ConfigDelta], None]


@dataclass(frozen=True, slots=True)
class _InFlight:
    """A request's records, submitted to the log and on the working state, not yet on the committed image."""

    append: PendingAppend
    first_offset: int
    records: list[pb.Event]


# --- the admin interface -------------------------------------------------------------------------
class ConfigAdmin(Protocol):
    """Kafka's admin API over a config log, stated once: what every admin door (the AdminService, the CLI
    through it, the Kafka-wire frontend) asks of the config.

    :class:`ConfigStore` is one, in-process. The remote forms do not restate it: the ConfigController actor
    and the AdminService's backend over that actor forward each call of :data:`CONFIG_ADMIN_WRITES` and
    :data:`CONFIG_ADMIN_READS` by name (:func:`forward_config_admin`), so a change here reaches every layer.
    Results and errors are the store's own (``ApiError`` for a refused request, ``ValueError`` for bad
    audit arguments, the log's errors when it is closed or failed).
    """

    def alter_client_quotas(
        self,
        alterations: Sequence[ClientQuotaAlteration],
        *,
        validate_only: bool = False,
        now_ms: int,
        principal: str = ANONYMOUS,
        request_id: str = "",
    ) -> list[Result]:
        """Kafka's AlterClientQuotas: one Result per alteration, in order (durable on return). A
        ``request_id`` already in the log is answered again and changes nothing (a retry)."""
        ...

    def incremental_alter_configs(
        self,
        resources: Sequence[tuple[ConfigResource, Sequence[AlterConfigOp]]],
        *,
        validate_only: bool = False,
        now_ms: int,
        principal: str = ANONYMOUS,
        request_id: str = "",
    ) -> list[Result]:
        """Kafka's IncrementalAlterConfigs for BROKER, TOPIC and CLIENT_METRICS: one Result per resource."""
        ...

    def alter_shard_count(
        self,
        shards: int,
        *,
        expected: int | None = None,
        default: int | None = None,
        now_ms: int,
        principal: str = ANONYMOUS,
        request_id: str = "",
    ) -> Result:
        """Log a reshard: the cluster's shard count becomes ``shards`` if it is ``expected`` now (None: any;
        the log's count, else ``default``, the count the cluster was started with). The same count again is a
        success without an event. Only the orchestration of a reshard calls it (new shards started before,
        state handed over after: ``quotaplane.config._shard_count``)."""
        ...

    def alter_client_metrics(
        self,
        name: str,
        *,
        metrics: str | Sequence[str] | None = None,
        interval_ms: int | str | None = None,
        match: str | Mapping[str, str] | Sequence[str] | None = None,
        validate_only: bool = False,
        now_ms: int,
        principal: str = ANONYMOUS,
        request_id: str = "",
    ) -> Result:
        """``kafka-client-metrics.sh --alter``: SET the given configs of one resource (others are kept)."""
        ...

    def delete_client_metrics(
        self, name: str, *, now_ms: int, principal: str = ANONYMOUS, request_id: str = ""
    ) -> Result:
        """``kafka-client-metrics.sh --delete``: DELETE every config of the resource, so it ceases to exist."""
        ...

    def describe_client_quotas(
        self, components: Iterable[ClientQuotaFilterComponent], *, strict: bool = False
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """Kafka's DescribeClientQuotas: ``(entity, quotas)`` of every entity the filter matches."""
        ...

    def describe_configs(self, resource: ConfigResource) -> list[ConfigEntry]:
        """Kafka's DescribeConfigs of one resource: CLIENT_METRICS its configs as set; BROKER and TOPIC every
        config quotaplane keeps, with its effective value and whether it is a default."""
        ...

    def list_client_metrics_resources(self) -> list[str]:
        """Kafka's ListClientMetricsResources: the names, sorted."""
        ...

    def history(
        self,
        *,
        entity: Mapping[str, str | None] | EntityKey | None = None,
        client_metrics: str | None = None,
        resource: ConfigResource | None = None,
        key: str | None = None,
    ) -> list[HistoryEntry]:
        """Every change (in offset order) of one client-quota entity, client-metrics resource or config
        resource, optionally of one key, with old and new values."""
        ...

    def image_at_time(self, time_ms: int) -> ConfigImage:
        """The image as it was at ``time_ms``: every event committed at or before it."""
        ...

    @property
    def start_offset(self) -> int:
        """The log's first offset (events below it are only in snapshots)."""
        ...

    @property
    def end_offset(self) -> int:
        """The offset the next event will get (= events in the log)."""
        ...


#: The ConfigAdmin calls that change the log: a forwarder stamps ``now_ms`` when it is missing and
#: publishes after them (the ConfigController).
CONFIG_ADMIN_WRITES = (
    "alter_client_quotas",
    "incremental_alter_configs",
    "alter_client_metrics",
    "delete_client_metrics",
    "alter_shard_count",
)
#: The ConfigAdmin calls that only read and are forwarded as they are. (``image_at_time`` and the offsets
#: are not forwarded by name: a remote form ships the image as snapshot bytes and the offsets as calls.)
CONFIG_ADMIN_READS = ("describe_client_quotas", "describe_configs", "list_client_metrics_resources", "history")

_C = TypeVar("_C", bound=type)


def forward_config_admin(via: str, *, defaults: Mapping[str, object] | None = None) -> Callable[[_C], _C]:
    """Class decorator: each call of :data:`CONFIG_ADMIN_WRITES` and :data:`CONFIG_ADMIN_READS` the class
    does not define itself becomes ``getattr(self, via)(name, *args, **kwargs)``, named, documented and
    signed as :class:`ConfigAdmin`'s (``defaults`` replaces parameters' defaults, e.g. ``{"now_ms": None}``
    for a forwarder that stamps the time itself).

    The methods exist as soon as the class is defined, so ``ray.remote`` sees them as actor methods, and the
    signature they carry is the one Ray checks a call's arguments against.
    """

    def decorate(cls: _C) -> _C:
        for name in (*CONFIG_ADMIN_WRITES, *CONFIG_ADMIN_READS):
            if name not in vars(cls):
                setattr(cls, name, _forwarder(cls, name, via, defaults or {}))
        return cls

    return decorate


def _forwarder(cls: type, name: str, via: str, defaults: Mapping[str, object]) -> Callable[..., Any]:
    spec = getattr(ConfigAdmin, name)
    signature = inspect.signature(spec)
    parameters = [
        p.replace(default=defaults[p.name]) if p.name in defaults else p for p in signature.parameters.values()
    ]

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, via)(name, *args, **kwargs)

    forward.__name__ = name
    forward.__qualname__ = f"{cls.__qualname__}.{name}"
    forward.__module__ = cls.__module__
    forward.__doc__ = spec.__doc__
    forward.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return forward


class ConfigStore(ConfigAdmin):
    """The config log's single writer and its replayed image; the :class:`ConfigAdmin` methods'
    documentation is the protocol's.

    Thread-safe: changes are decided one at a time (the lock) and made durable together (group commit).
    ``image`` is the committed image (only durable changes); read it under ``image_copy`` from other
    threads. A change's call returns once it is durable and on ``image``.
    """

    def __init__(
        self,
        directory: Path,
        log_: EventLog,
        image: ConfigImage,
        *,
        resolver: Resolver | None = None,
        fsync: bool = True,
    ) -> None:
        self.directory = directory
        self.log = log_
        self.image = image
        self._resolver = resolver
        self._fsync = fsync
        self._lock = threading.RLock()
        self._listeners: list[DeltaListener] = []
        self._working = WorkingImage(image)  # what the next change is decided on
        self._in_flight: deque[_InFlight] = deque()  # submitted, not yet on ``image``, in offset order
        self._failure: BaseException | None = None  # a change failed to become durable: no more changes

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        fsync: bool = True,
        read_only: bool = False,
        max_applied_requests: int = DEFAULT_MAX_APPLIED_REQUESTS,
        resolver: Resolver | None = None,
    ) -> ConfigStore:
        """Open (or create) the log in ``directory`` and replay it: newest valid snapshot, then the tail.

        What is on disk decides, and a config is never silently opened empty: segments from offset 0 replay
        (from the newest valid snapshot they cover); segments from a later offset need a valid snapshot
        they continue; a directory of snapshots and no segment opens at the newest valid one (the log
        starts at its end offset). Raises ``LogGapError`` naming the files and offsets when events are in
        no segment and no valid snapshot (segments beginning after the newest snapshot below them, only
        snapshots that do not verify, or, for the writer, a valid snapshot ending beyond the last
        segment), ``HistoryCompactedError`` when segments start above 0 and there is no snapshot at all.
        """
        path = Path(directory)
        event_log = EventLog.open(path, segment_bytes=segment_bytes, fsync=fsync, read_only=read_only)
        try:
            if not read_only:  # a reader may see a snapshot the writer wrote after the reader indexed the log
                _check_no_snapshot_beyond(path, event_log)
            image = _load_image(path, event_log, event_log.end_offset, max_applied_requests, opening=True)
        except BaseException:
            event_log.close()
            raise
        return cls(path, event_log, image, resolver=resolver, fsync=fsync)

    def close(self) -> None:
        self.log.close()

    def __enter__(self) -> ConfigStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def start_offset(self) -> int:
        return self.log.start_offset

    @property
    def failure(self) -> BaseException | None:
        """Why the store takes no more changes (a write or fsync of the log failed: ``EventLogFailedError``
        whose cause is the ``OSError``), or None while it takes them. Health reports show it."""
        return self._failure

    @property
    def end_offset(self) -> int:
        return self.image.end_offset

    def image_copy(self) -> ConfigImage:
        """A consistent copy of the image (no commit half-applied), for readers on other threads."""
        with self._lock:
            return self.image.copy()

    def subscribe(self, listener: DeltaListener) -> None:
        """Call ``listener(delta)`` for every event applied to the committed image from now on (in offset
        order, once durable, under the store's lock, on whichever waiting thread applies it). A listener
        that raises is logged: the change is durable and its caller answered regardless."""
        with self._lock:
            self._listeners.append(listener)

    # --- writing ---------------------------------------------------------------------------------
    def _run(
        self,
        planner: Callable[[ImageReader], Plan],
        *,
        validate_only: bool,
        now_ms: int,
        principal: str,
        request_id: str,
    ) -> list[Result]:
        """Decide the change on the working state and submit it (under the lock), then answer once it is
        durable (outside it): concurrent changes share a frame and an fsync."""
        _check_request_id(request_id)
        validate_string(principal, "principal")  # the audit trail holds only what a Kafka client can read back
        with self._lock:
            self._check_writable()
            plan = planner(self._working)
            retry = bool(request_id) and self._working.applied_request(request_id) is not None
            if validate_only or not plan.records or retry:
                # Nothing to write (a retry of a request already in the log is answered again and changes
                # nothing), but the answer was decided on the working state: it is given once that is
                # durable, as Kafka's controller answers a write without records at the offset it read.
                awaited = self._in_flight[-1].append if self._in_flight else None
            else:
                awaited = self._submit(plan.records, now_ms=now_ms, principal=principal, request_id=request_id)
        if awaited is not None:
            self._await(awaited)
        return plan.results

    def _check_writable(self) -> None:
        if self._failure is not None:
            error = EventLogFailedError(
                f"{self.directory}: the config store takes no more changes: a change failed to become durable "
                f"({self._failure}); reopen the store to recover what is on disk"
            )
            error.__cause__ = self._failure
            raise error

    def _submit(self, records: list[pb.Event], *, now_ms: int, principal: str, request_id: str) -> PendingAppend:
        """Stamp and submit ``records`` and put them on the working state (the lock held)."""
        working = self._working
        commit_time = max(int(now_ms), working.last_commit_time_ms)  # commit times never decrease
        for event in records:
            event.commit_time_ms = commit_time
            event.principal = principal
            event.request_id = request_id
        pending = self.log.submit(records)  # raises (closed, failed) before anything changed
        first = pending.first_offset
        try:
            if first != working.end_offset:  # another writer? the lock file makes this impossible
                raise RuntimeError(f"the log assigned offset {first}, the working state expected {working.end_offset}")
            for offset, event in enumerate(records, first):
                working.apply(offset, event)
        except BaseException as exc:  # the working state no longer follows the log: decide nothing more
            self._failure = exc
            raise
        self._in_flight.append(_InFlight(pending, first, records))
        return pending

    def _await(self, pending: PendingAppend) -> None:
        """Wait (no lock held) until ``pending`` is durable, then bring the committed image up to it. If it
        fails, so did every change after it: the store drops them all and takes no more changes."""
        try:
            pending.wait()
        except BaseException as exc:
            with self._lock:
                self._fail(exc)
            raise
        if self.image.end_offset > pending.last_offset:
            return  # another waiter of the round applied it already (the committed image only grows)
        with self._lock:
            self._apply_durable()

    def _apply_durable(self) -> None:
        """Apply the durable head of the in-flight queue to the committed image, in offset order (the lock
        held). Rounds are written in order, so whatever is durable is a prefix of the queue."""
        in_flight = self._in_flight
        while in_flight and in_flight[0].append.durable:
            change = in_flight.popleft()
            for offset, event in enumerate(change.records, change.first_offset):
                delta = self.image.apply(offset, event)
                for listener in self._listeners:
                    try:
                        listener(delta)
                    except Exception:
                        log.exception("config listener %r failed on the event at offset %d", listener, offset)
        self._working.forget_committed()

    def _fail(self, error: BaseException) -> None:
        """A wait failed (the lock held): what became durable before it is applied, the rest is dropped
        (the log wrote none of it and takes no more), and the store refuses later changes."""
        self._apply_durable()
        self._in_flight.clear()
        self._working.reset()
        if self._failure is None and not isinstance(error, EventLogClosedError):
            self._failure = error
            log.error("%s: the config store takes no more changes until it is reopened: %s", self.directory, error)

    def alter_client_quotas(
        self,
        alterations: Sequence[ClientQuotaAlteration],
        *,
        validate_only: bool = False,
        now_ms: int,
        principal: str = ANONYMOUS,
        request_id: str = "",
    ) -> list[Result]:
        return self._run(
            lambda image: plan_alter_client_quotas(image, alterations, resolver=self._resolver),
            validate_only=validate_only,
            now_ms=now_ms,
            principal=principal,
            request_id=request_id,
        )

    def incremental_alter_configs(
        self,
        resources: Sequence[tuple[ConfigResource, Sequence[AlterConfigOp]]],
        *,
        validate_only: bool = False,
        now_ms: int,
        principal: str = ANONYMOUS,
        request_id: str = "",
    ) -> list[Result]:
        return self._run(
            lambda image: plan_incremental_alter_configs(image, resources),
            validate_only=validate_only,
            now_ms=now_ms,
            principal=principal,
            request_id=request_id,
        )

    def alter_shard_count(
        self,
        shards: int,
        *,
        expected: int | None = None,
        default: int | None = None,
        now_ms: int,
        principal: str = ANONYMOUS,
        request_id: str = "",
    ) -> Result:
        [result] = self._run(
            lambda image: plan_alter_shard_count(image, shards, expected=expected, default=default),
            validate_only=False,
            now_ms=now_ms,
            principal=principal,
            request_id=request_id,
        )
        return result

    def alter_client_metrics(
        self,
        name: str,
        *,
        metrics: str | Sequence[str] | None = None,
        interval_ms: int | str | None = None,
        match: str | Mapping[str, str] | Sequence[str] | None = None,
        validate_only: bool = False,
        now_ms: int,
        principal: str = ANONYMOUS,
        request_id: str = "",
    ) -> Result:
        ops = []
        if metrics is not None:
            ops.append(AlterConfigOp("metrics", OpType.SET, _list_value(metrics)))
        if interval_ms is not None:
            ops.append(AlterConfigOp("interval.ms", OpType.SET, str(interval_ms)))
        if match is not None:
            if isinstance(match, Mapping):
                match = [f"{k}={v}" for k, v in match.items()]
            ops.append(AlterConfigOp("match", OpType.SET, _list_value(match)))
        if not ops:
            raise InvalidRequestError(f"nothing to alter for client metrics {name!r}: give metrics, interval or match")
        resource = ConfigResource(ConfigResourceType.CLIENT_METRICS, name)
        return self.incremental_alter_configs(
            [(resource, ops)], validate_only=validate_only, now_ms=now_ms, principal=principal, request_id=request_id
        )[0]

    def delete_client_metrics(
        self, name: str, *, now_ms: int, principal: str = ANONYMOUS, request_id: str = ""
    ) -> Result:
        resource = ConfigResource(ConfigResourceType.CLIENT_METRICS, name)

        def plan(image: ImageReader) -> Plan:  # the configs to delete are the working state's
            current = image.client_metrics_resource(name) or {}
            return plan_incremental_alter_configs(
                image, [(resource, [AlterConfigOp(key, OpType.DELETE) for key in sorted(current)])]
            )

        return self._run(plan, validate_only=False, now_ms=now_ms, principal=principal, request_id=request_id)[0]

    # --- reading ---------------------------------------------------------------------------------
    def describe_client_quotas(
        self, components: Iterable[ClientQuotaFilterComponent], *, strict: bool = False
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        with self._lock:
            return describe_client_quotas(self.image, components, strict=strict)

    def describe_configs(self, resource: ConfigResource) -> list[ConfigEntry]:
        with self._lock:
            return describe_configs(self.image, resource)

    def list_client_metrics_resources(self) -> list[str]:
        with self._lock:
            return sorted(self.image.client_metrics())

    # --- snapshots -------------------------------------------------------------------------------
    def write_snapshot(self) -> Path:
        """Write the current image as a snapshot at its end offset (idempotent for an unchanged image)."""
        image = self.image_copy()
        return write_snapshot(self.directory, image.snapshot_header(), image.snapshot_events(), fsync=self._fsync)

    def delete_segments_covered_by_snapshot(self) -> list[Path]:
        """Delete the log segments the newest snapshot makes unnecessary for opening; history before it
        is then only in snapshots (and the Spark history table)."""
        snapshots = [end for end, _ in list_snapshots(self.directory) if end <= self.log.end_offset]
        if not snapshots:
            return []
        return self.log.delete_segments_before(max(snapshots))

    # --- audits ----------------------------------------------------------------------------------
    def image_at(self, offset: int) -> ConfigImage:
        """The image of the first ``offset`` events (offsets below ``offset``)."""
        if not 0 <= offset <= self.log.end_offset:
            raise ValueError(f"offset {offset} is outside the log [0, {self.log.end_offset}]")
        return _load_image(self.directory, self.log, offset, self.image._max_applied_requests)

    def image_at_time(self, time_ms: int) -> ConfigImage:
        return self.image_at(self.log.offset_for_time(time_ms))

    def history(
        self,
        *,
        entity: Mapping[str, str | None] | EntityKey | None = None,
        client_metrics: str | None = None,
        resource: ConfigResource | None = None,
        key: str | None = None,
    ) -> list[HistoryEntry]:
        if sum(x is not None for x in (entity, client_metrics, resource)) != 1:
            raise ValueError("history needs exactly one of entity, client_metrics or resource")
        target = entity_key(entity) if isinstance(entity, Mapping) else entity
        start = self.log.start_offset
        base = self.image_at(start) if start else ConfigImage()
        current: dict[str, object]
        if target is not None:
            current = dict(base.client_quota(target))
        elif client_metrics is not None:
            current = {client_metrics: base.client_metrics_resource(client_metrics)}
        else:
            assert resource is not None
            current = dict(base.configs(resource.type, resource.name))
        entries = []
        for offset, event in self.log.read(start, self.image.end_offset):
            change = _change_of(event, target, client_metrics, resource)
            if change is None:
                continue
            name, new = change
            if key is not None and name != key:
                continue
            old = current.get(name)
            current[name] = new
            entries.append(
                HistoryEntry(offset, event.commit_time_ms, event.principal, event.request_id, name, old, new)
            )
        return entries

    def provenance_event(self, config_key: tuple) -> tuple[int, pb.Event] | None:
        """The (offset, event) that set the live value under ``config_key`` (see ``ConfigKey``)."""
        provenance = self.image.provenance(config_key)
        if provenance is None:
            return None
        for offset, event in self.log.read(provenance.offset, provenance.offset + 1):
            return offset, event
        return None


# --- helpers -------------------------------------------------------------------------------------
def _check_request_id(request_id: str) -> None:
    if not isinstance(request_id, str) or len(request_id) > 256:
        raise InvalidRequestError("request_id must be a string of at most 256 characters")
    validate_string(request_id, "request id")  # no lone surrogate: the log could not encode it


def _list_value(value: str | Sequence[str]) -> str:
    return value if isinstance(value, str) else ",".join(value)


def _change_of(
    event: pb.Event,
    entity: EntityKey | None,
    client_metrics: str | None,
    resource: ConfigResource | None,
) -> tuple[str, object] | None:
    kind = event.WhichOneof("record")
    if kind == "client_quota" and entity is not None:
        record = event.client_quota
        if record_entity(record) != entity:
            return None
        return record.key, None if record.remove else record.value
    if kind == "client_metrics" and client_metrics is not None:
        record = event.client_metrics
        if record.name != client_metrics:
            return None
        return record.name, client_metrics_configs(record) or None
    if kind == "config" and resource is not None:
        record = event.config
        if record.resource_type != resource.type or record.resource_name != resource.name:
            return None
        return record.name, record.value if record.HasField("value") else None
    return None


def _load_image(
    directory: Path, event_log: EventLog, offset: int, max_applied_requests: int, *, opening: bool = False
) -> ConfigImage:
    """The image of the first ``offset`` events: the newest valid snapshot at or below ``offset`` whose
    tail the log still holds, then the log up to ``offset``. ``opening``: a missing snapshot between the
    log start and older snapshots is a ``LogGapError`` (the store cannot open), not an audit's
    ``HistoryCompactedError``."""
    with gc_paused():
        return _replay_image(directory, event_log, offset, max_applied_requests, opening=opening)


def _check_no_snapshot_beyond(directory: Path, event_log: EventLog) -> None:
    """Refuse a valid snapshot that ends beyond the log's end: the segments lost events it holds, and
    appending would give new events the offsets of those. (Kafka's KRaft truncates the log and starts at
    such a snapshot; quotaplane deletes no segment on its own and leaves that choice to a human.) A
    snapshot that does not verify is skipped with a warning, as everywhere."""
    end = event_log.end_offset
    for snapshot_end, path in reversed(list_snapshots(directory)):
        if snapshot_end <= end:
            return
        try:
            verify_snapshot(path)
        except (CorruptSnapshotError, OSError) as e:
            log.warning("skipping snapshot %s, beyond the log end offset %d: %s", path, end, e)
            continue
        segments = event_log.segments()
        where = f"the last segment, {segments[-1].name}, ends at offset {end}" if segments else f"the log ends at {end}"
        raise LogGapError(
            str(directory),
            end,
            snapshot_end,
            f"snapshot {path.name} ends at offset {snapshot_end} but {where}: the segments lost events the "
            f"snapshot holds; move the segments aside to open at the snapshot, or the snapshot to open at {end}",
        )


def _gap_error(directory: Path, event_log: EventLog, snapshots: list[tuple[int, Path]]) -> LogGapError | None:
    """The ``LogGapError`` of a log starting above 0 that no valid snapshot from its start on continues,
    while a snapshot ends below its start: the segments that continued that snapshot were deleted. None when
    no snapshot ends below the start (there is then no snapshot at all to name: ``HistoryCompactedError``)."""
    start = event_log.start_offset
    below = [(end, path) for end, path in snapshots if end < start]
    if not below:
        return None
    end, path = below[-1]
    segments = event_log.segments()
    where = f"the first segment, {segments[0].name}, begins" if segments else "the log starts"
    return LogGapError(
        str(directory),
        end,
        start,
        f"the newest snapshot below the log start, {path.name}, ends at offset {end}, and {where} at offset "
        f"{start}: the segments between them were deleted (restore them, or a snapshot ending at an offset in "
        f"[{start}, {event_log.end_offset}])",
    )


def _replay_image(
    directory: Path, event_log: EventLog, offset: int, max_applied_requests: int, *, opening: bool
) -> ConfigImage:
    image: ConfigImage | None = None
    snapshots = list_snapshots(directory)
    for end, path in reversed(snapshots):
        if end > offset or (end < event_log.start_offset and end != offset):
            continue
        try:
            header, frames = read_snapshot_batches(path)
            image = ConfigImage.from_snapshot(header, frames, max_applied_requests=max_applied_requests)
            break
        except Exception as e:  # a snapshot is an optimisation: a bad one is skipped, loudly
            log.warning("skipping snapshot %s: %s", path, e)
    if image is None:
        if event_log.start_offset > 0 and offset > 0:
            gap = _gap_error(directory, event_log, snapshots) if opening else None
            if gap is not None:
                raise gap
            raise HistoryCompactedError(
                f"the log in {directory} starts at offset {event_log.start_offset} and no valid snapshot "
                f"at or below offset {offset} covers the events before it"
            )
        image = ConfigImage(max_applied_requests=max_applied_requests)
    if image.end_offset < offset:
        for base_offset, columns in event_log.read_batches(image.end_offset, offset):
            image.replay_columns(base_offset, columns)
    if image.end_offset != offset:
        raise RuntimeError(f"replay of {directory} reached offset {image.end_offset}, expected {offset}")
    return image
