"""A shard's direct channel: the gateway's micro-batches over one plain TCP connection, beside Ray.

Why: a Ray actor call costs ~0.5–0.9 ms of latency and a fair share of a core in Ray's own threads, whatever
the call carries; a length-prefixed frame over an open TCP connection costs ~20 µs (measured on a 2-core
machine: 0.02 ms against 0.85 ms for a one-item call). Every usage decision of a Kafka proxy is one such
call, so the actor call, not the quota core, was the floor of a decision's latency. Ray still starts,
places and restarts the shard, and still carries everything else (config pushes, admin and metrics calls).

**Protocol.** Frames are a 4-byte big-endian length and that many bytes. A connection's first frame is the
shard's token (32 random bytes made at start, handed out only by the ``direct_address`` actor call, so only
a party Ray lets call the actor can use the channel); anything else closes the connection before a byte of
it is decoded. Then each request frame is ``pickle((kind, config_offset, items))`` and its answer
``pickle((outcome, value))``: ``("ok", (offset, results))`` (or ``("ok", (offset, None, events))`` from a
shard ahead of the batch's config offset: ``ShardActor.serve_at``), ``("invalid", message)`` for the shard's
ValueError (bad items: the batch changed nothing), ``("not_serving", message)`` from a warm standby that does
not own the shard (nothing served: the gateway sends the batch to the primary; ``_standby``), or
``("error", message)``. One request at a time per
connection; a gateway opens one connection per shard worker.

**One at a time.** The shard's core is single-threaded by design: every public method of a class decorated
with :func:`serialized` runs under the instance's ``serving_lock`` (re-entrant), so a batch from this
channel's thread never interleaves with a call Ray runs on the actor's thread.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import logging
import pickle
import secrets
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ._standby import NotServingError

__all__ = [
    "MAX_FRAME_BYTES",
    "DirectAddress",
    "DirectChannelServer",
    "read_frame",
    "serialized",
    "unserialized",
    "write_frame",
]

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
#: Largest frame either side accepts: far above a gateway's largest micro-batch (8 MiB of pushes).
MAX_FRAME_BYTES = 256 * 1024 * 1024
TOKEN_BYTES = 32

#: ``(host, port, token)`` of a shard's channel.
DirectAddress = tuple[str, int, bytes]

C = TypeVar("C", bound=type)
F = TypeVar("F", bound=Callable[..., Any])


def read_frame(stream: Any) -> bytes | None:
    """One frame from a binary file object; None at a clean end of stream (EOF before a length)."""
    header = stream.read(_LENGTH.size)
    if not header:
        return None
    if len(header) != _LENGTH.size:
        raise ConnectionError("the connection closed inside a frame's length")
    (length,) = _LENGTH.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ConnectionError(f"a frame of {length} bytes is over the limit of {MAX_FRAME_BYTES}")
    body = stream.read(length)
    if len(body) != length:
        raise ConnectionError(f"the connection closed inside a frame ({len(body)} of {length} bytes)")
    return body


def write_frame(sock: socket.socket, body: bytes) -> None:
    sock.sendall(_LENGTH.pack(len(body)) + body)


def serialized(cls: C) -> C:
    """Run every public method of ``cls`` under ``self.serving_lock`` (an RLock the instance creates first
    thing in ``__init__``), so Ray's actor thread and the direct channel's thread take turns."""

    def guard(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
            with self.serving_lock:
                return method(self, *args, **kwargs)

        return guarded

    for name, member in list(vars(cls).items()):
        if (
            not name.startswith("_")
            and callable(member)
            and not isinstance(member, staticmethod | classmethod)
            and not getattr(member, "_unserialized", False)
        ):
            setattr(cls, name, guard(member))
    return cls


def unserialized(method: F) -> F:
    """Leave ``method`` out of :func:`serialized`: it takes the serving lock itself, only where it must (a
    standby's ``take_over`` waits for the controller's grant without holding the shard)."""
    method._unserialized = True  # type: ignore[attr-defined]
    return method


class DirectChannelServer:
    """Accepts gateway connections on ``host`` (an ephemeral port) and answers their frames with ``serve``.

    ``serve(kind, config_offset, items)`` is the shard's ``serve_at``; a ValueError it raises is answered as
    ``("invalid", message)``, any other exception as ``("error", message)``, and the connection goes on.
    """

    def __init__(self, serve: Callable[[str, int, Any], Any], host: str) -> None:
        self._serve = serve
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self._listener = socket.create_server((host, 0), backlog=64)
        self.host = host
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept_loop, name="shard-direct-accept", daemon=True).start()

    @property
    def address(self) -> DirectAddress:
        return self.host, self.port, self.token

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for conn in self._connections:
                # shut down, not just closed: a connection's reader holds the socket open until it returns, so a
                # gateway would wait for its answer instead of seeing the channel end
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._connections.clear()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._connections.add(conn)
            threading.Thread(target=self._connection, args=(conn,), name="shard-direct-conn", daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        try:
            with conn, conn.makefile("rb") as stream:
                token = read_frame(stream)
                if token is None or not hmac.compare_digest(token, self.token):
                    log.warning("direct channel: a connection without the shard's token was closed")
                    return
                while (frame := read_frame(stream)) is not None:
                    write_frame(conn, self._answer(frame))
        except (ConnectionError, OSError) as e:
            if not self._closed:
                log.debug("direct channel connection ended: %s", e)
        finally:
            with self._lock:
                self._connections.discard(conn)

    def _answer(self, frame: bytes) -> bytes:
        try:
            kind, config_offset, items = pickle.loads(frame)
            outcome: tuple[str, Any] = ("ok", self._serve(kind, config_offset, items))
        except ValueError as e:
            outcome = ("invalid", str(e))
        except NotServingError as e:  # a standby that does not own the shard: nothing served
            outcome = ("not_serving", str(e))
        except Exception as e:  # the shard's own failure: the gateway reports it, the channel goes on
            log.exception("direct channel: a micro-batch failed")
            outcome = ("error", f"{type(e).__name__}: {e}")
        return pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
