"""``quotaplane top``'s pure core on real exposition text: rows, sorts, the quota fallback, the frame's layout,
and the throttle report read with pyarrow. No cluster (tests/services/test_top.py drives the real one).

``PAGE`` is the Kafka part of a page the metrics endpoint of a real ``launch`` served (2 shards; a 1000 B/s
producer_byte_rate on user alice, a 5000 B/s consumer_byte_rate on client-id app2, dave with no quota, usage
sent through the gateway), verbatim: ``prometheus_client``'s exposition of the endpoint's families.
"""

from __future__ import annotations

import http.server
import math
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from quotaplane.quota import sanitize
from quotaplane.services.cli import _top
from quotaplane.services.top import (
    SORTS,
    UNLIMITED,
    EndpointError,
    Frame,
    FrameSource,
    TenantRow,
    metrics_url,
    missing_quota_values,
    parse_scrape,
    quota_lookup,
    read_ignoring,
    render_frame,
    sort_rows,
    tenant_rows,
)

PAGE = """\
# HELP kafka_quota_fetch_byte_rate Tracking byte-rate per user/client-id
# TYPE kafka_quota_fetch_byte_rate gauge
kafka_quota_fetch_byte_rate{client_id="app2",user=""} 1988.4668920262477
# HELP kafka_quota_fetch_quota_value The quota enforced per user/client-id
# TYPE kafka_quota_fetch_quota_value gauge
kafka_quota_fetch_quota_value{client_id="app2",user=""} 5000.0
# HELP kafka_quota_produce_byte_rate Tracking byte-rate per user/client-id
# TYPE kafka_quota_produce_byte_rate gauge
kafka_quota_produce_byte_rate{client_id="",user="dave"} 19.884668920262477
kafka_quota_produce_byte_rate{client_id="",user="alice"} 3976.9337840524954
# HELP kafka_quota_produce_quota_value The quota enforced per user/client-id
# TYPE kafka_quota_produce_quota_value gauge
kafka_quota_produce_quota_value{client_id="",user="dave"} 9.223372036854776e+18
kafka_quota_produce_quota_value{client_id="",user="alice"} 1000.0
# HELP kafka_quota_produce_throttle_time Tracking average throttle-time per user/client-id
# TYPE kafka_quota_produce_throttle_time gauge
kafka_quota_produce_throttle_time{client_id="",user="alice"} 15434.466666666667
# HELP kafka_quota_request_exempt_request_time Tracking exempt-request-time utilization percentage
# TYPE kafka_quota_request_exempt_request_time gauge
kafka_quota_request_exempt_request_time{shard="0"} 0.0
kafka_quota_request_exempt_request_time{shard="1"} 0.0
# HELP quotaplane_config_end_offset The config log's end offset (events written)
# TYPE quotaplane_config_end_offset gauge
quotaplane_config_end_offset 4.0
# HELP quotaplane_shard_up 1 if the shard answered this scrape in time
# TYPE quotaplane_shard_up gauge
quotaplane_shard_up{shard="0"} 1.0
quotaplane_shard_up{shard="1"} 1.0
"""

#: The same page with KIP-786's switch off: no quota-value series.
PAGE_WITHOUT_QUOTA_VALUES = "\n".join(line for line in PAGE.splitlines() if "quota_value" not in line) + "\n"


def by_tenant(rows: list[TenantRow]) -> dict[tuple[str, str, str], TenantRow]:
    return {(r.quota_type, r.user, r.client_id): r for r in rows}


def test_rows_of_a_real_page_read_usage_quota_value_and_throttle_time() -> None:
    rows = by_tenant(tenant_rows(parse_scrape(PAGE)))
    assert set(rows) == {("produce", "alice", ""), ("fetch", "", "app2"), ("produce", "dave", "")}
    alice = rows["produce", "alice", ""]
    assert (alice.rate, alice.quota, alice.quota_source) == (3976.9337840524954, 1000.0, "metric")
    assert alice.ratio == pytest.approx(3.9769, rel=1e-4)
    assert alice.throttle_ms == 15434.466666666667
    app2 = rows["fetch", "", "app2"]
    assert (app2.quota, app2.throttle_ms, app2.unit) == (5000.0, 0.0, "B/s")
    assert app2.ratio == pytest.approx(1988.4668920262477 / 5000)
    dave = rows["produce", "dave", ""]
    # Long.MAX_VALUE is Kafka's "no quota": no bound, no ratio
    assert (dave.quota, dave.quota_source, dave.ratio) == (None, None, None)
    assert not missing_quota_values(parse_scrape(PAGE))


