"""KIP-936's time-controlled Bloom filter of producer ids (``TimedBloomFilter``).

One filter per window, at most two alive, as the KIP's caching layer describes it. With the first
id at ``t0`` and a window ``W``:

=================  ===========================================================================
time               filters
=================  ===========================================================================
``t0``             the first id creates filter 1; new ids go into it
``t0 + W``         a second filter starts (its window is ``[t0 + W, t0 + 2W)``) and takes the
                   new ids; both filters are consulted
``t0 + 1.5 W``     filter 1 is dropped; only filter 2 remains
``t0 + 2 W``       filter 3 starts beside filter 2, ... (repeat)
``start + 1.5 W``  with no newer filter, the last one is dropped too: the filter is empty and the
                   next id starts again at step 1
=================  ===========================================================================

Windows are anchored at the first id (filter ``k`` starts at exactly ``t0 + (k - 1) W``), not at
the time of the call that happens to create it, so the lifecycle does not drift with traffic. Nothing
runs in the background: each call brings the filter up to date for its ``now_ms``.

**Refresh.** An id found only in the older filter is copied into the newer one (and is still "seen"):
a producer that keeps sending with one id stays remembered and is never counted twice, instead of
counting as new each window once its filter expires. Only ids absent from both live filters are new.

**Sizing.** Each filter is an ``rbloom.Bloom(expected_items, false_positive_rate)``: ``m =
-n ln p / ln² 2`` bits (rounded up to whole bytes) and about ``m / n · ln 2`` probes, the optimum
for ``n`` items at rate ``p``. At most two filters are alive, so a ``TimedBloomFilter`` never holds
more than ``2 · ⌈m / 8⌉`` bytes of bits however many ids it is shown; past ``n`` ids in one window
its false-positive rate rises (a saturated Bloom filter answers "seen" more often; it never forgets
an id early).

**Hashing.** rbloom derives its ``k`` probes from the item's Python ``hash`` with a linear
congruential generator. Python's ``hash`` of an int is the int itself modulo ``2**61 - 1``, so raw
producer ids would (a) alias (``x`` and ``x + 2**61 - 1`` always collide) and (b) feed sequential
ids into a linear generator, which measurably raises the false-positive rate (1.25 % instead of
1 % for sequential ids at ``n = 10,000``, ``p = 1 %``). Each id is therefore hashed once per call
with BLAKE2b (``hashlib``, 8-byte digest of its 8 little-endian bytes, optionally keyed) and the
digest, as an int, is what rbloom sees. BLAKE2b is stable across processes and Python versions (the
randomized ``hash`` of ``bytes`` is not), so the same ids give the same answers in every replay.

**Hand-over.** rbloom hashes each digest with ``int.__hash__``, given as its ``hash_func``: the very value
of its default (the builtin ``hash`` of an int), so the same bits, but rbloom saves (``save_bytes``) and
loads only filters with a hash function of their own. A reshard moves a user's filters to another shard
with ``export_state`` / ``restore_state``; the receiver's filters hold the giver's bits. The price: rbloom
calls a hash function of its own through Python's call protocol, 60-80 ns more per ``add`` or ``in``
(``bench/producer_ids.py``: 7-15 % fewer checks per second).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from hashlib import blake2b

from rbloom import Bloom

__all__ = ["MAX_PRODUCER_ID", "TimedBloomFilter", "id_hash_base", "make_id_hasher", "optimal_bits"]

#: Java's ``Long.MAX_VALUE``: the largest producer id (ids are non-negative int64; -1 means "none").
MAX_PRODUCER_ID = 2**63 - 1

_from_bytes = int.from_bytes

#: ``TimedBloomFilter._live`` when it must be recomputed: every time is at or past its ``until``.
_STALE: tuple[float, None, None, int] = (-math.inf, None, None, 0)

#: Numbers for the Bloom filters made, in every TimedBloomFilter of the process: never reused.
_serials = itertools.count(1)

#: rbloom's ``hash_func`` for keys: the builtin ``hash``'s value for an int (so the same bits), but not the builtin
#: itself, with which rbloom refuses to save a filter.
_KEY_HASH = int.__hash__

#: The bytes of rbloom's ``save_bytes`` before the bit array: the number of probes, 8 bytes little-endian.
_K_BYTES = 8


def optimal_bits(expected_items: int, false_positive_rate: float) -> float:
    """The information-theoretic size of a Bloom filter, ``-n ln p / ln² 2`` bits.

    >>> round(optimal_bits(10_000, 0.01))
    95851
    """
    return -expected_items * math.log(false_positive_rate) / math.log(2) ** 2


@functools.lru_cache(maxsize=64)
def _filter_bits(expected_items: int, false_positive_rate: float) -> int:
    return Bloom(expected_items, false_positive_rate).size_in_bits


@functools.lru_cache(maxsize=64)
def _empty_filter_bytes(expected_items: int, false_positive_rate: float) -> bytes:
    """``save_bytes`` of an empty filter of this shape: what a saved filter's length and probe count must be."""
    return Bloom(expected_items, false_positive_rate, _KEY_HASH).save_bytes()


