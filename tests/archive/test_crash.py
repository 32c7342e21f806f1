"""kill -9 a real writer process mid-write: every flushed record survives, and nothing reads as corrupt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from quotaplane.archive import ArchiveReader, TornTail

REPO = Path(__file__).resolve().parents[2]
FLUSHED = 500

#: The child appends FLUSHED records, flushes and says "flushed". Then, by mode:
#: - "loop": writes forever, batches of 100 records a minute apart (hours and segment files keep
#:   changing, so new segments go through create-then-rename) and says "more" after each flush; the
#:   parent kills it at some point.
#: - "append" / "create": kills itself with SIGKILL in the middle of the next batch's write(), half of
#:   it written: to the open segment ("append"), or to the temporary file of a new segment in a
#:   later hour ("create"). A real torn write, at a known place.
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from quotaplane.archive import ArchiveRecord, ArchiveWriter
    from quotaplane.archive import _writer

    root, flushed, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    t0 = 1_700_000_000_000
    max_segment_bytes = 32 * 1024 if mode == "loop" else 1 << 30
    writer = ArchiveWriter(root, "crash", writer_id="child", max_segment_bytes=max_segment_bytes)
    for i in range(flushed):
        writer.append(ArchiveRecord(t0 + i, {"i": str(i)}, os.urandom(64)))
    writer.flush()
    print("flushed", flush=True)
    i = flushed
    if mode != "loop":
        real_write = os.write

        def torn_write(fd, data):
            real_write(fd, bytes(data[: len(data) // 2]))
            os.kill(os.getpid(), signal.SIGKILL)

        _writer.os.write = torn_write
        step = 1 if mode == "append" else 7_200_000
        for _ in range(100):
            writer.append(ArchiveRecord(t0 + i * step, {"i": str(i)}, os.urandom(256)))
            i += 1
        writer.flush()
        raise SystemExit("not killed")
    while True:
        for _ in range(100):
            writer.append(ArchiveRecord(t0 + i * 60_000, {"i": str(i)}, os.urandom(256)))
            i += 1
        writer.flush()
        print("more", flush=True)
    """
)


def run_child(root: Path, mode: str, flushes_before_kill: int = 0) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), str(FLUSHED), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == "flushed\n", child.stderr.read() if child.stderr else line
        if mode == "loop":
            for _ in range(flushes_before_kill):
                assert child.stdout.readline() == "more\n"
            child.send_signal(signal.SIGKILL)  # while it is writing more
        child.wait(timeout=30)
    finally:
        child.kill()
        child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL


def read_back(root: Path) -> tuple[list[int], list[TornTail]]:
    reader = ArchiveReader(on_torn_tail=lambda tail: None)
    seen = [int(r.labels["i"]) for r in reader.read(root, "crash")]  # raises ArchiveCorruptError on corruption
    return seen, reader.torn_tails


@pytest.mark.parametrize("flushes_before_kill", [0, 1, 7])
def test_sigkill_while_writing_loses_no_flushed_record(tmp_path: Path, flushes_before_kill: int):
    run_child(tmp_path, "loop", flushes_before_kill)
    seen, _ = read_back(tmp_path)
    assert len(seen) >= FLUSHED + 100 * flushes_before_kill
    assert seen == list(range(len(seen)))  # a gapless prefix, in append order


def test_sigkill_mid_append_leaves_a_torn_tail(tmp_path: Path):
    run_child(tmp_path, "append")
    seen, torn = read_back(tmp_path)
    assert seen == list(range(FLUSHED))
    (tail,) = torn
    segment = Path(tail.name)
    assert segment.stat().st_size == tail.offset + tail.length and tail.length > 0


def test_sigkill_mid_segment_creation_leaves_only_a_hidden_file(tmp_path: Path):
    run_child(tmp_path, "create")
    seen, torn = read_back(tmp_path)
    assert seen == list(range(FLUSHED)) and torn == []
    leftovers = [p.name for p in tmp_path.rglob(".*.tmp")]
    assert len(leftovers) == 1 and len(list(tmp_path.rglob("*.seg"))) == 1
