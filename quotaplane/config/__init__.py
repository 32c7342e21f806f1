"""Event-sourced config: records, validation, the durable log, snapshots, the ConfigImage, admin operations.

Every config change of quotaplane (client quotas, KIP-714 client-metrics resources, dynamic broker and
topic configs) is a protobuf ``Event`` (``quotaplane.v1.config_events_pb2``) appended to a durable
:class:`EventLog` and replayed into a :class:`ConfigImage`. :class:`ConfigStore` is the log's single
writer: it validates a change as Kafka's controller does, appends it (fsynced), applies it, and answers.
:class:`ManagerBinding` applies each delta to the live quota / connection / producer-id / telemetry
managers in place, so a config change never resets usage.

>>> import tempfile
>>> from quotaplane.config import ConfigStore, ClientQuotaAlteration, ClientQuotaFilterComponent
>>> with tempfile.TemporaryDirectory() as d, ConfigStore.open(d) as store:
...     results = store.alter_client_quotas(
...         [ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 1048576.0)])], now_ms=1_700_000_000_000
...     )
...     print(results[0].ok, store.describe_client_quotas([ClientQuotaFilterComponent.of_entity("user", "alice")]))
True [({'user': 'alice'}, {'producer_byte_rate': 1048576.0})]
"""

from ..v1 import config_events_pb2 as records
from ._admin import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ConfigEntry,
    ConfigResource,
    MatchType,
    OpType,
    Plan,
    Result,
    describe_client_quotas,
    describe_configs,
    plan_alter_client_quotas,
    plan_incremental_alter_configs,
)
from ._binding import ManagerBinding, StartupConfigs, changes_between, effective_broker_config, startup_configs
from ._client_quotas import (
    CLIENT_ID,
    CLIENT_QUOTA_KEYS,
    IP,
    MAX_STRING_BYTES,
    USER,
    EntityKey,
    entity_key,
    entity_map,
    is_valid_ip_entity,
    shown,
    string_problem,
    validate_entity,
    validate_quota_key_value,
    validate_string,
)
from ._columns import decode_columns, encode_events, entity_id, entity_of, events_of
from ._dynamic_configs import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigResourceType,
    ConfigType,
    validate_config_strings,
    validate_resource_name,
)
from ._image import (
    DEFAULT_MAX_APPLIED_REQUESTS,
    ClientMetricsChange,
    ClientQuotaChange,
    ConfigChange,
    ConfigDelta,
    ConfigImage,
    CorruptEventError,
    OffsetGapError,
    Provenance,
)
from ._lease_configs import LeaseSettings, lease_settings
from ._log import DEFAULT_SEGMENT_BYTES, EventLog
from ._log_errors import (
    CorruptLogError,
    EventLogClosedError,
    EventLogError,
    EventLogFailedError,
    EventLogLockedError,
    LogGapError,
    OffsetOutOfRangeError,
)
from ._records import (
    client_metrics_configs,
    client_metrics_event,
    client_quota_event,
    config_event,
    entity_data,
    record_entity,
)
from ._shard_count import (
    MAX_SHARDS,
    SHARD_COUNT_CONFIG,
    check_shard_count,
    plan_alter_shard_count,
    shard_count,
    shard_count_offset,
)
from ._snapshot_file import CorruptSnapshotError
from ._store import (
    ANONYMOUS,
    CONFIG_ADMIN_READS,
    CONFIG_ADMIN_WRITES,
    ConfigAdmin,
    ConfigStore,
    HistoryCompactedError,
    HistoryEntry,
    forward_config_admin,
)

__all__ = [
    "ANONYMOUS",
    "BROKER_CONFIGS",
    "CLIENT_ID",
    "CLIENT_QUOTA_KEYS",
    "CONFIG_ADMIN_READS",
    "CONFIG_ADMIN_WRITES",
    "DEFAULT_MAX_APPLIED_REQUESTS",
    "DEFAULT_SEGMENT_BYTES",
    "IP",
    "MAX_SHARDS",
    "MAX_STRING_BYTES",
    "SHARD_COUNT_CONFIG",
    "TOPIC_CONFIGS",
    "USER",
    "AlterConfigOp",
    "ClientMetricsChange",
    "ClientQuotaAlteration",
    "ClientQuotaChange",
    "ClientQuotaFilterComponent",
    "ConfigAdmin",
    "ConfigChange",
    "ConfigDelta",
    "ConfigEntry",
    "ConfigImage",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigStore",
    "ConfigType",
    "CorruptEventError",
    "CorruptLogError",
    "CorruptSnapshotError",
    "EntityKey",
    "EventLog",
    "EventLogClosedError",
    "EventLogError",
    "EventLogFailedError",
    "EventLogLockedError",
    "HistoryCompactedError",
    "HistoryEntry",
    "LeaseSettings",
    "LogGapError",
    "ManagerBinding",
    "MatchType",
    "OffsetGapError",
    "OffsetOutOfRangeError",
    "OpType",
    "Plan",
    "Provenance",
    "Result",
    "StartupConfigs",
    "changes_between",
    "check_shard_count",
    "client_metrics_configs",
    "client_metrics_event",
    "client_quota_event",
    "config_event",
    "decode_columns",
    "describe_client_quotas",
    "describe_configs",
    "effective_broker_config",
    "encode_events",
    "entity_data",
    "entity_id",
    "entity_key",
    "entity_map",
    "entity_of",
    "events_of",
    "forward_config_admin",
    "is_valid_ip_entity",
    "lease_settings",
    "plan_alter_client_quotas",
    "plan_alter_shard_count",
    "plan_incremental_alter_configs",
    "record_entity",
    "records",
    "shard_count",
    "shard_count_offset",
    "shown",
    "startup_configs",
    "string_problem",
    "validate_config_strings",
    "validate_entity",
    "validate_quota_key_value",
    "validate_resource_name",
    "validate_string",
]
