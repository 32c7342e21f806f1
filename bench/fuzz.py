"""Fuzzing every decoder a remote party (or a damaged disk) can reach, at volume.

Each *target* is one decoder with the exceptions its documentation promises on bad input. An input passes
when the decoder returns or raises one of those; anything else is a **finding**: another exception (an
``IndexError``, ``struct.error``, ``MemoryError``...), a run over the per-input time limit (a hang), or an
allocation far beyond what the input could justify (a length field trusted before it was checked).

Targets (``--target NAME``; all by default): ``kafka_request`` (``decode_request``, every API and version the
frontend serves), ``kafka_response`` (``decode_response`` of every response the proxy reads, and
``rewrite_response`` for the address carriers it re-encodes), ``proxy_frames`` (the proxy's in-place frame readers:
``peek_client_id``, ``produce_acks``, ``fetch_limits``, ``set_throttle_time``, ``producer_ids``...),
``telemetry_decompress`` (KIP-714 ``decompress``, every codec, with a size cap), ``otlp_metrics``
(``decode_metrics_data``), ``telemetry_points`` (the Spark job's compiled point decoder, which must give its
reference's columns on every input protobuf accepts), ``grpc_quota`` (protobuf parse of the gateway's batches, then
their checks), ``config_frames`` (``iter_frames`` + ``decode_event_batch``), ``config_recovery`` (segment recovery,
read only), ``config_snapshot`` (``read_snapshot``), ``config_recovery_point`` (a log opened behind a mutated
recovery-point checkpoint must equal a full scan: no exception allowed), ``archive_segment``
(``decode_segment_bytes``).

Engines. ``mutation`` (always available, deterministic with ``--seed``): a corpus of valid inputs made by
the project's own encoders, mutated (bit flips, interesting integers over lengths, varint bombs,
truncations, inserts, deletions, duplications, splices of two seeds). Targets behind CRCs (config frames,
snapshots, archive batches) have a *fixup* that recomputes the CRCs of half the mutated inputs, so the
decoders behind the checksum are reached too. ``atheris`` (coverage-guided libFuzzer, when the ``atheris``
package is importable): one subprocess per target, same seeds, same checks.

Checks per input: the exception type; wall time against ``--time-limit`` (SIGALRM interrupts a hang, and
a run over the limit is a finding); every ``--memory-every``-th input runs under ``tracemalloc`` and a
peak above ``--memory-limit-mb`` is a finding (a lazily mapped buffer costs no RSS but is still a 1 GB
request that ``vm.overcommit_memory=2`` refuses); the process's peak RSS is reported per target.

Findings are minimised (greedy chunk removal keeping the same exception type) and reported with their
hex. ``--quick``: 5,000 inputs per target. The JSON report goes to stdout (or ``--out``).

    .venv/bin/python bench/fuzz.py --quick
    .venv/bin/python bench/fuzz.py --target kafka_request --inputs 1000000
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import json
import logging
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import machine

# ------------------------------------------------------------------------------------------------------------
# Targets


@dataclasses.dataclass
class Target:
    """One decoder: ``run(data)`` exercises it, ``allowed`` its documented errors on bad input."""

    name: str
    run: Callable[[bytes], Any]
    allowed: tuple[type[BaseException], ...]
    seeds: Callable[[], list[bytes]]
    fixup: Callable[[bytes], bytes] | None = None
    #: inputs are capped at this size (mutations that grow past it are cut)
    max_len: int = 4096


class _Populate:
    """Random but valid instances of the protocol's generated classes, from their schemas."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def primitive(self, type_name: str) -> Any:
        from quotaplane.kafka_uuid import Uuid

        r = self.rng
        bits = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
        if type_name in bits:
            b = bits[type_name]
            return r.choice([0, 1, -1, r.randint(-(2 ** (b - 1)), 2 ** (b - 1) - 1)])
        if type_name == "uint16":
            return r.randint(0, 0xFFFF)
        if type_name == "float64":
            return r.choice([0.0, 1.5, -2.0])
        if type_name == "bool":
            return r.random() < 0.5
        if type_name == "string":
            return r.choice(["", "a", "topic-1", "user:alice", "é✓", "x" * 40])
        if type_name == "bytes":
            return r.randbytes(r.randint(0, 24))
        if type_name == "uuid":
            return Uuid(r.randbytes(16))
        raise ValueError(type_name)

    def struct(self, cls: type, fields: tuple, version: int, depth: int = 0) -> Any:
        kwargs = {}
        for f in fields:
            if version not in f.versions:
                continue
            count = self.rng.randint(0, 2 if depth < 2 else 1) if f.is_array else 1
            if f.is_struct:
                sub = getattr(cls, f.element_type)
                values = [self.struct(sub, f.fields, version, depth + 1) for _ in range(count)]
            else:
                values = [self.primitive(f.element_type) for _ in range(count)]
            value: Any = values if f.is_array else values[0]
            if version in f.nullable_versions and self.rng.random() < 0.15:
                value = None
            kwargs[f.py_name] = value
        return cls(**kwargs)


