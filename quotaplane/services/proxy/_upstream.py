"""The proxy's connections to the upstream brokers, and what it learns from them.

One client connection on a broker's proxy port is forwarded over one upstream connection to that broker
(:class:`UpstreamConnection`), opened on the client's first forwarded request and closed with it, so the
upstream sees one connection per client as it would without the proxy (its own connection quotas,
idempotent-producer and group state keyed by connection behave the same). Requests go through one at a time,
as Kafka's own network layer handles them (a channel is muted while its request is in flight), so
correlation ids and request order are preserved by construction; each answer's correlation id is checked.

:func:`discover` asks one bootstrap broker for its ApiVersions and its brokers (Metadata for no topics): what
the proxy needs to advertise its versions and to map node ids to upstream addresses before any client has
asked.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from quotaplane.errors import Errors
from quotaplane.protocol import (
    ApiKey,
    ApiVersionsRequest,
    MetadataRequest,
    ProtocolError,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    decode_response,
    encode_request,
)

__all__ = ["UpstreamClosedError", "UpstreamConnection", "UpstreamInfo", "UpstreamSasl", "discover"]

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
#: Largest upstream response accepted (a Fetch answers at most fetch.max.bytes, 50 MiB by default, plus a
#: partition's message.max.bytes): past this the upstream is misbehaving and the connection is dropped.
MAX_RESPONSE_BYTES = 512 * 1024 * 1024
_CLIENT_ID = "quotaplane-proxy"


class UpstreamClosedError(ConnectionError):
    """The upstream broker closed the connection, could not be reached, or broke the protocol."""


class UpstreamConnection:
    """One TCP connection to one upstream broker, used by one client connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str) -> None:
        self._reader = reader
        self._writer = writer
        self.where = where
        #: correlation ids of requests sent expecting no answer (Produce acks=0): a Kafka broker sends none,
        #: but some Kafka-compatible brokers (Tansu) answer anyway; such answers are dropped, not misread
        self._unanswered: collections.deque[int] = collections.deque(maxlen=1024)

    @classmethod
    async def open(
        cls, host: str, port: int, *, timeout_s: float, sasl: UpstreamSasl | None = None
    ) -> UpstreamConnection:
        """Connect, and with ``sasl`` authenticate as the proxy's own principal before anything is forwarded."""
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(host, port, limit=1024 * 1024)
        except (OSError, TimeoutError) as e:
            raise UpstreamClosedError(f"cannot connect to upstream broker {where}: {e or 'timed out'}") from None
        connection = cls(reader, writer, where)
        if sasl is not None:
            try:
                await connection.authenticate(sasl, timeout_s)
            except BaseException:
                await connection.close()
                raise
        return connection

    async def authenticate(self, sasl: UpstreamSasl, timeout_s: float) -> None:
        """SASL/PLAIN (SaslHandshake v1, SaslAuthenticate v1) as the proxy's configured user; the upstream
        sees the proxy, quotaplane enforces the clients' principals."""
        handshake = await _ask(self, ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"), timeout_s)
        if handshake.error_code:
            raise UpstreamClosedError(
                f"upstream broker {self.where} refuses SASL/PLAIN (error {handshake.error_code}; "
                f"it offers {', '.join(handshake.mechanisms) or 'no mechanism'})"
            )
        token = b"\x00" + sasl.username.encode() + b"\x00" + sasl.password.encode()
        answer = await _ask(self, ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=token), timeout_s)
        if answer.error_code:
            raise UpstreamClosedError(
                f"upstream broker {self.where} refused the proxy's credentials for {sasl.username!r}: "
                f"{answer.error_message or answer.error_code}"
            )

    async def send(self, frame: bytes | bytearray | memoryview, *, answered: bool = True) -> None:
        """Write one request frame (without its size prefix); ``answered=False``: its answer is not awaited."""
        if not answered:
            (correlation_id,) = _CORRELATION.unpack_from(frame, 4)
            self._unanswered.append(correlation_id)
        try:
            self._writer.write(_SIZE.pack(len(frame)))
            self._writer.write(frame)
            await self._writer.drain()
        except (OSError, RuntimeError) as e:
            raise UpstreamClosedError(f"upstream broker {self.where} closed the connection: {e}") from None

    async def receive(self, correlation_id: int, *, timeout_s: float) -> bytes:
        """Read the response to the request with ``correlation_id`` (without its size prefix)."""
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    frame = await self._read_frame()
                    (got,) = _CORRELATION.unpack_from(frame, 0)
                    if got == correlation_id or got not in self._unanswered:
                        break
                    self._unanswered.remove(got)
        except asyncio.IncompleteReadError:
            raise UpstreamClosedError(f"upstream broker {self.where} closed the connection") from None
        except TimeoutError:
            raise UpstreamClosedError(f"upstream broker {self.where} did not answer within {timeout_s:g} s") from None
        except OSError as e:
            raise UpstreamClosedError(f"upstream broker {self.where}: {e}") from None
        if got != correlation_id:
            raise UpstreamClosedError(
                f"upstream broker {self.where} answered correlation id {got}, expected {correlation_id}"
            )
        return frame

    async def _read_frame(self) -> bytes:
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            raise UpstreamClosedError(f"upstream broker {self.where} sent a response of {size} bytes")
        return await self._reader.readexactly(size)

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.wait_closed(), 1.0)


