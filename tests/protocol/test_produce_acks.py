"""``produce_acks`` reads what the codec would decode, at every Produce version the proxy offers, without
decoding the record batches."""

from __future__ import annotations

import pytest

from quotaplane.protocol import ApiKey, ProduceRequest, ProtocolError, encode_request
from quotaplane.protocol.frames import produce_acks


@pytest.mark.parametrize("version", range(3, 10))
@pytest.mark.parametrize("acks", [-1, 0, 1])
@pytest.mark.parametrize(("transactional_id", "client_id"), [(None, "rdkafka"), ("tx-1", ""), ("", None)])
def test_acks_equal_the_codecs(version: int, acks: int, transactional_id: str | None, client_id: str | None) -> None:
    Topic = ProduceRequest.TopicProduceData
    body = ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=30_000,
        topic_data=[Topic("t", [Topic.PartitionProduceData(0, b"\x00" * 70)])],
    )
    frame = encode_request(ApiKey.PRODUCE, version, 7, body, client_id=client_id)[4:]
    assert produce_acks(frame, version) == acks


def test_a_truncated_produce_is_a_protocol_error() -> None:
    frame = encode_request(ApiKey.PRODUCE, 7, 7, ProduceRequest(transactional_id="tx", acks=1), client_id="c")[4:]
    cut = frame.index(b"tx") + 2  # just past the transactional id: no acks
    with pytest.raises(ProtocolError):
        produce_acks(frame[:cut], 7)
