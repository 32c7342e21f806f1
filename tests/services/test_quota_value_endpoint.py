"""KIP-786's quota-value series on the real metrics endpoint: there by default, and switched at runtime.

A cluster shared with other modules (conftest's ``session_cluster``: private local Ray, controller, two shards,
the gateway, the admin service and the metrics endpoint on free ports); the users are this module's own, and the
switch is back at its default when the module ends, whatever happened. A quota is set through AdminService
AlterClientQuotas and usage sent through the gateway's QuotaService, as clients do; the series is read from
the endpoint's HTTP page. The switch is flipped through AdminService IncrementalAlterConfigs: the shards apply
it from the config log with no restart, so the series leaves the page and comes back with its current bound.
The ``admin`` and ``quota`` fixtures are tests/services/conftest.py's.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from quotaplane.services.launcher import Cluster
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc, quota_pb2_grpc
from quotaplane.v1 import config_events_pb2 as events_pb
from quotaplane.v1 import quota_pb2 as quota_pb
from tests.prometheus_server import wait_for

KIP_786 = "client.quota.value.metric.enable"
QUOTA_VALUE = "kafka_quota_produce_quota_value"


def series(url: str, name: str) -> dict[tuple[str, str], float]:
    """``(user, client_id) -> value`` of one metric on the endpoint's page."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.labels.get("user", ""), s.labels.get("client_id", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def set_quota(admin: admin_pb2_grpc.AdminServiceStub, user: str, bound: float) -> None:
    entry = admin_pb.AlterClientQuotasRequest.EntryData(
        entity=[events_pb.EntityData(entity_type="user", entity_name=user)],
        ops=[admin_pb.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=bound)],
    )
    answer = admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry]))
    assert [e.error_code for e in answer.entries] == [0], answer


def alter_switch(admin: admin_pb2_grpc.AdminServiceStub, value: str | None) -> None:
    """SET the cluster-wide switch to ``value``, or DELETE it (None: back to the default)."""
    op = admin_pb.ALTER_CONFIG_OP_TYPE_SET if value is not None else admin_pb.ALTER_CONFIG_OP_TYPE_DELETE
    config = admin_pb.IncrementalAlterConfigsRequest.AlterableConfig(name=KIP_786, config_operation=op, value=value)
    resource = admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=admin_pb.RESOURCE_TYPE_BROKER, resource_name="", configs=[config]
    )
    answer = admin.IncrementalAlterConfigs(admin_pb.IncrementalAlterConfigsRequest(resources=[resource]))
    assert [r.error_code for r in answer.responses] == [0], answer


def send(quota: quota_pb2_grpc.QuotaServiceStub, user: str, value: float) -> list[int]:
    item = quota_pb.UsageItem(quota_type=quota_pb.PRODUCE, user=user, client_id="app", value=value)
    return list(quota.RecordUsageBatch(quota_pb.UsageBatch(items=[item]), timeout=30).throttle_time_ms)


@pytest.fixture(scope="module")
def cluster(session_cluster: Cluster) -> Cluster:
    return session_cluster


@pytest.fixture(scope="module", autouse=True)
def switch_put_back(admin: admin_pb2_grpc.AdminServiceStub) -> Iterator[None]:
    """The switch is cluster-wide: back at its default (DELETE) when the module ends, even after a failure."""
    yield
    alter_switch(admin, None)


def test_a_new_entity_with_a_quota_shows_its_quota_value_by_default(cluster, admin, quota) -> None:
    described = admin.DescribeConfigs(
        admin_pb.DescribeConfigsRequest(
            resources=[
                admin_pb.DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=admin_pb.RESOURCE_TYPE_BROKER, resource_name="", configuration_keys=[KIP_786]
                )
            ]
        )
    )
    [entry] = described.results[0].configs
    assert (entry.value, entry.is_default, entry.read_only) == ("true", True, False)

    url = cluster.metrics_url
    assert url is not None
    assert ("fresh", "") not in series(url, QUOTA_VALUE)
    set_quota(admin, "fresh", 7_000.0)
    cluster.wait_caught_up(timeout_s=30)
    send(quota, "fresh", 1_000.0)  # the entity becomes active: its sensors, quota-value among them, exist
    assert series(url, QUOTA_VALUE)[("fresh", "")] == 7_000.0
    assert series(url, "kafka_quota_produce_byte_rate")[("fresh", "")] > 0


def test_turning_the_switch_off_and_on_through_the_log_removes_and_restores_the_series(cluster, admin, quota) -> None:
    url = cluster.metrics_url
    assert url is not None
    set_quota(admin, "switched", 9_000.0)
    cluster.wait_caught_up(timeout_s=30)
    assert send(quota, "switched", 500_000.0)[0] > 0  # ~50 kB/s over the window against 9 kB/s: throttled
    assert series(url, QUOTA_VALUE)[("switched", "")] == 9_000.0

    alter_switch(admin, "false")
    cluster.wait_caught_up(timeout_s=30)
    assert series(url, QUOTA_VALUE) == {}  # every entity's series left, on both shards
    assert series(url, "kafka_quota_produce_byte_rate")[("switched", "")] > 0  # usage is untouched
    send(quota, "switched", 1.0)
    set_quota(admin, "switched", 12_000.0)  # a new bound while off: nowhere to show
    cluster.wait_caught_up(timeout_s=30)
    assert series(url, QUOTA_VALUE) == {}

    alter_switch(admin, None)  # deleted: the default, on
    cluster.wait_caught_up(timeout_s=30)
    restored = wait_for(lambda: series(url, QUOTA_VALUE), until=bool, timeout_s=10, what="quota-value series back")
    assert restored[("switched", "")] == 12_000.0  # the current bound, without a new record
    assert restored[("fresh", "")] == 7_000.0  # every live entity's, not only the last one seen