def id_hash_base(hash_key: bytes | None = None) -> blake2b:
    """The prepared BLAKE2b object ids are hashed from: ``digest_size=8``, keyed with ``hash_key`` if given.

    A loop that hashes many ids inlines ``make_id_hasher``'s body with this object's ``copy``.
    """
    return blake2b(digest_size=8, key=hash_key) if hash_key else blake2b(digest_size=8)


def make_id_hasher(hash_key: bytes | None = None) -> Callable[[int], int]:
    """The function mapping a producer id to its stable 64-bit BLAKE2b digest, as an int (what rbloom hashes).

    ``digest_size=8`` BLAKE2b of the id's 8 little-endian bytes, keyed with ``hash_key`` if given. A
    prepared hash object is copied per id, which gives the same digest as a new one and is faster.
    """
    copy = id_hash_base(hash_key).copy

    def hash_id(producer_id: int) -> int:
        h = copy()
        h.update(producer_id.to_bytes(8, "little"))
        return _from_bytes(h.digest(), "little")

    return hash_id


_hash_id = make_id_hasher()


def check_producer_id(producer_id: object) -> int:
    """A producer id is an int in ``[0, 2**63 - 1]`` (not a bool); anything else is a ValueError."""
    if type(producer_id) is not int:
        raise ValueError(f"a producer id must be an int, got {type(producer_id).__name__}")
    if not 0 <= producer_id <= MAX_PRODUCER_ID:
        raise ValueError(f"a producer id must be in [0, 2**63 - 1], got {producer_id}")
    return producer_id


def check_now_ms(now_ms: object) -> int:
    if type(now_ms) is not int:
        raise ValueError(f"now_ms must be an int, got {type(now_ms).__name__}")
    return now_ms


def check_filter_shape(expected_items: object, false_positive_rate: object) -> None:
    if type(expected_items) is not int or not 1 <= expected_items <= 2**32:
        raise ValueError(f"expected_items must be an int in [1, 2**32], got {expected_items!r}")
    if (
        isinstance(false_positive_rate, bool)
        or not isinstance(false_positive_rate, int | float)
        or not 0.0 < false_positive_rate < 1.0
    ):
        raise ValueError(f"false_positive_rate must be a number in (0, 1), got {false_positive_rate!r}")


def check_hash_key(hash_key: object) -> None:
    if hash_key is not None and (not isinstance(hash_key, bytes) or len(hash_key) > 64):
        raise ValueError("hash_key must be None or at most 64 bytes (a BLAKE2b key)")


