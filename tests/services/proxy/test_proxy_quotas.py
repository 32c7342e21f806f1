"""Kafka's quotas through the proxy, against a real Tansu upstream: fetch (cap, record, un-record, the empty
throttled answer), KIP-936 producer ids from batch headers, one budget across two proxies, a proxy restart
and an upstream that dies."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from quotaplane.protocol import ApiKey, MetadataRequest, encode_request
from quotaplane.quota import (
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ProducerIdQuotaManager,
    ProducerIdQuotaManagerConfig,
    QuotaType,
)
from quotaplane.services.frontend import FrontendServer
from tests.services.frontend.conftest import WireClient

from .conftest import TANSU_NODE_ID, Proxied, Tansu, start_tansu, upstream_config
from .test_proxy import broker_client, core_throttle, create_topic, produce_checked, produce_request, record_batch


def fetch_frame(topic: str, version: int, client_id: str, *, max_bytes: int = 50 * 1024 * 1024) -> bytes:
    """A Fetch v4-v11 request for partition 0 of ``topic`` from offset 0, built by hand (the codec has no Fetch
    schema: the proxy never decodes one)."""
    name = topic.encode()
    body = struct.pack(">iiiib", -1, 500, 1, max_bytes, 0)
    if version >= 7:
        body += struct.pack(">ii", 0, -1)  # no session
    body += struct.pack(">ih", 1, len(name)) + name + struct.pack(">ii", 1, 0)
    body += struct.pack(">iq", -1, 0) if version >= 9 else struct.pack(">q", 0)
    body += struct.pack(">q", -1) if version >= 5 else b""
    body += struct.pack(">i", 1024 * 1024)
    if version >= 7:
        body += struct.pack(">i", 0)  # forgotten topics
    if version >= 11:
        body += struct.pack(">h", 0)  # rack id ""
    header = struct.pack(">hhih", ApiKey.FETCH, version, 1, len(client_id)) + client_id.encode()
    return header + body


def raw_call(client: WireClient, frame: bytes) -> bytes:
    client.send_raw(len(frame).to_bytes(4, "big") + frame)
    answer = client.read_frame()
    assert answer is not None, "the proxy closed the connection"
    return answer


def throttle_of_fetch_response(frame: bytes) -> int:
    return int.from_bytes(frame[4:8], "big", signed=True)  # v1-v11: header (4 bytes), then throttle_time_ms


# --- fetch -------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fetch_topic(proxied: Proxied) -> str:
    create_topic(proxied, "fetched", 1)
    produce_checked(proxied, "fetched", 120, {"client.id": "filler"})
    return "fetched"


def test_fetch_cap_is_the_cores_max_value_in_quota_window(proxied: Proxied, fetch_topic: str) -> None:
    proxied.set_quota("consumer_byte_rate", 7000, "capped")
    client = broker_client(proxied, "capped")
    try:
        raw_call(client, fetch_frame(fetch_topic, 11, "capped", max_bytes=10))  # under the cap: fetched
    finally:
        client.close()
    manager = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.FETCH)
    manager.update_quota(ClientQuotaEntity(user="ANONYMOUS", client_id="capped"), 7000.0)
    expected = manager.max_value_in_quota_window("ANONYMOUS", "capped", 1_700_000_000_000)
    assert expected == 7000.0 * 10 and proxied.frontend.fetch_caps[("ANONYMOUS", "capped")][0] == expected


@pytest.fixture(scope="module")
def small_fetch_topic(proxied: Proxied) -> str:
    """~40 kB: a whole-topic answer stays under a 5,000 B/s consumer's cap (10 s of quota, 50 kB)."""
    create_topic(proxied, "fetched-small", 1)
    produce_checked(proxied, "fetched-small", 40, {"client.id": "filler"})
    return "fetched-small"


def free_fetch_size(proxied: Proxied, topic: str, version: int, max_bytes: int) -> int:
    """The size of the answer to the fetch an unthrottled client makes: what a throttled one records."""
    free = broker_client(proxied, "free-reader")
    try:
        return len(raw_call(free, fetch_frame(topic, version, "free-reader", max_bytes=max_bytes)))
    finally:
        free.close()