def test_service_and_per_shard_series_are_not_tenants() -> None:
    scrape = parse_scrape(PAGE)
    assert all(key != ("", "") for series in scrape.values() for key in series)
    assert "kafka_quota_request_exempt_request_time" not in scrape


def test_each_sort_order() -> None:
    rows = tenant_rows(parse_scrape(PAGE))

    def order(sort: str) -> list[tuple[str, str]]:
        return [(r.user, r.client_id) for r in sort_rows(rows, sort)]

    # by ratio: alice 3.98 > app2 0.40 > dave (no quota: after every row with one)
    assert order("usage/quota") == [("alice", ""), ("", "app2"), ("dave", "")]
    assert order("rate") == [("alice", ""), ("", "app2"), ("dave", "")]
    assert order("throttle")[0] == ("alice", "")
    assert order("tenant") == [("", "app2"), ("alice", ""), ("dave", "")]
    with pytest.raises(ValueError, match="unknown sort"):
        sort_rows(rows, "nope")


def test_a_ratio_above_one_sorts_before_a_larger_rate_under_its_quota() -> None:
    small = TenantRow("produce", "a", "", 200.0, 100.0, "metric", 0.0, "B/s")
    big = TenantRow("produce", "b", "", 9000.0, 10000.0, "metric", 0.0, "B/s")
    zero = TenantRow("produce", "c", "", 1.0, 0.0, "metric", 0.0, "B/s")
    assert zero.ratio == math.inf
    assert [r.user for r in sort_rows([big, small, zero], "usage/quota")] == ["c", "a", "b"]
    assert [r.user for r in sort_rows([big, small, zero], "rate")] == ["b", "a", "c"]


def test_without_quota_values_the_quotas_come_from_describe_client_quotas_by_kafkas_precedence() -> None:
    scrape = parse_scrape(PAGE_WITHOUT_QUOTA_VALUES)
    assert missing_quota_values(scrape)
    lookup = quota_lookup(
        [
            ({"user": "alice"}, {"producer_byte_rate": 1000.0}),
            ({"user": None}, {"producer_byte_rate": 50.0}),  # the <default> user
            ({"client-id": None}, {"consumer_byte_rate": 5000.0}),  # the <default> client-id
            ({"ip": "10.0.0.1"}, {"connection_creation_rate": 3.0}),  # not a row of the view
        ]
    )
    rows = by_tenant(tenant_rows(scrape, lookup))
    assert (rows["produce", "alice", ""].quota, rows["produce", "alice", ""].quota_source) == (1000.0, "admin")
    assert rows["produce", "dave", ""].quota == 50.0  # no quota of his own: the default user's
    assert rows["fetch", "", "app2"].quota == 5000.0
    assert rows["produce", "dave", ""].ratio == pytest.approx(19.884668920262477 / 50)
    # without a lookup the bounds are unknown, the usage still shown
    assert {r.quota for r in tenant_rows(scrape)} == {None}


def test_lookup_of_user_and_client_id_tags_follows_the_ladder_with_sanitized_users() -> None:
    lookup = quota_lookup(
        [
            ({"user": "alice", "client-id": "app"}, {"producer_byte_rate": 7.0}),
            ({"user": "alice", "client-id": None}, {"producer_byte_rate": 6.0}),
            ({"user": None, "client-id": "app"}, {"producer_byte_rate": 8.0, "request_percentage": 25.0}),
            ({"user": "User:x y"}, {"consumer_byte_rate": 9.0}),
        ]
    )
    assert lookup("produce", "alice", "app") == 7.0
    assert lookup("produce", "alice", "other") == 6.0  # U/<default>
    assert lookup("produce", "bob", "app") == 8.0  # <default>/C
    assert lookup("produce", "bob", "other") is None
    assert lookup("request", "bob", "app") == 25.0
    assert lookup("fetch", sanitize("User:x y"), "") == 9.0  # tags carry Kafka's sanitized user
    assert lookup("fetch", "User:x y", "") is None


