"""The controller-mutation token buckets of some clients copied out of a manager and into another (a reshard).

``controller_mutation_rate`` (KIP-599) is enforced per set of metric tags (user, client-id) by one quota
sensor, ``ControllerMutation-<tags>``: a ``tokens`` TokenBucket (tokens, time of the last refill) and an
unbounded ``mutation-rate`` Rate; beside it the ``ControllerMutationThrottleTime-<tags>`` sensor averages
the throttles the shard reports. When a reshard moves a client's routing key (:func:`mutation_key`: the
gateway's ``CONTROLLER_MUTATION NUL user NUL client-id``) the giver exports both sensors
(:func:`export_mutations`), forgets them (:func:`forget_mutations`) and the receiver imports them
(:func:`import_mutations`) before it decides anything for that client. The receiver then answers exactly as
the giver would have: a strict quota refuses the same topics (``check_quotas`` measures the same bucket
refilled to the same time), permissive and strict quotas compute the same throttle times (``-tokens /
bound``), and the sensors expire at the same time (their last recording moves too).

**What moves, per client:** the metric tags (they name the sensors and the metrics), the quota sensor's
last recording time, the bucket's tokens and last refill time, the ``mutation-rate`` samples exactly as
``SampledStat`` keeps them (:class:`SampledState`), and the throttle-time sensor's last recording and
``Avg`` samples. Either sensor may be absent (Kafka expires them separately). The quota is config: the
receiver's sensor gets the bound its tags resolve to there, from the same log. A strict or permissive
quota object lives for one request and holds the sensor it was made with: the caller fences requests in
flight around the hand-over.

An import replaces a client the receiver already holds under the same tags. A snapshot that does not fit
(another layout version, other window settings, a repeated client, a bad value) raises ValueError before
anything changes.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..metrics import Avg, Metrics, Rate, SampledStat, Sensor, TokenBucket
from ._client import INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS
from ._controller_mutation import ControllerMutationQuotaManager
from ._types import QuotaType
from ._usage_state import usage_key

__all__ = [
    "MUTATION_STATE_VERSION",
    "MutationClient",
    "MutationSnapshot",
    "SampledState",
    "export_mutations",
    "forget_mutations",
    "import_mutations",
    "mutation_key",
]

#: Bumped on any change of the snapshot's layout; a snapshot of another version is a ValueError.
MUTATION_STATE_VERSION = 1

#: The quota sensors' name prefix and metric group, and the throttle-time sensors' name prefix.
_GROUP = str(QuotaType.CONTROLLER_MUTATION)
_THROTTLE = f"{_GROUP}ThrottleTime"
#: The throttle-time metric, as ``ClientQuotaManager.get_or_create_quota_sensors`` names it.
_THROTTLE_METRIC = ("throttle-time", "Tracking average throttle-time per user/client-id")


@dataclass(frozen=True, slots=True)
class SampledState:
    """What a ``SampledStat`` keeps (``export_samples_into``): the index of its current sample and, per
    sample, its start, last event, value and event count. Arrays of numbers: no object per sample."""

    current: int
    starts: array
    lasts: array
    values: array
    counts: array

    @classmethod
    def of(cls, stat: SampledStat) -> SampledState:
        starts, lasts, values, counts = array("q"), array("q"), array("d"), array("q")
        current, _ = stat.export_samples_into(starts, lasts, values, counts)
        return cls(current, starts, lasts, values, counts)

    def check(self, samples: int) -> None:
        """ValueError unless this fits a stat of ``samples`` windows (``samples + 1`` slots at most)."""
        columns = (self.starts, self.lasts, self.values, self.counts)
        if tuple(c.typecode if isinstance(c, array) else None for c in columns) != ("q", "q", "d", "q"):
            raise ValueError("sampled state: columns must be arrays of typecodes q, q, d, q")
        size = len(self.starts)
        if not len(self.lasts) == len(self.values) == len(self.counts) == size:
            raise ValueError("sampled state: columns of different lengths")
        if size > samples + 1:
            raise ValueError(f"sampled state: {size} samples do not fit {samples} + 1 slots")
        if type(self.current) is not int or not (0 <= self.current < size or self.current == size == 0):
            raise ValueError(f"sampled state: current sample {self.current!r} outside {size} samples")

    @staticmethod
    def check_sensor(where: str, last_record_ms: object, state: object, samples: int, what: str) -> None:
        """ValueError (``where``: which entry) unless a sensor's last recording time is an int and ``state`` is
        its ``what`` samples, fitting ``samples`` windows."""
        if type(last_record_ms) is not int:
            raise ValueError(f"{where}: times must be ints")
        if not isinstance(state, SampledState):
            raise ValueError(f"{where}: no {what} samples")
        state.check(samples)

    def restore_into(self, stat: SampledStat, samples: int) -> None:
        stat.restore_samples(
            self.current,
            self.starts.tolist(),
            self.lasts.tolist(),
            self.values.tolist(),
            self.counts.tolist(),
            max_samples=samples,
        )


@dataclass(frozen=True, slots=True)
class MutationClient:
    """One client's (one set of metric tags') controller-mutation sensors.

    ``last_record_ms`` is None when the client has no quota sensor (then ``tokens``, ``last_update_ms`` and
    ``mutation_rate`` mean nothing); ``throttle_last_record_ms`` is None when it has no throttle-time sensor.
    """

    tags: tuple[tuple[str, str], ...]
    last_record_ms: int | None
    tokens: float
    last_update_ms: int
    mutation_rate: SampledState | None
    throttle_last_record_ms: int | None
    throttle_time: SampledState | None

    @property
    def key(self) -> str:
        return mutation_key(dict(self.tags))


@dataclass(frozen=True, slots=True)
class MutationSnapshot:
    """Controller-mutation clients of one manager, copied (plain data: it pickles).

    ``samples`` / ``window_ms``: the manager's quota window (the bucket's burst is ``samples * window *
    rate``); ``registry_samples`` / ``registry_window_ms``: the metrics registry's default config, which the
    ``mutation-rate`` and ``throttle-time`` stats sample with. An import needs the same four numbers."""

    samples: int
    window_ms: int
    registry_samples: int
    registry_window_ms: int
    clients: tuple[MutationClient, ...]
    version: int = MUTATION_STATE_VERSION


def mutation_key(tags: Mapping[str, str]) -> str:
    """The routing key of a client's controller-mutation sensors from their metric tags, as the gateway
    computes it: ``CONTROLLER_MUTATION NUL <user tag> NUL <client-id tag>``."""
    return usage_key(QuotaType.CONTROLLER_MUTATION, tags)


def _role(name: str) -> str | None:
    """``quota`` or ``throttle`` for this manager's two kinds of sensor, None for any other sensor."""
    prefix = name.partition("-")[0]
    if prefix == _GROUP:
        return "quota"
    if prefix == _THROTTLE:
        return "throttle"
    return None


