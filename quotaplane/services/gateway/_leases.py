"""Leased budgets at the gateway (issue 19's optional mode, ``quotaplane.lease.quota.types``): usage of a leased
quota type is decided here, within this gateway's share of the entity's quota, with the same Kafka core.

Exact mode asks the owning shard for every decision (a round trip per micro-batch). In leased mode this gateway
holds, per key (``usage_key``: the sensor's quota type and metric tags), a lease of a share of the entity's
quota from the shard that owns the key (:class:`~quotaplane.quota.LeaseBook` there, ``actors/_lease_host``):

- :meth:`GatewayLeases.decide` answers the items of keys with a live lease locally (a
  :class:`~quotaplane.quota.LeaseHolder` per quota type, Kafka's ``ClientQuotaManager`` against the share) and
  leaves the others to the shard, recording them in this gateway's window all the same (its rate weighs its
  next share);
- a renewal thread, every half lease period, sends each key's rate and what it decided locally to the owning
  shard as the micro-batch kind ``"lease"`` (fenced and routed exactly as usage) and takes the new leases; a
  renewal that fails keeps its values for the next one, and leases it could not renew expire on their own, so
  the items of their keys go to the shard again (exact mode) until a renewal works.

The bound that holds whatever fails: the live shares of a key add up to at most its quota (the book's
invariant; a lease is used only until its ``expires_ms``). What leased mode trades for local decisions is
accuracy while shares follow demand, measured by ``bench/leases.py`` against exact mode. Local throttles are
answered to the client but, unlike the shard's, not recorded in the throttle-time metric or the throttle archive.
"""

from __future__ import annotations

import itertools
import logging
import operator
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from quotaplane.quota import Lease, LeaseHolder, LeaseRequest, QuotaType

if TYPE_CHECKING:
    from ._routing import Gateway

__all__ = ["GatewayLeases", "holder_id"]

log = logging.getLogger(__name__)

_TYPE = operator.itemgetter(0)
_TYPE_AND_TIME = operator.itemgetter(0, 4)
#: Local throttles kept for the next report at most (a bound on memory when the shards are unreachable).
_MAX_UNREPORTED_THROTTLES = 100_000
#: Keys measured per hold of the lock in a renewal round.
_RENEWAL_PART = 256
#: Renewals per lease period: a lease is renewed at half its life, so one lost renewal does not end it.
_RENEWALS_PER_LEASE = 2


