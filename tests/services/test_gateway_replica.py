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
