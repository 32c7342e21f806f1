"""A shard's usage checkpoint: its client-quota usage windows on disk every second, read back at a restart.

Without it a shard that Ray restarts answers as if every tenant it owns had been idle, so each may send up
to a whole quota window (11 s by default) of extra traffic. With it the restarted shard starts from the
windows as they were at the last checkpoint: what is forgiven is only what was recorded after it (at most
``interval_s`` of traffic plus the restart's own time, during which nothing is admitted by this shard).

**File.** ``usage-checkpoint.bin`` in the shard's data directory: a 22-byte header (magic ``QPUC``, format
version, the wall-clock ms it was written, payload length, CRC-32 of the payload), then the payload: the
core's ``UsageSnapshot.to_bytes`` (its own versioned header, then the sample columns as raw numbers: exact,
and ~10x cheaper to write and read than JSON numbers). Written to a
temporary file and renamed over the old one, so a reader sees a whole old file or a whole new one. It is
not fsynced by default: a checkpoint lost in an OS crash only costs the over-admission it would have
saved, and a checkpoint older than a quota window is worth nothing anyway.

**Load.** At start, after the config replay: a file older than the largest quota window (``samples *
window``) is ignored (every sample in it is obsolete), and a corrupt or foreign one is ignored with a
warning, never a crash loop. ``restored_age_ms`` (how old the restored windows were) is what the metrics
endpoint exports as the over-admission window of the restart.

**Writer.** A daemon thread; the snapshot (``export_usage``: a copy of the samples into number arrays, compiled
where the core is) takes the shard's serving lock for one part of the sensors at a time, the encoding and the
write run outside it, so a checkpoint holds the shard's queue for a part's copy (well under 1 ms), not for every
sensor's (18-21 ms at 9,000 quota sensors). The payload is written as the snapshot's chunks (``to_chunks``: no
copy of its megabytes to join them; the CRC summed chunk by chunk), each sensor's tags encoded once and kept
(``TagsMemo``). Each sensor's samples are copied whole; the sensors are not one cut, which a
restart does not need: the file's time is taken before the copy, so every sample in it is at least that new
and the age a restart reports is never less than the traffic it forgives.

**Hand-over.** Between two parts, and between two parts of the header's encoding, the writer sleeps
``HANDOFF_S``, so a serving thread that waits goes first. CPython's locks are not fair: a thread blocked on
the serving lock is woken when the writer releases it, but the writer, still holding the GIL, takes the lock
back for its next part before the woken thread runs, so a batch that arrived during a checkpoint waited for
the whole copy (50-90 ms every second at 8,000 quota sensors, measured in a shard under a steady load: the
p99 of its decisions 55-65 ms against 5.7 ms without checkpoints; with the hand-over 6.0). A checkpoint now
takes longer (the shard serves between its parts) and costs the same CPU.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from quotaplane.durable import replace_file
from quotaplane.gc_pause import gc_paused
from quotaplane.quota import UsageSnapshot

__all__ = [
    "CHECKPOINT_FILE",
    "CHECKPOINT_FORMAT",
    "HANDOFF_S",
    "UsageCheckpointer",
    "checkpoint_chunks",
    "decode_checkpoint",
    "encode_checkpoint",
    "hand_over",
    "load_checkpoint",
    "write_checkpoint",
]

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "usage-checkpoint.bin"
#: Version of the file's framing (the payload carries the core's own state version).
CHECKPOINT_FORMAT = 1
_MAGIC = b"QPUC"
_HEADER = struct.Struct(">4sHqII")  # magic, format, written_ms, payload length, crc32
#: How long the writer pauses after each part of its work (``Hand-over`` above): long enough for a woken serving
#: thread to take the lock (its wake-up is tens of microseconds), short beside a checkpoint's interval.
HANDOFF_S = 0.0005
#: temporary files never share a name, so two writers (the thread and a final write) never mix their bytes


def encode_checkpoint(payload: bytes, written_ms: int) -> bytes:
    """Header and ``payload`` (a ``UsageSnapshot``'s bytes) written at ``written_ms``."""
    return b"".join(checkpoint_chunks([payload], written_ms))


def checkpoint_chunks(payload: Sequence[bytes | memoryview], written_ms: int) -> list[bytes | memoryview]:
    """``encode_checkpoint`` of the payload ``b"".join(payload)`` as chunks, without joining them (the header
    first): its length and CRC are summed chunk by chunk, and the file is written from the chunks. Why: a
    checkpoint's payload is megabytes of the snapshot's own arrays, and each copy of it held the GIL."""
    length = crc = 0
    for chunk in payload:
        length += memoryview(chunk).nbytes
        crc = zlib.crc32(chunk, crc)
    return [_HEADER.pack(_MAGIC, CHECKPOINT_FORMAT, written_ms, length, crc), *payload]


def decode_checkpoint(data: bytes) -> tuple[int, bytes]:
    """``(written_ms, payload)`` of an encoded checkpoint; ValueError if it is not a whole, intact one."""
    if len(data) < _HEADER.size:
        raise ValueError(f"checkpoint of {len(data)} bytes is shorter than its header")
    magic, version, written_ms, length, crc = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError("not a usage checkpoint (bad magic)")
    if version != CHECKPOINT_FORMAT:
        raise ValueError(f"usage checkpoint format {version}, this shard reads {CHECKPOINT_FORMAT}")
    payload = data[_HEADER.size :]
    if len(payload) != length:
        raise ValueError(f"usage checkpoint payload is {len(payload)} bytes, header says {length}")
    if zlib.crc32(payload) != crc:
        raise ValueError("usage checkpoint CRC mismatch")
    return written_ms, payload


def write_checkpoint(path: Path, data: bytes | Sequence[bytes | memoryview], *, fsync: bool = False) -> None:
    """Replace ``path`` with ``data`` (bytes, or chunks) atomically (``durable.replace_file``); its directory made
    if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, data, fsync=fsync)


def load_checkpoint(path: Path, now_ms: int, max_age_ms: int) -> tuple[int, UsageSnapshot] | None:
    """``(age_ms, snapshot)`` of the checkpoint at ``path``, or None when there is none, it is ``max_age_ms``
    old or more (all its samples are obsolete), or it is unreadable (logged: never a crash loop)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("usage checkpoint %s unreadable, ignored: %s", path, exc)
        return None
    try:
        written_ms, payload = decode_checkpoint(data)
        snapshot = UsageSnapshot.from_bytes(payload)
    except ValueError as exc:
        logger.warning("usage checkpoint %s ignored: %s", path, exc)
        return None
    age_ms = now_ms - written_ms
    if age_ms >= max_age_ms:
        logger.info("usage checkpoint %s is %d ms old (>= %d ms): ignored", path, age_ms, max_age_ms)
        return None
    return max(age_ms, 0), snapshot


def hand_over() -> None:
    """Let a thread waiting for the serving lock or the GIL go first (the writer's pause between two parts)."""
    time.sleep(HANDOFF_S)


class UsageCheckpointer:
    """Writes ``to_bytes(snapshot(hold), hand_over)`` (the payload's bytes, or its chunks) to ``path`` every
    ``interval_s`` (start to start) from a daemon thread: ``snapshot`` (the copy) enters ``hold()`` (``lock``,
    timed, then a hand-over) around each part it copies; ``to_bytes`` (which calls ``hand_over`` between the parts
    of its encoding) and the write run outside it."""

    def __init__(
        self,
        path: Path,
        snapshot: Callable[[Callable[[], Any]], Any],
        to_bytes: Callable[[Any, Callable[[], None]], bytes | Sequence[bytes | memoryview]],
        lock: Any,
        clock_ms: Callable[[], int],
        *,
        interval_s: float = 1.0,
        fsync: bool = False,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"checkpoint interval must be > 0 s, got {interval_s!r}")
        self.path = path
        self.interval_s = interval_s
        self.fsync = fsync
        self._snapshot = snapshot
        self._to_bytes = to_bytes
        self._lock = lock
        self._clock_ms = clock_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="usage-checkpoint", daemon=True)
        self.writes = 0
        self.failures = 0
        self.last_written_ms: int | None = None
        self.last_bytes = 0
        #: time the last checkpoint's copy took (its parts and the serving between them), its longest hold of
        #: the serving lock, and the whole write
        self.last_export_ms = 0.0
        self.last_longest_hold_ms = 0.0
        self.last_write_ms = 0.0

    def start(self) -> None:
        self._thread.start()

    def write_now(self, *, unless_stopped: bool = False) -> None:
        """One checkpoint: copy under the lock, encode and write outside it (the thread's write is dropped
        if ``stop`` came meanwhile: the final one is newer)."""
        started = time.perf_counter()
        # The copy and its encoding make thousands of short-lived objects; a collection meanwhile would promote
        # them to the oldest generation, and the full collections that follow (tens of ms in a shard's heap)
        # stall every decision: measured as a half-load p99 of 73-87 ms instead of 13-15 ms with one shard.
        # With the collector paused they are freed by reference counting before any collection runs.
        hold = _TimedHold(self._lock)
        with gc_paused():
            written_ms = self._clock_ms()  # before the copy: every sample copied is at least this new
            snapshot = self._snapshot(hold)
            if unless_stopped and self._stop.is_set():
                return
            exported = time.perf_counter()
            payload = self._to_bytes(snapshot, hand_over)
            del snapshot  # the chunks may be views of its arrays: they keep what they need alive
        chunks = checkpoint_chunks([payload] if isinstance(payload, bytes) else payload, written_ms)
        write_checkpoint(self.path, chunks, fsync=self.fsync)
        self.last_export_ms = (exported - started) * 1000
        self.last_longest_hold_ms = hold.longest_s * 1000
        self.last_write_ms = (time.perf_counter() - started) * 1000
        self.last_written_ms = written_ms
        self.last_bytes = sum(memoryview(chunk).nbytes for chunk in chunks)
        self.writes += 1

    def _run(self) -> None:
        took_s = 0.0
        # start to start: a checkpoint that serves between its parts takes a fair part of a second, and the
        # traffic a restart forgives is bounded by the interval, not the interval plus the write
        while not self._stop.wait(max(0.0, self.interval_s - took_s)):
            started = time.monotonic()
            try:
                self.write_now(unless_stopped=True)
            except Exception:  # a full disk must not stop the shard; the next interval tries again
                self.failures += 1
                logger.exception("usage checkpoint to %s failed", self.path)
            took_s = time.monotonic() - started

    def stop(self, *, final: bool = True) -> None:
        """Stop the thread (it ends at its next wake-up: not joined, since the caller may hold the lock the
        thread waits for); with ``final`` write one last checkpoint (a graceful stop loses nothing)."""
        self._stop.set()
        if final:
            try:
                self.write_now()
            except Exception:
                self.failures += 1
                logger.exception("final usage checkpoint to %s failed", self.path)

    def stats(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "writes": self.writes,
            "failures": self.failures,
            "last_written_ms": self.last_written_ms,
            "last_bytes": self.last_bytes,
            "last_export_ms": round(self.last_export_ms, 3),
            "last_longest_hold_ms": round(self.last_longest_hold_ms, 3),
            "last_write_ms": round(self.last_write_ms, 3),
        }


class _TimedHold:
    """``hold()`` for ``export_usage``: enters ``lock``, keeps the longest time it was held, and hands the lock
    over after each part (``hand_over``: a server waiting for it takes it before the next part)."""

    __slots__ = ("_entered", "_lock", "longest_s")

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self._entered = 0.0
        self.longest_s = 0.0

    def __call__(self) -> _TimedHold:
        return self

    def __enter__(self) -> None:
        self._lock.acquire()
        self._entered = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        held = time.perf_counter() - self._entered
        self._lock.release()
        if held > self.longest_s:
            self.longest_s = held
        hand_over()
