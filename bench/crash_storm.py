"""Crash storm on the config event log: a writer with 16 appender threads killed with SIGKILL, over and over.

Why: ``EventLog.append`` promises that an event is durable once it returns, and recovery at open
promises that the only repair a crash needs is cutting a torn tail of the last segment
(``docs/eventlog-format.md`` §5). One kill (``tests/config/test_log_crash.py``) shows it once; a
storm of kills at random moments (during a frame's ``write``, its ``fdatasync``, a segment roll, the
writer's own open, the threads' start) is what shows it holds wherever a crash lands.

Each round: a **writer** process opens the log (``segment_bytes`` 64 KiB, fsync on, so segments roll
every few rounds) and runs ``--threads`` appender threads, each appending 1 to 3 small client-quota
events at a time (``client_quota_event``, each event named by its request id ``run-thread-seq-k``
so its whole content can be rebuilt from it). After ``append`` returns, the thread writes an **ack**
line (``run thread seq last_offset count crc``) to the round's ack file with one ``write`` on an
``O_APPEND`` descriptor: an ack written is a promise, an ack not yet written is not. The parent
SIGKILLs the writer after a seeded random delay (``--max-delay-ms``), opens the log read-only with
``full_recovery=True`` (timed: what a reopen cost before the recovery point, every frame verified),
then reopens it for writing (timed: the reopen is the recovery, from the recovery point checkpoint)
and checks:

* the reopen from the recovery point ends where the full scan ends (a read-only open stops before a
  torn tail, which the writable open cuts);
* the only change to the directory is the one a torn tail allows: every segment keeps its size
  except the last, which may be cut at a frame boundary, and then exactly one new ``.torn-<p>`` copy
  holds exactly the bytes cut (each cut is counted);
* the log's offsets are contiguous, and it only grew from where the previous check left it;
* every acknowledged append is at its offsets, with its content, contiguous;
* nothing else is there but events some thread submitted in this round, each append whole and each
  thread's appends in its order; a thread has at most one append beyond its last ack (the one in
  flight, or the one acknowledged but not yet reported when the kill came) — never an event no
  thread submitted, never one of a later append.

Writers are forked by a **zygote** process (started once, imports done, single-threaded) so a round
costs a ``fork`` instead of an interpreter start; the parent does the killing. ``--fault-every K``
makes every K-th round die by its own hand at a chosen point instead (the ``os.write`` /
``os.fdatasync`` of the writer process replaced, as ``tests/config/test_log_crash.py`` does: the log
code has no hook of its own): half of a frame written then SIGKILL (a torn frame, certain), SIGKILL
after the frame's write before its fsync, or after its fsync before any ack. External kills rarely tear
a frame (a ``write`` of a few KiB into the page cache is rarely cut by a signal), so these make the
cases that must be repaired certain to occur.

The log keeps growing across rounds (as a live controller's does) until ``--retain-events``, then the
parent deletes the oldest segments (``delete_segments_before``), as retention after a snapshot does,
so the reopen time measures recovery of a log of bounded size rather than of an ever longer one.
Every ``--full-check-every`` rounds and at the end, every retained round is checked again in full.

Output: one JSON object on stdout (``figures.violations`` must be 0; ``violation_examples`` says
what failed). Run: ``.venv/bin/python bench/crash_storm.py [--kills N] [--seed S] [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine

from quotaplane.config._log import EventLog
from quotaplane.config._records import client_quota_event
from quotaplane.v1 import config_events_pb2 as pb

REPO = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000
SEGMENT_BYTES = 64 * 1024
FAULTS = ("tear", "before_fsync", "after_fsync")
_ACK_RE = re.compile(r"(\d+) (\d+) (\d+) (\d+) (\d+) (\d+)")
_RID_RE = re.compile(r"(\d+)-(\d+)-(\d+)-(\d+)")


# --- the workload --------------------------------------------------------------------------------------
def append_size(thread: int, seq: int) -> int:
    """Events in a thread's ``seq``-th append: 1 to 3, so appends of several events must stay contiguous."""
    return 1 + (thread + seq) % 3


def storm_event(run: int, thread: int, seq: int, k: int) -> pb.Event:
    """The ``k``-th event of a thread's ``seq``-th append in round ``run``: all of it follows from the four."""
    event = client_quota_event(
        (("client-id", f"producer-{thread}-{k}"), ("user", f"tenant-{run % 97}")),
        "producer_byte_rate",
        float(1024 * (seq + 1) + k),
    )
    event.commit_time_ms = T0 + run * 100_000 + seq
    event.principal = f"User:storm-{thread}"
    event.request_id = f"{run}-{thread}-{seq}-{k}"
    return event


