"""Recovery: torn tails at every byte, zero-filled tails, corruption anywhere else, and kill -9 of real writers."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import crc32c
import pytest

from quotaplane.config import CorruptLogError, EventLog
from quotaplane.config.logformat import FRAME_HEADER_SIZE, FrameHeader, iter_frames, segment_name
from quotaplane.v1 import config_events_pb2 as pb

REPO = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000


def event(i: int) -> pb.Event:
    return pb.Event(
        commit_time_ms=T0 + i,
        principal="User:admin",
        request_id=f"req-{i}",
        client_quota=pb.ClientQuotaRecord(
            entity=[pb.EntityData(entity_type="client-id", entity_name=f"client-{i}")],
            key="consumer_byte_rate",
            value=2048.0 * i,
        ),
    )


def events(n: int, start: int = 0) -> list[pb.Event]:
    return [event(i) for i in range(start, start + n)]


def build_log(directory: Path, groups: list[int], segment_bytes: int = 1 << 20) -> list[Path]:
    """A closed log with one frame per group of that many events; its segment files."""
    with EventLog.open(directory, segment_bytes=segment_bytes) as log:
        start = 0
        for n in groups:
            log.append(events(n, start))
            start += n
        return log.segments()


def frames_of(path: Path) -> list[FrameHeader]:
    return list(iter_frames(path.read_bytes()))


def all_events(directory: Path) -> list[pb.Event]:
    with EventLog.open(directory, read_only=True) as log:
        return [e for _, e in log.read()]


# --- torn tails ----------------------------------------------------------------------------------------
def test_truncation_at_every_byte_of_the_last_frame_is_recovered(tmp_path: Path):
    (segment,) = build_log(tmp_path / "pristine", [3, 2, 5])
    data = segment.read_bytes()
    last = frames_of(segment)[-1]
    assert last.end == len(data) and last.size > 100
    for cut in range(last.position, len(data)):
        directory = tmp_path / f"cut-{cut}"
        directory.mkdir()
        path = directory / segment.name
        path.write_bytes(data[:cut])
        with EventLog.open(directory) as log:
            assert log.end_offset == 5, cut  # the two complete frames
            assert path.stat().st_size == last.position
            torn = sorted(directory.glob("*.torn-*"))
            if cut == last.position:
                assert torn == []  # nothing was cut: the file simply ends after frame 2
            else:
                assert [p.name for p in torn] == [f"{segment.name}.torn-{last.position}"]
                assert torn[0].read_bytes() == data[last.position : cut]
            assert log.append(events(1, 5)) == 5
        assert all_events(directory) == events(6)


def test_the_cut_is_logged_with_file_position_and_size(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    (segment,) = build_log(tmp_path, [2, 2])
    data = segment.read_bytes()
    last = frames_of(segment)[-1]
    segment.write_bytes(data[:-7])
    with caplog.at_level(logging.WARNING, logger="quotaplane.config"), EventLog.open(tmp_path):
        pass
    (record,) = caplog.records
    message = record.getMessage()
    assert str(segment) in message and f"at byte {last.position}" in message
    assert f"torn tail of {last.size - 7} bytes" in message and "runs past the end" in message


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("zeros after the last frame", lambda data, last: data + bytes(4096)),
        ("a few zeros after the last frame", lambda data, last: data + bytes(20)),
        ("zeros instead of the last frame", lambda data, last: data[: last.position] + bytes(last.size)),
        (
            "zeros instead of the last payload",
            lambda data, last: data[: last.payload_start] + bytes(last.payload_length),
        ),
        (
            "the last header cut by zeros",
            lambda data, last: data[: last.position + 11] + bytes(last.size - 11),
        ),
    ],
)
def test_zero_filled_tails_are_torn(tmp_path: Path, name: str, damage):
    (segment,) = build_log(tmp_path, [2, 3, 4])
    data = segment.read_bytes()
    frames = frames_of(segment)
    last = frames[-1]
    damaged = damage(data, last)
    segment.write_bytes(damaged)
    keeps_last = damaged.startswith(data)
    with EventLog.open(tmp_path) as log:
        assert log.end_offset == (9 if keeps_last else 5), name
        cut_at = len(data) if keeps_last else last.position
        assert segment.stat().st_size == cut_at
        (torn,) = tmp_path.glob("*.torn-*")
        assert torn.name.endswith(f".torn-{cut_at}") and torn.read_bytes() == damaged[cut_at:]
        log.append(events(1, log.end_offset))


def test_a_damaged_last_payload_reads_as_a_torn_write(tmp_path: Path):
    """Documented rule: a complete last frame whose payload fails its CRC is cut (and kept), not refused."""
    (segment,) = build_log(tmp_path, [2, 3])
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0x40
    segment.write_bytes(bytes(data))
    with EventLog.open(tmp_path) as log:
        assert log.end_offset == 2
    assert len(list(tmp_path.glob("*.torn-*"))) == 1


def test_repeated_cuts_at_one_place_keep_every_copy(tmp_path: Path):
    (segment,) = build_log(tmp_path, [2, 3])
    data = segment.read_bytes()
    position = frames_of(segment)[-1].position
    for tail in (b"\xe7\x01", b"\xe7\x01\x01"):
        segment.write_bytes(data[:position] + tail)
        EventLog.open(tmp_path).close()
    assert (tmp_path / f"{segment.name}.torn-{position}").read_bytes() == b"\xe7\x01"
    assert (tmp_path / f"{segment.name}.torn-{position}.1").read_bytes() == b"\xe7\x01\x01"


def test_read_only_open_stops_at_a_torn_tail_and_changes_nothing(tmp_path: Path):
    (segment,) = build_log(tmp_path, [2, 3])
    data = segment.read_bytes()[:-4]
    segment.write_bytes(data)
    with EventLog.open(tmp_path, read_only=True) as log:
        assert log.end_offset == 2 and [e for _, e in log.read()] == events(2)
    assert segment.read_bytes() == data and list(tmp_path.glob("*.torn-*")) == []


def test_an_empty_last_segment_is_fine(tmp_path: Path):
    build_log(tmp_path, [2, 3])
    (tmp_path / segment_name(5)).touch()  # a crash right after creating the next segment
    with EventLog.open(tmp_path, segment_bytes=1) as log:
        assert log.end_offset == 5 and len(log.segments()) == 2
        assert log.append(events(1, 5)) == 5
        assert [h.base_offset for h in frames_of(tmp_path / segment_name(5))] == [5]
    assert all_events(tmp_path) == events(6)


def test_a_torn_first_frame_of_the_last_segment_leaves_it_empty(tmp_path: Path):
    segments = build_log(tmp_path, [2, 3], segment_bytes=1)
    assert len(segments) == 2
    segments[-1].write_bytes(segments[-1].read_bytes()[:10])
    with EventLog.open(tmp_path, segment_bytes=1) as log:
        assert log.end_offset == 2 and segments[-1].stat().st_size == 0
        assert log.append(events(3, 2)) == 4
    assert all_events(tmp_path) == events(5)


# --- corruption ----------------------------------------------------------------------------------------
def assert_refused(
    directory: Path, path: Path, position: int, match: str | None = None, *, full_recovery: bool = False
) -> CorruptLogError:
    before = {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file() and p.name != ".lock"}
    with pytest.raises(CorruptLogError, match=match) as info:
        EventLog.open(directory, full_recovery=full_recovery)
    error = info.value
    assert error.path == str(path) and error.position == position
    assert str(error).startswith(f"{path}: corrupt event log segment at byte {position}")
    after = {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file() and p.name != ".lock"}
    assert after == before  # nothing cut, nothing copied
    return error


def test_every_flipped_byte_of_a_middle_frame_is_corruption(tmp_path: Path):
    (segment,) = build_log(tmp_path, [2, 4, 3])
    data = segment.read_bytes()
    middle = frames_of(segment)[1]
    for i in range(middle.position, middle.end):
        damaged = bytearray(data)
        damaged[i] ^= 1 << (i % 8)
        segment.write_bytes(bytes(damaged))
        error = assert_refused(tmp_path, segment, middle.position)
        assert error.offset == 2
        with pytest.raises(CorruptLogError):
            EventLog.open(tmp_path, read_only=True)
    segment.write_bytes(data)
    assert all_events(tmp_path) == events(9)


def test_a_damaged_last_header_followed_by_its_payload_is_corruption(tmp_path: Path):
    (segment,) = build_log(tmp_path, [2, 3])
    data = bytearray(segment.read_bytes())
    last = frames_of(segment)[-1]
    data[last.position + 5] ^= 0x01  # the payload length: the header CRC catches it
    segment.write_bytes(bytes(data))
    assert_refused(tmp_path, segment, last.position, "header CRC32C mismatch")


def test_an_intact_header_of_an_unknown_version_is_never_a_torn_tail(tmp_path: Path):
    (segment,) = build_log(tmp_path, [2])
    head = struct.pack(">BBBBIqIqI", 0xE7, 2, 0, 0, 4, 2, 1, T0, crc32c.crc32c(bytes(4)))
    segment.write_bytes(segment.read_bytes() + head + struct.pack(">I", crc32c.crc32c(head)) + bytes(4))
    assert_refused(tmp_path, segment, frames_of_prefix(segment), "unsupported frame version 2")


def frames_of_prefix(segment: Path) -> int:
    """Where the first frame that does not verify starts."""
    data = segment.read_bytes()
    position = 0
    try:
        for header in iter_frames(data):
            position = header.end
    except ValueError:
        pass
    return position


@pytest.mark.parametrize("where", ["header", "payload", "truncated"])
def test_damage_in_a_segment_that_is_not_the_last_is_corruption(tmp_path: Path, where: str):
    segments = build_log(tmp_path, [2, 3, 4, 1], segment_bytes=200)
    assert len(segments) >= 2
    first = segments[0]
    frames = frames_of(first)
    last = frames[-1]
    data = bytearray(first.read_bytes())
    if where == "header":
        data[last.position + 20] ^= 0x02
    elif where == "payload":
        data[-1] ^= 0x02
    else:
        del data[-1:]
    first.write_bytes(bytes(data))
    if where == "payload":
        # Size and frame headers unchanged: the recovery point checkpoint vouches for the segment, so the
        # open does not read it; the damage is found when the frame is read (as Kafka's fetch finds a
        # bad batch CRC), and by an open that verifies everything.
        with EventLog.open(tmp_path) as log:
            assert log.end_offset == 10
            assert [o for o, _ in log.read(0, last.base_offset)] == list(range(last.base_offset))
            with pytest.raises(CorruptLogError, match="payload CRC32C mismatch") as info:
                list(log.read(last.base_offset))
            assert info.value.path == str(first) and info.value.position == last.position
    error = assert_refused(tmp_path, first, last.position, "not the last segment", full_recovery=where == "payload")
    assert error.offset == last.base_offset


def test_an_offset_gap_between_segments_is_corruption(tmp_path: Path):
    segments = build_log(tmp_path, [2, 3, 4, 1], segment_bytes=1)
    segments[1].unlink()
    assert_refused(tmp_path, segments[2], 0, "offset gap: the previous segment ends at offset 2")


def test_a_segment_name_that_is_not_its_first_offset_is_corruption(tmp_path: Path):
    segments = build_log(tmp_path, [2, 3], segment_bytes=1)
    wrong = segments[1].with_name(segment_name(7))
    segments[1].rename(wrong)
    assert_refused(tmp_path, wrong, 0, "offset gap")
    only = tmp_path / "only"
    (segment,) = build_log(only, [2])
    moved = segment.with_name(segment_name(4))
    segment.rename(moved)
    assert_refused(only, moved, 0, "frame base offset 0, but the segment's name says 4")


def test_an_empty_segment_before_the_last_is_corruption(tmp_path: Path):
    segments = build_log(tmp_path, [2, 3], segment_bytes=1)
    segments[1].write_bytes(b"")  # segment 2 is empty, and segment 5 follows it
    (tmp_path / segment_name(5)).write_bytes(b"")
    assert_refused(tmp_path, segments[1], 0, "empty segment before the last one")


# --- real processes killed with SIGKILL ----------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import hashlib, os, sys, threading
    from quotaplane.config import EventLog
    from quotaplane.v1 import config_events_pb2 as pb

    directory, side, run, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    log = EventLog.open(directory, segment_bytes=16 * 1024)
    side_fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def make(t, j):
        n = 1 + (t + j) % 3
        return [
            pb.Event(commit_time_ms=j, principal=f"User:r{run}t{t}", request_id=f"{run}-{t}-{j}-{k}",
                     config=pb.ConfigRecord(name="n" * (k * 7 + j % 13), value=str(j)))
            for k in range(n)
        ]

    def worker(t):
        j = 0
        while True:
            batch = make(t, j)
            last = log.append(batch)  # acknowledged: durable
            digest = hashlib.sha256(b"".join(e.SerializeToString(deterministic=True) for e in batch)).hexdigest()
            os.write(side_fd, f"{run} {t} {last} {len(batch)} {digest}\\n".encode())  # then recorded
            j += 1

    from quotaplane.config import _log
    real_write = os.write
    writes_left = [int(mode.split(":")[1]) if mode.startswith("tear:") else -1]

    def tearing_write(fd, data):
        # A real torn write: half of a frame reaches the file, then the process dies.
        if fd == log._fd and writes_left[0] >= 0:
            writes_left[0] -= 1
            if writes_left[0] < 0:
                real_write(fd, bytes(data)[: len(data) // 2])
                os.kill(os.getpid(), 9)
        return real_write(fd, data)

    _log.os.write = tearing_write  # the os module itself: every os.write of this process goes through it
    if mode == "torn":
        for j in range(20):
            log.append(make(0, j))
        writes_left[0] = 0
        print("ready", flush=True)
        log.append(make(0, 99) * 10)
        raise SystemExit("not killed")
    print("ready", flush=True)  # before any thread can tear a write and die
    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(4)]
    for th in threads:
        th.start()
    threads[0].join()
    """
)


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def run_child(directory: Path, side: Path, run: int, mode: str, kill_after_s: float | None) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), str(side), str(run), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == "ready\n", child.stderr.read() if child.stderr else line
        if kill_after_s is not None:
            time.sleep(kill_after_s)
            child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        child.kill()
        _, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, err


