"""quotaplane: Kafka's quotas and KIP-714 client telemetry as one plane for a whole fleet.

The pure core lives here (``quotaplane.metrics``, ``quotaplane.quota``): no Ray, gRPC or Spark
import, and no clock: every call takes ``now_ms``.
"""

__version__ = "0.1.0"