def holder_id() -> str:
    """A name no other gateway has, now or later: the shards' books key shares by it."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class GatewayLeases:
    """This gateway's leases: local decisions for leased quota types, and the renewal loop."""

    def __init__(self, gateway: Gateway, holder: str | None = None) -> None:
        self.gateway = gateway
        self.holder = holder or holder_id()
        self.lock = threading.Lock()
        self._holders: dict[str, LeaseHolder] = {}
        #: non-zero throttles answered here, not yet reported: ``(type, user, client_id, throttle_ms, now_ms)``
        self._throttled: list[tuple[str, str, str, int, int]] = []
        #: throttles not reported (more than ``_MAX_UNREPORTED_THROTTLES`` between rounds, or a failed report)
        self.throttles_dropped = 0
        self.throttles_reported = 0
        #: items answered here, items of leased types sent to the shards, renewals sent and failed
        self.local_decisions = 0
        self.shard_decisions = 0
        self.renewals = 0
        self.renewal_failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name="gateway-leases", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    # --- decisions ----------------------------------------------------------------------------------------
    def _holder(self, quota_type: str) -> LeaseHolder:
        holder = self._holders.get(quota_type)
        if holder is None:
            config = self.gateway.replica.quotas.client_manager(quota_type).config
            holder = self._holders[quota_type] = LeaseHolder(self.holder, config, QuotaType.parse(quota_type))
        return holder

    def decide(self, items: Sequence[tuple[str, str, str, float, int]]) -> tuple[int, list[int | None]] | None:
        """``(config offset, throttle or None per item)`` for checked usage items ``(type, user, client_id,
        value, now_ms)``: a throttle for each item decided here, None for each left to the shard. None when no
        item is of a leased type (the caller sends them all, as in exact mode)."""
        settings = self.gateway.replica.lease_settings()
        leased_types = settings.quota_types
        if not leased_types:
            if self._holders:
                self._drop(set(self._holders))
            return None
        if leased_types.issuperset(map(_TYPE, items)):
            chosen, chosen_items = range(len(items)), items
        else:
            chosen = [i for i, item in enumerate(items) if item[0] in leased_types]
            if not chosen:
                return None
            chosen_items = [items[i] for i in chosen]
        offset, keys, bounds = self.gateway.replica.resolve_bounds(chosen_items)
        out: list[int | None] = [None] * len(items)
        # the items by (quota type, time), a column at a time (C loops): usually one group, the whole batch
        pairs = list(map(_TYPE_AND_TIME, chosen_items))
        distinct = set(pairs)
        groups: dict[tuple[str, int], Sequence[int]] = (
            {pairs[0]: range(len(pairs))}
            if len(distinct) == 1
            else {pair: list(itertools.compress(itertools.count(), map(pair.__eq__, pairs))) for pair in distinct}
        )
        with self.lock:
            if set(self._holders) - leased_types:
                self._drop(set(self._holders) - leased_types)
            for (quota_type, now_ms), positions in groups.items():
                whole = len(positions) == len(chosen_items)
                group_keys = keys if whole else [keys[p] for p in positions]
                answers = self._holder(quota_type).decide_batch(
                    group_keys,
                    [item[3] for item in chosen_items] if whole else [chosen_items[p][3] for p in positions],
                    bounds if whole else [bounds[p] for p in positions],
                    now_ms,
                )
                if whole and isinstance(chosen, range):
                    out = list(answers)  # the usual batch: one quota type, one time, every item leased
                else:
                    for position, answer in zip(positions, answers, strict=True):
                        out[chosen[position]] = answer
                # non-zero throttles answered here: reported to the owning shard (throttle-time metric, archive)
                for at in [i for i, answer in enumerate(answers) if answer]:
                    if len(self._throttled) >= _MAX_UNREPORTED_THROTTLES:
                        self.throttles_dropped += 1
                        continue
                    _, user, client_id, _, _ = chosen_items[positions[at]]
                    self._throttled.append((quota_type, user, client_id, answers[at], now_ms))
            local = len(items) - out.count(None)
            self.local_decisions += local
            self.shard_decisions += len(chosen_items) - local
        return offset, out

    def unrecord(self, items: Sequence[tuple[str, str, str, float, int]]) -> None:
        """Un-recorded usage (a throttled fetch answered empty) taken back from this gateway's windows too."""
        holders = self._holders
        if not holders:
            return
        chosen = [item for item in items if item[0] in holders]
        if not chosen:
            return
        _, keys = self.gateway.replica.resolve(chosen)
        with self.lock:
            for (quota_type, _, _, value, now_ms), key in zip(chosen, keys, strict=True):
                holder = self._holders.get(quota_type)
                if holder is not None:
                    holder.unrecord(key, value, now_ms)

    def _drop(self, quota_types: set[str]) -> None:
        """Quota types no longer leased: their leases end here (the shards' books let them expire)."""
        for quota_type in quota_types:
            self._holders.pop(quota_type, None)

    # --- renewals -----------------------------------------------------------------------------------------
    def _renew_loop(self) -> None:
        while True:
            lease_ms = self.gateway.replica.lease_settings().lease_ms
            if self._stop.wait(lease_ms / 1000 / _RENEWALS_PER_LEASE):
                return
            try:
                self.renew()
            except Exception as e:  # the next round retries; leases not renewed expire meanwhile
                if self._stop.is_set():
                    return
                log.warning("lease renewal failed: %s", str(e).splitlines()[0] if str(e) else type(e).__name__)

    def renew(self) -> int:
        """One renewal round: the throttles answered here since the last round reported, then every key's rate
        and local value to its owning shard and the new leases back; the number of leases held after it."""
        self.report_throttles()
        return self._renew_leases()

    def report_throttles(self) -> int:
        """Send the non-zero throttles answered here to the shards owning their sensors (kind ``throttle``): a
        broker records every throttle it answers, and the shard archives them for the throttle report. Best
        effort: a report that fails is counted in ``throttles_dropped`` (the throttles were answered)."""
        with self.lock:
            throttled, self._throttled = self._throttled, []
        if not throttled:
            return 0
        try:
            self.gateway.wait(self.gateway.submit("throttle", throttled, 1.0))
            self.throttles_reported += len(throttled)
        except Exception as e:
            self.throttles_dropped += len(throttled)
            log.warning("local throttles not reported: %s", str(e).splitlines()[0] if str(e) else type(e).__name__)
        return len(throttled)

    def _renew_leases(self) -> int:
        requests: dict[str, list[LeaseRequest]] = {}
        items: list[Any] = []
        asked: list[tuple[str, LeaseRequest]] = []
        with self.lock:
            tracked = {quota_type: holder.tracked() for quota_type, holder in self._holders.items()}
        for quota_type, keys in tracked.items():
            # in parts, the lock taken for each: measuring thousands of windows would stall the decisions
            for start in range(0, len(keys), _RENEWAL_PART):
                with self.lock:  # the time read under the lock: no decision recorded after it (a window measured late)
                    holder = self._holders.get(quota_type)
                    if holder is None:
                        break
                    now_ms = self.gateway.clock()
                    part = holder.renewal(now_ms, keys[start : start + _RENEWAL_PART])
                requests.setdefault(quota_type, []).extend(part)
                for request in part:
                    items.append((quota_type, request.key, self.holder, request.rate, request.decided_locally, now_ms))
                    asked.append((quota_type, request))
        if not items:
            return 0
        self.renewals += 1
        keys = [item[1] for item in items]

        def by_key(_items: list[Any], indices: Sequence[int] | None) -> tuple[int, list[str]]:
            """Routed by the sensor's key itself: to its owner whatever the config did since (not fenced)."""
            return self.gateway.replica.offset, keys if indices is None else [keys[i] for i in indices]

        try:
            _, answers = self.gateway.wait(self.gateway.submit("lease", items, 1.0, by_key))
        except Exception:
            self.renewal_failures += 1
            with self.lock:
                for quota_type, batch in requests.items():
                    holder = self._holders.get(quota_type)
                    if holder is not None:
                        holder.restore(batch)
            raise
        granted: dict[str, dict[str, Lease | None]] = {}
        for (quota_type, request), answer in zip(asked, answers, strict=True):
            lease = None if answer is None else Lease(request.key, self.holder, answer[0], answer[1], answer[2])
            granted.setdefault(quota_type, {})[request.key] = lease
        with self.lock:
            for quota_type, leases in granted.items():
                holder = self._holders.get(quota_type)
                if holder is not None:
                    holder.apply(leases)
            return sum(holder.leased() for holder in self._holders.values())

    def stats(self) -> dict[str, Any]:
        with self.lock:
            leased = sum(holder.leased() for holder in self._holders.values())
            keys = sum(holder.keys() for holder in self._holders.values())
        return {
            "holder": self.holder,
            "leases": leased,
            "keys": keys,
            "local_decisions": self.local_decisions,
            "shard_decisions": self.shard_decisions,
            "renewals": self.renewals,
            "renewal_failures": self.renewal_failures,
            "throttles_reported": self.throttles_reported,
            "throttles_dropped": self.throttles_dropped,
        }
