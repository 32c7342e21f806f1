"""Hypothesis against the live server: random and mutated frames over real sockets.

The frontend under test has an empty operator list, so whatever a random frame decodes to, the admin
APIs refuse it (CLUSTER_AUTHORIZATION_FAILED) and the shared cluster's config is never changed; every
other handler (telemetry through the gateway included) runs for real. After each example the socket is
half-closed, and the server must either answer or close; at the end no connection handler may have
raised out (``stats.unexpected_errors``), and a valid request on a fresh connection still works.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.protocol import ApiVersionsRequest, MetadataRequest
from quotaplane.services.frontend.server import FrontendServer, serve_frontend
from tests.protocol.strategies import MUTATIONS, mutate, request_frames

from .conftest import Running, WireClient

_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def fuzzed(running: Running) -> Iterator[FrontendServer]:
    server = serve_frontend(
        running.cluster.gateway_address, running.cluster.admin_address, port=0, node_id=11, operators=[]
    )
    try:
        yield server
    finally:
        server.close()


def _exchange(port: int, data: bytes) -> None:
    """Send ``data``, half-close, read until the server closes (or 5 s pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            pass


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@_SETTINGS
@given(
    st.one_of(
        st.binary(max_size=300).map(_framed),  # random frames, correctly sized
        st.binary(max_size=64),  # random bytes, no framing at all
        request_frames().map(_framed),  # valid requests of any API and version
        st.tuples(request_frames(), st.lists(MUTATIONS, min_size=1, max_size=4)).map(lambda fm: _framed(mutate(*fm))),
    ),
)
def test_random_and_mutated_frames_never_escape_the_connection_handler(fuzzed: FrontendServer, data: bytes) -> None:
    _exchange(fuzzed.port, data)
    assert fuzzed.stats.unexpected_errors == 0


def test_the_server_still_serves_after_the_fuzz(fuzzed: FrontendServer) -> None:
    client = WireClient(fuzzed.port)
    try:
        assert client.call(18, 3, ApiVersionsRequest("qp-after-fuzz", "1.0")).error_code == 0
        assert client.call(3, 12, MetadataRequest(topics=None)).brokers[0].node_id == 11
    finally:
        client.close()
    assert fuzzed.stats.unexpected_errors == 0
    assert fuzzed.stats.connections_accepted > 100
