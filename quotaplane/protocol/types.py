"""Primitive types of the Kafka wire protocol, as decoder and encoder functions.

Every decoder has the signature ``decode(buf, pos) -> (value, new_pos)`` and every encoder
``encode(out: bytearray, value) -> None``. Passing the position around instead of keeping a reader
object makes a field one function call, which is what the precompiled message plans of
``schema.py`` are built from.

Decoding is bounds-checked: truncated or malformed input raises ``ProtocolError`` and nothing
else (no ``IndexError``, ``struct.error`` or ``UnicodeDecodeError``). A claimed length is checked
against the bytes that remain *before* anything is sliced or allocated, so a frame claiming a
2 GiB string or a 2**31-element array costs nothing. Array decoders are given the minimum
encoded size of one element for the same reason: ``count * min_size`` must fit in what remains.

Strings are decoded as Java's ``new String(bytes, UTF_8)`` does: malformed UTF-8 becomes U+FFFD
instead of failing the request, as a Kafka broker would accept it. Encoding a string that is not
valid Unicode (lone surrogates) raises ``ProtocolError``.

>>> out = bytearray()
>>> encode_unsigned_varint(out, 300); bytes(out)
b'\\xac\\x02'
>>> decode_unsigned_varint(b"\\xac\\x02", 0)
(300, 2)
>>> encode_compact_nullable_string(out, None); out[-1]
0
>>> decode_varint(b"\\x01", 0)
(-1, 1)
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from quotaplane.kafka_uuid import Uuid

__all__ = [
    "FIXED_FORMATS",
    "FIXED_SIZES",
    "Decoder",
    "Encoder",
    "ProtocolError",
    "array_decoder",
    "array_encoder",
    "decode_bool",
    "decode_bytes",
    "decode_compact_bytes",
    "decode_compact_nullable_bytes",
    "decode_compact_nullable_string",
    "decode_compact_string",
    "decode_float64",
    "decode_int8",
    "decode_int16",
    "decode_int32",
    "decode_int64",
    "decode_nullable_bytes",
    "decode_nullable_string",
    "decode_string",
    "decode_tagged_fields",
    "decode_uint16",
    "decode_unsigned_varint",
    "decode_uuid",
    "decode_varint",
    "decode_varlong",
    "encode_bool",
    "encode_bytes",
    "encode_compact_bytes",
    "encode_compact_nullable_bytes",
    "encode_compact_nullable_string",
    "encode_compact_string",
    "encode_float64",
    "encode_int8",
    "encode_int16",
    "encode_int32",
    "encode_int64",
    "encode_nullable_bytes",
    "encode_nullable_string",
    "encode_string",
    "encode_tagged_fields",
    "encode_uint16",
    "encode_unsigned_varint",
    "encode_unsigned_varlong",
    "encode_uuid",
    "encode_varint",
    "encode_varlong",
]

Buffer = bytes | bytearray | memoryview
Decoder = Callable[[Buffer, int], tuple[Any, int]]
Encoder = Callable[[bytearray, Any], None]

#: Kafka limits every string (compact or not) to a signed 16-bit byte length.
MAX_STRING_BYTES = 0x7FFF
_INT32_MAX = 0x7FFF_FFFF


class ProtocolError(ValueError):
    """The bytes are not a valid encoding (truncated, bad length, bad varint), or a value cannot be
    encoded (out of range, null where the version does not allow it).

    The only exception the codec lets escape on bad input: a server can catch it and close the
    connection, as Kafka does with a request it cannot parse.
    """


def _truncated(what: str, pos: int, need: int, buf: Buffer) -> ProtocolError:
    return ProtocolError(f"truncated {what} at offset {pos}: need {need} bytes, {max(len(buf) - pos, 0)} remain")


# ---------------------------------------------------------------------------------------------
# Fixed-width numbers. struct raises struct.error on a short buffer; the try costs nothing on
# the success path (CPython 3.11+ zero-cost exceptions), so it is cheaper than checking first.

#: struct format characters of the fixed-width types. ``?`` reads any non-zero byte as true, as
#: Java's ``readByte() != 0`` does, so bools join merged fixed-width runs too.
FIXED_FORMATS = {"int8": "b", "int16": "h", "uint16": "H", "int32": "i", "int64": "q", "float64": "d", "bool": "?"}
FIXED_SIZES = {name: struct.calcsize(">" + fmt) for name, fmt in FIXED_FORMATS.items()}


def _fixed(type_name: str) -> tuple[Decoder, Encoder]:
    packer = struct.Struct(">" + FIXED_FORMATS[type_name])
    unpack_from = packer.unpack_from
    pack = packer.pack
    size = packer.size

    def decode(buf: Buffer, pos: int) -> tuple[Any, int]:
        try:
            return unpack_from(buf, pos)[0], pos + size
        except struct.error:
            raise _truncated(type_name, pos, size, buf) from None

    def encode(out: bytearray, value: Any) -> None:
        try:
            out += pack(value)
        except struct.error as e:
            raise ProtocolError(f"cannot encode {value!r} as {type_name}: {e}") from None

    decode.__name__ = f"decode_{type_name}"
    encode.__name__ = f"encode_{type_name}"
    return decode, encode


decode_int8, encode_int8 = _fixed("int8")
decode_int16, encode_int16 = _fixed("int16")
decode_uint16, encode_uint16 = _fixed("uint16")
decode_int32, encode_int32 = _fixed("int32")
decode_int64, encode_int64 = _fixed("int64")
decode_float64, encode_float64 = _fixed("float64")
decode_bool, encode_bool = _fixed("bool")

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


# ---------------------------------------------------------------------------------------------
# Varints (protobuf's base-128, little-endian groups of 7 bits).


def _decode_unsigned(buf: Buffer, pos: int, max_bytes: int, bits: int) -> tuple[int, int]:
    value = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise _truncated("varint", pos, i + 1, buf)
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            if value >> bits:
                raise ProtocolError(f"varint at offset {pos} does not fit in {bits} bits")
            return value, pos + i + 1
        shift += 7
    raise ProtocolError(f"varint at offset {pos} is longer than {max_bytes} bytes")


def decode_unsigned_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned 32-bit varint (at most 5 bytes), as Kafka's ``readUnsignedVarint``."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:  # the common case: a length or count below 128
            return b, pos + 1
    return _decode_unsigned(buf, pos, 5, 32)


def decode_unsigned_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """An unsigned 64-bit varint (at most 10 bytes)."""
    return _decode_unsigned(buf, pos, 10, 64)


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zig-zag signed 32-bit varint (record fields use these)."""
    u, pos = _decode_unsigned(buf, pos, 5, 32)
    return (u >> 1) ^ -(u & 1), pos


