"""Kafka's ``Uuid``: 128 bits, written as 22 characters of URL-safe base64 without padding.

A ``Uuid`` is a 16-byte ``bytes`` subclass, so a million of them as dict keys cost one small object
each (no wrapper, no two boxed longs). ``java_hash_code()`` is ``Uuid.hashCode()`` of Kafka, which
the KIP-714 subscription id depends on.

>>> u = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ")
>>> u == ONE_UUID, u in RESERVED, str(u)
(True, True, 'AAAAAAAAAAAAAAAAAAAAAQ')
>>> Uuid.from_parts(1, 2).java_hash_code()
3
"""

from __future__ import annotations

import base64
import binascii
import os
import struct

__all__ = ["ONE_UUID", "RESERVED", "ZERO_UUID", "Uuid", "random_uuid"]

_LONGS = struct.Struct(">qq")


class Uuid(bytes):
    """A Kafka Uuid. Construct with ``from_string``, ``from_parts`` or ``random_uuid()``."""

    __slots__ = ()

    def __new__(cls, raw: bytes) -> Uuid:
        if len(raw) != 16:
            raise ValueError(f"a Uuid is 16 bytes, got {len(raw)}")
        return super().__new__(cls, raw)

    @classmethod
    def from_parts(cls, most_significant_bits: int, least_significant_bits: int) -> Uuid:
        """From the two signed 64-bit halves, as Kafka's ``new Uuid(msb, lsb)``."""
        return cls(
            (most_significant_bits & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "big")
            + (least_significant_bits & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "big")
        )

    @classmethod
    def from_string(cls, text: str) -> Uuid:
        """Parse the base64 form; raises ``ValueError`` with Kafka's messages on bad input."""
        if len(text) > 24:
            raise ValueError(f"Input string with prefix `{text[:24]}` is too long to be decoded as a base64 UUID")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError) as e:
            raise ValueError(f"Input string `{text}` is not valid base64: {e}") from None
        if len(raw) != 16:
            raise ValueError(
                f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal to the expected 16 bytes "
                "of a base64-encoded UUID"
            )
        return cls(raw)

    @property
    def most_significant_bits(self) -> int:
        return _LONGS.unpack(self)[0]

    @property
    def least_significant_bits(self) -> int:
        return _LONGS.unpack(self)[1]

    def java_hash_code(self) -> int:
        """Kafka's ``Uuid.hashCode()``: the 64-bit halves XORed, then the two 32-bit halves of that, signed."""
        msb, lsb = _LONGS.unpack(self)
        xor = msb ^ lsb
        h = ((xor >> 32) ^ xor) & 0xFFFF_FFFF
        return h - (1 << 32) if h & 0x8000_0000 else h

    def __str__(self) -> str:
        return base64.urlsafe_b64encode(self).rstrip(b"=").decode("ascii")

    def __repr__(self) -> str:
        return f"Uuid({str(self)!r})"


ZERO_UUID = Uuid(bytes(16))
ONE_UUID = Uuid(bytes(15) + b"\x01")
#: Kafka never hands these out: ZERO_UUID means "none" and ONE_UUID is the metadata topic's id.
RESERVED = frozenset({ZERO_UUID, ONE_UUID})


def random_uuid() -> Uuid:
    """A fresh random id, as ``Uuid.randomUuid()``: never reserved and never printed with a leading '-'."""
    while True:
        raw = bytearray(os.urandom(16))
        raw[6] = (raw[6] & 0x0F) | 0x40  # version 4 and IETF variant, as java.util.UUID.randomUUID()
        raw[8] = (raw[8] & 0x3F) | 0x80
        u = Uuid(bytes(raw))
        if u not in RESERVED and not str(u).startswith("-"):
            return u
