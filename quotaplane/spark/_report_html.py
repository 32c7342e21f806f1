"""The throttle report as one static HTML page: what an operator opens to see which tenants sit at their quota.

Rendered on the driver from the report's own tables (``minutes`` and ``clients``, already small: one row per
throttled client and minute), so the page and the Parquet tables can never disagree. Plots are drawn with
matplotlib's Agg canvas on a ``Figure`` object (no pyplot, so no global backend state and no display needed)
and embedded as base64 PNGs: the page is one self-contained file that can be mailed or served as is. Every
user and client id comes from clients and is escaped (``html.escape``) before it reaches the page.
"""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["PLOTS", "render_report"]

# (title, the minutes-table column summed per tenant and minute, y-axis label, scale)
PLOTS = (
    ("Throttle time per minute", "throttle_time_ms_total", "throttle time (s) per minute", 1 / 1000),
    ("Throttled requests per minute", "decisions", "throttle decisions per minute", 1),
)


def _worst_tenants(minutes: Sequence[Mapping[str, Any]], top_n: int) -> list[str]:
    """Users by total throttle time, worst first (ties by name, so the page is deterministic)."""
    totals: dict[str, int] = defaultdict(int)
    for row in minutes:
        totals[row["user"]] += row["throttle_time_ms_total"] or 0
    return sorted(totals, key=lambda user: (-totals[user], user))[:top_n]


def _plot(minutes: Sequence[Mapping[str, Any]], users: Sequence[str], column: str, ylabel: str, scale: float) -> str:
    """One line per tenant (summed over its clients and quota types) per minute, as a base64 PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    series: dict[str, dict[int, float]] = {user: defaultdict(float) for user in users}
    for row in minutes:
        if row["user"] in series:
            series[row["user"]][row["minute_ms"]] += (row[column] or 0) * scale
    figure = Figure(figsize=(10, 3.6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for user in users:
        points = sorted(series[user].items())
        times = [datetime.fromtimestamp(ms / 1000, UTC) for ms, _ in points]
        # matplotlib renders "$" as math text: a tenant's name is shown as it is
        axes.plot(times, [v for _, v in points], marker="o", markersize=3, label=user.replace("$", r"\$"))
    axes.set_ylabel(ylabel)
    axes.set_xlabel("minute (UTC)")
    locator = AutoDateLocator(maxticks=10)
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    axes.grid(True, alpha=0.3)
    if users:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", title="tenant (user)")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], empty: str) -> str:
    rows = list(rows)
    if not rows:
        return f"<p class='empty'>{html.escape(empty)}</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; }
table { border-collapse: collapse; font-size: 14px; }
th, td { border: 1px solid #bbb; padding: 4px 10px; text-align: left; }
th { background: #e8eef7; } tr:nth-child(even) td { background: #f6f6f6; }
img { display: block; max-width: 100%; border: 1px solid #ddd; margin: 8px 0; }
.empty { color: #666; font-style: italic; } .meta { color: #555; font-size: 13px; }
"""


def render_report(
    minutes: Sequence[Mapping[str, Any]],
    clients: Sequence[Mapping[str, Any]],
    *,
    top_n: int = 5,
    generated_ms: int | None = None,
) -> str:
    """The page: the ``top_n`` worst tenants' throttle time and throttled requests per minute (one ``<img>``
    per entry of ``PLOTS``), the clients ignoring throttles and those that never report one.

    ``minutes`` are rows of ``user, minute_ms, decisions, throttle_time_ms_total`` (per client or already
    summed per tenant: the plots sum them per tenant and minute); ``clients`` the report's clients table.
    """
    users = _worst_tenants(minutes, top_n)
    totals = defaultdict(int)
    for row in minutes:
        totals[row["user"]] += row["throttle_time_ms_total"] or 0
    span = ""
    if minutes:
        first = min(r["minute_ms"] for r in minutes)
        last = max(r["minute_ms"] for r in minutes)
        fmt = "%Y-%m-%d %H:%M UTC"
        span = f"{datetime.fromtimestamp(first / 1000, UTC):{fmt}} to {datetime.fromtimestamp(last / 1000, UTC):{fmt}}"
    parts = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'><title>quotaplane throttle report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>quotaplane throttle report</h1>",
        f"<p class='meta'>{len(clients)} throttled clients"
        + (f", {html.escape(span)}" if span else "")
        + (
            f"; generated {datetime.fromtimestamp(generated_ms / 1000, UTC):%Y-%m-%d %H:%M:%S} UTC"
            if generated_ms
            else ""
        )
        + "</p>",
        f"<h2>Worst tenants (top {len(users)} by throttle time)</h2>",
        _table(
            ["tenant (user)", "throttle time (s)"],
            ((user, f"{totals[user] / 1000:,.1f}") for user in users),
            "No throttle decision in this range.",
        ),
    ]
    for title, column, ylabel, scale in PLOTS:
        png = _plot(minutes, users, column, ylabel, scale)
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.append(f"<img alt='{html.escape(title, quote=True)}' src='data:image/png;base64,{png}'>")
    ignoring = sorted(
        (c for c in clients if c["ignoring_minutes"] > 0), key=lambda c: (-c["ignoring_minutes"], c["user"])
    )
    parts.append("<h2>Clients ignoring throttles</h2>")
    parts.append(
        "<p class='meta'>Minutes in which most throttle decisions came before the previous throttle was over: "
        "the client sent while it should have been waiting.</p>"
    )
    parts.append(
        _table(
            ["user", "client id", "minutes ignoring", "minutes throttled", "decisions"],
            (
                (c["user"], c["client_id"], c["ignoring_minutes"], c["throttled_minutes"], c["decisions"])
                for c in ignoring
            ),
            "No client sent while throttled.",
        )
    )
    silent = sorted(
        (c for c in clients if c["silent_minutes"] > 0 and c["reporting_minutes"] == 0),
        key=lambda c: (-c["silent_minutes"], c["user"]),
    )
    parts.append("<h2>Clients throttled that report no throttle</h2>")
    parts.append(
        _table(
            ["user", "client id", "silent minutes", "minutes throttled"],
            ((c["user"], c["client_id"], c["silent_minutes"], c["throttled_minutes"]) for c in silent),
            "Every throttled client that pushes telemetry reports its throttle.",
        )
    )
    parts.append("</body></html>")
    return "\n".join(parts)