def acknowledged(side: Path) -> list[tuple[str, int, int, str]]:
    """(writer, last offset, count, digest) of every complete side record, in the order written."""
    out = []
    if not side.exists():
        return out
    for line in side.read_text().split("\n")[:-1]:  # a line cut by the kill has no newline
        run, t, last, n, digest = line.split(" ")
        out.append((f"{run}/{t}", int(last), int(n), digest))
    return out


def check_acknowledged(directory: Path, side: Path) -> int:
    acks = acknowledged(side)
    with EventLog.open(directory, segment_bytes=16 * 1024) as log:
        stored = [e for _, e in log.read()]
        assert log.start_offset == 0 and len(stored) == log.end_offset
        last_by_writer: dict[str, int] = {}
        for writer, last, n, digest in acks:
            batch = stored[last - n + 1 : last + 1]
            assert len(batch) == n, (writer, last)
            got = hashlib.sha256(b"".join(e.SerializeToString(deterministic=True) for e in batch)).hexdigest()
            assert got == digest, (writer, last)
            assert last > last_by_writer.get(writer, -1)  # each writer's acks in its order
            last_by_writer[writer] = last
        end = log.end_offset
        assert (
            log.append(
                [
                    pb.Event(
                        principal="User:parent",
                        request_id=f"after-{end}",
                        client_metrics=pb.ClientMetricsRecord(name="x"),
                    )
                ]
            )
            == end
        )
    return len(acks)


