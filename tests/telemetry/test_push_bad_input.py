"""PushTelemetry with bad input, through the manager: each answer's code and the state it leaves.

What a client acts on: INVALID_RECORD (87) stops its telemetry for good; UNSUPPORTED_COMPRESSION_TYPE
(76) and UNKNOWN_SUBSCRIPTION_ID (117) make it ask for its subscription again at once; TELEMETRY_TOO_LARGE
(118) and THROTTLING_QUOTA_EXCEEDED (89) make it try again later. The codecs have their own tests
(test_codecs.py); these check what the manager answers and records for the same inputs.
"""

from __future__ import annotations

import gzip
import logging

import lz4.frame
import pytest
import snappy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.errors import Errors
from quotaplane.kafka_uuid import ONE_UUID, RESERVED, ZERO_UUID, Uuid
from quotaplane.telemetry import ClientMetricsManager, CompressionType, compress

from .conftest import (
    DEFAULT_PUSH_INTERVAL_MS,
    START_MS,
    RecordingExporter,
    build_manager,
    default_properties,
    get_subscriptions,
    metrics_data,
    metrics_data_payload,
    push,
)

ALLOWED_PUSH_ERRORS = frozenset({0, 42, 76, 87, 89, 117, 118})
CODECS = list(CompressionType)
COMPRESSED_CODECS = [c for c in CompressionType if c is not CompressionType.NONE]


def codec_id(codec: CompressionType) -> str:
    return codec.kafka_name


class Client:
    """A client that did its get: its manager, id and subscription id."""

    def __init__(self, manager: ClientMetricsManager, now_ms: int = START_MS) -> None:
        self.manager = manager
        response = get_subscriptions(manager, now_ms)
        assert response.error_code == Errors.NONE
        self.client_instance_id = response.client_instance_id
        self.subscription_id = response.subscription_id
        self.push_interval_ms = response.push_interval_ms

    def push(self, now_ms: int = START_MS, *, subscription_id: int | None = None, **kwargs):
        kwargs.setdefault("metrics", metrics_data_payload())
        sub_id = self.subscription_id if subscription_id is None else subscription_id
        return push(self.manager, self.client_instance_id, sub_id, now_ms, **kwargs)

    def get(self, now_ms: int):
        return get_subscriptions(self.manager, now_ms, self.client_instance_id)

    @property
    def instance(self):
        instance = self.manager.client_instance(self.client_instance_id)
        assert instance is not None
        return instance


@pytest.fixture
def roomy(make_manager, exporter: RecordingExporter) -> ClientMetricsManager:
    """The Kafka fixture's subscription, with room for any codec's framing of the fixture payload."""
    manager = make_manager([exporter], telemetry_max_bytes=4096, max_decompressed_bytes=65_536)
    manager.update_subscription("sub-1", default_properties())
    return manager


def assert_rejected_payload(client: Client, response, exporter: RecordingExporter, code: Errors) -> None:
    assert response.error_code == code
    assert client.instance.last_known_error == code
    assert exporter.exports == []
    assert client.manager.stats.value("plugin-export-count", START_MS) == 0


