"""Kafka's measurable stats: sampled (WindowedSum, WindowedCount, Avg, Max, Min), TokenBucket, and the
unsampled Value, CumulativeSum and CumulativeCount (``Rate`` and ``SimpleRate`` are in ``_rate``).

Every stat takes its ``MetricConfig`` and the time with each call (Kafka's ``record(config, value,
timeMs)`` and ``measure(config, now)``), so a quota change swaps the config and keeps the samples.

Samples are kept as parallel lists (start, last event, value, count) rather than one object per
sample: the quota hot path then measures with a few C-level calls (``min``, a left-to-right float
sum) and gives bit-for-bit the sums Java computes.
"""

from __future__ import annotations

import itertools
import math
import operator
from array import array
from collections.abc import Sequence
from functools import reduce
from typing import Protocol, runtime_checkable

from ._config import LONG_MAX_VALUE, MetricConfig, Quota, TimeUnit

__all__ = [
    "Avg",
    "CumulativeCount",
    "CumulativeSum",
    "Max",
    "MeasurableStat",
    "Min",
    "SampledStat",
    "TokenBucket",
    "Value",
    "WindowedCount",
    "WindowedSum",
]

_add = operator.add
_SECONDS = TimeUnit.SECONDS  # module constant: Enum attribute lookups are slow on the hot path

#: Every structural change of any sampled stat takes the next number: equal epochs mean "same stat, same
#: sample starts, same current sample" (a number is never reused, even by another stat).
_epochs = itertools.count()


@runtime_checkable
class MeasurableStat(Protocol):
    """A stat a sensor records into and a metric measures (Kafka's ``MeasurableStat``)."""

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None: ...

    def measure(self, config: MetricConfig, now_ms: int) -> float: ...


class _QuotaCheck:
    """How a ``Sensor`` decides that a measured value violates its metric's quota."""

    __slots__ = ()

    def is_violated(self, quota: Quota, value: float) -> bool:
        return not quota.acceptable(value)


