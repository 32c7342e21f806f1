"""The Grafana dashboard quotaplane ships (deploy/grafana/quotaplane-dashboard.json, and the chart's ConfigMap).

No Grafana installs from the package registries reachable here (Debian has no ``grafana`` package, PyPI's
``grafana`` is a placeholder, no container runtime runs), so the dashboard is not loaded into a real Grafana.
What is checked instead:

- the JSON model: what Grafana needs to import it (uid, title, schema version, panels with unique ids and
  non-overlapping grid positions, every query a PromQL ``expr`` on the ``${datasource}`` variable, every ``$var``
  defined or one of Grafana's own);
- every query's PromQL, with the dashboard variables given values, passes ``promtool check rules`` (Debian's
  Prometheus 2.42) as a recording rule;
- against a running ``quotaplane up`` (the real CLI) driven with produce, fetch and request usage over quotas (so
  there are throttles) and KIP-714 telemetry pushes (exported, refused, throttled, with an unknown
  subscription): every metric name any query uses has samples on the metrics endpoint's page, and every query,
  run by a real Prometheus scraping that endpoint with the shipped configuration, returns series. No panel
  shows a metric that does not exist;
- the chart ships the same JSON, in a ConfigMap labelled ``grafana_dashboard: "1"`` (Grafana's sidecar),
  switched by ``grafana.dashboard.enabled``.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import helm_python as helm
import pytest
import yaml
from opentelemetry.proto.metrics.v1 import metrics_pb2
from prometheus_client.parser import text_string_to_metric_families

from quotaplane.v1 import admin_pb2 as admin_pb
from quotaplane.v1 import admin_pb2_grpc, telemetry_pb2_grpc
from quotaplane.v1 import quota_pb2 as quota_pb
from quotaplane.v1 import telemetry_pb2 as telemetry_pb
from tests.deploy.test_prometheus import ALICE, QUOTA, Producer, shipped_config_for
from tests.prometheus_server import PrometheusServer, promtool, wait_for
from tests.services.test_up import Up, ok
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "quotaplane-dashboard.json"
CHART = ROOT / "helm" / "quotaplane"
CHART_COPY = CHART / "dashboards" / "quotaplane.json"

#: Values for the dashboard's variables when its queries are checked outside Grafana (Grafana's own
#: ``$__rate_interval`` is at least four scrape intervals: 1 s scrapes in the live test).
VARIABLES = {"$__rate_interval": "30s", "$__range": "1h", "$__interval": "15s", "$topk": "10", "$job": ".+"}
GRAFANA_BUILT_INS = {"__rate_interval", "__range", "__interval"}

# PromQL words that are not metric names (keywords, aggregation modifiers, literals).
_KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
    "inf", "nan", "atan2",
}  # fmt: skip
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def queries(model: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(panel title, refId, expr)`` of every query of every panel (rows included, if collapsed)."""
    out = []
    for panel in model["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                out.append((inner["title"], target["refId"], target["expr"]))
    return out


def substituted(expr: str) -> str:
    """``expr`` with the dashboard's variables given the values of ``VARIABLES`` (longest names first)."""
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    return expr


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects.

    Strings, label matchers (``{...}``), ranges (``[...]``), the label lists of ``by``, ``without``, ``on``,
    ``ignoring``, ``group_left`` and ``group_right``, and numbers and durations are removed first; what is left
    that is an identifier, neither a keyword nor a function (followed by ``(``), is a metric name.
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    # numbers and durations (1e3, 0.5, 5m, 1h30m) outside identifiers
    text = re.sub(r"(?<![A-Za-z0-9_:])[0-9][0-9.]*(?:[eE][+-]?[0-9]+)?(?:(?:ms|s|m|h|d|w|y)[0-9]*)*", " ", text)
    names = set()
    for match in _IDENT.finditer(text):
        word = match.group()
        following = text[match.end() :].lstrip()
        if word.lower() in _KEYWORDS or following.startswith("("):
            continue
        names.add(word)
    return names


def test_the_metric_name_parser_on_known_expressions() -> None:
    """The parser the live test relies on, on the shipped rules' expressions (their names are known)."""
    assert metric_names(
        'label_replace(kafka_quota_produce_byte_rate / kafka_quota_produce_quota_value, "quota", "produce", "", "")'
    ) == {"kafka_quota_produce_byte_rate", "kafka_quota_produce_quota_value"}
    assert metric_names(
        'sum without (shard) (rate(kafka_client_metrics_plugin_error_count{job=~"a|b", x="y"}[5m])) or vector(0)'
    ) == {"kafka_client_metrics_plugin_error_count"}
    assert metric_names("count without (user, client_id) (entity:kafka_quota_throttle_time_ms:avg > 0)") == {
        "entity:kafka_quota_throttle_time_ms:avg"
    }
    assert metric_names(
        'a and on (user, client_id) topk(10, b / c) offset 1h5m > bool 1e3 unless up{job="q"} * 0.5'
    ) == {
        "a",
        "b",
        "c",
        "up",
    }


# --- the JSON model ------------------------------------------------------------------------------------------
def test_the_json_model_is_an_importable_dashboard() -> None:
    model = dashboard()
    assert model["uid"] == "quotaplane-overview" and len(model["uid"]) <= 40
    assert model["title"] and isinstance(model["schemaVersion"], int) and model["schemaVersion"] >= 36
    assert "id" not in model or model["id"] is None  # an id would clash with the importing Grafana's own
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"

    panels = [inner for panel in model["panels"] for inner in [panel, *panel.get("panels", [])]]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        grid = panel["gridPos"]
        assert set(grid) == {"h", "w", "x", "y"} and all(isinstance(v, int) and v >= 0 for v in grid.values())
        assert grid["w"] >= 1 and grid["h"] >= 1 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        targets = panel["targets"]
        assert targets, panel["title"]
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
        for target in targets:
            assert target["datasource"] == panel["datasource"]
            assert target["expr"].strip(), panel["title"]
            used = set(re.findall(r"\$\{?(\w+)", target["expr"]))
            assert used <= set(variables) | GRAFANA_BUILT_INS, (panel["title"], used)
    titles = " ".join(panel["title"] for panel in panels).lower()
    for subject in ("quota-value", "throttle time", "lag", "telemetry", "over-admission", "hand-over"):
        assert subject in titles, subject


def test_every_query_passes_promtool(tmp_path: Path) -> None:
    rules = [
        {"record": f"grafana:panel:{i}", "expr": substituted(expr)}
        for i, (_title, _ref, expr) in enumerate(queries(dashboard()))
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert f"SUCCESS: {len(rules)} rules found" in promtool("check", "rules", str(path))


# --- the chart's copy -----------------------------------------------------------------------------------------
def rendered_dashboards(values: dict | None) -> list[dict]:
    manifests = helm.Chart.load(CHART).render(values, name="quotaplane", namespace="kafka")
    return [
        doc
        for path, text in manifests.items()
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc and doc["kind"] == "ConfigMap" and doc["metadata"].get("labels", {}).get("grafana_dashboard")
    ]


def test_the_chart_ships_deploys_dashboard_for_grafanas_sidecar() -> None:
    # .Files.Get reads only inside the chart: its copy must stay identical to deploy/'s
    assert CHART_COPY.read_text() == DASHBOARD.read_text()
    [configmap] = rendered_dashboards(None)
    assert configmap["metadata"]["name"] == "quotaplane-grafana-dashboard"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["quotaplane.json"]) == dashboard()
    assert rendered_dashboards({"grafana": {"dashboard": {"enabled": False}}}) == []
    with pytest.raises(helm.HelmError):
        helm.Chart.load(CHART).render({"grafana": {"dashboard": {"enabled": "yes"}}}, name="q", namespace="kafka")


# --- against a running `quotaplane up` ---------------------------------------------------------------------
CONSUMER = ("--entity-type", "users", "--entity-name", "bob", "--entity-type", "clients", "--entity-name", "c2")
REQUESTER = ("--entity-type", "users", "--entity-name", "carol")
PREFIX = "org.apache.kafka.producer."


def push_telemetry(admin_address: str, gateway: str) -> list[int]:
    """A subscription, then pushes: one exported, one undecodable (a plugin error), one too early (throttled),
    one naming an unknown subscription. The Kafka error codes of the four pushes."""
    with grpc.insecure_channel(admin_address) as channel:
        config = admin_pb.IncrementalAlterConfigsRequest.AlterableConfig
        answer = admin_pb2_grpc.AdminServiceStub(channel).IncrementalAlterConfigs(
            admin_pb.IncrementalAlterConfigsRequest(
                resources=[
                    admin_pb.IncrementalAlterConfigsRequest.AlterConfigsResource(
                        resource_type=admin_pb.RESOURCE_TYPE_CLIENT_METRICS,
                        resource_name="producers",
                        configs=[
                            config(name="metrics", config_operation=admin_pb.ALTER_CONFIG_OP_TYPE_SET, value=PREFIX),
                            config(name="interval.ms", config_operation=admin_pb.ALTER_CONFIG_OP_TYPE_SET, value="100"),
                        ],
                    )
                ]
            )
        )
        assert [r.error_code for r in answer.responses] == [0], answer
    data = metrics_pb2.MetricsData()
    metric = data.resource_metrics.add().scope_metrics.add().metrics.add(name=PREFIX + "record.queue.time.max")
    metric.gauge.data_points.add(as_double=1.0, time_unix_nano=1)
    context = telemetry_pb.RequestContext(
        connection_id="dashboard-test-1",
        client_id="producer-1",
        client_software_name="librdkafka",
        client_software_version="2.16.0",
        client_source_address="10.0.0.7",
        client_source_port=51234,
        principal="User:alice",
    )
    with grpc.insecure_channel(gateway) as channel:
        stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)

        def subscribed() -> telemetry_pb.GetTelemetrySubscriptionsResult:
            batch = telemetry_pb.GetTelemetrySubscriptionsBatch(
                batch_id=1, requests=[telemetry_pb.GetTelemetrySubscriptionsRequest(context=context)]
            )
            [result] = stub.GetTelemetrySubscriptions(batch).results
            return result

        # the subscription reaches the shards through the log: wait until the client gets it
        got = wait_for(
            subscribed,
            until=lambda r: r.error_code == 0 and r.subscription_id != 0,
            timeout_s=30,
            what="a subscription to push to",
        )
        good = data.SerializeToString()
        codes = []
        # a get before a push lets it through whatever the interval (Kafka's rule); the third comes too early
        for payload, delta, get_first in (
            (good, 0, True),
            (b"\xff not OTLP", 0, True),
            (good, 0, False),
            (good, 1, True),
        ):
            if get_first:
                got = subscribed()
            push = telemetry_pb.PushTelemetryRequest(
                client_instance_id=got.client_instance_id,
                subscription_id=got.subscription_id + delta,
                metrics=payload,
                context=context,
            )
            [result] = stub.PushTelemetry(telemetry_pb.PushTelemetryBatch(batch_id=2, requests=[push])).results
            codes.append(result.error_code)
    return codes


def scrape(url: str) -> dict[str, int]:
    """Metric name -> number of samples on the endpoint's page (counters under their ``_total`` name)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            counts[sample.name] = counts.get(sample.name, 0) + 1
    return counts


@pytest.fixture
def running_up(env: dict[str, str], short_dir: Path) -> Iterator[Up]:
    up = Up(short_dir / "data", free_port(), env)
    try:
        up.wait_ready()
        yield up
    finally:
        up.terminate()


def test_every_query_reads_metrics_a_driven_up_exports(running_up: Up, env: dict[str, str], tmp_path: Path) -> None:
    up = running_up
    [metrics_url] = [line.split("metrics on ", 1)[1] for line in up.lines if "metrics on " in line]
    [gateway] = [line.split("gateway gRPC on ", 1)[1] for line in up.lines if "gateway gRPC on " in line]
    assert ok(env, up.address, "quotas", "--alter", "--add-config", f"producer_byte_rate={QUOTA:g}", *ALICE)
    assert ok(env, up.address, "quotas", "--alter", "--add-config", f"consumer_byte_rate={QUOTA:g}", *CONSUMER)
    assert ok(env, up.address, "quotas", "--alter", "--add-config", "request_percentage=10", *REQUESTER)

    metrics_address = metrics_url.removeprefix("http://").removesuffix("/metrics")
    prometheus = PrometheusServer(shipped_config_for(metrics_address, tmp_path), tmp_path)
    producer = Producer(gateway)
    # bob/c2 fetching and carol's requests over their quotas (alice/c1 produces through the first)
    traffic = Producer(
        gateway,
        usage=(quota_pb.UsageItem(quota_type=quota_pb.FETCH, user="bob", client_id="c2", value=QUOTA),),
        request_time=(quota_pb.RequestTimeItem(user="carol", client_id="c3", request_thread_time_nanos=400_000_000),),
    )
    try:
        codes = push_telemetry(up.address, gateway)
        assert codes[0] == 0 and all(code != 0 for code in codes[1:]), codes

        used = {
            name: (title, ref) for title, ref, expr in queries(dashboard()) for name in metric_names(substituted(expr))
        }
        assert len(used) >= 20  # the parser found the dashboard's metrics (a broken parser finds few)

        def missing() -> dict[str, tuple[str, str]]:
            exported = {name for name, count in scrape(metrics_url).items() if count > 0}
            return {name: where for name, where in used.items() if name not in exported}

        assert wait_for(missing, until=lambda m: not m, timeout_s=30, what="every dashboard metric exported") == {}
        assert producer.throttles and max(producer.throttles) > 0
        assert traffic.throttles and max(traffic.throttles) > 0

        def empty_queries() -> list[tuple[str, str]]:
            out = []
            for title, ref, expr in queries(dashboard()):
                answer = prometheus.api("/api/v1/query", query=substituted(expr))
                assert answer.get("status") in ("success", "unreachable"), (title, ref, answer)
                if answer.get("status") != "success" or not answer["data"]["result"]:
                    out.append((title, ref))
            return out

        assert wait_for(empty_queries, until=lambda e: not e, timeout_s=60, what="every query returning series") == []
        prometheus.assert_running()
    finally:
        producer.stop()
        traffic.stop()
        prometheus.stop()