# --- malformed payloads: INVALID_RECORD ----------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=codec_id)
@pytest.mark.parametrize("keep", ["one byte", "half", "all but one"])
def test_truncated_payload_is_invalid_record(roomy, exporter, codec: CompressionType, keep: str) -> None:
    client = Client(roomy)
    whole = compress(codec, metrics_data_payload())
    cut = {"one byte": 1, "half": len(whole) // 2, "all but one": len(whole) - 1}[keep]

    response = client.push(metrics=whole[:cut], compression_type=codec)

    assert_rejected_payload(client, response, exporter, Errors.INVALID_RECORD)
    assert roomy.stats.value("plugin-error-count", START_MS) == 1


GARBAGE = {
    "text": b"\x05this is not a frame of anything",
    "zeros": bytes(16),
    "ones": b"\xff" * 16,
    "ascii": b"garbage!",
}


@pytest.mark.parametrize("codec", CODECS, ids=codec_id)
@pytest.mark.parametrize("garbage", list(GARBAGE), ids=str)
def test_garbage_payload_is_invalid_record(roomy, exporter, codec: CompressionType, garbage: str) -> None:
    client = Client(roomy)

    response = client.push(metrics=GARBAGE[garbage], compression_type=codec)

    assert_rejected_payload(client, response, exporter, Errors.INVALID_RECORD)


@pytest.mark.parametrize("codec", CODECS, ids=codec_id)
@pytest.mark.parametrize(
    "content",
    [b"garbage!", b"\x10\x01", b"\x0a\x05\x0a\x03\x0a\x01"],
    ids=["not-protobuf", "unknown-top-level-field", "truncated-inner-message"],
)
def test_well_framed_payload_that_is_no_metrics_data_is_invalid_record(
    roomy, exporter, codec: CompressionType, content: bytes
) -> None:
    client = Client(roomy)

    response = client.push(metrics=compress(codec, content), compression_type=codec)

    assert_rejected_payload(client, response, exporter, Errors.INVALID_RECORD)


@pytest.mark.parametrize("codec", CODECS, ids=codec_id)
def test_bytes_after_the_frame_are_invalid_record(roomy, exporter, codec: CompressionType) -> None:
    client = Client(roomy)

    response = client.push(metrics=compress(codec, metrics_data_payload()) + b"\x00\x00", compression_type=codec)

    assert_rejected_payload(client, response, exporter, Errors.INVALID_RECORD)


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=codec_id)
def test_the_codec_named_must_be_the_codec_used(roomy, exporter, codec: CompressionType) -> None:
    client = Client(roomy)
    other = CompressionType.ZSTD if codec is CompressionType.GZIP else CompressionType.GZIP

    response = client.push(metrics=compress(other, metrics_data_payload()), compression_type=codec)

    assert_rejected_payload(client, response, exporter, Errors.INVALID_RECORD)


# --- compression ids: UNSUPPORTED_COMPRESSION_TYPE -----------------------------------------------


@pytest.mark.parametrize("compression_type", [5, 100, 127, -1, -128])
def test_unknown_compression_id_is_unsupported_compression_type(roomy, exporter, compression_type: int) -> None:
    client = Client(roomy)

    response = client.push(compression_type=compression_type)

    assert_rejected_payload(client, response, exporter, Errors.UNSUPPORTED_COMPRESSION_TYPE)
    # Found before the payload is read: no plugin error.
    assert roomy.stats.value("plugin-error-count", START_MS) == 0


def test_unknown_compression_id_lets_the_next_get_through_at_once(roomy) -> None:
    client = Client(roomy)
    assert client.push(START_MS + 1, compression_type=5).error_code == Errors.UNSUPPORTED_COMPRESSION_TYPE

    again = client.get(START_MS + 2)

    assert again.error_code == Errors.NONE
    assert again.subscription_id == client.subscription_id
    assert client.instance.last_known_error == Errors.NONE
    assert roomy.stats.value("throttle-count", START_MS + 2) == 0


# --- sizes: TELEMETRY_TOO_LARGE --------------------------------------------------------------------


def test_payload_of_exactly_telemetry_max_bytes_is_accepted(make_manager, exporter) -> None:
    payload = metrics_data_payload()
    client = Client(make_manager([exporter], telemetry_max_bytes=len(payload)))

    assert client.push(metrics=payload).error_code == Errors.NONE
    assert len(exporter.exports) == 1


def test_payload_one_byte_over_telemetry_max_bytes_is_too_large(make_manager, exporter) -> None:
    payload = metrics_data_payload()
    client = Client(make_manager([exporter], telemetry_max_bytes=len(payload) - 1))

    response = client.push(metrics=payload)

    assert_rejected_payload(client, response, exporter, Errors.TELEMETRY_TOO_LARGE)
    # Refused before the payload is read: no plugin error.
    assert client.manager.stats.value("plugin-error-count", START_MS) == 0


