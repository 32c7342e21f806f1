"""The admin commands' parsers and runner: ``quotas``, ``client-metrics``, ``configs``, ``log``.

Every admin command shares the connection options (``--bootstrap-server``, the principal, TLS, the operator
token) and one runner that turns every failure into one ``Error:`` line and an exit code: 1 for a request
refused (by Kafka's rules, the tool's checks, or a missing or refused credential), 3 when the AdminService
cannot be reached, never a traceback.

Every text argument must be valid UTF-8: Python hands an undecodable byte of ``argv`` over as a lone
surrogate (``surrogateescape``), which no Kafka string (nor protobuf) can carry, so such an argument is
refused first, naming its option (exit 1). The error line itself is escaped (``escaped``) so that a message
quoting a name with a newline still fits on one line.
"""

from __future__ import annotations

import argparse
import os
import sys

from ._admin_client import AdminClient
from ._configs import run_client_metrics, run_configs
from ._entities import QUOTA_ENTITY_TYPES, add_entity_options
from ._errors import EXIT_REFUSED, EXIT_UNREACHABLE, CliError
from ._kafka_format import escaped, time_ms
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
        help="the principal recorded with changes when the server authenticates nobody, e.g. User:alice "
        "(default $QUOTAPLANE_PRINCIPAL, else User:ANONYMOUS); with a token or client certificate, the "
        "credential's principal is recorded instead",
    )
    connection.add_argument(
        "--cluster-id",
        default=os.environ.get("QUOTAPLANE_CLUSTER_ID"),
        help="refuse an admin service of another cluster (default $QUOTAPLANE_CLUSTER_ID; quotaplane up prints its id)",
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

    shards = commands.add_parser(
        "shards", parents=[connection], help="the shard count and each shard's progress; --set N reshards while serving"
    )
    shards.add_argument(
        "--set",
        dest="shard_count",
        type=int,
        metavar="N",
        help="reshard to N shards: new shards start, moved keys take their usage windows along, removed ones stop",
    )
    shards.add_argument("--request-id", default="", help="--set: an id making a retry apply once")
    shards.set_defaults(admin_handler=_run_shards, admin_parser=shards)

    cluster_id = commands.add_parser(
        "cluster-id", parents=[connection], help="the cluster id of the admin service (kafka-cluster.sh cluster-id)"
    )
    cluster_id.set_defaults(admin_handler=_run_cluster_id, admin_parser=cluster_id)


def _run_cluster_id(parser: argparse.ArgumentParser, args: argparse.Namespace, admin: AdminClient) -> int:
    """``Cluster ID: <id>`` as ``kafka-cluster.sh cluster-id`` prints it (the cheapest RPC carries it)."""
    from quotaplane.v1 import admin_pb2 as pb

    admin.get_log_offsets(pb.GetLogOffsetsRequest())
    if admin.cluster_id is None:
        raise CliError(f"the admin service at {admin.address} does not say its cluster id")
    print(f"Cluster ID: {admin.cluster_id}")
    return 0


def _run_shards(parser: argparse.ArgumentParser, args: argparse.Namespace, admin: AdminClient) -> int:
    """``quotaplane shards``: the count and per shard its offsets and node; ``--set N``: reshard, then what
    each receiving shard got."""
    from quotaplane.v1 import admin_pb2 as pb

    if args.shard_count is not None:
        done = admin.alter_shard_count(
            pb.AlterShardCountRequest(shard_count=args.shard_count, request_id=args.request_id)
        )
        print(
            f"Resharded {done.previous_shard_count} -> {done.shard_count} shards at config offset "
            f"{done.config_offset} in {done.elapsed_ms} ms."
        )
        for h in done.hand_overs:
            lost = f", {h.failures} giver(s) unreachable: their keys started empty" if h.failures else ""
            print(f"Shard {h.shard_id}: received {h.sensors_received} quota sensors in {h.elapsed_ms:.1f} ms{lost}.")
        return 0
    found = admin.describe_shards(pb.DescribeShardsRequest())
    print(f"Shards: {found.shard_count} (config offset {found.config_offset})")
    for shard in found.shards:
        print(
            f"Shard {shard.shard_id}\tAppliedOffset: {shard.applied_offset}\t"
            f"PlacementOffset: {shard.placement_offset}\tNode: {shard.node}"
        )
    return 0


#: Arguments that are file paths (any bytes are a valid path) or the runner's own, not text for the service.
_NOT_TEXT = frozenset({"tls_ca", "tls_cert", "tls_key", "command", "log_command", "admin_handler", "admin_parser"})
#: Arguments sent as gRPC metadata, which carries printable ASCII only (gRPC core refuses anything else).
_METADATA = frozenset({"principal", "token", "cluster_id"})
#: Arguments sent as one Kafka string each (``--add-config`` holds several: the service checks each value).
_WHOLE_STRINGS = frozenset({"entity_names", "name", "client_metrics", "key", "metrics", "match", "interval"})


def _check_text_arguments(args: argparse.Namespace) -> None:
    """CliError naming the first text argument that is not valid UTF-8 (a byte argv could not decode), or
    that is a name or value Kafka could not carry back (``quotaplane.config.string_problem``)."""
    from quotaplane.config import string_problem

    options: dict[str, list[str]] = {}
    for action in args.admin_parser._actions:  # the parser's own record of which option fills which dest
        options.setdefault(action.dest, action.option_strings)
    for dest, value in vars(args).items():
        if dest in _NOT_TEXT:
            continue
        for text in value if isinstance(value, list) else [value]:
            if not isinstance(text, str):
                continue
            option = (options.get(dest) or [f"--{dest.replace('_', '-')}"])[0]
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                char = ord(text[e.start])
                what = f"byte 0x{char - 0xDC00:02x}" if 0xDC80 <= char <= 0xDCFF else f"U+{char:04X}"
                raise CliError(
                    f"argument {option}: not valid UTF-8 ({what} at character {e.start} of '{text}')"
                ) from None
            problem = string_problem(text) if dest in _WHOLE_STRINGS else None
            if problem is not None:
                raise CliError(f"argument {option}: {problem}")
            if dest in _METADATA and not all(" " <= c <= "~" for c in text):
                shown = "the value" if dest == "token" else f"'{text}'"  # a token is a secret: never echoed
                raise CliError(f"argument {option}: {shown} is not printable ASCII, all gRPC metadata can carry")


def run_admin(args: argparse.Namespace) -> int:
    """Run an admin command: its errors become one line on stderr and an exit code, never a traceback."""
    import grpc

    from quotaplane.services._security import ClientSecurity

    try:
        _check_text_arguments(args)
    except CliError as e:
        print(f"Error: {escaped(str(e))}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        security = ClientSecurity.load(
            ca_file=args.tls_ca, cert_file=args.tls_cert, key_file=args.tls_key, token=args.token
        )
    except ValueError as e:
        print(f"Error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    admin = AdminClient(args.bootstrap_server, args.principal, security, expected_cluster_id=args.cluster_id)
    try:
        return args.admin_handler(args.admin_parser, args, admin)
    except CliError as e:
        print(f"Error: {escaped(str(e))}", file=sys.stderr)
        return EXIT_REFUSED
    except grpc.RpcError as e:
        code = e.code() if isinstance(e, grpc.Call) else None
        details = escaped((e.details() if isinstance(e, grpc.Call) else None) or str(code))
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            print(f"Error: cannot reach the admin service at {admin.address}: {details}", file=sys.stderr)
            return EXIT_UNREACHABLE
        if code is grpc.StatusCode.UNAUTHENTICATED:
            details += " (give --token or $QUOTAPLANE_TOKEN, or --tls-cert / --tls-key)"
        print(f"Error: {details}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        admin.close()
