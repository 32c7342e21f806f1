"""Usage micro-batches as columns: how a gateway hands a shard its ``usage`` and ``unrecord`` items.

Why: a shard spent more on the form of a 1000-item micro-batch than on most of its decisions. Sent as a list
of ``(quota type, user, client_id, value, now_ms)`` tuples, the gateway pickled 1000 tuples (~0.46 ms on a
2-core machine), the shard unpickled them (~0.36 ms) and then took them apart again, checking each column and
splitting the items by quota type into the core's ``(user, client_id, value, now_ms)`` tuples (~1.1 ms), about
as long as 40 % of the core's own work on them. As :class:`UsageColumns` the items travel as five flat values
(one byte of quota type per item, the names joined by NUL, the values and times as 8-byte machine numbers), so
pickling is a copy of bytes both ways, and the shard builds the core's tuples once, a quota type at a time,
straight from the columns (C loops: ``str.split``, ``zip``, ``itertools.compress``).

NUL separates the names because no name that passed a gateway's checks holds one (``GatewayConfig.check_name``);
:func:`pack_usage` answers None for items it cannot carry exactly (a NUL in a name, a value that is not a
``float``, a time outside a signed 64-bit int, an unknown quota type), and the caller sends those as tuples.
"""

from __future__ import annotations

import itertools
import math
import operator
import sys
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from quotaplane.compiled import load_compiled
from quotaplane.quota import QuotaType, UsageItem

__all__ = [
    "COLUMN_KINDS",
    "RequestColumns",
    "UsageColumns",
    "last_time_ms",
    "pack_columns",
    "pack_usage",
    "unpack_usage",
]

#: the micro-batch kinds whose items may travel as ``UsageColumns`` (a gateway's usage and un-record)
COLUMN_KINDS = frozenset({"usage", "unrecord"})

#: the quota types a usage column carries, by their code (the byte of each item in ``quota_types``)
_TYPES = (QuotaType.PRODUCE, QuotaType.FETCH)
_CODES = {"PRODUCE": b"\x00", "FETCH": b"\x01"}
#: turns the FETCH selector (code 1) into the PRODUCE one
_SWAP = bytes.maketrans(b"\x00\x01", b"\x01\x00")
_SEPARATOR = "\x00"
_NATIVE_LITTLE = sys.byteorder == "little"
#: the compiled ``unpack_rows`` (``_unpack_compiled.pyx``: the checks, the core's tuples and the split by quota type
#: in one C pass), or None where it was not built; ``unpack_usage``'s own walk below is its reference
_compiled = load_compiled(f"{__package__}._unpack_compiled")


@dataclass(frozen=True, slots=True)
class UsageColumns:
    """``count`` usage items as columns: ``quota_types`` one byte each (0 PRODUCE, 1 FETCH), ``users`` and
    ``client_ids`` joined by NUL, ``values`` little-endian float64s, ``times_ms`` little-endian int64s."""

    count: int
    quota_types: bytes
    users: str
    client_ids: str
    values: bytes
    times_ms: bytes

    def __len__(self) -> int:
        return self.count

    def total_value(self) -> float:
        """The sum of the values, added in the items' order (as ``sum`` over the tuples adds them)."""
        return float(sum(_numbers("d", self.values, self.count, "values")))


def _numbers(typecode: str, data: bytes, count: int, name: str) -> array:
    if len(data) != 8 * count:
        raise ValueError(f"usage columns: {name} holds {len(data)} bytes for {count} items (8 each)")
    column = array(typecode)
    column.frombytes(data)
    if not _NATIVE_LITTLE:
        column.byteswap()
    return column


def _to_bytes(column: array) -> bytes:
    if not _NATIVE_LITTLE:
        column.byteswap()
    return column.tobytes()


def pack_usage(items: Sequence[tuple[str, str, str, float, int]]) -> UsageColumns | None:
    """The items as columns, or None when they cannot travel as columns exactly (see the module's docstring):
    then they go as tuples, which the shard takes as well."""
    if not items:
        return None
    try:
        quota_types, users, client_ids, values, times = zip(*items, strict=True)
        codes = b"".join(map(_CODES.__getitem__, quota_types))
        if set(map(type, values)) != {float} or set(map(type, times)) != {int}:
            return None  # an int value would come back a float, a bool time an int: not the items sent
        if _SEPARATOR in "".join(users) or _SEPARATOR in "".join(client_ids):
            return None  # a NUL within a name would split it in two at the shard
        return pack_columns([((codes, users, client_ids, values, times), None)])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


#: a checked request's columns: ``(quota type codes (0 PRODUCE, 1 FETCH) as bytes, users, client ids, values as
#: floats, times as ints)``, one entry per item
RequestColumns = tuple[bytes, Sequence[str], Sequence[str], Sequence[float], Sequence[int]]


