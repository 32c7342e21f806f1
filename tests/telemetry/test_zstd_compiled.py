"""The compiled one-call zstd decode (``_zstd_compiled``) against the streaming decoder it stands in front of.

Every input gets the same answer both ways: the same bytes, or the same error and message. The compiled path
answers only a frame it can decode whole within the limit; the rest must reach the streaming decoder.
"""

from __future__ import annotations

import random

import pytest
import zstandard
from hypothesis import example, given, settings
from hypothesis import strategies as st
from quotaplane.telemetry._zstd_compiled import OUTPUT_CAPACITY, ZSTD_VERSION, decompress_frame

from quotaplane.telemetry import _codecs
from quotaplane.telemetry._codecs import CompressionType, compress, decompress

from .test_codecs import OTLP, SKIPPABLE_FRAME, ZSTD_CLIENT_FRAMES, zstd_frame, zstd_raw_block, zstd_rle_block

ZSTD = CompressionType.ZSTD


def outcome(data: bytes, limit: int, *, compiled: bool) -> tuple[str, object]:
    """What ``decompress`` answers, with the compiled path in front of the streaming one or without it."""
    saved = _codecs._zstd_compiled
    _codecs._zstd_compiled = saved if compiled else None
    try:
        return "ok", decompress(ZSTD, data, limit)
    except Exception as exc:  # the error's kind and words are the answer too
        return type(exc).__name__, str(exc)
    finally:
        _codecs._zstd_compiled = saved


def test_the_codecs_use_the_compiled_path_where_it_was_built():
    assert _codecs._zstd_compiled is not None


def test_the_compiled_path_runs_the_streaming_decoders_zstd():
    """python-zstandard's own libzstd, not the system's (which judged some corrupt frames differently)."""
    assert ".".join(map(str, zstandard.ZSTD_VERSION)) == ZSTD_VERSION


@pytest.mark.parametrize("name", sorted(ZSTD_CLIENT_FRAMES))
def test_a_clients_frame_is_decoded_in_one_call(name):
    frame = ZSTD_CLIENT_FRAMES[name][0](OTLP)
    assert decompress_frame(frame, 1 << 20) == OTLP
    assert decompress(ZSTD, frame, 1 << 20) == OTLP


def test_the_limit_is_the_limit():
    frame = compress(ZSTD, OTLP)
    assert decompress_frame(frame, len(OTLP)) == OTLP
    assert decompress_frame(frame, len(OTLP) - 1) is None  # the streaming path says how much too large
    assert outcome(frame, len(OTLP) - 1, compiled=True) == outcome(frame, len(OTLP) - 1, compiled=False)
    assert outcome(frame, len(OTLP) - 1, compiled=True)[0] == "TelemetryTooLargeError"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(compress(ZSTD, OTLP)[:-1], id="truncated"),
        pytest.param(compress(ZSTD, OTLP) + b"x", id="a-byte-after"),
        pytest.param(compress(ZSTD, OTLP) * 2, id="two-frames"),
        pytest.param(compress(ZSTD, OTLP) + SKIPPABLE_FRAME, id="skippable-after"),
        pytest.param(SKIPPABLE_FRAME, id="skippable-alone"),
        pytest.param(b"", id="empty"),
        pytest.param(b"\x28\xb5\x2f", id="three-magic-bytes"),
        pytest.param(zstandard.ZstdCompressor(write_checksum=True).compress(OTLP)[:-1] + b"\x00", id="bad-checksum"),
        pytest.param(
            zstd_frame(zstd_rle_block(OUTPUT_CAPACITY) + zstd_raw_block(b"!", last=True)), id="past-the-capacity"
        ),
    ],
)
def test_what_the_compiled_path_does_not_answer_goes_to_the_streaming_decoder(data):
    assert decompress_frame(data, 1 << 30) is None
    assert outcome(data, 1 << 30, compiled=True) == outcome(data, 1 << 30, compiled=False)


def test_a_frame_of_exactly_the_capacity_is_decoded_here():
    frame = zstd_frame(zstd_rle_block(OUTPUT_CAPACITY - 1, b"a") + zstd_raw_block(b"b", last=True))
    assert decompress_frame(frame, 1 << 30) == b"a" * (OUTPUT_CAPACITY - 1) + b"b"


def _mutated(draw: st.DrawFn) -> bytes:
    payload = draw(st.binary(max_size=3000)) * draw(st.integers(1, 40))
    level = draw(st.sampled_from([1, 3, 19]))
    frame = zstandard.ZstdCompressor(
        level=level, write_checksum=draw(st.booleans()), write_content_size=draw(st.booleans())
    ).compress(payload)
    action = draw(st.sampled_from(["none", "truncate", "flip", "append", "prefix"]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    if action == "truncate" and frame:
        frame = frame[: rng.randrange(len(frame))]
    elif action == "flip" and frame:
        at = rng.randrange(len(frame))
        frame = frame[:at] + bytes([frame[at] ^ (1 << rng.randrange(8))]) + frame[at + 1 :]
    elif action == "append":
        frame += draw(st.binary(min_size=1, max_size=20))
    elif action == "prefix":
        frame = draw(st.binary(min_size=1, max_size=8)) + frame
    return frame


#: A corrupt compressed block that libzstd 1.5.4's streaming decoder decodes and 1.5.7's refuses: why the compiled
#: path runs python-zstandard's own zstd rather than the system's.
VERSION_SENSITIVE = b"(\xb5/\xfd\x00\x00u\x00\x008\x00\x00\x00\x00\x00\x01\x01\x01\x00#\xa4\x18\x01"


@settings(max_examples=400, deadline=None)
@given(data=st.composite(_mutated)(), limit=st.integers(0, 200_000))
@example(data=VERSION_SENSITIVE, limit=23)
def test_both_paths_answer_every_frame_alike(data, limit):
    assert outcome(data, limit, compiled=True) == outcome(data, limit, compiled=False)
