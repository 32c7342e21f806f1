"""Kafka's client quotas, clock-free and thread-free: every call takes ``now_ms`` and returns the
throttle time; the caller mutes the channel.

>>> from quotaplane.quota import ClientQuotaManager, ClientQuotaManagerConfig, ClientQuotaEntity, QuotaType, DEFAULT
>>> mgr = ClientQuotaManager(ClientQuotaManagerConfig(num_quota_samples=11, quota_window_size_seconds=1),
...                          QuotaType.PRODUCE)
>>> mgr.update_quota(ClientQuotaEntity(user="alice", client_id=DEFAULT), 1024.0)
>>> mgr.record_and_get_throttle_time_ms(user="alice", client_id="c1", value=20_480.0, now_ms=1_700_000_000_000)
10000
"""

from ._bloom import TimedBloomFilter
from ._callback import (
    CLIENT_ID_QUOTA_ENABLED,
    CLIENT_ID_TAG,
    CUSTOM_QUOTAS,
    NO_QUOTAS,
    USER_CLIENT_ID_QUOTA_ENABLED,
    USER_QUOTA_ENABLED,
    USER_TAG,
    ClientQuotaCallback,
    DefaultQuotaCallback,
)
from ._client import (
    INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ClientSensors,
    UsageItem,
)
from ._compiled import compiled_core
from ._connection import ConnectionQuotas
from ._connection_config import (
    IP_CONNECTION_RATE_DEFAULT,
    LISTENER_CONFIG_PREFIX,
    LISTENER_CONFIGS,
    ConnectionQuotasConfig,
    parse_max_connections_per_ip_overrides,
)
from ._connection_decision import Admission, ConnectionAttempt, ConnectionDecision, ConnectionLimit
from ._connection_state import (
    CONNECTION_STATE_VERSION,
    ConnectionState,
    SampledSensors,
    attempt_from_tuple,
    attempt_tuple,
    export_connection_state,
    import_connection_state,
)
from ._controller_mutation import (
    STRICT_SINCE_VERSION,
    UNBOUNDED_CONTROLLER_MUTATION_QUOTA,
    ControllerMutationQuota,
    ControllerMutationQuotaManager,
    PermissiveControllerMutationQuota,
    StrictControllerMutationQuota,
    ThrottlingQuotaExceededError,
)
from ._factory import QuotaConfig, QuotaManagers, build_quota_managers
from ._lease import DEFAULT_LEASE_MS, Lease, LeaseBook, LeaseHolder, LeaseRequest
from ._normalise import (
    Address,
    Resolver,
    check_listener_name,
    default_resolver,
    host_address,
    ip_literal,
    normalise_listener,
    peer_address,
)
from ._producer_ids import (
    PRODUCER_IDS_RATE,
    ProducerIdItem,
    ProducerIdQuotaManager,
    ProducerIdQuotaManagerConfig,
)
from ._replication import (
    ALL_REPLICAS,
    ReplicationQuotaManager,
    ReplicationQuotaManagerConfig,
    ThrottledReplicas,
    parse_throttled_replicas,
)
from ._replication_state import (
    REPLICATION_STATE_VERSION,
    ReplicationState,
    export_replication_state,
    import_replication_state,
)
from ._request import NANOS_TO_PERCENTAGE_PER_SECOND, ClientRequestQuotaManager, nanos_to_percentage
from ._types import DEFAULT, ClientQuotaEntity, ClientQuotaType, Default, QuotaType, desanitize, sanitize
from ._usage_state import (
    TAGS_PART,
    USAGE_STATE_VERSION,
    TagsMemo,
    UsageImport,
    UsageSnapshot,
    export_usage,
    forget_usage,
    import_usage,
    usage_key,
)
from .throttle import bounded_throttle_time, java_round, throttle_time, token_bucket_throttle_time

