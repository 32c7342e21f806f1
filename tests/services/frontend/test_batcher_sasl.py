"""Units of the frontend without a cluster: the micro-batcher and SASL/PLAIN credentials."""

from __future__ import annotations

import asyncio

import pytest

from quotaplane.services.frontend._batcher import Batcher
from quotaplane.services.frontend._sasl import PlainCredentials, SaslError, parse_plain_token


def test_items_of_one_linger_window_share_one_call_and_get_their_own_results() -> None:
    calls: list[list[int]] = []

    async def send(items: list[int]) -> list[int]:
        calls.append(items)
        return [i * 10 for i in items]

    async def main() -> list[int]:
        batcher: Batcher[int, int] = Batcher(send, linger_s=0.01, max_items=100)
        return list(await asyncio.gather(*(batcher.submit(i) for i in range(5))))

    assert asyncio.run(main()) == [0, 10, 20, 30, 40]
    assert calls == [[0, 1, 2, 3, 4]]


def test_natural_batches_wait_while_max_in_flight_calls_are_out() -> None:
    """Linger 0: an idle batcher sends at once; while ``max_in_flight`` calls are out, later items gather into
    one batch sent when a call returns (2,000 connections in a burst made 2,000 one-item calls without it);
    ``max_items`` still sends at once."""
    calls: list[list[int]] = []
    gates: list[asyncio.Event] = []

    async def send(items: list[int]) -> list[int]:
        calls.append(items)
        gate = asyncio.Event()
        gates.append(gate)
        await gate.wait()
        return [-i for i in items]

    async def settle() -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    async def main() -> None:
        batcher: Batcher[int, int] = Batcher(send, linger_s=0, max_items=4, max_in_flight=1)
        first = batcher.submit(1)
        await settle()
        assert calls == [[1]]  # idle: sent at once
        waiting = [batcher.submit(i) for i in (2, 3, 4)]
        await settle()
        assert calls == [[1]]  # one call out: the batch stays open
        gates[0].set()
        assert await first == -1
        await settle()
        assert calls == [[1], [2, 3, 4]]  # sent when the call returned, as one batch
        full = [batcher.submit(i) for i in (5, 6, 7, 8)]  # max_items: sent though a call is out
        await settle()
        assert calls[-1] == [5, 6, 7, 8]
        for gate in gates[1:]:
            gate.set()
        assert await asyncio.gather(*waiting, *full) == [-2, -3, -4, -5, -6, -7, -8]

    asyncio.run(asyncio.wait_for(main(), 5))
    with pytest.raises(ValueError, match="max_in_flight"):
        Batcher(send, max_in_flight=0)


def test_max_items_and_max_bytes_flush_early() -> None:
    calls: list[list[bytes]] = []

    async def send(items: list[bytes]) -> list[int]:
        calls.append(items)
        return [len(i) for i in items]

    async def main() -> None:
        by_count: Batcher[bytes, int] = Batcher(send, linger_s=10, max_items=2)
        assert await asyncio.wait_for(asyncio.gather(by_count.submit(b"a"), by_count.submit(b"bb")), 1) == [1, 2]
        by_size: Batcher[bytes, int] = Batcher(send, linger_s=10, max_items=100, max_bytes=5, size_of=len)
        assert await asyncio.wait_for(asyncio.gather(by_size.submit(b"abc"), by_size.submit(b"defg")), 1) == [3, 4]

    asyncio.run(main())
    assert calls == [[b"a", b"bb"], [b"abc", b"defg"]]


def test_a_failed_batch_fails_every_waiter_and_a_short_answer_is_an_error() -> None:
    async def boom(items: list[int]) -> list[int]:
        raise ConnectionError("gateway down")

    async def short(items: list[int]) -> list[int]:
        return items[:-1]

    async def main() -> None:
        failing: Batcher[int, int] = Batcher(boom, linger_s=0.001)
        results = await asyncio.gather(failing.submit(1), failing.submit(2), return_exceptions=True)
        assert all(isinstance(r, ConnectionError) for r in results)
        wrong: Batcher[int, int] = Batcher(short, linger_s=0.001)
        results = await asyncio.gather(wrong.submit(1), wrong.submit(2), return_exceptions=True)
        assert all(isinstance(r, RuntimeError) for r in results)
        await failing.drain()

    asyncio.run(main())


def test_plain_credentials_file_and_tokens(tmp_path) -> None:
    path = tmp_path / "users"
    path.write_text("# operators\nadmin:s3cret:with:colons\n\nalice:pw\n")
    credentials = PlainCredentials.load(path)
    assert "s3cret" not in repr(credentials)
    assert credentials.authenticate(b"\x00admin\x00s3cret:with:colons") == "User:admin"
    assert credentials.authenticate(b"alice\x00alice\x00pw") == "User:alice"
    refused = [b"\x00alice\x00wrong", b"\x00mallory\x00pw", b"bob\x00alice\x00pw", b"alice\x00pw", b"\xff\x00a\x00b"]
    for token in refused:
        with pytest.raises(SaslError):
            credentials.authenticate(token)
    assert parse_plain_token(b"z\x00a\x00p") == ("z", "a", "p")


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "holds no"), ("alice\n", "expected 'user:password'"), ("a:1\na:2\n", "given twice"), ("a b:1\n", "space")],
)
def test_bad_credentials_files_are_one_line_errors(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "users"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        PlainCredentials.load(path)
    with pytest.raises(ValueError, match="cannot read"):
        PlainCredentials.load(tmp_path / "missing")
