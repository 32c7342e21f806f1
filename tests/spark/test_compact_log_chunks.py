"""The log compaction's column-wise, chunked decoding against the log's own reader.

The job reads the log in chunks (offset ranges cut across and inside segments) and builds each event's
history row from ``EventColumns`` columns. The reference here is independent of that code: the events
as ``EventLog.read`` gives them (``pb.Event`` messages, one at a time), their texts built from the
messages, and old values by replaying them in order through a dict.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.config import ConfigResourceType, ConfigStore, EventLog, client_metrics_configs, entity_id
from quotaplane.config._records import client_quota_event
from quotaplane.config.logformat import (
    decode_event_batch,
    iter_frames,
    list_segments,
    read_snapshot_batches,
    write_snapshot,
)
from quotaplane.spark import compact_log
from quotaplane.spark import eventlog as job
from quotaplane.spark._log_events import events_of_batch
from quotaplane.v1 import config_events_pb2 as pb

from .test_compact_log import _fill


def _reference_row(event: pb.Event) -> tuple:
    """(kind, entity, key, new value text, removed) of one event, from the message alone."""
    which = event.WhichOneof("record")
    if which == "client_quota":
        record = event.client_quota
        entity = entity_id(
            tuple((d.entity_type, d.entity_name if d.HasField("entity_name") else None) for d in record.entity)
        )
        return "client-quota", entity, record.key, None if record.remove else repr(float(record.value)), record.remove
    if which == "client_metrics":
        configs = client_metrics_configs(event.client_metrics)
        text = json.dumps(configs, sort_keys=True, separators=(",", ":")) if configs else None
        return "client-metrics", event.client_metrics.name, event.client_metrics.name, text, not configs
    record = event.config
    entity = f"{ConfigResourceType(record.resource_type).name.lower()}:{record.resource_name}"
    return (
        "config",
        entity,
        record.name,
        record.value if record.HasField("value") else None,
        not record.HasField("value"),
    )


def _reference_history(directory: Path, start: int, up_to: int) -> list[tuple]:
    """History rows (``HISTORY_COLUMNS`` minus commit_time, plus segment) of ``[start, up_to)``; old values
    continue from the image at ``start`` (its snapshot events), as the log's own store replays it."""
    bases = [base for base, _ in list_segments(directory)]
    with ConfigStore.open(directory, read_only=True) as store:
        seed = store.image_at(start).snapshot_events()
    values: dict[tuple, str | None] = {}
    for _, event in seed:
        kind, entity, key, new, _ = _reference_row(event)
        values[(kind, entity, key)] = new
    rows = []
    with EventLog.open(directory, read_only=True) as log:
        for offset, event in log.read(start, up_to):
            kind, entity, key, new, _ = _reference_row(event)
            old = values.get((kind, entity, key))
            values[(kind, entity, key)] = new
            if offset >= start:
                segment = max(b for b in bases if b <= offset)
                rows.append(
                    (
                        offset,
                        event.commit_time_ms,
                        event.principal,
                        event.request_id,
                        kind,
                        entity,
                        key,
                        old,
                        new,
                        segment,
                    )
                )
    return rows


@pytest.fixture(scope="module")
def mixed_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("chunks") / "config"
    with ConfigStore.open(directory, segment_bytes=8 * 1024, fsync=False) as store:
        _fill(store, 1200, users=25)
    return directory


def test_columns_equal_the_logs_own_events(mixed_log: Path) -> None:
    """Every frame of every segment, decoded column-wise, gives the rows the messages give."""
    kinds = set()
    with EventLog.open(mixed_log, read_only=True) as log:
        expected = dict(log.read(0))
    for _, path in list_segments(mixed_log):
        data = path.read_bytes()
        for header in iter_frames(data):
            events = events_of_batch(decode_event_batch(data, header), range(header.base_offset, header.next_offset))
            for i, offset in enumerate(events.offset):
                event = expected[offset]
                row = (events.kind[i], events.entity[i], events.key[i], events.new_value[i], events.removed[i])
                assert row == _reference_row(event), offset
                assert (events.commit_time_ms[i], events.principal[i], events.request_id[i]) == (
                    event.commit_time_ms,
                    event.principal,
                    event.request_id,
                )
                kinds.add(row[0])
                if row[0] == "client-quota":
                    assert events.quota_value[i] == (None if event.client_quota.remove else event.client_quota.value)
                else:
                    assert events.record[i] == getattr(event, event.WhichOneof("record")).SerializeToString()
    assert kinds == {"client-quota", "client-metrics", "config"}


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=6), min_size=1, max_size=6),
    parallelism=st.integers(1, 5),
    max_chunk=st.integers(1, 40),
    data=st.data(),
)
def test_chunks_own_every_frame_once(frames: list[list[int]], parallelism: int, max_chunk: int, data) -> None:
    """Segments of frames (sizes in events): the chunks read ``[start, up_to)`` once, in order, and
    every frame they reach is verified by exactly one of them."""
    segments, frame_bases, base = [], [], 0
    for sizes in frames:
        segments.append((base, Path(f"{base:020d}.log")))
        for size in sizes:
            frame_bases.append((base, size))
            base += size
        segments_end = base
    segments.append((segments_end, Path(f"{segments_end:020d}.log")))  # the live segment
    start = data.draw(st.integers(0, segments_end - 1))
    up_to = data.draw(st.integers(start + 1, segments_end))
    chunks = job._plan_chunks(segments, start, up_to, parallelism, max_chunk)
    assert len(chunks) >= min(parallelism, up_to - start)
    owners: dict[int, int] = {}
    read: list[int] = []
    bases = [b for b, _ in segments]
    for c, chunk in enumerate(chunks):
        for r in chunk.ranges:
            hi = up_to if r.hi is None else min(r.hi, up_to)
            for frame_base, size in frame_bases:
                segment = max(b for b in bases if b <= frame_base)
                if segment != r.base or frame_base >= hi or frame_base < r.lo:
                    continue
                assert frame_base not in owners, (frame_base, owners[frame_base], c)
                owners[frame_base] = c
                read += [o for o in range(frame_base, frame_base + size) if start <= o < up_to]
    assert read == list(range(start, up_to))
    # every frame below up_to in a segment that is read is verified (retention's cut segment included)
    first_read = max(b for b in bases if b <= start)
    assert set(owners) == {b for b, _ in frame_bases if first_read <= b < up_to}


