"""A connection's read deadline (``connections.max.idle.ms``) with one timer per idle period, not per read.

Why: the frontend reads every frame in two awaits (its size, then its body), each allowed
``connections_max_idle_s``. With ``asyncio.timeout`` around each, a push cost two timer handles scheduled and
cancelled (and two ``Timeout`` objects): measurable when a connection pushes ten times a second and the idle
limit is ten minutes. Here a read only stores its deadline; one timer per connection stays armed and, when
it fires, either finds the deadline moved on (a read finished and another started since) and re-arms at the
new deadline, or finds the read still waiting past its deadline and cancels the connection's task, which
:meth:`ReadDeadline.expired` then turns into ``TimeoutError`` as ``asyncio.timeout`` does. A connection that
is not reading (handling a request, muted by a throttle) has no deadline, and the timer then disarms until
the next read. What times out is unchanged: a read (size or body) that waited ``idle_s``.
"""

from __future__ import annotations

import asyncio

__all__ = ["ReadDeadline"]

#: A timer may fire up to about a millisecond early (uvloop's libuv timers count milliseconds): a deadline
#: this close counts as reached, so a firing timer never re-arms for a sliver.
_EARLY_S = 0.002


class ReadDeadline:
    """``start()`` before each read, ``stop()`` after it (in ``finally``); see the module docstring."""

    __slots__ = ("_deadline", "_fired", "_handle", "_idle_s", "_loop", "_task")

    def __init__(self, idle_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._idle_s = idle_s
        self._deadline: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._fired = False

    def start(self) -> None:
        """A read begins: it may wait until ``idle_s`` from now."""
        deadline = self._deadline = self._loop.time() + self._idle_s
        if self._handle is None:
            self._handle = self._loop.call_at(deadline, self._fire)

    def stop(self) -> None:
        """The read ended (data, error or cancellation): no deadline until the next ``start``."""
        self._deadline = None

    def close(self) -> None:
        self._deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def expired(self) -> bool:
        """After a ``CancelledError`` out of a read: whether this deadline caused it (and nothing else asked for
        the cancellation), in which case the caller raises ``TimeoutError`` instead."""
        if not self._fired:
            return False
        self._fired = False
        task = self._task
        return task is None or task.uncancel() == 0

    def _fire(self) -> None:
        self._handle = None
        deadline = self._deadline
        if deadline is None:  # not reading: the next start() arms the timer again
            return
        if deadline - self._loop.time() > _EARLY_S:
            self._handle = self._loop.call_at(deadline, self._fire)
            return
        if self._task is not None and not self._task.done():
            self._fired = True
            self._task.cancel()
