"""``quotaplane top``: a terminal view of a running quotaplane, refreshed, from its metrics endpoint.

Three tables: the **tenants by usage / quota** (each quota sensor, user / client-id / both as Kafka names
it, with its usage now, its quota and their ratio, for Produce and Fetch byte rates and Request
percentages), the **throttled clients** (throttle time now) and, given the Spark ``throttle-report``
job's output, the **clients ignoring throttles**. The quota is KIP-786's quota-value series when the
endpoint exposes it (the default), else the admin API's DescribeClientQuotas resolved by Kafka's precedence.

Modules: ``_model`` turns a scraped page into rows (pure), ``_report`` reads the throttle report (pyarrow),
``_render`` lays a frame out as text (pure), ``_source`` scrapes and builds frames, ``_screen`` is the
curses adapter. The command line (``quotaplane.services.cli``) wires the admin lookup and the options.
"""

from __future__ import annotations

from ._model import (
    QUOTA_TYPES,
    SORTS,
    UNLIMITED,
    QuotaLookup,
    TenantRow,
    missing_quota_values,
    parse_scrape,
    quota_lookup,
    sort_rows,
    tenant_rows,
)
from ._render import Frame, render_frame
from ._report import IgnoringClient, clients_dir, read_ignoring
from ._screen import run_screen
from ._source import EndpointError, FrameSource, metrics_url

__all__ = [
    "QUOTA_TYPES",
    "SORTS",
    "UNLIMITED",
    "EndpointError",
    "Frame",
    "FrameSource",
    "IgnoringClient",
    "QuotaLookup",
    "TenantRow",
    "clients_dir",
    "metrics_url",
    "missing_quota_values",
    "parse_scrape",
    "quota_lookup",
    "read_ignoring",
    "render_frame",
    "run_screen",
    "sort_rows",
    "tenant_rows",
]
