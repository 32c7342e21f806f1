"""Which shard owns a key: rendezvous (highest-random-weight) hashing.

Every piece of sharded state (a quota sensor by its resolved ``(user, client-id)`` tags, a producer-id
filter by user, a client instance by its id) has exactly one owner. Rendezvous hashing picks, for a key,
the shard with the highest weight ``H(shard, key)``: adding a shard to N moves only the keys the new
shard now wins (about 1/(N+1) of them), and removing one moves only the keys it owned. It needs no ring,
no virtual nodes and no coordination: every gateway computes the same owner from the shard list alone.

The weight is BLAKE2b keyed with the shard id (8-byte digest), never Python's ``hash``, which is salted
per process (``PYTHONHASHSEED``): two gateways, or a gateway before and after a restart, must agree.
Shard ids are compared through their ``str``, so ``3`` and ``"3"`` are the same shard.

>>> placement = RendezvousPlacement(["shard-0", "shard-1", "shard-2"])
>>> placement.owner("alice") == placement.owner("alice")
True
>>> groups = placement.group_by_owner(["alice", "bob", "alice"])
>>> sorted(i for indices in groups.values() for i in indices)
[0, 1, 2]
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Sequence
from typing import Generic, TypeVar

__all__ = ["RendezvousPlacement", "owner_of", "shard_weight"]

ShardId = TypeVar("ShardId", bound=Hashable)

#: BLAKE2b takes keys of at most 64 bytes; a longer shard id is hashed down to one first.
_MAX_KEY_BYTES = 64
_DIGEST_SIZE = 8


def _shard_key(shard_id: Hashable) -> bytes:
    raw = str(shard_id).encode("utf-8")
    if len(raw) > _MAX_KEY_BYTES:
        raw = hashlib.blake2b(raw, digest_size=_MAX_KEY_BYTES, person=b"qp-shard-id").digest()
    return raw


def _key_bytes(key: str | bytes) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8", "surrogatepass")
    raise TypeError(f"a placement key must be str or bytes, got {type(key).__name__}")


def shard_weight(shard_id: Hashable, key: str | bytes) -> int:
    """The rendezvous weight of ``key`` on ``shard_id`` (an unsigned 64-bit int, the same in every process)."""
    digest = hashlib.blake2b(_key_bytes(key), digest_size=_DIGEST_SIZE, key=_shard_key(shard_id)).digest()
    return int.from_bytes(digest, "big")


class RendezvousPlacement(Generic[ShardId]):
    """Owners of keys over a fixed set of shard ids (build a new one when the set changes: it is cheap).

    Ties between weights (probability about ``2**-64`` per pair) go to the shard listed first in
    ``str`` order, so the answer never depends on the order the ids were given in.
    """

    def __init__(self, shard_ids: Iterable[ShardId]) -> None:
        ids = sorted(set(shard_ids), key=str)
        if not ids:
            raise ValueError("a placement needs at least one shard id")
        if len({str(s) for s in ids}) != len(ids):
            raise ValueError(f"shard ids must differ as strings: {ids!r}")
        self.shard_ids: tuple[ShardId, ...] = tuple(ids)
        # one keyed hasher per shard; copy() then update() is cheaper than keying a new hasher per key
        self._hashers = [(s, hashlib.blake2b(digest_size=_DIGEST_SIZE, key=_shard_key(s))) for s in ids]

    def __len__(self) -> int:
        return len(self.shard_ids)

    def __repr__(self) -> str:
        return f"RendezvousPlacement({list(self.shard_ids)!r})"

    def owner(self, key: str | bytes) -> ShardId:
        """The shard that owns ``key``."""
        data = _key_bytes(key)
        best_weight = b""
        best: ShardId = self.shard_ids[0]
        for shard_id, hasher in self._hashers:
            h = hasher.copy()
            h.update(data)
            weight = h.digest()
            if weight > best_weight:  # equal-length big-endian digests compare as unsigned ints
                best_weight, best = weight, shard_id
        return best

    def owners(self, keys: Iterable[str | bytes]) -> list[ShardId]:
        """The owner of each key, in order (a key repeated in the batch is hashed once)."""
        seen: dict[str | bytes, ShardId] = {}
        out = []
        for key in keys:
            shard_id = seen.get(key)
            if shard_id is None:
                shard_id = seen[key] = self.owner(key)
            out.append(shard_id)
        return out

    def group_by_owner(self, keys: Sequence[str | bytes]) -> dict[ShardId, list[int]]:
        """The indices of ``keys`` grouped by owner, each group in ascending order.

        A gateway sends each group as one batch to its shard and scatters the answers back by index, so
        the caller sees results in the order it sent the items.
        """
        groups: dict[ShardId, list[int]] = {}
        for index, shard_id in enumerate(self.owners(keys)):
            group = groups.get(shard_id)
            if group is None:
                groups[shard_id] = [index]
            else:
                group.append(index)
        return groups


def owner_of(key: str | bytes, shard_ids: Iterable[ShardId]) -> ShardId:
    """The owner of one key among ``shard_ids`` (build a :class:`RendezvousPlacement` for many keys)."""
    return RendezvousPlacement(shard_ids).owner(key)