def pack_columns(parts: Sequence[tuple[RequestColumns, Sequence[int] | None]]) -> UsageColumns:
    """One micro-batch's columns from the columns of the requests it holds: ``(request columns, the indices of
    its items in this batch, None: all)``, in order. Why: a gateway reads a request's columns from its protobuf
    message already; taking the batch's items from them costs a C loop per column, where taking tuples apart
    again cost ~0.6 ms a 1000 items. The caller vouches for the columns (a gateway's checked request: values
    are floats, times ints, names without NUL); the shard checks them whole again (:func:`unpack_usage`)."""
    chosen: list[RequestColumns] = []
    for columns, indices in parts:
        if indices is None:
            chosen.append(columns)
        else:
            take = _taker(indices)
            codes, users, client_ids, values, times = columns
            chosen.append((bytes(take(codes)), take(users), take(client_ids), take(values), take(times)))
    if len(chosen) == 1:
        codes, users, client_ids, values, times = chosen[0]
    else:
        codes = b"".join(c[0] for c in chosen)
        users, client_ids, values, times = (
            list(itertools.chain.from_iterable(c[k] for c in chosen)) for k in range(1, 5)
        )
    return UsageColumns(
        len(codes),
        bytes(codes),
        _SEPARATOR.join(users),
        _SEPARATOR.join(client_ids),
        _to_bytes(array("d", values)),
        _to_bytes(array("q", times)),
    )


def _taker(indices: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """The entries of a column at ``indices``, as a tuple, in one C call a column (``itemgetter``): ~40 % less than
    a ``map`` of ``__getitem__`` a column, for the part of a request one shard of several owns. ``itemgetter``
    answers a lone entry, not a tuple, for one index (and takes none): those are spelled out."""
    if len(indices) > 1:
        return operator.itemgetter(*indices)
    if indices:
        (index,) = indices
        return lambda column: (column[index],)
    return lambda column: ()


def last_time_ms(columns: UsageColumns) -> int:
    """The last item's ``now_ms`` (the shard's clock follows its callers' latest time)."""
    return int.from_bytes(columns.times_ms[-8:], "little", signed=True)


def unpack_usage(columns: object) -> dict[QuotaType, tuple[list[int] | None, list[UsageItem]]]:
    """The items by quota type, as the core takes them: ``(indices in the batch or None for all, (user,
    client_id, value, now_ms) tuples)``; every column checked first (ValueError naming what is wrong, and
    nothing recorded)."""
    if not isinstance(columns, UsageColumns):
        raise ValueError(f"expected UsageColumns, got {type(columns).__name__}")
    if _compiled is not None:
        groups = _unpack_compiled(columns)
        if groups is not None:
            return groups
    count = columns.count
    if type(count) is not int or count < 1:
        raise ValueError(f"usage columns: count must be an int >= 1, got {count!r}")
    codes = columns.quota_types
    if type(codes) is not bytes or len(codes) != count or codes.translate(None, b"\x00\x01"):
        raise ValueError("usage columns: quota_types must be one byte per item, 0 (PRODUCE) or 1 (FETCH)")
    if type(columns.users) is not str or type(columns.client_ids) is not str:
        raise ValueError("usage columns: users and client_ids must be NUL-joined strings")
    users = columns.users.split(_SEPARATOR)
    client_ids = columns.client_ids.split(_SEPARATOR)
    if len(users) != count or len(client_ids) != count:
        raise ValueError(f"usage columns: {len(users)} users and {len(client_ids)} client ids for {count} items")
    values = _numbers("d", columns.values, count, "values")
    times = _numbers("q", columns.times_ms, count, "times_ms")
    # a NaN or an infinity makes the sum non-finite (a sum of huge values too: then every item is refused)
    if not (min(values) >= 0.0 and math.isfinite(sum(values))):
        raise ValueError("usage columns: every value must be a finite number >= 0")
    if min(times) < 0:
        raise ValueError("usage columns: every now_ms must be >= 0")
    items = zip(users, client_ids, values, times, strict=True)
    fetches = codes.count(1)
    if fetches in (0, count):
        return {_TYPES[codes[0]]: (None, list(items))}
    rows = list(items)
    groups: dict[QuotaType, tuple[list[int] | None, list[UsageItem]]] = {}
    for quota_type, selector in ((QuotaType.PRODUCE, codes.translate(_SWAP)), (QuotaType.FETCH, codes)):
        groups[quota_type] = (
            list(itertools.compress(range(count), selector)),
            list(itertools.compress(rows, selector)),
        )
    return groups


def _unpack_compiled(columns: UsageColumns) -> dict[QuotaType, tuple[list[int] | None, list[UsageItem]]] | None:
    """``unpack_usage``'s answer from the compiled pass, or None where it does not pass the columns whole (then the
    reference decides: it raises naming what is wrong, or unpacks them itself)."""
    fields = (columns.count, columns.quota_types, columns.users, columns.client_ids, columns.values, columns.times_ms)
    if tuple(map(type, fields)) != (int, bytes, str, str, bytes, bytes) or len(columns.quota_types) != columns.count:
        return None
    users = columns.users.split(_SEPARATOR)
    client_ids = columns.client_ids.split(_SEPARATOR)
    unpacked = _compiled.unpack_rows(columns.quota_types, users, client_ids, columns.values, columns.times_ms)
    if unpacked is None:
        return None
    produce_indices, produce_rows, fetch_indices, fetch_rows = unpacked
    if not fetch_rows:
        return {QuotaType.PRODUCE: (None, produce_rows)}
    if not produce_rows:
        return {QuotaType.FETCH: (None, fetch_rows)}
    return {QuotaType.PRODUCE: (produce_indices, produce_rows), QuotaType.FETCH: (fetch_indices, fetch_rows)}
