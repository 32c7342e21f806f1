"""TelemetryArchiveExporter: real files, real fsync, real threads; waits are on conditions, never on sleeps."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2

from quotaplane.archive import ArchiveReader, ArchiveRecord, ArchiveWriter, EncodedLabels
from quotaplane.exporters.archive import (
    LABEL_COMPRESSION_TYPE,
    LABEL_CONTENT_TYPE,
    LABEL_PUSH_INTERVAL_MS,
    LABEL_TERMINATING,
    TELEMETRY_STREAM,
    TelemetryArchiveExporter,
    telemetry_record,
)
from quotaplane.kafka_uuid import Uuid
from quotaplane.telemetry._exporter import (
    OTLP_CONTENT_TYPE,
    ClientTelemetryContext,
    ClientTelemetryExporter,
    ClientTelemetryPayload,
    DeferredClientTelemetryPayload,
    RequestContext,
)

T0 = 1_700_000_000_000
WAIT_S = 10.0  # generous: only a broken exporter takes this long


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def metrics_data(i: int) -> metrics_pb2.MetricsData:
    data = metrics_pb2.MetricsData()
    rm = data.resource_metrics.add()
    rm.resource.attributes.add(key="client_rack", value=common_pb2.AnyValue(string_value=f"rack-{i % 3}"))
    metric = rm.scope_metrics.add().metrics.add()
    metric.name = "org.apache.kafka.producer.record.queue.time.max"
    point = metric.gauge.data_points.add()
    point.time_unix_nano = (T0 + i) * 1_000_000
    point.as_double = i * 1.5
    return data


def push(i: int, *, received_ms: int | None = None) -> tuple[ClientTelemetryContext, ClientTelemetryPayload]:
    client = Uuid.from_parts(1, i % 5 + 2)
    context = ClientTelemetryContext(
        push_interval_ms=30_000,
        request_context=RequestContext(connection_id=f"conn-{i}", client_id=f"producer-{i % 5}"),
        received_ms=T0 + i * 100 if received_ms is None else received_ms,
        node_id=1,
    )
    data = metrics_data(i)
    raw = data.SerializeToString()
    payload = ClientTelemetryPayload(
        client_instance_id=client,
        is_terminating=i % 10 == 9,
        content_type=OTLP_CONTENT_TYPE,
        compression_type=4,
        compressed_size=len(raw) // 2,
        data=raw,
        resource_attributes={"client_instance_id": str(client), "client_id": f"producer-{i % 5}", "node_id": "1"},
        metrics_data=data,
    )
    return context, payload


def read_all(root: Path) -> list[ArchiveRecord]:
    reader = ArchiveReader()
    records = list(reader.read(root, TELEMETRY_STREAM))
    assert reader.torn_tails == []
    return records


def test_implements_the_exporter_protocol(tmp_path: Path):
    with TelemetryArchiveExporter(tmp_path) as exporter:
        assert isinstance(exporter, ClientTelemetryExporter)


def test_every_push_is_archived_with_its_labels_and_body(tmp_path: Path):
    pushes = [push(i) for i in range(2_500)]
    exporter = TelemetryArchiveExporter(tmp_path, flush_max_records=400)
    for context, payload in pushes:
        exporter.export_metrics(context, payload)
    exporter.close()
    exporter.close()  # idempotent

    records = read_all(tmp_path)
    assert len(records) == len(pushes)
    for record, (context, payload) in zip(records, pushes, strict=True):
        assert record.time_ms == context.received_ms
        assert record.body == payload.data
        assert metrics_pb2.MetricsData.FromString(record.body) == payload.metrics_data
        assert record.labels == {
            **payload.resource_attributes,
            LABEL_PUSH_INTERVAL_MS: "30000",
            LABEL_COMPRESSION_TYPE: "4",
            LABEL_TERMINATING: "true" if payload.is_terminating else "false",
            LABEL_CONTENT_TYPE: "application/x-protobuf",
        }
    stats = exporter.stats()
    assert (stats.exported, stats.dropped, stats.errors, stats.queued) == (2_500, 0, 0, 0)
    assert stats.flushes >= 1  # how many depends on how far the thread got before close
    assert stats.bytes_written == sum(p.stat().st_size for p in tmp_path.rglob("*.seg"))
    assert not exporter.running


def test_flush_makes_everything_durable_and_readable(tmp_path: Path):
    exporter = TelemetryArchiveExporter(tmp_path, flush_max_records=10_000, flush_max_ms=3_600_000)
    for i in range(50):
        exporter.export_metrics(*push(i))
    assert exporter.flush(timeout=WAIT_S)
    assert exporter.exported == 50 and len(read_all(tmp_path)) == 50
    assert exporter.flush(timeout=WAIT_S)  # nothing new: returns at once
    exporter.close()


def test_flush_max_records_flushes_without_being_asked(tmp_path: Path):
    exporter = TelemetryArchiveExporter(tmp_path, flush_max_records=10, flush_max_ms=3_600_000)
    for i in range(10):
        exporter.export_metrics(*push(i))
    wait_until(lambda: exporter.flushes >= 1, "the record bound to trigger a flush")
    assert exporter.exported == 10
    assert [r.time_ms for r in read_all(tmp_path)] == [T0 + i * 100 for i in range(10)]
    exporter.close()


def test_flush_max_ms_flushes_a_quiet_trickle(tmp_path: Path):
    exporter = TelemetryArchiveExporter(tmp_path, flush_max_records=1_000, flush_max_ms=20)
    exporter.export_metrics(*push(0))
    wait_until(lambda: exporter.flushes >= 1, "the time bound to trigger a flush")
    assert len(read_all(tmp_path)) == 1
    exporter.close()


def test_pushes_span_hours_into_their_partitions(tmp_path: Path):
    hour = 3_600_000
    with TelemetryArchiveExporter(tmp_path) as exporter:
        for i in range(6):
            exporter.export_metrics(*push(i, received_ms=T0 + i * hour // 2))  # 22:13, 22:43, ... 00:43 UTC
    dirs = sorted({p.parent.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.seg")})
    assert dirs == [
        "telemetry/date=2023-11-14/hour=22",
        "telemetry/date=2023-11-14/hour=23",
        "telemetry/date=2023-11-15/hour=00",
    ]
    assert [r.time_ms for r in read_all(tmp_path)] == [T0 + i * hour // 2 for i in range(6)]


# --- a writer we can stall or break ---------------------------------------------------------------------
class ControlledWriter:
    """A real ArchiveWriter whose append can be held on an Event and whose flush can be made to fail."""

    def __init__(self, root: Path) -> None:
        self.inner = ArchiveWriter(root, TELEMETRY_STREAM, writer_id="test")
        self.release = threading.Event()
        self.release.set()
        self.in_append = threading.Event()
        self.fail_flushes = 0
        self.fail_with: Exception = OSError(28, "No space left on device")
        self.flush_calls = 0

    @property
    def pending_records(self) -> int:
        return self.inner.pending_records

    @property
    def bytes_written(self) -> int:
        return self.inner.bytes_written

    def append(self, record: ArchiveRecord) -> None:
        self.in_append.set()
        self.release.wait()
        self.inner.append(record)

    def flush(self, *, fsync: bool = True) -> int:
        self.flush_calls += 1
        if self.fail_flushes:
            self.fail_flushes -= 1
            raise self.fail_with
        return self.inner.flush(fsync=fsync)

    def discard_pending(self) -> int:
        return self.inner.discard_pending()

    def close(self) -> None:
        self.inner.close()


def stuck_with_push_0(tmp_path: Path) -> tuple[ControlledWriter, TelemetryArchiveExporter]:
    """An exporter with a queue of 3 whose thread holds push 0 and is stuck in the writer (until
    ``writer.release`` is set)."""
    writer = ControlledWriter(tmp_path)
    writer.release.clear()
    exporter = TelemetryArchiveExporter(writer=writer, queue_capacity=3, flush_max_records=100)
    exporter.export_metrics(*push(0))
    assert writer.in_append.wait(WAIT_S)
    return writer, exporter


def test_submit_many_queues_in_order_and_drops_what_a_full_queue_cannot_hold(tmp_path: Path):
    writer, exporter = stuck_with_push_0(tmp_path)

    assert exporter.submit_many([push(i) for i in (1, 2)]) == 2
    assert exporter.submit_many([push(i) for i in (3, 4, 5)]) == 1  # room for one: 4 and 5 dropped
    assert exporter.submit_many([]) == 0
    assert exporter.stats().queued == 3 and exporter.dropped == 2

    writer.release.set()
    exporter.close()
    assert [r.time_ms for r in read_all(tmp_path)] == [T0 + i * 100 for i in range(4)]
    assert exporter.submit_many([push(6)]) == 0  # closed: dropped and counted, not raised
    assert (exporter.exported, exporter.dropped, exporter.errors) == (4, 3, 0)


def test_the_thread_takes_pushes_by_the_batch_not_one_by_one(tmp_path: Path):
    """Pushes linger in the queue until ``linger_records`` of them wait (or the oldest waited ``linger_ms``, or a
    flush asks): a thread woken for every push, in a process whose request path releases the GIL, ran between
    every two pushes."""
    writer = ControlledWriter(tmp_path)
    exporter = TelemetryArchiveExporter(writer=writer, linger_records=5, linger_ms=3_600_000, flush_max_ms=3_600_000)
    for i in range(4):
        exporter.export_metrics(*push(i))
    assert not writer.in_append.wait(0.3), "the thread took a push before linger_records of them waited"
    assert exporter.stats().queued == 4
    exporter.export_metrics(*push(4))  # the fifth: all five are taken
    wait_until(lambda: exporter.stats().queued == 0, "the batch of five to be taken")
    exporter.export_metrics(*push(5))
    assert exporter.flush(timeout=WAIT_S)  # a flush takes what lingers
    exporter.close()
    assert [r.time_ms for r in read_all(tmp_path)] == [T0 + i * 100 for i in range(6)]


def test_a_lone_push_is_taken_after_linger_ms(tmp_path: Path):
    writer = ControlledWriter(tmp_path)
    exporter = TelemetryArchiveExporter(writer=writer, linger_records=1_000, linger_ms=1)
    exporter.export_metrics(*push(0))
    assert writer.in_append.wait(WAIT_S)
    exporter.close()
    assert len(read_all(tmp_path)) == 1


def deferred(context_payload: tuple[ClientTelemetryContext, ClientTelemetryPayload], memo: dict) -> tuple:
    """The push as the manager hands it on: a deferred payload with its instance's ``labels_memo``."""
    context, p = context_payload
    payload = DeferredClientTelemetryPayload(
        p.client_instance_id,
        p.is_terminating,
        p.content_type,
        p.compression_type,
        p.compressed_size,
        p.data,
        p.resource_attributes,
        p.metrics_data,
        lambda data: None,
        memo,
    )
    return context, payload


