"""How a shard worker calls its shard: the shard's direct channel, or a Ray actor call.

The direct channel (``quotaplane.actors`` ``DirectChannelServer``: one TCP connection, ~20 µs a round trip) is
the default; its address and token come from the ``direct_address`` actor call and are asked again after the
connection breaks (a restarted shard listens on a new port). With ``GatewayConfig.direct_shard_calls`` off,
or against a shard that has no channel, every micro-batch is one ``serve_packed`` actor call instead; so is
every micro-batch for ``RETRY_DIRECT_S`` after the channel could not be reached (a network policy that lets
Ray's ports through but not the shard's: the gateway keeps serving, a little slower, and says so once).

**Warm standby** (``quotaplane.actors._standby``): when the primary's connection breaks (or a Ray call finds it
dead or restarting), the next micro-batch first asks the shard's standby to ``take_over``: the standby answers with
its own direct channel's address once the controller grants it the shard (Ray says the primary's incarnation is
gone: ~0.5 s after a node dies, tens of ms after a process does), or None if the primary lives, and the channel
goes back to the primary. A standby that the restarted primary took the shard back from refuses batches with
``not_serving`` (nothing served): the channel sends the batch to the primary instead, once. So a node loss costs
the primary's death detection plus the takeover, not a new worker process and its imports.

Either way the outcome is the same: ``(shard offset, results)``, or ``(shard offset, None, events)`` when the
shard refused a fenced batch because it is at a newer config (``events``: the log batches it applied since the
batch's offset, for the gateway's replica), :class:`InvalidArgument` for the shard's
ValueError, :class:`Unavailable` for a shard that is dead, restarting or silent. A batch whose connection broke
mid-call may or may not have been served, exactly as with an actor that died during a call.
"""

from __future__ import annotations

import logging
import pickle
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from quotaplane.actors import DirectAddress, ray_get, read_frame, write_frame

from ._checks import InvalidArgument, Unavailable

__all__ = ["RETRY_DIRECT_S", "ShardAnswer", "ShardChannel"]

log = logging.getLogger(__name__)

#: After a failed connection to a shard's direct channel, how long its micro-batches go through Ray instead.
RETRY_DIRECT_S = 5.0
_CONNECT_TIMEOUT_S = 2.0
#: Longest a standby waits for the controller's grant before it says the primary lives (capped by the timeout).
TAKE_OVER_WAIT_S = 5.0


class _NotServing(Exception):
    """The member refused the batch without serving it (a released standby): send it to the primary."""


#: ``ShardActor.serve_at``'s answer: ``(its offset, results)``, or ``(its offset, None)`` / ``(its offset, None,
#: events)`` when it served nothing (``events``: log batches ``(base offset, EventColumns payload)``; an older
#: shard answers the pair)
ShardAnswer = tuple[int, list[Any]] | tuple[int, None] | tuple[int, None, tuple[tuple[int, bytes], ...]]


def _ray_call(ref: Any, timeout_s: float) -> Any:
    """``ray_get`` with the shard's own error re-raised; a dead, restarting or silent shard (or controller,
    when the shard could not reach it to catch up) is :class:`Unavailable`."""
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        return ray_get(ref, timeout_s)
    except RayActorError as e:
        raise Unavailable(f"a shard is unavailable (restarting?): {str(e).splitlines()[0]}") from None
    except GetTimeoutError:
        raise Unavailable(f"a shard did not answer within {timeout_s:g} s") from None


