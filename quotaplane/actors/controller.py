"""ConfigController: the Ray actor that is the config event log's single writer.

It owns one :class:`~quotaplane.config.ConfigStore` in a data directory. Admin operations are the
store's (Kafka's AlterClientQuotas, IncrementalAlterConfigs, the client-metrics commands, the describes,
history); a write is validated, appended and fsynced before the call returns, so what a caller saw
acknowledged survives any crash.

**Concurrency.** It is a threaded actor (``max_concurrency``, default :data:`DEFAULT_MAX_CONCURRENCY`):
concurrent writes are decided one after another on the store's working state, then wait for the log
together, so they share one frame and one fsync (``ConfigStore`` pipelines them); reads and catch-ups
are answered meanwhile. Nothing else serialises a write: the push after it is handed to whichever
thread is pushing already (``_publish``), so an answer never waits for another write's push.

**Streaming to shards.** After each commit the controller pushes the new events to every subscribed
shard as ``(base_offset, EventColumns payload bytes)``, read back from the log (so a push is byte for
byte what the log holds), in offset order, and does not wait for the shards: a slow or restarting shard
never delays an admin answer. Pushes can be lost (a shard restarting, the controller dying between
append and push); a shard that sees a gap, or is told the end offset, pulls what it missed with
``read_from``. Pull is the only source of truth; push is the fast path.

**Catch-up below the log start.** When the segments holding an offset were deleted (a snapshot covers
them), ``read_from`` raises ``OffsetOutOfRangeError``; the shard then asks for ``snapshot()``, an
:class:`ImageSnapshot` (the image's snapshot header and its ``EventColumns`` frames, as bytes) and
continues from its end offset. Snapshots travel through Ray rather than through the shared data
directory, so shards need no access to the controller's disk (they may run on other machines).

**Restarts.** The actor is named and created with ``max_restarts=-1``: Ray restarts it in a new process
with the same arguments, which reopens the same directory (the ``flock`` of the dead process was
released by the kernel; a short retry covers the moment the old process is still exiting). Subscribers
given by name are remembered in ``subscribers.json`` next to the log and re-attached on restart, and each
is told the end offset, so an event appended just before the crash but never pushed still reaches it.
Unnamed subscribers are not remembered: they must subscribe again.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import ray

from quotaplane.config import (
    CONFIG_ADMIN_WRITES,
    DEFAULT_SEGMENT_BYTES,
    ConfigImage,
    ConfigStore,
    EventLogLockedError,
    OffsetOutOfRangeError,
    decode_columns,
    encode_events,
    forward_config_admin,
)
from quotaplane.durable import replace_file
from quotaplane.meta_properties import claim_cluster_id
from quotaplane.v1 import config_events_pb2 as pb

from ._resources import check_resources
from ._standby import ShardOwners

__all__ = [
    "DEFAULT_CONTROLLER_NAME",
    "DEFAULT_MAX_CONCURRENCY",
    "ConfigController",
    "ImageSnapshot",
    "OffsetOutOfRangeError",
    "start_controller",
]

log = logging.getLogger(__name__)

DEFAULT_CONTROLLER_NAME = "quotaplane-controller"
#: Concurrent calls the actor runs (threads): enough for the admin writes of a busy cluster to share
#: fsyncs (16 in flight at once) with room for the shards' reads and catch-ups beside them.
DEFAULT_MAX_CONCURRENCY = 32
SUBSCRIBERS_FILE = "subscribers.json"
#: Payloads above this go to the object store once and are passed by reference to every subscriber.
_INLINE_PAYLOAD_BYTES = 64 * 1024
_SNAPSHOT_FRAME_EVENTS = 10_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ImageSnapshot:
    """A ConfigImage as bytes: the ``SnapshotHeader`` and ``EventColumns`` frames (with offsets), the
    same shape as a snapshot file, so it crosses process boundaries without pickling an image."""

    header: bytes
    frames: tuple[bytes, ...]

    @classmethod
    def of(cls, image: ConfigImage) -> ImageSnapshot:
        header = image.snapshot_header().SerializeToString()
        entries = image.snapshot_events()
        frames = []
        for start in range(0, len(entries), _SNAPSHOT_FRAME_EVENTS):
            chunk = entries[start : start + _SNAPSHOT_FRAME_EVENTS]
            frames.append(encode_events([e for _, e in chunk], [o for o, _ in chunk]))
        return cls(header, tuple(frames))

    @property
    def end_offset(self) -> int:
        return pb.SnapshotHeader.FromString(self.header).end_offset

    def to_image(self) -> ConfigImage:
        header = pb.SnapshotHeader.FromString(self.header)
        return ConfigImage.from_snapshot(header, [decode_columns(frame) for frame in self.frames])


@dataclass(slots=True)
class _Subscriber:
    handle: Any  # ray.actor.ActorHandle of a ShardActor
    name: str | None
    namespace: str | None


def _subscriber_key(handle: Any, name: str | None, namespace: str | None) -> str:
    if name is not None:
        return f"{namespace or ''}/{name}"
    actor_id = getattr(handle, "_actor_id", None)
    return f"actor:{actor_id.hex() if actor_id is not None else id(handle)}"


def _open_store(directory: Path, *, fsync: bool, segment_bytes: int, lock_timeout_s: float) -> ConfigStore:
    """Open the store, waiting a little for the lock: after a crash Ray may start the new process while
    the old one is still being torn down (the kernel drops its ``flock`` when it has exited)."""
    deadline = time.monotonic() + lock_timeout_s
    while True:
        try:
            return ConfigStore.open(directory, fsync=fsync, segment_bytes=segment_bytes)
        except EventLogLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


@forward_config_admin("_admin", defaults={"now_ms": None})
class ConfigController:
    """The single writer of one config log, and the publisher of its events to the shards.

    Thread-safe (``ConfigStore`` decides writes one at a time and lets concurrent ones share an fsync):
    it runs as a threaded Ray actor so that concurrent writes are pipelined and reads and catch-ups are
    answered during a commit.
    The admin calls are :class:`~quotaplane.config.ConfigAdmin`'s, forwarded to the store by name; writes
    take ``now_ms`` from the caller, or the controller's wall clock when it is None.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        fsync: bool = True,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        lock_timeout_s: float = 10.0,
        cluster_id: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        # the cluster's identity lives with its log (``quotaplane.meta_properties``): a log directory of another
        # cluster is refused before it is opened; a new one takes ``cluster_id`` (None: a new random id)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._cluster_id = claim_cluster_id(self.data_dir, cluster_id, written_by="the quotaplane config controller")
        self._store = _open_store(
            self.data_dir, fsync=fsync, segment_bytes=segment_bytes, lock_timeout_s=lock_timeout_s
        )
        self._publish_lock = threading.Lock()  # held while pushing, and while the subscribers change
        self._publish_wanted = False  # a commit not pushed yet: whoever holds _publish_lock pushes it too
        self._published = self._store.end_offset  # events below this were pushed (or predate every subscriber)
        self._subscribers: dict[str, _Subscriber] = {}
        self._started_ms = wall_clock_ms()
        #: which member of each shard (primary or warm standby) may decide its keys (``_standby``)
        self._owners = ShardOwners(self.data_dir, fsync=fsync)
        self._reattach_subscribers()

    # --- subscribers -----------------------------------------------------------------------------------
    def subscribe(self, shard: Any, from_offset: int, *, name: str | None = None, namespace: str | None = None) -> int:
        """Push every event from ``from_offset`` on to ``shard`` (its ``apply_batch``), now and after each
        commit. Returns the end offset at subscription.

        Events in ``[from_offset, end)`` are pushed at once; if they are no longer in the log the shard is
        told the end offset instead and catches up from a snapshot. A named shard (``name``, as given to
        Ray) is remembered across controller restarts. Subscribing again replaces the old subscription.
        """
        if not isinstance(from_offset, int) or from_offset < 0:
            raise ValueError(f"from_offset must be a non-negative int, got {from_offset!r}")
        key = _subscriber_key(shard, name, namespace)
        with self._publish_lock:
            self._subscribers[key] = _Subscriber(shard, name, namespace)
            if name is not None:
                self._save_subscribers()
            end = self._published
            if from_offset < end:
                try:
                    batches = self._read(from_offset, end)
                except OffsetOutOfRangeError:
                    shard.notify_end_offset.remote(end)
                else:
                    for base, payload in batches:
                        shard.apply_batch.remote(base, payload)
        self._drain_publish()  # a commit handed to us while we held the lock
        return end

    def unsubscribe(self, shard: Any, *, name: str | None = None, namespace: str | None = None) -> bool:
        with self._publish_lock:
            removed = self._subscribers.pop(_subscriber_key(shard, name, namespace), None) is not None
            if removed and name is not None:
                self._save_subscribers()
        self._drain_publish()
        return removed

    def subscribers(self) -> list[str]:
        with self._publish_lock:
            names = sorted(self._subscribers)
        self._drain_publish()
        return names

    def _save_subscribers(self) -> None:
        named = [{"name": s.name, "namespace": s.namespace} for s in self._subscribers.values() if s.name is not None]
        replace_file(self.data_dir / SUBSCRIBERS_FILE, json.dumps(named, sort_keys=True).encode(), fsync=False)

    def _reattach_subscribers(self) -> None:
        path = self.data_dir / SUBSCRIBERS_FILE
        if not path.exists():
            return
        try:
            named = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            log.warning("ignoring unreadable %s: %s", path, e)
            return
        end = self._published
        for entry in named:
            name, namespace = entry.get("name"), entry.get("namespace")
            try:
                handle = ray.get_actor(name, namespace=namespace)
            except ValueError:
                log.info("subscriber %s/%s is gone; dropping it", namespace, name)
                continue
            self._subscribers[_subscriber_key(handle, name, namespace)] = _Subscriber(handle, name, namespace)
            handle.notify_end_offset.remote(end)  # it may have missed the last events before the crash
        self._save_subscribers()

    # --- shard ownership (warm standbys, ``_standby``) ----------------------------------------------------
    def claim_shard(self, name: str, namespace: str | None, primary_id: str) -> dict[str, Any]:
        """A primary shard incarnation (the actor ``name``, Ray id ``primary_id``) claims its shard before it
        serves; the record as it was (``owner == "standby"``: the standby was granted and must be released before
        the primary serves)."""
        return asdict(self._owners.claim_primary(name, namespace, primary_id))

    def grant_standby(self, name: str, namespace: str | None, primary_id: str, standby_id: str) -> int | None:
        """The standby (Ray id ``standby_id``) of primary ``name`` (``primary_id``) asks to decide the shard's
        keys: its epoch if granted (Ray says the primary incarnation that claimed last is gone), None while that
        incarnation lives or starts."""
        return self._owners.grant_standby(name, namespace, primary_id, standby_id)

    def shard_owner(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The owner record of primary ``name``'s shard (for checks and tools)."""
        return asdict(self._owners.record(name, namespace))

    def forget_shard(self, name: str, namespace: str | None = None) -> None:
        """Drop the owner record of a shard a reshard removed."""
        self._owners.forget(name, namespace)

    # --- publishing --------------------------------------------------------------------------------------
    def _read(self, from_offset: int, to_offset: int) -> list[tuple[int, bytes]]:
        return [
            (base, columns.SerializeToString())
            for base, columns in self._store.log.read_batches(from_offset, to_offset)
        ]

    def _publish(self) -> None:
        """Push the events committed since the last push to every subscriber, fire and forget, in order.

        Writes committed together finish together: the first to get here pushes every one of them, and a
        writer that finds a push under way leaves its events to that thread (which looks again before
        it lets go) instead of waiting for it, so its answer is not delayed by another write's push."""
        self._publish_wanted = True
        self._drain_publish()

    def _drain_publish(self) -> None:
        """Push while a commit is waiting to be pushed and no other thread is pushing. Whoever holds
        ``_publish_lock`` calls this after letting go of it, so a hand-off is never lost."""
        while self._publish_wanted and self._publish_lock.acquire(blocking=False):
            try:
                while self._publish_wanted:
                    self._publish_wanted = False
                    self._push_committed()
            except Exception:  # the writes are durable and answered; shards catch up on the next push or notify
                log.exception("pushing new events to the shards failed")
            finally:
                self._publish_lock.release()

    def _push_committed(self) -> None:
        end = self._store.end_offset  # the committed image's: only durable events are ever pushed
        if end <= self._published:
            return
        batches = self._read(self._published, end)
        self._published = end
        if not self._subscribers:
            return
        shared = [
            (base, ray.put(payload) if len(payload) > _INLINE_PAYLOAD_BYTES else payload) for base, payload in batches
        ]
        for subscriber in self._subscribers.values():
            for base, payload in shared:
                subscriber.handle.apply_batch.remote(base, payload)

    def _write(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("now_ms") is None:
            kwargs["now_ms"] = wall_clock_ms()
        try:
            return fn(*args, **kwargs)
        finally:
            self._publish()

    # --- admin calls -------------------------------------------------------------------------------------
    def _admin(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A ConfigAdmin call on the store (generated by ``forward_config_admin``): writes are durable on
        return, stamped with the controller's wall clock when ``now_ms`` is None, and then published."""
        call = getattr(self._store, name)
        if name in CONFIG_ADMIN_WRITES:
            return self._write(call, *args, **kwargs)
        return call(*args, **kwargs)

    def snapshot(self, *, offset: int | None = None, time_ms: int | None = None) -> ImageSnapshot:
        """The image now, at ``offset`` (the first ``offset`` events) or at ``time_ms``, as bytes."""
        if offset is not None and time_ms is not None:
            raise ValueError("give offset or time_ms, not both")
        if offset is not None:
            image = self._store.image_at(offset)
        elif time_ms is not None:
            image = self._store.image_at_time(time_ms)
        else:
            image = self._store.image_copy()
        return ImageSnapshot.of(image)

    # --- the log -----------------------------------------------------------------------------------------
    def end_offset(self) -> int:
        return self._store.end_offset

    def start_offset(self) -> int:
        return self._store.start_offset

    def read_from(self, offset: int, max_events: int = 10_000) -> list[tuple[int, bytes]]:
        """Batches ``(base_offset, EventColumns payload)`` from ``offset``, at most ``max_events`` events
        (fewer at the end of the log; none when ``offset`` is the end). ``OffsetOutOfRangeError`` when
        ``offset`` is below the log start (load ``snapshot()`` instead) or above its end."""
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise ValueError(f"offset must be an int, got {offset!r}")
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events <= 0:
            raise ValueError(f"max_events must be a positive int, got {max_events!r}")
        to_offset = max(offset, min(self._store.end_offset, offset + max_events))  # above the end: the log says so
        return self._read(offset, to_offset)

    def write_snapshot(self) -> str:
        """Write the current image as a snapshot file in the data directory."""
        return str(self._store.write_snapshot())

    def delete_segments_covered_by_snapshot(self) -> list[str]:
        return [str(p) for p in self._store.delete_segments_covered_by_snapshot()]

    def node(self) -> str:
        """The id (hex) of the Ray node this controller runs on (``ray.util.state`` and ``ray.nodes()`` use it)."""
        return ray.get_runtime_context().get_node_id()

    def health(self) -> dict[str, Any]:
        """Whether the controller takes config changes: ``{"serving": True, "log_error": None}``, or, once a
        write or fsync of the log failed (disk full, an I/O error), ``serving`` False and ``log_error`` the
        error. The failure is permanent for this process: the store refuses every change (UNAVAILABLE at the
        admin door) and answers reads from what was durable, until it is reopened by a restart of the actor
        (``ray.kill(controller, no_restart=False)``), which recovers exactly what is on disk."""
        failure = self._store.failure
        return {"serving": failure is None, "log_error": None if failure is None else str(failure)}

    def cluster_id(self) -> str:
        """The id of the cluster this log belongs to (its directory's ``meta.properties``): every ``up`` that
        joins the cluster takes it, or refuses a data directory of another cluster."""
        return self._cluster_id

    def info(self) -> dict[str, Any]:
        """Liveness and identity (the process id changes when Ray restarts the actor), and ``health()``."""
        return {
            "data_dir": str(self.data_dir),
            "cluster_id": self._cluster_id,
            "pid": os.getpid(),
            "started_ms": self._started_ms,
            "end_offset": self._store.end_offset,
            "start_offset": self._store.log.start_offset,
            "subscribers": len(self._subscribers),
            **self.health(),
        }


def start_controller(
    data_dir: str | os.PathLike[str],
    *,
    name: str = DEFAULT_CONTROLLER_NAME,
    namespace: str | None = None,
    detached: bool = False,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    fsync: bool = True,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    resources: Mapping[str, float] | None = None,
    cluster_id: str | None = None,
) -> Any:
    """The named ConfigController actor: the running one if ``name`` exists (``get_if_exists``: its data
    directory is kept, ``data_dir`` and ``cluster_id`` are then ignored: ask it its ``cluster_id()``), else a
    new one on ``data_dir``, of cluster ``cluster_id`` (refused if ``data_dir`` belongs to another).

    ``max_restarts=-1``: Ray restarts it after a crash and it reopens the same directory. Calls are not
    retried by Ray (``max_task_retries=0``): a write that was in flight may or may not be in the log, and
    the caller retries it with the same ``request_id`` to have it applied once.

    ``max_concurrency``: the calls it runs at once (threads); concurrent writes share fsyncs, so it bounds
    the admin throughput (see :data:`DEFAULT_MAX_CONCURRENCY`).

    Placement: it asks for no CPU, so by default Ray puts it on the node that creates it, and may restart
    it on any node. ``resources`` (Ray custom resources, e.g. ``{"quotaplane_controller": 1}``) limits it,
    and its restarts, to raylets that offer them: the ones with ``data_dir`` on them. A bad name or amount
    is a ValueError. Ignored when the named controller runs already.
    """
    checked = check_resources(resources, "controller resources")
    return _REMOTE_CONTROLLER.options(
        name=name,
        namespace=namespace,
        get_if_exists=True,
        lifetime="detached" if detached else None,
        max_restarts=-1,
        max_task_retries=0,
        max_concurrency=max_concurrency,
        num_cpus=0,
        enable_task_events=False,  # as the shards': every follower's poll would be an event in Ray's GCS
        **({} if checked is None else {"resources": checked}),
    ).remote(os.fspath(data_dir), fsync=fsync, segment_bytes=segment_bytes, cluster_id=cluster_id)


_REMOTE_CONTROLLER = ray.remote(ConfigController)