def test_a_push_with_its_instances_memo_is_archived_as_one_without(tmp_path: Path):
    """The manager's pushes carry their instance's ``labels_memo``: their labels are encoded once per instance
    (and push labels) and kept there, and what reaches the disk is what the plain payloads give."""
    plain = [push(i) for i in range(60)]
    memos: dict[str, dict] = {}
    with_memo = [deferred(p, memos.setdefault(p[1].resource_attributes["client_id"], {})) for p in plain]
    for root, pushes in ((tmp_path / "plain", plain), (tmp_path / "memo", with_memo)):
        with TelemetryArchiveExporter(root, writer_id="same") as exporter:
            assert exporter.submit_many(pushes) == len(pushes)
    assert read_all(tmp_path / "memo") == read_all(tmp_path / "plain")
    assert sorted(p.name for p in (tmp_path / "memo").rglob("*.seg")) == sorted(
        p.name for p in (tmp_path / "plain").rglob("*.seg")
    )

    first, again, terminating = with_memo[0], with_memo[10], with_memo[9]  # the same instance as 0: i % 5 == 0
    labels = telemetry_record(*first).labels
    assert isinstance(labels, EncodedLabels) and telemetry_record(*again).labels is labels
    assert telemetry_record(*terminating).labels is not labels
    assert telemetry_record(*terminating).labels[LABEL_TERMINATING] == "true"
    assert len(memos["producer-0"]) == 1 and len(memos["producer-4"]) == 2  # one label set each, 9's terminates


