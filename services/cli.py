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
or refused credential is exit 1 (UNAUTHENTICATED / PERMISSION_DENIED, one line).

``quotaplane up`` runs the embedded default on one machine (``services/launcher.py``): a private local
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
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import heapq
import json
import math
import os
import re
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from quotaplane import __version__
from quotaplane.quota import (
    DEFAULT,
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    QuotaType,
)

if TYPE_CHECKING:
    from quotaplane.services._security import ClientSecurity, ServerSecurity

__all__ = ["main"]

_START_MS = 1_700_000_000_000


@dataclass(frozen=True)
class _Producer:
    user: str
    client_id: str
    request_bytes: int
    interval_ms: int  # time between requests when not throttled
    honours_throttle: bool


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _run_demo(seconds: int) -> dict:
    """Simulate producers against produce quotas; return what each achieved against its quota."""
    mgr = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    quotas = {
        ClientQuotaEntity(user="alice", client_id=DEFAULT): 1_048_576.0,  # each alice client: 1 MiB/s
        ClientQuotaEntity(user="bob"): 524_288.0,  # all of bob's clients together: 512 KiB/s
        ClientQuotaEntity(user=DEFAULT): 262_144.0,  # anyone else: 256 KiB/s
    }
    for entity, bound in quotas.items():
        mgr.update_quota(entity, bound)
    producers = [
        _Producer("alice", "orders", 65_536, 20, True),  # offers 3.2 MiB/s
        _Producer("alice", "audit", 16_384, 50, True),  # offers 320 KiB/s, under quota
        _Producer("bob", "etl-1", 65_536, 40, True),  # bob's two clients share 512 KiB/s
        _Producer("bob", "etl-2", 65_536, 40, True),
        _Producer("mallory", "greedy", 65_536, 10, False),  # ignores throttle_time_ms
    ]
    sent = {p.client_id: 0 for p in producers}
    throttled_ms = {p.client_id: 0 for p in producers}
    end_ms = _START_MS + seconds * 1000
    queue = [(_START_MS, i) for i in range(len(producers))]
    heapq.heapify(queue)
    while queue:
        now_ms, i = heapq.heappop(queue)
        if now_ms >= end_ms:
            continue
        p = producers[i]
        throttle_ms = mgr.record_and_get_throttle_time_ms(p.user, p.client_id, float(p.request_bytes), now_ms)
        sent[p.client_id] += p.request_bytes
        if throttle_ms:
            mgr.throttle(p.user, p.client_id, throttle_ms, now_ms)
            throttled_ms[p.client_id] += throttle_ms
        delay = p.interval_ms + (throttle_ms if p.honours_throttle else 0)
        heapq.heappush(queue, (now_ms + delay, i))
    rows = []
    for p in producers:
        quota = mgr.quota(p.user, p.client_id).bound
        rows.append(
            {
                "user": p.user,
                "client_id": p.client_id,
                "offered_bytes_per_s": p.request_bytes * 1000 / p.interval_ms,
                "achieved_bytes_per_s": sent[p.client_id] / seconds,
                "quota_bytes_per_s": quota,
                "honours_throttle": p.honours_throttle,
                "throttle_ms_total": throttled_ms[p.client_id],
            }
        )
    return {"simulated_seconds": seconds, "clients": rows}


def _print_demo(report: dict) -> None:
    print(f"quotaplane demo: {report['simulated_seconds']} simulated seconds of produce traffic\n")
    header = f"{'user':<9}{'client':<9}{'offered KiB/s':>14}{'achieved KiB/s':>16}{'quota KiB/s':>13}  note"
    print(header)
    print("-" * len(header))
    for row in report["clients"]:
        note = "ignores throttle_time_ms" if not row["honours_throttle"] else ""
        print(
            f"{row['user']:<9}{row['client_id']:<9}{row['offered_bytes_per_s'] / 1024:>14.0f}"
            f"{row['achieved_bytes_per_s'] / 1024:>16.0f}{row['quota_bytes_per_s'] / 1024:>13.0f}  {note}"
        )
    print(
        "\nbob's clients share one <user> quota; each of alice's clients gets its own <user, <default>> quota."
        "\nAs in Kafka, a client may burst up to (samples - 1) windows of quota before the first throttle,"
        "\nso short runs show achieved rates a little above quota."
    )


# --- admin commands (kafka-configs.sh, kafka-client-metrics.sh, the config log) ------------------------
_DEFAULT_BOOTSTRAP = "127.0.0.1:9093"
_TIMEOUT_S = 30.0
#: kafka-configs.sh's entity types for client quotas, and the entity type each one names.
_QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
#: How kafka-configs.sh names each entity type when it describes quotas.
_DESCRIBED_TYPE = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
_EXIT_REFUSED, _EXIT_UNREACHABLE = 1, 3


class _CliError(Exception):
    """A request refused by the service or by the tool's own checks: ``Error: <message>``, exit 1."""


