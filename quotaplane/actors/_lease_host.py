"""The owning shard's side of leased budgets (issue 19): the :class:`~quotaplane.quota.LeaseBook` of the keys
it owns, and the gateways' renewals served as the micro-batch kind ``"lease"``.

A renewal item is ``(quota type, key, holder, rate, decided_locally, now_ms)``: one key of one gateway
(``holder``). The key is the sensor's routing key (``usage_key``: the quota type and Kafka's metric tags, as
the gateway's replica resolved them), and the gateway routes the item by it, so it reaches the shard that owns
that sensor whatever the config did since; the shard needs nothing else, as everything a lease is about
belongs to the tags:

- ``decided_locally`` (what the gateway admitted under its lease since its last renewal) is recorded into the
  tags' quota sensor first (as ``import_usage`` does, ``quota_sensor_for_tags``), so the shard's exact decisions
  for gateways without a lease, its metrics and the next shares see the whole traffic;
- the quota ``B`` it splits is the one the tags resolve to in the shard's own image (Kafka's
  ``quotaLimit(tags)``); the answer is the holder's new lease ``(share, bound, expires_ms)``, or None (no quota
  applies, the type is not leased here, the book is quiet, or no room: the gateway asks the shard for each item
  until a renewal finds room).

Not fenced by offset: a key is what it names at any offset (a config change that moves a client to other tags
makes a new key; the old one's traffic stops and it is forgotten), and a bound one config change old is
corrected at the next renewal, within a lease period, as any quota change is.

**A new book grants nothing for one lease period.** Leases live at the gateways, not only in the book: a shard
that restarted (or a standby that took over) starts with an empty book while the gateways may still hold
leases its previous incarnation granted, and after a reshard the new owner of a key does not know the leases
the old owner granted. Granting from the empty book at once could hand out the whole quota a second time. So
from its first renewal, and from the first renewal after the shard count changed, a book answers every renewal
with None for ``lease_ms`` (recording the reported bytes all the same): every lease granted before has expired
by then (it was granted before that renewal, for at most ``lease_ms``), and the gateways decide on the shard
meanwhile (exact mode). The invariant (live shares never above the quota) so holds across restarts, take-overs
and reshards, at the price of one lease period of round trips.

**Local throttles, reported.** A gateway answers its local throttles itself; Kafka's broker records each
throttle it answers in the client's ``throttle-time`` sensor, and the shard archives them for the throttle
report. So a gateway sends the non-zero ones it answered, with its renewals, as the kind ``"throttle"``:
``(quota type, user, client_id, throttle_ms, now_ms)``, recorded here as the shard records its own
(:meth:`LeaseHost.serve_throttles`).

``expires_ms`` is on the gateway's clock (``now_ms`` is the gateway's), which is what the gateway checks; the
book compares other holders' leases with their own ``now_ms``, so gateways whose clocks disagree by ``d`` ms can
over-admit for ``d`` ms a lease period (documented in docs/scaling.md, "Leased budgets").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from quotaplane.config import ConfigImage, LeaseSettings, lease_settings, shard_count_offset
from quotaplane.quota import CLIENT_ID_TAG, USER_TAG, LeaseBook, LeaseRequest, QuotaManagers, QuotaType

from ._throttle_archive import ThrottleArchive, record_throttles

__all__ = ["LeaseHost", "LeaseItem", "ThrottleItem"]

#: ``(quota type, key, holder, rate, decided_locally, now_ms)``
LeaseItem = tuple[str, str, str, float, float, int]
#: ``(quota type, user, client_id, throttle_ms, now_ms)``
ThrottleItem = tuple[str, str, str, int, int]
_LEASABLE = {"PRODUCE": QuotaType.PRODUCE, "FETCH": QuotaType.FETCH}


class LeaseHost:
    """A shard's lease book, fed by the gateways' renewals (``serve``) and kept small by ``expire``."""

    def __init__(
        self,
        quotas: Callable[[], QuotaManagers],
        image: Callable[[], ConfigImage],
        archive: Callable[[], ThrottleArchive | None] = lambda: None,
    ) -> None:
        self._quotas = quotas
        self._image = image
        self._archive = archive
        self._settings: tuple[int, LeaseSettings] | None = None
        self.book = LeaseBook()
        #: no lease is granted before this time (the callers' clock); None until the first renewal
        self.quiet_until_ms: int | None = None
        self._placement_offset = shard_count_offset(image())
        #: renewals served, and those answered with a lease
        self.renewals = 0
        self.granted = 0
        #: throttles gateways answered locally and reported
        self.reported_throttles = 0

    def settings(self) -> LeaseSettings:
        image = self._image()
        cached = self._settings
        if cached is None or cached[0] != image.end_offset:
            cached = self._settings = (image.end_offset, lease_settings(image))
        return cached[1]

    @staticmethod
    def check(items: Sequence[LeaseItem]) -> None:
        """Every item checked before any is served: a ValueError names the first bad one."""
        for index, item in enumerate(items):
            if not (
                type(item) is tuple
                and len(item) == 6
                and item[0] in _LEASABLE
                and isinstance(item[1], str)
                and item[1].count("\x00") == 2
                and item[1].startswith(f"{item[0]}\x00")
                and isinstance(item[2], str)
                and item[2] != ""
                and type(item[3]) in (int, float)
                and (math.isnan(item[3]) or 0 <= item[3] < math.inf)
                and type(item[4]) in (int, float)
                and 0 <= item[4] < math.inf
                and type(item[5]) is int
                and item[5] >= 0
            ):
                raise ValueError(
                    f"item {index}: expected (PRODUCE or FETCH, its key 'TYPE NUL user-tag NUL client-id-tag', "
                    "holder, rate >= 0 or NaN, decided_locally >= 0, now_ms >= 0)"
                )

    def serve(self, items: Sequence[LeaseItem]) -> list[tuple[float, float, int] | None]:
        """Each renewal's ``(share, bound, expires_ms)`` or None, in order (see the module docstring)."""
        self.check(items)
        settings = self.settings()
        book = self.book
        book.lease_ms = settings.lease_ms
        quotas = self._quotas()
        placement_offset = shard_count_offset(self._image())
        if self.quiet_until_ms is None or placement_offset != self._placement_offset:
            self._placement_offset = placement_offset
            self.quiet_until_ms = max(item[5] for item in items) + settings.lease_ms
        answers: list[tuple[float, float, int] | None] = []
        for type_name, key, holder, rate, decided_locally, now_ms in items:
            manager = quotas.client_manager(_LEASABLE[type_name])
            _, user_tag, client_tag = key.split("\x00")
            tags = {USER_TAG: user_tag, CLIENT_ID_TAG: client_tag}
            if decided_locally > 0:
                sensor = manager.quota_sensor_for_tags(tags, now_ms)
                sensor.record(float(decided_locally), now_ms, check_quotas=False)
            bound = None
            if type_name in settings.quota_types and manager.quotas_enabled() and now_ms >= self.quiet_until_ms:
                bound = manager.quota_callback.quota_limit(manager.client_quota_type, tags)
            lease = book.renew(holder, [LeaseRequest(key, bound, float(rate))], now_ms)[key]
            self.renewals += 1
            if lease is None:
                answers.append(None)
            else:
                self.granted += 1
                answers.append((lease.share, lease.bound, lease.expires_ms))
        return answers

    def serve_throttles(self, items: Sequence[ThrottleItem]) -> list[int]:
        """Throttles a gateway answered within its leases, recorded as the shard records its own: the
        client's ``throttle-time`` sensor (``throttle_batch``) and the throttle archive. All 0, in order."""
        for index, item in enumerate(items):
            if not (
                type(item) is tuple
                and len(item) == 5
                and item[0] in _LEASABLE
                and isinstance(item[1], str)
                and isinstance(item[2], str)
                and type(item[3]) is int
                and item[3] > 0
                and type(item[4]) is int
                and item[4] >= 0
            ):
                raise ValueError(
                    f"item {index}: expected (PRODUCE or FETCH, user, client_id, throttle_ms > 0, now_ms >= 0)"
                )
        quotas = self._quotas()
        archive = self._archive()
        for type_name in {item[0] for item in items}:
            throttled = [
                (user, client_id, ms, now_ms) for kind, user, client_id, ms, now_ms in items if kind == type_name
            ]
            record_throttles(quotas.client_manager(_LEASABLE[type_name]), archive, _LEASABLE[type_name], throttled)
        self.reported_throttles += len(items)
        return [0] * len(items)

    def expire(self, now_ms: int) -> int:
        return self.book.expire(now_ms)

    def stats(self) -> dict[str, int]:
        return {
            "renewals": self.renewals,
            "granted": self.granted,
            "keys": self.book.keys(),
            "reported_throttles": self.reported_throttles,
        }
