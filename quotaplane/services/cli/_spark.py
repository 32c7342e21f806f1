"""The Spark jobs' commands: ``compact-log``, ``compact-telemetry``, ``throttle-report``.

Each runs a job of :mod:`quotaplane.spark` on an embedded ``local[*]`` Spark (or ``--master``) over ``up``'s
data directory and prints one JSON summary line. Local inputs are checked before a JVM starts, so bad input
(a missing path, nothing to read, corruption the job cannot skip) is one ``Error:`` line and exit 1, before
anything is written; pyspark is imported only here, so the other commands never need it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ._errors import EXIT_REFUSED, CliError
from ._kafka_format import time_ms

__all__ = ["SPARK_COMMANDS", "add_spark_commands", "run_spark"]

SPARK_COMMANDS = ("compact-log", "compact-telemetry", "throttle-report")


def add_spark_commands(commands: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--master", default="local[*]", help="Spark master URL (default local[*]: an embedded Spark on this machine)"
    )
    common.add_argument(
        "--conf",
        action="append",
        type=_spark_conf,
        default=[],
        metavar="KEY=VALUE",
        help="a Spark property for the session, as spark-submit's --conf (repeatable; e.g. the "
        "spark.kubernetes.* settings of a k8s:// master)",
    )
    common.add_argument(
        "--data-dir", default="./quotaplane-data", help="quotaplane up's data directory (default ./quotaplane-data)"
    )
    log_ = commands.add_parser(
        "compact-log", parents=[common], help="Spark: event log -> snapshot (faster replay) + Parquet change history"
    )
    log_.add_argument("--log-dir", help="the event log directory (default DATA_DIR/config)")
    log_.add_argument("--history", required=True, metavar="DIR", help="where the Parquet history table goes")
    log_.add_argument(
        "--up-to-offset", type=int, metavar="N", help="compact events below N (default: up to the live segment)"
    )
    telemetry = commands.add_parser(
        "compact-telemetry", parents=[common], help="Spark: telemetry archive -> Parquet data points + rollups"
    )
    throttle = commands.add_parser(
        "throttle-report", parents=[common], help="Spark: throttle decisions vs what clients report"
    )
    for parser in (telemetry, throttle):
        parser.add_argument(
            "--archive-root",
            action="append",
            metavar="DIR",
            help="an archive root (repeatable; default every DATA_DIR/shards/<id>)",
        )
        parser.add_argument("--output", required=True, metavar="DIR", help="where the Parquet tables go")
        parser.add_argument("--from", dest="start", type=time_ms, metavar="TIME", help="first hour (ISO 8601 or ms)")
        parser.add_argument("--to", dest="end", type=time_ms, metavar="TIME", help="end, exclusive")
    throttle.add_argument(
        "--points", required=True, metavar="DIR", help="compact-telemetry's points table (OUTPUT/points)"
    )


def _spark_conf(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` -> ``(KEY, VALUE)``: the value may itself hold ``=`` (Java options do)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _archive_roots(args: argparse.Namespace) -> list[str]:
    if args.archive_root:
        return list(args.archive_root)
    shards = os.path.join(args.data_dir, "shards")
    if not os.path.isdir(shards):
        raise CliError(f"no shard archives under {shards} (give --archive-root or --data-dir)")
    return sorted(os.path.join(shards, name) for name in os.listdir(shards) if not name.startswith("."))


def run_spark(args: argparse.Namespace) -> int:
    """Run a Spark job; its input errors are one line and exit 1, never a traceback."""
    try:
        from quotaplane.spark import JobInputError, compact_log, compact_telemetry, spark_session, throttle_report
    except ImportError as e:
        print(f"Error: the Spark jobs need pyspark: {e}", file=sys.stderr)
        return EXIT_REFUSED
    import shutil
    import tempfile

    try:
        roots = _archive_roots(args) if args.command != "compact-log" else []
        log_dir = args.log_dir or os.path.join(args.data_dir, "config") if args.command == "compact-log" else ""
        # local paths are checked before a JVM starts, so the error is the only line printed
        for path in [log_dir] if log_dir else [r for r in roots if "://" not in r]:
            if not os.path.isdir(path):
                raise CliError(f"no such directory: {path}")
        scratch = tempfile.mkdtemp(prefix="quotaplane-spark-")
        spark = spark_session(
            args.master, app_name=f"quotaplane {args.command}", scratch_dir=scratch, extra_conf=dict(args.conf)
        )
        try:
            if args.command == "compact-log":
                r = compact_log(spark, log_dir, args.history, up_to_offset=args.up_to_offset)
                summary = {
                    "snapshot": str(r.snapshot),
                    "end_offset": r.end_offset,
                    "start_offset": r.start_offset,
                    "events": r.events,
                    "entries": r.entries,
                    "history": r.history_dir,
                }
                skipped = []
            elif args.command == "compact-telemetry":
                t = compact_telemetry(spark, roots, args.output, start_ms=args.start, end_ms=args.end)
                summary = {
                    "points": t.points_dir,
                    "rollups": t.rollups_dir,
                    "hours": t.hours,
                    "data_points": t.points,
                    "rollup_rows": t.rollups,
                }
                skipped = t.errors
            else:
                p = throttle_report(spark, roots, args.points, args.output, start_ms=args.start, end_ms=args.end)
                summary = {
                    "minutes": p.minutes_dir,
                    "clients": p.clients_dir,
                    "decisions": p.decisions,
                    "silent_clients": [list(c) for c in p.silent_clients],
                    "ignoring_clients": [list(c) for c in p.ignoring_clients],
                    "html": p.html_path,
                }
                skipped = p.errors
            for path, reason in skipped:
                print(f"Warning: skipped {path}: {reason.splitlines()[0]}", file=sys.stderr)
        finally:
            spark.stop()
            shutil.rmtree(scratch, ignore_errors=True)
    except (JobInputError, CliError) as e:
        print(f"Error: {str(e).splitlines()[0]}", file=sys.stderr)
        return EXIT_REFUSED
    print(json.dumps(summary))
    return 0
