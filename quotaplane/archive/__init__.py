"""The archive segment format: hour-partitioned, zstd-compressed, CRC32C-framed record files.

Pure file I/O, no threads: ``ArchiveWriter`` appends records and makes them durable on ``flush``;
``ArchiveReader`` and the byte-level functions read them back (``decode_segment_bytes`` is what a
Spark job calls on ``binaryFile`` contents). The on-disk format is specified in
``docs/archive-format.md``; the telemetry archive (``quotaplane.exporters.archive``) is one stream of it.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as root:
...     with ArchiveWriter(root, "telemetry", writer_id="doc") as writer:
...         writer.append(ArchiveRecord(1_700_000_000_000, {"client_id": "c1"}, b"\\x0a\\x00"))
...     [p.relative_to(root).as_posix() for p in iter_segments(root, "telemetry")]
['telemetry/date=2023-11-14/hour=22/1700000000000-doc-000000.seg']
"""

from ._format import (
    FORMAT_VERSION,
    HOUR_MS,
    ArchiveCorruptError,
    ArchiveRecord,
    BatchHeader,
    EncodedLabels,
    SegmentName,
    hour_partition,
    parse_hour_partition,
    parse_segment_name,
)
from ._reader import (
    ArchiveReader,
    SegmentContents,
    TornTail,
    decode_segment_bytes,
    iter_segment_batches,
    iter_segment_bytes,
    iter_segments,
    read_segment,
)
from ._writer import DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_SEGMENT_BYTES, ArchiveWriter, SegmentWriter

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_SEGMENT_BYTES",
    "FORMAT_VERSION",
    "HOUR_MS",
    "ArchiveCorruptError",
    "ArchiveReader",
    "ArchiveRecord",
    "ArchiveWriter",
    "BatchHeader",
    "EncodedLabels",
    "SegmentContents",
    "SegmentName",
    "SegmentWriter",
    "TornTail",
    "decode_segment_bytes",
    "hour_partition",
    "iter_segment_batches",
    "iter_segment_bytes",
    "iter_segments",
    "parse_hour_partition",
    "parse_segment_name",
    "read_segment",
]
