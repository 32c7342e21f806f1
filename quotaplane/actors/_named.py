"""``NamedActor``: a Ray actor passed to another actor's constructor by name, not by handle.

Why: Ray keeps an actor handle given as a constructor argument in its object store, and an actor created
with ``max_restarts`` cannot be restarted once such an argument is lost (ray-project/ray#53727; Ray logs an
error at every creation). Every restartable quotaplane actor (a shard, with ``max_restarts=-1``) takes the
actors it calls as a ``NamedActor`` and looks them up by name when it starts, so a restart depends on
nothing but the name, and a restarted peer under the same name is found again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray

__all__ = ["NamedActor", "resolve_actor"]


@dataclass(frozen=True)
class NamedActor:
    """A named Ray actor in ``namespace`` (None: the caller's namespace)."""

    name: str
    namespace: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"an actor name is a non-empty string, got {self.name!r}")

    def resolve(self) -> Any:
        """The actor's handle (ValueError from Ray if no actor of that name is alive)."""
        return ray.get_actor(self.name, namespace=self.namespace)


def resolve_actor(actor: Any) -> Any:
    """A handle for ``actor``: looked up if it is a ``NamedActor``, else ``actor`` itself (a handle, or a test's
    stand-in)."""
    return actor.resolve() if isinstance(actor, NamedActor) else actor
