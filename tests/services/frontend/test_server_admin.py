"""Real Kafka admin clients alter and describe quotaplane's config through the frontend; the CLI (which
talks gRPC to the AdminService) sees the same state, and the other way round.

Which client for which call: confluent-kafka 2.16's AdminClient has no client-quota calls and no
CLIENT_METRICS resource type (its ResourceType stops at TRANSACTIONAL_ID), so it alters and describes a
BROKER config here. kafka-python 3.0's KafkaAdminClient does CLIENT_METRICS configs
(``alter_configs(incremental=True)``, ``describe_configs``, ``list_config_resources``) but has no
client-quota method either; its own protocol classes for AlterClientQuotas / DescribeClientQuotas are
sent through the admin client's own connection manager, so the bytes are still a real client's.
"""

from __future__ import annotations

import confluent_kafka.admin as confluent_admin
import kafka.admin as kafka_admin
import pytest

from .conftest import Running


@pytest.fixture
def kp(running: Running):
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=running.bootstrap, client_id="qp-kafka-python")
    try:
        yield client
    finally:
        client.close()


def send(client, request):
    """A request through kafka-python's admin client's own connection manager; its response."""

    async def call():
        return await client._manager.send(request)

    return client._manager.run(call)


def test_kafka_python_alters_and_describes_client_metrics(running: Running, kp) -> None:
    CR, CRT = kafka_admin.ConfigResource, kafka_admin.ConfigResourceType
    resource = CR(CRT.CLIENT_METRICS, "kp-metrics", {"metrics": "org.apache.kafka.producer.", "interval.ms": "60000"})
    # a new resource has no configs yet, so kafka-python's check against the described ones must be off
    result = kp.alter_configs([resource], incremental=True, raise_on_unknown=False)
    assert result == {"client_metrics": {"kp-metrics": "OK"}}, result
    running.cluster.wait_caught_up(timeout_s=30)

    shown = running.cli("client-metrics", "--describe", "--name", "kp-metrics")
    assert "org.apache.kafka.producer." in shown and "60000" in shown

    running.cli("client-metrics", "--alter", "--name", "kp-metrics", "--interval", "45000")
    described = kp.describe_configs([CR(CRT.CLIENT_METRICS, "kp-metrics")])
    text = str(described)
    assert "45000" in text and "org.apache.kafka.producer." in text, described

    # ListClientMetricsResources v0 (kafka-python names it ListConfigResources, as Kafka 4.1 renamed it)
    listed = send(kp, _list_request())
    assert listed.error_code == 0
    assert "kp-metrics" in {r.resource_name for r in listed.config_resources}


def _list_request():
    from kafka.protocol.admin import ListConfigResourcesRequest

    return ListConfigResourcesRequest(version=0)


def test_kafka_python_alters_and_describes_client_quotas(running: Running, kp) -> None:
    from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

    Entry = AlterClientQuotasRequest.EntryData
    alter = AlterClientQuotasRequest(
        entries=[
            Entry(
                entity=[Entry.EntityData(entity_type="user", entity_name="kp-alice")],
                ops=[Entry.OpData(key="producer_byte_rate", value=2048.0, remove=False)],
            )
        ],
        validate_only=False,
    )
    answer = send(kp, alter)
    assert [e.error_code for e in answer.entries] == [0], answer
    running.cluster.wait_caught_up(timeout_s=30)
    shown = running.cli("quotas", "--describe", "--entity-type", "users", "--entity-name", "kp-alice")
    assert "producer_byte_rate=2048" in shown, shown

    running.cli("quotas", "--alter", "--add-config", "consumer_byte_rate=4096", "--entity-type", "users",
                "--entity-name", "kp-alice")  # fmt: skip
    Component = DescribeClientQuotasRequest.ComponentData
    described = send(
        kp,
        DescribeClientQuotasRequest(
            components=[Component(entity_type="user", match_type=0, match="kp-alice")], strict=False
        ),
    )
    assert described.error_code == 0
    [entry] = described.entries
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("user", "kp-alice")]
    assert {v.key: v.value for v in entry.values} == {"producer_byte_rate": 2048.0, "consumer_byte_rate": 4096.0}

    # a Kafka-level error comes back as Kafka's: a negative rate is INVALID_REQUEST for that entity
    bad = AlterClientQuotasRequest(
        entries=[
            Entry(
                entity=[Entry.EntityData(entity_type="user", entity_name="kp-alice")],
                ops=[Entry.OpData(key="producer_byte_rate", value=-1.0, remove=False)],
            )
        ],
        validate_only=False,
    )
    [refused] = send(kp, bad).entries
    assert refused.error_code == 42 and refused.error_message


def _broker_configs(admin) -> dict:
    resource = confluent_admin.ConfigResource(confluent_admin.ResourceType.BROKER, "0")
    [future] = admin.describe_configs([resource]).values()
    return future.result(timeout=30)


def _alter_broker(admin, value: str | None) -> None:
    op = confluent_admin.AlterConfigOpType.SET if value is not None else confluent_admin.AlterConfigOpType.DELETE
    entry = confluent_admin.ConfigEntry("max.connections.per.ip", value, incremental_operation=op)
    resource = confluent_admin.ConfigResource(confluent_admin.ResourceType.BROKER, "0", incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def test_confluent_admin_client_alters_and_describes_a_broker_config(running: Running) -> None:
    from quotaplane.v1 import admin_pb2 as admin_pb

    admin = confluent_admin.AdminClient({"bootstrap.servers": running.bootstrap})
    _alter_broker(admin, "500")
    entry = _broker_configs(admin)["max.connections.per.ip"]
    assert entry.value == "500"
    assert entry.source == confluent_admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value

    # the AdminService (what the CLI talks to) holds the same state, recorded with the client's principal
    resource = admin_pb.DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=admin_pb.RESOURCE_TYPE_BROKER, resource_name="0", configuration_keys=["max.connections.per.ip"]
    )
    [result] = running.admin.DescribeConfigs(admin_pb.DescribeConfigsRequest(resources=[resource])).results
    assert [(c.name, c.value) for c in result.configs] == [("max.connections.per.ip", "500")]

    _alter_broker(admin, None)
    assert _broker_configs(admin)["max.connections.per.ip"].value != "500"
