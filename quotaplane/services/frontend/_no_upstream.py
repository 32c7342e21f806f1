"""The data plane of a frontend that fronts no Kafka cluster (no ``--upstream-bootstrap``): answered at once.

A client whose metadata points it here (a producer switched from a broker, a misconfigured bootstrap list)
must not wait minutes for a timeout: a Produce is answered with INVALID_REQUEST for every partition (a
non-retriable error, so the client fails the records at once) with a message saying why in v8+; a Fetch v7+
with a top-level INVALID_REQUEST. Fetch v0-v6 has no error field outside its partitions, so that connection
is closed, as a broker closes on a request it cannot answer; ``acks=0`` Produce likewise (Kafka closes the
connection when an acks=0 produce fails, the client's only way to learn of it). Each case is logged once per
process (a frontend process runs one frontend), naming the fix.
"""

from __future__ import annotations

import logging
from typing import Any

from quotaplane.errors import Errors
from quotaplane.protocol import ProduceResponse
from quotaplane.protocol.fetch import empty_fetch_response

__all__ = ["NO_UPSTREAM", "fetch_answer", "produce_answer"]

log = logging.getLogger(__name__)

NO_UPSTREAM = (
    "this quotaplane frontend fronts no Kafka cluster (start it with --upstream-bootstrap HOST:PORT): "
    "it stores no records"
)
_logged: set[str] = set()


def _log_once(api: str) -> None:
    if api not in _logged:
        _logged.add(api)
        log.warning("a Kafka client sent %s to the frontend: %s", api, NO_UPSTREAM)


def produce_answer(request: Any) -> Any | None:
    """The ProduceResponse refusing every partition; None for acks=0 (close the connection instead)."""
    _log_once("Produce")
    if request.body.acks == 0:
        return None
    Topic = ProduceResponse.TopicProduceResponse
    return ProduceResponse(
        responses=[
            Topic(
                topic.name,
                [
                    Topic.PartitionProduceResponse(part.index, Errors.INVALID_REQUEST, -1, -1, -1, [], NO_UPSTREAM)
                    for part in topic.partition_data
                ],
            )
            for topic in request.body.topic_data
        ]
    )


def fetch_answer(api_version: int, correlation_id: int) -> bytearray | None:
    """An empty Fetch response with a top-level INVALID_REQUEST (v7+); None before v7 (close instead)."""
    _log_once("Fetch")
    if api_version < 7:
        return None
    return empty_fetch_response(api_version, correlation_id, 0, Errors.INVALID_REQUEST)
