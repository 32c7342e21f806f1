"""KIP-714 client telemetry: subscriptions, client instances, the two request handlers, codecs, OTLP.

Pure and clock-free like the quota core: every request handler takes ``now_ms``.

>>> from quotaplane.telemetry import (ClientMetricsManager, GetTelemetrySubscriptionsRequest,
...     PushTelemetryRequest, RequestContext)
>>> mgr = ClientMetricsManager()
>>> mgr.update_subscription("producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "30000"})
>>> ctx = RequestContext("conn-1", "producer-1", "librdkafka", "2.16.0", "10.0.0.7", 51234)
>>> sub = mgr.process_get_telemetry_subscriptions_request(GetTelemetrySubscriptionsRequest(), ctx, 1_000_000)
>>> sub.requested_metrics, sub.push_interval_ms, sub.accepted_compression_types
(('org.apache.kafka.producer.',), 30000, (4, 3, 1, 2))
>>> push = PushTelemetryRequest(sub.client_instance_id, sub.subscription_id, compression_type=0, metrics=b"")
>>> mgr.process_push_telemetry_request(push, ctx, 1_000_010).error_code
0
>>> mgr.process_push_telemetry_request(push, ctx, 1_000_020).error_code  # within the interval
89
"""

from ._codecs import SUPPORTED_COMPRESSION_TYPES, CompressionType, compress, decompress
from ._configs import (
    ALL_SUBSCRIBED_METRICS,
    CONFIG_NAMES,
    INTERVAL_MS_CONFIG,
    INTERVAL_MS_DEFAULT,
    MATCH_CONFIG,
    METRICS_CONFIG,
    SubscriptionInfo,
    parse_subscription,
    validate,
)
from ._exporter import (
    ANONYMOUS_PRINCIPAL,
    OTLP_CONTENT_TYPE,
    ClientTelemetryContext,
    ClientTelemetryExporter,
    ClientTelemetryPayload,
    RequestContext,
)
from ._instance import ClientInstanceCache, ClientMetricsInstance, ClientMetricsInstanceMetadata
from ._instance_state import (
    INSTANCE_STATE_VERSION,
    InstanceSnapshot,
    export_instances,
    forget_instances,
    import_instances,
    instance_key,
)
from ._manager import ClientMetricsManager, ClientMetricsManagerConfig
from ._otlp import BROKER_RESOURCE_ATTRIBUTES, add_resource_attributes, decode_metrics_data
from ._requests import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from ._stats import ClientMetricsStats
from ._subscription import ResolvedSubscription, Subscriptions, compute_subscription_id

__all__ = [
    "ALL_SUBSCRIBED_METRICS",
    "ANONYMOUS_PRINCIPAL",
    "BROKER_RESOURCE_ATTRIBUTES",
    "CONFIG_NAMES",
    "INSTANCE_STATE_VERSION",
    "INTERVAL_MS_CONFIG",
    "INTERVAL_MS_DEFAULT",
    "MATCH_CONFIG",
    "METRICS_CONFIG",
    "OTLP_CONTENT_TYPE",
    "SUPPORTED_COMPRESSION_TYPES",
    "ClientInstanceCache",
    "ClientMetricsInstance",
    "ClientMetricsInstanceMetadata",
    "ClientMetricsManager",
    "ClientMetricsManagerConfig",
    "ClientMetricsStats",
    "ClientTelemetryContext",
    "ClientTelemetryExporter",
    "ClientTelemetryPayload",
    "CompressionType",
    "GetTelemetrySubscriptionsRequest",
    "GetTelemetrySubscriptionsResponse",
    "InstanceSnapshot",
    "PushTelemetryRequest",
    "PushTelemetryResponse",
    "RequestContext",
    "ResolvedSubscription",
    "SubscriptionInfo",
    "Subscriptions",
    "add_resource_attributes",
    "compress",
    "compute_subscription_id",
    "decode_metrics_data",
    "decompress",
    "export_instances",
    "forget_instances",
    "import_instances",
    "instance_key",
    "parse_subscription",
    "validate",
]
