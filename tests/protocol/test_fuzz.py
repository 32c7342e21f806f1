"""Fuzzing ``decode_request``: whatever the bytes, only ``ProtocolError`` (or its subclass
``UnsupportedRequestError``) escapes, and claimed lengths never drive allocation."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.protocol import ProtocolError, decode_request

from .strategies import MUTATIONS, mutate, request_frames

_SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decode_or_protocol_error(frame: bytes) -> None:
    try:
        request = decode_request(frame)
    except ProtocolError:
        return
    assert (request.header.request_api_key, request.header.request_api_version) == (
        request.api_key,
        request.api_version,
    )


@_SETTINGS
@given(st.binary(max_size=200))
def test_random_frames(frame: bytes) -> None:
    _decode_or_protocol_error(frame)


@st.composite
def _headers_then_noise(draw: st.DrawFn) -> bytes:
    """A plausible header of a supported API (so the body decoders run), then random bytes."""
    api_key, version = draw(
        st.sampled_from([(18, 0), (18, 3), (3, 0), (3, 4), (3, 9), (3, 12), (71, 0), (72, 0), (32, 0), (32, 4)])
    )
    head = struct.pack(">hhi", api_key, version, draw(st.integers(-(2**31), 2**31 - 1)))
    return head + draw(st.binary(max_size=120))


@_SETTINGS
@given(_headers_then_noise())
def test_valid_header_random_body(frame: bytes) -> None:
    _decode_or_protocol_error(frame)


@_SETTINGS
@given(request_frames(), st.lists(MUTATIONS, min_size=1, max_size=4))
def test_mutated_valid_frames(frame: bytes, mutations: list[tuple[str, int, int]]) -> None:
    _decode_or_protocol_error(mutate(frame, mutations))


@pytest.mark.parametrize(
    "frame",
    [
        # PushTelemetry v0 whose metrics claim 2**32 - 2 bytes (compact)
        bytes.fromhex("0048000000000001ffff00")
        + b"\x00" * 16
        + bytes.fromhex("000000010004")
        + b"\xff\xff\xff\xff\x0f"
        + b"x" * 8,
        # Metadata v0 claiming 2**31 - 1 topics
        bytes.fromhex("0003000000000001ffff7fffffff") + b"\x00\x01t" * 4,
        # Metadata v9 claiming 2**32 - 2 topics (compact)
        bytes.fromhex("0003000900000001ffff00ffffffff0f") + b"\x02t" * 4,
        # DescribeConfigs v0 with a resource name claiming 32767 bytes
        bytes.fromhex("0020000000000001ffff00000001027fff") + b"x" * 8,
        # ApiVersions v3 header, then a tagged-field section claiming 2**32 - 1 entries
        bytes.fromhex("0012000300000001ffffffffffff0f") + b"\x00" * 8,
        # SaslAuthenticate v0 with auth bytes claiming 2**31 - 1 bytes
        bytes.fromhex("0024000000000001ffff7fffffff") + b"x" * 8,
    ],
)
def test_claimed_huge_lengths_do_not_allocate(frame: bytes) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError):
            decode_request(frame)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