def _java_double(value: float) -> str:
    """Java's ``Double.toString``, as kafka-configs.sh prints quota values (1048576.0, 1.0E7)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        return repr(value)  # Python's repr is the shortest round-trip decimal, fixed-point in this range
    sign, digits, exponent = decimal.Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    power = exponent + len(digits) - 1
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def _iso_ms(time_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(time_ms // 1000, datetime.UTC).replace(microsecond=time_ms % 1000 * 1000)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _time_ms(text: str) -> int:
    """A time given as epoch milliseconds or ISO 8601 (a time without zone is UTC)."""
    text = text.strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: expected ISO 8601 (2024-05-01T12:00:00Z) or milliseconds since the epoch"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (moment - epoch) // datetime.timedelta(milliseconds=1)


def _split_configs(text: str) -> list[str]:
    """kafka-configs.sh's config list: comma-separated, commas inside [...] kept (``k=[a,b],k2=v``)."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _quota_additions(text: str | None) -> dict[str, float]:
    additions: dict[str, float] = {}
    for item in _split_configs(text or ""):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise _CliError('Invalid entity config: all configs to be added must be in the format "key=val".')
        key, value = key.strip(), value.strip()
        try:
            additions[key] = float(value)
        except ValueError:
            raise _CliError(f"Cannot parse quota configuration value for {key}: {value}") from None
    return additions


def _entity_pairs(
    parser: argparse.ArgumentParser, types: Sequence[str] | None, names: Sequence[str] | None
) -> list[tuple[str, str | None]]:
    """kafka-configs.sh's pairing of ``--entity-type`` with ``--entity-name`` / ``--entity-default`` (in the
    order given; "" is the default; a type without a name is ``None``: any name)."""
    types, names = list(types or ()), list(names or ())
    if len(names) > len(types):
        parser.error("More entity names specified than entity types")
    return [(t, names[i] if i < len(names) else None) for i, t in enumerate(types)]


def _describe_components(pairs: Sequence[tuple[str, str | None]]) -> list:
    from quotaplane.v1 import admin_pb2 as pb

    components = []
    for entity_type, name in pairs:
        component = pb.DescribeClientQuotasRequest.ComponentData(entity_type=_QUOTA_ENTITY_TYPES[entity_type])
        if name is None:
            component.match_type = pb.MATCH_TYPE_SPECIFIED
        elif name == "":
            component.match_type = pb.MATCH_TYPE_DEFAULT
        else:
            component.match_type, component.match = pb.MATCH_TYPE_EXACT, name
        components.append(component)
    return components


def _quota_line(entry: object) -> str:
    """kafka-configs.sh's describe line: ``Quota configs for user-principal 'alice' are k=v, ...``."""
    names = {e.entity_type: (e.entity_name if e.HasField("entity_name") else None) for e in entry.entity}  # type: ignore[attr-defined]
    parts = []
    for entity_type in ("user", "client-id", "ip"):
        if entity_type in names:
            shown = _DESCRIBED_TYPE[entity_type]
            name = names[entity_type]
            parts.append(f"the default {shown}" if name is None else f"{shown} '{name}'")
    values = ", ".join(f"{v.key}={_java_double(v.value)}" for v in entry.values)  # type: ignore[attr-defined]
    return f"Quota configs for {', '.join(parts)} are {values}"


def _print_quotas(entries: Sequence[object]) -> None:
    for line in sorted(_quota_line(e) for e in entries):
        print(line)


class _AdminClient:
    """One channel to the AdminService (TLS and the operator token as ``security`` says); every call
    carries the principal, the token and a deadline."""

    def __init__(self, address: str, principal: str | None, security: ClientSecurity) -> None:
        from quotaplane.services.admin import PRINCIPAL_METADATA
        from quotaplane.v1 import admin_pb2_grpc

        self.address = address
        self._channel = security.channel(address)
        self._stub = admin_pb2_grpc.AdminServiceStub(self._channel)
        self._metadata = (((PRINCIPAL_METADATA, principal),) if principal else ()) + security.metadata()

    def __getattr__(self, rpc: str):  # AdminService's methods, with the deadline and metadata applied
        method = getattr(self._stub, rpc)
        return lambda request: method(request, timeout=_TIMEOUT_S, metadata=self._metadata)

    def close(self) -> None:
        self._channel.close()


def _check_result(error_code: int, message: str) -> None:
    if error_code:
        raise _CliError(message or f"Kafka error code {error_code}")


