"""The clients ignoring throttles, read from the Spark ``throttle-report`` job's Parquet summary.

Read with pyarrow (no Spark in ``top``): the job writes ``<output>/clients``, one row per user and client id
(``quotaplane/spark/throttle.py``), and rewrites it as a whole each run, so the view reads it again at each
refresh and shows the latest run's verdicts. Two kinds are shown, as the job names them: **ignoring** (sent
at full rate while throttled in at least one minute) and **silent** (throttled, pushing telemetry, but never
reporting a throttle).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["IgnoringClient", "clients_dir", "read_ignoring"]

_COLUMNS = ("user", "client_id", "throttled_minutes", "ignoring_minutes", "silent_minutes", "reporting_minutes")


@dataclass(frozen=True)
class IgnoringClient:
    """One client of the report that ignores throttles (``ignoring_minutes``) or never reports them."""

    user: str
    client_id: str
    throttled_minutes: int
    ignoring_minutes: int
    silent_minutes: int

    @property
    def verdict(self) -> str:
        return "ignoring" if self.ignoring_minutes > 0 else "silent"


def clients_dir(report: str | Path) -> Path:
    """The clients table of a report: ``DIR/clients`` (the job's ``--output``), or ``DIR`` itself if it is
    that table. A ``FileNotFoundError`` naming ``report`` if neither exists."""
    path = Path(report)
    if (path / "clients").is_dir():
        return path / "clients"
    if path.is_dir() and any(p.suffix == ".parquet" for p in path.iterdir()):
        return path
    raise FileNotFoundError(f"no throttle report at {report} (the output of quotaplane throttle-report)")


def read_ignoring(report: str | Path) -> list[IgnoringClient]:
    """The report's clients that ignore throttles, or are silent (throttled, pushing, never reporting one),
    the most ignoring minutes first. ``FileNotFoundError`` / pyarrow's errors for a missing or bad table."""
    import pyarrow.parquet as pq

    table = pq.read_table(clients_dir(report), columns=list(_COLUMNS))
    out = []
    for row in table.to_pylist():
        ignoring, silent = int(row["ignoring_minutes"] or 0), int(row["silent_minutes"] or 0)
        if ignoring > 0 or (silent > 0 and not row["reporting_minutes"]):
            out.append(
                IgnoringClient(
                    row["user"] or "", row["client_id"] or "", int(row["throttled_minutes"] or 0), ignoring, silent
                )
            )
    return sorted(out, key=lambda c: (-c.ignoring_minutes, -c.silent_minutes, c.user, c.client_id))