def test_small_chunks_write_the_reference_history_and_snapshot(
    spark, mixed_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks of 37 events (cut inside frames' runs and across segments) give the history the log's own
    reader gives, row for row, and the snapshot the store itself writes, byte for byte."""
    monkeypatch.setattr(job, "MAX_CHUNK_EVENTS", 37)
    directory = tmp_path / "log"
    shutil.copytree(mixed_log, directory, ignore=shutil.ignore_patterns("*.snapshot", ".lock"))
    result = compact_log(spark, directory, str(tmp_path / "history"), fsync=False)
    assert result.events > 37 * 10 and result.segments > 3
    table = spark.read.parquet(str(tmp_path / "history")).orderBy("offset").collect()
    columns = [c for c in job.HISTORY_COLUMNS if c != "commit_time"] + ["segment"]
    assert [tuple(r[c] for c in columns) for r in table] == _reference_history(directory, 0, result.end_offset)
    assert all(r.commit_time.timestamp() * 1000 == pytest.approx(r.commit_time_ms) for r in table)
    with ConfigStore.open(directory, read_only=True) as store:
        image = store.image_at(result.end_offset)
    own = tmp_path / "own"
    own.mkdir()
    theirs = write_snapshot(own, image.snapshot_header(), image.snapshot_events(), fsync=False).read_bytes()
    assert result.snapshot.read_bytes() == theirs


def test_chunks_that_own_no_frame(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames of 300 events cut into chunks of 37: most chunks start inside a frame another chunk owns and own
    none themselves (found by ``bench/spark_compaction.py --events 1000``: an empty chunk failed the job)."""
    monkeypatch.setattr(job, "MAX_CHUNK_EVENTS", 37)
    directory = tmp_path / "big-frames"
    with EventLog.open(directory, fsync=False, segment_bytes=16 * 1024) as log:
        for base in range(0, 900, 300):
            batch = []
            for i in range(base, base + 300):
                event = client_quota_event((("user", f"u{i % 7}"),), "producer_byte_rate", float(i))
                event.commit_time_ms, event.principal, event.request_id = 1_700_000_000_000 + i, "User:admin", f"r{i}"
                batch.append(event)
            log.append(batch)
    with EventLog.open(directory, fsync=False, segment_bytes=1) as log:  # the live segment: the 900 are closed
        log.append([client_quota_event((("user", "last"),), "producer_byte_rate", 1.0)])
    result = compact_log(spark, directory, str(tmp_path / "history"), fsync=False)
    assert result.events == 900
    table = spark.read.parquet(str(tmp_path / "history")).orderBy("offset").collect()
    columns = [c for c in job.HISTORY_COLUMNS if c != "commit_time"] + ["segment"]
    assert [tuple(r[c] for c in columns) for r in table] == _reference_history(directory, 0, result.end_offset)


def test_small_chunks_after_retention(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From a seed snapshot that cuts through a segment: old values continue from the seed, and the cut
    segment's partition, which an earlier run wrote, is left as that run wrote it."""
    monkeypatch.setattr(job, "MAX_CHUNK_EVENTS", 29)
    directory = tmp_path / "retained"
    history = tmp_path / "history"
    with ConfigStore.open(directory, segment_bytes=8 * 1024, fsync=False) as store:
        _fill(store, 400)
        bases = [base for base, _ in list_segments(directory)]
        cut = (bases[-3] + bases[-2]) // 2  # inside a closed segment
        first = compact_log(spark, directory, str(history), up_to_offset=cut, fsync=False)
        assert store.delete_segments_covered_by_snapshot()
        _fill(store, 300, start=400)
    cut_segment = max(b for b in bases if b <= cut)
    before = spark.read.parquet(str(history)).orderBy("offset").collect()
    assert before[-1].segment == cut_segment and before[-1].offset == cut - 1
    second = compact_log(spark, directory, str(history), fsync=False)
    assert second.seed_snapshot == first.snapshot and second.start_offset == cut
    columns = [c for c in job.HISTORY_COLUMNS if c != "commit_time"] + ["segment"]
    after = [tuple(r[c] for c in columns) for r in spark.read.parquet(str(history)).orderBy("offset").collect()]
    reference = [row for row in _reference_history(directory, cut, second.end_offset) if row[-1] != cut_segment]
    assert after == [tuple(r[c] for c in columns) for r in before] + reference
    assert second.history_rows == len(reference) > 29 * 5
    header, _ = read_snapshot_batches(second.snapshot)
    with ConfigStore.open(directory, read_only=True) as store:
        assert header == store.image_at(second.end_offset).snapshot_header()