@pytest.mark.parametrize("version", [4, 7, 11])
def test_a_second_fetch_is_throttled_and_answered_empty(proxied: Proxied, small_fetch_topic: str, version: int) -> None:
    """Kafka caps a fetch at the quota's max value in one window, exactly what a first fetch may take
    unthrottled; so the same fetch twice: the first is answered in full, the second is throttled, un-recorded
    and answered empty, with the core's throttle for two records the time between them apart."""
    client_id = f"throttled-reader-{version}"
    proxied.set_quota("consumer_byte_rate", 5000, client_id)
    cap = 5000 * 10
    size = free_fetch_size(proxied, small_fetch_topic, version, cap)
    assert 10_000 < size < cap  # records came back, all of them under the cap
    before = proxied.frontend.stats.throttled_fetches
    client = broker_client(proxied, client_id)
    try:
        first = raw_call(client, fetch_frame(small_fetch_topic, version, client_id))  # 50 MiB asked: capped
        second = raw_call(client, fetch_frame(small_fetch_topic, version, client_id))
    finally:
        client.close()
    assert len(first) == size and throttle_of_fetch_response(first) == 0
    assert core_throttle(client_id, 5000.0, size, QuotaType.FETCH) == 0
    low = core_throttle(client_id, 5000.0, size, QuotaType.FETCH, second_after_ms=999)
    high = core_throttle(client_id, 5000.0, size, QuotaType.FETCH, second_after_ms=0)
    assert 0 < low <= throttle_of_fetch_response(second) <= high
    assert len(second) < 32  # Kafka's empty throttled response: no partitions
    assert proxied.frontend.stats.throttled_fetches == before + 1


@pytest.mark.parametrize("version", [4, 7, 11])
def test_a_first_fetch_over_the_cap_is_throttled_and_answered_empty(
    proxied: Proxied, fetch_topic: str, version: int
) -> None:
    """An upstream that answers more than the cap (Tansu ignores max_bytes; a Kafka broker does so for a first
    batch larger than the limit, KIP-74): the first fetch already exceeds the window and is answered empty."""
    client_id = f"over-cap-reader-{version}"
    proxied.set_quota("consumer_byte_rate", 5000, client_id)
    size = free_fetch_size(proxied, fetch_topic, version, 5000 * 10)
    assert size > 5000 * 10  # the upstream did answer over the cap
    before = proxied.frontend.stats.throttled_fetches
    client = broker_client(proxied, client_id)
    try:
        answer = raw_call(client, fetch_frame(fetch_topic, version, client_id))
    finally:
        client.close()
    expected = core_throttle(client_id, 5000.0, size, QuotaType.FETCH)
    assert expected > 0 and throttle_of_fetch_response(answer) == expected
    assert len(answer) < 32
    assert proxied.frontend.stats.throttled_fetches == before + 1


