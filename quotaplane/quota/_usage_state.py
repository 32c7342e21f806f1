"""The usage windows of the client quota managers copied out, as bytes, and back (a shard's usage checkpoint).

A shard that Ray restarts rebuilds its config from the log, but its quota sensors live in the process:
without their samples every tenant it owns may send up to a whole quota window of extra traffic. This
module exports, for each quota sensor of the PRODUCE, FETCH and REQUEST managers, its metric tags (as
Kafka's sensor has them, in order: they name the sensor), the time of its last recording (for Kafka's
one-hour expiry) and its Rate's samples exactly as ``SampledStat`` keeps them; and imports them into
managers built from the same config. Export then import is the identity: a manager that continues its
workload after an import answers the same throttle times, bit for bit, as one that never stopped.

The export (``UsageSnapshot``) is columns of numbers (``array``: a copy that allocates nothing the garbage
collector tracks, which a shard takes under its serving lock) and the metric names; its bytes
(``to_bytes`` / ``from_bytes``) are a versioned JSON header (tags, window settings, byte order) and the
raw columns, ~32 bytes a sample slot. It holds no quota: quotas come from the log. An import creates each
sensor through the manager's own path for its tags (``quota_sensor_for_tags``), so it gets the quota those
tags resolve to *now*, then puts the samples back. Nothing is purged at import: samples that are obsolete
by then are dropped by the stat's own purge at its next measurement, as in the uninterrupted stat. A
manager whose window settings (``quota.window.num``, ``quota.window.size.seconds``) differ from the
exported ones is skipped: its samples would not mean the same.

The throttle-time and quota-value sensors are not kept (the first only reports, the second is rebuilt
from the quota); neither are the shared exempt-request sensor nor controller mutations (token buckets).
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any

from ..metrics import MetricName, Rate, SampledStat
from . import _compiled
from ._factory import QuotaManagers
from ._types import QuotaType

__all__ = [
    "PART_COMPILED",
    "PART_PURE",
    "TAGS_PART",
    "USAGE_STATE_VERSION",
    "UsageImport",
    "UsageSnapshot",
    "export_usage",
    "forget_usage",
    "import_usage",
    "usage_key",
]

#: Bumped on any change of the snapshot's layout; bytes of another version are a ValueError.
USAGE_STATE_VERSION = 1

#: The managers whose windows are kept.
_KEPT = (QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST)
#: Sensors whose tags ``UsageSnapshot.to_bytes`` encodes between two pauses.
TAGS_PART = 256
#: Sensor names ``export_usage`` copies under one hold of the serving lock: with the compiled copy (~1.3 us a
#: quota sensor, ~0.15 us any other) and with the reference (~6 us a quota sensor).
PART_COMPILED = 512
PART_PURE = 128
#: Per sensor and per sample slot: the columns in the order their bytes follow the header.
_PER_SENSOR = ("last_records", "currents", "sizes")
_PER_SAMPLE = ("starts", "lasts", "counts", "values")


class UsageImport(dict[str, int]):
    """What ``import_usage`` did: sensors restored per quota type name, and ``skipped`` (sensors of a manager
    whose window settings changed, or whose metric is no longer a sampled Rate)."""


@dataclass(slots=True)
class UsageColumns:
    """One manager's quota sensors as columns: sensor ``k`` is ``names[k]`` (its quota metric, whose tags
    name the sensor), ``last_records[k]``, ``currents[k]`` and ``sizes[k]`` consecutive entries of
    ``starts`` / ``lasts`` / ``counts`` / ``values`` (what ``SampledStat`` keeps per sample)."""

    samples: int
    window_ms: int
    names: list[MetricName] = field(default_factory=list)
    last_records: array = field(default_factory=lambda: array("q"))
    currents: array = field(default_factory=lambda: array("q"))
    sizes: array = field(default_factory=lambda: array("q"))
    starts: array = field(default_factory=lambda: array("q"))
    lasts: array = field(default_factory=lambda: array("q"))
    counts: array = field(default_factory=lambda: array("q"))
    values: array = field(default_factory=lambda: array("d"))

    def check(self) -> None:
        """ValueError unless the columns fit together and every sensor fits ``samples + 1`` slots."""
        n = len(self.names)
        if not (len(self.last_records) == len(self.currents) == len(self.sizes) == n):
            raise ValueError("usage snapshot: per-sensor columns of different lengths")
        total = sum(self.sizes)
        if not (len(self.starts) == len(self.lasts) == len(self.counts) == len(self.values) == total):
            raise ValueError("usage snapshot: sample columns do not hold the sensors' samples")
        for size, current in zip(self.sizes, self.currents, strict=True):
            if not 0 <= size <= self.samples + 1:
                raise ValueError(f"usage snapshot: {size} samples do not fit {self.samples} + 1 slots")
            if not (0 <= current < size or current == size == 0):
                raise ValueError(f"usage snapshot: current sample {current} outside {size} samples")


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    """The usage windows of the PRODUCE, FETCH and REQUEST managers (by quota type name), copied."""

    managers: dict[str, UsageColumns]

    def to_bytes(self, pause: Callable[[], None] | None = None) -> bytes:
        """A 4-byte header length, the JSON header (version, byte order, per manager its window settings,
        metric name and sensor tags), then each manager's columns as raw machine numbers: ``to_chunks``, joined.

        ``pause`` (a checkpoint's hand-over, ``_usage_checkpoint``) runs between the parts of the sensors' tags:
        one ``json.dumps`` of every sensor's tags holds the GIL for its whole length (4.5 ms at 4,000 sensors on
        the 2-core machine), so a shard's serving thread waited that long for it; a part's (``TAGS_PART``
        sensors) is ~0.3 ms. The bytes are those of one ``json.dumps`` of the whole header."""
        return b"".join(self.to_chunks(pause))

    def to_chunks(
        self, pause: Callable[[], None] | None = None, tags: TagsMemo | None = None
    ) -> list[bytes | memoryview]:
        """``to_bytes``' bytes as a list of chunks, without joining them: the header's, then each column's raw
        numbers as a byte view of the snapshot's own arrays (not copied; the snapshot is not changed afterwards).
        A checkpoint writes them and sums their CRC chunk by chunk: the 2.6 MB of a 6,000-sensor snapshot were
        copied three times (each column's ``tobytes``, the join, the checkpoint's header in front), holding the
        GIL each time. ``tags``: the JSON of each sensor's tags kept from the last snapshot encoded with it
        (``TagsMemo``): a sensor's tags do not change, and their ``json.dumps`` was most of the header's time."""
        entries = []
        columns: list[memoryview] = []
        for kind, c in self.managers.items():
            settings = {
                "kind": kind,
                "samples": c.samples,
                "window_ms": c.window_ms,
                "metric": [c.names[0].name, c.names[0].group] if c.names else None,
            }
            if tags is None:
                text = _json_list_in_parts([name.tag_items for name in c.names], pause)  # pairs: JSON lists
            else:
                text = tags.encode(kind, c.names, pause)
            entries.append(f'{_json(settings)[:-1]},"tags":{text},"total":{len(c.starts)}}}')
            columns += [memoryview(getattr(c, column)).cast("B") for column in (*_PER_SENSOR, *_PER_SAMPLE)]
        top = _json({"version": USAGE_STATE_VERSION, "byteorder": sys.byteorder})
        encoded = f'{top[:-1]},"managers":[{",".join(entries)}]}}'.encode()
        return [len(encoded).to_bytes(4, "big"), encoded, *columns]

    @classmethod
    def from_bytes(cls, data: bytes) -> UsageSnapshot:
        """The snapshot ``to_bytes`` wrote; ValueError for anything else (another version, a cut or bad file)."""
        try:
            length = int.from_bytes(data[:4], "big")
            header = json.loads(data[4 : 4 + length])
            if not isinstance(header, dict) or header.get("version") != USAGE_STATE_VERSION:
                raise ValueError(f"not a usage snapshot of version {USAGE_STATE_VERSION}")
            at = 4 + length
            managers = {}
            for entry in header["managers"]:
                c = UsageColumns(int(entry["samples"]), int(entry["window_ms"]))
                name, group = entry["metric"] if entry["tags"] else ("", "")
                c.names = [MetricName(name, group, "", dict(tags)) for tags in entry["tags"]]
                for column in (*_PER_SENSOR, *_PER_SAMPLE):
                    values = getattr(c, column)
                    count = len(c.names) if column in _PER_SENSOR else int(entry["total"])
                    size = count * values.itemsize
                    if len(data) < at + size:
                        raise ValueError("usage snapshot cut short")
                    values.frombytes(data[at : at + size])
                    at += size
                    if header["byteorder"] != sys.byteorder:
                        values.byteswap()
                c.check()
                managers[str(entry["kind"])] = c
        except (KeyError, TypeError, AttributeError, OverflowError) as exc:
            raise ValueError(f"not a usage snapshot: {exc!r}") from None
        if at != len(data):
            raise ValueError("usage snapshot has bytes after its columns")
        return cls(managers)


class TagsMemo:
    """The JSON text of each sensor's tags (``[[key, value], ...]``), by manager and metric name, kept between the
    snapshots one checkpointer encodes (``UsageSnapshot.to_chunks``). Each encoding of a manager's names keeps only
    those names, so the memo holds the sensors of the last snapshot and no more.

    Why: a shard's checkpoint encoded every sensor's tags every second (7.5 ms of the GIL at 6,000 quota sensors),
    though a metric name's tags never change. With the memo a checkpoint encodes only the sensors that are new
    since the last one, and joins the kept texts for the others (~0.1 us a sensor)."""

    __slots__ = ("_texts",)

    #: kept texts joined between two pauses (the new ones encoded between two pauses are ``TAGS_PART``)
    KEPT_PART = 16 * TAGS_PART

    def __init__(self) -> None:
        #: per manager, ``id(name) -> (name, text)``: by identity, since ``MetricName.__hash__`` is a Python call
        #: (twice a sensor, a fifth of the encoding); the entry holds the name, so its id is not reused meanwhile
        self._texts: dict[str, dict[int, tuple[MetricName, str]]] = {}

    def __len__(self) -> int:
        return sum(map(len, self._texts.values()))

    def encode(self, kind: str, names: list[MetricName], pause: Callable[[], None] | None) -> str:
        """``_json([name.tag_items for name in names])``, exactly, for manager ``kind``; ``pause()`` after each
        ``TAGS_PART`` names encoded anew or ``KEPT_PART`` names taken from the memo, whichever comes first."""
        kept = self._texts.get(kind, {})
        texts: dict[int, tuple[MetricName, str]] = {}
        parts = []
        fresh = taken = 0
        for name in names:
            key = id(name)
            entry = kept.get(key)
            if entry is None or entry[0] is not name:
                entry = (name, _tags_json(name.tag_items))
                fresh += 1
            else:
                taken += 1
            texts[key] = entry
            parts.append(entry[1])
            if pause is not None and (fresh >= TAGS_PART or taken >= self.KEPT_PART):
                pause()
                fresh = taken = 0
        self._texts[kind] = texts
        return f"[{','.join(parts)}]"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _tags_json(tags: tuple[tuple[str, str], ...]) -> str:
    """``_json(tags)`` for one sensor's tag pairs, written from its strings (``json.dumps``' own string encoder):
    a ``json.dumps`` call a sensor was ~5 us, this ~1 (a shard's first checkpoint encodes every sensor's tags)."""
    if not all(type(key) is str and type(value) is str for key, value in tags):
        return _json(tags)
    return f"[{','.join(f'[{_json_str(key)},{_json_str(value)}]' for key, value in tags)}]"


def _json_list_in_parts(values: list[Any], pause: Callable[[], None] | None) -> str:
    """``_json(values)``, encoded ``TAGS_PART`` values at a time with ``pause()`` between the parts."""
    if pause is None or len(values) <= TAGS_PART:
        return _json(values)
    parts = []
    for start in range(0, len(values), TAGS_PART):
        if start:
            pause()
        parts.append(_json(values[start : start + TAGS_PART])[1:-1])
    return f"[{','.join(parts)}]"


def usage_key(quota_type: QuotaType, tags: Mapping[str, str]) -> str:
    """The routing key of a quota sensor, as a gateway computes it from the same metric tags:
    ``<QuotaType name> NUL <user tag> NUL <client-id tag>`` (which shard owns the sensor)."""
    return f"{quota_type.name}\x00{tags.get('user', '')}\x00{tags.get('client-id', '')}"


def export_usage(
    quotas: QuotaManagers,
    owns: Callable[[str], bool] | None = None,
    *,
    hold: Callable[[], AbstractContextManager[Any]] | None = None,
    part: int | None = None,
) -> UsageSnapshot:
    """A copy of the usage windows of the PRODUCE, FETCH and REQUEST managers. One pass over the sensors: a
    quota sensor is named ``<quota type>-<tags>``, the other sensors of a kind have longer prefixes.
    ``owns``: only the sensors whose routing key (:func:`usage_key`) it accepts (a reshard's hand-over).

    The copy must not interleave with recordings. Without ``hold`` the caller holds its serving lock around
    the whole call: one cut of every sensor, as a reshard's hand-off needs. With ``hold`` (a context such as
    the serving lock) the copy takes it once for the names of the sensors, then once for each ``part`` of them,
    and the shard serves between the parts: a checkpoint, where each sensor's own samples must be whole but the
    sensors need not be one cut, held a shard's decisions for ~2 ms per 1,000 sensors (measured: 18-21 ms at
    9,000 quota sensors, every second) and now for one part at a time (``hold`` may hand the lock over after
    each, as the checkpoint's does). A sensor removed between the parts (expired, handed to another owner) is not
    copied; one created meanwhile under a new name goes in the next copy (under a name listed, in this one).

    The names, not ``(name, sensor)`` pairs: the list of pairs took 3.2-4.8 ms at 18,000 sensors (a tuple each,
    and every sensor's reference count touched), the longest hold of a checkpoint; the names take 0.2. A part is
    ``part`` names (default: ``PART_COMPILED`` where the compiled copy runs, ``PART_PURE`` otherwise, both ~0.3
    ms of the serving lock at the bench's mix of quota and other sensors)."""
    # the compiled copy runs where it is built and nothing is filtered by routing key (a checkpoint); the reference
    # otherwise (a reshard's hand-over)
    compiled = _compiled.record_compiled if owns is None else None
    if part is None:
        part = PART_PURE if compiled is None else PART_COMPILED
    if part < 1:
        raise ValueError(f"part must be >= 1, got {part}")
    managers: dict[str, UsageColumns] = {}
    kinds = {}
    for quota_type in _KEPT:
        manager = quotas.client_manager(quota_type)
        c = managers[str(quota_type)] = UsageColumns(manager.config.num_quota_samples, manager.config.quota_window_ms)
        kinds[str(quota_type)] = (manager.quota_metric_name, c, (c.starts, c.lasts, c.values, c.counts), quota_type)
    registry = quotas.metrics.sensors  # every manager records in the one registry
    copy = _copier(kinds, owns, registry, compiled)
    if hold is None:
        copy(registry)
        return UsageSnapshot(managers)
    with hold():
        names = list(registry)
    for start in range(0, len(names), part):
        with hold():
            copy(names[start : start + part])
    return UsageSnapshot(managers)


def _copier(
    kinds: Mapping[str, tuple[str, UsageColumns, tuple[array, ...], QuotaType]],
    owns: Callable[[str], bool] | None,
    registry: dict[str, Any],
    compiled: Any,
) -> Callable[[Iterable[str]], None]:
    """``_copy_sensors`` bound to ``kinds``, ``owns`` and ``registry``: through ``compiled.copy_quota_sensors`` when
    ``compiled`` (the compiled core module) is given, the reference otherwise (and for the sensors of a shape the
    compiled copy hands back)."""

    def reference(names: Iterable[str]) -> None:
        _copy_sensors(names, kinds, owns, registry)

    if compiled is None:
        return reference
    columns = {
        group: (metric_name, c.names, c.last_records, c.currents, c.sizes, c.starts, c.lasts, c.values, c.counts)
        for group, (metric_name, c, _, _) in kinds.items()
    }
    return lambda names: compiled.copy_quota_sensors(names, registry, columns, reference)


def _copy_sensors(
    names: Iterable[str],
    kinds: Mapping[str, tuple[str, UsageColumns, tuple[array, ...], QuotaType]],
    owns: Callable[[str], bool] | None,
    registry: Mapping[str, Any],
) -> None:
    """Append the quota sensors that ``registry`` holds under ``names`` to their manager's columns (a name it no
    longer holds, its sensor removed since the names were listed, is skipped)."""
    for name in names:
        group = name.partition("-")[0]
        kind = kinds.get(group)
        sensor = None if kind is None else registry.get(name)
        if sensor is None:
            continue
        metric_name, c, into, quota_type = kind
        for metric in sensor.metrics:
            stat = metric.stat
            if (
                isinstance(stat, Rate)
                and isinstance(stat.stat, SampledStat)
                and metric.metric_name.name == metric_name
                and metric.metric_name.group == group
                and (owns is None or owns(usage_key(quota_type, metric.metric_name.tags)))
            ):
                current, size = stat.stat.export_samples_into(*into)
                c.names.append(metric.metric_name)
                c.last_records.append(sensor.last_record_time_ms)
                c.currents.append(current)
                c.sizes.append(size)


def forget_usage(quotas: QuotaManagers, snapshot: UsageSnapshot) -> int:
    """Remove the sensors of the clients in ``snapshot`` (their quota, throttle-time and quota-value sensors)
    from ``quotas``: a shard that handed their usage to another owner must neither report nor keep them (the
    managers' sensor caches follow the registry's removals). The number of quota sensors removed."""
    removed = 0
    metrics = quotas.metrics
    for kind, c in snapshot.managers.items():
        for name in c.names:
            suffix = ":".join(name.tags.values())
            if metrics.get_sensor(f"{kind}-{suffix}") is not None:
                removed += 1
            for sensor in (f"{kind}-{suffix}", f"{kind}ThrottleTime-{suffix}", f"{kind}QuotaValue-{suffix}"):
                metrics.remove_sensor(sensor)
    return removed


def import_usage(quotas: QuotaManagers, snapshot: UsageSnapshot, now_ms: int) -> UsageImport:
    """Put ``export_usage``'s windows back into ``quotas`` (built from the same config, after the config
    replay). A snapshot whose columns do not fit together raises ValueError before anything changes."""
    if not isinstance(snapshot, UsageSnapshot):
        raise ValueError(f"expected a UsageSnapshot, got {type(snapshot).__name__}")
    for c in snapshot.managers.values():
        c.check()
    done = UsageImport({str(quota_type): 0 for quota_type in _KEPT})
    done["skipped"] = 0
    for quota_type in _KEPT:
        c = snapshot.managers.get(str(quota_type))
        if c is None:
            continue
        manager = quotas.client_manager(quota_type)
        if (c.samples, c.window_ms) != (manager.config.num_quota_samples, manager.config.quota_window_ms):
            done["skipped"] += len(c.names)
            continue
        at = 0
        for name, last_record_ms, current, size in zip(c.names, c.last_records, c.currents, c.sizes, strict=True):
            end = at + size
            tags = name.tags
            sensor = manager.quota_sensor_for_tags(tags, now_ms)
            metric = manager.metrics.metric(manager.client_quota_metric_name(tags))
            if metric is None or not isinstance(metric.stat, Rate) or not isinstance(metric.stat.stat, SampledStat):
                done["skipped"] += 1
            else:
                metric.stat.stat.restore_samples(
                    current,
                    *_slices((c.starts, c.lasts, c.values, c.counts), at, end),
                    max_samples=manager.config.num_quota_samples,
                )
                sensor.last_record_time_ms = last_record_ms
                done[str(quota_type)] += 1
            at = end
    return done


def _slices(columns: Iterable[array], start: int, end: int) -> list[list[Any]]:
    return [column[start:end].tolist() for column in columns]
