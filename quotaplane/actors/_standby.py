"""Warm standby shards: who decides a shard's keys while Ray restarts its actor, fenced by the controller.

Why (issue 19, measured with ``ShardActor.info()["start_phases_ms"]`` in bench/chaos.py's node faults): after a
Ray node with a shard dies, Ray's GCS declares it dead in ~0.5 s and restarts the shard on a live node, but the
new incarnation answers only ~1.3-2 s later, nearly all of it a new worker process importing Ray and
quotaplane (1.0-2.0 s under load) and Ray handing it the class (~0.2 s); the shard's own ``__init__`` (config
replay, managers, checkpoint load, subscribe, direct channel) is ~30-70 ms. No tuning of ``__init__`` gets a
restart under 2 s, so the restart leaves the critical path: every shard ``<name>`` has a **standby**
``<name>-standby`` (same class, ``standby=True``), placed on another node, that follows the log like every shard
(imports done, image replayed, managers built, direct channel listening) and serves nothing until it takes over.

**Members and roles.** The primary (the shard's usual name, the one every other caller, a reshard's peers, the
metrics endpoint use) is the long-term owner; the standby covers its restart only:

1. The primary's connection breaks: a gateway calls ``take_over`` on the standby, which asks the controller
   (``grant_standby``) every ``GRANT_POLL_S`` until it grants or ``wait_s`` passed. The standby then loads the
   primary's last usage checkpoint from the shard's data directory, starts checkpointing there itself, and serves.
2. The restarted primary, in ``__init__`` before it serves anything, claims the shard (``claim_shard``); if the
   standby had been granted, it calls the standby's ``release``: the standby stops serving (later batches are
   refused with :class:`NotServingError`, which the gateway answers by sending them to the primary, not served
   twice), writes a final checkpoint, forgets its usage windows and hands them to the primary, which goes on
   from them (nothing lost at the hand-back).

**The fence (no key decided by two owners).** The controller keeps, per shard, the owner (primary or standby)
and the Ray restart count (``NumRestarts`` in Ray's GCS actor table) of the primary incarnation that claimed
last, durably (``shard-owners.json`` beside its log, fsynced, so a restarted controller fences the same way).
It grants the standby only when Ray's GCS says that incarnation is gone: the primary actor is dead, or
restarting with a higher restart count. That is the condition under which Ray itself starts a new incarnation,
so the standby serves only when a restart would, never beside a live primary. A primary incarnation claims
before it serves, and after its claim no grant passes (its restart count is the recorded one), so at most one
of (the claiming primary, the standby) serves: the primary only once the standby's ``release`` returned, or once
Ray says the granted standby incarnation is gone (restarted standbys start not serving). Calls on each member
are serialized by its serving lock.

**Placement.** Standby and primary must not share a node, or one node loss takes both: ``quotaplane up`` puts
them in one Ray placement group of two bundles with ``STRICT_SPREAD`` when at least two live nodes offer the shard
resources (the Kubernetes deployment); Ray re-places a dead node's bundle on a node that does not hold the other
member, so the pair stays apart across restarts (a soft ``SPREAD`` re-placed it on the surviving node when the
replacement had not joined yet, and the next node loss took both). The price: while fewer than two such nodes
live, the member of a dead node is not restarted (its partner serves); if both nodes die the shard waits for a node
to join. With one node (a private ``up``) the standby shares the primary's node: it still covers a crash of the
primary's process.

**What the standby does not carry.** The checkpoint holds the usage windows (produce, fetch, request); the
KIP-599 mutation buckets, KIP-936 producer-id filters, KIP-714 client instances and connection counts decided
during a takeover stay with the standby and are not handed back, exactly as a restart without a standby loses
them. A reshard whose receiver must pull from a restarting primary waits for that primary (its ``hand_over``),
which by then holds what the standby handed back.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from quotaplane.durable import replace_file

__all__ = [
    "GRANT_POLL_S",
    "OWNERS_FILE",
    "STANDBY_SUFFIX",
    "ActorState",
    "NotServingError",
    "OwnerRecord",
    "ShardOwners",
    "actor_state",
    "standby_of",
]

log = logging.getLogger(__name__)

#: a standby's actor name is its primary's plus this
STANDBY_SUFFIX = "-standby"
OWNERS_FILE = "shard-owners.json"
#: how often a standby asks the controller again while Ray still says the primary lives (the GCS declares a node
#: dead after its health checks fail: quotaplane's NODE_FAILURE_DETECTION, ~0.5 s)
GRANT_POLL_S = 0.02
#: Ray's states of an actor with no incarnation left (GONE: no actor of that name exists)
_GONE = frozenset({"DEAD", "GONE"})
#: Ray's states of an actor's first incarnation before it runs (a restarted one is RESTARTING until ALIVE)
_CREATING = frozenset({"PENDING_CREATION", "DEPENDENCIES_UNREADY"})


class NotServingError(Exception):
    """A standby that is not the shard's owner was sent a batch: it served nothing; send it to the primary."""


@dataclass(frozen=True, slots=True)
class ActorState:
    """What Ray's GCS says of an actor: ``state`` (ALIVE, RESTARTING, DEAD, ...; ``"GONE"`` when no actor of
    that name exists) and ``restarts`` (``NumRestarts``, raised when a restart begins)."""

    state: str
    restarts: int


