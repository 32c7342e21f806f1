"""The curses adapter: draws each frame full-screen and reads the keys; everything else is the pure core's.

Refreshes every ``interval_s``; ``s`` redraws at once in the next sort order (from the last scrape, no new
one), ``q`` (or Ctrl-C) quits, a resize redraws. A refresh that fails after the first keeps the last frame on
screen with the failure on its status line and tries again at the next interval: a cluster restarting
under the view is a moment, not the end of it.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from ._model import SORTS
from ._render import Frame, render_frame
from ._source import EndpointError, FrameSource

__all__ = ["run_screen"]


def _draw(screen: Any, frame: Frame) -> None:
    import curses

    height, width = screen.getmaxyx()
    screen.erase()
    for y, line in enumerate(render_frame(frame, width - 1, height)):
        with contextlib.suppress(curses.error):  # the last cell of the screen: curses cannot move past it
            screen.addstr(y, 0, line, curses.A_BOLD if y == 0 else curses.A_NORMAL)
    screen.refresh()


def _loop(screen: Any, source: FrameSource, first: Frame, interval_s: float) -> int:
    import curses

    curses.curs_set(0)
    screen.timeout(100)
    frame, sort = first, first.sort
    next_refresh = time.monotonic() + interval_s
    _draw(screen, frame)
    while True:
        key = screen.getch()
        if key in (ord("q"), ord("Q")):
            return 0
        if key in (ord("s"), ord("S")):
            sort = SORTS[(SORTS.index(sort) + 1) % len(SORTS)]
            frame.sort = sort
            _draw(screen, frame)
        elif key == curses.KEY_RESIZE:
            _draw(screen, frame)
        if time.monotonic() >= next_refresh:
            try:
                frame = source.frame(sort)
            except EndpointError as e:
                frame.problems = [f"refresh failed, showing {frame.updated}: {e}"]
            next_refresh = time.monotonic() + interval_s
            _draw(screen, frame)


def run_screen(source: FrameSource, first: Frame, interval_s: float) -> int:
    """Run the view on the terminal until ``q``; the exit code (0)."""
    import curses

    try:
        return curses.wrapper(_loop, source, first, interval_s)
    except KeyboardInterrupt:
        return 0