def _message_seeds(kind: str, per_version: int = 3) -> list[tuple[int, int, bytes]]:
    """(api key, version, frame without size prefix) of requests or responses of every API and version."""
    from quotaplane.protocol import APIS, ProtocolError, encode_request, encode_response

    rng = random.Random(714)
    pop = _Populate(rng)
    out = []
    for key, (req, resp) in sorted(APIS.items()):
        spec = req if kind == "request" else resp
        for v in spec.versions:
            for i in range(per_version):
                body = spec.cls() if i == 0 else pop.struct(spec.cls, spec.fields, v)
                try:
                    if kind == "request":
                        wire = encode_request(key, v, rng.randint(0, 2**31 - 1), body, client_id="rdkafka")
                    else:
                        wire = encode_response(key, v, rng.randint(0, 2**31 - 1), body)
                except ProtocolError:
                    continue
                out.append((key, v, wire[4:]))
    return out


def _kafka_request_target() -> Target:
    from quotaplane.protocol import ProtocolError, decode_request

    def run(data: bytes) -> None:
        decode_request(data)

    return Target(
        "kafka_request", run, (ProtocolError,), lambda: [w for _, _, w in _message_seeds("request")], max_len=2048
    )


def _response_keys() -> list[tuple[int, int]]:
    from quotaplane.protocol import APIS

    return [(key, v) for key, (_, resp) in sorted(APIS.items()) for v in resp.versions]


def _kafka_response_target() -> Target:
    """Two selector bytes pick (api key, version), the rest is the frame; the address carriers go through
    ``rewrite_response`` (decode, patch, re-encode), the others through ``decode_response``."""
    from quotaplane.protocol import ProtocolError, decode_response
    from quotaplane.services.proxy._brokers import BrokerMap
    from quotaplane.services.proxy._rewrite import REWRITTEN_APIS, rewrite_response

    keys = _response_keys()
    index = {kv: i for i, kv in enumerate(keys)}

    def run(data: bytes) -> None:
        if len(data) < 2:
            return
        key, version = keys[int.from_bytes(data[:2], "big") % len(keys)]
        frame = data[2:]
        if key in REWRITTEN_APIS:
            rewrite_response(key, version, frame, BrokerMap("upstream:9092", broker_port_base=19092), "proxy")
        else:
            decode_response(key, version, frame)

    def seeds() -> list[bytes]:
        return [index[key, v].to_bytes(2, "big") + w for key, v, w in _message_seeds("response")]

    return Target("kafka_response", run, (ProtocolError,), seeds, max_len=2048)


def _proxy_frames_target() -> Target:
    """Selector byte: which reader; then the version byte; then the frame (request or response)."""
    from quotaplane.protocol import ProtocolError
    from quotaplane.protocol import fetch as pf
    from quotaplane.protocol import frames as fr
    from quotaplane.protocol.records import producer_ids

    def run(data: bytes) -> None:
        if len(data) < 2:
            return
        which, version, frame = data[0] % 8, data[1] % 20, data[2:]
        if which == 0:
            fr.peek_request(frame)
        elif which == 1:
            fr.peek_client_id(frame)
        elif which == 2:
            fr.produce_acks(frame, 3 + version % 7)
        elif which == 3:
            limits = pf.fetch_limits(frame, version % 16)
            pf.cap_fetch_bytes(frame, limits, 4096)
        elif which == 4:
            fr.set_throttle_time(int.from_bytes(frame[:1] or b"\0", "big") % 80, version, bytearray(frame[1:]), 250)
        elif which == 5:
            pf.fetch_response_size(frame, version)
        elif which == 6:
            producer_ids(frame)
        else:
            fr.request_body_offset(frame, version % 2 == 1)

    def seeds() -> list[bytes]:
        from quotaplane.protocol import ProduceRequest, encode_request

        out = []
        for key, v, wire in _message_seeds("request", per_version=1):
            out.append(bytes([key % 8, v]) + wire)
        batch = bytearray(61)
        batch[8:12] = (49).to_bytes(4, "big")
        batch[16] = 2
        batch[43:51] = (4242).to_bytes(8, "big")
        out.append(b"\x06\x00" + bytes(batch) * 2)
        for v in (3, 7, 9):
            out.append(
                bytes([2, v - 3]) + encode_request(0, v, 1, ProduceRequest(acks=1, timeout_ms=30000, topic_data=[]))[4:]
            )
        head = bytes.fromhex("0001000b0000000500027161")
        out.append(b"\x03\x0b" + head + bytes.fromhex("ffffffff000001f40000000100100000000000000000ffffffff"))
        out.append(b"\x04\x04\x0c" + bytes.fromhex("0000000700000000000000"))
        return out

    return Target("proxy_frames", run, (ProtocolError,), seeds, max_len=1024)