def test_request_percentage_rows_from_prometheus_client_exposition() -> None:
    registry = CollectorRegistry(auto_describe=False)

    class Page:
        def collect(self):
            for name, value in (
                ("kafka_quota_request_request_time", 37.5),
                ("kafka_quota_request_quota_value", 25.0),
                ("kafka_quota_request_throttle_time", 120.0),
            ):
                family = GaugeMetricFamily(name, "request", labels=["client_id", "user"])
                family.add_metric(["app", "bob"], value)
                yield family

    registry.register(Page())
    [row] = tenant_rows(parse_scrape(generate_latest(registry).decode()))
    assert (row.quota_type, row.user, row.client_id, row.unit) == ("request", "bob", "app", "%")
    assert (row.ratio, row.throttle_ms) == (1.5, 120.0)


def test_a_page_that_is_not_exposition_text_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_scrape('kafka_quota_produce_byte_rate{user="a" 1\n')


def frame(rows: list[TenantRow], **options) -> Frame:
    return Frame("http://h:1/metrics", "01:02:03 UTC", rows, "usage/quota", 2.0, **options)


def test_the_frame_shows_tenants_with_their_ratio_and_the_throttled_clients() -> None:
    lines = render_frame(frame(tenant_rows(parse_scrape(PAGE))))
    assert "sort: usage/quota" in lines[0] and "01:02:03 UTC" in lines[0]
    tenants_at = lines.index("TENANTS BY USAGE / QUOTA (3)")
    assert lines[tenants_at + 1].split() == ["TYPE", "USER", "CLIENT-ID", "RATE", "QUOTA", "USAGE/QUOTA", "THROTTLE-MS"]
    assert lines[tenants_at + 2].split() == ["produce", "alice", "-", "3.88", "KiB/s", "1000", "B/s", "3.98", "15434"]
    assert lines[tenants_at + 4].split() == ["produce", "dave", "-", "20", "B/s", "-", "-", "0"]
    throttled_at = lines.index("THROTTLED CLIENTS (1)")
    assert lines[throttled_at + 2].split() == ["produce", "alice", "-", "15434"]
    assert not any("IGNORING" in line for line in lines)  # no report given


def test_a_bounded_frame_keeps_the_top_rows_that_fit_and_says_how_many_more() -> None:
    rows = [TenantRow("produce", f"u{i:02}", "", 100.0 + i, 100.0, "metric", 0.0, "B/s") for i in range(40)]
    lines = render_frame(frame(rows), width=50, height=20)
    assert len(lines) == 20 and all(len(line) <= 50 for line in lines)
    shown = [line.split()[1] for line in lines if line.startswith("produce")]
    assert shown == [f"u{i:02}" for i in range(39, 39 - len(shown), -1)]  # the highest ratios
    assert len(shown) >= 10
    assert f"  ... {40 - len(shown)} more" in lines
    assert "THROTTLED CLIENTS (0)" in lines  # the smaller table keeps its place


def test_a_name_with_control_characters_stays_on_one_line_and_cannot_drive_the_terminal() -> None:
    row = TenantRow("produce", "a\nb", "\x1b[2Jc", 1.0, 2.0, "metric", 5.0, "B/s")
    lines = render_frame(frame([row]))
    assert not any("\x1b" in line or "\n" in line for line in lines)
    assert lines[lines.index("TENANTS BY USAGE / QUOTA (1)") + 2].split()[1:3] == ["a\\nb", "\\x1b[2Jc"]


def write_report(output: Path, rows: list[dict]) -> Path:
    """``rows`` as the job's ``clients`` table (Spark's column types: sums and counts are longs)."""
    schema = pa.schema(
        [
            ("user", pa.string()),
            ("client_id", pa.string()),
            ("throttled_minutes", pa.int64()),
            ("decisions", pa.int64()),
            ("silent_minutes", pa.int64()),
            ("reporting_minutes", pa.int64()),
            ("no_telemetry_minutes", pa.int64()),
            ("ignoring_minutes", pa.int64()),
        ]
    )
    clients = output / "clients"
    clients.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), clients / "part-00000-x.snappy.parquet")
    (clients / "_SUCCESS").write_text("")
    return output


