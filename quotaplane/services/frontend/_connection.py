"""One Kafka connection: admission, framing, SASL, dispatch, throttling, limits, clean-up.

The life of a socket, as Kafka's ``SocketServer`` / ``Processor`` / ``KafkaChannel`` lead it:

1. **Admission** (Kafka's ``Acceptor`` and ``ConnectionQuotas``): before a byte is read, the gateway's
   ConnectionService is asked (batched with every other socket accepted in the same millisecond).
   ADMIT: serve it. THROTTLE: wait the delay (or, with 0, poll for a free slot) without reading, then
   ask again with the attempt id; a waiter older than ``max_admission_wait_s`` is abandoned and closed.
   REJECT: close (a socket refused for its IP's creation rate is held ``throttle_ms`` first, as Kafka
   holds it, so the client does not reconnect at once). A counted connection is released on close.
   A gateway that cannot be asked: refused, except by a proxy that fails open (the default), which serves the
   connection uncounted and unmetered.
2. **Frames**: an int32 size, then that many bytes. A negative size or one above
   ``max_request_bytes`` (Kafka's ``socket.request.max.bytes``) closes the connection before anything
   is allocated for it, as Kafka's ``InvalidReceiveException`` does. A read (the size or the body) that
   waits ``connections_max_idle_s`` (``connections.max.idle.ms``) ends the connection (``_idle.py``: one
   timer per connection, not per read). PushTelemetry v0, nearly every frame of a busy frontend, is read
   and answered by ``_fast_codec.py`` (the generic codec's result exactly, or the generic codec itself).
3. **One request at a time**: Kafka mutes a channel while its request is being handled, so a
   pipelining client (librdkafka sends several) is answered in order; here the loop simply does not
   read the next frame before the response is written.
4. **Errors as Kafka answers them**: an ApiVersions at an unsupported version gets a v0 response with
   UNSUPPORTED_VERSION and the supported range of ApiVersions (the client retries at v0); an unknown
   API key, another API at an unsupported version, or a malformed frame close the connection. The
   first such problem of a connection is logged (one line, with the peer); since it also ends the
   connection, a misbehaving client cannot flood the log. Nothing escapes: an unexpected exception is
   logged with its traceback, counted (``stats.unexpected_errors``), and closes that connection only.
5. **Throttling** (Kafka's request quota, KIP-219): after a request is handled, the time this process
   spent on it (decoding, handling and encoding; not the wait for the gateway) is recorded through the
   gateway's ``RecordRequestTime`` for the connection's (user, client id); the answer goes into the
   response's ``throttle_time_ms`` and the connection is muted (no reads) until it has passed.
6. **Close**: the ConnectionService count is released and the gateway told which client instances were
   seen on the connection (``ClientDisconnected``: Kafka's disconnect listener evicts them at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from typing import TYPE_CHECKING, Any

from quotaplane.errors import Errors
from quotaplane.protocol import (
    ApiKey,
    ApiVersionsResponse,
    ProtocolError,
    UnsupportedRequestError,
    decode_request,
    encode_response,
)
from quotaplane.protocol.frames import peek_request
from quotaplane.services._security import subject_dn
from quotaplane.v1 import connection_pb2 as conn_pb
from quotaplane.v1 import telemetry_pb2 as tele_pb

from ._fast_codec import PUSH_TELEMETRY_V0, decode_push_telemetry, encode_push_telemetry_response
from ._forward import UpstreamError, answer_proxied, write_framed
from ._handlers import ADMIN_APIS
from ._idle import ReadDeadline
from ._no_upstream import NO_UPSTREAM, fetch_answer, produce_answer
from ._quotas import enabled, request_throttle
from ._sasl import authenticate_token, sasl_authenticate, sasl_handshake
from ._state import ANONYMOUS, CloseConnection, ConnectionState

if TYPE_CHECKING:
    from .server import FrontendServer

__all__ = ["ANONYMOUS", "CloseConnection", "ConnectionState", "serve_connection"]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
#: Kafka's ``connection.failed.authentication.delay.ms`` default: how long a connection whose authentication
#: failed stays open after the error is written (it also slows a password guesser down)
FAILED_AUTHENTICATION_DELAY_S = 0.1
_ADMIT, _THROTTLE, _REJECT = conn_pb.AdmitResult.ADMIT, conn_pb.AdmitResult.THROTTLE, conn_pb.AdmitResult.REJECT
#: How often a connection waiting for a free slot (THROTTLE with 0 ms) asks again.
_SLOT_POLL_S = 0.1


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


# --- admission -------------------------------------------------------------------------------------------
async def _admit(server: FrontendServer, ip: str) -> tuple[bool, bool]:
    """Ask the ConnectionService until it decides; ``(accepted, counted)``."""
    config = server.config
    backend = server.backend
    started = time.monotonic()
    item = conn_pb.AdmitItem(node_id=config.node_id, listener=config.listener_name, ip=ip, now_ms=_wall_ms())
    while True:
        result = await backend.admit_batcher.submit(item)
        if result.decision == _ADMIT:
            return True, True
        if result.decision == _REJECT:
            server.stats.connections_rejected += 1
            if not result.counted and result.throttle_ms > 0:
                await asyncio.sleep(result.throttle_ms / 1000)
            log.debug("connection from %s refused by %s", ip, result.limit)
            return False, result.counted
        if result.decision != _THROTTLE:
            raise RuntimeError(f"unknown admission decision {result.decision}")
        server.stats.connections_throttled += 1
        if time.monotonic() - started > config.max_admission_wait_s:
            with contextlib.suppress(Exception):
                await backend.release_batcher.submit(
                    conn_pb.ReleaseItem(node_id=config.node_id, attempt_id=result.attempt_id, now_ms=_wall_ms())
                )
            return False, False
        left_s = config.max_admission_wait_s - (time.monotonic() - started)
        # never past the admission limit: a long throttle is cut short, then abandoned on the next round
        await asyncio.sleep(
            max(0.0, min(left_s, result.throttle_ms / 1000 if result.throttle_ms > 0 else _SLOT_POLL_S))
        )
        item = conn_pb.AdmitItem(
            node_id=config.node_id,
            listener=config.listener_name,
            ip=ip,
            attempt_id=result.attempt_id,
            now_ms=_wall_ms(),
        )


def _admit_without_gateway(server: FrontendServer) -> bool:
    """A frontend without an upstream refuses connections it cannot admit (its budget is the gateway's and it
    serves nothing else); a proxy fails open, keeping the tenants' traffic flowing, unless told to fail closed."""
    proxy = server.proxy
    return proxy is not None and not proxy.config.fail_closed


