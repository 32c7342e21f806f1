"""A bounded crash storm (``bench/crash_storm.py``): ~30 SIGKILLs of a 16-thread writer, nothing acknowledged lost.

The storm's checker is tested first on logs built by hand, so that a storm reporting no violation
means the log is right, not that the checker is blind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quotaplane.config import EventLog

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import crash_storm  # noqa: E402
from crash_storm import Ack, Round, Storm, check_repair, check_round, run_storm, storm_append, storm_event  # noqa: E402


def test_the_storm_loses_no_acknowledged_event(tmp_path: Path):
    # every 3rd round kills itself at a chosen point, so the repairs a crash needs occur whatever the timing
    storm = Storm(kills=30, seed=1818, fault_every=3, max_delay_ms=40.0)
    figures = run_storm(storm, tmp_path)
    assert figures["violation_examples"] == [] and figures["violations"] == 0
    assert figures["kills"] == 30
    faults = figures["kills_self_inflicted"]
    assert faults == {"tear": 4, "before_fsync": 3, "after_fsync": 3}
    # each half-written frame was a torn tail, cut and kept (an external kill may add more)
    assert figures["torn_tails_cut"] >= faults["tear"]
    # a frame written (and fsynced or not) when the writer died is durable though nobody was acknowledged
    assert figures["unacknowledged_appends_found_durable"] >= faults["before_fsync"] + faults["after_fsync"]
    # the checks had acknowledged events to prove durable (thousands, on a 2-core machine)
    assert figures["acknowledged_events"] > 0
    assert figures["final_log"]["end_offset"] >= figures["acknowledged_events"]


# --- the checker sees what is wrong --------------------------------------------------------------------
RUN = 7


def build_round(directory: Path, appends: list[tuple[int, int]], acked: int) -> tuple[EventLog, Round]:
    """A log holding ``appends`` ((thread, seq) in this order) of round RUN, the first ``acked`` acknowledged."""
    log = EventLog.open(directory, fsync=False)
    acks = []
    for thread, seq in appends:
        batch = storm_append(RUN, thread, seq)
        acks.append(Ack(thread, seq, log.append(batch), len(batch)))
    return log, Round(RUN, 0, log.end_offset, acks[:acked])


GOOD = [(0, 0), (1, 0), (0, 1), (2, 0), (1, 1)]  # sizes 1, 2, 2, 3, 3


def test_a_right_round_passes(tmp_path: Path):
    log, rnd = build_round(tmp_path, GOOD, acked=3)
    with log:
        assert check_round(log, rnd) == ([], 2)  # (1, 1)... and (2, 0) durable beyond their thread's last ack


@pytest.mark.parametrize(
    ("name", "appends", "acks", "expect"),
    [
        ("an acknowledged append missing", GOOD[:2], [Ack(0, 0, 0, 1), Ack(0, 1, 4, 2)], "not at offset"),
        ("an ack at the wrong offsets", GOOD, [Ack(1, 0, 1, 2)], "not at offset 0"),
        ("two appends of a thread beyond its last ack", GOOD, [Ack(1, 0, 2, 2)], "thread 0: 2 appends beyond"),
        ("a thread's appends out of order", [(0, 1), (0, 0)], [], "thread 0 append 1, expected 0"),
        ("a thread skips an append", [(1, 0), (1, 2)], [], "thread 1 append 2, expected 1"),
    ],
)
def test_the_checker_refuses(tmp_path: Path, name: str, appends, acks, expect: str):
    log, rnd = build_round(tmp_path, appends, acked=0)
    rnd.acks = acks
    with log:
        problems, _ = check_round(log, rnd)
    assert any(expect in p for p in problems), (name, problems)


def test_the_checker_refuses_events_nobody_submitted(tmp_path: Path):
    with EventLog.open(tmp_path, fsync=False) as log:
        log.append(storm_append(RUN, 0, 0))
        stranger = storm_event(RUN + 1, 1, 0, 0)  # another round's event
        log.append([stranger])
        changed = storm_event(RUN, 1, 0, 0)
        changed.client_quota.value += 1  # the right name, not the content submitted
        log.append([changed, storm_event(RUN, 1, 0, 1)])
        half = storm_append(RUN, 2, 0)[:2]  # an append of 3 events, 2 of them
        log.append(half)
        problems, _ = check_round(log, Round(RUN, 0, log.end_offset, [Ack(0, 0, 0, 1)]))
    assert any("an event no thread of round 7 submitted ('8-1-0-0')" in p for p in problems), problems
    assert any("7-1-0-0 differs from what was submitted" in p for p in problems), problems
    assert any("append 2/0 is not whole" in p for p in problems), problems


def test_the_repair_check_allows_only_a_cut_tail(tmp_path: Path):
    with EventLog.open(tmp_path, segment_bytes=200, fsync=False) as log:
        for seq in range(6):
            log.append(storm_append(RUN, 0, seq))
        first, last = log.segments()[0], log.segments()[-1]
    before = crash_storm._directory_state(tmp_path)
    last_bytes = last.read_bytes()
    assert check_repair(tmp_path, before, last_bytes, warnings=0) == ([], False, False)
    # a torn tail of the last segment, cut by the open: allowed, counted
    last.write_bytes(last_bytes + last_bytes[:50])
    before = crash_storm._directory_state(tmp_path)
    EventLog.open(tmp_path, segment_bytes=200).close()
    assert check_repair(tmp_path, before, last_bytes + last_bytes[:50], warnings=1) == ([], True, False)
    # anything else is not
    before = crash_storm._directory_state(tmp_path)
    first.write_bytes(first.read_bytes()[:-1])
    problems, _, _ = check_repair(tmp_path, before, last_bytes, warnings=0)
    assert problems == [f"{first.name} (not the last segment) changed size at open"]
    before = crash_storm._directory_state(tmp_path)
    last.write_bytes(last_bytes[:-10])
    problems, cut, _ = check_repair(tmp_path, before, last_bytes, warnings=1)
    assert cut and any("new torn copies are []" in p for p in problems)


def test_the_bench_reports_its_figures(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    # 4 rounds, the 2nd tearing a frame (the first fault in rotation) and the 4th dying before an fsync
    command = [sys.executable, str(REPO / "bench" / "crash_storm.py"), "--kills", "4", "--fault-every", "2"]
    run = subprocess.run(
        [*command, "--seed", "5", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["benchmark"] == "crash_storm" and report["workload"]["kills"] == 4
    figures = report["figures"]
    assert figures["kills"] == 4 and figures["violations"] == 0 and figures["torn_tails_cut"] >= 1
    assert {"acknowledged_events", "torn_tails_cut", "unacknowledged_appends_found_durable"} <= figures.keys()
    assert {"p50_ms", "p99_ms", "max_ms"} <= figures["reopen"].keys()
    assert {"processor", "cpu_count", "load_average_1_5_15m"} <= report["machine"].keys()
