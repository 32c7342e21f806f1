"""A real librdkafka client (confluent-kafka) against a loopback listener that answers with this
codec: the codec must read what the client sends, and the client must accept what the codec
writes, through ApiVersions, Metadata, the reconnect to the advertised broker,
GetTelemetrySubscriptions and PushTelemetry (the flow of section L of the Kafka notes).

The client runs in a child process: if a response were malformed, librdkafka may abort the whole
process, which must fail this test, not kill pytest.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import confluent_kafka

from quotaplane.kafka_uuid import Uuid
from quotaplane.protocol import (
    ApiVersionsResponse,
    GetTelemetrySubscriptionsResponse,
    MetadataResponse,
    ProtocolError,
    PushTelemetryResponse,
    UnsupportedRequestError,
    decode_request,
    encode_response,
    supported_versions,
)

INSTANCE = Uuid(bytes(range(1, 17)))

CLIENT = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": "127.0.0.1:" + sys.argv[1], "client.id": "qp-codec-test",
                  "enable.metrics.push": True, "reconnect.backoff.ms": 50})
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        p.poll(0.05)
    """
)


class FakeBroker:
    """Accepts connections, decodes every request with the codec and answers with it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[tuple[int, Any]] = []  # (connection number, DecodedRequest)
        self.errors: list[BaseException] = []
        self.pushed = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._spawn(self._accept_loop)

    def stop(self) -> None:
        self._stop.set()
        self.listener.close()
        for thread in self._threads:
            thread.join(5)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        n = 0
        self.listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            n += 1
            self._spawn(self._serve, conn, n)

    def _serve(self, conn: socket.socket, number: int) -> None:
        conn.settimeout(0.1)
        with conn:
            buffer = b""
            while not self._stop.is_set():
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buffer += chunk
                while len(buffer) >= 4:
                    size = struct.unpack(">i", buffer[:4])[0]
                    if len(buffer) < 4 + size:
                        break
                    frame, buffer = buffer[4 : 4 + size], buffer[4 + size :]
                    try:
                        reply = self._answer(number, frame)
                    except UnsupportedRequestError as e:
                        if e.api_key != 18:
                            self.errors.append(e)
                            return
                        body = ApiVersionsResponse(
                            error_code=35, api_keys=[ApiVersionsResponse.ApiVersion(18, *supported_versions()[18])]
                        )
                        reply = encode_response(18, 0, e.correlation_id, body)
                    except ProtocolError as e:
                        self.errors.append(e)
                        return
                    if reply is not None:
                        conn.sendall(reply)

    def _answer(self, number: int, frame: bytes) -> bytes | None:
        request = decode_request(frame)
        self.requests.append((number, request))
        key, version, corr = request.api_key, request.api_version, request.header.correlation_id
        if key == 18:
            keys = [ApiVersionsResponse.ApiVersion(k, lo, hi) for k, (lo, hi) in supported_versions().items()]
            return encode_response(key, version, corr, ApiVersionsResponse(api_keys=keys))
        if key == 3:
            broker = MetadataResponse.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=self.port)
            body = MetadataResponse(brokers=[broker], cluster_id="quotaplane-test", controller_id=1)
            return encode_response(key, version, corr, body)
        if key == 71:
            body = GetTelemetrySubscriptionsResponse(
                client_instance_id=INSTANCE,
                subscription_id=1,
                accepted_compression_types=[0],
                push_interval_ms=200,
                telemetry_max_bytes=1 << 20,
                delta_temporality=True,
                requested_metrics=["org.apache.kafka."],
            )
            return encode_response(key, version, corr, body)
        if key == 72:
            self.pushed.set()
            return encode_response(key, version, corr, PushTelemetryResponse())
        return None


@contextlib.contextmanager
def running_broker() -> Iterator[FakeBroker]:
    broker = FakeBroker()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def test_librdkafka_round_trip_through_telemetry() -> None:
    with running_broker() as broker:
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(broker.port), "20"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            pushed = broker.pushed.wait(15)
        finally:
            client.kill()
            _, stderr = client.communicate(timeout=10)
        assert not broker.errors, broker.errors
        assert client.returncode == -9, f"the client died on its own: {stderr.decode(errors='replace')[-2000:]}"
        assert pushed, [(n, r.api_key, r.api_version) for n, r in broker.requests]

    by_key: dict[int, list[Any]] = {}
    for _, request in broker.requests:
        by_key.setdefault(request.api_key, []).append(request)

    first = broker.requests[0][1]
    assert first.api_key == 18 and first.api_version == 3  # librdkafka's first ApiVersions is v3
    assert first.header.client_id == "qp-codec-test"
    assert first.body.client_software_name == "confluent-kafka-python"
    assert first.body.client_software_version.startswith(confluent_kafka.version()[0])

    metadata = by_key[3][0]
    assert metadata.api_version == 12  # the highest both sides speak
    assert metadata.header.client_id == "qp-codec-test"

    gets = by_key[71]
    assert gets[0].body.client_instance_id == Uuid(bytes(16))  # a new client asks with the zero id
    pushes = by_key[72]
    assert pushes[0].body.client_instance_id == INSTANCE  # and uses the id the codec sent back
    assert pushes[0].body.subscription_id == 1
    assert pushes[0].body.compression_type == 0
    assert len(pushes[0].body.metrics) > 0
    # telemetry ran on the connection to the broker learned from Metadata, not the bootstrap one
    assert {n for n, r in broker.requests if r.api_key in (71, 72)} != {broker.requests[0][0]}