def _tags_of(sensor: Sensor) -> dict[str, str] | None:
    for metric in sensor.metrics:
        if metric.metric_name.group == _GROUP:
            return metric.metric_name.tags
    return None


def _owned_sensors(metrics: Metrics, owns: Callable[[str], bool] | None) -> dict[str, dict[str, Sensor]]:
    """Routing key -> {"quota": sensor, "throttle": sensor} of the clients whose key ``owns`` accepts."""
    clients: dict[str, dict[str, Sensor]] = {}
    for name, sensor in metrics.sensors.items():
        role = _role(name)
        if role is None:
            continue
        tags = _tags_of(sensor)
        if tags is None:
            continue
        key = mutation_key(tags)
        if owns is None or owns(key):
            clients.setdefault(key, {})[role] = sensor
    return clients


def export_mutations(
    manager: ControllerMutationQuotaManager, owns: Callable[[str], bool] | None = None
) -> MutationSnapshot:
    """A copy of the controller-mutation sensors of every client whose routing key ``owns`` accepts (every
    client without ``owns``). Nothing changes in ``manager``; one pass over the registry's sensors."""
    clients = []
    for sensors in _owned_sensors(manager.metrics, owns).values():
        quota, throttle = sensors.get("quota"), sensors.get("throttle")
        tags: dict[str, str] = {}
        last_record_ms = mutation_rate = None
        tokens, last_update_ms = 0.0, 0
        if quota is not None:
            for metric in quota.metrics:
                stat = metric.stat
                tags = metric.metric_name.tags
                if isinstance(stat, TokenBucket):
                    tokens, last_update_ms = stat.tokens, stat.last_update_ms
                elif isinstance(stat, Rate) and isinstance(stat.stat, SampledStat):
                    mutation_rate = SampledState.of(stat.stat)
            last_record_ms = quota.last_record_time_ms
        throttle_last_record_ms = throttle_time = None
        if throttle is not None:
            for metric in throttle.metrics:
                if isinstance(metric.stat, Avg):
                    tags = metric.metric_name.tags
                    throttle_time = SampledState.of(metric.stat)
            throttle_last_record_ms = throttle.last_record_time_ms
        clients.append(
            MutationClient(
                tuple(tags.items()),
                last_record_ms,
                float(tokens),
                last_update_ms,
                mutation_rate,
                throttle_last_record_ms,
                throttle_time,
            )
        )
    config = manager.metrics.config
    return MutationSnapshot(
        manager.config.num_quota_samples,
        manager.config.quota_window_ms,
        config.samples,
        config.time_window_ms,
        tuple(clients),
    )


