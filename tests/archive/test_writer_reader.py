"""ArchiveWriter and ArchiveReader on real files: partitions, order, rolls, torn tails and corruption."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from quotaplane.archive import (
    ArchiveCorruptError,
    ArchiveReader,
    ArchiveRecord,
    ArchiveWriter,
    decode_segment_bytes,
    iter_segment_bytes,
    iter_segments,
    read_segment,
)
from quotaplane.archive import _writer as writer_module

HOUR = 3_600_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR + 59 * 60_000  # 22:59 UTC on 2023-11-14: the hour ends soon


def make_record(i: int, time_ms: int) -> ArchiveRecord:
    return ArchiveRecord(
        time_ms, {"client_id": f"client-{i % 7}", "seq": str(i), "empty": ""}, f"body {i}".encode() * 3
    )


def relative(root: Path, paths) -> list[str]:
    return [p.relative_to(root).as_posix() for p in paths]


def test_round_trip_across_two_hours(tmp_path: Path):
    records = [make_record(i, T0 + i * 50) for i in range(3000)]  # 150 s: crosses 23:00
    with ArchiveWriter(tmp_path, "telemetry", writer_id="w1") as writer:
        for i, r in enumerate(records):
            writer.append(r)
            if i % 700 == 699:
                writer.flush()
        assert writer.pending_records > 0
    segments = list(iter_segments(tmp_path, "telemetry"))
    assert relative(tmp_path, segments) == [
        f"telemetry/date=2023-11-14/hour=22/{T0}-w1-000000.seg",
        "telemetry/date=2023-11-14/hour=23/1700002800000-w1-000001.seg",
    ]
    reader = ArchiveReader()
    assert list(reader.read(tmp_path, "telemetry")) == records
    assert reader.torn_tails == []
    first_hour = list(reader.read_segment(segments[0]))
    assert all(r.time_ms < 1_700_002_800_000 for r in first_hour) and len(first_hour) == 1200


def test_one_batch_per_hour_per_flush(tmp_path: Path):
    writer = ArchiveWriter(tmp_path, "s", writer_id="w")
    for i in range(10):
        writer.append(make_record(i, T0 + i * 20_000))  # 22:59:00 .. 23:02:00
    written = writer.flush()
    writer.close()
    batches = [decode_segment_bytes(p.read_bytes(), str(p)).batches for p in iter_segments(tmp_path, "s")]
    assert [len(b) for b in batches] == [1, 1]
    assert [(b[0].record_count, b[0].min_time_ms) for b in batches] == [(3, T0), (7, T0 + 60_000)]
    assert written == writer.bytes_written == sum(p.stat().st_size for p in iter_segments(tmp_path, "s"))


def test_hour_selection_is_half_open(tmp_path: Path):
    with ArchiveWriter(tmp_path, "s", writer_id="w") as writer:
        for h in range(4):
            writer.append(make_record(h, T0 + h * HOUR))
    hour22 = datetime(2023, 11, 14, 22, tzinfo=UTC)
    reader = ArchiveReader()
    assert [r.labels["seq"] for r in reader.read(tmp_path, "s", start_hour=T0 + HOUR)] == ["1", "2", "3"]
    assert [r.labels["seq"] for r in reader.read(tmp_path, "s", hour22, T0 - 59 * 60_000 + 2 * HOUR)] == ["0", "1"]
    # an end inside an hour still selects that hour: partitions overlapping [start, end)
    assert [r.labels["seq"] for r in reader.read(tmp_path, "s", hour22, T0 + 2 * HOUR)] == ["0", "1", "2"]
    assert [r.labels["seq"] for r in reader.read(tmp_path, "s", end_hour=int(hour22.timestamp()) * 1000 + 1)] == ["0"]
    with pytest.raises(ValueError, match="timezone-aware"):
        list(reader.read(tmp_path, "s", datetime(2023, 11, 14, 22)))


def test_missing_or_empty_stream_gives_nothing(tmp_path: Path):
    reader = ArchiveReader()
    assert list(reader.read(tmp_path / "nowhere", "telemetry")) == []
    (tmp_path / "telemetry").mkdir()
    assert list(reader.read(tmp_path, "telemetry")) == []
    assert list(reader.iter_segments(tmp_path, "telemetry")) == []


def test_foreign_files_are_skipped(tmp_path: Path):
    with ArchiveWriter(tmp_path, "s", writer_id="w") as writer:
        writer.append(make_record(1, T0))
    hour_dir = tmp_path / "s" / "date=2023-11-14" / "hour=22"
    (hour_dir / "_SUCCESS").write_bytes(b"")
    (hour_dir / f".{T0}-w-000009.seg.tmp").write_bytes(b"QPSG")  # an interrupted creation
    (tmp_path / "s" / "notes").mkdir()
    (tmp_path / "s" / "date=2023-11-14" / "hour=xx").mkdir()
    assert [r.labels["seq"] for r in ArchiveReader().read(tmp_path, "s")] == ["1"]


def test_size_roll_starts_new_segments_in_order(tmp_path: Path):
    records = [ArchiveRecord(T0 + i, {"i": str(i)}, os.urandom(200)) for i in range(200)]
    with ArchiveWriter(tmp_path, "s", writer_id="w", max_segment_bytes=2_000) as writer:
        for i, r in enumerate(records):
            writer.append(r)
            if i % 10 == 9:
                writer.flush()
    segments = list(iter_segments(tmp_path, "s"))
    assert len(segments) >= 10
    assert list(ArchiveReader().read(tmp_path, "s")) == records


def test_large_flush_is_split_into_batches(tmp_path: Path):
    with ArchiveWriter(tmp_path, "s", writer_id="w", max_batch_bytes=1_000) as writer:
        for _ in range(50):
            writer.append(ArchiveRecord(T0, {}, bytes(100)))
        writer.flush()
    (segment,) = iter_segments(tmp_path, "s")
    contents = decode_segment_bytes(segment.read_bytes(), str(segment))
    assert len(contents.batches) > 1 and len(contents.records) == 50


def test_idle_older_hours_are_closed(tmp_path: Path):
    writer = ArchiveWriter(tmp_path, "s", writer_id="w")
    writer.append(make_record(0, T0))
    writer.append(make_record(1, T0 + HOUR))
    writer.flush()
    assert len(writer.open_segments) == 2
    writer.append(make_record(2, T0 + HOUR))
    writer.flush()
    assert relative(tmp_path, writer.open_segments) == [f"s/date=2023-11-14/hour=23/{T0 + HOUR}-w-000001.seg"]
    writer.append(make_record(3, T0))  # a late record: a new segment in the old hour
    writer.close()
    assert len(list(iter_segments(tmp_path, "s"))) == 3
    assert [r.labels["seq"] for r in ArchiveReader().read(tmp_path, "s")] == ["0", "3", "1", "2"]


def test_bad_records_are_refused_alone(tmp_path: Path):
    with ArchiveWriter(tmp_path, "s") as writer:
        with pytest.raises(ValueError):
            writer.append(ArchiveRecord(-1, {}, b""))
        with pytest.raises(TypeError):
            writer.append(ArchiveRecord(T0, {"n": 1}, b""))  # type: ignore[dict-item]
        writer.append(ArchiveRecord(T0, {}, b"ok"))
        assert writer.pending_records == 1
    assert [r.body for r in ArchiveReader().read(tmp_path, "s")] == [b"ok"]


def test_closed_writer_refuses_work(tmp_path: Path):
    writer = ArchiveWriter(tmp_path, "s")
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(ValueError):
        writer.append(ArchiveRecord(T0, {}, b""))


# --- torn tails and corruption --------------------------------------------------------------------------
def write_batches(root: Path, batches: int = 3, per_batch: int = 20) -> tuple[Path, list[ArchiveRecord]]:
    records = []
    with ArchiveWriter(root, "s", writer_id="w") as writer:
        for b in range(batches):
            for i in range(per_batch):
                n = b * per_batch + i
                records.append(ArchiveRecord(T0 + n, {"n": str(n)}, os.urandom(32)))
                writer.append(records[-1])
            writer.flush()
    (segment,) = iter_segments(root, "s")
    return segment, records


def test_garbage_after_the_last_batch_is_a_torn_tail(tmp_path: Path):
    segment, records = write_batches(tmp_path)
    size = segment.stat().st_size
    with segment.open("ab") as f:
        f.write(b"QB\x01" + os.urandom(50))
    reader = ArchiveReader()
    assert list(reader.read(tmp_path, "s")) == records
    (tail,) = reader.torn_tails
    assert (tail.name, tail.offset, tail.length) == (str(segment), size, 53)


@pytest.mark.parametrize("cut", [1, 10, 36, 37, -1])
def test_truncated_final_batch_is_a_torn_tail(tmp_path: Path, cut: int):
    segment, records = write_batches(tmp_path)
    batches = decode_segment_bytes(segment.read_bytes(), str(segment)).batches
    last = batches[-1]
    keep = last.offset + cut if cut > 0 else last.end + cut
    os.truncate(segment, keep)
    seen = []
    assert list(read_segment(segment, on_torn_tail=seen.append)) == records[:40]
    assert [(t.offset, t.length) for t in seen] == [(last.offset, keep - last.offset)]


def test_bit_flip_in_the_last_batch_reads_as_torn(tmp_path: Path):
    """The documented limit: damage to the final batch cannot be told from a torn write."""
    segment, records = write_batches(tmp_path)
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0x01
    contents = decode_segment_bytes(bytes(data), "x.seg")
    assert contents.records == records[:40]
    assert contents.torn_tail is not None and "CRC32C mismatch" in contents.torn_tail.reason


@pytest.mark.parametrize("where", ["payload", "crc", "length", "magic"])
def test_flipped_byte_in_an_early_batch_is_corruption(tmp_path: Path, where: str):
    segment, _ = write_batches(tmp_path)
    first, second, _third = decode_segment_bytes(segment.read_bytes(), str(segment)).batches
    at = {"payload": first.end - 3, "crc": first.offset + 4, "length": first.offset + 33, "magic": first.offset}[where]
    data = bytearray(segment.read_bytes())
    data[at] ^= 0x40
    segment.write_bytes(bytes(data))
    with pytest.raises(ArchiveCorruptError) as info:
        list(ArchiveReader().read(tmp_path, "s"))
    assert (info.value.path, info.value.offset) == (str(segment), first.offset)
    assert f"valid batch follows at offset {second.offset}" in info.value.reason
    assert str(segment) in str(info.value)


def test_iteration_is_lazy_and_stops_at_the_corruption(tmp_path: Path):
    segment, records = write_batches(tmp_path)
    _, second, _ = decode_segment_bytes(segment.read_bytes(), str(segment)).batches
    data = bytearray(segment.read_bytes())
    data[second.end - 1] ^= 0xFF
    it = iter_segment_bytes(bytes(data), "x.seg")
    assert [next(it) for _ in range(20)] == records[:20]
    with pytest.raises(ArchiveCorruptError, match=f"offset {second.offset}"):
        next(it)


# --- failures while writing -----------------------------------------------------------------------------
def test_failed_append_abandons_the_segment_and_retries_in_a_new_one(tmp_path: Path, monkeypatch):
    """A write that fails halfway leaves no damage a reader calls corruption, and loses nothing."""
    writer = ArchiveWriter(tmp_path, "s", writer_id="w")
    records = [make_record(i, T0 + i) for i in range(30)]
    for r in records[:10]:
        writer.append(r)
    writer.flush()
    for r in records[10:20]:
        writer.append(r)

    real_write = os.write

    def half_write_then_fail(fd: int, data) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer_module.os, "write", half_write_then_fail)
    with pytest.raises(OSError, match="No space"):
        writer.flush()
    assert writer.pending_records == 10 and writer.open_segments == []
    monkeypatch.setattr(writer_module.os, "write", real_write)
    for r in records[20:]:
        writer.append(r)
    writer.close()
    assert len(list(iter_segments(tmp_path, "s"))) == 2
    reader = ArchiveReader()
    assert list(reader.read(tmp_path, "s")) == records
    assert reader.torn_tails == []  # the half-written batch was truncated away


def test_failed_creation_leaves_no_segment(tmp_path: Path, monkeypatch):
    writer = ArchiveWriter(tmp_path, "s", writer_id="w")
    writer.append(make_record(0, T0))

    def fail_rename(src, dst) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(writer_module.os, "rename", fail_rename)
    with pytest.raises(OSError):
        writer.flush()
    monkeypatch.undo()
    hour_dir = tmp_path / "s" / "date=2023-11-14" / "hour=22"
    assert list(hour_dir.iterdir()) == []  # the temporary file was removed
    writer.close()
    assert [r.labels["seq"] for r in ArchiveReader().read(tmp_path, "s")] == ["0"]


def test_two_writers_share_a_stream(tmp_path: Path):
    a = ArchiveWriter(tmp_path, "s")
    b = ArchiveWriter(tmp_path, "s")
    assert a.writer_id != b.writer_id
    a.append(make_record(1, T0))
    b.append(make_record(2, T0))
    a.close()
    b.close()
    assert sorted(r.labels["seq"] for r in ArchiveReader().read(tmp_path, "s")) == ["1", "2"]