__all__ = [
    "ALL_REPLICAS",
    "CLIENT_ID_QUOTA_ENABLED",
    "CLIENT_ID_TAG",
    "CONNECTION_STATE_VERSION",
    "CUSTOM_QUOTAS",
    "DEFAULT",
    "DEFAULT_LEASE_MS",
    "INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS",
    "IP_CONNECTION_RATE_DEFAULT",
    "LISTENER_CONFIGS",
    "LISTENER_CONFIG_PREFIX",
    "MUTATION_STATE_VERSION",
    "NANOS_TO_PERCENTAGE_PER_SECOND",
    "NO_QUOTAS",
    "PRODUCER_IDS_RATE",
    "PRODUCER_ID_STATE_VERSION",
    "REPLICATION_STATE_VERSION",
    "STRICT_SINCE_VERSION",
    "TAGS_PART",
    "UNBOUNDED_CONTROLLER_MUTATION_QUOTA",
    "USAGE_STATE_VERSION",
    "USER_CLIENT_ID_QUOTA_ENABLED",
    "USER_QUOTA_ENABLED",
    "USER_TAG",
    "Address",
    "Admission",
    "ClientQuotaCallback",
    "ClientQuotaEntity",
    "ClientQuotaManager",
    "ClientQuotaManagerConfig",
    "ClientQuotaType",
    "ClientRequestQuotaManager",
    "ClientSensors",
    "ConnectionAttempt",
    "ConnectionDecision",
    "ConnectionLimit",
    "ConnectionQuotas",
    "ConnectionQuotasConfig",
    "ConnectionState",
    "ControllerMutationQuota",
    "ControllerMutationQuotaManager",
    "Default",
    "DefaultQuotaCallback",
    "Lease",
    "LeaseBook",
    "LeaseHolder",
    "LeaseRequest",
    "MutationClient",
    "MutationSnapshot",
    "PermissiveControllerMutationQuota",
    "ProducerIdItem",
    "ProducerIdQuotaManager",
    "ProducerIdQuotaManagerConfig",
    "ProducerIdSnapshot",
    "ProducerIdUser",
    "QuotaConfig",
    "QuotaManagers",
    "QuotaType",
    "ReplicationQuotaManager",
    "ReplicationQuotaManagerConfig",
    "ReplicationState",
    "Resolver",
    "SampledSensors",
    "StrictControllerMutationQuota",
    "TagsMemo",
    "ThrottledReplicas",
    "ThrottlingQuotaExceededError",
    "TimedBloomFilter",
    "UsageImport",
    "UsageItem",
    "UsageSnapshot",
    "attempt_from_tuple",
    "attempt_tuple",
    "bounded_throttle_time",
    "build_quota_managers",
    "check_listener_name",
    "compiled_core",
    "default_resolver",
    "desanitize",
    "export_connection_state",
    "export_mutations",
    "export_producer_ids",
    "export_replication_state",
    "export_usage",
    "forget_mutations",
    "forget_producer_ids",
    "forget_usage",
    "host_address",
    "import_connection_state",
    "import_mutations",
    "import_producer_ids",
    "import_replication_state",
    "import_usage",
    "ip_literal",
    "java_round",
    "mutation_key",
    "nanos_to_percentage",
    "normalise_listener",
    "parse_max_connections_per_ip_overrides",
    "parse_throttled_replicas",
    "peer_address",
    "producer_id_key",
    "sanitize",
    "throttle_time",
    "token_bucket_throttle_time",
    "usage_key",
]

# A reshard's hand-over of controller-mutation token buckets and KIP-936 producer-id state.
from ._mutation_state import (
    MUTATION_STATE_VERSION,
    MutationClient,
    MutationSnapshot,
    export_mutations,
    forget_mutations,
    import_mutations,
    mutation_key,
)
from ._producer_id_state import (
    PRODUCER_ID_STATE_VERSION,
    ProducerIdSnapshot,
    ProducerIdUser,
    export_producer_ids,
    forget_producer_ids,
    import_producer_ids,
    producer_id_key,
)