def forget_mutations(manager: ControllerMutationQuotaManager, owns: Callable[[str], bool]) -> int:
    """Remove the sensors (and their metrics) of every client whose routing key ``owns`` accepts: the giver
    then neither reports nor keeps them, and the manager's sensor caches follow the registry's removals.
    The number of clients removed."""
    owned = _owned_sensors(manager.metrics, owns)
    for sensors in owned.values():
        for sensor in sensors.values():
            manager.metrics.remove_sensor(sensor.name)
    return len(owned)


def check_tokens(where: str, tokens: object) -> None:
    """ValueError (``where``: which entry) unless a token bucket's ``tokens`` is a finite float."""
    if type(tokens) is not float or not math.isfinite(tokens):
        raise ValueError(f"{where}: tokens must be a finite float")


def _check(manager: ControllerMutationQuotaManager, snapshot: object) -> None:
    """ValueError unless ``snapshot`` fits ``manager``: the import then cannot fail half-way."""
    if not isinstance(snapshot, MutationSnapshot):
        raise ValueError(f"expected a MutationSnapshot, got {type(snapshot).__name__}")
    if snapshot.version != MUTATION_STATE_VERSION:
        raise ValueError(f"mutation snapshot of version {snapshot.version!r}, expected {MUTATION_STATE_VERSION}")
    config = manager.metrics.config
    exported = (snapshot.samples, snapshot.window_ms, snapshot.registry_samples, snapshot.registry_window_ms)
    here = (manager.config.num_quota_samples, manager.config.quota_window_ms, config.samples, config.time_window_ms)
    if exported != here:
        raise ValueError(f"mutation snapshot of window settings {exported}, this manager's are {here}")
    if not isinstance(snapshot.clients, tuple):
        raise ValueError("mutation snapshot: clients must be a tuple")
    names = set()
    for client in snapshot.clients:
        if not isinstance(client, MutationClient):
            raise ValueError(f"mutation snapshot: expected MutationClient entries, got {type(client).__name__}")
        tags = client.tags
        if not (
            isinstance(tags, tuple)
            and all(isinstance(t, tuple) and len(t) == 2 and all(type(s) is str for s in t) for t in tags)
        ):
            raise ValueError(f"mutation snapshot: tags must be (name, value) string pairs, got {tags!r}")
        suffix = ":".join(value for _, value in tags)
        if suffix in names:
            raise ValueError(f"mutation snapshot: client {suffix!r} given twice")
        names.add(suffix)
        if client.last_record_ms is None and client.throttle_last_record_ms is None:
            raise ValueError(f"mutation snapshot: client {suffix!r} has no sensor")
        where = f"mutation snapshot: client {suffix!r}"
        if client.last_record_ms is not None:
            if type(client.last_update_ms) is not int:
                raise ValueError(f"{where}: times must be ints")
            check_tokens(where, client.tokens)
            SampledState.check_sensor(
                where, client.last_record_ms, client.mutation_rate, config.samples, "mutation-rate"
            )
        if client.throttle_last_record_ms is not None:
            SampledState.check_sensor(
                where, client.throttle_last_record_ms, client.throttle_time, config.samples, "throttle-time"
            )


def import_mutations(manager: ControllerMutationQuotaManager, snapshot: MutationSnapshot, now_ms: int) -> int:
    """Put ``export_mutations``'s clients into ``manager`` (built from the same config; it may hold other
    clients). A client held already is replaced. The whole snapshot is checked first: one that does not fit
    raises ValueError and changes nothing. The number of clients imported."""
    _check(manager, snapshot)
    metrics = manager.metrics
    registry_samples = metrics.config.samples
    for client in snapshot.clients:
        tags = dict(client.tags)
        suffix = ":".join(tags.values())
        metrics.remove_sensor(f"{_GROUP}-{suffix}")  # replaced; the managers' sensor caches follow removals
        metrics.remove_sensor(f"{_THROTTLE}-{suffix}")
        if client.last_record_ms is not None:
            quota = manager.quota_sensor_for_tags(tags, now_ms)
            for metric in quota.metrics:
                stat = metric.stat
                if isinstance(stat, TokenBucket):
                    stat.tokens, stat.last_update_ms = client.tokens, client.last_update_ms
                elif isinstance(stat, Rate) and isinstance(stat.stat, SampledStat):
                    client.mutation_rate.restore_into(stat.stat, registry_samples)  # type: ignore[union-attr]
            quota.last_record_time_ms = client.last_record_ms
        if client.throttle_last_record_ms is not None:
            throttle = metrics.sensor(
                f"{_THROTTLE}-{suffix}",
                now_ms=now_ms,
                inactive_sensor_expiration_time_seconds=INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS,
            )
            avg = Avg()
            throttle.add(metrics.metric_name(_THROTTLE_METRIC[0], _GROUP, _THROTTLE_METRIC[1], tags), avg)
            client.throttle_time.restore_into(avg, registry_samples)  # type: ignore[union-attr]
            throttle.last_record_time_ms = client.throttle_last_record_ms
    return len(snapshot.clients)