def _telemetry_target() -> Target:
    """Selector byte: the compression id (0-4, and a few unknown ones); the rest is the payload; the cap is
    64 KiB, so every bomb must stop there."""
    from quotaplane.errors import InvalidRecordError, TelemetryTooLargeError, UnsupportedCompressionTypeError
    from quotaplane.telemetry import compress, decompress

    limit = 64 * 1024

    def run(data: bytes) -> None:
        if not data:
            return
        out = decompress(data[0] % 7, data[1:], limit)
        if len(out) > limit:
            raise AssertionError(f"decompress returned {len(out)} bytes, over its limit of {limit}")

    def seeds() -> list[bytes]:
        rng = random.Random(87)
        raws = [b"", b"otlp " * 50, rng.randbytes(300), b"\0" * (limit + 10), bytes(range(256)) * 8]
        out = [bytes([c]) + compress(c, raw) for c in range(5) for raw in raws]
        xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
        block = compress(2, b"java snappy " * 20)
        out.append(b"\x02" + xerial + struct.pack(">i", len(block)) + block)
        return out

    return Target(
        "telemetry_decompress",
        run,
        (InvalidRecordError, TelemetryTooLargeError, UnsupportedCompressionTypeError),
        seeds,
        max_len=8192,
    )


def _metrics_data_seed() -> bytes:
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

    md = MetricsData()
    rm = md.resource_metrics.add()
    kv = rm.resource.attributes.add()
    kv.key, kv.value.string_value = "client_id", "producer-1"
    metrics = rm.scope_metrics.add().metrics
    gauge = metrics.add(name="org.apache.kafka.producer.io.wait.ratio").gauge
    gauge.data_points.add(as_double=0.5, time_unix_nano=1_700_000_000_000_000_000)
    total = metrics.add(name="org.apache.kafka.producer.record.send.total").sum
    total.is_monotonic = True
    total.data_points.add(as_int=12, start_time_unix_nano=1, time_unix_nano=2)
    hist = metrics.add(name="latency").histogram
    hist.data_points.add(count=3, sum=1.5, bucket_counts=[1, 2], explicit_bounds=[0.5])
    return md.SerializeToString()


def _otlp_target() -> Target:
    from quotaplane.errors import InvalidRecordError
    from quotaplane.telemetry import decode_metrics_data

    def run(data: bytes) -> None:
        decode_metrics_data(data)

    return Target("otlp_metrics", run, (InvalidRecordError,), lambda: [b"", _metrics_data_seed()])


