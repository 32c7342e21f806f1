"""The byte format: varints, the documented worked example, batch framing, names, and bad input to readers."""

from __future__ import annotations

import pickle
import struct

import crc32c
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.archive import (
    ArchiveCorruptError,
    ArchiveRecord,
    EncodedLabels,
    _format,
    decode_segment_bytes,
    hour_partition,
    parse_hour_partition,
    parse_segment_name,
    read_segment,
)
from quotaplane.archive._format import (
    BATCH_HEADER_SIZE,
    FILE_HEADER,
    MAX_TIME_MS,
    _read_uvarint,
    encode_batch,
    encode_record_fields,
    encode_uvarint,
    segment_name,
    validate_name,
)

T0 = 1_700_000_000_000


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16_383, 16_384, 2**32, T0, 2**63 - 1, 2**64 - 1])
def test_uvarint_round_trips(value: int):
    encoded = encode_uvarint(value)
    assert _read_uvarint(encoded, 0) == (value, len(encoded))
    assert all(b & 0x80 for b in encoded[:-1]) and not encoded[-1] & 0x80


def test_uvarint_rejects_negative_and_overlong():
    with pytest.raises(ValueError):
        encode_uvarint(-1)
    with pytest.raises(ValueError):
        _read_uvarint(b"\xff" * 11, 0)


def test_file_header_is_documented_bytes():
    assert bytes.fromhex("51505347 0001 0000") == FILE_HEADER


def test_worked_example_of_the_docs():
    """docs/archive-format.md §3: a record at min_time_ms + 5 with {"k": "v"} and body 0a 00."""
    batch = encode_batch([(T0, encode_record_fields({}, b"")), (T0 + 5, encode_record_fields({"k": "v"}, b"\x0a\x00"))])
    magic, version, crc, attributes, count, min_t, max_t, ulen, clen = struct.unpack_from(">2sBIBIqqII", batch)
    assert (magic, version, attributes, count, min_t, max_t) == (b"QB", 1, 1, 2, T0, T0 + 5)
    payload = batch[BATCH_HEADER_SIZE:]
    assert clen == len(payload)
    assert crc == crc32c.crc32c(batch[7:])
    raw = zstandard.ZstdDecompressor().decompress(payload)
    assert len(raw) == ulen
    assert raw == bytes.fromhex("03 00 00 00") + bytes.fromhex("09 05 01 016b 0176 02 0a00")


def test_crc32c_check_value():
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_uncompressed_codec_is_readable():
    """Codec 0 is defined for other writers; this reader reads it."""
    raw = b"\x09\x05\x01\x01k\x01v\x02\x0a\x00"
    fields = struct.pack(">BIqqII", 0, 1, T0, T0 + 5, len(raw), len(raw))
    batch = struct.pack(">2sBI", b"QB", 1, crc32c.crc32c(fields + raw)) + fields + raw
    contents = decode_segment_bytes(FILE_HEADER + batch, "plain.seg")
    assert contents.records == [ArchiveRecord(T0 + 5, {"k": "v"}, b"\x0a\x00")]
    assert contents.torn_tail is None


def test_labels_must_be_strings():
    with pytest.raises(TypeError):
        encode_record_fields({"k": 1}, b"")  # type: ignore[dict-item]
    with pytest.raises(UnicodeEncodeError):
        encode_record_fields({"k": "\ud800"}, b"")


def _fields_by_the_docs(labels: dict[str, str], body: bytes) -> bytes:
    """docs/archive-format.md §3, spelled out: count, then length-prefixed key and value, then the body."""
    out = encode_uvarint(len(labels))
    for key, value in labels.items():
        out += encode_uvarint(len(key.encode())) + key.encode() + encode_uvarint(len(value.encode())) + value.encode()
    return out + encode_uvarint(len(body)) + body


_label_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=140)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.dictionaries(st.sampled_from(["a", "node_id", "é", ""]) | _label_text, _label_text, max_size=14),
            st.binary(max_size=300),
        ),
        max_size=12,
    ),
    cache_max=st.sampled_from([0, 1, 3, 32_768]),
)
def test_labels_seen_before_encode_as_the_docs_say(records: list[tuple[dict[str, str], bytes]], cache_max: int) -> None:
    """The label cache changes no byte: every record, its labels repeated or not, the cache full and emptied
    on the way or not, encodes as the format spells it out."""
    saved = _format._LABEL_CACHE_MAX, _format._LABEL_CACHE
    _format._LABEL_CACHE_MAX, _format._LABEL_CACHE = cache_max, {}
    try:
        for labels, body in [*records, *records]:
            assert encode_record_fields(labels, body) == _fields_by_the_docs(labels, body)
        assert len(_format._LABEL_CACHE) <= max(cache_max, 1)
    finally:
        _format._LABEL_CACHE_MAX, _format._LABEL_CACHE = saved


def test_a_bad_label_is_refused_after_good_ones_were_cached():
    encode_record_fields({"k": "v"}, b"")
    with pytest.raises(TypeError):
        encode_record_fields({"k": "v", "n": 1}, b"")  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        encode_record_fields({"k": ["unhashable"]}, b"")  # type: ignore[dict-item]
    with pytest.raises(UnicodeEncodeError):
        encode_record_fields({"k": "v", "s": "\ud800"}, b"")
    assert ("n", 1) not in _format._LABEL_CACHE and ("s", "\ud800") not in _format._LABEL_CACHE