def storm_append(run: int, thread: int, seq: int) -> list[pb.Event]:
    return [storm_event(run, thread, seq, k) for k in range(append_size(thread, seq))]


def ack_line(run: int, thread: int, seq: int, last: int, count: int) -> bytes:
    body = f"{run} {thread} {seq} {last} {count}"
    return f"{body} {zlib.crc32(body.encode())}\n".encode()


@dataclass(frozen=True, slots=True)
class Ack:
    thread: int
    seq: int
    last: int
    count: int


def read_acks(path: Path, run: int) -> tuple[list[Ack], list[str]]:
    """The complete, well-formed ack lines of ``run`` (a line cut by the kill is not a promise), and any
    error a writer reported (``E ...`` lines)."""
    acks: list[Ack] = []
    errors: list[str] = []
    if not path.exists():
        return acks, errors
    for line in path.read_bytes().split(b"\n")[:-1]:  # the last piece has no newline: not written whole
        text = line.decode("utf-8", "replace")
        if text.startswith("E "):
            errors.append(text[2:])
            continue
        m = _ACK_RE.fullmatch(text)
        if m is None or zlib.crc32(" ".join(m.groups()[:5]).encode()) != int(m[6]):
            errors.append(f"malformed ack line {text!r}")
            continue
        r, thread, seq, last, count = (int(g) for g in m.groups()[:5])
        if r != run:
            errors.append(f"ack of round {r} in the ack file of round {run}")
            continue
        acks.append(Ack(thread, seq, last, count))
    return acks, errors


# --- the writer (a forked child of the zygote) ---------------------------------------------------------
def writer_main(
    directory: str, ack_path: str, run: int, threads: int, segment_bytes: int, fault: str, ready_fd: int
) -> None:
    """Append from ``threads`` threads forever, acking each append after it returns; never returns.

    ``fault`` ``"<kind>:<n>"`` makes the process SIGKILL itself at the ``n``-th frame write or fsync
    (``FAULTS``); ``""`` waits for the parent's SIGKILL. One byte on ``ready_fd`` says the log is open
    and the threads started.
    """
    real_write = os.write
    ack_fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def die(message: str) -> None:
        real_write(ack_fd, f"E {message}\n".encode("utf-8", "replace"))
        os._exit(3)

    try:
        if fault:
            _install_fault(fault, real_write)
        log = EventLog.open(directory, segment_bytes=segment_bytes)

        def appender(thread: int) -> None:
            try:
                seq = 0
                while True:
                    batch = storm_append(run, thread, seq)
                    last = log.append(batch)  # acknowledged: durable from here on
                    real_write(ack_fd, ack_line(run, thread, seq, last, len(batch)))  # then promised
                    seq += 1
            except BaseException as exc:
                die(f"thread {thread}: {exc!r}")

        for thread in range(threads):
            threading.Thread(target=appender, args=(thread,), daemon=True).start()
        with contextlib.suppress(BrokenPipeError):  # nobody waits for a self-killing writer to be ready
            real_write(ready_fd, b"R")
        os.close(ready_fd)
        threading.Event().wait()
    except BaseException as exc:
        die(f"writer: {exc!r}")
    os._exit(4)