def _run_quotas(parser: argparse.ArgumentParser, args: argparse.Namespace, admin: _AdminClient) -> int:
    from quotaplane.v1 import admin_pb2 as pb
    from quotaplane.v1 import config_events_pb2 as events_pb

    pairs = _entity_pairs(parser, args.entity_type, args.entity_names)
    if args.describe:
        if args.add_config or args.delete_config:
            parser.error("--add-config and --delete-config are only valid with --alter")
        request = pb.DescribeClientQuotasRequest(components=_describe_components(pairs), strict=bool(pairs))
        _print_quotas(admin.DescribeClientQuotas(request).entries)
        return 0
    if not pairs or any(name is None for _, name in pairs):
        parser.error("an entity name must be specified with --alter of users, clients, ips")
    if not args.add_config and not args.delete_config:
        parser.error("At least one of --add-config or --delete-config must be specified with --alter")
    additions = _quota_additions(args.add_config)
    deletions = [key.strip() for key in (args.delete_config or "").split(",") if key.strip()]
    # as kafka-configs.sh: deleting a key the entity does not have is an error, not a silent no-op
    current = admin.DescribeClientQuotas(
        pb.DescribeClientQuotasRequest(components=_describe_components(pairs), strict=True)
    ).entries
    present = {v.key for entry in current for v in entry.values}
    missing = [key for key in deletions if key not in present]
    if missing:
        raise _CliError(f"Invalid config(s): {','.join(missing)}")
    entity = []
    for entity_type, name in pairs:
        data = events_pb.EntityData(entity_type=_QUOTA_ENTITY_TYPES[entity_type])
        if name:
            data.entity_name = name
        entity.append(data)
    ops = [pb.AlterClientQuotasRequest.OpData(key=k, value=v) for k, v in additions.items()]
    ops += [pb.AlterClientQuotasRequest.OpData(key=k) for k in deletions]
    response = admin.AlterClientQuotas(
        pb.AlterClientQuotasRequest(
            entries=[pb.AlterClientQuotasRequest.EntryData(entity=entity, ops=ops)], request_id=str(uuid.uuid4())
        )
    )
    for entry in response.entries:
        _check_result(entry.error_code, entry.error_message)
    head_type, head_name = pairs[0]
    if head_name:
        print(f"Completed updating config for {head_type[:-1]} {head_name}.")
    else:
        print(f"Completed updating default config for {head_type} in the cluster.")
    return 0


def _client_metrics_configs(admin: _AdminClient, name: str) -> list:
    from quotaplane.v1 import admin_pb2 as pb

    resource = pb.DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS, resource_name=name
    )
    [result] = admin.DescribeConfigs(pb.DescribeConfigsRequest(resources=[resource])).results
    _check_result(result.error_code, result.error_message)
    return list(result.configs)


def _run_client_metrics(parser: argparse.ArgumentParser, args: argparse.Namespace, admin: _AdminClient) -> int:
    from quotaplane.v1 import admin_pb2 as pb

    if not args.alter and (
        args.generate_name or args.metrics is not None or args.interval is not None or args.match is not None
    ):
        parser.error("--generate-name, --metrics, --interval and --match are only valid with --alter")
    if args.list:
        if args.name:
            parser.error("--name is not valid with --list")
        listed = admin.ListClientMetricsResources(pb.ListClientMetricsResourcesRequest())
        for resource in listed.client_metrics_resources:
            print(resource.name)
        return 0
    if args.describe:
        if args.name:
            names = [args.name]
        else:
            listed = admin.ListClientMetricsResources(pb.ListClientMetricsResourcesRequest())
            names = [r.name for r in listed.client_metrics_resources]
        for name in names:
            configs = _client_metrics_configs(admin, name)
            if not configs:
                print(f"The client metric resource {name} doesn't exist and doesn't have dynamic config.")
                continue
            print(f"Client metrics configs for {name} are:")
            for config in configs:
                print(f"  {config.name}={config.value}")
        return 0
    set_, delete = pb.ALTER_CONFIG_OP_TYPE_SET, pb.ALTER_CONFIG_OP_TYPE_DELETE
    Config = pb.IncrementalAlterConfigsRequest.AlterableConfig
    if args.delete:
        if not args.name:
            parser.error("--name must be specified with --delete")
        name = args.name
        configs = [Config(name=c.name, config_operation=delete) for c in _client_metrics_configs(admin, name)]
        done = f"Deleted client metrics config for {name}."
    else:
        if bool(args.name) == bool(args.generate_name):
            parser.error("exactly one of --name or --generate-name must be specified with --alter")
        name = args.name or str(uuid.uuid4())
        # as kafka-client-metrics.sh: an empty value deletes the config
        given = {"interval.ms": args.interval, "metrics": args.metrics, "match": args.match}
        configs = [
            Config(name=key, config_operation=set_, value=value) if value else Config(name=key, config_operation=delete)
            for key, value in given.items()
            if value is not None
        ]
        done = f"Altered client metrics config for {name}."
    resource = pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS, resource_name=name, configs=configs
    )
    response = admin.IncrementalAlterConfigs(
        pb.IncrementalAlterConfigsRequest(resources=[resource], request_id=str(uuid.uuid4()))
    )
    for result in response.responses:
        _check_result(result.error_code, result.error_message)
    print(done)
    return 0


def _config_additions(text: str | None) -> dict[str, str]:
    """kafka-configs.sh's ``--add-config`` for broker and topic configs: ``k=v`` pairs, a value holding
    commas in ``[...]`` with the brackets dropped (as kafka-configs.sh drops them); a repeated key keeps its
    last value, as kafka-configs.sh's Properties do."""
    additions: dict[str, str] = {}
    for item in _split_configs(text or ""):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise _CliError(
                'Invalid entity config: all configs to be added must be in the format "key=val" or "key=[val1,val2]".'
            )
        additions[key.strip()] = value.replace("[", "").replace("]", "").strip()
    return additions


