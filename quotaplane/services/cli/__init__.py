"""The ``quotaplane`` command line.

``quotaplane demo`` drives real producers' traffic through the quota engine on a simulated clock and
shows Kafka's throttling converging each client to its quota.

The admin commands talk gRPC to an AdminService (``--bootstrap-server``, default ``$QUOTAPLANE_ADMIN``
or 127.0.0.1:9093) and mirror Kafka's tools, so an operator's muscle memory carries over:

- ``quotaplane quotas`` is ``kafka-configs.sh`` for client quotas (``--alter --add-config`` /
  ``--delete-config``, ``--describe``, ``--entity-type users|clients|ips``, ``--entity-name`` /
  ``--entity-default``), printing what kafka-configs.sh prints;
- ``quotaplane configs`` is ``kafka-configs.sh`` for broker and topic configs (``--entity-type brokers``
  with ``--entity-default`` or ``--entity-name ID``, ``--entity-type topics --entity-name NAME``); altering
  a start-up key prints a note that it takes effect when the shards restart;
- ``quotaplane client-metrics`` is ``kafka-client-metrics.sh`` (``--alter [--generate-name]``,
  ``--describe``, ``--delete``, ``--list``);
- ``quotaplane log`` inspects the config event log: ``history`` of an entity or resource (who changed
  what, when) and ``image --at TIME`` (the client quotas as they were then), ``offsets``.

Errors are one line on stderr (``Error: ...``) and an exit code: 1 for a request Kafka (or the tool)
refuses, 2 for usage errors (argparse), 3 when the admin service cannot be reached. The admin commands
reach a TLS listener with ``--tls-ca`` (and ``--tls-cert`` / ``--tls-key`` under mutual TLS), and send an
operator token with ``--token`` or ``$QUOTAPLANE_TOKEN`` (the variable keeps it out of ``ps``); a missing
or refused credential is exit 1 (UNAUTHENTICATED / PERMISSION_DENIED, one line). With ``--cluster-id`` or
``$QUOTAPLANE_CLUSTER_ID`` (``quotaplane up`` prints its id; ``quotaplane cluster-id`` asks a running one)
an answer from another cluster is refused with one line naming both ids (exit 1).

``quotaplane up`` runs the embedded default on one machine (:mod:`quotaplane.services.launcher`): a private local
Ray, the config controller, the shards and the AdminService, with all data under ``--data-dir``. It
prints one line per endpoint, then ``ready``, then a line each time the config log or a shard's applied
offset moves, and stops cleanly on SIGINT / SIGTERM (exit 0). It listens on loopback unless ``--host``
says otherwise, and warns (one stderr line) when it listens beyond loopback with no operator credential
configured (``--operator-tokens-file``, ``--operator-subjects``); ``--tls-cert`` / ``--tls-key`` /
``--tls-client-ca`` put TLS or mutual TLS on both gRPC listeners.

The Spark jobs (``quotaplane.spark``) run on an embedded ``local[*]`` Spark, or on the cluster given by
``--master``; they read ``--data-dir`` (``config/`` for the event log, ``shards/*/`` for the archives):

- ``quotaplane compact-log --history DIR [--up-to-offset N]``: a snapshot in the log directory (so
  replay starts from it) and a Parquet history of every change; never touches the live segment;
- ``quotaplane compact-telemetry --output DIR``: data points and per-minute rollups as Parquet;
- ``quotaplane throttle-report --points DIR --output DIR``: the clients that ignore throttles.

Each prints one JSON summary line; bad input (a missing path, nothing to read, corruption the job
cannot skip) is one ``Error:`` line and exit 1, before anything is written.

``quotaplane top`` is a refreshed terminal view of a running cluster's metrics endpoint (``--metrics``):
tenants by usage / quota, throttled clients, and with ``--throttle-report DIR`` the clients ignoring
throttles; ``--once`` prints one frame (:mod:`quotaplane.services.top`, options in ``_top.py``).

One module per concern, so each command can be read (and changed) alone: ``_parser.py`` assembles the
subcommands; ``_admin.py`` the admin commands' options and runner over ``_admin_client.py`` (a typed
AdminService client: one method per RPC, each with the deadline and metadata), ``_quotas.py`` (``quotas``,
``log``), ``_configs.py`` (``configs``, ``client-metrics``), ``_entities.py`` (kafka-configs.sh's entity
options) and ``_kafka_format.py`` (the text of Kafka's tools); ``_up.py``, ``_spark.py``, ``_top.py`` and
``_demo.py`` the rest; ``_errors.py`` how every command fails.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ._admin import run_admin
from ._demo import run_demo_command
from ._parser import build_parser
from ._spark import SPARK_COMMANDS, run_spark
from ._top import run_top
from ._up import run_up

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``quotaplane`` command line; the exit code (the console script's ``sys.exit``)."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            return run_demo_command(args)
        if args.command == "up":
            return run_up(args)
        if args.command in SPARK_COMMANDS:
            return run_spark(args)
        if args.command == "top":
            return run_top(args)
        return run_admin(args)
    except BrokenPipeError:  # `quotaplane ... | head`: the reader left; exit quietly as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
