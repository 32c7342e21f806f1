"""Rendezvous placement: stable across processes, minimal movement when the shard set changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from quotaplane.actors import RendezvousPlacement, owner_of, shard_weight

KEYS = [f"user-{i}/client-{i % 97}" for i in range(100_000)]


def _moved(before: list[str], after: list[str]) -> int:
    return sum(1 for a, b in zip(before, after, strict=True) if a != b)


@pytest.mark.parametrize("n", [3, 8])
def test_adding_a_shard_moves_about_one_in_n_plus_one(n: int) -> None:
    old = RendezvousPlacement([f"shard-{i}" for i in range(n)]).owners(KEYS)
    new = RendezvousPlacement([f"shard-{i}" for i in range(n + 1)]).owners(KEYS)
    moved = _moved(old, new)
    assert abs(moved / len(KEYS) - 1 / (n + 1)) < 0.02
    # every moved key moved to the new shard: nothing is reshuffled between old shards
    assert all(b == f"shard-{n}" for a, b in zip(old, new, strict=True) if a != b)


def test_removing_a_shard_moves_only_its_keys() -> None:
    shards = [f"shard-{i}" for i in range(6)]
    old = RendezvousPlacement(shards).owners(KEYS)
    new = RendezvousPlacement([s for s in shards if s != "shard-2"]).owners(KEYS)
    for before, after in zip(old, new, strict=True):
        assert (before == after) == (before != "shard-2")
    share = old.count("shard-2") / len(KEYS)
    assert abs(share - 1 / 6) < 0.02


def test_balanced() -> None:
    owners = RendezvousPlacement(range(5)).owners(KEYS)
    for shard in range(5):
        assert abs(owners.count(shard) / len(KEYS) - 0.2) < 0.01


def test_order_of_shard_ids_and_int_or_str_do_not_matter() -> None:
    a = RendezvousPlacement(["b", "a", "c"]).owners(KEYS[:2000])
    b = RendezvousPlacement(["c", "b", "a"]).owners(KEYS[:2000])
    assert a == b
    assert RendezvousPlacement([1, 2, 3]).owner("x") == int(RendezvousPlacement(["1", "2", "3"]).owner("x"))
    assert owner_of("alice", ["s0", "s1"]) == RendezvousPlacement(["s0", "s1"]).owner("alice")
    assert shard_weight("s0", "alice") == shard_weight("s0", b"alice")


def test_group_by_owner_keeps_indices_in_order() -> None:
    placement = RendezvousPlacement(["s0", "s1", "s2"])
    keys = KEYS[:1000] + KEYS[:10]
    groups = placement.group_by_owner(keys)
    assert sorted(i for g in groups.values() for i in g) == list(range(len(keys)))
    for shard, indices in groups.items():
        assert indices == sorted(indices)
        assert all(placement.owner(keys[i]) == shard for i in indices)


def test_same_answer_in_a_child_process_with_another_hash_seed() -> None:
    keys = KEYS[:5000]
    shards = [f"shard-{i}" for i in range(7)]
    code = (
        "import json, sys\n"
        "from quotaplane.actors import RendezvousPlacement\n"
        "keys, shards = json.load(sys.stdin)\n"
        "print(json.dumps(RendezvousPlacement(shards).owners(keys)))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([keys, shards]),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert json.loads(out.stdout) == RendezvousPlacement(shards).owners(keys)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="at least one"):
        RendezvousPlacement([])
    with pytest.raises(ValueError, match="differ"):
        RendezvousPlacement([1, "1"])
    with pytest.raises(TypeError, match="str or bytes"):
        RendezvousPlacement(["a"]).owner(3)  # type: ignore[arg-type]
