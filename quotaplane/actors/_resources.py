"""Ray custom resources that say where an actor may run (see "Placement" in docs/architecture.md).

An actor created with ``.options(resources={"quotaplane_shard": 1})`` is only placed, and after a crash
only restarted, on a raylet started with that resource (``ray start --resources='{"quotaplane_shard":
1000}'``). The actors keep ``num_cpus=0``: the custom resource is what pins them, not a CPU count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["check_resources"]

#: Ray's own resources: asked for through ``num_cpus`` and friends, never as custom resources.
_PREDEFINED = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
#: Ray keeps resource amounts in units of 1/10,000.
_RESOURCE_UNIT = 1e-4


def check_resources(resources: Mapping[str, float] | None, what: str = "resources") -> dict[str, float] | None:
    """``resources`` as a plain dict (None or empty: None), or a ValueError saying what is wrong: every name
    a non-empty string other than Ray's predefined ones, every amount a finite number > 0 (at least 0.0001,
    Ray's resolution)."""
    if resources is None:
        return None
    if not isinstance(resources, Mapping):
        raise ValueError(f"{what} must be a mapping of resource name to amount, got {type(resources).__name__}")
    checked: dict[str, float] = {}
    for name, amount in resources.items():
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{what}: a resource name must be a non-empty string, got {name!r}")
        if name != name.strip():
            raise ValueError(f"{what}: resource name {name!r} has leading or trailing spaces")
        if name in _PREDEFINED:
            raise ValueError(f"{what}: {name!r} is one of Ray's predefined resources, not a custom resource")
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            raise ValueError(f"{what}: the amount of {name!r} must be a number, got {amount!r}")
        if not math.isfinite(amount) or amount <= 0:
            raise ValueError(f"{what}: the amount of {name!r} must be > 0, got {amount!r}")
        if amount < _RESOURCE_UNIT:
            raise ValueError(f"{what}: the amount of {name!r} must be at least {_RESOURCE_UNIT:g}, got {amount!r}")
        checked[name] = float(amount)
    return checked or None