def _large_metrics_data_payload() -> bytes:
    data = metrics_data()
    metric = data.resource_metrics[0].scope_metrics[0].metrics[0]
    for value in range(200):
        metric.gauge.data_points.add(as_int=value)
    return data.SerializeToString()


def test_the_limit_is_on_the_compressed_size(make_manager, exporter) -> None:
    raw = _large_metrics_data_payload()
    compressed = compress(CompressionType.ZSTD, raw)
    limit = len(compressed)
    assert len(raw) > limit
    client = Client(make_manager([exporter], telemetry_max_bytes=limit))

    assert client.push(START_MS, metrics=compressed, compression_type=CompressionType.ZSTD).error_code == Errors.NONE
    over = client.push(START_MS + DEFAULT_PUSH_INTERVAL_MS * 10, metrics=raw)
    assert over.error_code == Errors.TELEMETRY_TOO_LARGE


def test_decompressed_size_of_exactly_max_decompressed_bytes_is_accepted(make_manager, exporter) -> None:
    raw = _large_metrics_data_payload()
    compressed = compress(CompressionType.ZSTD, raw)
    at_limit = Client(make_manager([exporter], telemetry_max_bytes=1024, max_decompressed_bytes=len(raw)))
    under_limit = Client(
        make_manager([RecordingExporter()], telemetry_max_bytes=1024, max_decompressed_bytes=len(raw) - 1)
    )

    assert at_limit.push(metrics=compressed, compression_type=CompressionType.ZSTD).error_code == Errors.NONE
    too_large = under_limit.push(metrics=compressed, compression_type=CompressionType.ZSTD)
    assert too_large.error_code == Errors.TELEMETRY_TOO_LARGE


def _bomb(codec: CompressionType, size: int) -> bytes:
    zeros = bytes(size)
    if codec is CompressionType.GZIP:
        return gzip.compress(zeros, compresslevel=9, mtime=0)
    if codec is CompressionType.LZ4:
        return lz4.frame.compress(zeros)
    if codec is CompressionType.SNAPPY:
        return snappy.compress(zeros)
    return compress(codec, zeros)


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=codec_id)
def test_decompression_bomb_is_too_large(make_manager, exporter, codec: CompressionType) -> None:
    client = Client(make_manager([exporter], telemetry_max_bytes=8192, max_decompressed_bytes=65_536))
    bomb = _bomb(codec, 100_000)
    assert len(bomb) <= 8192  # small enough to pass the compressed-size check

    response = client.push(metrics=bomb, compression_type=codec)

    # Retryable, not INVALID_RECORD: the client's telemetry is not switched off for good.
    assert_rejected_payload(client, response, exporter, Errors.TELEMETRY_TOO_LARGE)


# --- client instance ids: INVALID_REQUEST ----------------------------------------------------------


@pytest.mark.parametrize("client_instance_id", [None, ZERO_UUID, ONE_UUID], ids=["null", "zero", "one"])
@pytest.mark.parametrize("terminating", [False, True])
def test_reserved_client_instance_id_is_invalid_request(roomy, exporter, client_instance_id, terminating) -> None:
    response = push(roomy, client_instance_id, 0, metrics=metrics_data_payload(), terminating=terminating)

    assert response.error_code == Errors.INVALID_REQUEST
    # No instance is made for it, and nothing is exported or counted.
    assert len(roomy.instances) == 0
    assert exporter.exports == []
    assert roomy.stats.value("plugin-error-count", START_MS) == 0


# --- the state each error leaves --------------------------------------------------------------------


