"""Where a frame comes from: one scrape of the metrics endpoint, the quota lookup when the page has no
quota-value series, and the throttle report; each refresh builds a new :class:`Frame` from them.

The lookup is given as a function (the command line's builds it over its AdminService client), so this module
needs no gRPC and a test can give its own. A failed lookup or an unreadable report is said on the frame's
status line, not fatal: the endpoint is the view's source, the rest annotates it.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ._model import QuotaLookup, missing_quota_values, parse_scrape, tenant_rows
from ._render import Frame
from ._report import read_ignoring

__all__ = ["EndpointError", "FrameSource", "metrics_url"]

#: How long one scrape may take: the endpoint waits at most its own scrape timeout (2 s) for the shards.
SCRAPE_TIMEOUT_S = 10.0


class EndpointError(Exception):
    """The metrics endpoint could not be reached, or did not answer with exposition text."""


def metrics_url(address: str) -> str:
    """``HOST:PORT`` as the endpoint's URL (``http://HOST:PORT/metrics``); a URL is kept as given."""
    if "://" in address:
        return address
    return f"http://{address.rstrip('/')}/metrics"


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str:
    """The page at ``url``; :class:`EndpointError` with one line saying why not."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        raise EndpointError(f"cannot read the metrics endpoint at {url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise EndpointError(f"cannot reach the metrics endpoint at {url}: {reason}") from None


class FrameSource:
    """Builds a frame per refresh: ``lookup_factory`` is called (once per refresh, only when the page lacks
    quota-value series) for a fresh quota lookup, so quotas changed since the last refresh are seen."""

    def __init__(
        self,
        url: str,
        *,
        lookup_factory: Callable[[], QuotaLookup] | None = None,
        lookup_name: str = "the admin service",
        report: str | Path | None = None,
        interval_s: float | None = None,
    ) -> None:
        self.url = url
        self.lookup_factory = lookup_factory
        self.lookup_name = lookup_name
        self.report = None if report is None else str(report)
        self.interval_s = interval_s

    def frame(self, sort: str) -> Frame:
        """One refresh; :class:`EndpointError` if the endpoint does not answer or its page does not parse."""
        text = scrape(self.url)
        try:
            scraped = parse_scrape(text)
        except ValueError as e:
            raise EndpointError(f"the page at {self.url} is not Prometheus exposition text: {e}") from None
        frame = Frame(self.url, time.strftime("%H:%M:%S UTC", time.gmtime()), [], sort, self.interval_s)
        lookup = None
        if missing_quota_values(scraped):
            if self.lookup_factory is None:
                frame.quota_note = "quotas: no quota-value series on the page and no admin service to ask"
            else:
                try:
                    lookup = self.lookup_factory()
                    frame.quota_note = f"quotas: DescribeClientQuotas at {self.lookup_name} (no quota-value series)"
                except Exception as e:  # the view still shows usage and throttles without bounds
                    frame.problems.append(f"quotas unknown: {e}")
        frame.rows = tenant_rows(scraped, lookup)
        if self.report is not None:
            frame.report = self.report
            try:
                frame.ignoring = read_ignoring(self.report)
            except Exception as e:  # rewritten by a running job, or removed: say so, keep the view
                frame.problems.append(f"throttle report unreadable: {e}")
        return frame
