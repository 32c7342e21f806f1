"""Validation of producer-id batches, column by column (the batch path of ``ProducerIdQuotaManager``).

A batch is a sequence of ``(user, producer_id)`` items recorded at the batch's ``now_ms`` or
``(user, producer_id, item_now_ms)`` items. Checking each item with a Python-level ``type`` /
``len`` / range test costs more than the record itself; here the batch is split into three columns
(``zip(*items)``, one C call) and each column is checked with a few C-level passes (``set(map(type,
column))``, ``min``, ``max``). Only when a fast check fails does the item-by-item check run, to name
the first bad item (or, for ``str`` subclasses as users, to accept the batch).

>>> batch_columns([("alice", 1), ("bob", 2, 5)], 9)
(['alice', 'bob'], [1, 2], [9, 5])
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from operator import itemgetter

from ._bloom import MAX_PRODUCER_ID, check_now_ms, check_producer_id

__all__ = ["batch_columns", "check_user"]

_TUPLE = {tuple}
_STR = {str}
_INT = {int}
_user_of = itemgetter(0)
_pid_of = itemgetter(1)
_time_of = itemgetter(2)


def check_user(user: object) -> str:
    """A user is a string (the principal name); anything else is a ValueError."""
    if not isinstance(user, str):
        raise ValueError(f"user must be a string (the principal name), got {type(user).__name__}")
    return user


def batch_columns(
    items: Sequence[tuple[str, int] | tuple[str, int, int]], now_ms: int
) -> tuple[Sequence[str], Sequence[int], Iterable[int]]:
    """``(users, producer_ids, times)`` of a valid batch; a ValueError naming the first bad item otherwise.

    ``times`` holds each item's time (``now_ms`` for two-element items). Nothing is recorded here, so
    a bad item rejects the whole batch before anything changes.
    """
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        raise ValueError(f"items must be a sequence of tuples, got {type(items).__name__}")
    if not items:
        return (), (), ()
    if set(map(type, items)) == _TUPLE:
        lengths = set(map(len, items))
        times: Iterable[int] | None = None
        if lengths == {2}:
            times = itertools.repeat(now_ms, len(items))
        elif lengths == {3}:
            times = list(map(_time_of, items))
        elif lengths == {2, 3}:
            times = [item[2] if len(item) == 3 else now_ms for item in items]
        if times is not None:
            # one list per column (zip(*items) would make an iterator per item, and wake the garbage collector)
            users = list(map(_user_of, items))
            pids = list(map(_pid_of, items))
            if (
                set(map(type, users)) == _STR
                and set(map(type, pids)) == _INT
                and min(pids) >= 0
                and max(pids) <= MAX_PRODUCER_ID
                and (lengths == {2} or set(map(type, times)) == _INT)
            ):
                return users, pids, times
    _check_items(items)
    # valid, but past the fast checks (a str subclass as a user): the columns item by item
    users = list(map(_user_of, items))
    pids = list(map(_pid_of, items))
    return users, pids, [item[2] if len(item) == 3 else now_ms for item in items]


def _check_items(items: Sequence[object]) -> None:
    """The item-by-item check: raises on the first bad item, with its index."""
    for index, item in enumerate(items):
        try:
            if not isinstance(item, tuple) or len(item) not in (2, 3):
                raise ValueError("expected a tuple (user, producer_id[, now_ms])")
            check_user(item[0])
            check_producer_id(item[1])
            if len(item) == 3:
                check_now_ms(item[2])
        except ValueError as exc:
            raise ValueError(f"producer-id item {index}: {exc}") from None
