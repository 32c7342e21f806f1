"""``QuotaService.MaxValueInQuotaWindow`` on a real local Ray: Kafka's ``getMaxValueInQuotaWindow`` (the cap a
proxy puts on a consumer's Fetch ``max_bytes``), answered by the gateway's config replica.

Every answer is compared with the in-process core's ``ClientQuotaManager.max_value_in_quota_window`` fed the
same quotas (one Kafka broker), across Kafka's precedence levels and quota changes. The first test is the only
one that sets FETCH quotas (it starts from "quotas disabled"); the others use PRODUCE quotas of their own users.
The cluster is shared with other modules (conftest's ``session_cluster``): each takes its quotas back when it
ends, so this module starts from no quota at all, as on a fresh cluster.
"""

from __future__ import annotations

import sys

import grpc
import pytest

from quotaplane.quota import DEFAULT, ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from quotaplane.services.launcher import Cluster
from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import quota_pb2 as pb

from .conftest import entity, wait_propagated

T0 = 1_700_000_000_000
#: Java's Double.MAX_VALUE: Kafka's answer when no quota applies.
DOUBLE_MAX_VALUE = sys.float_info.max
_KEYS = {QuotaType.PRODUCE: "producer_byte_rate", QuotaType.FETCH: "consumer_byte_rate"}
_WIRE = {QuotaType.PRODUCE: pb.PRODUCE, QuotaType.FETCH: pb.FETCH}


@pytest.fixture(scope="module")
def cluster(session_cluster: Cluster) -> Cluster:
    return session_cluster


def set_quota(
    admin, cluster: Cluster, core: ClientQuotaManager, user: object, client_id: object, bound: float | None
) -> int:
    """``bound`` (None: removed) for the entity on the cluster (propagated to the gateway) and on ``core``; the
    gateway's config offset after it."""
    op = admin_pb.AlterClientQuotasRequest.OpData(key=_KEYS[core.quota_type])
    if bound is not None:
        op.value = bound
    entry = admin_pb.AlterClientQuotasRequest.EntryData(entity=entity(user, client_id), ops=[op])
    response = admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry]))
    assert [e.error_code for e in response.entries] == [0], response
    wait_propagated(cluster, cluster.gateway)
    core.update_quota(ClientQuotaEntity(user=user, client_id=client_id), bound)
    return cluster.gateway.config_offset


def ask(quota, core: ClientQuotaManager, clients: list[tuple[str, str]], batch_id: int = 7) -> pb.QuotaWindowValues:
    """The gateway's answer for ``clients`` (the values sent are ignored), checked against ``core``'s."""
    items = [pb.UsageItem(quota_type=_WIRE[core.quota_type], user=u, client_id=c, value=5.0) for u, c in clients]
    answer = quota.MaxValueInQuotaWindow(pb.UsageBatch(batch_id=batch_id, items=items), timeout=10)
    assert answer.batch_id == batch_id
    assert list(answer.max_value) == [core.max_value_in_quota_window(u, c, T0) for u, c in clients]
    return answer


def test_fetch_values_follow_kafka_precedence_as_quotas_change(cluster, admin, quota):
    core = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.FETCH)
    clients = [("alice", "app"), ("alice", "other"), ("bob", "app"), ("CN=carol, O=x", "app"), ("dan", "")]

    # no FETCH quota at all: quotas disabled, Kafka's "no limit"
    first = ask(quota, core, clients)
    assert list(first.max_value) == [DOUBLE_MAX_VALUE] * len(clients)
    assert first.config_offset == cluster.gateway.config_offset

    # client-id only: "app" shares one quota, other client ids have none
    offset = set_quota(admin, cluster, core, None, "app", 1000.0)
    answer = ask(quota, core, clients)
    assert answer.config_offset == offset > first.config_offset
    assert list(answer.max_value) == [10_000.0, DOUBLE_MAX_VALUE, 10_000.0, 10_000.0, DOUBLE_MAX_VALUE]

    # the user default: every user's own quota, above the client-id level in Kafka's precedence
    offset = set_quota(admin, cluster, core, DEFAULT, None, 2048.0)
    answer = ask(quota, core, clients)
    assert answer.config_offset == offset
    assert list(answer.max_value) == [20_480.0] * len(clients)

    # <user, client-id> beats the user default; a user quota (special characters: sanitized as Kafka does)
    offset = set_quota(admin, cluster, core, "alice", "app", 300.0)
    offset = set_quota(admin, cluster, core, "CN=carol, O=x", None, 64.0)
    answer = ask(quota, core, clients, batch_id=8)
    assert answer.config_offset == offset
    assert list(answer.max_value) == [3000.0, 20_480.0, 20_480.0, 640.0, 20_480.0]

    # removed again: back down the levels
    set_quota(admin, cluster, core, DEFAULT, None, None)
    offset = set_quota(admin, cluster, core, "alice", "app", None)
    answer = ask(quota, core, clients)
    assert answer.config_offset == offset
    assert answer.max_value[0] == 10_000.0 and answer.max_value[3] == 640.0
    # answered from the callbacks alone: the gateway's managers never get a client's sensor
    sensors = [
        *cluster.gateway.replica.quotas.fetch.metrics.sensors,
        *cluster.gateway.replica.quotas.produce.metrics.sensors,
    ]
    assert not [name for name in sensors if name.startswith((str(QuotaType.FETCH), str(QuotaType.PRODUCE)))]


