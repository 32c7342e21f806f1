"""``ControllerBackend``: the :class:`~quotaplane.config.ConfigAdmin` of a ConfigController actor.

The AdminService serves any ConfigAdmin: a ``ConfigStore`` in-process, or, in a cluster, the controller
actor through this backend. Each call is a ``ray.get`` on the actor, forwarded by name
(``forward_config_admin``), so the admin API is stated once, in the config package.
"""

from __future__ import annotations

from typing import Any

from quotaplane.config import ConfigAdmin, ConfigImage, forward_config_admin

__all__ = ["BackendUnavailableError", "ControllerBackend"]


class BackendUnavailableError(Exception):
    """The backend cannot be reached (the controller actor is dead, restarting or too slow): UNAVAILABLE, so
    a client retries instead of reading it as a bug of the server."""


@forward_config_admin("call")
class ControllerBackend(ConfigAdmin):
    """A ConfigAdmin over a ConfigController actor handle: each call is a ``ray.get`` on it.

    The controller raises the store's own exceptions (ApiError, ValueError, the log's errors); Ray wraps them
    in ``RayTaskError``, so they are unwrapped here and the servicer maps them exactly as it maps a local
    store's. A dead or unresponsive controller becomes :class:`BackendUnavailableError` (UNAVAILABLE).
    ``now_ms`` is passed through from the servicer, i.e. the gRPC server's clock stamps the change.
    Arguments go to Ray as they are: the servicer builds them as lists, dicts and tuples (no generators).
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

    @property
    def start_offset(self) -> int:
        return self.call("start_offset")

    @property
    def end_offset(self) -> int:
        return self.call("end_offset")

    def health(self) -> dict[str, Any]:
        """The controller's report on its log (``{"serving": bool, "log_error": str | None}``): what the
        AdminService's gRPC health follows (``_health.py``)."""
        return self.call("health")

    def image_at_time(self, time_ms: int) -> ConfigImage:
        """The controller sends the image as snapshot bytes (``ImageSnapshot``), rebuilt here."""
        return self.call("snapshot", time_ms=time_ms).to_image()
