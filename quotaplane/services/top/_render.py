"""One frame of the fleet view as lines of text: what ``--once`` prints and what curses draws.

Pure, so the curses adapter only places lines on a screen and a test reads a frame without a terminal. The
frame is three tables under a status line: the tenants by usage over quota (as many as the height leaves),
the throttled clients (throttle time now), and, with a throttle report, the clients ignoring throttles.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ._model import TenantRow, sort_rows
from ._report import IgnoringClient

__all__ = ["Frame", "render_frame"]

#: Rows the throttled and ignoring tables keep at most when the height is bounded (the tenants get the rest).
_SIDE_ROWS = 8


@dataclass
class Frame:
    """What one refresh knows: the rows, where they came from, and the problems to say on the status line."""

    source: str  # the metrics endpoint's URL
    updated: str  # the scrape's wall-clock time, HH:MM:SS UTC
    rows: list[TenantRow]
    sort: str
    interval_s: float | None = None  # None: a single frame (--once), no keys
    quota_note: str = ""  # where the quotas came from when not the quota-value series, or why unknown
    report: str | None = None  # the throttle report's directory, if given
    ignoring: list[IgnoringClient] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # a failed refresh, an unreadable report


def _amount(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "%":
        return f"{value:.1f} %"
    for scale, prefix in ((2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}B/s"
    return f"{value:.0f} B/s"


def _ratio(row: TenantRow) -> str:
    ratio = row.ratio
    if ratio is None:
        return "-"
    return "inf" if math.isinf(ratio) else f"{ratio:.2f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return [line(header).rstrip(), *(line(r).rstrip() for r in rows)]


def _shown(name: str) -> str:
    """An entity tag as shown: Kafka's empty tag (not part of the quota's entity) as ``-``, and a character that
    is not printable (a client id is any string: a newline, a terminal escape) as its Python escape, so that a
    name can neither break the table's lines nor drive the terminal."""
    return _printable(name) if name else "-"


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _section(
    title: str, header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int], limit: int | None
) -> list[str]:
    """A blank line, the table's title with its row count, the table (at most ``limit`` rows) and how many more."""
    kept = rows if limit is None else rows[: max(0, limit)]
    more = len(rows) - len(kept)
    lines = ["", f"{title} ({len(rows)})", *_table(header, kept, right)]
    if more:
        lines.append(f"  ... {more} more")
    return lines


def render_frame(frame: Frame, width: int | None = None, height: int | None = None) -> list[str]:
    """The frame's lines, cut to ``width`` columns and ``height`` lines when given (the tenants table
    keeps what the status lines and the two smaller tables leave)."""
    keys = f"every {frame.interval_s:g} s, s: sort, q: quit" if frame.interval_s is not None else "once"
    head = [f"quotaplane top  {frame.source}  {frame.updated}  sort: {frame.sort}  ({keys})"]
    if frame.quota_note:
        head.append(frame.quota_note)
    head += [f"! {_printable(p)}" for p in frame.problems]

    throttled = sort_rows([r for r in frame.rows if r.throttle_ms > 0], "throttle")
    throttled_cells = [[r.quota_type, _shown(r.user), _shown(r.client_id), f"{r.throttle_ms:.0f}"] for r in throttled]
    ignoring_cells = [
        [_shown(c.user), _shown(c.client_id), c.verdict, str(c.ignoring_minutes), str(c.silent_minutes),
         str(c.throttled_minutes)]
        for c in frame.ignoring
    ]  # fmt: skip
    side_limit = None if height is None else _SIDE_ROWS
    sides = _section(
        "THROTTLED CLIENTS", ["TYPE", "USER", "CLIENT-ID", "THROTTLE-MS"], throttled_cells, {3}, side_limit
    )
    if frame.report is not None:
        sides += _section(
            f"IGNORING THROTTLES (report {frame.report})",
            ["USER", "CLIENT-ID", "VERDICT", "IGNORING-MIN", "SILENT-MIN", "THROTTLED-MIN"],
            ignoring_cells,
            {3, 4, 5},
            side_limit,
        )

    tenants = sort_rows(frame.rows, frame.sort)
    tenant_cells = [
        [r.quota_type, _shown(r.user), _shown(r.client_id), _amount(r.rate, r.unit), _amount(r.quota, r.unit),
         _ratio(r), f"{r.throttle_ms:.0f}"]
        for r in tenants
    ]  # fmt: skip
    # beside its rows, the tenants' table has a blank line, its title, its header and a "... more" line
    tenant_limit = None if height is None else max(1, height - len(head) - len(sides) - 4)
    tenant_lines = _section(
        "TENANTS BY USAGE / QUOTA",
        ["TYPE", "USER", "CLIENT-ID", "RATE", "QUOTA", "USAGE/QUOTA", "THROTTLE-MS"],
        tenant_cells,
        {3, 4, 5, 6},
        tenant_limit,
    )
    lines = [*head, *tenant_lines, *sides]
    if height is not None:
        lines = lines[:height]
    if width is not None:
        lines = [line[:width] for line in lines]
    return lines