def test_produce_and_fetch_resolve_separately_in_one_batch(cluster, admin, quota):
    produce = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    set_quota(admin, cluster, produce, "prod-user", DEFAULT, 500.0)
    items = [
        pb.UsageItem(quota_type=pb.PRODUCE, user="prod-user", client_id="p1"),
        pb.UsageItem(quota_type=pb.FETCH, user="prod-user", client_id="zz"),
        pb.UsageItem(quota_type=pb.PRODUCE, user="nobody", client_id="p1", now_ms=T0),
    ]
    answer = quota.MaxValueInQuotaWindow(pb.UsageBatch(items=items), timeout=10)
    fetch_max = quota.MaxValueInQuotaWindow(pb.UsageBatch(items=[items[1]]), timeout=10).max_value[0]
    assert list(answer.max_value) == [
        produce.max_value_in_quota_window("prod-user", "p1", T0),
        fetch_max,
        produce.max_value_in_quota_window("nobody", "p1", T0),
    ]
    assert answer.max_value[0] == 5000.0
    assert answer.max_value[2] == DOUBLE_MAX_VALUE


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (pb.UsageBatch(), "empty batch"),
        (pb.UsageBatch(items=[pb.UsageItem(user="u", client_id="c")]), "item 0: unknown quota type"),
        (
            pb.UsageBatch(items=[pb.UsageItem(quota_type=pb.FETCH, user="u"), pb.UsageItem(quota_type=pb.FETCH)]),
            "item 1: user must not be empty",
        ),
        (pb.UsageBatch(items=[pb.UsageItem(quota_type=pb.FETCH, user="u", client_id="a\x00b")]), "item 0"),
        (pb.UsageBatch(items=[pb.UsageItem(quota_type=pb.FETCH, user="u", value=float("nan"))]), "finite"),
        (pb.UsageBatch(items=[pb.UsageItem(quota_type=pb.PRODUCE, user="u", now_ms=-1)]), "now_ms"),
    ],
)
def test_bad_batches_are_invalid_argument(quota, bad, message):
    with pytest.raises(grpc.RpcError) as error:
        quota.MaxValueInQuotaWindow(bad, timeout=10)
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in error.value.details()
    ok = pb.UsageBatch(items=[pb.UsageItem(quota_type=pb.FETCH, user="u", client_id="c")])
    assert len(quota.MaxValueInQuotaWindow(ok, timeout=10).max_value) == 1


def test_enabled_quota_types_follow_the_config(cluster, admin, quota):
    """Kafka's quotasEnabled per manager, and any producer_ids_rate: what lets the proxy skip calls."""

    def alter(key: str, value: float | None, user: str = "carol") -> int:
        op = admin_pb.AlterClientQuotasRequest.OpData(key=key)
        if value is not None:
            op.value = value
        entry = admin_pb.AlterClientQuotasRequest.EntryData(entity=entity(user, None), ops=[op])
        assert [
            e.error_code for e in admin.AlterClientQuotas(admin_pb.AlterClientQuotasRequest(entries=[entry])).entries
        ] == [0]
        wait_propagated(cluster, cluster.gateway)
        return cluster.gateway.config_offset

    def enabled() -> pb.EnabledQuotaTypes:
        return quota.GetEnabledQuotaTypes(pb.EnabledQuotaTypesRequest(), timeout=10)

    first = enabled()
    assert not (first.request or first.controller_mutation or first.producer_ids)
    offset = alter("request_percentage", 50.0)
    answer = enabled()
    assert answer.request and not answer.producer_ids and answer.config_offset == offset
    alter("producer_ids_rate", 10.0)
    alter("controller_mutation_rate", 5.0)
    answer = enabled()
    assert answer.request and answer.producer_ids and answer.controller_mutation
    for key in ("request_percentage", "producer_ids_rate", "controller_mutation_rate"):
        offset = alter(key, None)
    answer = enabled()
    assert not (answer.request or answer.controller_mutation or answer.producer_ids)
    assert answer.config_offset == offset
