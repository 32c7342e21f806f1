"""The primitives: varint edge cases, exact bytes, bounds checks on every decoder."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaplane.kafka_uuid import ZERO_UUID, Uuid
from quotaplane.protocol import types as t
from quotaplane.protocol.types import ProtocolError

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def encoded(encoder, value) -> bytes:
    out = bytearray()
    encoder(out, value)
    return bytes(out)


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (INT32_MAX, b"\xfe\xff\xff\xff\x0f"),
        (INT32_MIN, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_varint_edges(value: int, wire: bytes) -> None:
    """Zig-zag: 0 -> 0, -1 -> 1, 1 -> 2; the int32 extremes take the full five bytes."""
    assert encoded(t.encode_varint, value) == wire
    assert t.decode_varint(wire, 0) == (value, len(wire))


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (INT64_MAX, b"\xfe" + b"\xff" * 8 + b"\x01"),
        (INT64_MIN, b"\xff" * 9 + b"\x01"),
    ],
)
def test_varlong_edges(value: int, wire: bytes) -> None:
    assert encoded(t.encode_varlong, value) == wire
    assert t.decode_varlong(wire, 0) == (value, len(wire))


@pytest.mark.parametrize(
    ("value", "wire"),
    [(0, b"\x00"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"), (2**32 - 1, b"\xff\xff\xff\xff\x0f")],
)
def test_unsigned_varint(value: int, wire: bytes) -> None:
    assert encoded(t.encode_unsigned_varint, value) == wire
    assert t.decode_unsigned_varint(wire, 0) == (value, len(wire))


@pytest.mark.parametrize(
    ("encoder", "value"),
    [
        (t.encode_varint, INT32_MAX + 1),
        (t.encode_varint, INT32_MIN - 1),
        (t.encode_varlong, INT64_MAX + 1),
        (t.encode_unsigned_varint, -1),
        (t.encode_unsigned_varint, 2**32),
        (t.encode_int8, 128),
        (t.encode_int16, -(2**15) - 1),
        (t.encode_uint16, -1),
        (t.encode_int32, INT32_MAX + 1),
        (t.encode_int64, INT64_MIN - 1),
        (t.encode_string, None),
        (t.encode_compact_string, "x" * 0x8000),
        (t.encode_string, "\ud800"),
        (t.encode_uuid, b"short"),
    ],
)
def test_unencodable_values_raise_protocol_error(encoder, value) -> None:
    with pytest.raises(ProtocolError):
        encoder(bytearray(), value)


@pytest.mark.parametrize(
    "wire",
    [
        b"",  # nothing
        b"\x80",  # continuation, then nothing
        b"\xff\xff\xff\xff\xff\x01",  # six bytes: longer than an int32 varint may be
        b"\xff\xff\xff\xff\x1f",  # five bytes, but 33 bits
    ],
)
def test_bad_unsigned_varints(wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        t.decode_unsigned_varint(wire, 0)


@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint_round_trip(value: int) -> None:
    wire = encoded(t.encode_varint, value)
    assert t.decode_varint(wire + b"\x00", 0) == (value, len(wire))


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value: int) -> None:
    wire = encoded(t.encode_varlong, value)
    assert t.decode_varlong(wire, 0) == (value, len(wire))


def test_fixed_width_big_endian() -> None:
    assert encoded(t.encode_int16, -2) == b"\xff\xfe"
    assert encoded(t.encode_uint16, 65535) == b"\xff\xff"
    assert encoded(t.encode_int32, 1) == b"\x00\x00\x00\x01"
    assert encoded(t.encode_int64, -1) == b"\xff" * 8
    assert encoded(t.encode_float64, 1.5) == b"\x3f\xf8" + b"\x00" * 6
    assert t.decode_bool(b"\x02", 0) == (True, 1)  # any non-zero byte, as Java's readByte() != 0


def test_strings_and_bytes_exact() -> None:
    assert encoded(t.encode_string, "ab") == b"\x00\x02ab"
    assert encoded(t.encode_nullable_string, None) == b"\xff\xff"
    assert encoded(t.encode_compact_string, "ab") == b"\x03ab"
    assert encoded(t.encode_compact_string, "") == b"\x01"
    assert encoded(t.encode_compact_nullable_string, None) == b"\x00"
    assert encoded(t.encode_bytes, b"\x01") == b"\x00\x00\x00\x01\x01"
    assert encoded(t.encode_nullable_bytes, None) == b"\xff\xff\xff\xff"
    assert encoded(t.encode_compact_bytes, b"") == b"\x01"
    assert t.decode_nullable_string(b"\xff\xff", 0) == (None, 2)
    assert t.decode_compact_nullable_bytes(b"\x00", 0) == (None, 1)
    assert t.decode_compact_string(b"\x03\xc3\xa9", 0) == ("é", 3)
    # malformed UTF-8 is replaced, as Java's new String(bytes, UTF_8) does
    assert t.decode_string(b"\x00\x01\xff", 0) == ("\ufffd", 3)


@pytest.mark.parametrize(
    ("decoder", "wire"),
    [
        (t.decode_string, b"\xff\xff"),  # null where not nullable
        (t.decode_nullable_string, b"\xff\xfe"),  # -2
        (t.decode_compact_string, b"\x00"),
        (t.decode_bytes, b"\xff\xff\xff\xff"),
        (t.decode_nullable_bytes, b"\x80\x00\x00\x00"),
        (t.decode_compact_bytes, b"\x00"),
        (t.decode_compact_string, b"\x81\x80\x02"),  # 32768 bytes: above Kafka's string limit
        (t.decode_int32, b"\x00\x00\x00"),
        (t.decode_int64, b""),
        (t.decode_uuid, b"\x00" * 15),
        (t.decode_string, b"\x00\x05abc"),
        (t.decode_compact_bytes, b"\x05abc"),
    ],
)
def test_malformed_primitives(decoder, wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        decoder(wire, 0)


def test_uuid_is_quotaplanes_uuid() -> None:
    raw = bytes(range(16))
    value, pos = t.decode_uuid(raw, 0)
    assert isinstance(value, Uuid) and value == raw and pos == 16
    assert encoded(t.encode_uuid, ZERO_UUID) == b"\x00" * 16


@pytest.mark.parametrize("compact", [False, True])
def test_arrays(compact: bool) -> None:
    dec = t.array_decoder(t.decode_int32, compact=compact, nullable=True, min_element_size=4, fixed_format="i")
    enc = t.array_encoder(t.encode_int32, compact=compact, nullable=True, fixed_format="i")
    wire = encoded(enc, [1, -1])
    assert wire == (b"\x03" if compact else b"\x00\x00\x00\x02") + b"\x00\x00\x00\x01\xff\xff\xff\xff"
    assert dec(wire, 0) == ([1, -1], len(wire))
    null = encoded(enc, None)
    assert null == (b"\x00" if compact else b"\xff\xff\xff\xff")
    assert dec(null, 0) == (None, len(null))
    strings = t.array_decoder(t.decode_string, compact=False, nullable=False, min_element_size=2)
    with pytest.raises(ProtocolError):
        strings(b"\xff\xff\xff\xff", 0)  # null, not nullable


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("decoder", "wire"),
    [
        (t.decode_bytes, b"\x7f\xff\xff\xff" + b"x" * 10),
        (t.decode_compact_bytes, b"\xff\xff\xff\xff\x0f" + b"x" * 10),
        (t.decode_string, b"\x7f\xff" + b"x" * 10),
        (
            t.array_decoder(t.decode_int8, compact=False, nullable=False, min_element_size=1, fixed_format="b"),
            b"\x7f\xff\xff\xff" + b"x" * 10,
        ),
        (
            t.array_decoder(t.decode_compact_string, compact=True, nullable=False, min_element_size=1),
            b"\xff\xff\xff\xff\x0f" + b"\x01" * 10,
        ),
        (t.decode_tagged_fields, b"\xff\xff\xff\xff\x0f" + b"\x00" * 10),
    ],
)
def test_huge_claimed_lengths_do_not_allocate(decoder, wire: bytes) -> None:
    """A length of 2**31 (or 2**32 - 2 compact) is refused before anything is sliced or allocated."""
    assert _peak_bytes(lambda: decoder(wire, 0)) < 64 * 1024


def test_tagged_fields_section() -> None:
    out = bytearray()
    t.encode_tagged_fields(out, {5: b"\x01\x02", 1: b""})
    assert bytes(out) == b"\x02\x01\x00\x05\x02\x01\x02"
    fields, pos = t.decode_tagged_fields(bytes(out), 0)
    assert fields == {1: (3, 3), 5: (5, 7)} and pos == 7
    with pytest.raises(ProtocolError):
        t.decode_tagged_fields(b"\x01\x00\x05\x01", 0)  # a field of 5 bytes with 1 left
