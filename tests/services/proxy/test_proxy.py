"""The proxy with real parts: a real Tansu upstream, ``quotaplane up`` proxying to it, real librdkafka
(confluent-kafka) producers, consumer groups and admin clients, and raw Kafka frames where a client library
cannot show what is checked (the exact throttle of one request, acks=0, garbage)."""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.default_records import DefaultRecordBatchBuilder

from quotaplane.protocol import (
    ApiKey,
    ApiVersionsRequest,
    FindCoordinatorRequest,
    MetadataRequest,
    ProduceRequest,
    encode_request,
)
from quotaplane.quota import ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from tests.services.frontend.conftest import WireClient

from .conftest import FAST_GROUP, TANSU_NODE_ID, Proxied


def create_topic(proxied: Proxied, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": proxied.bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(15)


def broker_address(proxied: Proxied) -> tuple[str, int]:
    return "127.0.0.1", proxied.frontend.proxy.brokers.proxy_port(TANSU_NODE_ID)


def broker_client(proxied: Proxied, client_id: str) -> WireClient:
    """A raw Kafka connection to the proxy port of the Tansu broker."""
    return WireClient(broker_address(proxied)[1], client_id=client_id)


def record_batch(values: list[bytes], *, producer_id: int = -1, epoch: int = -1, sequence: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    now_ms = int(time.time() * 1000)
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=now_ms, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_request(topic: str, batch: bytes, *, acks: int = 1) -> Any:
    Topic = ProduceRequest.TopicProduceData
    return ProduceRequest(
        acks=acks, timeout_ms=10_000, topic_data=[Topic(topic, [Topic.PartitionProduceData(0, batch)])]
    )


# --- addresses and versions ---------------------------------------------------------------------------------
def test_clients_see_only_proxy_addresses(proxied: Proxied) -> None:
    admin = AdminClient({"bootstrap.servers": proxied.bootstrap})
    metadata = admin.list_topics(timeout=15)
    host, port = broker_address(proxied)
    assert {(b.id, b.host, b.port) for b in metadata.brokers.values()} == {(TANSU_NODE_ID, host, port)}
    assert port != proxied.tansu.port
    described = admin.describe_cluster(request_timeout=15).result(15)
    assert {(n.id, n.host, n.port) for n in described.nodes} == {(TANSU_NODE_ID, host, port)}
    client = WireClient(proxied.port, client_id="fc")
    try:
        for version in (1, 3):
            answer = client.call(ApiKey.FIND_COORDINATOR, version, FindCoordinatorRequest(key="some-group"))
            assert (answer.error_code, answer.host, answer.port) == (0, host, port)
        answer = client.call(ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(coordinator_keys=["a", "b"]))
        assert [(c.key, c.host, c.port) for c in answer.coordinators] == [("a", host, port), ("b", host, port)]
    finally:
        client.close()


def test_api_versions_are_the_upstreams_within_what_the_proxy_handles(proxied: Proxied) -> None:
    client = WireClient(proxied.port)
    try:
        answer = client.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest("qp-test", "1.0"))
    finally:
        client.close()
    offered = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert offered == proxied.frontend.versions
    assert offered[ApiKey.GET_TELEMETRY_SUBSCRIPTIONS] == (0, 0) and offered[ApiKey.PUSH_TELEMETRY] == (0, 0)
    assert offered[ApiKey.PRODUCE][1] <= 9 and offered[ApiKey.FETCH][1] <= 15
    assert 19 in offered  # CreateTopics: forwarded untouched at the upstream's versions


# --- data: nothing lost, nothing duplicated --------------------------------------------------------------------
def produce_checked(proxied: Proxied, topic: str, count: int, config: dict[str, Any] | None = None) -> dict:
    """Produce ``count`` checksummed messages keyed over the partitions; (partition -> [seq]) as acknowledged,
    and the producer's last statistics."""
    stats: list[dict] = []
    producer = Producer(
        {
            "bootstrap.servers": proxied.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "statistics.interval.ms": 200,
            "stats_cb": lambda text: stats.append(json.loads(text)),
            **(config or {}),
        }
    )
    acked: dict[int, list[int]] = defaultdict(list)
    errors: list[Any] = []

    def delivered(err: Any, message: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[message.partition()].append(json.loads(message.value())["seq"])

    for seq in range(count):
        payload = {"seq": seq, "pad": "x" * 900}
        payload["sha"] = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        producer.produce(topic, key=str(seq % 17).encode(), value=json.dumps(payload).encode(), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(120) == 0
    producer.poll(0.5)  # one more statistics round
    assert errors == []
    return {"acked": acked, "stats": stats}


def consume_all(proxied: Proxied, topic: str, expected: int, group: str) -> dict[int, list[int]]:
    consumer = Consumer(
        {"bootstrap.servers": proxied.bootstrap, "group.id": group, "auto.offset.reset": "earliest", **FAST_GROUP}
    )
    consumer.subscribe([topic])
    got: dict[int, list[int]] = defaultdict(list)
    deadline = time.monotonic() + 90
    try:
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            payload = json.loads(message.value())
            sha = payload.pop("sha")
            assert hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest() == sha
            got[message.partition()].append(payload["seq"])
        extra = consumer.poll(1.0)  # nothing beyond what was produced
        assert extra is None or extra.error()
    finally:
        consumer.close()
    return got


def test_every_message_is_consumed_once_in_order_through_the_proxy(proxied: Proxied) -> None:
    create_topic(proxied, "orders", 3)
    produced = produce_checked(proxied, "orders", 1500)
    consumed = consume_all(proxied, "orders", 1500, "orders-readers")
    assert dict(consumed) == dict(produced["acked"])  # per partition, the acknowledged order, once each
    assert sorted(s for seqs in consumed.values() for s in seqs) == list(range(1500))


def test_a_throttled_producer_obeys_and_loses_nothing(proxied: Proxied) -> None:
    create_topic(proxied, "slow", 2)
    proxied.set_quota("producer_byte_rate", 20480, "slow-producer")
    # Kafka lets a new client burst (the rate's window is padded to 10 s), so 300 kB exceed 20 kB/s only after
    # ~200 kB: the rest is throttled, a few seconds' worth
    produced = produce_checked(proxied, "slow", 300, {"client.id": "slow-producer"})
    # librdkafka saw throttle_time_ms in Produce responses (its throttle window restarts at every statistics)
    throttles = [
        b["throttle"]["max"] for s in produced["stats"] for b in s["brokers"].values() if b["nodeid"] == TANSU_NODE_ID
    ]
    assert max(throttles) > 0, (throttles, proxied.frontend.stats.snapshot())
    assert proxied.frontend.stats.throttled_responses > 0
    consumed = consume_all(proxied, "slow", 300, "slow-readers")
    assert dict(consumed) == dict(produced["acked"])


# --- exact throttles, acks=0, bad input ------------------------------------------------------------------------
def core_throttle(
    client_id: str,
    quota: float,
    size: int,
    quota_type: QuotaType = QuotaType.PRODUCE,
    *,
    second_after_ms: int | None = None,
) -> int:
    """What Kafka's ClientQuotaManager answers for a first record of ``size`` bytes: the rate's window is
    then (samples - 1) whole windows whatever the clock, so the answer does not depend on the time. With
    ``second_after_ms``, its answer for a second record of ``size`` bytes that long after the first."""
    manager = ClientQuotaManager(ClientQuotaManagerConfig(), quota_type)
    manager.update_quota(ClientQuotaEntity(user="ANONYMOUS", client_id=client_id), quota)
    t0 = 1_700_000_000_000
    throttle = manager.record_and_get_throttle_time_ms("ANONYMOUS", client_id, float(size), t0)
    if second_after_ms is not None:
        throttle = manager.record_and_get_throttle_time_ms("ANONYMOUS", client_id, float(size), t0 + second_after_ms)
    return throttle


@pytest.mark.parametrize("version", [3, 7, 8, 9])
def test_produce_throttle_time_equals_the_cores(proxied: Proxied, version: int) -> None:
    create_topic(proxied, f"exact-{version}", 1)
    client_id = f"exact-{version}"
    proxied.set_quota("producer_byte_rate", 5000, client_id)
    request = produce_request(f"exact-{version}", record_batch([b"v" * 1000] * 60))
    size = len(encode_request(ApiKey.PRODUCE, version, 1, request, client_id=client_id)) - 4
    client = broker_client(proxied, client_id)
    try:
        answer = client.call(ApiKey.PRODUCE, version, request)
    finally:
        client.close()
    [topic] = answer.responses
    [partition] = topic.partition_responses
    assert (topic.name, partition.error_code) == (f"exact-{version}", 0)
    expected = core_throttle(client_id, 5000.0, size)  # ~60 kB / 10 s windows: ~2 s
    assert expected > 0 and answer.throttle_time_ms == expected


def test_acks_0_gets_no_response_and_the_next_request_is_answered_in_order(proxied: Proxied) -> None:
    create_topic(proxied, "fire-and-forget", 1)
    client = broker_client(proxied, "acks0")
    try:
        request = produce_request("fire-and-forget", record_batch([b"a", b"b"]), acks=0)
        client._correlation += 1
        client.send_raw(encode_request(ApiKey.PRODUCE, 7, client._correlation, request, client_id="acks0"))
        answer = client.call(ApiKey.METADATA, 4, MetadataRequest(topics=None))  # correlation id checked
        assert any(t.name == "fire-and-forget" for t in answer.topics)
    finally:
        client.close()
    consumed = 0
    consumer = Consumer({"bootstrap.servers": proxied.bootstrap, "group.id": "acks0", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("fire-and-forget", 0, 0)])
    deadline = time.monotonic() + 30
    while consumed < 2 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            consumed += 1
    consumer.close()
    assert consumed == 2


def test_garbage_closes_that_connection_only(proxied: Proxied) -> None:
    bystander = broker_client(proxied, "bystander")
    bad = broker_client(proxied, "bad")
    try:
        bystander.call(ApiKey.METADATA, 4, MetadataRequest(topics=None))
        bad.send_raw(b"\x00\x00\x00\x03\x00\x00\x00")  # a 3-byte request: no header
        assert bad.closed_by_server()
        truncated = encode_request(ApiKey.PRODUCE, 7, 1, produce_request("x", record_batch([b"z"])))[4:-10]
        late = broker_client(proxied, "bad")
        late.send_raw(len(truncated).to_bytes(4, "big") + truncated)
        assert late.closed_by_server()
        late.close()
        assert bystander.call(ApiKey.METADATA, 4, MetadataRequest(topics=None)).brokers
    finally:
        bystander.close()
        bad.close()


def test_quota_types_without_quotas_cost_no_gateway_call(proxied: Proxied) -> None:
    """Kafka records nothing for a quota type without quotas: the proxy then skips the gateway round trip
    (no request_percentage, producer_ids_rate or consumer_byte_rate is set by the tests of this module)."""
    create_topic(proxied, "no-calls", 1)
    proxied.wait_config()
    types = proxied.frontend.enabled_quotas
    assert not types.request and not types.producer_ids
    batchers = proxied.frontend.backend.batchers
    before = {name: batchers[name].items for name in ("request_time", "producer_ids")}
    produce_checked(proxied, "no-calls", 50)  # idempotent: its batches carry a producer id
    assert {name: batchers[name].items for name in before} == before