@settings(max_examples=150, deadline=None)
@given(
    labels=st.dictionaries(st.sampled_from(["a", "node_id", "é", ""]) | _label_text, _label_text, max_size=14),
    body=st.binary(max_size=20_000),
)
def test_encoded_labels_write_the_bytes_of_the_labels_they_hold(labels: dict[str, str], body: bytes) -> None:
    """Labels encoded once (``EncodedLabels``) are written byte for byte as the plain mapping, and read back as
    it, in its order (bodies past 16 KiB take varints of three bytes)."""
    encoded = EncodedLabels(labels)
    assert encode_record_fields(encoded, body) == _fields_by_the_docs(labels, body)
    assert encode_record_fields(encoded, body) == encode_record_fields(labels, body)
    assert list(encoded.items()) == list(labels.items()) and len(encoded) == len(labels)
    assert encoded == labels and dict(encoded) == labels


def test_encoded_labels_are_checked_once_and_immutable():
    with pytest.raises(TypeError):
        EncodedLabels({"k": 1})  # type: ignore[dict-item]
    with pytest.raises(UnicodeEncodeError):
        EncodedLabels({"k": "\ud800"})
    encoded = EncodedLabels({"k": "v", "client_id": "c1"})
    with pytest.raises(AttributeError):
        encoded.encoded = b"\x00"  # type: ignore[misc]
    assert encoded["client_id"] == "c1" and "k" in encoded and "x" not in encoded
    with pytest.raises(KeyError):
        encoded["x"]
    assert repr(encoded) == "EncodedLabels({'k': 'v', 'client_id': 'c1'})"


def test_partitions_are_utc_hours_spark_can_discover():
    assert hour_partition(0) == "date=1970-01-01/hour=00"
    assert hour_partition(T0) == "date=2023-11-14/hour=22"
    assert hour_partition(MAX_TIME_MS - 1) == "date=9999-12-31/hour=23"
    hour = T0 - T0 % 3_600_000
    assert parse_hour_partition("date=2023-11-14", "hour=22") == hour
    assert parse_hour_partition("date=2023-02-30", "hour=22") is None
    assert parse_hour_partition("date=2023-11-14", "hour=2") is None
    assert parse_hour_partition("_SUCCESS", "hour=22") is None


def test_segment_names_sort_by_time_and_round_trip():
    name = segment_name(T0, "w_1", 3)
    assert name == "1700000000000-w_1-000003.seg"
    parsed = parse_segment_name(name)
    assert parsed is not None and (parsed.first_time_ms, parsed.writer_id, parsed.seq) == (T0, "w_1", 3)
    assert segment_name(5, "w", 1) == "0000000000005-w-000001.seg"
    assert parse_segment_name(".1700000000000-w-000001.seg.tmp") is None
    assert parse_segment_name("_SUCCESS") is None


@pytest.mark.parametrize("bad", ["", "a-b=c", "_hidden", ".x", "a/b", "x" * 65])
def test_stream_names_are_checked(bad: str):
    with pytest.raises(ValueError):
        validate_name("stream", bad)


def test_writer_ids_hold_no_separator():
    assert validate_name("writer id", "shard_3") == "shard_3"
    with pytest.raises(ValueError):
        validate_name("writer id", "shard-3")


# --- bad input to the reader ---------------------------------------------------------------------------
def test_empty_file_is_a_clear_error(tmp_path):
    path = tmp_path / "empty.seg"
    path.write_bytes(b"")
    with pytest.raises(ArchiveCorruptError, match="empty file") as info:
        read_segment(path)
    assert info.value.path == str(path) and info.value.offset == 0


def test_wrong_magic_is_a_clear_error(tmp_path):
    path = tmp_path / "x.seg"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(ArchiveCorruptError, match=r"bad magic .* not an archive segment") as info:
        read_segment(path)
    assert str(path) in str(info.value) and "offset 0" in str(info.value)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"QPS", "file header truncated"),
        (b"QPSG\x00\x02\x00\x00", "unsupported format version 2"),
        (b"QPSG\x00\x01\x00\x01", "unknown file header flags"),
    ],
)
def test_bad_file_headers(data: bytes, reason: str):
    with pytest.raises(ArchiveCorruptError, match=reason):
        decode_segment_bytes(data, "bad.seg")


def test_nonexistent_path_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_segment(tmp_path / "missing.seg")


def test_header_only_segment_is_empty():
    contents = decode_segment_bytes(FILE_HEADER, "h.seg")
    assert contents.records == [] and contents.batches == [] and contents.torn_tail is None


def test_crc_valid_but_undecodable_batch_is_corrupt():
    """A batch whose CRC matches was written that way: bad contents are corruption even at the end."""
    raw = b"\x09\x05\x01\x01k\x01v\x02\x0a"  # one byte short of its declared size
    fields = struct.pack(">BIqqII", 0, 1, T0, T0 + 5, len(raw), len(raw))
    batch = struct.pack(">2sBI", b"QB", 1, crc32c.crc32c(fields + raw)) + fields + raw
    with pytest.raises(ArchiveCorruptError, match="does not decode") as info:
        decode_segment_bytes(FILE_HEADER + batch, "bad.seg")
    assert info.value.offset == 8


def test_corrupt_error_pickles_for_spark():
    err = pickle.loads(pickle.dumps(ArchiveCorruptError("/a/b.seg", 42, "CRC32C mismatch")))
    assert (err.path, err.offset, err.reason) == ("/a/b.seg", 42, "CRC32C mismatch")
    assert "/a/b.seg" in str(err) and "42" in str(err)
