"""The log compaction decodes each chunk once: pass one keeps the chunk's rows, pass two fills in old values.

Pass one (``first_pass``) builds a chunk's history rows with the old values the chunk knows and leaves them
on the executor's disk; the driver folds each key's last events into the old values of each chunk's first
events; pass two (``history_rows``) fills those in, from the kept rows or, where they are not on its
machine, from the chunk decoded again. Both ways must give the rows the log's own reader gives
(``_reference_history``: messages one at a time, old values through a dict), for any cut into chunks.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.config import ConfigStore
from quotaplane.config.logformat import list_segments, write_snapshot
from quotaplane.spark import compact_log
from quotaplane.spark import eventlog as job
from quotaplane.spark._log_events import cache_path, cache_rows, first_pass, history_rows

from .test_compact_log import _fill
from .test_compact_log_chunks import _reference_history

COLUMNS = [c for c in job.HISTORY_COLUMNS if c != "commit_time"] + ["segment"]


@pytest.fixture(scope="module")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Few users, so most keys change in several chunks (their first event in a chunk has an old value)."""
    directory = tmp_path_factory.mktemp("one-decode") / "config"
    with ConfigStore.open(directory, segment_bytes=4 * 1024, fsync=False) as store:
        _fill(store, 500, users=6)
    return directory


def _tuples(batch: pa.RecordBatch) -> list[tuple]:
    columns = batch.to_pydict()
    return list(zip(*(columns[c] for c in COLUMNS), strict=True))


def _run_passes(directory: Path, chunks: list, up_to: int, scratch: str, *, kept: bool) -> list[tuple]:
    """Both passes and the driver's fold, without Spark; pass two from the kept rows or not."""
    summaries = [
        first_pass(chunk, 0, up_to, os.path.join(scratch, f"chunk-{i}.arrow") if kept else None)
        for i, chunk in enumerate(chunks)
    ]
    assert not [s.error for s in summaries if s.error]
    state = job._State()
    before = [state.fold(s.last_table()) for s in summaries]
    rows = []
    for summary, values in zip(summaries, before, strict=True):
        if summary.events:
            assert (summary.cache is not None) == kept
            batch = history_rows(summary.chunk, 0, up_to, summary.cache, summary.events, pa.array(values, pa.string()))
            rows += _tuples(batch)
    assert os.listdir(scratch) == []  # pass two removes what it read
    return rows


@settings(max_examples=40, deadline=None)
@given(parallelism=st.integers(1, 6), max_chunk=st.integers(3, 400))
def test_kept_and_decoded_again_give_the_reference_history(small_log: Path, parallelism: int, max_chunk: int) -> None:
    segments = list_segments(small_log)
    up_to = segments[-1][0]
    chunks = job._plan_chunks(segments, 0, up_to, parallelism, max_chunk)
    reference = _reference_history(small_log, 0, up_to)
    with tempfile.TemporaryDirectory() as scratch:
        assert _run_passes(small_log, chunks, up_to, scratch, kept=True) == reference
        assert _run_passes(small_log, chunks, up_to, scratch, kept=False) == reference


def test_rows_that_are_not_the_chunks_are_not_used(small_log: Path, tmp_path: Path) -> None:
    """Pass two decodes the chunk again when the kept file is unreadable or holds another number of rows."""
    segments = list_segments(small_log)
    up_to = segments[-1][0]
    chunks = job._plan_chunks(segments, 0, up_to, 2, 200)[:2]
    state = job._State()
    summaries = [first_pass(chunk, 0, up_to, str(tmp_path / f"{i}.arrow")) for i, chunk in enumerate(chunks)]
    before = [pa.array(state.fold(s.last_table()), pa.string()) for s in summaries]
    expected = [
        _tuples(history_rows(s.chunk, 0, up_to, None, s.events, b)) for s, b in zip(summaries, before, strict=True)
    ]
    assert all(expected)
    Path(summaries[0].cache).write_bytes(b"not an arrow file")
    kept = pa.ipc.open_file(summaries[1].cache).get_batch(0)
    assert cache_rows(kept.slice(1), summaries[1].cache) == summaries[1].cache  # one row short
    for summary, values, rows in zip(summaries, before, expected, strict=True):
        assert _tuples(history_rows(summary.chunk, 0, up_to, summary.cache, summary.events, values)) == rows


def test_cache_path_is_in_the_executors_local_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path / 'a'},{tmp_path / 'b'}")
    assert cache_path("t0k3n", 3) == str(tmp_path / "a" / "quotaplane-log-t0k3n-3.arrow")
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    assert os.path.dirname(cache_path("t0k3n", 3)) == tempfile.gettempdir()


def test_pass_two_without_the_kept_rows(
    spark, small_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster a pass-two task may run where pass one did not: with every kept file gone before pass
    two, the job decodes the chunks again and writes the same history and snapshot, and leaves no file."""
    monkeypatch.setattr(job, "MAX_CHUNK_EVENTS", 61)
    write_history = job._write_history
    removed = []

    def without_kept_rows(spark, summaries, *args, **kwargs):
        for summary in summaries:
            if summary.cache is not None:
                os.remove(summary.cache)
                removed.append(summary.cache)
        return write_history(spark, summaries, *args, **kwargs)

    monkeypatch.setattr(job, "_write_history", without_kept_rows)
    directory = tmp_path / "log"
    directory.mkdir()
    for _, path in list_segments(small_log):
        (directory / path.name).write_bytes(path.read_bytes())
    result = compact_log(spark, directory, str(tmp_path / "history"), fsync=False)
    assert len(removed) > 5
    table = spark.read.parquet(str(tmp_path / "history")).orderBy("offset").collect()
    assert [tuple(r[c] for c in COLUMNS) for r in table] == _reference_history(directory, 0, result.end_offset)
    with ConfigStore.open(directory, read_only=True) as store:
        image = store.image_at(result.end_offset)
    own = tmp_path / "own"
    own.mkdir()
    assert (
        result.snapshot.read_bytes()
        == write_snapshot(own, image.snapshot_header(), image.snapshot_events(), fsync=False).read_bytes()
    )
