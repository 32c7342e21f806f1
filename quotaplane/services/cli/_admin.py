"""The admin commands' parsers and runner: ``quotas``, ``client-metrics``, ``configs``, ``log``.

Every admin command shares the connection options (``--bootstrap-server``, the principal, TLS, the operator
token) and one runner that turns every failure into one ``Error:`` line and an exit code: 1 for a request
refused (by Kafka's rules, the tool's checks, or a missing or refused credential), 3 when the AdminService
cannot be reached, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from ._admin_client import AdminClient
from ._configs import run_client_metrics, run_configs
from ._entities import QUOTA_ENTITY_TYPES, add_entity_options
from ._errors import EXIT_REFUSED, EXIT_UNREACHABLE, CliError
from ._kafka_format import time_ms
from ._quotas import run_log, run_quotas

__all__ = ["add_admin_commands", "run_admin"]

_DEFAULT_BOOTSTRAP = "127.0.0.1:9093"


def _connection_options() -> argparse.ArgumentParser:
    """The options every admin command shares (a parent parser): where the AdminService is, and as whom."""
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=os.environ.get("QUOTAPLANE_ADMIN") or _DEFAULT_BOOTSTRAP,
        help=f"the AdminService to talk to (default $QUOTAPLANE_ADMIN or {_DEFAULT_BOOTSTRAP})",
    )
    connection.add_argument(
        "--principal",
        default=os.environ.get("QUOTAPLANE_PRINCIPAL"),
        help="the principal recorded with changes, e.g. User:alice (default $QUOTAPLANE_PRINCIPAL, else "
        "the server's User:ANONYMOUS)",
    )
    connection.add_argument("--tls-ca", metavar="PEM", help="connect with TLS, trusting this CA file")
    connection.add_argument(
        "--tls-cert", metavar="PEM", help="client certificate (chain) for mutual TLS; implies TLS (with --tls-key)"
    )
    connection.add_argument("--tls-key", metavar="PEM", help="the client certificate's private key")
    connection.add_argument(
        "--token",
        default=os.environ.get("QUOTAPLANE_TOKEN"),
        help="operator bearer token (default $QUOTAPLANE_TOKEN; prefer the variable, arguments show in ps)",
    )
    return connection


def add_admin_commands(commands: argparse._SubParsersAction) -> None:
    connection = _connection_options()

    quotas = commands.add_parser(
        "quotas", parents=[connection], help="alter and describe client quotas (kafka-configs.sh)"
    )
    action = quotas.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="alter the quotas of an entity")
    action.add_argument("--describe", action="store_true", help="describe the quotas of matching entities")
    add_entity_options(quotas, list(QUOTA_ENTITY_TYPES))
    quotas.add_argument("--add-config", metavar="K=V,...", help="quotas to set, e.g. producer_byte_rate=1048576")
    quotas.add_argument("--delete-config", metavar="K,...", help="quota keys to remove")
    quotas.set_defaults(admin_handler=run_quotas, admin_parser=quotas)

    metrics = commands.add_parser(
        "client-metrics",
        parents=[connection],
        help="manage KIP-714 client-metrics resources (kafka-client-metrics.sh)",
    )
    action = metrics.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="create or alter a resource")
    action.add_argument("--describe", action="store_true", help="describe one resource (--name) or all")
    action.add_argument("--delete", action="store_true", help="delete a resource")
    action.add_argument("--list", action="store_true", help="list the resources' names")
    metrics.add_argument("--name", help="the resource's name")
    metrics.add_argument("--generate-name", action="store_true", help="--alter: name a new resource with a UUID")
    metrics.add_argument("--metrics", help="comma-separated metric-name prefixes ('*': all; '': delete)")
    metrics.add_argument("--interval", metavar="MS", help="push interval in ms ('': delete)")
    metrics.add_argument("--match", help="comma-separated selector=regex pairs, e.g. client_software_name=x")
    metrics.set_defaults(admin_handler=run_client_metrics, admin_parser=metrics)

    configs = commands.add_parser(
        "configs", parents=[connection], help="alter and describe broker and topic configs (kafka-configs.sh)"
    )
    action = configs.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="alter the configs of a broker or topic")
    action.add_argument("--describe", action="store_true", help="describe the configs set on a broker or topic")
    add_entity_options(configs, ["brokers", "topics"])
    configs.add_argument(
        "--add-config", metavar="K=V,...", help="configs to set, e.g. max.connections=1000 (a list value: k=[a,b])"
    )
    configs.add_argument("--delete-config", metavar="K,...", help="config names to remove")
    configs.set_defaults(admin_handler=run_configs, admin_parser=configs)

    log_ = commands.add_parser("log", help="inspect the config event log")
    log_commands = log_.add_subparsers(dest="log_command", required=True, metavar="LOG_COMMAND")
    history = log_commands.add_parser(
        "history", parents=[connection], help="every change of an entity or resource: when, who, old -> new"
    )
    add_entity_options(history, [*QUOTA_ENTITY_TYPES, "brokers", "topics"])
    history.add_argument("--client-metrics", metavar="NAME", help="a client-metrics resource")
    history.add_argument("--key", help="only the changes of this key")
    history.set_defaults(admin_handler=run_log, admin_parser=history)
    image = log_commands.add_parser("image", parents=[connection], help="the client quotas as they were at a time")
    image.add_argument(
        "--at", required=True, type=time_ms, metavar="TIME", help="ISO 8601 (UTC if no zone) or epoch ms"
    )
    add_entity_options(image, list(QUOTA_ENTITY_TYPES))
    image.set_defaults(admin_handler=run_log, admin_parser=image)
    offsets = log_commands.add_parser("offsets", parents=[connection], help="the log's start and end offsets")
    offsets.set_defaults(admin_handler=run_log, admin_parser=offsets)


def run_admin(args: argparse.Namespace) -> int:
    """Run an admin command: its errors become one line on stderr and an exit code, never a traceback."""
    import grpc

    from quotaplane.services._security import ClientSecurity

    try:
        security = ClientSecurity.load(
            ca_file=args.tls_ca, cert_file=args.tls_cert, key_file=args.tls_key, token=args.token
        )
    except ValueError as e:
        print(f"Error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    admin = AdminClient(args.bootstrap_server, args.principal, security)
    try:
        return args.admin_handler(args.admin_parser, args, admin)
    except CliError as e:
        print(f"Error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except grpc.RpcError as e:
        code = e.code() if isinstance(e, grpc.Call) else None
        details = ((e.details() if isinstance(e, grpc.Call) else None) or str(code)).splitlines()[0]
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            print(f"Error: cannot reach the admin service at {admin.address}: {details}", file=sys.stderr)
            return EXIT_UNREACHABLE
        if code is grpc.StatusCode.UNAUTHENTICATED:
            details += " (give --token or $QUOTAPLANE_TOKEN, or --tls-cert / --tls-key)"
        print(f"Error: {details}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        admin.close()