def actor_state(actor_id: str) -> ActorState:
    """The GCS's view of the actor ``actor_id`` (hex; one GCS call, ~1 ms). By id, never by name: a name lookup
    that failed for a live actor would read as "gone" and let the standby serve beside it."""
    import ray

    info = ray._private.state.actors(actor_id)
    if not info:
        return ActorState("GONE", -1)
    return ActorState(str(info["State"]), int(info["NumRestarts"]))


@dataclass(slots=True)
class OwnerRecord:
    """One shard's owner: ``"primary"`` or ``"standby"``; the primary incarnation that claimed last (its Ray
    restart count); the standby incarnation granted last (its restart count, None if never); ``epoch`` counts the
    changes of owner."""

    owner: str = "primary"
    primary_restarts: int = -1
    standby_restarts: int | None = None
    epoch: int = 0
    #: the Ray actor id of the standby granted last (what a claiming primary asks Ray about)
    standby_id: str | None = None


class ShardOwners:
    """The controller's arbiter: every shard's :class:`OwnerRecord`, kept in ``<directory>/shard-owners.json``
    (rewritten atomically and fsynced at each change: changes happen only at restarts and takeovers).

    Thread-safe (the controller is a threaded actor). ``state_of(actor_id)`` is how it asks Ray of an actor
    (``actor_state``; a test's stand-in). Records are kept by the primary's name; the members are named by
    their Ray actor ids in each call."""

    def __init__(self, directory: Path, *, fsync: bool = True, state_of: Any = actor_state) -> None:
        self.path = directory / OWNERS_FILE
        self._fsync = fsync
        self._state_of = state_of
        self._lock = threading.Lock()
        self._records: dict[str, OwnerRecord] = {}
        try:
            raw = json.loads(self.path.read_text())
            self._records = {key: OwnerRecord(**value) for key, value in raw.items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as e:
            # an unreadable record must not stop the controller; without it a standby is granted only once Ray
            # says the primary is gone (no claim is recorded: any incarnation, even one starting, fences it out)
            log.warning("ignoring unreadable %s: %s", self.path, e)

    @staticmethod
    def key(name: str, namespace: str | None) -> str:
        return f"{namespace or ''}/{name}"

    def record(self, name: str, namespace: str | None) -> OwnerRecord:
        with self._lock:
            return OwnerRecord(**asdict(self._records.get(self.key(name, namespace), OwnerRecord())))

    def claim_primary(self, name: str, namespace: str | None, primary_id: str) -> OwnerRecord:
        """A primary incarnation (actor ``primary_id``) claims its shard before it serves: the record as it was
        before (its ``owner`` says whether the standby must be released first). Raises if Ray knows no such
        actor."""
        state = self._state_of(primary_id)
        if state.state == "GONE":
            raise ValueError(f"no actor {primary_id} ({namespace}/{name}) to claim shard ownership for")
        with self._lock:
            key = self.key(name, namespace)
            before = self._records.get(key, OwnerRecord())
            after = OwnerRecord("primary", state.restarts, before.standby_restarts, before.epoch + 1, before.standby_id)
            self._records[key] = after
            self._save()
            return OwnerRecord(**asdict(before))

    def grant_standby(self, name: str, namespace: str | None, primary_id: str, standby_id: str) -> int | None:
        """The standby (actor ``standby_id``) of primary ``name`` (actor ``primary_id``) asks to own the shard:
        its epoch when granted (already owning, or the primary incarnation that claimed last is gone by Ray's
        word), else None (the primary lives or starts)."""
        standby = self._state_of(standby_id)
        primary = self._state_of(primary_id)
        with self._lock:
            key = self.key(name, namespace)
            record = self._records.get(key, OwnerRecord())
            if record.owner == "standby" and record.standby_restarts == standby.restarts:
                return record.epoch
            if primary.state not in _GONE and primary.restarts <= record.primary_restarts:
                return None  # the incarnation that claimed last is alive or starting (Ray says RESTARTING then)
            if primary.state == "ALIVE":
                return None  # alive though no claim is recorded (a lost record): never serve beside it
            if primary.state in _CREATING and record.primary_restarts < 0:
                return None  # a first incarnation being created: it claims before it serves
            self._records[key] = OwnerRecord(
                "standby", record.primary_restarts, standby.restarts, record.epoch + 1, standby_id
            )
            self._save()
            return record.epoch + 1

    def forget(self, name: str, namespace: str | None) -> None:
        """Drop a shard's record (a reshard removed it)."""
        with self._lock:
            if self._records.pop(self.key(name, namespace), None) is not None:
                self._save()

    def _save(self) -> None:
        data = json.dumps({key: asdict(record) for key, record in self._records.items()}, sort_keys=True)
        replace_file(self.path, data.encode(), fsync=self._fsync)


def standby_of(handle: Any) -> Any | None:
    """The standby of the shard whose primary is ``handle``: ``<its name>-standby``, looked up in the caller's
    namespace (a gateway's driver joins the shards' namespace), or None when there is none (or ``handle`` is not
    a named Ray actor). Ray's actor table names the actor but not its namespace."""
    import ray

    actor_id = getattr(handle, "_actor_id", None)
    if actor_id is None:
        return None
    try:
        info = ray._private.state.actors(actor_id.hex())
        name = info.get("Name") if info else None
        return ray.get_actor(name + STANDBY_SUFFIX) if name else None
    except ValueError:
        return None
