"""quotaplane's PySpark jobs (installed as ``quotaplane.spark``; the source folder is ``spark/``).

- :func:`compact_log` (``quotaplane compact-log``): the config event log's closed segments into a
  snapshot the log opens (so replay starts from it) and a Parquet history table of every change;
- :func:`compact_telemetry` (``quotaplane compact-telemetry``): the telemetry archive's hourly zstd
  segments into one Parquet row per OTLP data point, partitioned by date and hour, plus per-minute
  rollups per client instance and metric;
- :func:`throttle_report` (``quotaplane throttle-report``): the shards' throttle archive joined with
  what clients themselves pushed, naming the clients that ignore ``throttle_time_ms``, with a static HTML
  report (``report.html``) of the worst tenants over time.

Every job runs on an embedded ``local[*]`` Spark by default and on any master given (``spark_session``).
The executors run quotaplane's own decoders (frames, CRC32C, zstd, OTLP), so their Python must have
quotaplane installed; they read OTLP data points with a compiled decoder where the install built it
(``compiled_decoder()``; the Python walk is its reference and fallback). Input problems are
``JobInputError`` (one line, raised before anything is written).
"""

from ._arrow_telemetry import compiled_decoder
from ._session import DEFAULT_MASTER, JobInputError, spark_session
from .eventlog import LogCompaction, compact_log
from .telemetry import TelemetryCompaction, compact_telemetry, decode_telemetry
from .throttle import ThrottleReport, throttle_report

__all__ = [
    "DEFAULT_MASTER",
    "JobInputError",
    "LogCompaction",
    "TelemetryCompaction",
    "ThrottleReport",
    "compact_log",
    "compact_telemetry",
    "compiled_decoder",
    "decode_telemetry",
    "spark_session",
    "throttle_report",
]