def _check_config_result(error_code: int, message: str) -> None:
    """A resource's Kafka error as one line: the server's message (it names the config) and the error's name."""
    if error_code:
        from quotaplane.errors import Errors

        try:
            error = Errors(error_code).name
        except ValueError:
            error = f"Kafka error code {error_code}"
        raise _CliError(f"{message} ({error})" if message else error)


def _config_entity(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, str]:
    """The one (entity type, name) of ``quotaplane configs``: name "" is the brokers' cluster default."""
    pairs = _entity_pairs(parser, args.entity_type, args.entity_names)
    if not pairs:
        parser.error("an entity type must be specified with --entity-type (brokers or topics)")
    if len(pairs) > 1:
        parser.error("only one --entity-type can be given")
    [(entity_type, name)] = pairs
    if name is None:
        shown = "--entity-name or --entity-default" if entity_type == "brokers" else "--entity-name"
        parser.error(f"an entity must be specified for --entity-type {entity_type}: give {shown}")
    if entity_type == "topics" and not name:
        parser.error("topics have no default entity: give --entity-name")
    return entity_type, name


def _run_configs(parser: argparse.ArgumentParser, args: argparse.Namespace, admin: _AdminClient) -> int:
    from quotaplane.v1 import admin_pb2 as pb

    entity_type, name = _config_entity(parser, args)
    resource_type = pb.RESOURCE_TYPE_BROKER if entity_type == "brokers" else pb.RESOURCE_TYPE_TOPIC

    def dynamic_configs() -> list:
        """The configs set on the resource (for a node: its own, else the cluster default's)."""
        resource = pb.DescribeConfigsRequest.DescribeConfigsResource(resource_type=resource_type, resource_name=name)
        [result] = admin.DescribeConfigs(pb.DescribeConfigsRequest(resources=[resource])).results
        _check_config_result(result.error_code, result.error_message)
        return [c for c in result.configs if not c.is_default]

    if args.describe:
        if args.add_config or args.delete_config:
            parser.error("--add-config and --delete-config are only valid with --alter")
        configs = dynamic_configs()
        if entity_type == "brokers" and not name:
            print("Default configs for brokers in the cluster are:")
        else:
            print(f"Dynamic configs for {entity_type[:-1]} {name} are:")
        for config in configs:
            print(f"  {config.name}={config.value if config.HasField('value') else 'null'}")
        return 0
    if not args.add_config and not args.delete_config:
        parser.error("At least one of --add-config or --delete-config must be specified with --alter")
    additions = _config_additions(args.add_config)
    deletions = [key.strip() for key in (args.delete_config or "").split(",") if key.strip()]
    # as kafka-configs.sh: deleting a config the entity does not have is an error, not a silent no-op
    if deletions:
        present = {c.name for c in dynamic_configs()}
        missing = [key for key in deletions if key not in present]
        if missing:
            raise _CliError(f"Invalid config(s): {','.join(missing)}")
    Config = pb.IncrementalAlterConfigsRequest.AlterableConfig
    configs = [Config(name=k, config_operation=pb.ALTER_CONFIG_OP_TYPE_SET, value=v) for k, v in additions.items()]
    configs += [Config(name=k, config_operation=pb.ALTER_CONFIG_OP_TYPE_DELETE) for k in deletions]
    resource = pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=resource_type, resource_name=name, configs=configs
    )
    response = admin.IncrementalAlterConfigs(
        pb.IncrementalAlterConfigsRequest(resources=[resource], request_id=str(uuid.uuid4()))
    )
    for result in response.responses:
        _check_config_result(result.error_code, result.error_message)
    if name:
        print(f"Completed updating config for {entity_type[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {entity_type} in the cluster.")
    if entity_type == "brokers":
        from quotaplane.config import BROKER_CONFIGS

        # keys Kafka reads only at start-up (ConfigKeySpec.dynamic=False): logged now, applied when a shard
        # rebuilds its managers (ManagerBinding.restart_required)
        startup = [c.name for c in configs if (spec := BROKER_CONFIGS.get(c.name)) is not None and not spec.dynamic]
        if startup:
            subject = (
                f"{startup[0]} is a start-up config"
                if len(startup) == 1
                else f"{', '.join(startup)} are start-up configs"
            )
            print(f"Note: {subject}: the change takes effect when the shards restart.")
    return 0


def _history_value(value: object) -> str:
    kind = value.WhichOneof("value")  # type: ignore[attr-defined]
    if kind is None:
        return "(unset)"
    if kind == "quota_value":
        return _java_double(value.quota_value)  # type: ignore[attr-defined]
    if kind == "config_value":
        return value.config_value  # type: ignore[attr-defined]
    record = value.client_metrics  # type: ignore[attr-defined]
    shown = []
    if record.HasField("metrics"):
        shown.append(f"metrics={record.metrics}")
    if record.HasField("interval_ms"):
        shown.append(f"interval.ms={record.interval_ms}")
    if record.HasField("match"):
        shown.append(f"match={record.match}")
    return "{" + ", ".join(shown) + "}"