def _certificate_principal(server: FrontendServer, writer: asyncio.StreamWriter) -> str:
    """An SSL listener's principal with client authentication (Kafka's ``DefaultKafkaPrincipalBuilder``): the
    verified client certificate's subject DN through ``ssl.principal.mapping.rules``. A subject no rule maps
    fails the connection, as Kafka fails its authentication."""
    ssl_object = writer.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:  # the handshake required one: cannot happen with CERT_REQUIRED
        raise CloseConnection("no client certificate on a listener requiring one")
    try:
        return server.config.principal_mapper.principal(subject_dn(der))
    except ValueError as e:
        raise CloseConnection(f"client certificate not authenticated: {e}") from None


def _peer_ip(peer: Any) -> tuple[str, int]:
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = str(peer[0]).split("%", 1)[0]
        if host.startswith("::ffff:") and "." in host:
            host = host[len("::ffff:") :]
        return host, int(peer[1])
    return "0.0.0.0", 0


# --- the connection ----------------------------------------------------------------------------------------
async def serve_connection(
    server: FrontendServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, node: int | None = None
) -> None:
    """Serve one accepted socket to its end; never raises (see the module docstring). ``node``: in proxy mode,
    the upstream broker whose proxy port accepted it (None: the bootstrap port)."""
    ip, port = _peer_ip(writer.get_extra_info("peername"))
    stats = server.stats
    counted = False
    state: ConnectionState | None = None
    try:
        try:
            accepted, counted = await _admit(server, ip)
        except Exception as e:
            server.note_backend_error("ConnectionService.Admit", e)
            if not _admit_without_gateway(server):
                stats.connections_rejected += 1
                return
            stats.gateway_fail_open += 1  # a proxy failing open forwards unmetered, uncounted connections
            accepted, counted = True, False
        if not accepted:
            return
        stats.connections_accepted += 1
        stats.connections_open += 1
        state = ConnectionState(server.next_connection_id(), ip, port, sasl=server.config.sasl_enabled)
        state.upstream_node = node
        if server.config.ssl_client_auth and not server.config.sasl_enabled:
            state.principal = _certificate_principal(server, writer)
        try:
            await _loop(server, state, reader, writer)
        finally:
            stats.connections_open -= 1
            server.scram_exchanges.pop(state.connection_id, None)
            if state.upstream is not None:
                await state.upstream.close()
    except CloseConnection as e:
        if e.reason:
            stats.protocol_errors += 1
            log.warning("closing Kafka connection from %s:%d: %s", ip, port, e.reason)
    except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
        pass
    except asyncio.CancelledError:
        raise
    except Exception:
        stats.unexpected_errors += 1
        log.exception("Kafka connection from %s:%d failed", ip, port)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1.0)
        await _cleanup(server, state, ip, counted)


