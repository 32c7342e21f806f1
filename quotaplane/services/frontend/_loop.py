"""The frontend's event loop: uvloop's where it is installed, asyncio's otherwise.

Why: every push a Kafka client sends is a socket read, a handful of callbacks and futures, and a socket write
on this one loop, and the frontend's thread was the largest CPU consumer of a push (bench/frontend.py,
``cpu_us_per_push.frontend_loop``). uvloop runs the same asyncio code (streams, futures, ``grpc.aio``) on
libuv, with the selector, transports, handles and timers in C. Nothing the loop runs changes, only what it
costs. ``QUOTAPLANE_FRONTEND_LOOP=asyncio`` forces the standard loop (to compare, or to rule uvloop out).
"""

from __future__ import annotations

import asyncio
import os

__all__ = ["LOOP_ENV", "loop_kind", "new_event_loop"]

#: Set to ``asyncio`` to run the frontend on the standard library's loop even where uvloop is installed.
LOOP_ENV = "QUOTAPLANE_FRONTEND_LOOP"


def loop_kind() -> str:
    """``uvloop`` or ``asyncio``: what :func:`new_event_loop` makes here."""
    if os.environ.get(LOOP_ENV, "").strip().lower() == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop of :func:`loop_kind`'s kind (not set as the thread's current loop)."""
    if loop_kind() == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()
