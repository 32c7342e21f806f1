"""Rate-limited logging for exporter threads: a collector or disk that is down must not flood the log.

One line per key gets through every ``interval_s``; the next line that does says how many were held
back. Not locked: each user calls it from one thread, or under its own lock.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

__all__ = ["LogLimiter"]


class LogLimiter:
    def __init__(self, logger: logging.Logger, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._next_s: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def allow(self, key: str) -> int | None:
        """None if a line for ``key`` went out less than ``interval_s`` ago (this one is held back);
        else the number held back since, and the caller logs now."""
        now = self._clock()
        if now < self._next_s.get(key, -math.inf):
            self._held[key] = self._held.get(key, 0) + 1
            return None
        self._next_s[key] = now + self._interval_s
        return self._held.pop(key, 0)

    def warning(self, key: str, message: str, *args: object, exc_info: bool = False) -> None:
        held = self.allow(key)
        if held is None:
            return
        if held:
            message += " (%d similar messages held back)"
            args = (*args, held)
        self._logger.warning(message, *args, exc_info=exc_info)
