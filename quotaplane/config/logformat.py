"""The config event log's file format, as one public API: frames, segment files, snapshot files, columns.

``EventLog`` and ``ConfigStore`` are the log's writer and its one consumer in the service, but other
programs read and write the same files: the Spark compaction job decodes closed segments in its
executors and writes a snapshot that ``ConfigStore.open`` then replays. They must use the very
functions the log uses (one definition of the bytes, the CRCs and the recovery rules), so this module
is their home: it names the format's parts, which live in the config package's private modules
beside the writer, and ``docs/eventlog-format.md`` is the same specification in prose.

It lives inside ``quotaplane.config`` rather than in a package of its own because the format is built
on config's records: a batch is an ``EventColumns`` of the record builders' events, keyed by the
client-quota entity ids of ``quotaplane.config`` (a separate package would import config back).

- **Frames** (``parse_frame``, ``iter_frames``, ``decode_event_batch``, ``encode_frame``): a 36-byte
  header with its own CRC32C, then a CRC32C-checked payload, zstd-compressed or not. A frame that
  does not verify raises a ``FrameError`` (its ``position`` and ``reason``). ``parse_frame_header``
  checks the header alone: enough to step over a frame someone else verifies.
- **Segments** (``segment_name``, ``parse_segment_name``, ``list_segments``): ``%020d.log`` files
  named by their first offset, each a run of frames at dense offsets. ``CorruptLogError`` is damage
  that is not a torn tail.
- **Snapshots** (``write_snapshot``, ``write_snapshot_columns`` for entries already in columns,
  ``read_snapshot_batches``, ``list_snapshots``): ``%020d.snapshot`` files named by their end offset,
  a ``SnapshotHeader`` frame then entry frames; written atomically.
- **Columns** (``EventColumns``, ``KIND_*``, ``encode_events``, ``events_of``, ``kinds_and_entities``,
  ``entity_of``): the payload of a log frame and of a snapshot's entry frames.

>>> from quotaplane.config import client_quota_event
>>> event = client_quota_event((("user", "alice"),), "producer_byte_rate", 1024.0)
>>> event.commit_time_ms = 1_700_000_000_000
>>> frame = encode_event_batch([event], base_offset=0)
>>> header = parse_frame(frame, 0)
>>> batch = decode_event_batch(frame, header)
>>> header.next_offset, list(batch.kind) == [KIND_CLIENT_QUOTA], entity_of(batch.quota_entity[0])
(1, True, (('user', 'alice'),))
>>> segment_name(header.base_offset), parse_segment_name("00000000000000000042.log")
('00000000000000000000.log', 42)
"""

from __future__ import annotations

from quotaplane.v1.config_events_pb2 import EventColumns, SnapshotHeader

from ._columns import (
    KIND_CLIENT_METRICS,
    KIND_CLIENT_QUOTA,
    KIND_CONFIG,
    decode_columns,
    encode_events,
    entity_id,
    entity_of,
    events_of,
    kinds_and_entities,
)
from ._framing import (
    CODEC_NONE,
    CODEC_ZSTD,
    FRAME_HEADER_SIZE,
    FRAME_MAGIC,
    FRAME_VERSION,
    FrameDecodeError,
    FrameError,
    FrameFormatError,
    FrameHeader,
    FrameHeaderCrcError,
    FramePayloadCrcError,
    FrameTruncatedError,
    decode_event_batch,
    decode_message,
    decode_payload,
    encode_event_batch,
    encode_frame,
    iter_frames,
    parse_frame,
    parse_frame_header,
)
from ._log_errors import CorruptLogError
from ._segments import SEGMENT_SUFFIX, list_segments, parse_segment_name, segment_name
from ._snapshot_file import (
    ENTRIES_PER_FRAME,
    SNAPSHOT_SUFFIX,
    SNAPSHOT_VERSION,
    CorruptSnapshotError,
    list_snapshots,
    read_snapshot,
    read_snapshot_batches,
    snapshot_name,
    write_snapshot,
    write_snapshot_columns,
)

__all__ = [
    "CODEC_NONE",
    "CODEC_ZSTD",
    "ENTRIES_PER_FRAME",
    "FRAME_HEADER_SIZE",
    "FRAME_MAGIC",
    "FRAME_VERSION",
    "KIND_CLIENT_METRICS",
    "KIND_CLIENT_QUOTA",
    "KIND_CONFIG",
    "SEGMENT_SUFFIX",
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "CorruptLogError",
    "CorruptSnapshotError",
    "EventColumns",
    "FrameDecodeError",
    "FrameError",
    "FrameFormatError",
    "FrameHeader",
    "FrameHeaderCrcError",
    "FramePayloadCrcError",
    "FrameTruncatedError",
    "SnapshotHeader",
    "decode_columns",
    "decode_event_batch",
    "decode_message",
    "decode_payload",
    "encode_event_batch",
    "encode_events",
    "encode_frame",
    "entity_id",
    "entity_of",
    "events_of",
    "iter_frames",
    "kinds_and_entities",
    "list_segments",
    "list_snapshots",
    "parse_frame",
    "parse_frame_header",
    "parse_segment_name",
    "read_snapshot",
    "read_snapshot_batches",
    "segment_name",
    "snapshot_name",
    "write_snapshot",
    "write_snapshot_columns",
]