def test_a_bad_label_with_a_memo_is_refused_every_time_and_kept_out_of_it(tmp_path: Path):
    memo: dict = {}
    context, payload = push(1)
    bad = ClientTelemetryPayload(
        **{**{f: getattr(payload, f) for f in payload.__slots__}, "resource_attributes": {"n": 1}}
    )
    with TelemetryArchiveExporter(tmp_path) as exporter:
        exporter.submit_many([deferred((context, bad), memo), deferred((context, bad), memo), push(2)])
    assert memo == {}
    assert [r.time_ms for r in read_all(tmp_path)] == [T0 + 200]
    assert (exporter.exported, exporter.dropped, exporter.errors) == (1, 2, 2)


class _Decoded:
    """Stands in for a push's decoded OTLP message (protobuf messages take no weak references)."""


def test_a_queued_push_keeps_its_record_not_its_decoded_message(tmp_path: Path):
    """The queue holds the record (time, labels, body): a push's decoded message is freed on the thread that
    made it, not kept until the archive's thread takes the push (docs/performance.md)."""
    writer, exporter = stuck_with_push_0(tmp_path)
    context, payload = push(1)
    decoded = _Decoded()
    freed = threading.Event()
    weakref.finalize(decoded, freed.set)
    exporter.export_metrics(context, dataclasses.replace(payload, metrics_data=decoded))
    del decoded
    assert exporter.stats().queued == 1
    assert freed.is_set(), "the queued push still holds its decoded message"

    writer.release.set()
    exporter.close()
    assert [r.body for r in read_all(tmp_path)] == [push(0)[1].data, payload.data]
    assert (exporter.exported, exporter.dropped, exporter.errors) == (2, 0, 0)


