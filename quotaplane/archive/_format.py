"""The archive's bytes: file header, batch header, record encoding, and the partition layout.

Everything here is a pure function of its arguments (no files, no clock), so the writer, the reader
and a Spark job share one definition. ``docs/archive-format.md`` is the same specification in prose;
the two must change together (the format version is in every file header).

A segment is ``FILE_HEADER`` then batches. A batch is a 36-byte header then a zstd frame holding its
records, each length-prefixed with unsigned LEB128 varints (protobuf's):

>>> raw = encode_batch([(1_700_000_000_000, encode_record_fields({"k": "v"}, b"body"))])
>>> header = parse_batch_header(raw, 0)
>>> header.record_count, header.min_time_ms, header.compressed_length == len(raw) - BATCH_HEADER_SIZE
(1, 1700000000000, True)
>>> header.crc == batch_crc(raw, 0, header)
True
>>> decode_records(decompress_payload(raw, header), header, "doc", 0)
[ArchiveRecord(time_ms=1700000000000, labels={'k': 'v'}, body=b'body')]
>>> hour_partition(1_700_000_000_000), segment_name(1_700_000_000_000, "w1", 7)
('date=2023-11-14/hour=22', '1700000000000-w1-000007.seg')
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import crc32c
import zstandard

__all__ = [
    "BATCH_HEADER_SIZE",
    "BATCH_MAGIC",
    "BATCH_VERSION",
    "CODEC_NONE",
    "CODEC_ZSTD",
    "EPOCH",
    "FILE_HEADER",
    "FILE_HEADER_SIZE",
    "FILE_MAGIC",
    "FORMAT_VERSION",
    "HOUR_MS",
    "MAX_TIME_MS",
    "SEGMENT_SUFFIX",
    "ArchiveCorruptError",
    "ArchiveRecord",
    "BatchHeader",
    "EncodedLabels",
    "SegmentName",
    "batch_crc",
    "decode_records",
    "decompress_payload",
    "encode_batch",
    "encode_record_fields",
    "encode_uvarint",
    "explain_bad_batch_header",
    "hour_partition",
    "parse_batch_header",
    "parse_file_header",
    "parse_hour_partition",
    "parse_segment_name",
    "segment_name",
    "validate_name",
]

FILE_MAGIC = b"QPSG"
FORMAT_VERSION = 1
_FILE_HEADER = struct.Struct(">4sHH")  # magic, format version, flags (0 in version 1)
FILE_HEADER_SIZE = _FILE_HEADER.size
FILE_HEADER = _FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, 0)

BATCH_MAGIC = b"QB"
BATCH_VERSION = 1
#: The part before the CRC (magic, version, crc) and the CRC-covered fields after it.
_BATCH_HEAD = struct.Struct(">2sBI")
_BATCH_FIELDS = struct.Struct(">BIqqII")  # attributes, record count, min time, max time, uncompressed, compressed
BATCH_HEADER_SIZE = _BATCH_HEAD.size + _BATCH_FIELDS.size
_CRC_START = _BATCH_HEAD.size  # the CRC covers header bytes [7, 36) and then the payload

CODEC_NONE = 0
CODEC_ZSTD = 1
#: The most a zstd frame can expand: every block that produces output takes at least 4 bytes (an RLE block:
#: a 3-byte header and the byte) and produces at most 128 KiB. A batch claiming more than ratio x its
#: compressed length is corrupt, and trusting it would let a few bytes make the decoder allocate 4 GiB.
_ZSTD_MAX_RATIO = 128 * 1024 // 4
_CODEC_MASK = 0x07

HOUR_MS = 3_600_000
#: Record times are ``[0, MAX_TIME_MS)``: 1970-01-01 up to the end of year 9999, so a partition's
#: ``date=`` is always four digits of year (ISO 8601, and what Spark parses as a date).
MAX_TIME_MS = 253_402_300_800_000
_U32_MAX = 0xFFFF_FFFF

SEGMENT_SUFFIX = ".seg"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,63}")
_STREAM_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_SEGMENT_RE = re.compile(r"(\d{13,})-([A-Za-z0-9][A-Za-z0-9_]{0,63})-(\d{6,})\.seg")
_DATE_RE = re.compile(r"date=(\d{4})-(\d{2})-(\d{2})")
_HOUR_RE = re.compile(r"hour=(\d{2})")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ArchiveCorruptError(Exception):
    """A segment that is not what the format says, at a byte offset of a named file.

    Raised for a bad file header and for damage that is not a torn tail (a batch that fails its CRC
    with a valid batch after it, or a CRC-valid batch whose contents do not decode). ``offset`` is
    where the bad structure starts (0 for the file header, else the batch's first byte).
    """

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt archive segment at byte offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason

    def __reduce__(self) -> tuple[type[ArchiveCorruptError], tuple[str, int, str]]:
        # Spark ships exceptions between processes by pickling them; the default reduce would call
        # __init__ with the formatted message only.
        return (type(self), (self.path, self.offset, self.reason))


@dataclass(frozen=True, slots=True)
class ArchiveRecord:
    """One archived record: its time (epoch ms, UTC), string labels and an opaque body.

    The time decides the hour partition. Labels keep their insertion order on disk and back.
    """

    time_ms: int
    labels: Mapping[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """A parsed batch header; ``end`` is the offset just past the batch's payload."""

    offset: int
    crc: int
    attributes: int
    record_count: int
    min_time_ms: int
    max_time_ms: int
    uncompressed_length: int
    compressed_length: int

    @property
    def end(self) -> int:
        return self.offset + BATCH_HEADER_SIZE + self.compressed_length

    @property
    def codec(self) -> int:
        return self.attributes & _CODEC_MASK


@dataclass(frozen=True, slots=True)
class SegmentName:
    """A segment file name's parts: ``<first_time_ms>-<writer_id>-<seq>.seg``."""

    first_time_ms: int
    writer_id: str
    seq: int


# --- varints -------------------------------------------------------------------------------------------
_SMALL_VARINTS = tuple(bytes((i,)) for i in range(128))


def encode_uvarint(value: int) -> bytes:
    """Unsigned LEB128, as protobuf: 7 bits a byte, low bits first, the high bit set on all but the last.

    >>> encode_uvarint(1).hex(), encode_uvarint(300).hex()
    ('01', 'ac02')
    """
    if value < 128:
        if value < 0:
            raise ValueError(f"a varint is unsigned, got {value}")
        return _SMALL_VARINTS[value]
    if value < 16_384:  # two bytes: every record's body length and size in the telemetry stream
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it. Raises IndexError past the end, ValueError if too long."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


# --- records -------------------------------------------------------------------------------------------
#: Encoded labels (``uvarint(len(key)) key uvarint(len(value)) value``) by ``(key, value)``: most labels of a
#: telemetry record repeat across records (the node's, the client's software, the push labels; a client's own
#: on its every push), and encoding each one afresh was most of the archive's cost per push (measured ~10 us of
#: ~14 for 12 labels). Emptied when full: a fleet of a million clients churns its client-unique labels
#: through it, while the shared ones are back after one record.
_LABEL_CACHE: dict[tuple[str, str], bytes] = {}
_LABEL_CACHE_MAX = 32_768


def _encode_label(key: object, value: object) -> bytes:
    if not isinstance(key, str) or not isinstance(value, str):
        raise TypeError(f"labels are str -> str, got {type(key).__name__} -> {type(value).__name__}")
    kb = key.encode("utf-8")
    vb = value.encode("utf-8")
    return b"".join((encode_uvarint(len(kb)), kb, encode_uvarint(len(vb)), vb))


def _encode_labels(labels: Mapping[str, str]) -> bytes:
    """``uvarint(count)`` then every label, in the mapping's order (the fields' head before the body)."""
    pairs = list(labels.items())
    encoded: list[bytes | None] = list(map(_LABEL_CACHE.get, pairs))  # a C loop; TypeError if unhashable
    if None in encoded:
        cache = _LABEL_CACHE
        for index, label in enumerate(encoded):
            if label is None:
                pair = pairs[index]
                label = encoded[index] = _encode_label(*pair)
                if len(cache) >= _LABEL_CACHE_MAX:
                    cache.clear()
                cache[pair] = label
    return b"".join((encode_uvarint(len(pairs)), *encoded))  # type: ignore[arg-type]


def _read_labels(raw: bytes, pos: int) -> tuple[dict[str, str], int, int]:
    """The labels encoded at ``pos`` (``_encode_labels``' form), the count the encoding gave (more than the
    labels if a key repeats) and the position after them. IndexError past the end, ValueError if malformed."""
    count, pos = _read_uvarint(raw, pos)
    labels: dict[str, str] = {}
    for _ in range(count):
        n, pos = _read_uvarint(raw, pos)
        key = raw[pos : pos + n].decode("utf-8")
        pos += n
        n, pos = _read_uvarint(raw, pos)
        labels[key] = raw[pos : pos + n].decode("utf-8")
        pos += n
    return labels, count, pos


class EncodedLabels(Mapping[str, str]):
    """An immutable label set held in its on-disk form: ``encode_record_fields`` writes it as it is.

    Why: a writer appending many records with the same labels (every push of a client instance carries the
    same dozen) encoded them afresh per record, about half the archive's CPU per push. Built once from a
    mapping (checked as ``encode_record_fields`` checks labels: ValueError or TypeError here), it reads back
    as that mapping, in its order; only the bytes are kept, so holding one per client costs a few hundred
    bytes.
    """

    __slots__ = ("encoded",)

    encoded: bytes

    def __init__(self, labels: Mapping[str, str]) -> None:
        object.__setattr__(self, "encoded", _encode_labels(labels))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("EncodedLabels is immutable")

    def _decoded(self) -> dict[str, str]:
        return _read_labels(self.encoded, 0)[0]

    def __getitem__(self, key: str) -> str:
        return self._decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return _read_uvarint(self.encoded, 0)[0]

    def __repr__(self) -> str:
        return f"EncodedLabels({self._decoded()!r})"


def encode_record_fields(labels: Mapping[str, str], body: bytes) -> bytes:
    """A record's labels and body, encoded once at ``append`` (the time delta is added per batch).

    Raises ValueError or TypeError for a label that is not a UTF-8-encodable ``str``, so a bad record
    is refused alone instead of failing a whole batch at flush time. Labels seen before come from
    ``_LABEL_CACHE`` (only checked, encodable ``str`` pairs are put there); ``EncodedLabels`` are written as
    they are.
    """
    head = labels.encoded if type(labels) is EncodedLabels else _encode_labels(labels)
    body = bytes(body)
    return b"".join((head, encode_uvarint(len(body)), body))


def encode_batch(entries: Sequence[tuple[int, bytes]], compressor: zstandard.ZstdCompressor | None = None) -> bytes:
    """One batch of ``(time_ms, encode_record_fields(...))`` entries: header, then the zstd payload.

    Each record is ``uvarint(size) uvarint(time_ms - min_time_ms) fields``. One zstd frame per batch,
    with its content size, so a reader allocates once.
    """
    if not entries:
        raise ValueError("a batch holds at least one record")
    if len(entries) > _U32_MAX:
        raise ValueError(f"too many records for one batch: {len(entries)}")
    times = [t for t, _ in entries]
    min_t = min(times)
    max_t = max(times)
    parts: list[bytes] = []
    for t, fields in entries:
        delta = encode_uvarint(t - min_t)
        parts += (encode_uvarint(len(delta) + len(fields)), delta, fields)
    raw = b"".join(parts)
    payload = (compressor or zstandard.ZstdCompressor()).compress(raw)
    if len(raw) > _U32_MAX or len(payload) > _U32_MAX:
        raise ValueError(f"batch too large: {len(raw)} bytes uncompressed (the limit is 4 GiB)")
    fields_bytes = _BATCH_FIELDS.pack(CODEC_ZSTD, len(entries), min_t, max_t, len(raw), len(payload))
    crc = crc32c.crc32c(payload, crc32c.crc32c(fields_bytes))
    return _BATCH_HEAD.pack(BATCH_MAGIC, BATCH_VERSION, crc) + fields_bytes + payload


def parse_file_header(data: bytes, path: str) -> None:
    """Check the 8-byte file header; an ArchiveCorruptError at offset 0 says what is wrong."""
    if len(data) == 0:
        raise ArchiveCorruptError(path, 0, "empty file: a segment has at least its 8-byte file header")
    if len(data) < FILE_HEADER_SIZE:
        raise ArchiveCorruptError(path, 0, f"file header truncated ({len(data)} of {FILE_HEADER_SIZE} bytes)")
    magic, version, flags = _FILE_HEADER.unpack_from(data, 0)
    if magic != FILE_MAGIC:
        raise ArchiveCorruptError(path, 0, f"bad magic {magic!r}, expected {FILE_MAGIC!r}: not an archive segment")
    if version != FORMAT_VERSION:
        raise ArchiveCorruptError(path, 0, f"unsupported format version {version} (this reader knows {FORMAT_VERSION})")
    if flags != 0:
        raise ArchiveCorruptError(path, 0, f"unknown file header flags {flags:#06x}")


def parse_batch_header(data: bytes, offset: int) -> BatchHeader | None:
    """The batch header at ``offset`` if it is structurally sound and its payload fits in ``data``, else None.

    Sound means: magic and version match, the codec is known, the record count is at least one and
    the times are ordered. The CRC is not checked here (see ``batch_crc``).
    """
    if len(data) - offset < BATCH_HEADER_SIZE:
        return None
    magic, version, crc = _BATCH_HEAD.unpack_from(data, offset)
    if magic != BATCH_MAGIC or version != BATCH_VERSION:
        return None
    attributes, count, min_t, max_t, ulen, clen = _BATCH_FIELDS.unpack_from(data, offset + _CRC_START)
    if attributes & ~_CODEC_MASK or (attributes & _CODEC_MASK) not in (CODEC_NONE, CODEC_ZSTD):
        return None
    if count == 0 or not 0 <= min_t <= max_t < MAX_TIME_MS:
        return None
    header = BatchHeader(offset, crc, attributes, count, min_t, max_t, ulen, clen)
    if header.end > len(data):
        return None
    return header


def explain_bad_batch_header(data: bytes, offset: int) -> str:
    """Why ``parse_batch_header`` refused the batch at ``offset``, in words (for errors and reports)."""
    left = len(data) - offset
    if left < BATCH_HEADER_SIZE:
        return f"{left} bytes left, a batch header is {BATCH_HEADER_SIZE}"
    magic, version, _crc = _BATCH_HEAD.unpack_from(data, offset)
    attributes, count, min_t, max_t, _ulen, clen = _BATCH_FIELDS.unpack_from(data, offset + _CRC_START)
    if magic != BATCH_MAGIC:
        return f"bad batch magic {magic!r}"
    if version != BATCH_VERSION:
        return f"unknown batch version {version}"
    if left - BATCH_HEADER_SIZE < clen:
        return f"payload of {clen} bytes but only {left - BATCH_HEADER_SIZE} left"
    return f"impossible header fields (attributes {attributes:#x}, {count} records, times {min_t}..{max_t})"


def batch_crc(data: bytes, offset: int, header: BatchHeader) -> int:
    """CRC32C (Castagnoli) of the header bytes after the CRC field, then of the compressed payload."""
    view = memoryview(data)
    with view:
        start = offset + _CRC_START
        return crc32c.crc32c(view[start : header.end])


def decompress_payload(data: bytes, header: BatchHeader) -> bytes:
    """The batch's record bytes. Raises ValueError if they do not match the header's lengths."""
    start = header.offset + BATCH_HEADER_SIZE
    payload = data[start : header.end]
    if header.codec == CODEC_NONE:
        raw = bytes(payload)
    else:
        try:
            size = zstandard.frame_content_size(payload)
        except zstandard.ZstdError as exc:
            raise ValueError(f"bad zstd frame: {exc}") from None
        if size not in (-1, header.uncompressed_length):
            raise ValueError(f"zstd frame holds {size} bytes, header says {header.uncompressed_length}")
        if header.uncompressed_length > _ZSTD_MAX_RATIO * len(payload):  # before the decoder allocates that much
            raise ValueError(
                f"header says {header.uncompressed_length} bytes uncompressed, "
                f"more than a zstd frame of {len(payload)} bytes can hold"
            )
        try:
            raw = zstandard.ZstdDecompressor().decompress(payload, max_output_size=header.uncompressed_length)
        except zstandard.ZstdError as exc:
            raise ValueError(f"zstd decompression failed: {exc}") from None
    if len(raw) != header.uncompressed_length:
        raise ValueError(f"payload is {len(raw)} bytes uncompressed, header says {header.uncompressed_length}")
    return raw


def decode_records(raw: bytes, header: BatchHeader, path: str, offset: int) -> list[ArchiveRecord]:
    """The records of one batch's uncompressed payload; ArchiveCorruptError naming the batch if malformed."""
    records: list[ArchiveRecord] = []
    append = records.append
    base = header.min_time_ms
    pos = 0
    end = len(raw)
    try:
        while pos < end:
            size, pos = _read_uvarint(raw, pos)
            record_end = pos + size
            if record_end > end:
                raise ValueError(f"record {len(records)} overruns the payload")
            delta, pos = _read_uvarint(raw, pos)
            labels, count, pos = _read_labels(raw, pos)
            if len(labels) != count:
                raise ValueError(f"record {len(records)} repeats a label key")
            n, pos = _read_uvarint(raw, pos)
            body = raw[pos : pos + n]
            pos += n
            if pos != record_end:
                raise ValueError(f"record {len(records)} is {size} bytes but its fields take {size + pos - record_end}")
            time_ms = base + delta
            if time_ms > header.max_time_ms:
                raise ValueError(f"record {len(records)} time {time_ms} is past the batch's max {header.max_time_ms}")
            append(ArchiveRecord(time_ms, labels, body))
    except (IndexError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        reason = str(exc) if not isinstance(exc, IndexError) else f"record {len(records)} runs past the payload"
        raise ArchiveCorruptError(path, offset, f"batch passed its CRC but does not decode: {reason}") from None
    if len(records) != header.record_count:
        raise ArchiveCorruptError(
            path, offset, f"batch header says {header.record_count} records, payload holds {len(records)}"
        )
    return records


# --- names and partitions ------------------------------------------------------------------------------
def validate_name(kind: str, value: str) -> str:
    """Check a stream name (``[A-Za-z0-9][A-Za-z0-9_-]*``) or writer id (``[A-Za-z0-9][A-Za-z0-9_]*``), ≤ 64.

    Streams never hold ``=`` (Spark would read a partition column) nor start with ``_`` or ``.``
    (Spark skips such paths as hidden); writer ids hold no ``-``, the name's separator.
    """
    pattern = _STREAM_RE if kind == "stream" else _NAME_RE
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"bad {kind} name {value!r}: must match {pattern.pattern}")
    return value


def hour_partition(time_ms: int) -> str:
    """The relative directory of a time's UTC hour: ``date=YYYY-MM-DD/hour=HH``."""
    t = EPOCH + timedelta(milliseconds=time_ms - time_ms % HOUR_MS)
    return f"date={t:%Y-%m-%d}/hour={t:%H}"


def parse_hour_partition(date_dir: str, hour_dir: str) -> int | None:
    """The hour's start (epoch ms) of a ``date=YYYY-MM-DD``, ``hour=HH`` pair, or None if not one."""
    d = _DATE_RE.fullmatch(date_dir)
    h = _HOUR_RE.fullmatch(hour_dir)
    if d is None or h is None:
        return None
    try:
        t = datetime(int(d[1]), int(d[2]), int(d[3]), int(h[1]), tzinfo=UTC)
    except ValueError:
        return None
    return (t - EPOCH) // timedelta(milliseconds=1)


def segment_name(first_time_ms: int, writer_id: str, seq: int) -> str:
    """``<first_time_ms, 13+ digits>-<writer_id>-<seq, 6+ digits>.seg``: zero-padded so names sort by time."""
    return f"{first_time_ms:013d}-{writer_id}-{seq:06d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> SegmentName | None:
    """The parts of a segment file name, or None for any other file (temporary files, ``_SUCCESS``...)."""
    m = _SEGMENT_RE.fullmatch(name)
    if m is None:
        return None
    return SegmentName(int(m[1]), m[2], int(m[3]))