async def _cleanup(server: FrontendServer, state: ConnectionState | None, ip: str, counted: bool) -> None:
    backend = server.backend
    config = server.config
    waits = []
    now_ms = _wall_ms()
    if counted:
        waits.append(
            backend.release_batcher.submit(
                conn_pb.ReleaseItem(node_id=config.node_id, listener=config.listener_name, ip=ip, now_ms=now_ms)
            )
        )
    if state is not None:
        for raw in state.instances:
            waits.append(
                backend.disconnect_batcher.submit(
                    tele_pb.ClientDisconnected(connection_id=state.connection_id, client_instance_id=raw, now_ms=now_ms)
                )
            )
    for result in await asyncio.gather(*waits, return_exceptions=True):
        if isinstance(result, Exception):
            server.note_backend_error("release / ClientDisconnected", result)


async def _read_frame(server: FrontendServer, reader: asyncio.StreamReader, deadline: ReadDeadline) -> bytes:
    """The next frame; its size and its body may each wait ``connections_max_idle_s`` (then TimeoutError)."""
    try:
        deadline.start()
        head = await reader.readexactly(4)
        (size,) = _SIZE.unpack(head)
        if size < 0 or size > server.config.request_limit:
            raise CloseConnection(
                f"request size {size} is outside 0..{server.config.request_limit} (socket.request.max.bytes)"
            )
        deadline.start()
        return await reader.readexactly(size)
    except asyncio.CancelledError:
        if deadline.expired():
            raise TimeoutError from None
        raise
    finally:
        deadline.stop()


