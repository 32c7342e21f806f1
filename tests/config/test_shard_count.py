"""The shard count in the log: a reshard's plan, its expected-count check, and IncrementalAlterConfigs' refusal."""

from __future__ import annotations

import pytest

from quotaplane.actors._reshard import givers_for
from quotaplane.config import (
    SHARD_COUNT_CONFIG,
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    OpType,
    shard_count,
    shard_count_offset,
)
from quotaplane.errors import Errors


@pytest.fixture
def store(tmp_path):
    with ConfigStore.open(tmp_path, fsync=False) as s:
        yield s


def test_the_first_reshard_logs_where_it_started_then_where_it_goes(store: ConfigStore) -> None:
    assert shard_count(store.image) is None and shard_count_offset(store.image) == 0
    assert store.alter_shard_count(4, expected=2, default=2, now_ms=5, principal="User:ops").ok
    history = store.history(resource=ConfigResource(ConfigResourceType.BROKER, ""), key=SHARD_COUNT_CONFIG)
    assert [(h.old, h.new, h.principal) for h in history] == [(None, "2", "User:ops"), ("2", "4", "User:ops")]
    assert shard_count(store.image) == 4 and shard_count_offset(store.image) == 2
    assert store.alter_shard_count(3, expected=4, now_ms=6).ok
    assert shard_count(store.image) == 3 and store.end_offset == 3


def test_a_reshard_from_a_count_no_longer_current_is_refused(store: ConfigStore) -> None:
    assert store.alter_shard_count(4, expected=2, default=2, now_ms=1).ok
    refused = store.alter_shard_count(6, expected=2, default=2, now_ms=2)
    assert refused.error is Errors.INVALID_REQUEST and "4 shards, not the 2" in refused.message
    assert shard_count(store.image) == 4 and store.end_offset == 2


def test_the_same_count_again_is_a_success_without_an_event(store: ConfigStore) -> None:
    assert store.alter_shard_count(2, expected=2, default=2, now_ms=1).ok
    assert store.end_offset == 0


@pytest.mark.parametrize("count", [0, -3, 1025, True, 2.0, "4"])
def test_a_bad_count_is_invalid_config_and_logs_nothing(store: ConfigStore, count: object) -> None:
    result = store.alter_shard_count(count, default=2, now_ms=1)  # type: ignore[arg-type]
    assert result.error is Errors.INVALID_CONFIG and store.end_offset == 0


def test_incremental_alter_configs_refuses_the_key(store: ConfigStore) -> None:
    [result] = store.incremental_alter_configs(
        [(ConfigResource(ConfigResourceType.BROKER, ""), [AlterConfigOp(SHARD_COUNT_CONFIG, "8", OpType.SET)])],
        now_ms=1,
    )
    assert result.error is Errors.INVALID_CONFIG and "reshard" in (result.message or "")
    assert store.end_offset == 0


@pytest.mark.parametrize(
    ("receiver", "old", "new", "givers"),
    [
        ("2", 2, 4, ["0", "1"]),  # a new shard wins keys from every old one
        ("0", 2, 4, []),  # an old shard only gives
        ("0", 4, 3, ["3"]),  # a remaining shard wins only the removed one's keys
        ("3", 4, 3, []),  # a removed shard receives nothing
        ("1", 5, 2, ["2", "3", "4"]),
    ],
)
def test_givers_of_a_receiver(receiver: str, old: int, new: int, givers: list[str]) -> None:
    assert givers_for(receiver, old, new) == givers
