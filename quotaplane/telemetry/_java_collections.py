"""Iteration order of Java's ``HashSet`` and ``ConcurrentHashMap``, reproduced.

Kafka computes a client's KIP-714 subscription id as the CRC32C of ``HashSet<String>.toString()``
plus the push interval. ``toString()`` lists the set in its iteration order, which is fixed by
``String.hashCode()``, the table capacity and insertion order; and the set is filled by iterating
the broker's subscriptions, a ``ConcurrentHashMap`` whose order has the same kind of rules. A client
that moves between a Kafka broker and quotaplane keeps its subscription id only if both produce the
same string, so this module replays both tables exactly (insertion, resize, bin order), without
building Java objects.

What is not reproduced: tree bins. A bin turns into a red-black tree only when a 9th entry lands in
one bin of a table of at least 64 slots (below 64 slots Java resizes instead, and that is
reproduced). With real metric names that needs 9 of 48+ prefixes in one of 64+ bins, odds of about
1 in 100,000; the functions report it (``exact`` False) rather than guess.

>>> java_string_hash_code("org.apache.kafka")
-381389488
>>> java_hash_set_to_string(["b", "a", "c"])
'[a, b, c]'
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "JavaConcurrentHashMapOrder",
    "java_hash_set_copy_capacity",
    "java_hash_set_order",
    "java_hash_set_order_exact",
    "java_hash_set_to_string",
    "java_string_hash_code",
]

_DEFAULT_CAPACITY = 16
_TREEIFY_THRESHOLD = 8
_MIN_TREEIFY_CAPACITY = 64


def java_string_hash_code(s: str) -> int:
    """``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as a signed int."""
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & 0xFFFF_FFFF
    else:
        units = s.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(units), 2):
            h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFF_FFFF
    return h - (1 << 32) if h & 0x8000_0000 else h


def _spread(s: str) -> int:
    """``HashMap.hash(key)``: the hash code with its high half folded into the low half (unsigned 32 bits)."""
    h = java_string_hash_code(s) & 0xFFFF_FFFF
    return h ^ (h >> 16)


def java_hash_set_copy_capacity(size: int, java_version: int = 17) -> int:
    """The table size of ``new HashSet<>(collection)`` for a collection of ``size`` elements.

    Java 17 sizes it ``max((int) (size / .75f) + 1, 16)``; Java 19 changed it to
    ``HashMap.newHashMap(max(size, 12))`` (``ceil(size / 0.75)``). They differ for 12, 24, 48, ...
    elements, so the Java version of the broker matters; both round up to a power of two.

    >>> java_hash_set_copy_capacity(12), java_hash_set_copy_capacity(12, java_version=21)
    (32, 16)
    """
    wanted = -(-max(size, 12) * 4 // 3) if java_version >= 19 else max(size * 4 // 3 + 1, _DEFAULT_CAPACITY)
    return 1 << (wanted - 1).bit_length() if wanted > 1 else 1


def java_hash_set_order(items: Iterable[str], initial_capacity: int = _DEFAULT_CAPACITY) -> list[str]:
    """The iteration order of a ``HashSet<String>`` after adding ``items`` (see ``java_hash_set_order_exact``)."""
    return java_hash_set_order_exact(items, initial_capacity)[0]


def java_hash_set_order_exact(
    items: Iterable[str], initial_capacity: int = _DEFAULT_CAPACITY
) -> tuple[list[str], bool]:
    """The iteration order of a ``HashSet<String>`` after adding ``items`` in order (duplicates ignored).

    ``initial_capacity`` is 16 for ``new HashSet<>()``, ``java_hash_set_copy_capacity(n)`` for a copy
    constructor. Replays ``HashMap.putVal``: append to the bin's tail; a bin reaching 9 entries in a
    table of fewer than 64 slots doubles the table (``treeifyBin``); ``++size > threshold`` doubles
    it; a resize keeps each bin's relative order. The result is bins in index order, each in
    insertion order.

    The flag is False when Java would have turned a bin into a tree (9 entries in one bin of a table
    of 64+ slots), whose order this module does not reproduce.
    """
    capacity = initial_capacity
    exact = True
    bins: list[list[tuple[int, str]]] = [[] for _ in range(capacity)]
    seen: set[str] = set()
    size = 0

    def resize() -> None:
        nonlocal capacity, bins
        capacity *= 2
        new_bins: list[list[tuple[int, str]]] = [[] for _ in range(capacity)]
        for b in bins:
            for entry in b:
                new_bins[entry[0] & (capacity - 1)].append(entry)
        bins = new_bins

    for item in items:
        if item in seen:
            continue
        seen.add(item)
        h = _spread(item)
        b = bins[h & (capacity - 1)]
        b.append((h, item))
        if len(b) > _TREEIFY_THRESHOLD:
            if capacity < _MIN_TREEIFY_CAPACITY:
                resize()
            else:
                exact = False
        size += 1
        if size > capacity * 3 // 4:
            resize()
    return [item for b in bins for _, item in b], exact


def java_hash_set_to_string(items: Iterable[str]) -> str:
    """``AbstractCollection.toString()`` of a ``HashSet`` built from ``items``: ``[a, b, c]``."""
    return "[" + ", ".join(java_hash_set_order(items)) + "]"


class JavaConcurrentHashMapOrder:
    """The key order of a ``ConcurrentHashMap<String, V>`` under put and remove.

    Kafka keeps client-metrics subscriptions in one; the order they are visited decides the insertion
    order of the client's metric set. Reproduces ``putVal`` (append to the bin's tail, replace in
    place), ``replaceNode`` (unlink), ``addCount`` (resize when the count reaches 3/4 of the table) and
    ``transfer`` (each bin split into a low and a high list: the longest tail run that goes to one side
    is moved as is, the nodes before it are pushed to the front of their list, reversing them).
    The table never shrinks, as in Java.

    >>> m = JavaConcurrentHashMapOrder()
    >>> for k in ("b", "a", "c"):
    ...     m.put(k)
    >>> m.order()
    ['a', 'b', 'c']
    """

    __slots__ = ("_bins", "_capacity", "_count", "exact")

    def __init__(self) -> None:
        #: False once Java would have built a tree bin (9 keys in one bin of 64+ slots); from then on
        #: the order may differ from Java's.
        self.exact = True
        self._capacity = _DEFAULT_CAPACITY
        self._bins: list[list[tuple[int, str]]] = [[] for _ in range(self._capacity)]
        self._count = 0

    def put(self, key: str) -> None:
        """``map.put(key, value)``: a new key goes to the tail of its bin; an existing key keeps its place."""
        h = _spread(key) & 0x7FFF_FFFF
        b = self._bins[h & (self._capacity - 1)]
        if not b:
            b.append((h, key))  # casTabAt into an empty bin: no bin count, no treeify check
        else:
            # putVal counts the nodes it walks (from 1) and checks TREEIFY_THRESHOLD afterwards, also
            # when it only replaced a value.
            bin_count = next((i + 1 for i, (_, k) in enumerate(b) if k == key), 0)
            if bin_count == 0:
                bin_count = len(b)
                b.append((h, key))
                added = True
            else:
                added = False
            if bin_count >= _TREEIFY_THRESHOLD:
                if self._capacity < _MIN_TREEIFY_CAPACITY:
                    self._try_presize(self._capacity << 1)
                else:
                    self.exact = False
            if not added:
                return
        self._count += 1
        while self._count >= self._size_ctl():
            self._transfer()

    def _size_ctl(self) -> int:
        return self._capacity - (self._capacity >> 2)

    def _try_presize(self, size: int) -> None:
        """``tryPresize``: grow until the resize threshold reaches ``tableSizeFor(1.5 * size + 1)``."""
        target = 1 << (size + (size >> 1)).bit_length()
        while target > self._size_ctl():
            self._transfer()

    def remove(self, key: str) -> bool:
        """``map.remove(key)``: unlink the node; the table keeps its size."""
        h = _spread(key) & 0x7FFF_FFFF
        b = self._bins[h & (self._capacity - 1)]
        for i, (_, k) in enumerate(b):
            if k == key:
                del b[i]
                self._count -= 1
                return True
        return False

    def order(self) -> list[str]:
        """The iteration order of ``keySet()`` / ``values()``: bins by index, each bin from its head."""
        return [k for b in self._bins for _, k in b]

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        h = _spread(key) & 0x7FFF_FFFF
        return any(k == key for _, k in self._bins[h & (self._capacity - 1)])

    def _transfer(self) -> None:
        n = self._capacity
        new_bins: list[list[tuple[int, str]]] = [[] for _ in range(2 * n)]
        for i, b in enumerate(self._bins):
            if not b:
                continue
            run_bit = b[-1][0] & n
            last_run = len(b) - 1
            while last_run > 0 and (b[last_run - 1][0] & n) == run_bit:
                last_run -= 1
            low: list[tuple[int, str]] = []
            high: list[tuple[int, str]] = []
            if run_bit == 0:
                low = b[last_run:]
            else:
                high = b[last_run:]
            for node in b[:last_run]:
                if node[0] & n == 0:
                    low.insert(0, node)
                else:
                    high.insert(0, node)
            new_bins[i] = low
            new_bins[i + n] = high
        self._bins = new_bins
        self._capacity = 2 * n
