"""The controller's fence between a shard's primary and its warm standby (``_standby.ShardOwners``), against a
stand-in for Ray's actor table: the standby is granted only once Ray says the incarnation that claimed is gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from quotaplane.actors._standby import STANDBY_SUFFIX, ActorState, ShardOwners

NAME, NS = "quotaplane-shard-0", "ns"
SB = NAME + STANDBY_SUFFIX


class FakeRay:
    """Actor states by name, as Ray's GCS would give them."""

    def __init__(self) -> None:
        self.states: dict[str, ActorState] = {
            NAME: ActorState("PENDING_CREATION", 0),
            NAME + STANDBY_SUFFIX: ActorState("ALIVE", 0),
        }

    def __call__(self, actor_id: str) -> ActorState:  # the tests name actors by id = name
        return self.states.get(actor_id, ActorState("GONE", -1))

    def primary(self, state: str, restarts: int) -> None:
        self.states[NAME] = ActorState(state, restarts)


def owners(tmp_path: Path, ray: FakeRay) -> ShardOwners:
    return ShardOwners(tmp_path, fsync=False, state_of=ray)


def test_a_first_incarnation_being_created_is_never_served_beside(tmp_path: Path) -> None:
    ray = FakeRay()
    arbiter = owners(tmp_path, ray)
    assert arbiter.grant_standby(NAME, NS, NAME, SB) is None  # no claim yet, but it is being created: it will claim
    assert arbiter.claim_primary(NAME, NS, NAME).owner == "primary"
    ray.primary("ALIVE", 0)
    assert arbiter.grant_standby(NAME, NS, NAME, SB) is None


def test_the_standby_is_granted_once_ray_restarts_the_claiming_incarnation(tmp_path: Path) -> None:
    ray = FakeRay()
    arbiter = owners(tmp_path, ray)
    arbiter.claim_primary(NAME, NS, NAME)
    ray.primary("ALIVE", 0)
    assert arbiter.grant_standby(NAME, NS, NAME, SB) is None
    ray.primary("RESTARTING", 1)  # the node died: Ray counts the restart when it begins
    epoch = arbiter.grant_standby(NAME, NS, NAME, SB)
    assert epoch is not None
    assert arbiter.grant_standby(NAME, NS, NAME, SB) == epoch  # asked again by another gateway: the same grant
    # the restarted incarnation claims (still RESTARTING while its __init__ runs): the standby must be released
    before = arbiter.claim_primary(NAME, NS, NAME)
    assert (before.owner, before.standby_restarts, before.standby_id) == ("standby", 0, SB)
    assert arbiter.grant_standby(NAME, NS, NAME, SB) is None  # while it starts, and once it is alive
    ray.primary("ALIVE", 1)
    assert arbiter.grant_standby(NAME, NS, NAME, SB) is None
    record = arbiter.record(NAME, NS)
    assert (record.owner, record.primary_restarts, record.epoch) == ("primary", 1, epoch + 1)


def test_an_incarnation_that_dies_while_starting_lets_the_standby_serve(tmp_path: Path) -> None:
    ray = FakeRay()
    arbiter = owners(tmp_path, ray)
    ray.primary("RESTARTING", 3)
    arbiter.claim_primary(NAME, NS, NAME)
    assert arbiter.grant_standby(NAME, NS, NAME, SB) is None
    ray.primary("RESTARTING", 4)
    assert arbiter.grant_standby(NAME, NS, NAME, SB) is not None
    ray.primary("DEAD", 4)
    assert arbiter.grant_standby(NAME, NS, NAME, SB) is not None


def test_a_restarted_standby_is_granted_anew_only_while_the_primary_is_gone(tmp_path: Path) -> None:
    ray = FakeRay()
    arbiter = owners(tmp_path, ray)
    arbiter.claim_primary(NAME, NS, NAME)
    ray.primary("RESTARTING", 1)
    first = arbiter.grant_standby(NAME, NS, NAME, SB)
    ray.states[NAME + STANDBY_SUFFIX] = ActorState("ALIVE", 1)  # the granted standby died; Ray restarted it
    second = arbiter.grant_standby(NAME, NS, NAME, SB)
    assert first is not None and second == first + 1
    arbiter.claim_primary(NAME, NS, NAME)
    ray.states[NAME + STANDBY_SUFFIX] = ActorState("ALIVE", 2)
    assert arbiter.grant_standby(NAME, NS, NAME, SB) is None


def test_a_primary_alive_without_a_recorded_claim_is_never_served_beside(tmp_path: Path) -> None:
    ray = FakeRay()
    ray.primary("ALIVE", 2)  # e.g. the record file was lost
    assert owners(tmp_path, ray).grant_standby(NAME, NS, NAME, SB) is None


def test_the_records_survive_a_controller_restart(tmp_path: Path) -> None:
    ray = FakeRay()
    ray.primary("RESTARTING", 1)
    arbiter = owners(tmp_path, ray)
    arbiter.claim_primary(NAME, NS, NAME)
    again = owners(tmp_path, ray)  # a restarted controller reads shard-owners.json
    assert again.grant_standby(NAME, NS, NAME, SB) is None  # the claiming incarnation still starts
    assert again.record(NAME, NS).primary_restarts == 1
    again.forget(NAME, NS)
    assert owners(tmp_path, ray).record(NAME, NS).epoch == 0


def test_an_unreadable_record_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "shard-owners.json").write_text("{not json")
    ray = FakeRay()
    ray.primary("ALIVE", 0)
    assert owners(tmp_path, ray).grant_standby(NAME, NS, NAME, SB) is None


def test_claiming_an_actor_ray_does_not_know_fails(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no actor"):
        owners(tmp_path, FakeRay()).claim_primary("other", NS, "other")
