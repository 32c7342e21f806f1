"""compact_log on a real local Spark, over logs written by ConfigStore (the project's own writer)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from quotaplane.config import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ConfigImage,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    EventLog,
    OpType,
)
from quotaplane.config.logformat import list_snapshots, read_snapshot_batches
from quotaplane.spark import JobInputError, compact_log

T0 = 1_700_000_000_000
KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")


def _fill(store: ConfigStore, n: int, *, users: int = 40, start: int = 0) -> None:
    """``n`` admin requests: quota sets and removals, client-metrics and topic configs, with request ids."""
    for i in range(start, start + n):
        user = f"u{i % users}"
        now = T0 + i * 10
        rid = f"req-{i}"
        if i % 17 == 0:
            store.alter_client_quotas(
                [ClientQuotaAlteration({"user": user}, [(KEYS[i % 3], None)])], now_ms=now, request_id=rid
            )
        elif i % 23 == 0:
            store.alter_client_metrics(
                f"cm{i % 5}", metrics="org.apache.kafka.producer.", interval_ms=1000 + i, now_ms=now, request_id=rid
            )
        elif i % 29 == 0:
            store.delete_client_metrics(f"cm{i % 5}", now_ms=now, request_id=rid)
        elif i % 31 == 0:
            resource = ConfigResource(ConfigResourceType.BROKER, str(i % 2))
            name = "max.connections"
            op = AlterConfigOp(name, OpType.SET, str(100 + i)) if i % 3 else AlterConfigOp(name, OpType.DELETE)
            results = store.incremental_alter_configs([(resource, [op])], now_ms=now, request_id=rid)
            assert all(r.ok for r in results), results
        else:
            entity = {"user": user, "client-id": f"c{i % 3}"} if i % 5 == 0 else {"user": user}
            store.alter_client_quotas(
                [ClientQuotaAlteration(entity, [(KEYS[i % 3], float(1000 + i)), (KEYS[(i + 1) % 3], float(i))])],
                now_ms=now,
                principal=f"User:admin{i % 2}",
                request_id=rid,
            )


def _image_at(directory: Path, offset: int) -> ConfigImage:
    with ConfigStore.open(directory, read_only=True) as store:
        return store.image_at(offset)


def _full_replay(directory: Path, offset: int, scratch: Path) -> tuple[ConfigImage, float]:
    """The image of the first ``offset`` events replayed from the segments only (snapshots removed)."""
    copy = scratch / "no-snapshots"
    shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("*.snapshot", ".lock"))
    started = time.perf_counter()
    with ConfigStore.open(copy, read_only=True) as store:
        image = store.image_at(offset)
    return image, time.perf_counter() - started


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("log") / "config"
    with ConfigStore.open(directory, segment_bytes=16 * 1024, fsync=False) as store:
        _fill(store, 3000)
    return directory


def test_snapshot_replays_to_the_full_logs_image(spark, log_dir: Path, tmp_path: Path) -> None:
    result = compact_log(spark, log_dir, str(tmp_path / "history"), fsync=False)
    live_base = int(sorted(log_dir.glob("*.log"))[-1].name[:20])
    assert result.end_offset == live_base > 0
    assert result.snapshot == log_dir / f"{live_base:020d}.snapshot"
    assert result.events == live_base and result.segments > 2

    expected, full_s = _full_replay(log_dir, live_base, tmp_path)
    header, frames = read_snapshot_batches(result.snapshot)
    from_snapshot = ConfigImage.from_snapshot(header, frames)
    assert from_snapshot == expected
    assert len(from_snapshot) == result.entries > 0
    # byte-identical to the snapshot the image itself writes
    assert header == expected.snapshot_header()
    # and ConfigStore.open starts from it: same image at the log end, faster
    end_expected, _ = _full_replay(log_dir, _log_end(log_dir), tmp_path / "again")
    with ConfigStore.open(log_dir, read_only=True) as store:
        opened = store.image_copy()
    assert opened == end_expected
    # replay time drops (best of 3 each, so a busy machine does not decide it)
    snapshot_s = min(_timed_open(log_dir) for _ in range(3))
    full_s = min([full_s, *(_timed_open(tmp_path / "no-snapshots") for _ in range(2))])
    assert snapshot_s < full_s, (snapshot_s, full_s)


def _timed_open(directory: Path) -> float:
    started = time.perf_counter()
    with ConfigStore.open(directory, read_only=True):
        pass
    return time.perf_counter() - started


def _log_end(directory: Path) -> int:
    with EventLog.open(directory, read_only=True) as log:
        return log.end_offset


def test_snapshot_bytes_equal_configstores_own(spark, log_dir: Path, tmp_path: Path) -> None:
    offset = int(sorted(log_dir.glob("*.log"))[2].name[:20])
    result = compact_log(spark, log_dir, str(tmp_path / "history"), up_to_offset=offset, fsync=False)
    assert result.end_offset == offset
    ours = result.snapshot.read_bytes()
    own_dir = tmp_path / "own"
    own_dir.mkdir()
    from quotaplane.config.logformat import write_snapshot

    image = _image_at(log_dir, offset)
    theirs = write_snapshot(own_dir, image.snapshot_header(), image.snapshot_events(), fsync=False).read_bytes()
    assert ours == theirs


def test_history_has_every_change_with_old_and_new_values(spark, log_dir: Path, tmp_path: Path) -> None:
    history_dir = tmp_path / "history"
    offset = int(sorted(log_dir.glob("*.log"))[-1].name[:20])
    compact_log(spark, log_dir, str(history_dir), fsync=False)
    rows = spark.read.parquet(str(history_dir)).orderBy("offset").collect()
    assert [r.offset for r in rows] == list(range(offset))
    with ConfigStore.open(log_dir, read_only=True) as store:
        # ConfigStore.history is the project's own audit: the table must agree with it
        alice = store.history(entity={"user": "u3"})
    alice = [h for h in alice if h.offset < offset]
    table = [r for r in rows if r.kind == "client-quota" and r.entity == '[["user","u3"]]']
    assert [(r.offset, r.key, r.principal, r.request_id) for r in table] == [
        (h.offset, h.key, h.principal, h.request_id) for h in alice
    ]
    as_text = lambda v: None if v is None else repr(float(v))  # noqa: E731
    assert [(r.old_value, r.new_value) for r in table] == [(as_text(h.old), as_text(h.new)) for h in alice]
    assert {r.kind for r in rows} == {"client-quota", "client-metrics", "config"}
    # idempotent: a second run leaves the same table
    compact_log(spark, log_dir, str(history_dir), fsync=False)
    again = spark.read.parquet(str(history_dir)).orderBy("offset").collect()
    assert again == rows


def test_compacts_while_the_log_is_appended_to(spark, tmp_path: Path) -> None:
    directory = tmp_path / "live"
    with ConfigStore.open(directory, segment_bytes=8 * 1024, fsync=False) as store:
        _fill(store, 600)
        live_segment = sorted(directory.glob("*.log"))[-1]
        live = int(live_segment.name[:20])
        live_bytes = live_segment.read_bytes()
        result = compact_log(spark, directory, str(tmp_path / "h"), fsync=False)
        _fill(store, 50, start=600)  # the writer carries on; the job never touched its segment
        assert result.end_offset == live
        assert live_segment.read_bytes()[: len(live_bytes)] == live_bytes
        image = store.image_copy()
    with ConfigStore.open(directory, read_only=True) as reopened:
        assert reopened.image_copy() == image


def test_after_retention_starts_from_the_snapshot(spark, tmp_path: Path) -> None:
    directory = tmp_path / "retained"
    history = str(tmp_path / "h")
    with ConfigStore.open(directory, segment_bytes=8 * 1024, fsync=False) as store:
        _fill(store, 500)
        first = compact_log(spark, directory, history, fsync=False)
        store.delete_segments_covered_by_snapshot()
        assert store.log.start_offset > 0
        _fill(store, 500, start=500)
    before = {r.offset: r for r in spark.read.parquet(history).collect()}
    second = compact_log(spark, directory, history, fsync=False)
    assert second.seed_snapshot == first.snapshot and second.start_offset == first.end_offset
    expected, _ = _full_replay_from_store(directory, second.end_offset)
    header, frames = read_snapshot_batches(second.snapshot)
    assert ConfigImage.from_snapshot(header, frames) == expected
    after = {r.offset: r for r in spark.read.parquet(history).collect()}
    assert set(after) == set(range(second.end_offset))  # nothing the first run wrote was lost
    assert all(after[o] == before[o] for o in before)


def _full_replay_from_store(directory: Path, offset: int) -> tuple[ConfigImage, None]:
    with ConfigStore.open(directory, read_only=True) as store:
        return store.image_at(offset), None


def test_reused_request_ids_take_the_exact_path(spark, tmp_path: Path) -> None:
    directory = tmp_path / "reuse"
    with ConfigStore.open(directory, segment_bytes=4 * 1024, fsync=False, max_applied_requests=5) as store:
        for i in range(4000):
            store.alter_client_quotas(
                [ClientQuotaAlteration({"user": f"u{i % 7}"}, [("producer_byte_rate", float(i))])],
                now_ms=T0 + i,
                # reused after 1100 others: the image forgets ids in bulk past 2 * 5 + 1024, so some of
                # these are retries it still remembers (skipped) and some are new again (appended)
                request_id=f"r{i % 1100}",
            )
    result = compact_log(spark, directory, str(tmp_path / "h"), max_applied_requests=5, fsync=False)
    assert result.end_offset > 1100
    expected = _image_at_with(directory, result.end_offset, 5)
    header, frames = read_snapshot_batches(result.snapshot)
    assert ConfigImage.from_snapshot(header, frames, max_applied_requests=5) == expected


def _image_at_with(directory: Path, offset: int, max_applied_requests: int) -> ConfigImage:
    copy = directory.parent / (directory.name + "-copy")
    shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("*.snapshot", ".lock"))
    with ConfigStore.open(copy, read_only=True, max_applied_requests=max_applied_requests) as store:
        return store.image_at(offset)


def test_bad_input_is_one_line_and_writes_nothing(spark, log_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(JobInputError, match="no event log directory"):
        compact_log(spark, tmp_path / "missing", str(tmp_path / "h"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(JobInputError, match="no closed segment"):
        compact_log(spark, tmp_path / "empty", str(tmp_path / "h"))
    live = int(sorted(log_dir.glob("*.log"))[-1].name[:20])
    with pytest.raises(JobInputError, match="inside the live segment"):
        compact_log(spark, log_dir, str(tmp_path / "h"), up_to_offset=live + 1)

    broken = tmp_path / "broken"
    shutil.copytree(log_dir, broken, ignore=shutil.ignore_patterns("*.snapshot", ".lock"))
    segment = sorted(broken.glob("*.log"))[1]
    data = bytearray(segment.read_bytes())
    data[100] ^= 0x40
    segment.write_bytes(bytes(data))
    history = tmp_path / "h-broken"
    with pytest.raises(JobInputError) as caught:
        compact_log(spark, broken, str(history))
    message = str(caught.value)
    assert segment.name in message and "\n" not in message
    assert not list(broken.glob("*.snapshot")) and not history.exists()
    assert not [p for p in broken.iterdir() if p.name.startswith(".compact-")]
    assert list_snapshots(broken) == []