def test_unknown_subscription_id_lets_the_next_get_through_at_once(roomy) -> None:
    client = Client(roomy)
    stale = client.push(START_MS + 1, subscription_id=client.subscription_id ^ 1)
    assert stale.error_code == Errors.UNKNOWN_SUBSCRIPTION_ID
    assert client.instance.last_known_error == Errors.UNKNOWN_SUBSCRIPTION_ID

    again = client.get(START_MS + 2)

    assert again.error_code == Errors.NONE
    assert again.subscription_id == client.subscription_id
    assert client.instance.last_known_error == Errors.NONE
    # Only once: the error is cleared, so a second get within the interval is throttled again.
    assert client.get(START_MS + 3).error_code == Errors.THROTTLING_QUOTA_EXCEEDED


@pytest.mark.parametrize(
    ("bad_push", "error"),
    [
        ({"metrics": b"garbage!"}, Errors.INVALID_RECORD),
        ({"metrics": bytes(200)}, Errors.TELEMETRY_TOO_LARGE),
    ],
    ids=["invalid-record", "too-large"],
)
def test_other_errors_keep_the_get_throttled_and_use_up_the_push_interval(make_manager, bad_push, error) -> None:
    # Gating runs before the payload is looked at, so a failed push counts as the interval's push.
    client = Client(make_manager(telemetry_max_bytes=100))
    assert client.push(START_MS + 1, **bad_push).error_code == error
    assert client.instance.last_push_request_ms == START_MS + 1

    assert client.get(START_MS + 2).error_code == Errors.THROTTLING_QUOTA_EXCEEDED
    assert client.push(START_MS + 3).error_code == Errors.THROTTLING_QUOTA_EXCEEDED
    assert client.push(START_MS + 1 + client.push_interval_ms).error_code == Errors.NONE
    assert client.instance.last_known_error == Errors.NONE


def test_a_throttled_push_does_not_move_the_push_clock(roomy) -> None:
    client = Client(roomy)
    assert client.push(START_MS).error_code == Errors.NONE

    throttled = client.push(START_MS + 10)

    assert throttled.error_code == Errors.THROTTLING_QUOTA_EXCEEDED
    assert client.instance.last_push_request_ms == START_MS
    assert client.instance.last_known_error == Errors.THROTTLING_QUOTA_EXCEEDED
    # Due one interval after the accepted push, not after the throttled one.
    assert client.push(START_MS + DEFAULT_PUSH_INTERVAL_MS).error_code == Errors.NONE
    assert client.instance.last_known_error == Errors.NONE


def test_a_throttled_get_does_not_move_the_get_clock(roomy) -> None:
    client = Client(roomy)

    assert client.get(START_MS + 10).error_code == Errors.THROTTLING_QUOTA_EXCEEDED

    assert client.instance.last_get_request_ms == START_MS
    assert client.get(START_MS + DEFAULT_PUSH_INTERVAL_MS).error_code == Errors.NONE


def test_a_terminating_push_is_never_throttled(roomy) -> None:
    client = Client(roomy)
    assert client.push(START_MS).error_code == Errors.NONE
    assert client.push(START_MS + 1).error_code == Errors.THROTTLING_QUOTA_EXCEEDED

    assert client.push(START_MS + 2, terminating=True).error_code == Errors.NONE
    assert client.instance.terminating is True


def test_a_failed_terminating_push_still_ends_the_client(roomy) -> None:
    client = Client(roomy)

    failed = client.push(subscription_id=client.subscription_id ^ 1, terminating=True)

    assert failed.error_code == Errors.UNKNOWN_SUBSCRIPTION_ID
    assert client.instance.terminating is True
    assert client.push(START_MS + DEFAULT_PUSH_INTERVAL_MS).error_code == Errors.INVALID_REQUEST


@pytest.mark.parametrize("terminating", [False, True])
def test_no_push_is_accepted_after_a_terminating_one(roomy, exporter, terminating: bool) -> None:
    client = Client(roomy)
    assert client.push(terminating=True).error_code == Errors.NONE

    # Whatever the next pushes say, and however long after.
    for later in (1, 2, DEFAULT_PUSH_INTERVAL_MS * 10):
        response = client.push(START_MS + later, terminating=terminating)
        assert response.error_code == Errors.INVALID_REQUEST
        assert client.instance.terminating is True
        assert client.instance.last_known_error == Errors.INVALID_REQUEST
    assert len(exporter.exports) == 1