def test_what_is_not_a_push_is_dropped_and_counted_not_raised_into_the_request_path(tmp_path: Path):
    context = push(1)[0]
    with TelemetryArchiveExporter(tmp_path) as exporter:
        assert exporter.submit((context, object())) is False  # no payload's attributes: not a push
        assert exporter.submit_many([(context,), push(2)]) == 1  # one element short
    assert [r.time_ms for r in read_all(tmp_path)] == [T0 + 200]
    assert (exporter.exported, exporter.dropped, exporter.errors) == (1, 2, 2)


def test_full_queue_drops_and_never_blocks(tmp_path: Path):
    writer, exporter = stuck_with_push_0(tmp_path)

    done = threading.Event()

    def producer() -> None:
        for i in range(1, 101):
            exporter.export_metrics(*push(i))
        done.set()

    threading.Thread(target=producer, daemon=True).start()
    assert done.wait(WAIT_S), "export_metrics blocked behind a stuck writer"
    assert exporter.stats().queued == 3 and exporter.dropped == 97

    writer.release.set()
    exporter.close()
    assert [r.time_ms for r in read_all(tmp_path)] == [T0 + i * 100 for i in range(4)]
    assert (exporter.exported, exporter.dropped, exporter.errors) == (4, 97, 0)


def test_io_errors_are_counted_logged_once_and_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    writer = ControlledWriter(tmp_path)
    writer.fail_flushes = 3
    exporter = TelemetryArchiveExporter(writer=writer, flush_max_records=5, retry_backoff_ms=1)
    with caplog.at_level(logging.ERROR, logger="quotaplane.exporters.archive"):
        for i in range(5):
            exporter.export_metrics(*push(i))  # never raises
        wait_until(lambda: exporter.flushes >= 1, "a flush to succeed after three failures")
    assert exporter.errors == 3 and exporter.running
    assert len([r for r in caplog.records if "No space left" in r.getMessage()]) == 1
    assert exporter.exported == 5 and len(read_all(tmp_path)) == 5
    exporter.close()


