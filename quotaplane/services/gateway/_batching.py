"""The gateway's queues: one request batch as a :class:`Pending`, and one worker thread per shard.

Items are grouped per owning shard and queued; each shard's worker drains its queue into micro-batches (at
most ``max_shard_batch_items`` items and ``max_shard_batch_bytes`` bytes, waiting at most ``linger_s`` for
more: 0 by default) and makes one call per micro-batch to the shard (``_shard_channel``: its direct channel,
or ``ShardActor.serve_packed`` through Ray). Through Ray one call is in flight; on the direct channel up to
``shard_pipeline_depth`` micro-batches of usage, request time or producer ids are on the wire, the next sent while
the shard serves the one before (``ShardWorker._pipeline``), so the shard does not idle while the gateway packs a
batch and hands out the answers of the last. Usage goes to the shard as columns (``quotaplane.actors
._usage_columns``).
Batching is natural: while a call is in flight the queue fills, and the next call takes all of it, so a busy
shard gets large micro-batches and an idle one answers a lone item at once, without a linger. Items reach a shard in
the order they arrived; a micro-batch only joins units of the same kind routed at the same config offset,
since the shard serves it at that offset. A shard ahead of that offset answers nothing but the config events
the gateway misses, and the worker hands the units and those events back to the gateway (``reroute``); a shard
that fails fails only the requests it held.
"""

from __future__ import annotations

import collections
import logging
import operator
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quotaplane.actors import COLUMN_KINDS, RequestColumns, UsageColumns, pack_columns, pack_usage, ray_get, standby_of

from ._checks import InvalidArgument, Unavailable, wall_clock_ms
from ._lost_usage import LostUsage, Restart
from ._shard_channel import ShardChannel

if TYPE_CHECKING:
    from ._routing import Gateway

__all__ = ["Pending", "Router", "ShardWorker", "Unit"]

log = logging.getLogger(__name__)
#: a usage item's value: ``(quota type, user, client id, value, now_ms)``
_VALUE = operator.itemgetter(3)
#: kinds whose micro-batches may follow each other on a direct connection (``ShardWorker._pipeline``): their
#: answers are one small number per item, so a shard writing an answer never waits for the gateway to read
_PIPELINED_KINDS = frozenset({"usage", "unrecord", "request", "producer_ids"})

#: ``(items, indices or None for all) -> (config offset, shard keys of those items)``
Router = Callable[[list[Any], Sequence[int] | None], tuple[int, list[str]]]


class Pending:
    """One request batch: its items, where their answers go, and when it is done."""

    __slots__ = (
        "arrival",
        "closed",
        "columns",
        "done",
        "error",
        "items",
        "kind",
        "lock",
        "offset",
        "remaining",
        "reroutes",
        "results",
        "route",
        "sizes",
    )

    def __init__(self, kind: str, items: list[Any], route: Router, arrival: int = 0) -> None:
        self.kind = kind
        #: its place in the order the gateway took requests in (the reshard barrier keeps that order)
        self.arrival = arrival
        self.items = items
        #: (items, indices or None for all) -> (config offset, those items' shard keys); called again when a
        #: fenced batch is routed again
        self.route = route
        #: bytes per item, when they matter for the size of an actor call (None: count items only)
        self.sizes: list[int] | None = None
        #: usage items also as the request's columns (``RequestColumns``), what they go to the shard from
        self.columns: RequestColumns | None = None
        self.results: list[Any] = [None] * len(items)
        self.remaining = len(items)
        self.offset = 0
        self.error: Exception | None = None
        self.reroutes = 0
        self.lock = threading.Lock()
        self.closed = False  # answered or failed: decided under ``lock``, exactly once
        self.done = threading.Event()

    def fill(self, indices: Sequence[int], throttles: Sequence[Any], offset: int) -> bool:
        with self.lock:
            results = self.results
            for index, throttle in zip(indices, throttles, strict=True):
                results[index] = throttle
            self.offset = max(self.offset, offset)
            self.remaining -= len(indices)
            finished = self.remaining == 0 and not self.closed
            if finished:
                self.closed = True
        if finished:
            self.done.set()
        return finished

    def fail(self, error: Exception) -> bool:
        with self.lock:
            if self.closed:
                return False
            self.closed = True
            self.error = error
        self.done.set()
        return True