async def _loop(
    server: FrontendServer, state: ConnectionState, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    deadline = ReadDeadline(server.config.connections_max_idle_s)
    try:
        await _serve_frames(server, state, reader, writer, deadline)
    finally:
        deadline.close()


async def _serve_frames(
    server: FrontendServer,
    state: ConnectionState,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    deadline: ReadDeadline,
) -> None:
    stats = server.stats
    while True:
        frame = await _read_frame(server, reader, deadline)
        now_ms = _wall_ms()
        start_ns = time.perf_counter_ns()
        state.waited_ns = 0
        if state.raw_sasl:  # SaslHandshake v0: bare tokens, each answered by a bare frame (PLAIN's is empty)
            answer = authenticate_token(server, state, frame)
            writer.write(_SIZE.pack(len(answer)) + answer)
            await writer.drain()
            continue
        if server.proxy is not None:
            try:
                if await answer_proxied(server, state, frame, writer, now_ms, start_ns):
                    continue
            except ProtocolError as e:
                raise CloseConnection(f"malformed request: {e}") from None
            except UpstreamError as e:
                server.stats.upstream_errors += 1
                raise CloseConnection(str(e)) from None
        if frame[:2] == _FETCH_KEY:  # no upstream: no schema for Fetch, answered from its header
            api_version, correlation_id = peek_request(frame)[1:]
            answer = fetch_answer(api_version, correlation_id)
            if answer is None:
                raise CloseConnection(f"Fetch v{api_version}: {NO_UPSTREAM}")
            write_framed(writer, answer)
            await writer.drain()
            continue
        # a plain PushTelemetry v0 (nearly every frame of a busy frontend) is read without the generic codec
        request = decode_push_telemetry(frame) if frame[:4] == PUSH_TELEMETRY_V0 else None
        try:
            if request is None:
                request = decode_request(frame)
        except UnsupportedRequestError as e:
            if e.api_key == ApiKey.API_VERSIONS:
                body = ApiVersionsResponse(
                    error_code=Errors.UNSUPPORTED_VERSION,
                    api_keys=[
                        ApiVersionsResponse.ApiVersion(ApiKey.API_VERSIONS, *server.versions[ApiKey.API_VERSIONS])
                    ],
                )
                stats.count(ApiKey.API_VERSIONS, Errors.UNSUPPORTED_VERSION)
                writer.write(encode_response(ApiKey.API_VERSIONS, 0, e.correlation_id, body))
                await writer.drain()
                continue
            raise CloseConnection(str(e)) from None
        except ProtocolError as e:
            raise CloseConnection(f"malformed request: {e}") from None
        header = request.header
        if header.client_id is not None:
            state.client_id = header.client_id
        body = await _handle(server, state, request, now_ms)
        error = getattr(body, "error_code", 0)
        stats.count(request.api_key, error)
        throttle_ms = 0
        if (
            state.authenticated
            and request.api_key not in _SASL_APIS
            and server.config.request_quotas
            and enabled(server, "request")  # no request quota anywhere: nothing is recorded (Kafka's quotasEnabled)
        ):
            handled_ns = max(0, time.perf_counter_ns() - start_ns - state.waited_ns)
            throttle_ms = await request_throttle(server, state, handled_ns, now_ms)
        if throttle_ms and hasattr(body, "throttle_time_ms"):
            body.throttle_time_ms = min(throttle_ms, 2**31 - 1)
        try:
            if request.api_key == ApiKey.PUSH_TELEMETRY and request.api_version == 0:
                wire = encode_push_telemetry_response(header.correlation_id, body)
            else:
                wire = encode_response(request.api_key, request.api_version, header.correlation_id, body)
        except (ProtocolError, TypeError) as e:
            raise CloseConnection(f"cannot encode the {request.api_key} v{request.api_version} response: {e}") from None
        writer.write(wire)
        if writer.transport.get_write_buffer_size():  # an empty buffer has nothing to wait for (and the next read
            await writer.drain()  # meets a closed connection as drain would)
        if request.api_key == ApiKey.SASL_AUTHENTICATE and body.error_code:
            # Kafka closes after a failed authentication, connection.failed.authentication.delay.ms later: the
            # client reads the error before the close (closed at once, kafka-python saw a disconnect instead)
            await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
            raise CloseConnection()
        if throttle_ms > 0:  # Kafka mutes the channel until the throttle has passed
            stats.throttled_responses += 1
            await asyncio.sleep(throttle_ms / 1000)


_SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_FETCH_KEY = ApiKey.FETCH.to_bytes(2, "big")


async def _handle(server: FrontendServer, state: ConnectionState, request: Any, now_ms: int) -> Any:
    key = request.api_key
    apis = server.apis
    if not state.authenticated and key not in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
        raise CloseConnection(f"unexpected Kafka request of type {key} during SASL handshake")
    if key == ApiKey.API_VERSIONS:
        return apis.api_versions(state, request)
    if key == ApiKey.METADATA:
        return apis.metadata(state, request)
    if key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS:
        return await apis.get_telemetry_subscriptions(state, request, now_ms)
    if key == ApiKey.PUSH_TELEMETRY:
        return await apis.push_telemetry(state, request, now_ms)
    if key == ApiKey.SASL_HANDSHAKE:
        return sasl_handshake(server, state, request)
    if key == ApiKey.SASL_AUTHENTICATE:
        return sasl_authenticate(server, state, request)
    if key in ADMIN_APIS:
        server.stats.admin_requests += 1
    if key == ApiKey.ALTER_CLIENT_QUOTAS:
        return await apis.alter_client_quotas(state, request, now_ms)
    if key == ApiKey.DESCRIBE_CLIENT_QUOTAS:
        return await apis.describe_client_quotas(state, request, now_ms)
    if key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
        return await apis.incremental_alter_configs(state, request, now_ms)
    if key == ApiKey.DESCRIBE_CONFIGS:
        return await apis.describe_configs(state, request, now_ms)
    if key == ApiKey.LIST_CLIENT_METRICS_RESOURCES:
        return await apis.list_client_metrics_resources(state, request, now_ms)
    if key == ApiKey.PRODUCE:
        answer = produce_answer(request)
        if answer is None:
            raise CloseConnection(f"Produce with acks=0: {NO_UPSTREAM}")
        return answer
    raise CloseConnection(f"no handler for API key {key}")  # the codec knows it, the server does not
