"""Snapshot files: round trips, their frames, temporary files, and every way a snapshot can be refused."""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path

import crc32c
import pytest

from quotaplane.config import EventLog, EventLogError
from quotaplane.config.logformat import (
    FRAME_HEADER_SIZE,
    SNAPSHOT_VERSION,
    CorruptSnapshotError,
    decode_message,
    encode_events,
    encode_frame,
    iter_frames,
    list_snapshots,
    read_snapshot,
    read_snapshot_batches,
    snapshot_name,
    write_snapshot,
    write_snapshot_columns,
)
from quotaplane.v1 import config_events_pb2 as pb

T0 = 1_700_000_000_000


def entry(i: int) -> tuple[int, pb.Event]:
    """(log offset, event), as a snapshot holds them."""
    return (
        i * 3,
        pb.Event(
            commit_time_ms=T0 + i,
            principal="User:admin",
            request_id=f"req-{i}",
            client_quota=pb.ClientQuotaRecord(
                entity=[pb.EntityData(entity_type="user", entity_name=f"user-{i}")],
                key="producer_byte_rate",
                value=1000.0 + i,
            ),
        ),
    )


def header(end_offset: int = 300) -> pb.SnapshotHeader:
    return pb.SnapshotHeader(
        end_offset=end_offset,
        last_commit_time_ms=T0 + 99,
        applied_requests=[pb.AppliedRequest(request_id="req-98", first_offset=294, last_offset=297)],
    )


def test_round_trip(tmp_path: Path):
    entries = [entry(i) for i in range(100)]
    given = header()
    path = write_snapshot(tmp_path, given, iter(entries), entries_per_frame=7)
    assert path == tmp_path / "00000000000000000300.snapshot" == tmp_path / snapshot_name(300)
    got_header, got = read_snapshot(path)
    assert list(got) == entries
    assert got_header.version == SNAPSHOT_VERSION and got_header.entry_count == 100
    expected = pb.SnapshotHeader()
    expected.CopyFrom(given)
    expected.version, expected.entry_count = 1, 100
    assert got_header == expected
    assert given.entry_count == 0 and given.version == 0  # the caller's header is not changed
    same_header, batches = read_snapshot_batches(path)
    assert same_header == expected and [len(b.kind) for b in batches] == [7] * 14 + [2]


def test_columns_writer_writes_the_same_bytes(tmp_path: Path):
    """Entries handed over already as columns (one batch a frame) give the file the event writer gives."""
    entries = [entry(i) for i in range(100)]
    (tmp_path / "a").mkdir()
    by_events = write_snapshot(tmp_path / "a", header(), entries, entries_per_frame=7)
    batches = [
        pb.EventColumns.FromString(
            encode_events([e for _, e in entries[i : i + 7]], [o for o, _ in entries[i : i + 7]])
        )
        for i in range(0, 100, 7)
    ]
    (tmp_path / "b").mkdir()
    by_columns = write_snapshot_columns(tmp_path / "b", header(), [*batches, pb.EventColumns()])
    assert by_columns.read_bytes() == by_events.read_bytes()
    assert list(read_snapshot(by_columns)[1]) == entries
    with pytest.raises(ValueError, match="offsets for"):
        bad = pb.EventColumns.FromString(encode_events([entries[0][1]]))  # no offset column
        write_snapshot_columns(tmp_path / "b", header(), [bad])


def test_frames_are_as_documented(tmp_path: Path):
    path = write_snapshot(tmp_path, header(), [entry(i) for i in range(10)], entries_per_frame=4)
    data = path.read_bytes()
    frames = list(iter_frames(data))
    assert [(f.base_offset, f.record_count) for f in frames] == [(0, 1), (1, 4), (5, 4), (9, 2)]
    assert [f.max_commit_time_ms for f in frames] == [T0 + 99, T0 + 3, T0 + 7, T0 + 9]
    assert decode_message(data, frames[0], pb.SnapshotHeader).entry_count == 10
    assert list(decode_message(data, frames[3], pb.EventColumns).offset) == [24, 27]


def test_empty_snapshot(tmp_path: Path):
    path = write_snapshot(tmp_path, pb.SnapshotHeader(end_offset=0), [])
    got_header, got = read_snapshot(path)
    assert got_header.entry_count == 0 and got_header.end_offset == 0 and list(got) == []


