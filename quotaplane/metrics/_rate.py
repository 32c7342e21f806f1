"""Kafka's ``Rate`` and ``SimpleRate``, with one fused record-and-measure call for the quota hot path.

Every client request a quota manager accounts is one recording into a ``Rate`` over a ``WindowedSum``
followed by one measurement. Done with the reference methods that is eight Python calls (record, purge,
combine, padded window, oldest start...), most of them re-deriving what cannot have changed since the
previous request. ``Rate.record_and_measure`` does the same work in one call: it relies on what the
stat keeps up to date at each structural change (see ``SampledStat._restructured``) and on what the
previous measurement at the same millisecond proved. ``record`` / ``measure`` / ``window_size`` stay
the reference; tests compare the two on random workloads, bit for bit.
"""

from __future__ import annotations

import operator
import sys
from functools import partial, reduce

from ._config import MetricConfig, TimeUnit
from ._stats import SampledStat, WindowedSum, _QuotaCheck

__all__ = ["Rate", "SimpleRate"]

_SECONDS = TimeUnit.SECONDS  # module constant: Enum attribute lookups are slow on the hot path

#: ``_java_sum(values, 0.0)``: floats summed left to right with plain double additions, as Java's loop
#: does (``WindowedSum.combine``'s ``reduce``). CPython's ``sum`` does exactly that up to 3.11, in C and
#: without a call per element; 3.12 made it compensated (more exact, hence not Java's), so newer
#: interpreters fold with ``reduce`` as the reference does.
_java_sum = sum if sys.version_info < (3, 12) else partial(reduce, operator.add)