def _telemetry_points_target() -> Target:
    """The Spark telemetry job's compiled point decoder against its reference, the walk of the parsed push: on
    every input protobuf accepts, the two must give the same columns (floats compared by their bits)."""
    import struct

    from quotaplane.archive import ArchiveRecord
    from quotaplane.spark import _arrow_telemetry

    compiled = _arrow_telemetry._DEFAULT_DECODER
    if compiled is None:
        raise SystemExit("telemetry_points: the compiled decoder is not built (no C compiler at install?)")

    def bits(value: Any) -> Any:
        if isinstance(value, float):
            return struct.pack("<d", value)
        if isinstance(value, dict):
            return {k: bits(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [bits(v) for v in value]
        return value

    def run(data: bytes) -> None:
        records = [ArchiveRecord(1_700_000_000_000, {"client_id": "c"}, data)]
        reference = _arrow_telemetry.push_batch("s", 1_700_000_000_000, records, decoder=None)
        fast = _arrow_telemetry.push_batch("s", 1_700_000_000_000, records, decoder=compiled)
        if reference[1] != fast[1] or bits(reference[0].to_pylist()) != bits(fast[0].to_pylist()):
            raise AssertionError("the compiled point decoder differs from the reference")

    return Target("telemetry_points", run, (), lambda: [b"", _metrics_data_seed()])


def _grpc_target() -> Target:
    """Selector byte: which batch message; the rest is parsed as gRPC would (protobuf), then checked."""
    from google.protobuf.message import DecodeError

    from quotaplane.services.gateway._checks import GatewayConfig, InvalidArgument
    from quotaplane.services.gateway._producer_id_service import producer_id_items
    from quotaplane.services.gateway._quota_service import (
        mutation_items,
        replication_items,
        request_items,
        usage_items,
    )
    from quotaplane.v1 import quota_pb2 as pb

    config = GatewayConfig(max_batch_items=1000)
    checks = [
        (pb.UsageBatch, usage_items),
        (pb.RequestTimeBatch, request_items),
        (pb.MutationBatch, mutation_items),
        (pb.ReplicationBatch, replication_items),
        (pb.ProducerIdBatch, producer_id_items),
    ]

    def run(data: bytes) -> None:
        if not data:
            return
        message, check = checks[data[0] % len(checks)]
        check(config, message.FromString(data[1:]), 1_700_000_000_000)

    def seeds() -> list[bytes]:
        usage = pb.UsageBatch()
        usage.items.add(quota_type=pb.PRODUCE, user="alice", client_id="c1", value=1024.0)
        usage.items.add(quota_type=pb.FETCH, user="bob", client_id="", value=1.0, now_ms=5)
        columns = pb.UsageBatch()
        columns.columns.quota_type.extend([pb.PRODUCE, pb.FETCH])
        columns.columns.user.extend(["alice", "bob"])
        columns.columns.client_id.extend(["c1", "c2"])
        columns.columns.value.extend([1.0, 2.0])
        requests = pb.RequestTimeBatch()
        requests.items.add(user="alice", client_id="c1", request_thread_time_nanos=1000, network_thread_time_nanos=5)
        mutations = pb.MutationBatch()
        mutations.items.add(user="alice", client_id="c1", mode=pb.STRICT, permits=[1.0, 2.0])
        replication = pb.ReplicationBatch()
        replication.items.add(node_id=1, type=pb.LEADER_REPLICATION, topic="t", partition=0, record_bytes=10.0)
        pids = pb.ProducerIdBatch()
        pids.items.add(user="alice", producer_id=42)
        messages = [usage, columns, requests, mutations, replication, pids]
        selectors = [0, 0, 1, 2, 3, 4]
        return [bytes([s]) + m.SerializeToString() for s, m in zip(selectors, messages, strict=True)]

    return Target("grpc_quota", run, (DecodeError, InvalidArgument), seeds)


def _events(rng: random.Random, count: int) -> list[Any]:
    from quotaplane.v1 import config_events_pb2 as pb

    events = []
    for i in range(count):
        event = pb.Event(commit_time_ms=1_700_000_000_000 + i, principal="User:ops", request_id=f"r{i}")
        if rng.random() < 0.7:
            event.client_quota.entity.add(entity_type="user", entity_name=rng.choice(["alice", "bob"]))
            event.client_quota.key = rng.choice(["producer_byte_rate", "consumer_byte_rate", "request_percentage"])
            event.client_quota.value = float(rng.randint(1, 10**6))
        else:
            event.client_quota.entity.add(entity_type="client-id")
            event.client_quota.key = "producer_byte_rate"
            event.client_quota.remove = True
        events.append(event)
    return events


def _fix_config_crcs(data: bytes) -> bytes:
    """Recompute both CRCs of every frame (by its claimed length, cut at the end): the decoders behind them."""
    import crc32c

    buf = bytearray(data)
    pos = 0
    while len(buf) - pos >= 36:
        (length,) = struct.unpack_from(">I", buf, pos + 4)
        payload = bytes(buf[pos + 36 : pos + 36 + length])
        struct.pack_into(">I", buf, pos + 28, crc32c.crc32c(payload))
        struct.pack_into(">I", buf, pos + 32, crc32c.crc32c(bytes(buf[pos : pos + 32])))
        pos += 36 + length
    return bytes(buf)


def _config_seeds() -> list[bytes]:
    from quotaplane.config._columns import encode_events
    from quotaplane.config._framing import CODEC_NONE, CODEC_ZSTD, encode_event_batch, encode_frame

    rng = random.Random(36)
    out = []
    for n in (1, 2, 5):
        first = encode_event_batch(_events(rng, n), base_offset=0)
        second = encode_event_batch(_events(rng, 2), base_offset=n)
        out += [first, first + second]
        for codec in (CODEC_NONE, CODEC_ZSTD):
            out.append(
                encode_frame(
                    encode_events(_events(rng, n)), base_offset=0, record_count=n, max_commit_time_ms=5, codec=codec
                )
            )
    return out


def _config_frames_target() -> Target:
    from quotaplane.config._framing import FrameError, decode_event_batch, iter_frames

    def run(data: bytes) -> None:
        for header in iter_frames(data):
            decode_event_batch(data, header)

    return Target("config_frames", run, (FrameError,), _config_seeds, fixup=_fix_config_crcs)


def _scratch_dir() -> Path:
    """A directory in RAM (``/dev/shm`` where there is one), removed when the process exits."""
    root = "/dev/shm" if os.path.isdir("/dev/shm") else None
    directory = Path(tempfile.mkdtemp(prefix="qp-fuzz-", dir=root))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


class _Scratch:
    """One file in a RAM-backed directory, rewritten per input (recovery and snapshots read paths)."""

    def __init__(self, name: str) -> None:
        self.dir = _scratch_dir()
        self.path = self.dir / name

    def write(self, data: bytes) -> Path:
        self.path.write_bytes(data)
        return self.path


def _config_recovery_target() -> Target:
    from quotaplane.config._log_errors import CorruptLogError
    from quotaplane.config._segments import recover, segment_name

    scratch = _Scratch(segment_name(0))

    def run(data: bytes) -> None:
        scratch.write(data)
        recover(scratch.dir, read_only=True, fsync=False)

    return Target("config_recovery", run, (CorruptLogError,), _config_seeds, fixup=_fix_config_crcs)


class CheckpointChangedTheLog(AssertionError):
    """The log opened with a mutated recovery-point checkpoint differs from the full scan (a finding)."""


def _config_recovery_point_target() -> Target:
    """A log of several segments behind a mutated ``recovery-point-checkpoint``: whatever the checkpoint says,
    the log must open to the same offsets and events as a full scan (a bad checkpoint may only cost time)."""
    from quotaplane.config._log import EventLog
    from quotaplane.config._recovery_point import CHECKPOINT_FILE

    directory = _scratch_dir()
    rng = random.Random(7)
    checkpoints: list[bytes] = []
    log = EventLog.open(directory, segment_bytes=512, fsync=False)  # a few events a segment: cheap opens
    for _ in range(16):
        log.append(_events(rng, rng.randint(1, 4)))
        written = directory / CHECKPOINT_FILE
        if written.exists() and (not checkpoints or written.read_bytes() != checkpoints[-1]):
            checkpoints.append(written.read_bytes())  # one per roll: the recovery point at that segment
    log.close()
    checkpoints.append((directory / CHECKPOINT_FILE).read_bytes())  # the clean close's: the log end

    def contents(log: EventLog) -> tuple[int, int, list[bytes]]:
        return log.start_offset, log.end_offset, [e.SerializeToString() for _, e in log.read()]

    full = EventLog.open(directory, read_only=True, full_recovery=True)
    expected = contents(full)
    full.close()

    def run(data: bytes) -> None:
        (directory / CHECKPOINT_FILE).write_bytes(data)
        opened = EventLog.open(directory, read_only=True)
        try:
            if contents(opened) != expected:
                raise CheckpointChangedTheLog("the log opened with this checkpoint differs from a full scan")
        finally:
            opened.close()

    def fix_crc(data: bytes) -> bytes:
        import crc32c

        return data[:-4] + struct.pack(">I", crc32c.crc32c(data[:-4])) if len(data) > 4 else data

    return Target("config_recovery_point", run, (), lambda: list(checkpoints), fixup=fix_crc)


def _config_snapshot_target() -> Target:
    from quotaplane.config._snapshot_file import CorruptSnapshotError, read_snapshot, snapshot_name, write_snapshot
    from quotaplane.v1 import config_events_pb2 as pb

    scratch = _Scratch(snapshot_name(5))

    def run(data: bytes) -> None:
        _header, entries = read_snapshot(scratch.write(data))
        for _ in entries:
            pass

    def seeds() -> list[bytes]:
        rng = random.Random(5)
        out = []
        with tempfile.TemporaryDirectory() as d:
            for per_frame in (1, 2, 4):
                events = _events(rng, 4)
                path = write_snapshot(
                    d,
                    pb.SnapshotHeader(end_offset=5),
                    list(enumerate(events, start=1)),
                    entries_per_frame=per_frame,
                    fsync=False,
                )
                out.append(path.read_bytes())
        return out

    return Target("config_snapshot", run, (CorruptSnapshotError,), seeds, fixup=_fix_config_crcs)


def _fix_archive_crcs(data: bytes) -> bytes:
    """Recompute the CRC of every batch after the file header (by its claimed length, cut at the end)."""
    import crc32c

    buf = bytearray(data)
    pos = 8
    while len(buf) - pos >= 36:
        (clen,) = struct.unpack_from(">I", buf, pos + 32)
        end = min(pos + 36 + clen, len(buf))
        struct.pack_into(">I", buf, pos + 3, crc32c.crc32c(bytes(buf[pos + 7 : end])))
        pos = end
    return bytes(buf)


def _archive_target() -> Target:
    from quotaplane.archive import ArchiveCorruptError, decode_segment_bytes
    from quotaplane.archive._format import FILE_HEADER, encode_batch, encode_record_fields

    def run(data: bytes) -> None:
        decode_segment_bytes(data, "fuzz.seg")

    def seeds() -> list[bytes]:
        rng = random.Random(8)
        out = [FILE_HEADER]
        for n in (1, 3):
            batches = []
            for _ in range(2):
                entries = [
                    (
                        1_700_000_000_000 + rng.randint(0, 10**6),
                        encode_record_fields({"client_id": "c1"}, rng.randbytes(20)),
                    )
                    for _ in range(n)
                ]
                batches.append(encode_batch(entries))
            out += [FILE_HEADER + batches[0], FILE_HEADER + b"".join(batches)]
        return out

    return Target("archive_segment", run, (ArchiveCorruptError,), seeds, fixup=_fix_archive_crcs)


TARGET_FACTORIES: dict[str, Callable[[], Target]] = {
    "kafka_request": _kafka_request_target,
    "kafka_response": _kafka_response_target,
    "proxy_frames": _proxy_frames_target,
    "telemetry_decompress": _telemetry_target,
    "otlp_metrics": _otlp_target,
    "telemetry_points": _telemetry_points_target,
    "grpc_quota": _grpc_target,
    "config_frames": _config_frames_target,
    "config_recovery": _config_recovery_target,
    "config_snapshot": _config_snapshot_target,
    "config_recovery_point": _config_recovery_point_target,
    "archive_segment": _archive_target,
}


# ------------------------------------------------------------------------------------------------------------
# Mutations

_INTERESTING_8 = [0x00, 0x01, 0x7F, 0x80, 0xFF]
_INTERESTING_16 = [0, 1, 0x7FFF, 0x8000, 0xFFFF, 0x00FF, 0x0100]
_INTERESTING_32 = [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x40000000, 0x00010000, 0xFFFFFFFE]
_VARINTS = [b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x7f", b"\x80\x80\x80\x80\x80\x01", b"\xff\x7f", b"\x00"]


def mutate(data: bytes, rng: random.Random, corpus: list[bytes], max_len: int) -> bytes:
    """1-4 random mutations of ``data`` (see the module docstring)."""
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 4))):
        n = len(buf)
        op = rng.randrange(11)
        pos = rng.randrange(n) if n else 0
        if op == 0 and n:
            buf[pos] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            buf[pos] = rng.choice(_INTERESTING_8) if rng.random() < 0.5 else rng.randrange(256)
        elif op == 2 and n >= 2:
            pos = rng.randrange(n - 1)
            struct.pack_into(">H", buf, pos, rng.choice(_INTERESTING_16))
        elif op == 3 and n >= 4:
            pos = rng.randrange(n - 3)
            value = rng.choice(_INTERESTING_32)
            if rng.random() < 0.3:  # near the real value: off-by-one lengths
                value = (struct.unpack_from(">I", buf, pos)[0] + rng.choice((-1, 1, 2, -2))) & 0xFFFFFFFF
            struct.pack_into(">I", buf, pos, value)
        elif op == 4:
            buf[pos:pos] = rng.choice(_VARINTS)
        elif op == 5 and n:  # truncate
            del buf[rng.randrange(n) :]
        elif op == 6:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 7 and n:
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 8 and n:  # duplicate a range
            end = min(n, pos + rng.randint(1, 64))
            at = rng.randrange(n + 1)
            buf[at:at] = buf[pos:end]
        elif op == 9 and corpus:  # splice: our head, another seed's tail
            other = rng.choice(corpus)
            cut = rng.randrange(len(other) + 1)
            buf = buf[:pos] + other[cut:]
        elif n:  # overwrite a byte-run with one value
            end = min(n, pos + rng.randint(1, 32))
            buf[pos:end] = bytes([rng.choice(_INTERESTING_8)]) * (end - pos)
    return bytes(buf[:max_len])


