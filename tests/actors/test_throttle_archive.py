"""The shards' throttle archive: one record per non-zero throttle, rate-bounded on the callers' clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from quotaplane.actors._throttle_archive import THROTTLE_STREAM, ThrottleArchive
from quotaplane.archive import ArchiveReader

T0 = 1_700_000_000_000


def read(root: Path) -> list[tuple[int, dict[str, str], bytes]]:
    return [(r.time_ms, dict(r.labels), r.body) for r in ArchiveReader().read(root, THROTTLE_STREAM)]


def test_decisions_are_archived_with_kafka_quota_type_names(tmp_path: Path) -> None:
    archive = ThrottleArchive(tmp_path, writer_id="t")
    assert archive.record(T0, "Produce", "alice", "c1", 250)
    assert archive.record(T0 + 5, "Fetch", "bob", "", 40)
    assert archive.flush(10)
    archive.close()
    assert read(tmp_path) == [
        (T0, {"quota_type": "Produce", "user": "alice", "client_id": "c1", "throttle_time_ms": "250"}, b""),
        (T0 + 5, {"quota_type": "Fetch", "user": "bob", "client_id": "", "throttle_time_ms": "40"}, b""),
    ]


def test_the_rate_bound_keeps_one_second_of_burst_and_counts_the_rest(tmp_path: Path) -> None:
    archive = ThrottleArchive(tmp_path, writer_id="t", max_records_per_s=10)
    kept = [archive.record(T0, "Produce", "u", "c", 1) for _ in range(25)]
    assert kept == [True] * 10 + [False] * 15
    # half a second later: five more tokens, no more
    later = [archive.record(T0 + 500, "Produce", "u", "c", 1) for _ in range(8)]
    assert later == [True] * 5 + [False] * 3
    # time going backwards (callers' clocks differ) refills nothing and breaks nothing
    assert not archive.record(T0, "Produce", "u", "c", 1)
    archive.close()
    assert len(read(tmp_path)) == 15
    assert archive.stats()["dropped_by_rate"] == 19


def test_a_bad_rate_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_records_per_s"):
        ThrottleArchive(tmp_path, writer_id="t", max_records_per_s=0)