@dataclass(slots=True)
class _InFlight:
    """One micro-batch for a shard: its units, kind, config offset, item count, what goes on the wire (usage as
    ``UsageColumns`` when they fit, else the items), the usage bytes it carries (usage only) and when it was
    gathered (ms)."""

    units: list[Unit]
    kind: str
    offset: int
    count: int
    wire: Any
    usage_bytes: float | None
    sent_ms: int


@dataclass(slots=True)
class Unit:
    """Some items of one request, for one shard, resolved at ``offset``; ``size``: their bytes, when the
    request said (telemetry pushes), else 0."""

    pending: Pending
    indices: list[int]
    offset: int
    size: int = 0
    #: the shard count its owner was chosen by (``Gateway``'s reshard barrier)
    count: int = 0


class ShardWorker(threading.Thread):
    """Drains one shard's queue into micro-batches: one actor call each, one call in flight."""

    def __init__(self, gateway: Gateway, shard_id: str, handle: Any) -> None:
        super().__init__(name=f"gateway-shard-{shard_id}", daemon=True)
        self.gateway = gateway
        self.shard_id = shard_id
        self.handle = handle
        self.channel = ShardChannel(
            shard_id,
            handle,
            timeout_s=gateway.config.shard_timeout_s,
            direct=gateway.config.direct_shard_calls,
            standby_lookup=standby_of,  # the shard's warm standby, asked to take over when the primary fails
        )
        self.queue: collections.deque[Unit] = collections.deque()
        self.cond = threading.Condition()
        self.batches = 0
        self.items = 0
        #: set when a reshard removed this shard: the worker drains its queue and ends
        self.retired = False
        #: usage bytes this worker's shard recorded lately, to count what a restart of it loses (``_lost_usage``)
        self.usage_sent = LostUsage()
        self._connects_seen = 0
        self._incarnation: tuple[int, int] | None = None
        #: micro-batches on the direct connection at once (``_pipeline``); 1: one call at a time
        self.pipeline_depth = gateway.config.shard_pipeline_depth

    def put(self, units: Sequence[Unit], *, front: bool = False) -> None:
        with self.cond:
            if front:
                self.queue.extendleft(reversed(units))
            else:
                self.queue.extend(units)
            self.cond.notify()

    def _take(self, follow: _InFlight | None = None) -> list[Unit] | None:
        """The next micro-batch's units, waiting for the first (None: the worker stops). ``follow``: a batch on the
        wire; then only units of its kind and config offset already queued, without waiting (None: there are none)."""
        config = self.gateway.config
        with self.cond:
            if follow is not None and (
                not self.queue or self.queue[0].offset != follow.offset or self.queue[0].pending.kind != follow.kind
            ):
                return None
            while not self.queue:
                if self.gateway.stopping or self.retired:
                    return None
                self.cond.wait(0.1)
            first = self.queue.popleft()
            units = [first]
            count = len(first.indices)
            size = first.size
            deadline = time.monotonic() + (config.linger_s if follow is None else 0.0)
            while count < config.max_shard_batch_items and size < config.max_shard_batch_bytes:
                if not self.queue:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.cond.wait(left)
                    if not self.queue:
                        break
                head = self.queue[0]
                if head.offset != first.offset or head.pending.kind != first.pending.kind:
                    break
                if count + len(head.indices) > config.max_shard_batch_items and count:
                    break
                if size + head.size > config.max_shard_batch_bytes:
                    break
                units.append(self.queue.popleft())
                count += len(head.indices)
                size += head.size
            return units

    def run(self) -> None:
        while True:
            units = self._take()
            if units is None:
                self.channel.close()
                return
            if self.pipeline_depth > 1 and units[0].pending.kind in _PIPELINED_KINDS and self.channel.can_pipeline():
                self._pipeline(units)
                continue
            try:
                self._send(units)
            except Exception as e:  # never lose a worker: fail what it held
                self._failed(units, e)
            finally:
                # answered, failed or routed again (then as new units): no longer in flight at their count
                self.gateway.barrier.done(units)

    def _failed(self, units: list[Unit], error: Exception) -> None:
        """A micro-batch failed: its requests fail with ``error`` (a retired shard's: routed to the new owners)."""
        if self.retired and not isinstance(error, InvalidArgument):
            # a reshard removed this shard (and its actor may be gone): the new owners serve these
            self.gateway.reroute(units, self.gateway.config_offset)
            return
        if not isinstance(error, Unavailable | InvalidArgument):
            log.error("shard %s: a micro-batch failed", self.shard_id, exc_info=error)
        for unit in units:
            self.gateway.finish(unit.pending, error=error)

    def _gather(self, units: list[Unit]) -> _InFlight:
        """The micro-batch of ``units`` in its wire form, built once: usage from its requests' own columns (no
        tuple per item), packed from the items when a request came without columns, else the items."""
        kind = units[0].pending.kind
        wire: Any
        if kind in COLUMN_KINDS and all(unit.pending.columns is not None for unit in units):
            wire = pack_columns(
                [
                    (unit.pending.columns, None if len(unit.indices) == len(unit.pending.items) else unit.indices)
                    for unit in units  # type: ignore[misc]
                ]
            )
        else:
            items: list[Any] = []
            for unit in units:
                items.extend(map(unit.pending.items.__getitem__, unit.indices))
            packed = pack_usage(items) if kind in COLUMN_KINDS else None
            wire = items if packed is None else packed
        usage_bytes = None
        if kind == "usage":  # one C pass for the bytes
            usage_bytes = wire.total_value() if isinstance(wire, UsageColumns) else float(sum(map(_VALUE, wire)))
        count = sum(len(unit.indices) for unit in units)
        return _InFlight(units, kind, units[0].offset, count, wire, usage_bytes, wall_clock_ms())

    def _send(self, units: list[Unit]) -> None:
        batch = self._gather(units)
        self._answered(batch, self.channel.call(batch.kind, batch.offset, batch.wire))

    def _answered(self, batch: _InFlight, answer: Any) -> None:
        received_ms = wall_clock_ms()
        recorded = None
        try:
            recorded = self._deliver_answer(batch, answer)
        finally:
            # after the answers went out (a takeover's first answers do not wait for this actor call), and before
            # this batch counts as sent: the new incarnation recorded it, whenever it was sent
            if self.channel.connects != self._connects_seen:  # a new connection: perhaps a new incarnation
                self._connects_seen = self.channel.connects
                self._check_incarnation()
            if recorded is not None:  # usage recorded between the send and the answer
                self.usage_sent.sent(batch.sent_ms, received_ms, recorded)

    def _pipeline(self, units: list[Unit]) -> None:
        """Micro-batches over the direct connection with up to ``pipeline_depth`` on the wire: the next is sent
        while the shard serves the one before, so the shard does not wait for the gateway's packing and answer
        handling between them (one at a time, a busy shard idled ~a quarter of the time). Only batches of the
        same kind and config offset follow each other on the wire: the shard answers in order, and if it refuses
        the first as fenced (it is at a newer config) it refuses those behind it too, and all are routed again
        together, in their order. Returns when nothing is on the wire and nothing matching is queued."""
        on_wire: collections.deque[_InFlight] = collections.deque()
        pending: list[Unit] | None = units
        while True:
            if pending is not None:
                batch = self._gather(pending)
                pending = None
                try:
                    self.channel.send(batch.kind, batch.offset, batch.wire)
                except Exception as e:  # the connection broke: this batch and those on the wire are lost with it
                    self._fail_on_wire([*on_wire, batch], e)
                    return
                on_wire.append(batch)
            if not on_wire:
                return
            if len(on_wire) < self.pipeline_depth:
                pending = self._take(follow=on_wire[-1])
                if pending is not None:
                    continue
            head = on_wire.popleft()
            try:
                answer = self.channel.receive()
            except (InvalidArgument, RuntimeError) as e:  # the shard refused this batch alone; the connection lives
                self._fail_on_wire([head], e)
                continue
            except Exception as e:  # the connection is gone, and every batch on it
                self.channel.close()
                self._fail_on_wire([head, *on_wire], e if isinstance(e, Unavailable) else Unavailable(str(e)))
                return
            if answer[1] is None and answer[0] > head.offset:
                self._refused_on_wire(head, answer, on_wire)
                continue
            try:
                self._answered(head, answer)
            except Exception as e:
                self._failed(head.units, e)
            finally:
                self.gateway.barrier.done(head.units)

    def _refused_on_wire(self, head: _InFlight, answer: Any, on_wire: collections.deque[_InFlight]) -> None:
        """The shard refused ``head`` as fenced: it refuses the batches behind it (the same offset) too. Their
        answers are read, and all of them are routed again at once, so they keep their order."""
        refused = [head]
        last = answer
        while on_wire:
            follower = on_wire.popleft()
            try:
                answer = self.channel.receive()
            except Exception as e:
                self._fail_on_wire([follower, *on_wire], e if isinstance(e, Unavailable) else Unavailable(str(e)))
                on_wire.clear()
                break
            if answer[1] is None:
                refused.append(follower)
                last = answer
            else:  # served after all (cannot happen: the shard's offset only grows); answered as served
                try:
                    self._answered(follower, answer)
                finally:
                    self.gateway.barrier.done(follower.units)
        units = [unit for batch in refused for unit in batch.units]
        self.batches += len(refused)
        try:
            self.gateway.reroute(units, last[0], last[2] if len(last) > 2 else ())
        finally:
            self.gateway.barrier.done(units)

    def _fail_on_wire(self, batches: list[_InFlight], error: Exception) -> None:
        for batch in batches:
            try:
                self._failed(batch.units, error)
            finally:
                self.gateway.barrier.done(batch.units)

    def _deliver_answer(self, batch: _InFlight, answer: Any) -> float | None:
        """Fill the units' answers (or route them again); the usage bytes the shard recorded, if any."""
        gateway = self.gateway
        shard_offset, throttles = answer[0], answer[1]
        self.batches += 1
        if throttles is None:
            if shard_offset < batch.offset:  # it could not catch up to the gateway's config
                raise Unavailable(f"shard {self.shard_id} is behind the config ({shard_offset} < {batch.offset})")
            # it is ahead of the offset these items were routed at, and hands over what it applied since
            gateway.reroute(batch.units, shard_offset, answer[2] if len(answer) > 2 else ())
            return None
        self.items += batch.count
        start = 0
        for unit in batch.units:
            end = start + len(unit.indices)
            if unit.pending.fill(unit.indices, throttles[start:end], shard_offset):
                gateway.finish(unit.pending)
            start = end
        return batch.usage_bytes

    def _check_incarnation(self) -> None:
        """After a (re)connect: if the shard is a new incarnation (Ray restarted it), count the usage bytes
        this worker sent that it lost, those after the checkpoint it restored (``_lost_usage``)."""
        try:
            # the member now serving: the primary, or its standby during a takeover (an incarnation of its own)
            progress = ray_get(self.channel.member.progress.remote(), self.gateway.config.shard_timeout_s)
        except Exception as e:  # the count is best effort; serving is not
            log.debug("shard %s: no progress after a reconnect: %s", self.shard_id, e)
            return
        incarnation = tuple(progress.get("incarnation", ()))
        previous, self._incarnation = self._incarnation, incarnation  # type: ignore[assignment]
        if previous is None or previous == incarnation:
            return
        started_ms = int(incarnation[1])
        age_ms = progress.get("restored_usage_age_ms")
        checkpoint_ms = None if age_ms is None else started_ms - int(age_ms)
        lost = self.usage_sent.lost(started_ms, checkpoint_ms)
        self.gateway.note_restart(Restart(self.shard_id, started_ms, checkpoint_ms, lost))
