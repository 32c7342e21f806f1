"""The gateway's ``ConfigReplica`` over an in-process ``ConfigController`` (no Ray): keys and offsets agree.

The offset fence (``ShardActor.serve_at``) is only sound if every batch is routed by shard keys of the very
offset it is stamped with: keys of an older image sent with a newer offset pass the fence, yet the usage
lands on a shard that does not own the sensor, a second budget for one entity.
"""

from __future__ import annotations

from typing import Any

from quotaplane.actors.controller import ConfigController
from quotaplane.config import ClientQuotaAlteration
from quotaplane.services.gateway._replica import ConfigReplica

NOW_MS = 1_700_000_000_000


class LocalReplica(ConfigReplica):
    """The replica with its controller calls made in-process."""

    def __init__(self, controller: ConfigController) -> None:
        self.local = controller
        super().__init__(controller)

    def _call(self, method: str, *args: Any) -> Any:
        return getattr(self.local, method)(*args)


def set_quota(controller: ConfigController, entity: dict[str, str], bound: float) -> None:
    [result] = controller.alter_client_quotas(
        [ClientQuotaAlteration(entity, [("producer_byte_rate", bound)])], now_ms=NOW_MS
    )
    assert result.ok, result


def test_keys_resolved_after_the_image_moved_are_those_of_the_new_offset(tmp_path):
    controller = ConfigController(tmp_path / "log", fsync=False)
    set_quota(controller, {"user": "alice"}, 1000.0)
    replica = LocalReplica(controller)
    item = ("PRODUCE", "alice", "c1", 1.0, NOW_MS)
    offset, [key] = replica.resolve([item])
    assert (offset, key) == (controller.end_offset(), "PRODUCE\x00alice\x00")

    # a new level of the ladder moves alice/c1 to its own sensor; the follower applies it (as the poll
    # thread does) while nothing else touches the replica: the next resolution must see it at once
    set_quota(controller, {"user": "alice", "client-id": "c1"}, 500.0)
    replica.follower.catch_up()
    offset, [key] = replica.resolve([item])
    assert (offset, key) == (controller.end_offset(), "PRODUCE\x00alice\x00c1")
    controller._store.close()  # the controller has no close of its own: Ray kills its process


def test_bounds_are_the_quota_each_key_resolves_to_at_the_offset_they_are_stamped_with(tmp_path):
    """What a leased share is cut from: Kafka's quota for the item's metric tags (None where none applies, or
    where no quota of the type exists at all), cached per offset and dropped when the image moves."""
    from quotaplane.quota import ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType

    controller = ConfigController(tmp_path / "log", fsync=False)
    replica = LocalReplica(controller)
    core = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    items = [("PRODUCE", u, c, 1.0, NOW_MS) for u, c in (("alice", "c1"), ("alice", "c2"), ("bob", "c1"))]
    items.append(("FETCH", "alice", "c1", 1.0, NOW_MS))
    assert replica.resolve_bounds(items)[2] == [None, None, None, None]  # no quota at all: quotas disabled
    ladder = [({"user": "alice"}, 1000.0), ({"user": "alice", "client-id": "c1"}, 300.0), ({"client-id": "c1"}, 50.0)]
    for entity, bound in ladder:
        set_quota(controller, entity, bound)
        core.update_quota(ClientQuotaEntity(user=entity.get("user"), client_id=entity.get("client-id")), bound)
        replica.follower.catch_up()
        offset, keys, bounds = replica.resolve_bounds(items)
        assert offset == controller.end_offset()
        expected = [core.quota(u, c).bound if core.quota(u, c).bound < 2**63 - 1 else None for _, u, c, *_ in items[:3]]
        assert bounds[:3] == expected and bounds[3] is None, (entity, bounds)
        assert replica.resolve_bounds(items) == (offset, keys, bounds)  # from the cache, the same
    controller._store.close()