# --- fuzz -------------------------------------------------------------------------------------------


class _ErrorLog(logging.Handler):
    """Collects ERROR records: the manager logs one only for a failure that is not a Kafka error."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


_framed = st.tuples(st.sampled_from(CODECS), st.binary(max_size=200)).map(
    lambda pair: (int(pair[0]), compress(pair[0], pair[1]))
)
_valid = st.sampled_from(CODECS).map(lambda codec: (int(codec), compress(codec, metrics_data_payload())))
_arbitrary = st.tuples(st.integers(-128, 127), st.binary(max_size=300))
_truncated = _valid.flatmap(lambda pair: st.integers(0, len(pair[1])).map(lambda n: (pair[0], pair[1][:n])))
# Zeros compress well: most of these pass the 256-byte limit and expand past the 1024-byte one.
_expanding = st.tuples(st.sampled_from(COMPRESSED_CODECS), st.integers(0, 8000)).map(
    lambda pair: (int(pair[0]), compress(pair[0], bytes(pair[1])))
)

_push = st.fixed_dictionaries(
    {
        "which_id": st.sampled_from(["own"] * 6 + ["other", "zero", "one", "none"]),
        "other_id": st.binary(min_size=16, max_size=16).map(Uuid),
        "own_subscription": st.sampled_from([True, True, True, False]),
        "subscription_id": st.integers(-(2**31), 2**31 - 1),
        "terminating": st.sampled_from([False] * 4 + [True]),
        "payload": st.one_of(_valid, _framed, _arbitrary, _truncated, _expanding),
        "after_ms": st.one_of(st.just(0), st.integers(0, 2 * DEFAULT_PUSH_INTERVAL_MS)),
    }
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pushes=st.lists(_push, min_size=1, max_size=4), subscribed=st.booleans())
def test_push_never_raises_and_answers_a_push_error(pushes: list[dict], subscribed: bool) -> None:
    manager = build_manager([RecordingExporter()], telemetry_max_bytes=256, max_decompressed_bytes=1024)
    if subscribed:
        manager.update_subscription("sub-1", default_properties())
    errors = _ErrorLog()
    logger = logging.getLogger("quotaplane.telemetry._manager")
    logger.addHandler(errors)
    try:
        client = Client(manager)
        now_ms = START_MS
        for p in pushes:
            now_ms += p["after_ms"]
            client_instance_id = {
                "own": client.client_instance_id,
                "other": p["other_id"],
                "zero": ZERO_UUID,
                "one": ONE_UUID,
                "none": None,
            }[p["which_id"]]
            subscription_id = client.subscription_id if p["own_subscription"] else p["subscription_id"]
            compression_type, metrics = p["payload"]
            before = manager.client_instance(client_instance_id) if client_instance_id is not None else None
            last_push_before = before.last_push_request_ms if before is not None else None
            terminated_before = before is not None and before.terminating

            response = push(
                manager,
                client_instance_id,
                subscription_id,
                now_ms,
                metrics=metrics,
                compression_type=compression_type,
                terminating=p["terminating"],
            )

            assert response.error_code in ALLOWED_PUSH_ERRORS
            if client_instance_id is None or client_instance_id in RESERVED:
                assert response.error_code == Errors.INVALID_REQUEST
                continue
            instance = manager.client_instance(client_instance_id)
            assert instance is not None
            assert instance.last_known_error == response.error_code
            if response.error_code == Errors.THROTTLING_QUOTA_EXCEEDED and before is instance:
                assert instance.last_push_request_ms == last_push_before
            if terminated_before and before is instance:
                assert response.error_code == Errors.INVALID_REQUEST
            assert instance.terminating == ((terminated_before and before is instance) or p["terminating"])
        # Every failure was a Kafka error the manager expected, not an exception it had to catch.
        assert errors.records == []
    finally:
        logger.removeHandler(errors)
        manager.close()