def _install_fault(fault: str, real_write) -> None:
    """Replace this process's ``os.write`` / ``os.fdatasync`` so that it SIGKILLs itself at the n-th frame.

    In the writer only the log's frame writes call ``os.write`` (acks use the saved ``real_write``; the
    recovery point checkpoint uses ``os.pwrite``) and only its data syncs call ``os.fdatasync``
    (``_log._sync_data`` looks it up at each call).
    """
    kind, n = fault.split(":")
    left = [int(n)]
    real_sync = os.fdatasync

    def kill_self() -> None:
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)

    def write(fd: int, data) -> int:
        left[0] -= 1
        if kind == "tear" and left[0] == 0:
            real_write(fd, bytes(data)[: len(data) // 2])
            kill_self()
        return real_write(fd, data)

    def fdatasync(fd: int) -> None:
        left[0] -= 1
        if kind == "before_fsync" and left[0] == 0:
            kill_self()
        real_sync(fd)
        if kind == "after_fsync" and left[0] == 0:
            kill_self()

    if kind == "tear":
        os.write = write
    elif kind in FAULTS:
        os.fdatasync = fdatasync
    else:
        raise ValueError(f"unknown fault {fault!r}")


def zygote_main() -> None:
    """Fork a writer per command line on stdin (JSON), answer its pid (once it is ready, if asked); reap it
    on ``reap`` and answer its wait status. Single-threaded, so forking is safe; the zygote holds the
    child until the parent has killed it, so its pid cannot be reused meanwhile."""
    pid = 0
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "fork":
            sys.stdout.flush()
            ready_r, ready_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(ready_r)
                    writer_main(
                        command["dir"],
                        command["acks"],
                        command["run"],
                        command["threads"],
                        command["segment_bytes"],
                        command["fault"],
                        ready_w,
                    )
                finally:
                    os._exit(5)
            os.close(ready_w)
            ready = False
            if command["wait_ready"]:  # the byte, or EOF if the writer died first
                ready = select.select([ready_r], [], [], 30)[0] != [] and os.read(ready_r, 1) == b"R"
            os.close(ready_r)
            print(json.dumps({"pid": pid, "ready": ready}), flush=True)
        elif command["op"] == "reap":
            deadline = time.monotonic() + command["timeout_s"]
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.monotonic() > deadline:  # a self-killing writer that never reached its fault
                    os.kill(pid, signal.SIGKILL)
                    _, status = os.waitpid(pid, 0)
                    break
                time.sleep(0.001)
            print(json.dumps({"status": status}), flush=True)


class Zygote:
    """The parent's handle on the zygote process."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def _call(self, command: dict) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the zygote died (exit {self.process.wait()})")
        return json.loads(answer)

    def fork(self, **command) -> tuple[int, bool]:
        answer = self._call({"op": "fork", **command})
        return answer["pid"], answer["ready"]

    def reap(self, timeout_s: float) -> int:
        return self._call({"op": "reap", "timeout_s": timeout_s})["status"]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)


# --- the checks ----------------------------------------------------------------------------------------
@dataclass
class Round:
    """One writer's life: its offsets ``[start, end)`` once checked, and its acks."""

    run: int
    start: int
    end: int = -1
    acks: list[Ack] = field(default_factory=list)


def _directory_state(directory: Path) -> tuple[dict[str, int], set[str]]:
    segments: dict[str, int] = {}
    torn: set[str] = set()
    for entry in os.scandir(directory):
        if re.fullmatch(r"\d{20}\.log", entry.name):
            segments[entry.name] = entry.stat().st_size
        elif ".log.torn-" in entry.name:
            torn.add(entry.name)
    return segments, torn


def check_repair(
    directory: Path, before: tuple[dict[str, int], set[str]], last_bytes: bytes, warnings: int
) -> tuple[list[str], bool, bool]:
    """Compare the directory after a writable open with ``before``: (violations, a tail was cut, the
    last segment was empty)."""
    segments_before, torn_before = before
    segments_after, torn_after = _directory_state(directory)
    problems: list[str] = []
    if segments_after.keys() != segments_before.keys():
        problems.append(f"segments changed at open: {sorted(segments_before)} -> {sorted(segments_after)}")
        return problems, False, False
    names = sorted(segments_before)
    for name in names[:-1]:
        if segments_after[name] != segments_before[name]:
            problems.append(f"{name} (not the last segment) changed size at open")
    new_torn = sorted(torn_after - torn_before)
    last = names[-1] if names else None
    cut = False
    if last is not None:
        size_before, size_after = segments_before[last], segments_after[last]
        if size_after > size_before:
            problems.append(f"{last} grew at open")
        elif size_after < size_before:
            cut = True
            expected_copy = re.escape(f"{last}.torn-{size_after}") + r"(\.\d+)?"
            if len(new_torn) != 1 or not re.fullmatch(expected_copy, new_torn[0]):
                problems.append(f"{last} cut to {size_after} bytes, but the new torn copies are {new_torn}")
            elif (directory / new_torn[0]).read_bytes() != last_bytes[size_after:]:
                problems.append(f"{new_torn[0]} does not hold exactly the bytes cut")
            if warnings != 1:
                problems.append(f"{warnings} warnings logged for one cut")
        elif new_torn or warnings:
            problems.append(f"nothing cut, yet torn copies {new_torn} and {warnings} warnings")
    elif new_torn:
        problems.append(f"torn copies {new_torn} in a log without segments")
    return problems, cut, last is not None and segments_before[last] == 0


def check_round(log: EventLog, rnd: Round) -> tuple[list[str], int]:
    """Check the events of ``rnd`` in ``log`` (``[rnd.start, rnd.end)``) against its acks: (violations, the
    appends found beyond their thread's last ack, i.e. durable but not acknowledged when the kill came)."""
    problems: list[str] = []
    where: dict[int, tuple[int, int, int]] = {}  # offset -> (thread, seq, k)
    next_append: dict[int, int] = {}  # thread -> next seq expected
    open_append: tuple[int, int, int] | None = None  # (thread, seq, k) of an append not yet complete
    expected_offset = rnd.start
    try:
        read = list(log.read(rnd.start, rnd.end))
    except Exception as exc:  # CorruptLogError, OffsetOutOfRangeError: a finding, not a crash of the storm
        return [f"reading offsets [{rnd.start}, {rnd.end}) failed: {exc!r}"], 0
    for offset, event in read:
        if offset != expected_offset:
            problems.append(f"offset {offset} where {expected_offset} was expected")
            expected_offset = offset
        expected_offset += 1
        m = _RID_RE.fullmatch(event.request_id)
        if m is None or int(m[1]) != rnd.run:
            problems.append(f"offset {offset}: an event no thread of round {rnd.run} submitted ({event.request_id!r})")
            continue
        _, thread, seq, k = (int(g) for g in m.groups())
        if event != storm_event(rnd.run, thread, seq, k):
            problems.append(f"offset {offset}: event {event.request_id} differs from what was submitted")
        if open_append is not None:
            t0, s0, k0 = open_append
            if (thread, seq, k) != (t0, s0, k0 + 1):
                problems.append(f"offset {offset}: append {t0}/{s0} interrupted by {event.request_id}")
                open_append = None
        if open_append is None:
            if k != 0:
                problems.append(f"offset {offset}: {event.request_id} without the start of its append")
            elif seq != next_append.get(thread, 0):
                problems.append(f"offset {offset}: thread {thread} append {seq}, expected {next_append.get(thread, 0)}")
            next_append[thread] = seq + 1
        open_append = (thread, seq, k) if k + 1 < append_size(thread, seq) else None
        where[offset] = (thread, seq, k)
    if expected_offset != rnd.end:
        problems.append(f"read ended at offset {expected_offset}, the log ends at {rnd.end}")
    if open_append is not None:
        problems.append(f"append {open_append[0]}/{open_append[1]} is not whole at the end of the log")
    last_acked: dict[int, int] = {}
    for ack in rnd.acks:
        if ack.count != append_size(ack.thread, ack.seq):
            problems.append(f"ack {ack}: wrong count")
        for i in range(ack.count):
            offset = ack.last - ack.count + 1 + i
            if where.get(offset) != (ack.thread, ack.seq, i):
                problems.append(f"acknowledged {rnd.run}-{ack.thread}-{ack.seq}-{i} not at offset {offset}")
        if ack.seq <= last_acked.get(ack.thread, -1):
            problems.append(f"thread {ack.thread}: ack {ack.seq} after ack {last_acked[ack.thread]}")
        last_acked[ack.thread] = ack.seq
    unacknowledged = 0
    for thread, following in next_append.items():
        beyond = following - 1 - last_acked.get(thread, -1)
        if beyond > 1:
            problems.append(f"thread {thread}: {beyond} appends beyond its last ack (at most 1 can be in flight)")
        unacknowledged += max(beyond, 0)
    return problems, unacknowledged


# --- the storm -----------------------------------------------------------------------------------------
class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


@dataclass
class Storm:
    kills: int
    seed: int
    threads: int = 16
    segment_bytes: int = SEGMENT_BYTES
    max_delay_ms: float = 40.0
    from_fork_fraction: float = 0.1
    fault_every: int = 10
    retain_events: int = 50_000
    full_check_every: int = 100
    violations: list[str] = field(default_factory=list)


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def _faults(storm: Storm, rng: random.Random) -> Iterator[str]:
    """Per round, ``""`` (killed from outside) or a self-inflicted fault, in rotation every ``fault_every``."""
    i = 0
    for run in range(storm.kills):
        if storm.fault_every and run % storm.fault_every == storm.fault_every - 1:
            yield f"{FAULTS[i % len(FAULTS)]}:{rng.randrange(1, 40)}"
            i += 1
        else:
            yield ""


def run_storm(storm: Storm, root: Path) -> dict:
    """Run the storm in ``root``; the figures (``violations`` must be 0)."""
    rng = random.Random(storm.seed)
    directory = root / "log"
    ack_dir = root / "acks"
    ack_dir.mkdir()
    EventLog.open(directory, segment_bytes=storm.segment_bytes).close()
    counter = _Count()
    logger = logging.getLogger("quotaplane.config")
    logger.addHandler(counter)
    zygote = Zygote()
    rounds: list[Round] = []
    reopen_s: list[float] = []
    full_scan_s: list[float] = []
    trusted_segments: list[int] = []
    kills_from_fork = kills_after_ready = 0
    largest = {"events": 0, "segments": 0}
    cuts = cuts_external = empty_last = rolls = no_ack_rounds = unacked_durable = acked_events = acked_appends = 0
    checked_end = 0
    started = time.monotonic()
    try:
        for run, fault in enumerate(_faults(storm, rng)):
            rnd = Round(run, checked_end)
            acks_path = ack_dir / f"{run}.acks"
            segments_at_start = len(_directory_state(directory)[0])
            # most kills count their delay from the writer being ready (appending); some from the fork,
            # so that they land in the writer's own open and its threads' start too
            from_fork = not fault and rng.random() < storm.from_fork_fraction
            pid, ready = zygote.fork(
                dir=str(directory),
                acks=str(acks_path),
                run=run,
                threads=storm.threads,
                segment_bytes=storm.segment_bytes,
                fault=fault,
                wait_ready=not fault and not from_fork,
            )
            kills_from_fork += from_fork
            kills_after_ready += ready
            if not fault:
                time.sleep(rng.uniform(0, storm.max_delay_ms) / 1000)
                os.kill(pid, signal.SIGKILL)
            status = zygote.reap(timeout_s=30)
            if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
                storm.violations.append(f"round {run}: the writer was not killed (wait status {status})")
            rnd.acks, errors = read_acks(acks_path, run)
            storm.violations.extend(f"round {run}: {e}" for e in errors)
            acks_path.unlink(missing_ok=True)

            before = _directory_state(directory)
            last_name = max(before[0]) if before[0] else None
            last_bytes = (directory / last_name).read_bytes() if last_name else b""
            rolls += len(before[0]) > segments_at_start
            t = time.perf_counter()
            try:
                with EventLog.open(directory, read_only=True, full_recovery=True) as reference:
                    full_scan_end = reference.end_offset
            except Exception as exc:
                storm.violations.append(f"round {run}: full-scan open failed: {exc!r}")
                break
            full_scan_s.append(time.perf_counter() - t)
            counter.count = 0
            t = time.perf_counter()
            try:
                log = EventLog.open(directory, segment_bytes=storm.segment_bytes)
            except Exception as exc:  # CorruptLogError above all: the storm stops, it is the finding
                storm.violations.append(f"round {run}: reopen failed: {exc!r}")
                break
            reopen_s.append(time.perf_counter() - t)
            trusted_segments.append(sum(not s.indexed for s in log._segments))
            if log.end_offset != full_scan_end:
                storm.violations.append(
                    f"round {run}: the reopen ends at {log.end_offset}, a full scan at {full_scan_end}"
                )
            largest = max(
                largest,
                {"events": log.end_offset - log.start_offset, "segments": len(log.segments())},
                key=lambda size: size["events"],
            )
            with log:
                problems, cut, was_empty = check_repair(directory, before, last_bytes, counter.count)
                cuts += cut
                cuts_external += cut and not fault
                empty_last += was_empty
                rnd.end = log.end_offset
                if rnd.end < checked_end:
                    problems.append(f"the log shrank below the end already checked ({rnd.end} < {checked_end})")
                    rnd.end = checked_end
                round_problems, beyond = check_round(log, rnd)
                problems += round_problems
                unacked_durable += beyond
                storm.violations.extend(f"round {run}: {p}" for p in problems)
                acked_events += sum(a.count for a in rnd.acks)
                acked_appends += len(rnd.acks)
                no_ack_rounds += not rnd.acks
                checked_end = rnd.end
                rounds.append(rnd)
                if run % storm.full_check_every == storm.full_check_every - 1:
                    _full_check(log, rounds, storm)
                if log.end_offset - log.start_offset > storm.retain_events:
                    log.delete_segments_before(log.end_offset - storm.retain_events)
                    rounds = [r for r in rounds if r.start >= log.start_offset]
        final = None
        try:
            with EventLog.open(directory, segment_bytes=storm.segment_bytes) as log:
                _full_check(log, rounds, storm)
                final = {
                    "end_offset": log.end_offset,
                    "start_offset": log.start_offset,
                    "segments": len(log.segments()),
                }
        except Exception as exc:
            storm.violations.append(f"final open failed: {exc!r}")
    finally:
        zygote.close()
        logger.removeHandler(counter)
    ordered = sorted(reopen_s)
    ordered_full = sorted(full_scan_s)
    return {
        "kills": len(reopen_s),
        "kills_external": sum(1 for f in _faults(storm, random.Random(storm.seed)) if not f),
        "kills_self_inflicted": {
            kind: sum(1 for f in _faults(storm, random.Random(storm.seed)) if f.startswith(f"{kind}:"))
            for kind in FAULTS
        },
        "kills_external_after_writer_ready": kills_after_ready,
        "kills_external_delay_from_fork": kills_from_fork,
        "acknowledged_appends": acked_appends,
        "acknowledged_events": acked_events,
        "events_in_log": final["end_offset"] if final else None,
        "unacknowledged_appends_found_durable": unacked_durable,
        "rounds_killed_before_any_ack": no_ack_rounds,
        "rounds_with_segment_roll": rolls,
        "reopens_with_empty_last_segment": empty_last,
        "torn_tails_cut": cuts,
        "torn_tails_cut_after_external_kill": cuts_external,
        "reopen": {
            "p50_ms": round(_percentile(ordered, 0.5) * 1000, 3) if ordered else None,
            "p99_ms": round(_percentile(ordered, 0.99) * 1000, 3) if ordered else None,
            "max_ms": round(ordered[-1] * 1000, 3) if ordered else None,
            "largest_log_reopened": largest,
            "segments_trusted_from_recovery_point_p50": sorted(trusted_segments)[len(trusted_segments) // 2]
            if trusted_segments
            else None,
        },
        "reopen_full_scan_read_only": {
            "p50_ms": round(_percentile(ordered_full, 0.5) * 1000, 3) if ordered_full else None,
            "p99_ms": round(_percentile(ordered_full, 0.99) * 1000, 3) if ordered_full else None,
            "max_ms": round(ordered_full[-1] * 1000, 3) if ordered_full else None,
        },
        "final_log": final,
        "violations": len(storm.violations),
        "violation_examples": storm.violations[:20],
        "elapsed_s": round(time.monotonic() - started, 1),
    }


def _full_check(log: EventLog, rounds: list[Round], storm: Storm) -> None:
    """Check every retained round again: nothing acknowledged earlier went missing since."""
    for rnd in rounds:
        problems, _ = check_round(log, rnd)
        storm.violations.extend(f"full check, round {rnd.run}: {p}" for p in problems)
    if rounds and rounds[-1].end != log.end_offset:
        storm.violations.append(f"full check: the log ends at {log.end_offset}, the last round at {rounds[-1].end}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--quick", action="store_true", help="30 kills (a smoke run)")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--max-delay-ms", type=float, default=40.0)
    parser.add_argument("--fault-every", type=int, default=10, help="every K-th round kills itself (0: never)")
    parser.add_argument("--retain-events", type=int, default=50_000)
    parser.add_argument("--dir", help="scratch directory (default: the system's temp dir)")
    parser.add_argument("--zygote", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.zygote:
        zygote_main()
        return
    storm = Storm(
        kills=30 if args.quick else args.kills,
        seed=args.seed,
        threads=args.threads,
        max_delay_ms=args.max_delay_ms,
        fault_every=args.fault_every,
        retain_events=args.retain_events,
    )
    with tempfile.TemporaryDirectory(prefix="crash-storm-", dir=args.dir) as root:
        figures = run_storm(storm, Path(root))
    report = {
        "benchmark": "crash_storm",
        "workload": {
            "kills": storm.kills,
            "seed": storm.seed,
            "quick": args.quick,
            "writer_threads": storm.threads,
            "events_per_append": "1 to 3 client-quota events",
            "fsync": True,
            "segment_bytes": storm.segment_bytes,
            "kill_delay_ms": f"uniform [0, {storm.max_delay_ms}] after the writer is ready (appending), "
            f"or after the fork for {storm.from_fork_fraction:.0%} of the external kills",
            "self_inflicted_fault_every": storm.fault_every,
            "self_inflicted_faults": list(FAULTS),
            "retain_events": storm.retain_events,
        },
        "figures": figures,
        "machine": machine(),
    }
    print(json.dumps(report, indent=2))
    if figures["violations"]:
        sys.exit(1)


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        main()
