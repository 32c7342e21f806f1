"""``ClientMetricsManager``: KIP-714's two request handlers, subscriptions and client instances.

Kafka 4.x's ``ClientMetricsManager`` with the clock passed in (``now_ms``), the timer wheel replaced
by ``expire(now_ms)``, and the payload checked before export: quotaplane decompresses (with a
decompression-bomb limit) and decodes the OTLP ``MetricsData`` itself, so a bad payload is answered
INVALID_RECORD whatever exporters are configured, and every exporter gets one decoded payload with the
broker's resource attributes added.

Gating, validation order, side effects and error codes are Kafka's:

- GetTelemetrySubscriptions: a zero id gets a fresh one; the instance is created or re-resolved when
  the subscriptions changed (a client then gets its new subscription at once); a second get within
  the push interval is THROTTLING_QUOTA_EXCEEDED unless the last push failed with
  UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE.
- PushTelemetry, in order: a reserved id is INVALID_REQUEST; after a terminating push, INVALID_REQUEST;
  a push within the interval is THROTTLING_QUOTA_EXCEEDED (not the one right after a get, nor a
  terminating one); a stale subscription id is UNKNOWN_SUBSCRIPTION_ID; an unknown compression type is
  UNSUPPORTED_COMPRESSION_TYPE; a compressed payload over ``telemetry_max_bytes`` is
  TELEMETRY_TOO_LARGE. The terminating flag is recorded even when the push fails, and stays set.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import (
    ApiError,
    Errors,
    InvalidRecordError,
    InvalidRequestError,
    TelemetryTooLargeError,
    ThrottlingQuotaExceededError,
    UnknownSubscriptionIdError,
    UnsupportedCompressionTypeError,
)
from ..kafka_uuid import RESERVED, Uuid, random_uuid
from ..metrics import Metrics
from ._codecs import SUPPORTED_COMPRESSION_TYPES, decompress, is_supported_compression_type
from ._configs import parse_subscription, validate
from ._exporter import (
    OTLP_CONTENT_TYPE,
    ClientTelemetryContext,
    ClientTelemetryExporter,
    ClientTelemetryPayload,
    DeferredClientTelemetryPayload,
    RequestContext,
)
from ._instance import (
    ESTIMATED_LABELS_BYTES,
    ClientInstanceCache,
    ClientMetricsInstance,
    ClientMetricsInstanceMetadata,
    Removal,
)
from ._otlp import PreparedAttributes, add_resource_attributes, decode_metrics_data, prepare_resource_attributes
from ._requests import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from ._stats import ClientMetricsStats
from ._subscription import Subscriptions

__all__ = ["ClientMetricsManager", "ClientMetricsManagerConfig"]

log = logging.getLogger(__name__)

DEFAULT_CACHE_EXPIRY_MS = 60 * 1000
#: The answer to every accepted push (immutable, so one object serves them all).
_ACCEPTED = PushTelemetryResponse()


def _merge_labels(attributes: dict[str, str], prepared: PreparedAttributes, metrics_data: Any) -> None:
    """``add_resource_attributes`` with the instance's prepared attributes (kept per instance as a positional
    partial of this: no dict of keywords an instance)."""
    add_resource_attributes(metrics_data, attributes, prepared=prepared)


@functools.cache
def _error_name(code: int) -> str:
    """Kafka's name of an error code (``UNKNOWN_SUBSCRIPTION_ID``), the code itself if Kafka has none."""
    try:
        return Errors(code).name
    except ValueError:
        return str(code)