# ------------------------------------------------------------------------------------------------------------
# Running


class _Timeout(BaseException):
    """Raised by the SIGALRM handler: not an Exception, so no decoder's ``except Exception`` swallows it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Timeout


@dataclasses.dataclass
class Finding:
    kind: str  # crash | hang | memory
    exception: str
    message: str
    input_hex: str
    minimal_hex: str
    detail: dict = dataclasses.field(default_factory=dict)


class Checker:
    """Runs one input of a target and classifies the outcome."""

    def __init__(self, target: Target, time_limit: float, memory_limit: int) -> None:
        self.target = target
        self.time_limit = time_limit
        self.memory_limit = memory_limit
        self.peak_traced = 0

    def outcome(self, data: bytes, *, traced: bool = False) -> tuple[str, BaseException | None, float, int]:
        """('ok' | 'crash' | 'hang' | 'memory', exception, seconds, traced peak bytes)."""
        if traced:
            tracemalloc.start()
        signal.setitimer(signal.ITIMER_REAL, self.time_limit)
        start = time.perf_counter()
        exc: BaseException | None = None
        kind = "ok"
        try:
            self.target.run(data)
        except _Timeout as e:
            kind, exc = "hang", e
        except self.target.allowed:
            pass
        except Exception as e:
            kind, exc = "crash", e
        except MemoryError as e:
            kind, exc = "crash", e
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        elapsed = time.perf_counter() - start
        peak = 0
        if traced:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            self.peak_traced = max(self.peak_traced, peak)
            if kind == "ok" and peak > self.memory_limit:
                kind = "memory"
        if kind == "ok" and elapsed > self.time_limit:
            kind = "hang"
        return kind, exc, elapsed, peak

    def minimise(self, data: bytes, kind: str, exc: BaseException | None, budget: int = 400) -> bytes:
        """Greedy: drop chunks (halving sizes) while the same kind of finding with the same exception type stays."""
        want = (kind, type(exc).__name__ if exc else None)

        fixup = self.target.fixup

        def same(candidate: bytes) -> bool:
            if fixup is not None:  # keep the checksums right, or every cut is just a CRC error
                candidate = fixup(candidate)
            k, e, _, _ = self.outcome(candidate, traced=kind == "memory")
            return (k, type(e).__name__ if e else None) == want

        best = data
        chunk = max(len(best) // 2, 1)
        tries = 0
        while chunk >= 1 and tries < budget:
            i = 0
            changed = False
            while i < len(best) and tries < budget:
                candidate = best[:i] + best[i + chunk :]
                tries += 1
                if same(candidate):
                    best = candidate
                    changed = True
                else:
                    i += chunk
            if not changed:
                chunk //= 2
        return best if fixup is None else fixup(best)


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def fuzz_mutation(target: Target, inputs: int, seed: int, args: argparse.Namespace) -> dict:
    """The seeded mutation engine: ``inputs`` inputs (the seeds themselves first)."""
    checker = Checker(target, args.time_limit, args.memory_limit_mb * 1024 * 1024)
    rng = random.Random(seed)
    corpus = [s[: target.max_len] for s in target.seeds()]
    findings: dict[tuple[str, str, str], Finding] = {}
    rss_before = _rss_kib()
    slowest = 0.0
    start = time.perf_counter()
    done = 0
    memory_samples = 0
    for i in range(inputs):
        if i < len(corpus):
            data = corpus[i]
        else:
            data = mutate(rng.choice(corpus), rng, corpus, target.max_len)
            if target.fixup is not None and rng.random() < 0.5:
                data = target.fixup(data)
        traced = args.memory_every > 0 and i % args.memory_every == 0
        memory_samples += traced
        kind, exc, elapsed, peak = checker.outcome(data, traced=traced)
        slowest = max(slowest, elapsed)
        done += 1
        if kind != "ok":
            _record(findings, checker, data, kind, exc, elapsed, peak)
            if len(findings) >= args.max_findings:
                break
    seconds = time.perf_counter() - start
    return {
        "engine": "mutation",
        "seed": seed,
        "inputs": done,
        "corpus_seeds": len(corpus),
        "seconds": round(seconds, 2),
        "exec_per_s": round(done / seconds) if seconds else None,
        "slowest_input_ms": round(slowest * 1000, 3),
        "memory_samples": memory_samples,
        "peak_traced_alloc_bytes": checker.peak_traced,
        "peak_rss_kib": _rss_kib(),
        "peak_rss_growth_kib": _rss_kib() - rss_before,
        "findings": [dataclasses.asdict(f) for f in findings.values()],
    }


def _record(
    findings: dict, checker: Checker, data: bytes, kind: str, exc: BaseException | None, elapsed: float, peak: int
) -> None:
    where = ""
    if exc is not None and exc.__traceback__ is not None:
        tb = exc.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
    key = (kind, type(exc).__name__ if exc else "", where)
    if key in findings:
        findings[key].detail["count"] += 1
        return
    minimal = checker.minimise(data, kind, exc)
    findings[key] = Finding(
        kind,
        type(exc).__name__ if exc else "",
        str(exc)[:300] if exc else "",
        data.hex(),
        minimal.hex(),
        {"where": where, "seconds": round(elapsed, 3), "traced_peak_bytes": peak, "count": 1},
    )


# --- atheris (coverage-guided): one worker process per target ----------------------------------------------


def _atheris_worker(args: argparse.Namespace) -> None:
    """Runs under libFuzzer; writes its report to ``args.report`` every 10,000 inputs and at the end."""
    import atheris

    target = TARGET_FACTORIES[args.target]()
    atheris.instrument_all()
    checker = Checker(target, args.time_limit, args.memory_limit_mb * 1024 * 1024)
    corpus_dir = Path(tempfile.mkdtemp(prefix=f"qp-fuzz-{target.name}-"))
    for i, s in enumerate(target.seeds()):
        (corpus_dir / f"seed-{i}").write_bytes(s[: target.max_len])
    state = {"done": 0, "start": time.perf_counter(), "slowest": 0.0}
    findings: dict = {}
    rss_before = _rss_kib()

    def report() -> None:
        seconds = time.perf_counter() - state["start"]
        out = {
            "engine": "atheris",
            "inputs": state["done"],
            "seconds": round(seconds, 2),
            "exec_per_s": round(state["done"] / seconds) if seconds else None,
            "slowest_input_ms": round(state["slowest"] * 1000, 3),
            "peak_traced_alloc_bytes": checker.peak_traced,
            "peak_rss_kib": _rss_kib(),
            "peak_rss_growth_kib": _rss_kib() - rss_before,
            "findings": [dataclasses.asdict(f) for f in findings.values()],
        }
        Path(args.report).write_text(json.dumps(out))

    def one_input(data: bytes) -> None:
        # the fixup is a function of the input (its length's parity), so libFuzzer's replay stays exact
        if target.fixup is not None and len(data) % 2 == 0:
            data = target.fixup(data)
        traced = args.memory_every > 0 and state["done"] % args.memory_every == 0
        kind, exc, elapsed, peak = checker.outcome(data, traced=traced)
        state["slowest"] = max(state["slowest"], elapsed)
        state["done"] += 1
        if kind != "ok":
            _record(findings, checker, data, kind, exc, elapsed, peak)
        if state["done"] % 10_000 == 0 or state["done"] >= args.inputs:
            report()

    atheris.Setup(
        [sys.argv[0], f"-runs={args.inputs}", f"-seed={args.seed}", f"-max_len={target.max_len}", str(corpus_dir)],
        one_input,
    )
    atheris.Fuzz()


def fuzz_atheris(name: str, inputs: int, seed: int, args: argparse.Namespace) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        report_path = f.name
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--target",
        name,
        "--inputs",
        str(inputs),
        "--seed",
        str(seed),
        "--report",
        report_path,
        "--time-limit",
        str(args.time_limit),
        "--memory-every",
        str(args.memory_every),
        "--memory-limit-mb",
        str(args.memory_limit_mb),
    ]
    run = subprocess.run(cmd, capture_output=True, text=True)
    try:
        out = json.loads(Path(report_path).read_text() or "{}")
    except (OSError, json.JSONDecodeError):
        out = {}
    finally:
        with contextlib.suppress(OSError):
            os.unlink(report_path)
    out["worker_returncode"] = run.returncode
    if run.returncode != 0:
        out["worker_stderr_tail"] = run.stderr[-2000:]
    return out


def _atheris_available() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=sorted(TARGET_FACTORIES), help="run one target (default: all)")
    parser.add_argument("--inputs", type=int, default=1_000_000, help="inputs per target (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="5,000 inputs per target")
    parser.add_argument("--engine", choices=("auto", "mutation", "atheris"), default="mutation")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--time-limit", type=float, default=1.0, help="seconds per input (default 1)")
    parser.add_argument("--memory-every", type=int, default=50, help="trace allocations of every Nth input")
    parser.add_argument("--memory-limit-mb", type=int, default=256, help="traced peak above which is a finding")
    parser.add_argument("--max-findings", type=int, default=20, help="stop a target after this many distinct ones")
    parser.add_argument("--out", help="write the JSON report here too")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--report", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGALRM, _on_alarm)
    logging.disable(logging.CRITICAL)  # the proxy warns about every odd broker it is shown
    if args.worker:
        _atheris_worker(args)
        return 0
    inputs = 5_000 if args.quick else args.inputs
    engine = args.engine
    if engine == "auto":
        engine = "atheris" if _atheris_available() else "mutation"
    names = [args.target] if args.target else list(TARGET_FACTORIES)
    results = {}
    for name in names:
        if engine == "atheris":
            results[name] = fuzz_atheris(name, inputs, args.seed, args)
        else:
            results[name] = fuzz_mutation(TARGET_FACTORIES[name](), inputs, args.seed, args)
        print(
            f"{name}: {results[name].get('inputs')} inputs, {len(results[name].get('findings', []))} findings",
            file=sys.stderr,
        )
    report = {
        "benchmark": "fuzz",
        "workload": {
            "inputs_per_target": inputs,
            "quick": args.quick,
            "engine": engine,
            "seed": args.seed,
            "time_limit_s": args.time_limit,
            "memory_every": args.memory_every,
            "memory_limit_mb": args.memory_limit_mb,
        },
        "machine": machine(),
        "results": results,
        "findings": sum(len(r.get("findings", [])) for r in results.values()),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