def test_flush_reports_a_failed_flush(tmp_path: Path):
    writer = ControlledWriter(tmp_path)
    writer.fail_flushes = 1
    exporter = TelemetryArchiveExporter(writer=writer, retry_backoff_ms=3_600_000, flush_max_ms=3_600_000)
    exporter.export_metrics(*push(0))
    assert exporter.flush(timeout=WAIT_S) is False
    assert exporter.errors == 1 and exporter.exported == 0
    exporter.close()  # the final flush succeeds: nothing lost
    assert exporter.exported == 1 and len(read_all(tmp_path)) == 1


def test_close_with_a_dead_disk_drops_and_returns(tmp_path: Path):
    writer = ControlledWriter(tmp_path)
    writer.fail_flushes = 1_000
    exporter = TelemetryArchiveExporter(writer=writer, retry_backoff_ms=3_600_000)
    for i in range(5):
        exporter.export_metrics(*push(i))
    exporter.close()
    assert not exporter.running and exporter.exported == 0 and exporter.dropped == 5 and exporter.errors >= 1
    exporter.export_metrics(*push(9))  # after close: counted, not raised
    assert exporter.dropped == 6


def test_a_bug_in_the_writer_drops_its_records_and_the_thread_lives(tmp_path: Path):
    writer = ControlledWriter(tmp_path)
    writer.fail_flushes = 1
    writer.fail_with = RuntimeError("a bug")
    exporter = TelemetryArchiveExporter(writer=writer, flush_max_ms=3_600_000)
    for i in range(3):
        exporter.export_metrics(*push(i))
    assert exporter.flush(timeout=WAIT_S) is False
    assert (exporter.exported, exporter.dropped, exporter.errors) == (0, 3, 1) and exporter.running
    exporter.export_metrics(*push(3))
    assert exporter.flush(timeout=WAIT_S)
    exporter.close()
    assert [r.time_ms for r in read_all(tmp_path)] == [T0 + 300]


def test_unencodable_push_is_dropped_alone(tmp_path: Path):
    context, payload = push(1)
    bad = ClientTelemetryPayload(
        **{**{f: getattr(payload, f) for f in payload.__slots__}, "resource_attributes": {"n": 1}}
    )
    with TelemetryArchiveExporter(tmp_path) as exporter:
        exporter.export_metrics(*push(0))
        exporter.export_metrics(context, bad)
        exporter.export_metrics(*push(2))
    assert [r.time_ms for r in read_all(tmp_path)] == [T0, T0 + 200]
    assert (exporter.exported, exporter.dropped, exporter.errors) == (2, 1, 1)


def test_record_of_a_push_keeps_ours_over_a_clashing_attribute():
    context, payload = push(3)
    clash = ClientTelemetryPayload(
        **{**{f: getattr(payload, f) for f in payload.__slots__}, "resource_attributes": {"terminating": "x"}}
    )
    assert telemetry_record(context, clash).labels[LABEL_TERMINATING] == "false"


def test_constructor_checks(tmp_path: Path):
    with pytest.raises(ValueError):
        TelemetryArchiveExporter()
    with pytest.raises(ValueError):
        TelemetryArchiveExporter(tmp_path, writer=ControlledWriter(tmp_path))
    with pytest.raises(ValueError):
        TelemetryArchiveExporter(tmp_path, queue_capacity=0)
    with pytest.raises(ValueError, match="linger_records"):
        TelemetryArchiveExporter(tmp_path, linger_records=0)
    with pytest.raises(ValueError, match="linger_ms"):
        TelemetryArchiveExporter(tmp_path, linger_ms=-1)