class TimedBloomFilter:
    """The producer ids seen within the last one to one and a half windows (KIP-936).

    >>> f = TimedBloomFilter(1_000, 0.01, window_ms=3_600_000)
    >>> t0 = 1_700_000_000_000
    >>> f.add(42, t0), f.add(42, t0 + 1), f.contains(42, t0 + 5_399_999), f.contains(42, t0 + 5_400_000)
    (True, False, True, False)
    """

    __slots__ = (
        "_current",
        "_current_serial",
        "_current_start_ms",
        "_hash",
        "_lifetime_ms",
        "_live",
        "_previous",
        "_previous_start_ms",
        "expected_items",
        "false_positive_rate",
        "window_ms",
    )

    def __init__(
        self,
        expected_items: int,
        false_positive_rate: float,
        window_ms: int,
        *,
        hash_key: bytes | None = None,
    ) -> None:
        check_filter_shape(expected_items, false_positive_rate)
        if type(window_ms) is not int or window_ms < 1:
            raise ValueError(f"window_ms must be an int ≥ 1, got {window_ms!r}")
        check_hash_key(hash_key)
        self.expected_items = expected_items
        self.false_positive_rate = float(false_positive_rate)
        self.window_ms = window_ms
        #: a filter is dropped once ``now - start >= 1.5 W``; for integer ms that is ``>= ceil(1.5 W)``
        self._lifetime_ms = (3 * window_ms + 1) // 2
        self._hash = _hash_id if not hash_key else make_id_hasher(hash_key)
        self._current: Bloom | None = None
        self._current_start_ms = 0
        #: the number ``_serials`` gave the current Bloom filter when it was made (0: none yet)
        self._current_serial = 0
        self._previous: Bloom | None = None
        self._previous_start_ms = 0
        #: ``_live_view``'s answer, for the batch path; reset to ``_STALE`` when a filter is made or dropped
        self._live: tuple[float, Bloom | None, Bloom | None, int] = _STALE

    # --- the lifecycle -----------------------------------------------------------------------------
    def add(self, producer_id: int, now_ms: int) -> bool:
        """Remember ``producer_id`` at ``now_ms``; True if it is new (in no live filter), False if seen.

        A seen id found only in the older filter is copied into the newer one (see the module doc).
        """
        check_producer_id(producer_id)
        check_now_ms(now_ms)
        return self._add_key(self._hash(producer_id), now_ms)

    def _add_key(self, key: int, now_ms: int) -> bool:
        current = self._current
        start = self._current_start_ms
        if current is None or now_ms - start >= self._lifetime_ms:
            # step 1: the first id (or the first after every filter expired) creates a filter
            self._live = _STALE
            self._previous = None
            self._current = current = Bloom(self.expected_items, self.false_positive_rate, _KEY_HASH)
            self._current_serial = next(_serials)
            self._current_start_ms = now_ms
            current.add(key)
            return True
        if now_ms - start >= self.window_ms:
            # step 2: a window after its start, a newer filter takes the ids; the older stays readable.
            # The one before (start - W) expired at start + 0.5 W, before now.
            self._live = _STALE
            previous = self._previous = current
            self._previous_start_ms = start
            self._current = current = Bloom(self.expected_items, self.false_positive_rate, _KEY_HASH)
            self._current_serial = next(_serials)
            self._current_start_ms = start + self.window_ms
        else:
            previous = self._previous
            if previous is not None and now_ms - self._previous_start_ms >= self._lifetime_ms:
                self._live = _STALE
                previous = self._previous = None  # step 3: the older filter is dropped at 1.5 W
        if key in current:
            return False
        current.add(key)
        return not (previous is not None and key in previous)

    def _live_view(self) -> tuple[int, Bloom, Bloom | None, int]:
        """``(until, current, previous, serial)`` right after ``_add_key(key, t)``; kept in ``_live``.

        The batch path hands an item whose time reaches ``until`` to ``_add_key`` and then calls this;
        for the next items (times ``t < until``) it reads and adds to the two filters directly. That
        is exact: for ``t < until``, ``_add_key(key, t)`` moves no filter (``t`` is within the current
        filter's window and, if there is an older filter, before it expires), so it is ``key in
        current``, ``current.add(key)``, ``key in previous``. Any other change resets ``_live``.
        ``serial`` is the current filter's number, never given to another filter: a key once found in
        or added to the filter numbered ``serial`` is in it for good (a Bloom filter only gains bits).
        """
        current = self._current
        if current is None:
            raise AssertionError("_live_view is only called right after _add_key")
        until = self._current_start_ms + self.window_ms
        previous = self._previous
        if previous is not None:
            until = min(until, self._previous_start_ms + self._lifetime_ms)
        live = self._live = (until, current, previous, self._current_serial)
        return live

    def contains(self, producer_id: int, now_ms: int) -> bool:
        """Whether ``producer_id`` is in a filter alive at ``now_ms`` (false positives possible); no change."""
        check_producer_id(producer_id)
        check_now_ms(now_ms)
        return self._contains_key(self._hash(producer_id), now_ms)

    def _contains_key(self, key: int, now_ms: int) -> bool:
        current = self._current
        if current is None or now_ms - self._current_start_ms >= self._lifetime_ms:
            return False
        if key in current:
            return True
        previous = self._previous
        return previous is not None and now_ms - self._previous_start_ms < self._lifetime_ms and key in previous

    def expire(self, now_ms: int) -> int:
        """Drop the filters expired at ``now_ms`` (frees their memory); the number still alive."""
        check_now_ms(now_ms)
        if self._previous is not None and now_ms - self._previous_start_ms >= self._lifetime_ms:
            self._live = _STALE
            self._previous = None
        if self._current is not None and now_ms - self._current_start_ms >= self._lifetime_ms:
            self._live = _STALE
            self._current = None
            self._previous = None
        return (self._current is not None) + (self._previous is not None)

    # --- hand-over ---------------------------------------------------------------------------------
    def export_state(self) -> tuple[int, bytes | None, int, bytes | None]:
        """``(current start, current filter, previous start, previous filter)``, each filter as rbloom's
        ``save_bytes`` (None: no such filter). Expired filters not yet dropped are included, as they are held
        here: ``restore_state`` of this state drops them at the same call as this filter would."""
        current, previous = self._current, self._previous
        return (
            self._current_start_ms,
            None if current is None else current.save_bytes(),
            self._previous_start_ms,
            None if previous is None else previous.save_bytes(),
        )

    def check_state(
        self, current_start_ms: int, current: bytes | None, previous_start_ms: int, previous: bytes | None
    ) -> None:
        """ValueError unless ``export_state`` of a filter of this shape could have given this state: times are
        ints, a filter's bytes have this shape's length and number of probes, an older filter exists only
        beside a current one, and starts one window before it."""
        if type(current_start_ms) is not int or type(previous_start_ms) is not int:
            raise ValueError("bloom filter state: start times must be ints")
        expected = _empty_filter_bytes(self.expected_items, self.false_positive_rate)
        for bits in (current, previous):
            if bits is None:
                continue
            if not isinstance(bits, bytes) or len(bits) != len(expected):
                raise ValueError(f"bloom filter state: a filter must be {len(expected)} bytes (this filter's shape)")
            if bits[:_K_BYTES] != expected[:_K_BYTES]:
                raise ValueError("bloom filter state: a filter with another number of probes")
        if previous is not None and (current is None or current_start_ms - previous_start_ms != self.window_ms):
            raise ValueError("bloom filter state: an older filter must start one window before the current one")

    def restore_state(
        self, current_start_ms: int, current: bytes | None, previous_start_ms: int, previous: bytes | None
    ) -> None:
        """Hold the filters ``export_state`` gave (checked first: ValueError, and nothing changes). The filters
        restored get new serials (see ``_live_view``): no key was ever found in them in this process."""
        self.check_state(current_start_ms, current, previous_start_ms, previous)
        self._live = _STALE
        self._current = None if current is None else Bloom.load_bytes(current, _KEY_HASH)
        self._current_serial = 0 if current is None else next(_serials)
        self._current_start_ms = current_start_ms
        self._previous = None if previous is None else Bloom.load_bytes(previous, _KEY_HASH)
        self._previous_start_ms = previous_start_ms

    # --- inspection --------------------------------------------------------------------------------
    def live_filters(self, now_ms: int) -> int:
        """How many filters are alive at ``now_ms`` (0, 1 or 2); no change."""
        check_now_ms(now_ms)
        live = 0
        if self._current is not None and now_ms - self._current_start_ms < self._lifetime_ms:
            live += 1
            if self._previous is not None and now_ms - self._previous_start_ms < self._lifetime_ms:
                live += 1
        return live

    def filter_starts_ms(self) -> list[int]:
        """Start times of the filters held, oldest first (expired ones included until dropped)."""
        starts = []
        if self._previous is not None:
            starts.append(self._previous_start_ms)
        if self._current is not None:
            starts.append(self._current_start_ms)
        return starts

    @property
    def next_expiry_ms(self) -> int | None:
        """When the oldest filter held expires, or None if none is held."""
        if self._previous is not None:
            return self._previous_start_ms + self._lifetime_ms
        if self._current is not None:
            return self._current_start_ms + self._lifetime_ms
        return None

    @property
    def lifetime_ms(self) -> int:
        """How long one filter lives: ``ceil(1.5 * window_ms)``."""
        return self._lifetime_ms

    @property
    def bits_per_filter(self) -> int:
        """Size of one filter in bits (rbloom rounds the optimum up to whole bytes)."""
        return _filter_bits(self.expected_items, self.false_positive_rate)

    @property
    def filters_held(self) -> int:
        return (self._current is not None) + (self._previous is not None)

    @property
    def bit_array_bytes(self) -> int:
        """Bytes of bit arrays held now (at most two filters' worth)."""
        return self.filters_held * (self.bits_per_filter // 8)

    def __repr__(self) -> str:
        return (
            f"TimedBloomFilter(expected_items={self.expected_items}, false_positive_rate={self.false_positive_rate}, "
            f"window_ms={self.window_ms}, filter_starts_ms={self.filter_starts_ms()})"
        )