def _run_log(parser: argparse.ArgumentParser, args: argparse.Namespace, admin: _AdminClient) -> int:
    from quotaplane.v1 import admin_pb2 as pb
    from quotaplane.v1 import config_events_pb2 as events_pb

    if args.log_command == "offsets":
        offsets = admin.GetLogOffsets(pb.GetLogOffsetsRequest())
        print(f"Log start offset: {offsets.start_offset}")
        print(f"Log end offset: {offsets.end_offset}")
        return 0
    if args.log_command == "image":
        pairs = _entity_pairs(parser, args.entity_type, args.entity_names)
        image = admin.DescribeClientQuotasAt(
            pb.DescribeClientQuotasAtRequest(
                time_ms=args.at, components=_describe_components(pairs), strict=bool(pairs)
            )
        )
        print(f"Client quotas at {_iso_ms(args.at)} (log offsets below {image.end_offset}):")
        _print_quotas(image.entries)
        return 0
    pairs = _entity_pairs(parser, args.entity_type, args.entity_names)
    request = pb.EntityHistoryRequest()
    if args.key is not None:
        request.key = args.key
    if args.client_metrics is not None:
        if pairs:
            parser.error("give either --client-metrics or --entity-type, not both")
        request.client_metrics = args.client_metrics
    elif not pairs:
        parser.error("give --entity-type with --entity-name or --entity-default, or --client-metrics")
    elif any(name is None for _, name in pairs):
        parser.error("an entity name (--entity-name or --entity-default) must be given for every --entity-type")
    elif any(t in ("brokers", "topics") for t, _ in pairs):
        if len(pairs) != 1:
            parser.error("brokers and topics cannot be combined with other entity types")
        [(entity_type, name)] = pairs
        if entity_type == "topics" and not name:
            parser.error("topics have no default entity: give --entity-name")
        resource_type = pb.RESOURCE_TYPE_BROKER if entity_type == "brokers" else pb.RESOURCE_TYPE_TOPIC
        request.resource.resource_type, request.resource.resource_name = resource_type, name or ""
    else:
        for entity_type, name in pairs:
            data = events_pb.EntityData(entity_type=_QUOTA_ENTITY_TYPES[entity_type])
            if name:
                data.entity_name = name
            request.entity.entity.append(data)
    for entry in admin.EntityHistory(request).entries:
        print(
            f"{entry.offset}  {_iso_ms(entry.commit_time_ms)}  {entry.principal}  {entry.request_id or '-'}  "
            f"{entry.key}: {_history_value(entry.old_value)} -> {_history_value(entry.new_value)}"
        )
    return 0


def _add_entity_options(parser: argparse.ArgumentParser, types: Sequence[str]) -> None:
    parser.add_argument(
        "--entity-type", action="append", choices=types, help=f"entity type ({', '.join(types)}); repeatable"
    )
    parser.add_argument("--entity-name", action="append", dest="entity_names", help="name of the entity")
    parser.add_argument(
        "--entity-default",
        action="append_const",
        const="",
        dest="entity_names",
        help="the default entity of the matching --entity-type",
    )


def _add_admin_commands(commands: argparse._SubParsersAction) -> None:
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

    quotas = commands.add_parser(
        "quotas", parents=[connection], help="alter and describe client quotas (kafka-configs.sh)"
    )
    action = quotas.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="alter the quotas of an entity")
    action.add_argument("--describe", action="store_true", help="describe the quotas of matching entities")
    _add_entity_options(quotas, list(_QUOTA_ENTITY_TYPES))
    quotas.add_argument("--add-config", metavar="K=V,...", help="quotas to set, e.g. producer_byte_rate=1048576")
    quotas.add_argument("--delete-config", metavar="K,...", help="quota keys to remove")
    quotas.set_defaults(admin_handler=_run_quotas, admin_parser=quotas)

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
    metrics.set_defaults(admin_handler=_run_client_metrics, admin_parser=metrics)

    configs = commands.add_parser(
        "configs", parents=[connection], help="alter and describe broker and topic configs (kafka-configs.sh)"
    )
    action = configs.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="alter the configs of a broker or topic")
    action.add_argument("--describe", action="store_true", help="describe the configs set on a broker or topic")
    _add_entity_options(configs, ["brokers", "topics"])
    configs.add_argument(
        "--add-config", metavar="K=V,...", help="configs to set, e.g. max.connections=1000 (a list value: k=[a,b])"
    )
    configs.add_argument("--delete-config", metavar="K,...", help="config names to remove")
    configs.set_defaults(admin_handler=_run_configs, admin_parser=configs)

    log_ = commands.add_parser("log", help="inspect the config event log")
    log_commands = log_.add_subparsers(dest="log_command", required=True, metavar="LOG_COMMAND")
    history = log_commands.add_parser(
        "history", parents=[connection], help="every change of an entity or resource: when, who, old -> new"
    )
    _add_entity_options(history, [*_QUOTA_ENTITY_TYPES, "brokers", "topics"])
    history.add_argument("--client-metrics", metavar="NAME", help="a client-metrics resource")
    history.add_argument("--key", help="only the changes of this key")
    history.set_defaults(admin_handler=_run_log, admin_parser=history)
    image = log_commands.add_parser("image", parents=[connection], help="the client quotas as they were at a time")
    image.add_argument(
        "--at", required=True, type=_time_ms, metavar="TIME", help="ISO 8601 (UTC if no zone) or epoch ms"
    )
    _add_entity_options(image, list(_QUOTA_ENTITY_TYPES))
    image.set_defaults(admin_handler=_run_log, admin_parser=image)
    offsets = log_commands.add_parser("offsets", parents=[connection], help="the log's start and end offsets")
    offsets.set_defaults(admin_handler=_run_log, admin_parser=offsets)


