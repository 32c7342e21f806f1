"""A shard's side of the warm standby protocol (``_standby``): the primary's claim at start, and the standby's
``take_over`` and ``release``. A mixin of ``ShardActor`` (kept apart so the actor's module stays one job: serving),
using the shard's own state: ``standby``, ``serving``, ``serving_lock``, its checkpointer, managers and channel.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray
from ray.exceptions import RayActorError

from quotaplane.quota import export_usage, forget_usage

from ._direct import DirectAddress, unserialized
from ._follower import ray_get
from ._standby import GRANT_POLL_S, STANDBY_SUFFIX, NotServingError, actor_state
from .controller import wall_clock_ms

__all__ = ["StandbyMember"]

logger = logging.getLogger("quotaplane.actors.shard")


class StandbyMember:
    """The standby protocol's methods of a shard actor (see the module docstring)."""

    # provided by ShardActor
    _actor_name: str | None
    _namespace: str
    standby: bool
    serving: bool
    shard_id: Any
    serving_lock: Any
    quotas: Any
    epoch: Any
    _primary_id: str | None
    _refused_until: float
    _controller_timeout_s: float
    _checkpointer: Any
    _direct: Any
    took_over_ms: Any
    takeovers: int
    releases: int
    restored_usage_age_ms: Any

    # --- warm standby (``_standby``) ---------------------------------------------------------------------
    def _primary_name(self) -> str | None:
        """The primary's actor name: this actor's own, less ``STANDBY_SUFFIX`` for a standby."""
        name = self._actor_name
        if name is not None and self.standby and name.endswith(STANDBY_SUFFIX):
            return name[: -len(STANDBY_SUFFIX)]
        return name

    def _find_primary_id(self) -> str | None:
        """The primary's Ray actor id, by its name (None when no actor has it, e.g. not yet created)."""
        primary = self._primary_name()
        if primary is None:
            return None
        try:
            return str(ray.get_actor(primary, namespace=self._namespace)._actor_id.hex())
        except ValueError:
            return None

    def _claim(self) -> bytes | None:
        """Claim the shard at the controller before serving; if its standby had been granted meanwhile, release
        it first: the usage windows it hands back (None: nothing to take over). An unnamed shard (a test's)
        has no standby and claims nothing."""
        if self._actor_name is None:
            return None
        own_id = ray.get_runtime_context().get_actor_id()
        try:
            before = self._call("claim_shard", self._actor_name, self._namespace, own_id)
        except AttributeError:  # a controller from before standbys (a rolling upgrade): it granted none
            return None
        if before["owner"] != "standby" or before["standby_id"] is None:
            return None
        return self._release_standby(before["standby_id"], before["standby_restarts"])

    def _release_standby(self, standby_id: str, granted_restarts: int | None) -> bytes | None:
        """``release`` on the standby that was granted (Ray actor ``standby_id``, restart count
        ``granted_restarts``), retried while Ray says that incarnation lives; None at once when Ray says it is
        gone (a restarted standby starts not serving). A standby alive but unreachable past the controller timeout
        raises: this incarnation must not serve (Ray starts the primary again)."""
        name = f"{self._actor_name}{STANDBY_SUFFIX}"
        deadline = time.monotonic() + self._controller_timeout_s
        while True:
            try:
                standby = ray.get_actor(name, namespace=self._namespace)
                handed: bytes | None = ray_get(standby.release.remote(), max(0.1, deadline - time.monotonic()))
                return handed
            except (RayActorError, ValueError):  # restarting, gone, or not found by name: ask Ray by id
                state = actor_state(standby_id)
                if state.state in ("DEAD", "GONE") or state.restarts != granted_restarts:
                    return None
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    @unserialized
    def take_over(self, wait_s: float = 5.0) -> DirectAddress | None:
        """A gateway lost the primary: serve the shard from this standby once the controller grants it (Ray says
        the primary incarnation that claimed last is gone), asking every ``GRANT_POLL_S`` for up to ``wait_s``.
        The direct channel's address once serving (after loading the primary's last usage checkpoint), None if
        the primary lives (the gateway goes back to it). On a primary: its address (it always serves).

        Not under the serving lock while it waits (``unserialized``): Ray runs one call at a time on the actor,
        so the primary's ``release`` still comes after it, never between the grant and the start of serving."""
        if isinstance(wait_s, bool) or not isinstance(wait_s, int | float) or not 0 <= wait_s <= 60:
            raise ValueError(f"wait_s must be 0..60 s, got {wait_s!r}")
        if not self.standby or self.serving:
            return self._direct.address
        if time.monotonic() < self._refused_until:
            # the primary outlived a whole wait just now (a gateway's connection broke, not the primary): the other
            # gateways asking meanwhile go back to it at once instead of waiting in this actor's queue one by one
            return None
        primary = self._primary_name()
        if primary is None:
            return None
        if self._primary_id is None:
            self._primary_id = self._find_primary_id()
            if self._primary_id is None:  # no primary by that name (being removed): nothing to take over
                return None
        own_id = ray.get_runtime_context().get_actor_id()
        deadline = time.monotonic() + wait_s
        while (epoch := self._call("grant_standby", primary, self._namespace, self._primary_id, own_id)) is None:
            if time.monotonic() >= deadline:
                self._refused_until = time.monotonic() + wait_s
                return None
            time.sleep(GRANT_POLL_S)
        with self.serving_lock:
            if not self.serving:
                now = wall_clock_ms()
                self._restore_usage(None, now)
                self.took_over_ms = now
                self.takeovers += 1
                self.epoch = epoch
                self._start_checkpointer()
                self.serving = True
                logger.warning(
                    "standby of shard %s took over (epoch %d; usage checkpoint %s ms old)",
                    self.shard_id,
                    epoch,
                    self.restored_usage_age_ms,
                )
        return self._direct.address

    def release(self) -> bytes | None:
        """The restarted primary takes the shard back (``_claim``): stop serving (later batches are refused with
        ``NotServingError``, nothing served), write a last checkpoint, hand over the usage windows (as
        ``UsageSnapshot`` bytes) and forget them, so a later takeover starts from the checkpoint alone. None when
        this member is not serving."""
        if not self.standby or not self.serving:
            return None
        self.serving = False
        if self._checkpointer is not None:
            self._checkpointer.stop(final=True)
            self._checkpointer = None
        snapshot = export_usage(self.quotas)
        forget_usage(self.quotas, snapshot)
        self.releases += 1
        logger.warning("standby of shard %s released it to the restarted primary", self.shard_id)
        return snapshot.to_bytes()

    def _check_serving(self) -> None:
        if not self.serving:
            raise NotServingError(f"shard {self.shard_id}: this standby does not own the shard; ask its primary")