class SampledStat(_QuotaCheck):
    """A value measured over ``samples`` windows of ``time_window_ms`` (or ``event_window`` events).

    Kafka keeps ``samples + 1`` slots: the extra one is the "overlapping" sample, which started
    before the monitored window but has events inside it. A sample is purged (reset to empty at
    ``now``) only when its *last event* is ``samples * time_window_ms`` old or more.
    """

    __slots__ = (
        "_counts",
        "_current",
        "_epoch",
        "_initial_value",
        "_lasts",
        "_oldest_start",
        "_others_last",
        "_starts",
        "_values",
    )

    #: How a recorded value folds into the current sample's value (a builtin, so it costs no frame).
    _fold = staticmethod(_add)

    def __init__(self, initial_value: float) -> None:
        self._initial_value = initial_value
        self._current = 0
        self._starts: list[int] = []
        self._lasts: list[int] = []
        self._values: list[float] = []
        self._counts: list[int] = []
        self._restructured()

    # --- recording -------------------------------------------------------------------------------
    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        starts = self._starts
        if not starts:
            self._append_sample(now_ms)
        i = self._current
        if now_ms - starts[i] >= config.time_window_ms or self._counts[i] >= config.event_window:
            i = self._advance(config, now_ms)
        values = self._values
        values[i] = self._fold(values[i], value)
        self._counts[i] += 1
        self._lasts[i] = now_ms

    def _advance(self, config: MetricConfig, now_ms: int) -> int:
        # keep one extra slot for the "overlapping" sample (see purge_obsolete_samples)
        i = self._current = (self._current + 1) % (config.samples + 1)
        if i >= len(self._starts):
            self._append_sample(now_ms)
        else:
            self._reset(i, now_ms)
        return i

    def _append_sample(self, now_ms: int) -> None:
        self._starts.append(now_ms)
        self._lasts.append(now_ms)
        self._values.append(self._initial_value)
        self._counts.append(0)
        self._restructured()

    def _reset(self, i: int, now_ms: int) -> None:
        self._starts[i] = now_ms
        self._lasts[i] = now_ms
        self._values[i] = self._initial_value
        self._counts[i] = 0
        self._restructured()

    def _restructured(self) -> None:
        """Derive what only a new or reset sample (or a new current sample) can change.

        Between two such changes a recording touches the current sample alone, so the oldest start and
        the last event of every *other* sample stay what they are here: ``min(lasts)`` is then
        ``min(_others_last, lasts[current])`` without looking at the other samples again.
        """
        self._epoch = next(_epochs)
        starts, current = self._starts, self._current
        self._oldest_start = min(starts) if starts else None
        others = self._lasts[:current] + self._lasts[current + 1 :]
        self._others_last = min(others) if others else math.inf

    # --- measuring -------------------------------------------------------------------------------
    def measure(self, config: MetricConfig, now_ms: int) -> float:
        self.purge_obsolete_samples(config, now_ms)
        return self.combine(config, now_ms)

    def purge_obsolete_samples(self, config: MetricConfig, now_ms: int) -> None:
        """Reset every sample whose last event is ``samples * time_window_ms`` old or more.

        Samples overlapping the monitored window are kept even if they started before it.
        """
        lasts = self._lasts
        if not lasts:
            return
        expire_age = config.samples * config.time_window_ms
        if now_ms - min(lasts) < expire_age:
            return  # the common case: nothing is obsolete
        for i, last in enumerate(lasts):
            if now_ms - last >= expire_age:
                self._reset(i, now_ms)

    def oldest_start_ms(self, now_ms: int) -> int:
        """Start of the oldest sample (Kafka's ``oldest(now).startTimeMs``); the first wins ties.

        Like Kafka, this creates the first sample (at ``now_ms``) when there is none.
        """
        if not self._starts:
            self._append_sample(now_ms)
        return min(self._starts)

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        raise NotImplementedError

    def export_samples_into(self, starts: array, lasts: array, values: array, counts: array) -> tuple[int, int]:
        """Append the samples to four ``array`` columns (``q``, ``q``, ``d``, ``q``) and return ``(current, number
        of samples)``: the copy a shard takes under its serving lock. Arrays of numbers are not tracked by the
        garbage collector: a list per sensor set off collections that cost more than the copy."""
        starts.fromlist(self._starts)
        lasts.fromlist(self._lasts)
        values.fromlist(self._values)
        counts.fromlist(self._counts)
        return self._current, len(self._starts)

    def restore_samples(
        self,
        current: int,
        starts: Sequence[int],
        lasts: Sequence[int],
        values: Sequence[float],
        counts: Sequence[int],
        *,
        max_samples: int | None = None,
    ) -> None:
        """Replace the samples with those ``export_samples_into`` copied (checked: a bad state raises ValueError and
        changes nothing). Nothing is purged here: samples obsolete by now go at the next measurement, by
        the same purge, at the same time, as in the stat that was exported."""
        size = len(starts)
        if not (len(lasts) == len(values) == len(counts) == size):
            raise ValueError("samples: starts, lasts, values and counts must have one entry per sample")
        if max_samples is not None and size > max_samples + 1:
            raise ValueError(f"samples: {size} slots, more than samples + 1 = {max_samples + 1}")
        if type(current) is not int or not (0 <= current < size or current == size == 0):
            raise ValueError(f"samples: current index {current!r} outside 0..{size - 1}")
        if not all(type(t) is int for t in itertools.chain(starts, lasts, counts)):
            raise ValueError("samples: starts, lasts and counts must be integers")
        if not all(type(v) in (int, float) for v in values):
            raise ValueError("samples: values must be numbers")
        self._current = current
        self._starts = list(starts)
        self._lasts = list(lasts)
        self._values = [float(v) for v in values]
        self._counts = list(counts)
        self._restructured()

    @property
    def sample_count(self) -> int:
        """Number of sample slots in use (at most ``samples + 1``)."""
        return len(self._starts)

    def __repr__(self) -> str:
        samples = ", ".join(
            f"(start={s}, last={ls}, value={v}, events={c})"
            for s, ls, v, c in zip(self._starts, self._lasts, self._values, self._counts, strict=True)
        )
        return f"{type(self).__name__}(current={self._current}, samples=[{samples}])"