def _run_admin(args: argparse.Namespace) -> int:
    """Run an admin command: its errors become one line on stderr and an exit code, never a traceback."""
    import grpc
    from quotaplane.services._security import ClientSecurity

    try:
        security = ClientSecurity.load(
            ca_file=args.tls_ca, cert_file=args.tls_cert, key_file=args.tls_key, token=args.token
        )
    except ValueError as e:
        print(f"Error: {e}", file=sys.stderr)
        return _EXIT_REFUSED
    admin = _AdminClient(args.bootstrap_server, args.principal, security)
    try:
        return args.admin_handler(args.admin_parser, args, admin)
    except _CliError as e:
        print(f"Error: {e}", file=sys.stderr)
        return _EXIT_REFUSED
    except grpc.RpcError as e:
        code = e.code() if isinstance(e, grpc.Call) else None
        details = ((e.details() if isinstance(e, grpc.Call) else None) or str(code)).splitlines()[0]
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            print(f"Error: cannot reach the admin service at {admin.address}: {details}", file=sys.stderr)
            return _EXIT_UNREACHABLE
        if code is grpc.StatusCode.UNAUTHENTICATED:
            details += " (give --token or $QUOTAPLANE_TOKEN, or --tls-cert / --tls-key)"
        print(f"Error: {details}", file=sys.stderr)
        return _EXIT_REFUSED
    finally:
        admin.close()


# --- up (services/launcher.py) --------------------------------------------------------------------------
def _add_up_command(commands: argparse._SubParsersAction) -> None:
    from quotaplane.services.launcher import (
        DEFAULT_ADMIN_PORT,
        DEFAULT_DATA_DIR,
        DEFAULT_GATEWAY_PORT,
        DEFAULT_HOST,
        DEFAULT_METRICS_PORT,
        DEFAULT_SHARDS,
    )

    up = commands.add_parser(
        "up", help="run quotaplane on this machine (Ray, controller, shards, admin gRPC, usage gateway)"
    )
    up.add_argument(
        "--data-dir", default=f"./{DEFAULT_DATA_DIR}", help=f"where everything is kept (default ./{DEFAULT_DATA_DIR})"
    )
    # numbers are checked by the launcher, not argparse, so a bad value is one `Error:` line as documented
    up.add_argument("--shards", default=str(DEFAULT_SHARDS), help=f"shard actors (default {DEFAULT_SHARDS})")
    up.add_argument(
        "--admin-port",
        default=str(DEFAULT_ADMIN_PORT),
        help=f"AdminService port (default {DEFAULT_ADMIN_PORT}; 0: a free one)",
    )
    up.add_argument(
        "--gateway-port",
        default=str(DEFAULT_GATEWAY_PORT),
        help=f"usage gateway port: QuotaService, ProducerIdService (default {DEFAULT_GATEWAY_PORT}; 0: a free one)",
    )
    up.add_argument(
        "--metrics-port",
        default=str(DEFAULT_METRICS_PORT),
        help=f"Prometheus metrics endpoint port (default {DEFAULT_METRICS_PORT}; 0: a free one; -1: none)",
    )
    up.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}: this machine only; beyond loopback, configure "
        "operator credentials)",
    )
    up.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        help="join this running Ray cluster (its GCS address, or 'auto') instead of starting a private one; "
        "the controller and shards are then detached and keep running after up stops",
    )
    # NAME[=AMOUNT] is parsed by the launcher, not argparse, so bad syntax is one `Error:` line
    up.add_argument(
        "--shard-resource",
        action="append",
        metavar="NAME[=AMOUNT]",
        help="Ray custom resource each shard asks for (repeatable; amount default 1): shards run, and are "
        "restarted, only on raylets offering it",
    )
    up.add_argument(
        "--controller-resource",
        action="append",
        metavar="NAME[=AMOUNT]",
        help="Ray custom resource the controller asks for (repeatable; amount default 1): it runs, and is "
        "restarted, only on raylets offering it (those with its data volume)",
    )
    up.add_argument(
        "--spread-shards", action="store_true", help="spread the shards over the Ray nodes (Ray's SPREAD strategy)"
    )
    up.add_argument("--tls-cert", metavar="PEM", help="server certificate chain: TLS on the gRPC listeners")
    up.add_argument("--tls-key", metavar="PEM", help="the server certificate's private key (unencrypted)")
    up.add_argument(
        "--tls-client-ca", metavar="PEM", help="mutual TLS: clients must present a certificate signed by this CA"
    )
    up.add_argument(
        "--operator-tokens-file",
        metavar="FILE",
        help="operator bearer tokens, one a line: every AdminService call must carry one (or an operator subject)",
    )
    up.add_argument(
        "--operator-subjects",
        metavar="CN,...",
        help="client-certificate common names that are operators (needs --tls-client-ca)",
    )
    _add_frontend_options(up)