def test_sigkill_at_random_moments_loses_no_acknowledged_append(tmp_path: Path):
    rng = random.Random(714)
    directory = tmp_path / "log"
    side = tmp_path / "acks"
    started = time.monotonic()
    counts = []
    tears = 0
    for run in range(25):
        if run % 3 == 2:  # the child tears its own write after a random number of frames, and dies
            run_child(directory, side, run, f"tear:{rng.randrange(1, 150)}", kill_after_s=None)
            tears += 1
        else:  # killed from outside, wherever it is
            run_child(directory, side, run, "loop", kill_after_s=rng.uniform(0.0, 0.12))
        counts.append(check_acknowledged(directory, side))
    assert counts[-1] > 25  # the children did acknowledge appends
    assert len(list(directory.glob("*.log"))) > 1  # and rolled segments
    assert len(list(directory.glob("*.torn-*"))) >= tears  # every torn write was cut (and kept)
    assert time.monotonic() - started < 60


def test_sigkill_in_the_middle_of_a_frame_write_leaves_a_torn_tail(tmp_path: Path):
    directory = tmp_path / "log"
    run_child(directory, tmp_path / "acks", 0, "torn", kill_after_s=None)
    (segment,) = directory.glob("*.log")
    size_before = segment.stat().st_size
    with EventLog.open(directory) as log:
        assert log.end_offset == sum(1 + j % 3 for j in range(20))
        (torn,) = directory.glob("*.torn-*")
        assert torn.name == f"{segment.name}.torn-{segment.stat().st_size}"
        assert segment.stat().st_size + torn.stat().st_size == size_before
        assert torn.stat().st_size > FRAME_HEADER_SIZE  # half of a frame of 30 events
        log.append([event(0)])