def client(user: str, client_id: str, ignoring: int, silent: int, reporting: int) -> dict:
    return {
        "user": user,
        "client_id": client_id,
        "throttled_minutes": 10,
        "decisions": 100,
        "silent_minutes": silent,
        "reporting_minutes": reporting,
        "no_telemetry_minutes": 0,
        "ignoring_minutes": ignoring,
    }


def test_the_report_names_ignoring_and_silent_clients_as_the_job_does(tmp_path) -> None:
    report = write_report(
        tmp_path / "report",
        [
            client("alice", "app", 0, 0, 3),  # honours and reports: not shown
            client("bob", "app", 2, 0, 1),  # ignoring
            client("carol", "c", 5, 1, 0),  # ignoring (and silent)
            client("dave", "d", 0, 4, 0),  # silent: throttled, pushing, never reporting
            client("erin", "e", 0, 4, 1),  # silent minutes, but reported in others: not silent
        ],
    )
    found = read_ignoring(report)
    assert [(c.user, c.verdict, c.ignoring_minutes) for c in found] == [
        ("carol", "ignoring", 5),
        ("bob", "ignoring", 2),
        ("dave", "silent", 0),
    ]
    assert read_ignoring(report / "clients") == found  # the table itself works too
    lines = render_frame(frame([], report=str(report), ignoring=found))
    at = lines.index(f"IGNORING THROTTLES (report {report}) (3)")
    assert lines[at + 2].split() == ["carol", "c", "ignoring", "5", "1", "10"]
    with pytest.raises(FileNotFoundError, match="no throttle report"):
        read_ignoring(tmp_path / "missing")


@pytest.fixture
def serve_page() -> Iterator[Callable[..., str]]:
    """Serve a page (or an HTTP status) on a loopback port; ``serve_page(text, status=200)`` -> its URL."""
    servers = []

    def serve(text: str, status: int = 200) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return metrics_url(f"127.0.0.1:{server.server_address[1]}")

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_source_asks_for_quotas_only_when_the_page_has_no_quota_values(serve_page) -> None:
    asked = []

    def factory():
        asked.append(1)
        return quota_lookup([({"user": "alice"}, {"producer_byte_rate": 2000.0})])

    with_values = FrameSource(serve_page(PAGE), lookup_factory=factory).frame("rate")
    assert asked == [] and with_values.quota_note == "" and with_values.sort == "rate"
    without = FrameSource(serve_page(PAGE_WITHOUT_QUOTA_VALUES), lookup_factory=factory, lookup_name="h:9093")
    got = without.frame("usage/quota")
    assert asked == [1] and "DescribeClientQuotas at h:9093" in got.quota_note
    assert by_tenant(got.rows)["produce", "alice", ""].quota == 2000.0

    def unreachable():
        raise RuntimeError("cannot ask the admin service at h:9093: connection refused")

    failed = FrameSource(serve_page(PAGE_WITHOUT_QUOTA_VALUES), lookup_factory=unreachable).frame("rate")
    assert failed.problems == ["quotas unknown: cannot ask the admin service at h:9093: connection refused"]
    assert {r.quota for r in failed.rows} == {None} and len(failed.rows) == 3


def test_a_source_says_in_one_line_why_the_endpoint_gave_no_page(serve_page) -> None:
    with pytest.raises(EndpointError, match=r"HTTP 503"):
        FrameSource(serve_page("down", status=503)).frame("rate")
    with pytest.raises(EndpointError, match="not Prometheus exposition text"):
        FrameSource(serve_page('kafka_quota_produce_byte_rate{user="a" 1\n')).frame("rate")
    with pytest.raises(EndpointError, match=r"cannot reach the metrics endpoint at http://127.0.0.1:1/metrics"):
        FrameSource(metrics_url("127.0.0.1:1")).frame("rate")


def test_unlimited_is_kafkas_long_max_value() -> None:
    assert UNLIMITED == 9.223372036854776e18


def test_the_command_line_offers_the_views_sort_orders_without_importing_it() -> None:
    assert _top.SORTS == SORTS