class Rate(_QuotaCheck):
    """A sampled total divided by the time it spans (Kafka's ``Rate``).

    The span is padded with whole windows until ``samples - 1`` windows have elapsed, so a first
    burst is not divided by a few milliseconds::

        elapsed = now - oldest.start
        if elapsed // W < S - 1:  elapsed += (S - 1 - elapsed // W) * W
        window_size = max(elapsed, 1)

    With S=11, W=1000: at 0.5 s into the first window the size is 10.5 s; at 1.2 s it is 10.2 s
    (a sawtooth), from 10 s on it is the true elapsed time.
    """

    __slots__ = (
        "_unit",
        "_win_config",
        "_win_deadline",
        "_win_epoch",
        "_win_now",
        "_win_seconds",
        "last_window_ms",
        "stat",
    )

    def __init__(self, stat: SampledStat | None = None, *, unit: TimeUnit = TimeUnit.SECONDS) -> None:
        self.stat = stat if stat is not None else WindowedSum()
        self._win_epoch = self._win_now = None  # nothing proved yet (see record_and_measure)
        self.unit = unit
        #: The padded window (ms) that the last ``record_and_measure`` divided by.
        self.last_window_ms = 1

    @property
    def unit(self) -> TimeUnit:
        return self._unit

    @unit.setter
    def unit(self, unit: TimeUnit) -> None:
        self._unit = unit
        self._win_config = None  # what record_and_measure remembers is in the old unit

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.stat.record(config, value, now_ms)

    def record_and_measure(self, config: MetricConfig, value: float, now_ms: int) -> float:
        """``record(config, value, now_ms)`` then ``measure(config, now_ms)``, bit for bit, in one call.

        Also sets ``last_window_ms`` to the padded window measured (the window a throttle time is
        computed over). For a ``WindowedSum`` per second this is the quota managers' hot path; every
        other stat or unit runs the reference methods.

        The last fused call remembers what it proved about the samples as they were then: when the
        current sample rolls over or another sample becomes obsolete (``_win_deadline``), the padded
        window at its ms (``_win_now``, ``_win_seconds``). While no sample has been added or reset since
        (the stat's epoch is the same object) and the config is the same, a call before that deadline
        only records into the current sample, pads the window from the oldest start the stat keeps and
        sums; a call at the same ms also reuses the window. Otherwise ``_record_and_measure_anew``.
        """
        stat = self.stat
        if stat._epoch is self._win_epoch and config is self._win_config:
            i = stat._current
            counts = stat._counts
            count = counts[i]
            if count < config.event_window:  # else the current sample is full: it rolls over
                if now_ms == self._win_now:
                    values = stat._values
                    values[i] += value  # WindowedSum's fold
                    counts[i] = count + 1
                    stat._lasts[i] = now_ms
                    return _java_sum(values, 0.0) / self._win_seconds
                if now_ms < self._win_deadline:  # no time roll, and nothing to purge (see _anew)
                    values = stat._values
                    values[i] += value
                    counts[i] = count + 1
                    stat._lasts[i] = now_ms
                    window_ms = config.time_window_ms
                    padded_windows = config.samples - 1
                    elapsed = now_ms - stat._oldest_start  # _padded_window_ms, written out
                    full_windows = elapsed // window_ms
                    if full_windows < padded_windows:
                        elapsed += (padded_windows - full_windows) * window_ms
                    if elapsed < 1:
                        elapsed = 1
                    self.last_window_ms = elapsed
                    self._win_now = now_ms
                    self._win_seconds = seconds = elapsed / 1000.0
                    return _java_sum(values, 0.0) / seconds
        return self._record_and_measure_anew(config, value, now_ms)

    def _record_and_measure_anew(self, config: MetricConfig, value: float, now_ms: int) -> float:
        """``record_and_measure`` without what an earlier call proved; remembers what this one proves."""
        stat = self.stat
        if type(stat) is not WindowedSum or self._unit is not _SECONDS or not stat._starts:
            self._win_config = None
            return self._reference_record_and_measure(config, value, now_ms)
        window_ms = config.time_window_ms
        i = stat._current
        counts = stat._counts
        if now_ms - stat._starts[i] >= window_ms or counts[i] >= config.event_window:
            i = stat._advance(config, now_ms)
        values = stat._values
        values[i] += value  # WindowedSum's fold
        counts[i] += 1
        stat._lasts[i] = now_ms
        expire_ms = config.samples * window_ms
        # the current sample's last event is now: only another sample can be obsolete
        if now_ms - stat._others_last >= expire_ms:
            stat.purge_obsolete_samples(config, now_ms)
        elapsed = now_ms - stat._oldest_start  # _padded_window_ms, written out
        full_windows = elapsed // window_ms
        if full_windows < config.samples - 1:
            elapsed += (config.samples - 1 - full_windows) * window_ms
        if elapsed < 1:
            elapsed = 1
        self.last_window_ms = elapsed
        # Until the samples change, a recording at t rolls the current sample over iff t >= its start + W,
        # and (its own last event being t) makes a purge reset another sample iff t >= that sample's last
        # event + S * W: the earlier of the two is the deadline before which neither happens.
        self._win_deadline = min(stat._starts[stat._current] + window_ms, stat._others_last + expire_ms)
        self._win_epoch = stat._epoch
        self._win_config = config
        self._win_now = now_ms
        self._win_seconds = seconds = elapsed / 1000.0
        return _java_sum(values, 0.0) / seconds

    def _reference_record_and_measure(self, config: MetricConfig, value: float, now_ms: int) -> float:
        self.record(config, value, now_ms)
        measured, self.last_window_ms = self.measure_with_window(config, now_ms)
        return measured

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A subclass that changes how a Rate records or measures gets the reference ``record_and_measure``:
        the fused one writes ``Rate``'s own recording, purge and padding out."""
        super().__init_subclass__(**kwargs)
        changed = {"record", "measure", "measure_with_window", "window_size", "_padded_window_ms"} & cls.__dict__.keys()
        if changed and "record_and_measure" not in cls.__dict__:
            cls.record_and_measure = Rate._reference_record_and_measure  # type: ignore[method-assign]

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.measure_with_window(config, now_ms)[0]

    def measure_with_window(self, config: MetricConfig, now_ms: int) -> tuple[float, int]:
        """The rate and the padded window (ms) it is divided by, after one purge.

        The window is what ``window_size`` would return at the same ``now_ms`` (a second purge at the
        same time can reset nothing), so a throttle time can be computed without measuring again.
        """
        stat = self.stat
        stat.purge_obsolete_samples(config, now_ms)
        total = stat.combine(config, now_ms)
        window_ms = self._padded_window_ms(config, now_ms)
        unit = self._unit
        return total / (window_ms / 1000.0 if unit is _SECONDS else unit.convert(window_ms)), window_ms

    def window_size(self, config: MetricConfig, now_ms: int) -> int:
        """The span, in ms, that the measured total is divided by (after purging)."""
        self.stat.purge_obsolete_samples(config, now_ms)
        return self._padded_window_ms(config, now_ms)

    def _padded_window_ms(self, config: MetricConfig, now_ms: int) -> int:
        window_ms = config.time_window_ms
        elapsed = now_ms - self.stat.oldest_start_ms(now_ms)
        full_windows = elapsed // window_ms
        min_full_windows = config.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * window_ms
        # at the very start of a window with no prior samples the span is 0: call it 1 ms
        return max(elapsed, 1)

    def __repr__(self) -> str:
        return f"Rate(unit={self._unit.name}, stat={self.stat!r})"


class SimpleRate(Rate):
    """A rate over the true elapsed time, but never less than one window (replication quotas)."""

    __slots__ = ()

    def _padded_window_ms(self, config: MetricConfig, now_ms: int) -> int:
        elapsed = now_ms - self.stat.oldest_start_ms(now_ms)
        return max(elapsed, config.time_window_ms)
