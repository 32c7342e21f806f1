"""Micro-batching of many connections' requests into one batched gRPC call.

The gateway's RPCs take batches because one gRPC call per Kafka request cannot keep up with thousands
of clients (about 25k messages/s per stream, ~1 ms per actor call). Every connection of the frontend
runs on one event loop, so a batcher is a plain list plus one scheduled flush: the first item schedules
it, items arriving meanwhile join the same batch, and the batch is sent when the flush runs or
``max_items`` (or ``max_bytes`` of ``size_of`` the items) is reached, whichever comes first.

**When the flush runs.** With ``linger_s`` 0 (the frontend's default) it is ``loop.call_soon``: the batch
closes once the loop has run every callback already due, i.e. every connection whose request was read in
the same pass over the ready sockets has joined it. That is natural batching: an idle frontend sends a
request at once (no timer, no added latency), a busy one gathers what each pass of the loop read (a few
hundred pushes per call at 20k pushes/s), and the batch grows with the load instead of with a fixed wait.
With ``linger_s`` > 0 the flush is a timer of that length (``call_later``), the batcher's former behaviour,
kept for callers that want fewer, larger calls at low load.

**At most ``max_in_flight`` calls of a kind at once** (default 2). A flush that finds that many calls out
leaves the batch open; it is sent as soon as one of them returns, with everything that joined meanwhile
(group commit's rule). Without the bound, natural batching under a burst degenerates into one call per item:
2,000 connections accepted in one burst made 2,000 admission calls of one item each, and handshakes fell
from ~3,000/s to ~570/s. With it, an idle frontend still sends at once, and a busy one sends batches as
large as the calls are slow. ``max_items`` (or ``max_bytes``) reached sends at once, bound or not.

Each item's caller awaits its own future. A batch the server refuses whole (a gRPC error) fails every
future of that batch with the same exception; a result list of the wrong length is an error too
(RuntimeError), never a silent misattribution.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Batcher"]

_I = TypeVar("_I")
_R = TypeVar("_R")


class Batcher(Generic[_I, _R]):
    """Collect items until the scheduled flush (``linger_s``, 0: the loop's next pass; later while
    ``max_in_flight`` calls are out) or ``max_items``, then ``send(items)`` once.

    ``send`` is a coroutine function returning one result per item, in order. Must be used from the
    event loop it was created on (no locks: the loop serializes everything).
    """

    def __init__(
        self,
        send: Callable[[list[_I]], Awaitable[Sequence[_R]]],
        *,
        linger_s: float = 0.001,
        max_items: int = 1000,
        max_bytes: int | None = None,
        size_of: Callable[[_I], int] | None = None,
        name: str = "batch",
        max_in_flight: int = 2,
    ) -> None:
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._send = send
        self._linger_s = linger_s
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._size_of = size_of
        self._bytes = 0
        self._name = name
        self._items: list[_I] = []
        self._futures: list[asyncio.Future[_R]] = []
        self._timer: asyncio.Handle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: batches sent and items carried (for the bench and the frontend's stats)
        self.batches = 0
        self.items = 0

    def submit(self, item: _I) -> asyncio.Future[_R]:
        """Queue ``item``; its result (or the batch's exception) arrives on the returned future."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_R] = loop.create_future()
        self._items.append(item)
        self._futures.append(future)
        if self._size_of is not None:
            self._bytes += self._size_of(item)
        if len(self._items) >= self._max_items or (self._max_bytes is not None and self._bytes >= self._max_bytes):
            self._flush(full=True)
        elif self._timer is None:
            linger_s = self._linger_s
            self._timer = loop.call_later(linger_s, self._flush) if linger_s > 0 else loop.call_soon(self._flush)
        return future

    def _flush(self, *, full: bool = False) -> None:
        """Send the open batch, unless ``max_in_flight`` calls are out and it is not ``full``: then the first
        call to return sends it (``_run``)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._items or (not full and self._in_flight >= self._max_in_flight):
            return
        items, futures = self._items, self._futures
        self._items, self._futures, self._bytes = [], [], 0
        self._in_flight += 1
        self.batches += 1
        self.items += len(items)
        task = asyncio.get_running_loop().create_task(self._run(items, futures), name=f"{self._name}-send")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, items: list[_I], futures: list[asyncio.Future[_R]]) -> None:
        try:
            await self._answer(items, futures)
        finally:
            self._in_flight -= 1
            if self._items and self._timer is None:
                self._flush()  # what waited for a call to return goes now

    async def _answer(self, items: list[_I], futures: list[asyncio.Future[_R]]) -> None:
        try:
            results = await self._send(items)
            if len(results) != len(items):
                raise RuntimeError(f"{self._name}: {len(results)} results for {len(items)} items")
        except BaseException as e:  # every waiter must wake, whatever happened
            for future in futures:
                if not future.done():
                    future.set_exception(e if isinstance(e, Exception) else RuntimeError(repr(e)))
            if not isinstance(e, Exception):
                raise
            return
        for future, result in zip(futures, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def drain(self) -> None:
        """Send what is queued and wait for every batch in flight (used on close)."""
        self._flush(full=True)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