class WindowedSum(SampledStat):
    """The sum of the values recorded in the retained samples."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0.0)

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        # left to right from 0.0, exactly as Java sums (builtin sum() compensates on newer Pythons)
        return reduce(_add, self._values, 0.0)


class WindowedCount(WindowedSum):
    """The number of recordings in the retained samples."""

    __slots__ = ()

    @staticmethod
    def _fold(current: float, value: float) -> float:
        return current + 1.0


class Avg(SampledStat):
    """The mean of the recorded values over the retained samples; NaN when there are none."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0.0)

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        count = sum(self._counts)
        return math.nan if count == 0 else reduce(_add, self._values, 0.0) / count


class Max(SampledStat):
    """The largest recorded value over the retained samples; NaN when there are none."""

    __slots__ = ()
    _fold = staticmethod(max)

    def __init__(self) -> None:
        super().__init__(-math.inf)

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        return math.nan if sum(self._counts) == 0 else max(self._values, default=-math.inf)


class Min(SampledStat):
    """The smallest recorded value over the retained samples; NaN when there are none."""

    __slots__ = ()
    _fold = staticmethod(min)

    def __init__(self) -> None:
        super().__init__(math.inf)

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        return math.nan if sum(self._counts) == 0 else min(self._values, default=math.inf)


class TokenBucket:
    """Credits refilled at the quota's rate up to a burst of ``samples * window * quota``.

    Compared with a sampled ``Rate`` (numbers from Kafka's docs): with Q=5/s, S=100, W=1 s, a burst
    of 560 holds the sampled rate above quota for 100 s, though the throttle computed is 12 s. The
    bucket drops to -60 credits and is back at zero after exactly 12 s (-(-60)/5).

    Initial state is 0 tokens at ``last_update_ms`` 0, as in Kafka; the bucket is violated only when
    tokens are below zero (zero is fine). With no quota the bucket neither records nor limits.
    """

    __slots__ = ("last_update_ms", "tokens", "unit")

    def __init__(self, *, unit: TimeUnit = TimeUnit.SECONDS) -> None:
        self.unit = unit
        self.tokens = 0.0
        self.last_update_ms = 0

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        quota = config.quota
        if quota is None:
            return float(LONG_MAX_VALUE)
        self._refill(quota.bound, self._burst(config, quota.bound), now_ms)
        return self.tokens

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        quota = config.quota
        if quota is None:
            return
        burst = self._burst(config, quota.bound)
        self._refill(quota.bound, burst, now_ms)
        self.tokens = min(burst, self.tokens - value)

    def is_violated(self, quota: Quota, value: float) -> bool:
        return value < 0

    def _refill(self, quota: float, burst: float, now_ms: int) -> None:
        elapsed_ms = now_ms - self.last_update_ms
        elapsed = elapsed_ms / 1000.0 if self.unit is _SECONDS else self.unit.convert(elapsed_ms)
        self.tokens = min(burst, self.tokens + quota * elapsed)
        self.last_update_ms = now_ms

    def _burst(self, config: MetricConfig, quota: float) -> float:
        window_ms = config.time_window_ms
        return config.samples * (window_ms / 1000.0 if self.unit is _SECONDS else self.unit.convert(window_ms)) * quota

    def __repr__(self) -> str:
        return f"TokenBucket(unit={self.unit.name}, tokens={self.tokens}, last_update_ms={self.last_update_ms})"


class Value(_QuotaCheck):
    """The last recorded value."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.value = value

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.value


class CumulativeSum(_QuotaCheck):
    """The total of everything recorded, never windowed."""

    __slots__ = ("total",)

    def __init__(self, value: float = 0.0) -> None:
        self.total = value

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.total += value

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.total


class CumulativeCount(CumulativeSum):
    """The number of recordings, never windowed."""

    __slots__ = ()

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.total += 1.0
