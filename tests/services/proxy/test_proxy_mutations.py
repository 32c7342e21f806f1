"""The controller mutation quota through the proxy (issue 16), against a real Tansu upstream: strict versions answer
a refused topic THROTTLING_QUOTA_EXCEEDED and never forward it, permissive versions forward everything and carry
the throttle, both exactly as the core's ControllerMutationQuotaManager decides; and what a topic costs (the rules
the upstream cannot show: Tansu has no CreatePartitions and checks little) on the module's own functions."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from quotaplane.errors import Errors
from quotaplane.kafka_uuid import ZERO_UUID, Uuid
from quotaplane.protocol import (
    ApiKey,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    MetadataRequest,
    encode_request,
)
from quotaplane.quota import (
    ClientQuotaEntity,
    ClientQuotaManagerConfig,
    ControllerMutationQuotaManager,
    ThrottlingQuotaExceededError,
)
from quotaplane.services.frontend import _mutations as mutations
from tests.services.frontend.conftest import wait_until

from .conftest import Proxied
from .test_proxy import broker_client, create_topic

Topic = CreateTopicsRequest.CreatableTopic
T0 = 1_700_000_000_000


def core_decision(client_id: str, rate: float, permits: list[int], *, strict: bool) -> tuple[list[bool], int]:
    """What Kafka's ControllerMutationQuotaManager answers one request of ``permits`` (a first use: the bucket
    starts full at any realistic time, so the answer does not depend on the clock)."""
    manager = ControllerMutationQuotaManager(ClientQuotaManagerConfig())
    manager.update_quota(ClientQuotaEntity(user="ANONYMOUS", client_id=client_id), rate)
    new_quota = manager.new_strict_quota_for if strict else manager.new_permissive_quota_for
    quota = new_quota("ANONYMOUS", client_id, T0)
    accepted = []
    for p in permits:
        try:
            quota.record(float(p), T0)
            accepted.append(True)
        except ThrottlingQuotaExceededError:
            accepted.append(False)
    return accepted, quota.throttle_time(T0)


def existing(proxied: Proxied, names: list[str]) -> dict[str, int]:
    """name -> partition count of the topics the upstream has, asked through the proxy (creating nothing)."""
    client = broker_client(proxied, "checker")
    try:
        wanted = [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
        answer = client.call(ApiKey.METADATA, 12, MetadataRequest(topics=wanted, allow_auto_topic_creation=False))
    finally:
        client.close()
    return {t.name: len(t.partitions) for t in answer.topics if t.error_code == Errors.NONE}


# --- against Tansu ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [6, 7])
def test_strict_creates_beyond_the_rate_are_refused_and_never_created(proxied: Proxied, version: int) -> None:
    client_id = f"strict-creator-{version}"
    proxied.set_quota("controller_mutation_rate", 2, client_id)  # a bucket of 22 partitions (11 one-second samples)
    create_topic(proxied, f"already-{version}", 1)
    names = [f"s{version}-big", f"s{version}-mid", f"s{version}-small", f"already-{version}", f"s{version}-last"]
    sizes = [20, 4, 2, 1, 1]
    request = CreateTopicsRequest([Topic(n, p, 1) for n, p in zip(names, sizes, strict=True)], 10_000)
    client = broker_client(proxied, client_id)
    try:
        answer = client.call(ApiKey.CREATE_TOPICS, version, request)
    finally:
        client.close()
    # the existing topic costs nothing (Kafka answers TOPIC_ALREADY_EXISTS before the quota)
    accepted, throttle = core_decision(client_id, 2, [20, 4, 2, 1], strict=True)
    assert accepted == [True, True, False, False] and throttle > 0
    assert [t.name for t in answer.topics] == names  # the request's order
    codes = [t.error_code for t in answer.topics]
    assert codes[:3] == [0, 0, Errors.THROTTLING_QUOTA_EXCEEDED] and codes[4] == Errors.THROTTLING_QUOTA_EXCEEDED
    assert codes[3] == 36  # TOPIC_ALREADY_EXISTS: forwarded, answered by the upstream
    assert answer.topics[2].error_message == "The throttling quota has been exceeded."
    assert answer.throttle_time_ms == throttle
    assert existing(proxied, names) == {names[0]: 20, names[1]: 4, names[3]: 1}


def test_a_strict_request_refused_whole_is_answered_without_the_upstream(proxied: Proxied) -> None:
    client_id = "strict-twice"
    proxied.set_quota("controller_mutation_rate", 1, client_id)  # a bucket of 11 partitions
    client = broker_client(proxied, client_id)
    try:
        first = client.call(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest([Topic("tw-a", 20, 1)], 10_000))
        # same bucket, same connection: answered after the mute, the bucket still below zero
        second = client.call(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest([Topic("tw-b", 1, 1)], 10_000))
    finally:
        client.close()
    assert first.topics[0].error_code == 0 and first.throttle_time_ms == 0  # strict: accepted, no throttle
    assert second.topics[0].error_code == Errors.THROTTLING_QUOTA_EXCEEDED
    assert 0 < second.throttle_time_ms <= 9000  # 9 partitions below zero at 1/s, minus the time passed
    assert existing(proxied, ["tw-a", "tw-b"]) == {"tw-a": 20}


@pytest.mark.parametrize("version", [2, 5])
def test_permissive_creates_everything_and_carries_the_cores_throttle(proxied: Proxied, version: int) -> None:
    client_id = f"permissive-creator-{version}"
    proxied.set_quota("controller_mutation_rate", 2, client_id)
    names = [f"p{version}-a", f"p{version}-b", f"p{version}-c"]
    request = CreateTopicsRequest([Topic(names[0], 20, 1), Topic(names[1], 4, 1), Topic(names[2], 2, 1)], 10_000)
    client = broker_client(proxied, client_id)
    try:
        answer = client.call(ApiKey.CREATE_TOPICS, version, request)
    finally:
        client.close()
    accepted, throttle = core_decision(client_id, 2, [20, 4, 2], strict=False)
    assert accepted == [True] * 3 and throttle == 2000  # 4 partitions below zero at 2/s
    assert [t.error_code for t in answer.topics] == [0, 0, 0]
    assert answer.throttle_time_ms == throttle
    assert existing(proxied, names) == {names[0]: 20, names[1]: 4, names[2]: 2}


@pytest.mark.parametrize("version", [5, 6])
def test_strict_deletes_are_charged_the_topics_partitions(proxied: Proxied, version: int) -> None:
    client_id = f"strict-deleter-{version}"
    names = [f"d{version}-a", f"d{version}-b", f"d{version}-c"]
    for name, partitions in zip(names, (16, 8, 1), strict=True):
        create_topic(proxied, name, partitions)
    proxied.set_quota("controller_mutation_rate", 2, client_id)
    if version >= 6:
        State = DeleteTopicsRequest.DeleteTopicState
        request = DeleteTopicsRequest(topics=[State(n) for n in [*names, "d-missing"]], timeout_ms=10_000)
    else:
        request = DeleteTopicsRequest(topic_names=[*names, "d-missing"], timeout_ms=10_000)
    client = broker_client(proxied, client_id)
    try:
        answer = client.call(ApiKey.DELETE_TOPICS, version, request)
    finally:
        client.close()
    accepted, throttle = core_decision(client_id, 2, [16, 8, 1], strict=True)
    assert accepted == [True, True, False]
    codes = {r.name: r.error_code for r in answer.responses}
    assert codes == {
        names[0]: 0,
        names[1]: 0,
        names[2]: Errors.THROTTLING_QUOTA_EXCEEDED,
        "d-missing": Errors.UNKNOWN_TOPIC_OR_PARTITION,  # uncharged, forwarded
    }
    assert answer.throttle_time_ms == throttle
    assert existing(proxied, names) == {names[2]: 1}


def test_a_malformed_create_topics_closes_that_connection_only(proxied: Proxied) -> None:
    bystander = broker_client(proxied, "bystander-mutations")
    bad = broker_client(proxied, "bad-mutator")
    try:
        frame = encode_request(ApiKey.CREATE_TOPICS, 7, 1, CreateTopicsRequest([Topic("never", 1, 1)], 10_000))[4:]
        truncated = frame[:-12]
        bad.send_raw(len(truncated).to_bytes(4, "big") + truncated)
        assert bad.closed_by_server()
        assert bystander.call(ApiKey.METADATA, 4, MetadataRequest(topics=None)).brokers
        assert existing(proxied, ["never"]) == {}
    finally:
        bystander.close()
        bad.close()


def test_librdkafka_admin_client_is_permissive_and_throttled(proxied: Proxied) -> None:
    """librdkafka (confluent-kafka 2.x) sends CreateTopics v4 and DeleteTopics v4, permissive versions: against
    Kafka it never sees THROTTLING_QUOTA_EXCEEDED, only a throttle time, and so through the proxy: every topic
    is created and the client is told the core's throttle (its ``throttle_cb``)."""
    client_id = "rdkafka-admin"
    proxied.set_quota("controller_mutation_rate", 1, client_id)  # a bucket of 11 partitions
    throttles: list[float] = []
    admin = AdminClient(
        {
            "bootstrap.servers": proxied.bootstrap,
            "client.id": client_id,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    futures = admin.create_topics([NewTopic("rk-a", 12, 1), NewTopic("rk-b", 1, 1)], operation_timeout=10)
    for future in futures.values():
        assert future.result(30) is None
    accepted, throttle = core_decision(client_id, 1, [12, 1], strict=False)
    assert accepted == [True, True] and throttle == 2000
    assert wait_until(lambda: admin.poll(0.1) is not None and bool(throttles), timeout_s=10)
    assert throttles == [throttle / 1000]
    assert existing(proxied, ["rk-a", "rk-b"]) == {"rk-a": 12, "rk-b": 1}


# --- what a topic costs (no upstream) ----------------------------------------------------------------------------
def _costs(api_key: int, api_version: int, body: Any, upstream: dict[str, int]) -> list[int | None]:
    topics = mutations._topics(api_key, api_version, body)
    candidates = mutations._candidates(api_key, topics)
    for t in candidates:
        count = upstream.get(t.name) if t.name is not None else None
        t.existing = None if count is None else (t.name, ZERO_UUID, count)
    return [mutations._charge(api_key, t) if t in candidates else None for t in topics]


def test_create_topics_costs_what_the_controller_charges() -> None:
    Assignment = Topic.CreatableReplicaAssignment
    body = CreateTopicsRequest(
        [
            Topic("plain", 5, 1),
            Topic("default", -1, -1),  # the broker's num.partitions: Kafka's default, 1
            Topic("assigned", -1, -1, [Assignment(1, [1]), Assignment(0, [2])]),
            Topic("assigned-with-count", 2, -1, [Assignment(0, [1])]),  # INVALID_REQUEST
            Topic("gap", -1, -1, [Assignment(0, [1]), Assignment(2, [1])]),  # INVALID_REPLICA_ASSIGNMENT
            Topic("zero", 0, 1),
            Topic("no-replicas", 3, 0),
            Topic("bad name!", 1, 1),
            Topic("..", 1, 1),
            Topic("twice", 1, 1),
            Topic("twice", 2, 1),
            Topic("exists", 4, 1),
        ],
        validate_only=True,  # charged too: KRaft records the quota before it drops the records
    )
    costs = _costs(ApiKey.CREATE_TOPICS, 7, body, {"exists": 3})
    assert costs == [5, 1, 2, None, None, None, None, None, None, None, None, None]


def test_create_partitions_and_delete_topics_cost_the_partitions_changed() -> None:
    Part = CreatePartitionsRequest.CreatePartitionsTopic
    body = CreatePartitionsRequest(
        [
            Part("grow", 5, None),
            Part("same", 3, None),
            Part("shrink", 2, None),
            Part("missing", 9, None),
            Part("assigned", 4, [Part.CreatePartitionsAssignment([1])]),
            Part("short", 5, [Part.CreatePartitionsAssignment([1])]),  # 2 more, 1 assignment
        ],
        1000,
        False,
    )
    upstream = {"grow": 2, "same": 3, "shrink": 3, "assigned": 3, "short": 3}
    assert _costs(ApiKey.CREATE_PARTITIONS, 3, body, upstream) == [3, None, None, None, 1, None]
    State = DeleteTopicsRequest.DeleteTopicState
    some_id = Uuid(bytes(range(1, 17)))
    deletes = DeleteTopicsRequest(
        topics=[State("gone", ZERO_UUID), State("both", some_id), State(None, ZERO_UUID), State("missing")]
    )
    assert _costs(ApiKey.DELETE_TOPICS, 6, deletes, {"gone": 7, "both": 2}) == [7, None, None, None]


def test_merge_puts_the_refused_topics_back_in_the_requests_order() -> None:
    Part = CreatePartitionsRequest.CreatePartitionsTopic
    Result = CreatePartitionsResponse.CreatePartitionsTopicResult
    topics = mutations._topics(
        ApiKey.CREATE_PARTITIONS, 3, SimpleNamespace(topics=[Part("a", 2), Part("b", 2), Part("c", 2)])
    )
    upstream = [Result("c", 0, None), Result("a", 37, "no")]
    merged = mutations._merge(ApiKey.CREATE_PARTITIONS, topics, {1}, upstream)
    assert [(r.name, r.error_code) for r in merged] == [("a", 37), ("b", Errors.THROTTLING_QUOTA_EXCEEDED), ("c", 0)]