@dataclass(frozen=True)
class UpstreamSasl:
    """The proxy's own SASL/PLAIN credentials for the upstream (the clients' never leave the proxy)."""

    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.username or "\x00" in self.username or "\x00" in self.password:
            raise ValueError("the upstream SASL user must be non-empty, and neither it nor its password a NUL")

    @classmethod
    def from_file(cls, username: str, password_file: str) -> UpstreamSasl:
        """The password is the first line of ``password_file`` (a file, so it is not in the process list)."""
        try:
            with open(password_file, encoding="utf-8") as f:
                password = f.readline().rstrip("\r\n")
        except OSError as e:
            raise ValueError(f"cannot read the upstream SASL password file {password_file}: {e.strerror}") from None
        return cls(username, password)


@dataclass(frozen=True)
class UpstreamInfo:
    """What one bootstrap broker said: its API versions and the cluster's brokers."""

    versions: dict[int, tuple[int, int]]
    brokers: list[tuple[int, str, int]]
    cluster_id: str | None


async def _ask(connection: UpstreamConnection, api_key: int, version: int, body: object, timeout_s: float) -> object:
    correlation_id = 1 + api_key
    frame = encode_request(api_key, version, correlation_id, body, client_id=_CLIENT_ID)
    await connection.send(memoryview(frame)[4:])
    answer = await connection.receive(correlation_id, timeout_s=timeout_s)
    try:
        return decode_response(api_key, version, answer).body
    except ProtocolError as e:
        raise UpstreamClosedError(f"upstream broker {connection.where}: malformed response: {e}") from None


async def discover(
    bootstrap: Sequence[tuple[str, int]], *, timeout_s: float = 10.0, sasl: UpstreamSasl | None = None
) -> UpstreamInfo:
    """ApiVersions and Metadata from the first bootstrap broker that answers; :class:`UpstreamClosedError`
    naming every address tried when none does."""
    failures = []
    for host, port in bootstrap:
        try:
            connection = await UpstreamConnection.open(host, port, timeout_s=timeout_s, sasl=sasl)
        except UpstreamClosedError as e:
            failures.append(str(e))
            continue
        try:
            answer = await _ask(connection, ApiKey.API_VERSIONS, 3, ApiVersionsRequest(_CLIENT_ID, "1"), timeout_s)
            if answer.error_code == Errors.UNSUPPORTED_VERSION:  # a broker older than ApiVersions v3
                answer = await _ask(connection, ApiKey.API_VERSIONS, 0, ApiVersionsRequest(), timeout_s)
            if answer.error_code:
                raise UpstreamClosedError(f"upstream broker {connection.where}: ApiVersions error {answer.error_code}")
            versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
            lo, hi = versions.get(ApiKey.METADATA, (0, -1))
            version = min(hi, 12)
            if version < max(lo, 1):
                raise UpstreamClosedError(f"upstream broker {connection.where} offers no Metadata version 1..12")
            metadata = await _ask(connection, ApiKey.METADATA, version, MetadataRequest(topics=[]), timeout_s)
            brokers = [(b.node_id, b.host, b.port) for b in metadata.brokers]
            return UpstreamInfo(versions, brokers, metadata.cluster_id)
        except UpstreamClosedError as e:
            failures.append(str(e))
        finally:
            await connection.close()
    raise UpstreamClosedError("no upstream bootstrap broker answered: " + "; ".join(failures))
