"""``ControllerBackend``: the :class:`~quotaplane.config.ConfigAdmin` of a ConfigController actor.

The AdminService serves any ConfigAdmin: a ``ConfigStore`` in-process, or, in a cluster, the controller
actor through this backend. Each call is a ``ray.get`` on the actor, forwarded by name
(``forward_config_admin``), so the admin API is stated once, in the config package.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from quotaplane.config import ConfigAdmin, ConfigImage, forward_config_admin

__all__ = ["BackendUnavailableError", "ControllerBackend"]


class BackendUnavailableError(Exception):
    """The backend cannot be reached (the controller actor is dead, restarting or too slow): UNAVAILABLE, so
    a client retries instead of reading it as a bug of the server."""


def _picklable(value: Any) -> Any:
    """``value`` with every one-shot or view iterable (a generator, ``dict.keys()``, a set) made a list and
    every mapping a dict, inside lists and plain tuples too, so Ray can ship it; anything else as it is."""
    if isinstance(value, str | bytes):
        return value
    if type(value) in (list, tuple):
        return type(value)(_picklable(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _picklable(v) for k, v in value.items()}
    if isinstance(value, Iterable) and not isinstance(value, tuple):
        return [_picklable(v) for v in value]
    return value


@forward_config_admin("_forward")
class ControllerBackend(ConfigAdmin):
    """A ConfigAdmin over a ConfigController actor handle: each call is a ``ray.get`` on it.

    The controller raises the store's own exceptions (ApiError, ValueError, the log's errors); Ray wraps them
    in ``RayTaskError``, so they are unwrapped here and the servicer maps them exactly as it maps a local
    store's. A dead or unresponsive controller becomes :class:`BackendUnavailableError` (UNAVAILABLE).
    ``now_ms`` is passed through from the servicer, i.e. the gRPC server's clock stamps the change.
    Ray is imported lazily so that importing this module (the CLI does) stays cheap.
    """

    def __init__(self, controller: Any, *, timeout_s: float = 30.0) -> None:
        self._controller = controller
        self._timeout_s = timeout_s

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``ray.get(controller.<method>.remote(...))`` with the actor's exception re-raised as itself."""
        from ray.exceptions import GetTimeoutError, RayActorError

        from quotaplane.actors import ray_get

        try:
            return ray_get(getattr(self._controller, method).remote(*args, **kwargs), self._timeout_s)
        except RayActorError as e:
            raise BackendUnavailableError(f"the config controller is unavailable: {str(e).splitlines()[0]}") from None
        except GetTimeoutError:
            raise BackendUnavailableError(
                f"the config controller did not answer {method} within {self._timeout_s:g} s"
            ) from None

    def _forward(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A ConfigAdmin call, its arguments made picklable (``_picklable``), on the controller."""
        return self.call(name, *_picklable(args), **_picklable(kwargs))

    @property
    def start_offset(self) -> int:
        return self.call("start_offset")

    @property
    def end_offset(self) -> int:
        return self.call("end_offset")

    def image_at_time(self, time_ms: int) -> ConfigImage:
        """The controller sends the image as snapshot bytes (``ImageSnapshot``), rebuilt here."""
        return self.call("snapshot", time_ms=time_ms).to_image()
