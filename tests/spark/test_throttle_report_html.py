"""The throttle report's static HTML page: written by the real job beside its tables, naming the worst tenant,
one plot per ``PLOTS`` entry, every client-given name escaped, and rendered by headless Chromium into a
screenshot that is a real, non-blank PNG of the window's size."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from quotaplane.archive import ArchiveRecord, ArchiveWriter
from quotaplane.spark import compact_telemetry, throttle_report
from quotaplane.spark._report_html import PLOTS

from .test_compact_telemetry import T0, _record, _roots

CHROMIUM = "/usr/bin/chromium"
EVIL = "<b>mallory&co</b>"  # a user name is whatever the client authenticated as: it must not become markup
WIDTH, HEIGHT = 1280, 1600


def _decisions() -> list[ArchiveRecord]:
    """Ten minutes of Produce throttling: ``u-worst`` throttled hardest and growing, others less; u2 and the
    oddly named tenant send before their throttle is over (so the latter is in the ignoring table)."""
    start = T0 + 3_000_000
    out = []
    tenants = {"u-worst": (2_000, 6), "u0": (300, 3), "u1": (150, 1), "u2": (500, 5), EVIL: (80, 4)}
    for minute in range(10):
        for user, (throttle, requests) in tenants.items():
            gap = 100 if user == "u2" else 50 if user == EVIL else 5_000  # u2 and EVIL ask again too early
            for j in range(requests + minute % 3):
                t = start + minute * 60_000 + j * gap
                labels = {"quota_type": "Produce", "user": user, "client_id": f"producer-{user}"}
                out.append(ArchiveRecord(t, labels | {"throttle_time_ms": str(throttle + minute * 100)}, b""))
    return out


@pytest.fixture(scope="module")
def report_dir(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("html")
    root = base / "shards" / "0"
    with ArchiveWriter(root, "telemetry", writer_id="s0") as writer:
        for client in range(3):
            for k in range(30):
                writer.append(_record(client, k))
    with ArchiveWriter(root, "throttle", writer_id="s0") as writer:
        for record in _decisions():
            writer.append(record)
    telemetry = compact_telemetry(spark, _roots(base), str(base / "telemetry"))
    report = throttle_report(spark, _roots(base), telemetry.points_dir, str(base / "report"), top_n=4)
    assert report.html_path == f"{base / 'report'}/report.html"
    assert set(report.ignoring_clients) == {("u2", "producer-u2"), (EVIL, f"producer-{EVIL}")}
    return base / "report"


def test_page_names_the_worst_tenant_with_one_image_per_plot(report_dir: Path) -> None:
    page = (report_dir / "report.html").read_text()
    assert page.count("<img ") == len(PLOTS) == 2
    assert page.count("src='data:image/png;base64,") == len(PLOTS)
    worst_table = page.split("Worst tenants", 1)[1].split("</table>", 1)[0]
    assert worst_table.index("u-worst") < worst_table.index("u2")  # worst first
    assert "producer-u2" in page.split("Clients ignoring throttles", 1)[1]
    assert EVIL not in page and "&lt;b&gt;mallory&amp;co&lt;/b&gt;" in page
    # top 4 by throttle time: the least throttled (u1) is not among the worst tenants
    assert "<td>u1</td>" not in worst_table and "<td>u-worst</td>" in worst_table


def test_chromium_renders_the_page(report_dir: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    profile = tmp_path / "profile"
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            f"--window-size={WIDTH},{HEIGHT}",
            (report_dir / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    rgb = (pixels[..., :3] * 255).round().astype(np.uint8).reshape(-1, 3)
    colours, counts = np.unique(rgb, axis=0, return_counts=True)
    assert len(colours) > 50  # text, table shading and the plots' lines: not a blank page
    assert counts.max() < 0.95 * len(rgb)
    # the plots' default line colours (matplotlib's tab:blue and tab:orange) are on screen: the images loaded
    for colour in ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)):
        assert (np.abs(rgb.astype(int) - colour).sum(axis=1) < 30).sum() > 50, colour
