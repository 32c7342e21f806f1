"""``connections.max.idle.ms`` on the frontend's reads (``_idle.ReadDeadline`` through ``_read_frame``): a size
or a body that waits past the limit is TimeoutError, as with ``asyncio.timeout`` around each read, while reads
that keep arriving never time out; a cancellation from elsewhere stays a cancellation. On both loops."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

import pytest

from quotaplane.services.frontend._connection import _read_frame
from quotaplane.services.frontend._idle import ReadDeadline
from quotaplane.services.frontend._loop import new_event_loop
from quotaplane.services.frontend._state import CloseConnection

IDLE_S = 0.15


def _server(idle_s: float = IDLE_S) -> Any:
    return SimpleNamespace(config=SimpleNamespace(connections_max_idle_s=idle_s, request_limit=1000))


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    def runner(coroutine: Coroutine[Any, Any, Any]) -> Any:
        if request.param == "uvloop":
            pytest.importorskip("uvloop")
            loop = new_event_loop()
        else:
            loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(coroutine)
        finally:
            loop.close()

    return runner


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_a_silent_connection_times_out_after_the_idle_limit(run: Any) -> None:
    async def main() -> float:
        reader = asyncio.StreamReader()
        deadline = ReadDeadline(IDLE_S)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await _read_frame(_server(), reader, deadline)
        deadline.close()
        return time.monotonic() - started

    waited = run(main())
    assert IDLE_S - 0.01 <= waited < IDLE_S + 0.5


def test_a_body_that_stops_half_way_times_out(run: Any) -> None:
    async def main() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(struct.pack(">i", 10) + b"abc")
        deadline = ReadDeadline(IDLE_S)
        with pytest.raises(TimeoutError):
            await _read_frame(_server(), reader, deadline)
        deadline.close()

    run(main())


def test_frames_arriving_within_the_limit_never_time_out(run: Any) -> None:
    """Twelve frames, one every 40 % of the limit: five limits in all, one timer armed the whole time."""

    async def main() -> list[bytes]:
        reader = asyncio.StreamReader()
        deadline = ReadDeadline(IDLE_S)
        loop = asyncio.get_running_loop()
        for i in range(12):
            loop.call_later(IDLE_S * 0.4 * (i + 1), reader.feed_data, _frame(bytes([i]) * 3))
        got = [await _read_frame(_server(), reader, deadline) for _ in range(12)]
        deadline.close()
        return got

    assert run(main()) == [bytes([i]) * 3 for i in range(12)]


def test_time_spent_between_reads_does_not_count(run: Any) -> None:
    """Handling a request (or a throttle) longer than the limit is not idleness: only reads wait."""

    async def main() -> bytes:
        reader = asyncio.StreamReader()
        deadline = ReadDeadline(IDLE_S)
        reader.feed_data(_frame(b"one"))
        assert await _read_frame(_server(), reader, deadline) == b"one"
        await asyncio.sleep(IDLE_S * 2.5)  # busy elsewhere: the timer fires and finds no read waiting
        reader.feed_data(_frame(b"two"))
        got = await _read_frame(_server(), reader, deadline)
        deadline.close()
        return got

    assert run(main()) == b"two"


def test_a_cancellation_from_elsewhere_is_not_a_timeout(run: Any) -> None:
    async def main() -> None:
        reader = asyncio.StreamReader()

        async def read() -> bytes:
            deadline = ReadDeadline(10.0)
            try:
                return await _read_frame(_server(10.0), reader, deadline)
            finally:
                deadline.close()

        task = asyncio.get_running_loop().create_task(read())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())


def test_an_oversized_size_closes_before_the_body(run: Any) -> None:
    async def main() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(struct.pack(">i", 5000))
        deadline = ReadDeadline(IDLE_S)
        with pytest.raises(CloseConnection):
            await _read_frame(_server(), reader, deadline)
        deadline.close()

    run(main())
