"""The replication byte-rate windows of one broker's three ``ReplicationQuotaManager`` s, copied out and in.

Replication quotas are per broker (a reshard moves a node's whole replication state). What is state, not
config, is each manager's ``SimpleRate`` sensor (leader, follower, alter-log-dirs): its samples, exactly as
``SampledStat`` keeps them, and the time of its last recording (the sensor expires after an idle hour).
The throttled rate and the throttled replicas are config: the receiver's managers are built and bound from
the same log, and the sensor is created through the manager's own path, with the quota the receiver's config
gives it, before the samples go back. A receiver that continues after an import measures the same rates,
bit for bit, and answers ``is_quota_exceeded`` the same.

Import **replaces** the receiver's windows: a manager whose sensor the snapshot does not hold (never used
on the giver) loses its own. A snapshot that does not fit (another layout version, other window settings,
columns that do not fit together, a sensor no replication manager has) raises ValueError before anything
changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._connection_state import SampledSensors, sampled_stat
from ._factory import QuotaManagers
from ._replication import ReplicationQuotaManager

__all__ = [
    "REPLICATION_STATE_VERSION",
    "ReplicationState",
    "export_replication_state",
    "import_replication_state",
]

#: Bumped on any change of the layout; a state of another version is a ValueError.
REPLICATION_STATE_VERSION = 1


def _managers(quotas: QuotaManagers) -> dict[str, ReplicationQuotaManager]:
    """The three replication managers by their sensor's name (Kafka's quota type name)."""
    return {str(m.replication_type): m for m in (quotas.leader, quotas.follower, quotas.alter_log_dirs)}


def _windows(quotas: QuotaManagers) -> tuple[tuple[str, int, int], ...]:
    return tuple(
        (name, m.config.num_quota_samples, m.config.quota_window_size_seconds) for name, m in _managers(quotas).items()
    )


@dataclass(frozen=True, slots=True)
class ReplicationState:
    """The replication sensors of one broker (those that exist), and the window settings they were taken with."""

    #: per manager: ``(sensor name, replication.quota.window.num, window seconds)``
    windows: tuple[tuple[str, int, int], ...]
    sensors: SampledSensors
    version: int = REPLICATION_STATE_VERSION

    def check(self, quotas: QuotaManagers) -> None:
        """ValueError unless this state fits ``quotas`` (same window settings) and its columns fit together."""
        if self.version != REPLICATION_STATE_VERSION:
            raise ValueError(f"replication state of version {self.version!r}, expected {REPLICATION_STATE_VERSION}")
        if tuple(self.windows) != _windows(quotas):
            raise ValueError(f"replication state of windows {self.windows}, these managers have {_windows(quotas)}")
        managers = _managers(quotas)
        unknown = [name for name in self.sensors.names if name not in managers]
        if unknown:
            raise ValueError(f"replication state: sensors {unknown} belong to no replication manager")
        self.sensors.check(lambda name: managers[name].config.num_quota_samples)


def export_replication_state(quotas: QuotaManagers) -> ReplicationState:
    """A copy of the replication managers' rate windows (the sensors created so far)."""
    sensors = SampledSensors()
    for name in _managers(quotas):
        sensor = quotas.metrics.get_sensor(name)
        if sensor is not None and sampled_stat(sensor) is not None:
            sensors.add(sensor)
    return ReplicationState(_windows(quotas), sensors)


def import_replication_state(quotas: QuotaManagers, state: ReplicationState, now_ms: int, *, check: bool = True) -> int:
    """Replace the replication windows of ``quotas`` with ``state``'s (ValueError, before any change, if it does
    not fit; ``check`` False only when the caller has just called ``state.check(quotas)``). Sensors restored."""
    if not isinstance(state, ReplicationState):
        raise ValueError(f"expected a ReplicationState, got {type(state).__name__}")
    if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < 0:
        raise ValueError(f"now_ms must be an int >= 0, got {now_ms!r}")
    if check:
        state.check(quotas)
    held = set(state.sensors.names)
    for name, manager in _managers(quotas).items():
        if name in held:
            manager._sensor(now_ms)  # created through the manager's path: its quota, its window
        else:
            quotas.metrics.remove_sensor(name)
    state.sensors.restore(quotas.metrics.sensors)
    return len(held)
