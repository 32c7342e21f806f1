"""``quotaplane top``: the fleet view's options and runner (the view itself is :mod:`quotaplane.services.top`).

It reads the metrics endpoint ``quotaplane up`` serves (``--metrics``, default ``$QUOTAPLANE_METRICS`` or
``127.0.0.1:9464``, the port ``up`` prints); quotas come from the page's quota-value series, else from the
AdminService (the admin commands' connection options: ``--bootstrap-server`` / ``$QUOTAPLANE_ADMIN`` ...).
On a terminal it runs full-screen until ``q``; with ``--once``, or when stdout is not a terminal, it prints
one frame as plain text and exits. An endpoint that cannot be reached at the start is one ``Error:`` line
and exit 3, as for the admin service; a throttle report that cannot be read at the start is exit 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._admin import _connection_options
from ._admin_client import AdminClient
from ._errors import EXIT_REFUSED, EXIT_UNREACHABLE
from ._kafka_format import escaped

if TYPE_CHECKING:
    from quotaplane.services.top import QuotaLookup

__all__ = ["add_top_command", "run_top"]

_DEFAULT_METRICS = "127.0.0.1:9464"
#: ``quotaplane.services.top.SORTS``, spelled here so that building the parser (every command's start) does
#: not import the view (tests/services/test_top_view.py checks they are equal)
SORTS = ("usage/quota", "rate", "throttle", "tenant")


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0.1 and 3600 seconds, got {text}")
    return value


def add_top_command(commands: argparse._SubParsersAction) -> None:
    top = commands.add_parser(
        "top",
        parents=[_connection_options()],
        help="a refreshed terminal view: tenants by usage / quota, throttled clients, clients ignoring throttles",
    )
    top.add_argument(
        "--metrics",
        metavar="HOST:PORT|URL",
        default=os.environ.get("QUOTAPLANE_METRICS") or _DEFAULT_METRICS,
        help=f"the metrics endpoint (default $QUOTAPLANE_METRICS or {_DEFAULT_METRICS}; quotaplane up prints it)",
    )
    top.add_argument("--interval", type=_interval, default=2.0, metavar="SECONDS", help="refresh period (default 2)")
    top.add_argument(
        "--sort", choices=SORTS, default=SORTS[0], help="the first sort order (s cycles; default %(default)s)"
    )
    top.add_argument(
        "--throttle-report",
        metavar="DIR",
        help="the output of quotaplane throttle-report: show clients ignoring throttles",
    )
    top.add_argument("--once", action="store_true", help="print one frame as plain text and exit (implied off a tty)")
    top.set_defaults(command="top")


def _admin_lookup(args: argparse.Namespace) -> Callable[[], QuotaLookup]:
    """A function building a fresh quota lookup from DescribeClientQuotas (every entry) at each call."""
    from quotaplane.services._security import ClientSecurity
    from quotaplane.services.top import quota_lookup
    from quotaplane.v1 import admin_pb2 as pb

    security = ClientSecurity.load(
        ca_file=args.tls_ca, cert_file=args.tls_cert, key_file=args.tls_key, token=args.token
    )

    def lookup() -> QuotaLookup:
        import grpc

        admin = AdminClient(args.bootstrap_server, args.principal, security, expected_cluster_id=args.cluster_id)
        try:
            entries = admin.describe_client_quotas(pb.DescribeClientQuotasRequest()).entries
        except grpc.RpcError as e:
            details = (e.details() if isinstance(e, grpc.Call) else None) or str(e)
            raise RuntimeError(f"cannot ask the admin service at {args.bootstrap_server}: {details}") from None
        finally:
            admin.close()
        return quota_lookup(
            (
                {c.entity_type: (c.entity_name if c.HasField("entity_name") else None) for c in entry.entity},
                {v.key: v.value for v in entry.values},
            )
            for entry in entries
        )

    return lookup


def run_top(args: argparse.Namespace) -> int:
    """``quotaplane top``: one frame (``--once`` or not a terminal) or the full-screen view until ``q``."""
    from quotaplane.services.top import EndpointError, FrameSource, metrics_url, read_ignoring, render_frame, run_screen

    if args.throttle_report is not None:
        try:
            read_ignoring(args.throttle_report)
        except Exception as e:
            print(f"Error: {escaped(str(e))}", file=sys.stderr)
            return EXIT_REFUSED
    try:
        lookup = _admin_lookup(args)
    except ValueError as e:  # unreadable TLS files, a key without a certificate
        print(f"Error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    once = args.once or not sys.stdout.isatty()
    source = FrameSource(
        metrics_url(args.metrics),
        lookup_factory=lookup,
        lookup_name=args.bootstrap_server,
        report=args.throttle_report,
        interval_s=None if once else args.interval,
    )
    try:
        first = source.frame(args.sort)
    except EndpointError as e:
        print(f"Error: {escaped(str(e))}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if once:
        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
        for line in render_frame(first, width):
            print(line)
        return 0
    return run_screen(source, first, args.interval)
