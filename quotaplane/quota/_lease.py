"""Leased budgets: a gateway decides an entity's throttles locally, within a share of its quota leased from the
owning shard (issue 19's optional mode; quotaplane goes beyond Kafka here, which has one broker per decision).

Exact mode asks the shard that owns an entity's sensor for every decision: one budget, decided in one place, a
round trip per batch. In leased mode the owning shard's :class:`LeaseBook` splits the entity's quota ``B`` into
shares, one per gateway holding a lease, and each gateway's :class:`LeaseHolder` decides alone with the same
Kafka core (a ``ClientQuotaManager`` whose quota for the entity is the share), reporting what it recorded at
each renewal.

Why Kafka's throttle survives the split: a gateway's throttle is ``(r - s) / s * W`` for its own rate ``r``
against its share ``s``, the exact mode's is ``(R - B) / B * W``; when shares follow demand (``s / B = r / R``)
the two are equal. :class:`LeaseBook` sets shares in proportion to each holder's rate of the entity as its own
Kafka sensor measures it (``max(rate, floor)``, the floor keeping a first burst admissible on an idle
gateway), so a steady skewed load converges there in a few renewals; what the split gets wrong meanwhile is the
accuracy the benchmark (``bench/leases.py``) measures against exact mode.

The bound that never moves: **at any time the live shares of an entity add up to at most its quota**. A
renewal grants a holder at most what the other live leases leave free (a share that shrinks takes effect when
its holder renews, so the growth of another waits for it), and a lease is live only until its ``expires_ms``,
on both sides: a holder that cannot renew stops deciding locally at that time and the book counts its share
until the same time. A quota lowered below the live shares is reached within one lease period. A holder whose
grant would be empty gets no lease and its decisions go to the shard (exact mode) until a renewal finds room.

Pure and clock-free like the rest of the core: every call takes ``now_ms``; the gateway and the shard carry
leases over their existing channel.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..metrics import KafkaMetric
from ._client import ClientQuotaManager, ClientQuotaManagerConfig, _check_value
from ._types import ClientQuotaEntity, QuotaType

__all__ = ["DEFAULT_LEASE_MS", "DEFAULT_MIN_SHARE_FRACTION", "Lease", "LeaseBook", "LeaseHolder", "LeaseRequest"]

#: How long a lease is valid; holders renew every half of it.
DEFAULT_LEASE_MS = 1000
#: A share that grew by less than this fraction leaves a holder's local quota where it was (below the share).
SHARE_SLACK = 0.01
#: The smallest share a live holder's weight may fall to, as a fraction of the even split ``B / n``.
DEFAULT_MIN_SHARE_FRACTION = 0.05


@dataclass(frozen=True, slots=True)
class Lease:
    """A holder's share of an entity's quota (the quota's unit: bytes/s, or a request percentage), until
    ``expires_ms``. ``key`` is the entity's routing key (``usage_key``), ``bound`` its whole quota at the grant."""

    key: str
    holder: str
    share: float
    bound: float
    expires_ms: int

    def live(self, now_ms: int) -> bool:
        return now_ms < self.expires_ms


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """What a holder reports of one key at a renewal: the quota its replica resolves now (``bound``, None when
    no quota applies any more), its own rate of the key as Kafka measures it (``rate``: the holder's sensor,
    over the quota window, everything this gateway saw of the key), and the value it decided locally since its
    last renewal (``decided_locally``: what the shard has not seen and records into its own sensor, so that its
    exact decisions, its metrics and the next lease see the whole traffic).

    The rate, not the value sent in the last period, weighs a holder: a throttled gateway's clients send less
    (they wait out their throttle), so the last period's value would shrink a share that is too small already,
    while Kafka's rate records every request and keeps the window's memory; and shares in proportion to these
    rates are what makes each holder's throttle the exact mode's (see the module docstring)."""

    key: str
    bound: float | None
    rate: float
    decided_locally: float = 0.0


class LeaseBook:
    """The owning shard's leases: who holds which share of each key, granted at renewals.

    ``renew`` is the one entry: it forgets expired leases of the keys it is asked about, takes the holder's
    rate and grants its new share (or none). ``leases(key, now_ms)`` lists the live ones; ``release``
    drops a holder's leases (a gateway that stops, or a key that moves to another shard: its leases end
    there and the gateways ask the new owner).
    """

    def __init__(self, *, lease_ms: int = DEFAULT_LEASE_MS, min_share_fraction: float = DEFAULT_MIN_SHARE_FRACTION):
        if not isinstance(lease_ms, int) or lease_ms < 1:
            raise ValueError(f"lease_ms must be a positive integer, got {lease_ms!r}")
        if not 0.0 <= min_share_fraction <= 1.0:
            raise ValueError(f"min_share_fraction must be in [0, 1], got {min_share_fraction!r}")
        self.lease_ms = lease_ms
        self.min_share_fraction = min_share_fraction
        self._leases: dict[str, dict[str, Lease]] = {}  # key -> holder -> lease
        #: key -> holder -> (rate, time) of its last renewal
        self._rates: dict[str, dict[str, tuple[float, int]]] = {}

    def renew(self, holder: str, requests: Iterable[LeaseRequest], now_ms: int) -> dict[str, Lease | None]:
        """Each requested key's new lease for ``holder`` (None: no quota, or no room; decide on the shard)."""
        granted: dict[str, Lease | None] = {}
        for request in requests:
            granted[request.key] = self._renew_one(holder, request, now_ms)
        return granted

    def _renew_one(self, holder: str, request: LeaseRequest, now_ms: int) -> Lease | None:
        key, bound = request.key, request.bound
        leases = self._live(key, now_ms)
        rates = self._rates.setdefault(key, {})
        if bound is None or not (0.0 < bound < math.inf):
            leases.pop(holder, None)
            rates.pop(holder, None)
            return None
        rates[holder] = (request.rate if request.rate > 0.0 else 0.0, now_ms)  # NaN (no window yet) weighs 0
        # who shares the quota: the live leases, and whoever asked within a lease period (granted or not: a
        # holder left without room must weigh in, or the first to ask would keep the whole quota)
        for h in [h for h, (_, at) in rates.items() if now_ms - at >= self.lease_ms and h not in leases]:
            del rates[h]
        holders = set(leases) | set(rates)
        floor = self.min_share_fraction * bound / len(holders)
        weights = {h: max(rates[h][0] if h in rates else 0.0, floor) for h in holders}
        total = math.fsum(weights.values())
        target = bound * weights[holder] / total if total > 0.0 else bound / len(holders)
        others = math.fsum(lease.share for h, lease in leases.items() if h != holder)
        share = min(target, bound - others)
        if not share > 0.0:
            leases.pop(holder, None)
            return None
        lease = leases[holder] = Lease(key, holder, share, bound, now_ms + self.lease_ms)
        return lease

    def _live(self, key: str, now_ms: int) -> dict[str, Lease]:
        leases = self._leases.setdefault(key, {})
        for h in [h for h, lease in leases.items() if not lease.live(now_ms)]:
            del leases[h]
        return leases

    def leases(self, key: str, now_ms: int) -> list[Lease]:
        """The live leases of a key."""
        return list(self._live(key, now_ms).values()) if key in self._leases else []

    def expire(self, now_ms: int) -> int:
        """Forget the keys with no live lease and no renewal within a lease period (housekeeping: a churn of
        keys must not grow the book); the number forgotten."""
        idle = [
            key
            for key in set(self._leases) | set(self._rates)
            if not self._live(key, now_ms)
            and all(now_ms - at >= self.lease_ms for _, at in self._rates.get(key, {}).values())
        ]
        for key in idle:
            self._leases.pop(key, None)
            self._rates.pop(key, None)
        return len(idle)

    def keys(self) -> int:
        """How many keys the book holds leases or rates of (until ``expire`` forgets them)."""
        return len({k for k, held in self._leases.items() if held} | {k for k, rates in self._rates.items() if rates})

    def release(self, holder: str, keys: Iterable[str] | None = None) -> int:
        """Drop ``holder``'s leases (of ``keys``, or all); the number dropped."""
        dropped = 0
        for key in list(self._leases) if keys is None else keys:
            if self._leases.get(key, {}).pop(holder, None) is not None:
                dropped += 1
            self._rates.get(key, {}).pop(holder, None)
        return dropped


class LeaseHolder:
    """A gateway's leases and the Kafka core it decides with locally.

    One ``ClientQuotaManager`` of the quota's type records every item of a leased-mode key, leased or not, under
    a local client id per key (a client-id quota equal to the share while the lease is live): its sensor is
    this gateway's traffic of the key, with Kafka's windows, so the first decision under a new lease already
    sees what this gateway sent before. ``decide`` answers the items of live leases and returns None for the
    others (the caller asks the shard, then calls ``observe`` with what it sent); ``renewal`` is what to send
    the shard, ``apply`` what it answered.
    """

    def __init__(
        self,
        holder: str,
        config: ClientQuotaManagerConfig,
        quota_type: QuotaType | str = QuotaType.PRODUCE,
        *,
        clock_skew_ms: int = 0,
    ) -> None:
        self.holder = holder
        self.manager = ClientQuotaManager(config, quota_type)
        #: a lease is used until ``expires_ms - clock_skew_ms``: the book may run on another clock
        self.clock_skew_ms = clock_skew_ms
        self._leases: dict[str, Lease] = {}
        self._names: dict[str, str] = {}  # key -> the local client id its sensor records under
        self._serial = itertools.count()
        self._active: set[str] = set()  # keys seen since the last renewal
        self._local: dict[str, float] = {}  # key -> value decided here (under a lease) since the last renewal
        self._bounds: dict[str, float | None] = {}  # key -> the quota the replica resolved, for the report
        self._applied: dict[str, float] = {}  # key -> the local quota set for its lease (at most its share)
        self._metrics: dict[str, KafkaMetric] = {}  # key -> its local quota metric (renewals measure it)

    def _name(self, key: str) -> str:
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = f"lease-{next(self._serial)}"
            self._local[key] = 0.0
        return name

    def lease(self, key: str, now_ms: int) -> Lease | None:
        lease = self._leases.get(key)
        if lease is not None and now_ms < lease.expires_ms - self.clock_skew_ms:
            return lease
        return None

    def decide(
        self, items: Sequence[tuple[str, float]], bounds: Mapping[str, float | None], now_ms: int
    ) -> list[int | None]:
        """The throttle time of each ``(key, value)`` item whose key has a live lease, recorded locally with the
        Kafka core against the share; None for the others, left for the shard (record them with ``observe``).
        ``bounds`` is the quota the gateway's replica resolves for each key now (kept for the next renewal).

        A key ``bounds`` maps to None has no quota (none applies, or quotas of its type are disabled): there is no
        budget to share and Kafka's answer is 0 (it only records the sensor), so the item is answered 0 here,
        recorded, and reported with the next renewal for the shard's sensor; a lease it still held (its quota
        was just removed) ends."""
        for _key, value in items:
            _check_value(value)  # before anything is recorded: a bad item rejects the batch, as record_batch does
        out: list[int | None] = []
        local: list[tuple[str, str, float]] = []
        at: list[int] = []
        for key, value in items:
            bound = self._bounds[key] = bounds.get(key)
            name = self._name(key)
            if bound is None and key in bounds:
                if key in self._leases:
                    self._end_lease(key, name)
            elif self.lease(key, now_ms) is None:
                out.append(None)
                continue
            self._active.add(key)
            self._local[key] += value
            at.append(len(out))
            out.append(None)
            local.append(("", name, value))
        if local:
            for index, throttle in zip(at, self.manager.record_batch(local, now_ms), strict=True):
                out[index] = throttle
        return out

    def decide_batch(
        self, keys: Sequence[str], values: Sequence[float], bounds: Sequence[float | None], now_ms: int
    ) -> list[int | None]:
        """``decide`` and ``observe`` in one: every item is recorded in this gateway's windows (one
        ``record_batch`` of the core), the throttle of each answered here is returned, None for each left to
        the shard. The gateway's path: a batch costs one pass and one core call, not a call per item.

        Equal to ``decide`` followed by ``observe`` of the items it left (what ``tests/quota/test_lease.py``
        checks on random workloads), but recording in the items' order."""
        if not (
            set(map(type, values)) <= {float, int} and min(values, default=0.0) >= 0.0 and math.isfinite(sum(values))
        ):
            for value in values:
                _check_value(value)  # names the bad one; nothing is recorded
        names = self._names
        leases = self._leases
        local = self._local
        skew = self.clock_skew_ms
        batch: list[tuple[str, str, float]] = []
        answered: list[bool] = []
        for key, value, bound in zip(keys, values, bounds, strict=True):
            name = names.get(key) or self._name(key)
            if bound is None:  # no quota: Kafka answers 0 and only records (see ``decide``)
                if key in leases:
                    self._end_lease(key, name)
                here = True
            else:
                lease = leases.get(key)
                here = lease is not None and now_ms < lease.expires_ms - skew
            if here:
                local[key] += value
            batch.append(("", name, value))
            answered.append(here)
        self._active.update(keys)
        self._bounds.update(zip(keys, bounds, strict=True))
        throttles = self.manager.record_batch(batch, now_ms)
        return [throttle if here else None for throttle, here in zip(throttles, answered, strict=True)]

    def observe(self, key: str, value: float, bound: float | None, now_ms: int) -> None:
        """An item of ``key`` decided by the shard: it counts in this gateway's window all the same."""
        _check_value(value)
        self._bounds[key] = bound
        name = self._name(key)
        self._active.add(key)
        self.manager.record_no_throttle("", name, value, now_ms)

    def unrecord(self, key: str, value: float, now_ms: int) -> None:
        """Kafka's ``unrecordQuotaSensor`` of an item of ``key`` (a throttled fetch answered empty): taken back
        from this gateway's window, as the shard takes it back from the entity's. The value stays in what is
        reported as decided locally: the shard, which took it back already, then counts it net zero."""
        _check_value(value)
        name = self._names.get(key)
        if name is not None:
            self.manager.unrecord_quota_sensor("", name, value, now_ms)

    def renewal(self, now_ms: int, keys: Iterable[str] | None = None) -> list[LeaseRequest]:
        """What to send the shard now: one request a key seen since the last renewal, or holding a lease while
        its window still holds traffic; the values decided locally are reset, as they are reported. ``keys``:
        only those (a caller renewing in parts, so that no part holds its lock long); None: every key.

        A key this gateway saw nothing of for a whole quota window (its rate is 0) is forgotten: its lease is
        dropped here (the book counts it until it expires) and its local sensor removed, so an idle key holds
        no share of the quota and a churn of keys does not grow the gateway."""
        requests = []
        active = self._active
        names = self._names
        for key in list(names) if keys is None else keys:
            if key not in names:
                continue  # forgotten since the caller listed it
            rate = self.rate(key, now_ms)
            if key not in active and not rate > 0.0:
                self._forget(key)
                continue
            active.discard(key)
            requests.append(LeaseRequest(key, self._bounds.get(key), rate, self._local[key]))
            self._local[key] = 0.0
        return requests

    def tracked(self) -> list[str]:
        """The keys this holder tracks now (what a renewal in parts goes through)."""
        return list(self._names)

    def rate(self, key: str, now_ms: int) -> float:
        """This gateway's rate of ``key`` as its Kafka sensor measures it (NaN before a window; 0 untracked)."""
        metric = self._metrics.get(key)
        if metric is None:
            name = self._names.get(key)
            metric = None if name is None else self.manager.metrics.metric(self.manager.quota_metric("", name))
            if metric is None:
                return 0.0
            self._metrics[key] = metric  # only this holder removes its sensors (``_forget``), and drops it then
        return metric.measurable_value(now_ms)

    def restore(self, requests: Iterable[LeaseRequest]) -> None:
        """A renewal that did not reach the shard: its locally decided values are reported at the next one
        (the shard's sensor must see them all), and its keys stay active."""
        for request in requests:
            self._name(request.key)  # a key forgotten meanwhile comes back
            self._local[request.key] += request.decided_locally
            self._active.add(request.key)

    def _end_lease(self, key: str, name: str) -> None:
        """No lease for ``key`` any more: its local quota goes (the shard decides its items)."""
        self._leases.pop(key, None)
        if self._applied.pop(key, None) is not None:
            self.manager.update_quota(ClientQuotaEntity(client_id=name), None)

    def _forget(self, key: str) -> None:
        name = self._names.pop(key)
        self._active.discard(key)
        self._local.pop(key, None)
        self._bounds.pop(key, None)
        self._metrics.pop(key, None)
        self._end_lease(key, name)
        quota_type = self.manager.quota_type
        for sensor in (f"{quota_type}-:{name}", f"{quota_type}ThrottleTime-:{name}", f"{quota_type}QuotaValue-:{name}"):
            self.manager.metrics.remove_sensor(sensor)

    def leased(self) -> int:
        """How many keys this holder holds a lease of (live or not yet renewed)."""
        return len(self._leases)

    def keys(self) -> int:
        """How many keys this holder tracks (leased or recorded within a quota window)."""
        return len(self._names)

    def apply(self, granted: Mapping[str, Lease | None]) -> None:
        """Take the shard's answer to a renewal: each key's local quota becomes its share, or goes (no lease)."""
        for key, lease in granted.items():
            name = self._names.get(key)
            if name is None:
                continue
            entity = ClientQuotaEntity(client_id=name)
            if lease is None:
                self._end_lease(key, name)
                continue
            if lease.holder != self.holder or lease.key != key:
                raise ValueError(f"a lease of {lease.holder!r} for {lease.key!r} given to {self.holder!r} for {key!r}")
            self._leases[key] = lease
            applied = self._applied.get(key)
            # a share that grew by less than SHARE_SLACK keeps the local quota where it is (below the share, so
            # the bound holds): re-configuring the core on every renewal of every key costs more than it buys
            if applied is None or lease.share < applied or lease.share > applied * (1.0 + SHARE_SLACK):
                self.manager.update_quota(entity, lease.share)
                self._applied[key] = lease.share
