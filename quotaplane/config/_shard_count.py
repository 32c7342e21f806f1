"""The shard count as a fact of the log: read it from an image, and plan a reshard.

How many shards own the entities is cluster state every gateway and shard must agree on at each offset:
rendezvous placement over the ids ``"0"`` .. ``str(count - 1)`` decides which shard owns a key, and a
batch routed at one count must never be decided by a shard that applied another. So the count lives in
the log, as the cluster-wide BROKER config :data:`SHARD_COUNT_CONFIG` (its history is the reshards':
who, when, from what to what), and every follower changes placement at exactly the offset of that event.

Only a reshard writes it (:func:`plan_alter_shard_count`, through ``ConfigStore.alter_shard_count``): the
new shards must run before the event, and the removed ones must hand their state over after it, which a
plain IncrementalAlterConfigs could not arrange, so that path refuses the key. A reshard names the count
it expects to replace, so two operators (or two ``up`` processes driven by the same Helm value) cannot
both move the state from a count only one of them saw: the second is refused, or is a no-op when it asks
for the count already set.
"""

from __future__ import annotations

from ..errors import InvalidConfigurationError, InvalidRequestError
from ._admin import Plan, Result
from ._dynamic_configs import MAX_SHARDS, SHARD_COUNT_CONFIG, ConfigResourceType
from ._image import ConfigImage
from ._records import config_event
from ._working_image import ImageReader

__all__ = [
    "MAX_SHARDS",
    "SHARD_COUNT_CONFIG",
    "check_shard_count",
    "plan_alter_shard_count",
    "shard_count",
    "shard_count_offset",
]


def shard_count(image: ImageReader, default: int | None = None) -> int | None:
    """The shard count at ``image``'s offset: the log's, else ``default`` (the count ``up`` started with,
    before any reshard was logged)."""
    value = image.configs(ConfigResourceType.BROKER, "").get(SHARD_COUNT_CONFIG)
    return default if value is None else int(value.strip())


def check_shard_count(shards: object, what: str = "shard count") -> int:
    """``shards`` as an int in 1..MAX_SHARDS, else INVALID_CONFIG naming it."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise InvalidConfigurationError(f"Invalid {what} {shards!r}: expected an integer from 1 to {MAX_SHARDS}")
    return shards


def plan_alter_shard_count(image: ImageReader, shards: int, *, expected: int | None, default: int | None) -> Plan:
    """One record setting the count to ``shards``, if the count now (the log's, else ``default``) is
    ``expected`` (None: whatever it is). The same count again is a success without a record. A count that
    is not ``expected`` is INVALID_REQUEST naming both: another reshard got there first.

    The log holds no count until the first reshard (a cluster runs with the count ``up`` started it with):
    that reshard logs ``default`` first, then ``shards``, in one request, so the history reads "from -> to"."""
    plan = Plan()
    try:
        check_shard_count(shards)
        if expected is not None:
            check_shard_count(expected, "expected shard count")
        logged = shard_count(image)
        current = default if logged is None else logged
        if current != shards:
            if expected is not None and current != expected:
                raise InvalidRequestError(
                    f"the cluster has {current} shards, not the {expected} this reshard expected: "
                    "another reshard came first; look again and retry"
                )
            if logged is None and current is not None:  # the first reshard: the count it starts from, first
                plan.records.append(config_event(ConfigResourceType.BROKER, "", SHARD_COUNT_CONFIG, str(current)))
            plan.records.append(config_event(ConfigResourceType.BROKER, "", SHARD_COUNT_CONFIG, str(shards)))
        plan.results.append(Result())
    except (InvalidConfigurationError, InvalidRequestError) as e:
        plan.results.append(Result.of(e))
    return plan


def shard_count_offset(image: ConfigImage) -> int:
    """The offset from which the image's shard count holds: just after the event that set it (0 if none
    did). A batch routed before it was placed over another count and must be routed again."""
    provenance = image.provenance(("config", int(ConfigResourceType.BROKER), "", SHARD_COUNT_CONFIG))
    return 0 if provenance is None else provenance.offset + 1