def _add_frontend_options(up: argparse.ArgumentParser) -> None:
    """The Kafka-facing frontend's flags (``services/frontend/server.py``)."""
    from quotaplane.services.launcher import DEFAULT_FRONTEND_PORT

    kafka = up.add_argument_group("Kafka frontend")
    kafka.add_argument(
        "--frontend-port",
        default=str(DEFAULT_FRONTEND_PORT),
        help=f"Kafka protocol port for Kafka clients (default {DEFAULT_FRONTEND_PORT}; 0: a free one; -1: none)",
    )
    kafka.add_argument("--advertised-host", help="host Metadata tells Kafka clients to connect to (default --host)")
    kafka.add_argument("--advertised-port", help="port Metadata tells Kafka clients (default the listening port)")
    kafka.add_argument(
        "--kafka-node-id", default="0", help="broker id the frontend presents; its connection quotas' node (default 0)"
    )
    kafka.add_argument(
        "--sasl-credentials-file",
        metavar="FILE",
        help="SASL/PLAIN on the Kafka listener: 'user:password' one a line (principals User:<user>)",
    )
    kafka.add_argument(
        "--kafka-operators",
        metavar="PRINCIPAL,...",
        help="principals allowed the Kafka admin APIs, e.g. User:admin (with SASL and no list: nobody)",
    )
    kafka.add_argument("--kafka-tls-cert", metavar="PEM", help="server certificate chain: TLS on the Kafka listener")
    kafka.add_argument("--kafka-tls-key", metavar="PEM", help="its private key (unencrypted)")


def _kafka_listener(args: argparse.Namespace) -> tuple[int | None, object]:
    """The frontend's port (None: none) and ``KafkaListener`` from ``up``'s flags; bad values and files are
    a LaunchError / ValueError with one line."""
    from quotaplane.services.frontend._sasl import PlainCredentials
    from quotaplane.services.frontend.server import KafkaListener, tls_context

    port = _int_option("--frontend-port", args.frontend_port)
    if port == -1:
        return None, None
    if (args.kafka_tls_cert is None) != (args.kafka_tls_key is None):
        raise ValueError("--kafka-tls-cert needs --kafka-tls-key, and a key its certificate")
    operators = None
    if args.kafka_operators is not None:
        operators = frozenset(p.strip() for p in args.kafka_operators.split(",") if p.strip())
        for principal in operators:
            if ":" not in principal:
                raise ValueError(f"--kafka-operators: {principal!r} is not a principal such as User:admin")
    advertised_port = args.advertised_port
    credentials = args.sasl_credentials_file
    listener = KafkaListener(
        advertised_host=args.advertised_host,
        advertised_port=None if advertised_port is None else _int_option("--advertised-port", advertised_port),
        node_id=_int_option("--kafka-node-id", args.kafka_node_id),
        sasl_credentials=None if credentials is None else PlainCredentials.load(credentials),
        operators=operators,
        ssl_context=None if args.kafka_tls_cert is None else tls_context(args.kafka_tls_cert, args.kafka_tls_key),
    )
    return port, listener


def _int_option(name: str, text: str) -> int:
    from quotaplane.services.launcher import LaunchError

    try:
        return int(text)
    except ValueError:
        raise LaunchError(f"{name} must be an integer, got {text!r}") from None


def _server_security(args: argparse.Namespace) -> ServerSecurity | None:
    """The listeners' security from ``up``'s flags (None: none given); a bad file is a ValueError."""
    from quotaplane.services._security import ServerSecurity

    subjects = [s for s in (args.operator_subjects or "").split(",") if s.strip()]
    given = (args.tls_cert, args.tls_key, args.tls_client_ca, args.operator_tokens_file)
    if all(value is None for value in given) and not subjects:
        return None
    return ServerSecurity.load(
        cert_file=args.tls_cert,
        key_file=args.tls_key,
        client_ca_file=args.tls_client_ca,
        tokens_file=args.operator_tokens_file,
        operator_subjects=subjects,
    )