def test_a_throttled_consumer_reads_everything_once_in_order(proxied: Proxied) -> None:
    """A producer writes ~80 kB/s for 8 s while a consumer limited to 40 kB/s reads: Kafka lets the first
    ~400 kB (10 s of quota) through, then throttles fetches, which are answered empty and fetched again.
    Data arrives gradually because one response must stay under the fetch cap (10 s of quota): Tansu ignores
    max_bytes and answers with everything it has, so a backlog above the cap would be throttled forever, as a
    Kafka broker throttles a first batch larger than the cap (KIP-74) forever."""
    create_topic(proxied, "drip", 1)
    proxied.set_quota("consumer_byte_rate", 40000, "drip-reader")
    consumer = Consumer(
        {
            "bootstrap.servers": proxied.bootstrap,
            "group.id": "drip",
            "client.id": "drip-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition("drip", 0, 0)])
    producer = Producer({"bootstrap.servers": proxied.bootstrap, "client.id": "drip-filler", "linger.ms": 5})
    total = 640
    seen: list[int] = []
    deadline = time.monotonic() + 90
    next_batch = time.monotonic()
    produced = 0
    try:
        while len(seen) < total and time.monotonic() < deadline:
            if produced < total and time.monotonic() >= next_batch:
                for seq in range(produced, produced + 16):
                    producer.produce("drip", value=json.dumps({"seq": seq, "pad": "x" * 980}).encode())
                producer.flush(10)
                produced += 16
                next_batch += 0.2
            message = consumer.poll(0.05)
            if message is not None and not message.error():
                seen.append(json.loads(message.value())["seq"])
    finally:
        consumer.close()
    assert seen == list(range(total))  # once each, in order, although fetches were answered empty
    assert proxied.frontend.stats.throttled_fetches > 0


# --- KIP-936 producer ids --------------------------------------------------------------------------------------
def test_new_producer_ids_beyond_the_rate_throttle_the_produce(proxied: Proxied) -> None:
    create_topic(proxied, "pids", 1)
    proxied.set_quota("producer_ids_rate", 0.0001)
    ids = list(range(7_000_001, 7_000_009))
    batches = b"".join(record_batch([b"p"], producer_id=pid, epoch=0, sequence=0) for pid in ids)
    request = produce_request("pids", batches)
    client = broker_client(proxied, "pid-churner")
    try:
        answer = client.call(ApiKey.PRODUCE, 7, request)
    finally:
        client.close()
    core = ProducerIdQuotaManager(ProducerIdQuotaManagerConfig())
    core.update_quota(ClientQuotaEntity(user="ANONYMOUS"), 0.0001)
    expected = max(core.record_and_get_throttle_time_ms("ANONYMOUS", pid, 1_700_000_000_000) for pid in ids)
    assert expected > 0 and answer.throttle_time_ms == expected
    proxied.set_quota("producer_ids_rate", None)


# --- several proxies, restarts, upstream failures ------------------------------------------------------------------
@pytest.fixture
def second_proxy(proxied: Proxied) -> Iterator[FrontendServer]:
    server = proxied.serve(upstream=upstream_config(proxied.tansu.bootstrap))
    try:
        yield server
    finally:
        server.close()


def test_two_proxies_share_one_budget(proxied: Proxied, second_proxy: FrontendServer) -> None:
    create_topic(proxied, "shared", 1)
    proxied.set_quota("producer_byte_rate", 5000, "two-proxies")
    proxied.wait_config(second_proxy)
    request = produce_request("shared", record_batch([b"s" * 1000] * 60))
    size = len(encode_request(ApiKey.PRODUCE, 7, 1, request, client_id="two-proxies")) - 4
    throttles = []
    for port in (
        proxied.frontend.proxy.brokers.proxy_port(TANSU_NODE_ID),
        second_proxy.proxy.brokers.proxy_port(TANSU_NODE_ID),
    ):
        client = WireClient(port, client_id="two-proxies")
        try:
            throttles.append(client.call(ApiKey.PRODUCE, 7, request).throttle_time_ms)
        finally:
            client.close()
    assert throttles[0] == core_throttle("two-proxies", 5000.0, size)
    # the second proxy's answer counts both requests: 2 * size over a window of 10 s plus the gap between them
    low = core_throttle("two-proxies", 5000.0, size, second_after_ms=999)
    high = core_throttle("two-proxies", 5000.0, size, second_after_ms=0)
    assert 0 < low <= throttles[1] <= high


def test_a_restarted_proxy_loses_and_duplicates_nothing(proxied: Proxied) -> None:
    create_topic(proxied, "restarts", 2)
    upstream = upstream_config(proxied.tansu.bootstrap)
    first = proxied.serve(upstream=upstream)
    port = first.port
    acked: list[tuple[int, int]] = []
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True, "linger.ms": 5})

    def delivered(err: Any, message: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((message.partition(), int(message.value())))

    try:
        for seq in range(300):
            producer.produce("restarts", key=str(seq % 5).encode(), value=str(seq).encode(), on_delivery=delivered)
            if seq == 150:
                producer.flush(30)
                first.close()  # every connection drops
                first = proxied.serve(port=port, upstream=upstream)
        assert producer.flush(60) == 0
    finally:
        first.close()
    assert errors == []
    consumer = Consumer({"bootstrap.servers": proxied.bootstrap, "group.id": "restarts", "enable.auto.commit": False})
    consumer.assign([TopicPartition("restarts", p, 0) for p in (0, 1)])
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    while len(got) < 300 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append((message.partition(), int(message.value())))
    consumer.close()
    for partition in (0, 1):
        assert [s for p, s in got if p == partition] == [s for p, s in acked if p == partition]
    assert sorted(s for _, s in got) == list(range(300))


def test_an_upstream_that_dies_closes_its_clients_and_the_proxy_serves_others(
    proxied: Proxied, tmp_path_factory: pytest.TempPathFactory
) -> None:
    doomed: Tansu = start_tansu(tmp_path_factory.mktemp("doomed"))
    server = proxied.serve(upstream=upstream_config(doomed.bootstrap))
    try:
        client = WireClient(server.proxy.brokers.proxy_port(TANSU_NODE_ID), client_id="orphan")
        assert client.call(ApiKey.METADATA, 4, MetadataRequest(topics=None)).brokers
        doomed.stop()
        client.send_raw(encode_request(ApiKey.METADATA, 4, 99, MetadataRequest(topics=None), client_id="orphan"))
        assert client.closed_by_server()
        client.close()
        assert server.stats.upstream_errors >= 1
        again = WireClient(server.port, client_id="late")  # a new connection: the upstream is gone, closed too
        again.send_raw(encode_request(ApiKey.METADATA, 4, 1, MetadataRequest(topics=None), client_id="late"))
        assert again.closed_by_server()
        again.close()
    finally:
        server.close()
        doomed.stop()
    other = broker_client(proxied, "unaffected")  # the main proxy keeps serving
    try:
        assert other.call(ApiKey.METADATA, 4, MetadataRequest(topics=None)).brokers
    finally:
        other.close()