def decode_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zig-zag signed 64-bit varint."""
    u, pos = _decode_unsigned(buf, pos, 10, 64)
    return (u >> 1) ^ -(u & 1), pos


def _encode_unsigned(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode_unsigned_varint(out: bytearray, value: int) -> None:
    if value < 0x80:
        if value < 0:
            raise ProtocolError(f"cannot encode {value} as an unsigned varint")
        out.append(value)
        return
    if value >> 32:
        raise ProtocolError(f"cannot encode {value} as an unsigned varint")
    _encode_unsigned(out, value)


def encode_unsigned_varlong(out: bytearray, value: int) -> None:
    if value < 0 or value >> 64:
        raise ProtocolError(f"cannot encode {value} as an unsigned varlong")
    _encode_unsigned(out, value)


def encode_varint(out: bytearray, value: int) -> None:
    if not -0x8000_0000 <= value <= _INT32_MAX:
        raise ProtocolError(f"cannot encode {value} as a varint")
    _encode_unsigned(out, ((value << 1) ^ (value >> 31)) & 0xFFFF_FFFF)


def encode_varlong(out: bytearray, value: int) -> None:
    if not -0x8000_0000_0000_0000 <= value <= 0x7FFF_FFFF_FFFF_FFFF:
        raise ProtocolError(f"cannot encode {value} as a varlong")
    _encode_unsigned(out, ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF)


# ---------------------------------------------------------------------------------------------
# Uuid


def decode_uuid(buf: Buffer, pos: int) -> tuple[Uuid, int]:
    end = pos + 16
    if end > len(buf):
        raise _truncated("uuid", pos, 16, buf)
    return Uuid(bytes(buf[pos:end])), end


def encode_uuid(out: bytearray, value: bytes) -> None:
    if len(value) != 16:
        raise ProtocolError(f"a uuid is 16 bytes, got {len(value)}")
    out += value


# ---------------------------------------------------------------------------------------------
# Strings and bytes. Classic encodings carry an int16 (strings) or int32 (bytes) length, -1 for
# null; compact ones an unsigned varint of length + 1, 0 for null.


def _text(buf: Buffer, start: int, end: int) -> str:
    return str(buf[start:end], "utf-8", "replace")


def _utf8(value: str) -> bytes:
    try:
        raw = value.encode("utf-8")
    except (UnicodeEncodeError, AttributeError) as e:
        raise ProtocolError(f"cannot encode {value!r} as a string: {e}") from None
    if len(raw) > MAX_STRING_BYTES:
        raise ProtocolError(f"string of {len(raw)} bytes exceeds the maximum of {MAX_STRING_BYTES}")
    return raw


def _read_int16_length(buf: Buffer, pos: int, what: str) -> tuple[int, int]:
    try:
        return _I16.unpack_from(buf, pos)[0], pos + 2
    except struct.error:
        raise _truncated(f"{what} length", pos, 2, buf) from None


def _read_int32_length(buf: Buffer, pos: int, what: str) -> tuple[int, int]:
    try:
        return _I32.unpack_from(buf, pos)[0], pos + 4
    except struct.error:
        raise _truncated(f"{what} length", pos, 4, buf) from None


def _compact_length(buf: Buffer, pos: int) -> tuple[int, int]:
    """The length of a compact field, -1 for null (Kafka's ``readUnsignedVarint() - 1``)."""
    n, pos = decode_unsigned_varint(buf, pos)
    return n - 1, pos


def _take(buf: Buffer, pos: int, n: int, what: str) -> int:
    end = pos + n
    if end > len(buf):
        raise _truncated(what, pos, n, buf)
    return end


def decode_string(buf: Buffer, pos: int) -> tuple[str, int]:
    n, pos = _read_int16_length(buf, pos, "string")
    if n < 0:
        raise ProtocolError(f"non-nullable string has length {n} at offset {pos - 2}")
    end = _take(buf, pos, n, "string")
    return _text(buf, pos, end), end


def decode_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n, pos = _read_int16_length(buf, pos, "string")
    if n < 0:
        if n == -1:
            return None, pos
        raise ProtocolError(f"string has length {n} at offset {pos - 2}")
    end = _take(buf, pos, n, "string")
    return _text(buf, pos, end), end


def decode_compact_string(buf: Buffer, pos: int) -> tuple[str, int]:
    start = pos
    n, pos = _compact_length(buf, pos)
    if n < 0:
        raise ProtocolError(f"non-nullable compact string is null at offset {start}")
    if n > MAX_STRING_BYTES:
        raise ProtocolError(f"compact string at offset {start} has length {n}, above {MAX_STRING_BYTES}")
    end = _take(buf, pos, n, "compact string")
    return _text(buf, pos, end), end


def decode_compact_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    start = pos
    n, pos = _compact_length(buf, pos)
    if n < 0:
        return None, pos
    if n > MAX_STRING_BYTES:
        raise ProtocolError(f"compact string at offset {start} has length {n}, above {MAX_STRING_BYTES}")
    end = _take(buf, pos, n, "compact string")
    return _text(buf, pos, end), end


def encode_string(out: bytearray, value: str) -> None:
    if value is None:
        raise ProtocolError("null in a non-nullable string")
    raw = _utf8(value)
    out += _I16.pack(len(raw))
    out += raw


def encode_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\xff\xff"
    else:
        encode_string(out, value)


def encode_compact_string(out: bytearray, value: str) -> None:
    if value is None:
        raise ProtocolError("null in a non-nullable compact string")
    raw = _utf8(value)
    encode_unsigned_varint(out, len(raw) + 1)
    out += raw


def encode_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
    else:
        encode_compact_string(out, value)


def decode_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    n, pos = _read_int32_length(buf, pos, "bytes")
    if n < 0:
        raise ProtocolError(f"non-nullable bytes has length {n} at offset {pos - 4}")
    end = _take(buf, pos, n, "bytes")
    return bytes(buf[pos:end]), end


def decode_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_int32_length(buf, pos, "bytes")
    if n < 0:
        if n == -1:
            return None, pos
        raise ProtocolError(f"bytes has length {n} at offset {pos - 4}")
    end = _take(buf, pos, n, "bytes")
    return bytes(buf[pos:end]), end


def decode_compact_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    start = pos
    n, pos = _compact_length(buf, pos)
    if n < 0:
        raise ProtocolError(f"non-nullable compact bytes is null at offset {start}")
    end = _take(buf, pos, n, "compact bytes")
    return bytes(buf[pos:end]), end


def decode_compact_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = _compact_length(buf, pos)
    if n < 0:
        return None, pos
    end = _take(buf, pos, n, "compact bytes")
    return bytes(buf[pos:end]), end


def _check_bytes_length(value: bytes) -> int:
    try:
        n = len(value)
    except TypeError:
        raise ProtocolError(f"cannot encode {type(value).__name__} as bytes") from None
    if n > _INT32_MAX - 1:
        raise ProtocolError(f"bytes of length {n} exceed the int32 length")
    return n


def encode_bytes(out: bytearray, value: bytes) -> None:
    if value is None:
        raise ProtocolError("null in a non-nullable bytes field")
    out += _I32.pack(_check_bytes_length(value))
    out += value


def encode_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += b"\xff\xff\xff\xff"
    else:
        encode_bytes(out, value)


def encode_compact_bytes(out: bytearray, value: bytes) -> None:
    if value is None:
        raise ProtocolError("null in a non-nullable compact bytes field")
    encode_unsigned_varint(out, _check_bytes_length(value) + 1)
    out += value


def encode_compact_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out.append(0)
    else:
        encode_compact_bytes(out, value)


# ---------------------------------------------------------------------------------------------
# Arrays


def array_decoder(
    element: Decoder,
    *,
    compact: bool,
    nullable: bool,
    min_element_size: int,
    fixed_format: str | None = None,
) -> Decoder:
    """A decoder of an array of ``element``.

    ``min_element_size`` (at least 1) bounds the claimed count by the bytes that remain, so a
    forged count never allocates or loops. ``fixed_format`` (a struct character, for arrays of
    fixed-width numbers such as ``[]int32``) unpacks the whole array with one call.
    """
    if min_element_size < 1:
        raise ValueError("array elements must take at least one byte (the count bound relies on it)")

    def count(buf: Buffer, pos: int) -> tuple[int, int]:
        start = pos
        if compact:
            n, pos = _compact_length(buf, pos)
        else:
            n, pos = _read_int32_length(buf, pos, "array")
        if n < 0:
            if n == -1 and nullable:
                return -1, pos
            raise ProtocolError(f"array at offset {start} has count {n}" + ("" if nullable else " (not nullable)"))
        if n * min_element_size > len(buf) - pos:
            raise ProtocolError(
                f"array at offset {start} claims {n} elements, more than the {len(buf) - pos} bytes left"
            )
        return n, pos

    if fixed_format is not None:
        size = struct.calcsize(">" + fixed_format)

        def decode_fixed(buf: Buffer, pos: int) -> tuple[list[Any] | None, int]:
            n, pos = count(buf, pos)
            if n < 0:
                return None, pos
            # count() proved that n * size bytes remain
            return list(struct.unpack_from(f">{n}{fixed_format}", buf, pos)), pos + n * size

        return decode_fixed

    def decode(buf: Buffer, pos: int) -> tuple[list[Any] | None, int]:
        n, pos = count(buf, pos)
        if n < 0:
            return None, pos
        items = []
        append = items.append
        for _ in range(n):
            item, pos = element(buf, pos)
            append(item)
        return items, pos

    return decode


def array_encoder(element: Encoder, *, compact: bool, nullable: bool, fixed_format: str | None = None) -> Encoder:
    """An encoder of an array of ``element`` (see ``array_decoder``)."""

    def write_count(out: bytearray, value: Any) -> bool:
        if value is None:
            if not nullable:
                raise ProtocolError("null in a non-nullable array")
            if compact:
                out.append(0)
            else:
                out += b"\xff\xff\xff\xff"
            return False
        try:
            n = len(value)
        except TypeError:
            raise ProtocolError(f"cannot encode {type(value).__name__} as an array") from None
        if compact:
            encode_unsigned_varint(out, n + 1)
        else:
            out += _I32.pack(n)
        return True

    if fixed_format is not None:

        def encode_fixed(out: bytearray, value: Any) -> None:
            if write_count(out, value):
                try:
                    out += struct.pack(f">{len(value)}{fixed_format}", *value)
                except struct.error as e:
                    raise ProtocolError(f"cannot encode array element: {e}") from None

        return encode_fixed

    def encode(out: bytearray, value: Any) -> None:
        if write_count(out, value):
            for item in value:
                element(out, item)

    return encode


# ---------------------------------------------------------------------------------------------
# Tagged fields: an unsigned varint count, then (tag, size, bytes) entries, tags ascending.


def decode_tagged_fields(buf: Buffer, pos: int) -> tuple[dict[int, tuple[int, int]], int]:
    """The raw tagged-fields section: tag -> (start, end) of its data in ``buf``.

    The schema codec decodes known tags itself (``schema.py``); this is for callers that only
    need to skip or inspect a section.
    """
    start = pos
    n, pos = decode_unsigned_varint(buf, pos)
    if n * 2 > len(buf) - pos:  # each entry takes at least a tag byte and a size byte
        raise ProtocolError(f"tagged fields at offset {start} claim {n} entries, more than the bytes left")
    fields: dict[int, tuple[int, int]] = {}
    for _ in range(n):
        tag, pos = decode_unsigned_varint(buf, pos)
        size, pos = decode_unsigned_varint(buf, pos)
        end = _take(buf, pos, size, "tagged field")
        fields[tag] = (pos, end)
        pos = end
    return fields, pos


def encode_tagged_fields(out: bytearray, fields: dict[int, bytes]) -> None:
    """A tagged-fields section from tag -> already-encoded data, written in ascending tag order."""
    encode_unsigned_varint(out, len(fields))
    for tag in sorted(fields):
        data = fields[tag]
        encode_unsigned_varint(out, tag)
        encode_unsigned_varint(out, len(data))
        out += data