def _run_up(args: argparse.Namespace) -> int:
    """Start, print the endpoints and ``ready``, run until SIGINT / SIGTERM, stop. Errors: one line."""
    import signal
    import threading

    from quotaplane.services._security import exposure_warning
    from quotaplane.services.launcher import LaunchError, launch, parse_resource_flags

    def say(line: str) -> None:
        print(f"quotaplane up: {line}", flush=True)

    try:
        security = _server_security(args)
        frontend_port, kafka_listener = _kafka_listener(args)
        shard_resources = parse_resource_flags("--shard-resource", args.shard_resource)
        controller_resources = parse_resource_flags("--controller-resource", args.controller_resource)
    except (ValueError, LaunchError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    warning = exposure_warning(args.host, security)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    try:
        cluster = launch(
            args.data_dir,
            shards=_int_option("--shards", args.shards),
            admin_port=_int_option("--admin-port", args.admin_port),
            gateway_port=_int_option("--gateway-port", args.gateway_port),
            metrics_port=None if (metrics := _int_option("--metrics-port", args.metrics_port)) == -1 else metrics,
            host=args.host,
            say=say,
            security=security,
            ray_address=args.ray_address,
            frontend_port=frontend_port,
            kafka_listener=kafka_listener,  # type: ignore[arg-type]
            shard_resources=shard_resources,
            controller_resources=controller_resources,
            spread_shards=args.spread_shards,
        )
    except LaunchError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Error: interrupted while starting", file=sys.stderr)
        return 1
    stop = threading.Event()
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        say(f"admin gRPC on {cluster.admin_address}, {len(cluster.shards)} shards, data in {cluster.data_dir}")
        say(f"usage gateway gRPC on {cluster.gateway_address}")
        if cluster.frontend is not None:
            host, port = cluster.frontend.advertised
            listener = cluster.frontend.config.listener_name
            say(f"Kafka frontend on {cluster.frontend_address} ({listener}; advertised as {host}:{port})")
        if cluster.metrics_url is not None:
            say(f"metrics on {cluster.metrics_url}")
        say(f"Ray session in {cluster.ray_temp_dir}")
        if security is not None:
            say(f"security: {security.describe()}")
        shown = cluster.status()
        say(shown.line())
        print("ready", flush=True)
        watcher = threading.Thread(
            target=cluster.watch,
            args=(lambda status: say(status.line()), stop),
            kwargs={"last": shown},
            name="up-status",
            daemon=True,
        )
        watcher.start()
        while not stop.wait(0.5):
            pass
        watcher.join(timeout=5)
    except Exception as e:
        print(f"Error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        cluster.close()
        return 1
    say("stopping")
    cluster.close()
    say("stopped")
    return 0


# --- Spark jobs (spark/, installed as quotaplane.spark) ---------------------------------------------------
def _add_spark_commands(commands: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--master", default="local[*]", help="Spark master URL (default local[*]: an embedded Spark on this machine)"
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
        parser.add_argument("--from", dest="start", type=_time_ms, metavar="TIME", help="first hour (ISO 8601 or ms)")
        parser.add_argument("--to", dest="end", type=_time_ms, metavar="TIME", help="end, exclusive")
    throttle.add_argument(
        "--points", required=True, metavar="DIR", help="compact-telemetry's points table (OUTPUT/points)"
    )


def _archive_roots(args: argparse.Namespace) -> list[str]:
    if args.archive_root:
        return list(args.archive_root)
    shards = os.path.join(args.data_dir, "shards")
    if not os.path.isdir(shards):
        raise _CliError(f"no shard archives under {shards} (give --archive-root or --data-dir)")
    return sorted(os.path.join(shards, name) for name in os.listdir(shards) if not name.startswith("."))


def _run_spark(args: argparse.Namespace) -> int:
    """Run a Spark job; its input errors are one line and exit 1, never a traceback."""
    try:
        from quotaplane.spark import JobInputError, compact_log, compact_telemetry, spark_session, throttle_report
    except ImportError as e:
        print(f"Error: the Spark jobs need pyspark: {e}", file=sys.stderr)
        return _EXIT_REFUSED
    import shutil
    import tempfile

    try:
        roots = _archive_roots(args) if args.command != "compact-log" else []
        log_dir = args.log_dir or os.path.join(args.data_dir, "config") if args.command == "compact-log" else ""
        # local paths are checked before a JVM starts, so the error is the only line printed
        for path in [log_dir] if log_dir else [r for r in roots if "://" not in r]:
            if not os.path.isdir(path):
                raise _CliError(f"no such directory: {path}")
        scratch = tempfile.mkdtemp(prefix="quotaplane-spark-")
        spark = spark_session(args.master, app_name=f"quotaplane {args.command}", scratch_dir=scratch)
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
                }
                skipped = p.errors
            for path, reason in skipped:
                print(f"Warning: skipped {path}: {reason.splitlines()[0]}", file=sys.stderr)
        finally:
            spark.stop()
            shutil.rmtree(scratch, ignore_errors=True)
    except (JobInputError, _CliError) as e:
        print(f"Error: {str(e).splitlines()[0]}", file=sys.stderr)
        return _EXIT_REFUSED
    print(json.dumps(summary))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quotaplane", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"quotaplane {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="drive simulated producers through the quota engine")
    demo.add_argument("--seconds", type=_positive_int, default=30, help="simulated seconds (default 30)")
    demo.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_admin_commands(commands)
    _add_up_command(commands)
    _add_spark_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            report = _run_demo(args.seconds)
            if args.json:
                json.dump(report, sys.stdout, indent=2)
                print()
            else:
                _print_demo(report)
            return 0
        if args.command == "up":
            return _run_up(args)
        if args.command in ("compact-log", "compact-telemetry", "throttle-report"):
            return _run_spark(args)
        return _run_admin(args)
    except BrokenPipeError:  # `quotaplane ... | head`: the reader left; exit quietly as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
