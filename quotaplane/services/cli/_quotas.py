"""``quotaplane quotas`` (kafka-configs.sh for client quotas) and ``quotaplane log`` (the config event log).

Both name client-quota entities with kafka-configs.sh's options and print kafka-configs.sh's describe
lines; ``log`` adds what Kafka has no tool for: who changed what and when (``history``), the quotas as they
were at a time (``image --at``), and the log's offsets.
"""

from __future__ import annotations

import argparse
import uuid

from ._admin_client import AdminClient, check_result
from ._entities import describe_components, entity_data, entity_pairs
from ._errors import CliError
from ._kafka_format import escaped, history_value, iso_ms, print_quotas, split_configs

__all__ = ["run_log", "run_quotas"]


def _quota_additions(text: str | None) -> dict[str, float]:
    additions: dict[str, float] = {}
    for item in split_configs(text or ""):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError('Invalid entity config: all configs to be added must be in the format "key=val".')
        key, value = key.strip(), value.strip()
        try:
            additions[key] = float(value)
        except ValueError:
            raise CliError(f"Cannot parse quota configuration value for {key}: {value}") from None
    return additions


def run_quotas(parser: argparse.ArgumentParser, args: argparse.Namespace, admin: AdminClient) -> int:
    from quotaplane.v1 import admin_pb2 as pb

    pairs = entity_pairs(parser, args.entity_type, args.entity_names)
    if args.describe:
        if args.add_config or args.delete_config:
            parser.error("--add-config and --delete-config are only valid with --alter")
        request = pb.DescribeClientQuotasRequest(components=describe_components(pairs), strict=bool(pairs))
        print_quotas(admin.describe_client_quotas(request).entries)
        return 0
    if not pairs or any(name is None for _, name in pairs):
        parser.error("an entity name must be specified with --alter of users, clients, ips")
    if not args.add_config and not args.delete_config:
        parser.error("At least one of --add-config or --delete-config must be specified with --alter")
    additions = _quota_additions(args.add_config)
    deletions = [key.strip() for key in (args.delete_config or "").split(",") if key.strip()]
    # as kafka-configs.sh: deleting a key the entity does not have is an error, not a silent no-op
    current = admin.describe_client_quotas(
        pb.DescribeClientQuotasRequest(components=describe_components(pairs), strict=True)
    ).entries
    present = {v.key for entry in current for v in entry.values}
    missing = [key for key in deletions if key not in present]
    if missing:
        raise CliError(f"Invalid config(s): {','.join(missing)}")
    ops = [pb.AlterClientQuotasRequest.OpData(key=k, value=v) for k, v in additions.items()]
    ops += [pb.AlterClientQuotasRequest.OpData(key=k) for k in deletions]
    response = admin.alter_client_quotas(
        pb.AlterClientQuotasRequest(
            entries=[pb.AlterClientQuotasRequest.EntryData(entity=entity_data(pairs), ops=ops)],
            request_id=str(uuid.uuid4()),
        )
    )
    for entry in response.entries:
        check_result(entry.error_code, entry.error_message)
    head_type, head_name = pairs[0]
    if head_name:
        print(f"Completed updating config for {head_type[:-1]} {escaped(head_name)}.")
    else:
        print(f"Completed updating default config for {head_type} in the cluster.")
    return 0


def run_log(parser: argparse.ArgumentParser, args: argparse.Namespace, admin: AdminClient) -> int:
    from quotaplane.v1 import admin_pb2 as pb

    if args.log_command == "offsets":
        offsets = admin.get_log_offsets(pb.GetLogOffsetsRequest())
        print(f"Log start offset: {offsets.start_offset}")
        print(f"Log end offset: {offsets.end_offset}")
        return 0
    if args.log_command == "image":
        pairs = entity_pairs(parser, args.entity_type, args.entity_names)
        image = admin.describe_client_quotas_at(
            pb.DescribeClientQuotasAtRequest(time_ms=args.at, components=describe_components(pairs), strict=bool(pairs))
        )
        print(f"Client quotas at {iso_ms(args.at)} (log offsets below {image.end_offset}):")
        print_quotas(image.entries)
        return 0
    pairs = entity_pairs(parser, args.entity_type, args.entity_names)
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
        request.entity.entity.extend(entity_data(pairs))
    for entry in admin.entity_history(request).entries:
        print(
            f"{entry.offset}  {iso_ms(entry.commit_time_ms)}  {escaped(entry.principal)}  "
            f"{escaped(entry.request_id) or '-'}  "
            f"{escaped(entry.key)}: {history_value(entry.old_value)} -> {history_value(entry.new_value)}"
        )
    return 0