def test_rewrite_replaces_and_leaves_no_temporary_file(tmp_path: Path):
    write_snapshot(tmp_path, header(), [entry(1)])
    path = write_snapshot(tmp_path, header(), [entry(2), entry(3)], fsync=False)
    assert [e for e in read_snapshot(path)[1]] == [entry(2), entry(3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_bad_arguments(tmp_path: Path):
    with pytest.raises(ValueError, match="entries_per_frame"):
        write_snapshot(tmp_path, header(), [], entries_per_frame=0)
    with pytest.raises(ValueError, match="version 2"):
        write_snapshot(tmp_path, pb.SnapshotHeader(version=2), [])
    with pytest.raises(ValueError, match="end_offset"):
        write_snapshot(tmp_path, pb.SnapshotHeader(end_offset=-1), [])
    with pytest.raises(TypeError):
        write_snapshot(tmp_path, header(), [entry(1), "x"])  # type: ignore[list-item]
    assert list(tmp_path.iterdir()) == []


def test_list_snapshots_sorts_and_skips_other_files(tmp_path: Path):
    with EventLog.open(tmp_path) as log:  # snapshots live beside the segments
        log.append([entry(0)[1]])
        for end in (120, 7, 1000):
            write_snapshot(tmp_path, header(end), [entry(1)])
    (tmp_path / ".00000000000000002000.snapshot.tmp-1a2b3c4d").write_bytes(b"half written")
    (tmp_path / "00000000000000003000.snapshot.torn-5").write_bytes(b"")
    (tmp_path / "12.snapshot").write_bytes(b"")
    (tmp_path / "00000000000000004000.snapshot").mkdir()
    assert list_snapshots(tmp_path) == [(e, tmp_path / snapshot_name(e)) for e in (7, 120, 1000)]
    assert list_snapshots(tmp_path / "missing") == []
    with EventLog.open(tmp_path) as log:  # and the log ignores them
        assert log.end_offset == 1


# --- refusals ------------------------------------------------------------------------------------------
def refused(path: Path, position: int, match: str) -> CorruptSnapshotError:
    with pytest.raises(CorruptSnapshotError, match=match) as info:
        read_snapshot(path)
    error = info.value
    assert isinstance(error, EventLogError)
    assert (error.path, error.position) == (str(path), position)
    assert str(error).startswith(f"{path}: corrupt snapshot at byte {position}: ")
    return error


def test_every_truncation_is_refused(tmp_path: Path):
    path = write_snapshot(tmp_path, header(), [entry(i) for i in range(20)], entries_per_frame=8)
    data = path.read_bytes()
    frames = list(iter_frames(data))
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        if cut == 0:
            refused(path, 0, "empty file")
        elif cut in [f.position for f in frames]:  # whole frames missing: the count does not add up
            refused(path, cut, "header says 20 entries, the file holds")
        else:
            frame = [f for f in frames if f.position < cut][-1]
            refused(path, frame.position, "bytes left|runs past the end")


def test_every_flipped_byte_is_refused(tmp_path: Path):
    path = write_snapshot(tmp_path, header(), [entry(i) for i in range(6)], entries_per_frame=4)
    data = path.read_bytes()
    frames = list(iter_frames(data))
    for i in range(0, len(data), 3):
        damaged = bytearray(data)
        damaged[i] ^= 1 << (i % 8)
        path.write_bytes(bytes(damaged))
        frame = [f for f in frames if f.position <= i][-1]
        refused(path, frame.position, "mismatch|magic|version")


def test_wrong_name_for_the_end_offset(tmp_path: Path):
    path = write_snapshot(tmp_path, header(300), [entry(1)])
    moved = path.rename(tmp_path / snapshot_name(301))
    refused(moved, 0, "header end_offset 300 does not match the file name \\(301\\)")
    odd = moved.rename(tmp_path / "snapshot-300.snapshot")
    refused(odd, 0, "not a snapshot file name")


def forge_file(path: Path, frames: list[bytes]) -> Path:
    path.write_bytes(b"".join(frames))
    return path


def header_frame(h: pb.SnapshotHeader, count: int = 1) -> bytes:
    return encode_frame(h.SerializeToString(), base_offset=0, record_count=count, max_commit_time_ms=0)


def batch_frame(entries: list[tuple[int, pb.Event]], base: int, count: int | None = None) -> bytes:
    raw = encode_events([e for _, e in entries], [o for o, _ in entries])
    return encode_frame(raw, base_offset=base, record_count=count or len(entries), max_commit_time_ms=0)


def test_crc_valid_files_that_do_not_add_up(tmp_path: Path):
    name = tmp_path / snapshot_name(5)
    good = pb.SnapshotHeader(version=1, end_offset=5, entry_count=2)
    first = header_frame(good)
    forge_file(name, [first, batch_frame([entry(1), entry(2)], 1), batch_frame([entry(3)], 3)])
    refused(name, os.path.getsize(name), "header says 2 entries, the file holds 3")
    forge_file(name, [first, batch_frame([entry(1)], 2)])
    refused(name, len(first), "frame base_offset 2, expected 1")
    forge_file(name, [first, batch_frame([entry(1)], 1, count=2)])
    refused(name, len(first), "frame says 2 entries, payload holds 1 events")
    forge_file(name, [header_frame(good, count=2)])
    refused(name, 0, "header frame has record_count 2")
    forge_file(name, [header_frame(pb.SnapshotHeader(version=2, end_offset=5))])
    refused(name, 0, "unsupported snapshot version 2")
    forge_file(name, [header_frame(pb.SnapshotHeader(end_offset=5))])
    refused(name, 0, "unsupported snapshot version 0")
    raw = b"\xff\xff"
    head = struct.pack(">BBBBIqIqI", 0xE7, 1, 0, 0, len(raw), 0, 1, 0, crc32c.crc32c(raw))
    forge_file(name, [head + struct.pack(">I", crc32c.crc32c(head)) + raw])
    refused(name, 0, "does not parse as quotaplane")
    assert FRAME_HEADER_SIZE == 36


def test_error_pickles():
    error = pickle.loads(pickle.dumps(CorruptSnapshotError("/x/1.snapshot", 42, "why")))
    assert (error.path, error.position, error.reason) == ("/x/1.snapshot", 42, "why")