#: Kafka's ``telemetry.max.bytes`` default.
DEFAULT_TELEMETRY_MAX_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ClientMetricsManagerConfig:
    """Settings of one manager.

    ``telemetry_max_bytes`` bounds the compressed payload (Kafka's ``telemetry.max.bytes``, sent to
    clients); ``max_decompressed_bytes`` bounds what a payload may expand to (a decompression bomb is
    TELEMETRY_TOO_LARGE, as Kafka 4.x answers an oversized decompressed payload). The cache keeps
    instances for ``max(cache_expiry_ms, 3 x push interval)`` after their last request, within
    ``memory_budget_bytes``.
    """

    telemetry_max_bytes: int = DEFAULT_TELEMETRY_MAX_BYTES
    max_decompressed_bytes: int = 16 * 1024 * 1024
    cache_expiry_ms: int = DEFAULT_CACHE_EXPIRY_MS
    memory_budget_bytes: int = 1024 * 1024 * 1024
    node_id: int = 0
    #: Java version of the Kafka brokers this fleet shares clients with: HashSet sizing (and so the
    #: order inside the subscription id) changed in Java 19.
    java_version: int = 17

    def __post_init__(self) -> None:
        for name in ("telemetry_max_bytes", "max_decompressed_bytes", "cache_expiry_ms", "memory_budget_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.max_decompressed_bytes < self.telemetry_max_bytes:
            raise ValueError("max_decompressed_bytes must be at least telemetry_max_bytes")


class ClientMetricsManager:
    """The telemetry engine of one shard: pure, single-threaded, every call given ``now_ms``."""

    def __init__(
        self,
        config: ClientMetricsManagerConfig | None = None,
        exporters: Sequence[ClientTelemetryExporter] = (),
        *,
        metrics: Metrics | None = None,
        now_ms: int = 0,
        hi_res_clock_ms: Callable[[], float] = lambda: time.perf_counter() * 1000.0,
        new_client_instance_id: Callable[[], Uuid] = random_uuid,
    ) -> None:
        self.config = config if config is not None else ClientMetricsManagerConfig()
        self.exporters = list(exporters)
        self.metrics = metrics if metrics is not None else Metrics()
        self.subscriptions = Subscriptions()
        self.instances = ClientInstanceCache(
            memory_budget_bytes=self.config.memory_budget_bytes, cache_expiry_ms=self.config.cache_expiry_ms
        )
        self.stats = ClientMetricsStats(self.metrics, lambda: len(self.instances), now_ms)
        self._hi_res_clock_ms = hi_res_clock_ms
        self._new_client_instance_id = new_client_instance_id

    # --- subscriptions (client-metrics config resources) --------------------------------------------
    def update_subscription(self, name: str, configs: Mapping[str, str]) -> None:
        """Set a resource's full config set (what IncrementalAlterConfigs leaves after its operations).

        Empty ``configs`` delete the resource, as Kafka's ``updateSubscription``. Invalid configs raise
        InvalidRequestError / InvalidConfigurationError and change nothing.
        """
        if not configs:
            validate(name, configs)  # the name is still validated
            self.delete_subscription(name)
            return
        current = self.subscriptions.get(name)
        old_configs = None if current is None else current.configs
        self.subscriptions.put(parse_subscription(name, configs, old_configs, java_version=self.config.java_version))

    def delete_subscription(self, name: str) -> bool:
        return self.subscriptions.remove(name)

    def list_client_metrics_resources(self) -> list[str]:
        return self.subscriptions.names()

    def describe_client_metrics_resource(self, name: str) -> dict[str, str] | None:
        """The configs as set (strings), or None for an unknown resource."""
        info = self.subscriptions.get(name)
        return None if info is None else dict(info.configs)

    # --- requests --------------------------------------------------------------------------------
    def process_get_telemetry_subscriptions_request(
        self, request: GetTelemetrySubscriptionsRequest, context: RequestContext, now_ms: int
    ) -> GetTelemetrySubscriptionsResponse:
        client_instance_id = request.client_instance_id
        if client_instance_id is None or client_instance_id in RESERVED:
            # Kafka replaces only the zero id; quotaplane also never hands out ONE_UUID (Kafka would, and
            # then reject every push from it as INVALID_REQUEST).
            client_instance_id = self._generate_client_instance_id()
        instance = self._client_instance(client_instance_id, context, now_ms)
        if not instance.maybe_update_get_request_timestamp(now_ms) and instance.last_known_error not in (
            Errors.UNKNOWN_SUBSCRIPTION_ID,
            Errors.UNSUPPORTED_COMPRESSION_TYPE,
        ):
            self.stats.record_throttle(now_ms)
            error = ThrottlingQuotaExceededError(
                f"Request from the client [{request.client_instance_id}] arrived before the next push interval time"
            )
            return GetTelemetrySubscriptionsResponse(error_code=int(error.error), error_message=str(error))
        instance.last_known_error = Errors.NONE
        return GetTelemetrySubscriptionsResponse(
            client_instance_id=client_instance_id,
            subscription_id=instance.subscription_id,
            accepted_compression_types=SUPPORTED_COMPRESSION_TYPES,
            push_interval_ms=instance.push_interval_ms,
            telemetry_max_bytes=self.config.telemetry_max_bytes,
            delta_temporality=True,
            requested_metrics=instance.metrics,
        )

    def process_push_telemetry_request(
        self, request: PushTelemetryRequest, context: RequestContext, now_ms: int
    ) -> PushTelemetryResponse:
        """Kafka's ``processPushTelemetryRequest``; the answer is also counted by the client's software
        (``ClientMetricsStats.record_push``, quotaplane's addition)."""
        response = self._process_push(request, context, now_ms)
        code = response.error_code
        self.stats.record_push(
            context.client_software_name,
            context.client_software_version,
            None if code == 0 else _error_name(code),
            now_ms,
        )
        return response

    def _process_push(
        self, request: PushTelemetryRequest, context: RequestContext, now_ms: int
    ) -> PushTelemetryResponse:
        client_instance_id = request.client_instance_id
        if client_instance_id is None or client_instance_id in RESERVED:
            error = InvalidRequestError(
                f"Invalid request from the client [{client_instance_id}], invalid client instance id"
            )
            return PushTelemetryResponse(error_code=int(error.error), error_message=str(error))

        instance = self._client_instance(client_instance_id, context, now_ms)
        try:
            self._validate_push_request(request, instance, now_ms)
        except ApiError as error:
            instance.last_known_error = error.error
            return PushTelemetryResponse(error_code=int(error.error), error_message=str(error))
        finally:
            # Sticky: Kafka assigns the request's flag, so the push refused for following a terminating
            # one clears it and the push after that is accepted, against KIP-714's rule.
            instance.terminating = instance.terminating or request.terminating

        if request.metrics:
            try:
                payload = self._payload(request, instance)
                started = self._hi_res_clock_ms()
                telemetry_context = ClientTelemetryContext(
                    instance.push_interval_ms, context, now_ms, self.config.node_id
                )
                for exporter in self.exporters:
                    exporter.export_metrics(telemetry_context, payload)
                self.stats.record_plugin_export(self._hi_res_clock_ms() - started, now_ms)
            except TelemetryTooLargeError as error:
                # Retryable (the client may shrink its set or the limit may grow): not INVALID_RECORD,
                # which would stop the client's telemetry for good. Kafka 4.x answers the same.
                self.stats.record_plugin_error(now_ms)
                instance.last_known_error = Errors.TELEMETRY_TOO_LARGE
                return PushTelemetryResponse(error_code=int(Errors.TELEMETRY_TOO_LARGE), error_message=str(error))
            except Exception as error:  # any failure of the payload or an exporter is INVALID_RECORD, as in Kafka
                self.stats.record_plugin_error(now_ms)
                instance.last_known_error = Errors.INVALID_RECORD
                if not isinstance(error, InvalidRecordError):
                    log.exception("Error exporting client metrics for client instance id: %s", client_instance_id)
                return PushTelemetryResponse(error_code=int(Errors.INVALID_RECORD), error_message=str(error))

        instance.last_known_error = Errors.NONE
        return _ACCEPTED

    # --- lifecycle -------------------------------------------------------------------------------
    def on_disconnect(self, connection_id: str) -> bool:
        """The connection closed: evict the client instance last seen on it (Kafka's disconnect listener)."""
        return self.instances.disconnect(connection_id) is not None

    def expire(self, now_ms: int) -> list[Removal]:
        """Remove instances idle past ``max(cache_expiry_ms, 3 x push interval)``; call it on a schedule."""
        return self.instances.expire(now_ms)

    def client_instance(self, client_instance_id: Uuid) -> ClientMetricsInstance | None:
        return self.instances.get(client_instance_id)

    def close(self) -> None:
        """Close every exporter (each drains its queue) and unregister the metrics."""
        for exporter in self.exporters:
            try:
                exporter.close()
            except Exception:  # one exporter failing to close must not keep the others open
                log.exception("Error closing telemetry exporter %r", exporter)
        self.stats.unregister()

    # --- internals -------------------------------------------------------------------------------
    def _generate_client_instance_id(self) -> Uuid:
        while True:
            candidate = self._new_client_instance_id()
            if candidate not in RESERVED and candidate not in self.instances:
                return candidate

    def _client_instance(self, client_instance_id: Uuid, context: RequestContext, now_ms: int) -> ClientMetricsInstance:
        instance = self.instances.get(client_instance_id)
        version = self.subscriptions.version
        if instance is None:
            metadata = ClientMetricsInstanceMetadata.from_context(client_instance_id, context, self.instances.strings)
            instance = self._new_instance(metadata, version, context.connection_id, now_ms)
        elif instance.subscription_version < version:
            # Re-resolve against the changed subscriptions; gating state starts afresh, as Kafka
            # replaces the instance object.
            instance = self._new_instance(instance.instance_metadata, version, context.connection_id, now_ms)
        else:
            self.instances.touch(instance, context.connection_id, now_ms)
        return instance

    def _new_instance(
        self, metadata: ClientMetricsInstanceMetadata, version: int, connection_id: str, now_ms: int
    ) -> ClientMetricsInstance:
        resolved = self.subscriptions.resolve(metadata)
        instance = ClientMetricsInstance(metadata.client_instance_id, metadata, resolved, version, connection_id)
        evicted = self.instances.put(instance, now_ms)
        if evicted:
            log.debug("Client metrics cache over its memory budget: evicted %d instances", len(evicted))
        return instance

    def _validate_push_request(
        self, request: PushTelemetryRequest, instance: ClientMetricsInstance, now_ms: int
    ) -> None:
        if instance.terminating:
            raise InvalidRequestError(
                f"Client [{request.client_instance_id}] sent the previous request with state terminating to TRUE, "
                "can not accept any requests after that"
            )
        if not instance.maybe_update_push_request_timestamp(now_ms) and not request.terminating:
            self.stats.record_throttle(now_ms)
            raise ThrottlingQuotaExceededError(
                f"Request from the client [{request.client_instance_id}] arrived before the next push interval time"
            )
        if request.subscription_id != instance.subscription_id:
            self.stats.record_unknown_subscription(now_ms)
            raise UnknownSubscriptionIdError(
                f"Unknown client subscription id for the client [{request.client_instance_id}]"
            )
        if not is_supported_compression_type(request.compression_type):
            raise UnsupportedCompressionTypeError(
                f"Unknown compression type [{request.compression_type}] is received in telemetry request from "
                f"[{request.client_instance_id}]"
            )
        if len(request.metrics) > self.config.telemetry_max_bytes:
            raise TelemetryTooLargeError(
                f"Telemetry request from [{request.client_instance_id}] is larger than the maximum allowed size "
                f"[{self.config.telemetry_max_bytes}]"
            )

    def _payload(self, request: PushTelemetryRequest, instance: ClientMetricsInstance) -> ClientTelemetryPayload:
        data = decompress(request.compression_type, request.metrics, self.config.max_decompressed_bytes)
        metrics_data = decode_metrics_data(data)
        labels = instance.resource_labels
        if labels is None:  # the instance's attributes never change: built and encoded once, on its first push
            labels = self._labels(instance)
        attributes, merge, memo = labels
        # the labels are merged into metrics_data when an exporter first reads it (the archive never does)
        return DeferredClientTelemetryPayload(
            instance.client_instance_id,
            request.terminating,
            OTLP_CONTENT_TYPE,
            request.compression_type,
            len(request.metrics),
            data,
            attributes,
            metrics_data,
            merge,
            memo,
        )

    def _labels(self, instance: ClientMetricsInstance) -> tuple[dict[str, str], Callable[[Any], None], dict]:
        """The instance's resource attributes, their merge into a decoded push and the exporters' memo, kept on
        the instance (``resource_labels``) and counted in the cache's memory budget."""
        attributes = self._resource_attributes(instance)
        merge = functools.partial(_merge_labels, attributes, prepare_resource_attributes(attributes))
        labels = instance.resource_labels = (attributes, merge, {})
        evicted = self.instances.add_labels_bytes(
            instance, ESTIMATED_LABELS_BYTES + 2 * sum(map(len, attributes.values()))
        )
        if evicted:
            log.debug("Client metrics cache over its memory budget: evicted %d instances", len(evicted))
        return labels

    def _resource_attributes(self, instance: ClientMetricsInstance) -> dict[str, str]:
        md = instance.instance_metadata
        attributes = {
            "client_instance_id": str(instance.client_instance_id),
            "client_id": md.client_id,
            "client_software_name": md.client_software_name,
            "client_software_version": md.client_software_version,
            "client_source_address": md.client_source_address,
            "client_source_port": md.client_source_port,
            "principal": md.principal,
            "node_id": str(self.config.node_id),
        }
        return {k: v for k, v in attributes.items() if v is not None}
