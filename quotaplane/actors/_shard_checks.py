"""The shard's last checks of the batches it is handed (the gateway checked them first; these name the first bad
item when a column check failed, or refuse what no gateway sends)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["_check_batch", "_check_usage_items", "_is_client_item"]


def _check_usage_items(items: Sequence[Any]) -> None:
    """The ValueError naming the first bad usage item, if any (called once a column check failed: values whose
    sum overflows fail it, yet each is fine)."""
    for index, item in enumerate(items):
        if not (
            type(item) is tuple
            and len(item) == 5
            and isinstance(item[0], str)
            and _is_client_item(item[1:], 4)
            and type(item[3]) in (int, float)
            and 0 <= item[3] < math.inf
            and type(item[4]) is int
            and item[4] >= 0
        ):
            raise ValueError(f"item {index}: expected (quota type, user, client_id, value >= 0, now_ms >= 0)")


def _is_client_item(item: object, size: int) -> bool:
    """A tuple of ``size`` fields starting with (user, client_id) strings."""
    return type(item) is tuple and len(item) == size and isinstance(item[0], str) and isinstance(item[1], str)


def _check_batch(items: object) -> None:
    if not isinstance(items, list | tuple):
        raise ValueError(f"a batch must be a list of items, got {type(items).__name__}")
    if not items:
        raise ValueError("empty batch: send at least one item (one actor call costs ~1 ms; batch items)")
