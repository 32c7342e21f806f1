"""Ray actors of quotaplane (``quotaplane.actors``): the ConfigController, the single writer of the config
event log, and the ShardActors that host the core managers for their slice of entities.

The actors are thin: every semantic lives in the pure core (``quotaplane.quota``, ``quotaplane.config``);
this package adds processes, placement and the config stream between them.
"""

from ._direct import DirectAddress, read_frame, write_frame
from ._follower import Bindings, ConfigFollower, ray_get
from ._named import NamedActor
from ._placement import RendezvousPlacement, owner_of, shard_weight
from ._resources import check_resources
from ._standby import STANDBY_SUFFIX, NotServingError, standby_of
from ._usage_checkpoint import CHECKPOINT_FILE
from ._usage_columns import COLUMN_KINDS, RequestColumns, UsageColumns, pack_columns, pack_usage, unpack_usage
from .controller import (
    DEFAULT_CONTROLLER_NAME,
    ConfigController,
    ImageSnapshot,
    OffsetOutOfRangeError,
    start_controller,
)
from .shard import ShardActor, start_shard

__all__ = [
    "CHECKPOINT_FILE",
    "COLUMN_KINDS",
    "DEFAULT_CONTROLLER_NAME",
    "STANDBY_SUFFIX",
    "Bindings",
    "ConfigController",
    "ConfigFollower",
    "DirectAddress",
    "ImageSnapshot",
    "NamedActor",
    "NotServingError",
    "OffsetOutOfRangeError",
    "RendezvousPlacement",
    "RequestColumns",
    "ShardActor",
    "UsageColumns",
    "check_resources",
    "owner_of",
    "pack_columns",
    "pack_usage",
    "ray_get",
    "read_frame",
    "shard_weight",
    "standby_of",
    "start_controller",
    "start_shard",
    "unpack_usage",
    "write_frame",
]
