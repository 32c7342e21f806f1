"""``quotaplane configs`` (kafka-configs.sh for broker and topic configs) and ``quotaplane client-metrics``
(kafka-client-metrics.sh).

Both are DescribeConfigs / IncrementalAlterConfigs on a config resource (a broker, the brokers' default,
a topic, a KIP-714 client-metrics subscription), with the messages and refusals of Kafka's own tools.
"""

from __future__ import annotations

import argparse
import uuid

from ._admin_client import AdminClient, check_result
from ._entities import entity_pairs
from ._errors import CliError
from ._kafka_format import escaped, split_configs

__all__ = ["run_client_metrics", "run_configs"]


def _client_metrics_configs(admin: AdminClient, name: str) -> list:
    from quotaplane.v1 import admin_pb2 as pb

    resource = pb.DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS, resource_name=name
    )
    [result] = admin.describe_configs(pb.DescribeConfigsRequest(resources=[resource])).results
    check_result(result.error_code, result.error_message)
    return list(result.configs)


def run_client_metrics(parser: argparse.ArgumentParser, args: argparse.Namespace, admin: AdminClient) -> int:
    from quotaplane.v1 import admin_pb2 as pb

    if not args.alter and (
        args.generate_name or args.metrics is not None or args.interval is not None or args.match is not None
    ):
        parser.error("--generate-name, --metrics, --interval and --match are only valid with --alter")
    if args.list:
        if args.name:
            parser.error("--name is not valid with --list")
        listed = admin.list_client_metrics_resources(pb.ListClientMetricsResourcesRequest())
        for resource in listed.client_metrics_resources:
            print(escaped(resource.name))
        return 0
    if args.describe:
        if args.name:
            names = [args.name]
        else:
            listed = admin.list_client_metrics_resources(pb.ListClientMetricsResourcesRequest())
            names = [r.name for r in listed.client_metrics_resources]
        for name in names:
            configs = _client_metrics_configs(admin, name)
            if not configs:
                print(f"The client metric resource {escaped(name)} doesn't exist and doesn't have dynamic config.")
                continue
            print(f"Client metrics configs for {escaped(name)} are:")
            for config in configs:
                print(f"  {escaped(config.name)}={escaped(config.value)}")
        return 0
    set_, delete = pb.ALTER_CONFIG_OP_TYPE_SET, pb.ALTER_CONFIG_OP_TYPE_DELETE
    Config = pb.IncrementalAlterConfigsRequest.AlterableConfig
    if args.delete:
        if not args.name:
            parser.error("--name must be specified with --delete")
        name = args.name
        configs = [Config(name=c.name, config_operation=delete) for c in _client_metrics_configs(admin, name)]
        done = f"Deleted client metrics config for {escaped(name)}."
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
        done = f"Altered client metrics config for {escaped(name)}."
    resource = pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS, resource_name=name, configs=configs
    )
    response = admin.incremental_alter_configs(
        pb.IncrementalAlterConfigsRequest(resources=[resource], request_id=str(uuid.uuid4()))
    )
    for result in response.responses:
        check_result(result.error_code, result.error_message)
    print(done)
    return 0


def _config_additions(text: str | None) -> dict[str, str]:
    """kafka-configs.sh's ``--add-config`` for broker and topic configs: ``k=v`` pairs, a value holding
    commas in ``[...]`` with the brackets dropped (as kafka-configs.sh drops them); a repeated key keeps its
    last value, as kafka-configs.sh's Properties do."""
    additions: dict[str, str] = {}
    for item in split_configs(text or ""):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(
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
        raise CliError(f"{message} ({error})" if message else error)


def _config_entity(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, str]:
    """The one (entity type, name) of ``quotaplane configs``: name "" is the brokers' cluster default."""
    pairs = entity_pairs(parser, args.entity_type, args.entity_names)
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


def _startup_note(configs: list) -> str | None:
    """The note for broker keys Kafka reads only at start-up (ConfigKeySpec.dynamic=False): logged now,
    applied when a shard rebuilds its managers (ManagerBinding.restart_required)."""
    from quotaplane.config import BROKER_CONFIGS

    startup = [c.name for c in configs if (spec := BROKER_CONFIGS.get(c.name)) is not None and not spec.dynamic]
    if not startup:
        return None
    subject = (
        f"{startup[0]} is a start-up config" if len(startup) == 1 else f"{', '.join(startup)} are start-up configs"
    )
    return f"Note: {subject}: the change takes effect when the shards restart."


def run_configs(parser: argparse.ArgumentParser, args: argparse.Namespace, admin: AdminClient) -> int:
    from quotaplane.v1 import admin_pb2 as pb

    entity_type, name = _config_entity(parser, args)
    resource_type = pb.RESOURCE_TYPE_BROKER if entity_type == "brokers" else pb.RESOURCE_TYPE_TOPIC

    def dynamic_configs() -> list:
        """The configs set on the resource (for a node: its own, else the cluster default's)."""
        resource = pb.DescribeConfigsRequest.DescribeConfigsResource(resource_type=resource_type, resource_name=name)
        [result] = admin.describe_configs(pb.DescribeConfigsRequest(resources=[resource])).results
        _check_config_result(result.error_code, result.error_message)
        return [c for c in result.configs if not c.is_default]

    if args.describe:
        if args.add_config or args.delete_config:
            parser.error("--add-config and --delete-config are only valid with --alter")
        configs = dynamic_configs()
        if entity_type == "brokers" and not name:
            print("Default configs for brokers in the cluster are:")
        else:
            print(f"Dynamic configs for {entity_type[:-1]} {escaped(name)} are:")
        for config in configs:
            print(f"  {escaped(config.name)}={escaped(config.value) if config.HasField('value') else 'null'}")
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
            raise CliError(f"Invalid config(s): {','.join(missing)}")
    Config = pb.IncrementalAlterConfigsRequest.AlterableConfig
    configs = [Config(name=k, config_operation=pb.ALTER_CONFIG_OP_TYPE_SET, value=v) for k, v in additions.items()]
    configs += [Config(name=k, config_operation=pb.ALTER_CONFIG_OP_TYPE_DELETE) for k in deletions]
    resource = pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=resource_type, resource_name=name, configs=configs
    )
    response = admin.incremental_alter_configs(
        pb.IncrementalAlterConfigsRequest(resources=[resource], request_id=str(uuid.uuid4()))
    )
    for result in response.responses:
        _check_config_result(result.error_code, result.error_message)
    if name:
        print(f"Completed updating config for {entity_type[:-1]} {escaped(name)}.")
    else:
        print(f"Completed updating default config for {entity_type} in the cluster.")
    if entity_type == "brokers" and (note := _startup_note(configs)):
        print(note)
    return 0