class ShardChannel:
    """One shard worker's way to its shard (used by that worker's thread only; ``close`` from any thread)."""

    def __init__(
        self,
        shard_id: str,
        handle: Any,
        *,
        timeout_s: float,
        direct: bool = True,
        standby_lookup: Callable[[Any], Any] | None = None,
    ) -> None:
        self.shard_id = shard_id
        self.handle = handle
        #: the member batches go to: the primary (``handle``), or its standby while that one serves
        self.member = handle
        #: finds the primary's standby (``standby_of``), None: the shard has no standby
        self._standby_lookup = standby_lookup
        self._standby: Any = None
        #: the primary failed: the next connection asks the standby to take over first
        self._failover = False
        #: micro-batches answered by a standby, and its takeovers this channel saw
        self.standby_batches = 0
        self.takeovers = 0
        self.timeout_s = timeout_s
        self.direct = direct
        self._sock: socket.socket | None = None
        self._stream: Any = None
        self._lock = threading.Lock()  # guards _sock against close() from another thread
        #: connections opened (1 plus one per reconnect after a broken connection)
        self.connects = 0
        self._retry_direct_at = 0.0
        self._unreachable_logged = False

    def call(self, kind: str, offset: int, items: list[Any]) -> ShardAnswer:
        """Serve ``items`` of ``kind`` at ``offset`` on the shard: its answer (:data:`ShardAnswer`)."""
        try:
            return self._call_member(kind, offset, items)
        except _NotServing:  # a standby the primary took the shard back from: it served nothing
            self.close()
            self._failover = False
            self.member = self.handle
            try:
                return self._call_member(kind, offset, items)
            except _NotServing as e:
                raise Unavailable(f"shard {self.shard_id}: no member serves it ({e})") from None

    def _call_member(self, kind: str, offset: int, items: list[Any]) -> ShardAnswer:
        if self.direct and self._connected():
            answer = self._direct_call(kind, offset, items)
        else:
            if self._failover:
                self._take_over()
            answer = self._ray_serve(kind, offset, items)
        if self.member is not self.handle:
            self.standby_batches += 1
        return answer

    def _ray_serve(self, kind: str, offset: int, items: list[Any]) -> ShardAnswer:
        from quotaplane.actors import NotServingError

        payload = pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
        ref = self.member.serve_packed.remote(kind, offset, payload)
        try:
            return pickle.loads(_ray_call(ref, self.timeout_s))
        except ValueError as e:  # the shard's validation: the gateway's check missed something
            raise InvalidArgument(str(e).splitlines()[0]) from None
        except NotServingError as e:
            raise _NotServing(str(e)) from None
        except Unavailable:
            if self.member is self.handle:
                self._failover = True
            else:  # the standby failed too: back to the primary
                self.member = self.handle
            raise

    def _take_over(self) -> DirectAddress | None:
        """Ask the standby to take the shard over (see the module's docstring): its address, and it becomes
        ``member``; None (the primary lives, or there is no standby): ``member`` is the primary again."""
        self._failover = False
        self.member = self.handle
        if self._standby_lookup is None:
            return None
        if self._standby is None:
            self._standby = self._standby_lookup(self.handle)
            if self._standby is None:
                return None
        wait_s = min(TAKE_OVER_WAIT_S, self.timeout_s / 2)
        try:
            address: DirectAddress | None = _ray_call(self._standby.take_over.remote(wait_s), self.timeout_s)
        except Unavailable as e:  # the standby is down too: wait for the primary, as without one
            log.warning("shard %s: its standby could not take over: %s", self.shard_id, e)
            self._standby = None  # looked up again next time (a reshard may have made a new one)
            return None
        if address is not None:
            self.member = self._standby
            self.takeovers += 1
        return address

    def _lost_member(self) -> None:
        """The connection to ``member`` broke: after the primary, ask its standby next; after the standby, the
        primary (restarted by then, or being restarted: Ray retries the address call until it answers)."""
        self.close()
        if self.member is self.handle:
            self._failover = True
        else:
            self.member = self.handle

    def close(self) -> None:
        with self._lock:
            sock, self._sock, self._stream = self._sock, None, None
        if sock is not None:
            sock.close()

    def _connected(self) -> bool:
        """Connect (asking the shard where) unless connected; False if the shard has no direct channel."""
        if self._sock is not None:
            return True
        if time.monotonic() < self._retry_direct_at:
            return False
        address = self._take_over() if self._failover else None
        if address is None:
            try:
                # only a read, so Ray may retry it on the restarted shard: the answer comes as soon as the shard
                # serves again (the shard's other calls are never retried; without it, a call to a shard being
                # restarted fails ~2 s later with "the actor is restarting", and only the next one connects)
                ref = self.handle.direct_address.options(max_task_retries=-1).remote()
                address = _ray_call(ref, self.timeout_s)
            except AttributeError:  # a handle without the method: an older shard
                return False
        if address is None:
            return False
        host, port, token = address
        try:
            # a dropped SYN must not hold the worker for the whole call timeout
            sock = socket.create_connection((host, port), timeout=min(self.timeout_s, _CONNECT_TIMEOUT_S))
            sock.settimeout(self.timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            write_frame(sock, token)
        except OSError as e:
            (log.debug if self._unreachable_logged else log.warning)(
                "shard %s: its direct channel at %s:%s is unreachable (%s); Ray actor calls for %g s",
                self.shard_id,
                host,
                port,
                e,
                RETRY_DIRECT_S,
            )
            self._unreachable_logged = True
            self._retry_direct_at = time.monotonic() + RETRY_DIRECT_S
            return False
        with self._lock:
            self._sock, self._stream = sock, sock.makefile("rb")
        self.connects += 1
        return True

    def _direct_call(self, kind: str, offset: int, items: list[Any]) -> ShardAnswer:
        self.send(kind, offset, items)
        return self.receive()

    # --- pipelining: a second micro-batch on the wire while the shard serves the first --------------------------
    def can_pipeline(self) -> bool:
        """Whether another micro-batch may be sent before the last is answered: only over an open direct
        connection to the primary (a standby may refuse a batch unserved, the Ray path answers one at a time).
        The shard reads the connection's frames in order and serves one at a time, so the order stays."""
        return self.direct and self._sock is not None and self.member is self.handle and not self._failover

    def send(self, kind: str, offset: int, items: Any) -> None:
        """Write one micro-batch to the direct connection; its answer is the next :meth:`receive` but one per
        batch sent before it."""
        sock = self._sock
        if sock is None:
            raise Unavailable(f"shard {self.shard_id}: the gateway is closing")
        try:
            write_frame(sock, pickle.dumps((kind, offset, items), protocol=pickle.HIGHEST_PROTOCOL))
        except OSError as e:
            self._lost_member()
            raise Unavailable(f"shard {self.shard_id} is unavailable (restarting?): {e}") from None

    def receive(self) -> ShardAnswer:
        """The answer of the oldest micro-batch sent and not yet answered."""
        stream = self._stream
        if stream is None:
            raise Unavailable(f"shard {self.shard_id}: the gateway is closing")
        try:
            frame = read_frame(stream)
        except (OSError, ConnectionError, ValueError) as e:
            self._lost_member()
            raise Unavailable(f"shard {self.shard_id} is unavailable (restarting?): {e}") from None
        if frame is None:
            self._lost_member()
            raise Unavailable(f"shard {self.shard_id} closed its direct channel (restarting?)")
        outcome, value = pickle.loads(frame)
        if outcome == "ok":
            return value
        if outcome == "invalid":
            raise InvalidArgument(str(value).splitlines()[0])
        if outcome == "not_serving":
            raise _NotServing(str(value))
        raise RuntimeError(f"shard {self.shard_id}: {value}")
