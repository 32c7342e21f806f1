"""The Prometheus configurations quotaplane ships, loaded by a real Prometheus server (Debian's 2.42 package).

- ``deploy/prometheus/prometheus.yml`` + ``rules.yml`` scrape a running ``quotaplane up`` (the real CLI, a
  private local Ray) on loopback, with nothing configured but alice's quota: KIP-786's quota-value metric is on
  by default in quotaplane (off in Kafka). The shipped file is used as it is, with three test-only changes: the
  target is the port ``up`` picked (a fixed 9464 could be taken), intervals are 1 s instead of 15 s, and the rule file's
  path is made absolute (the config is written to a temp dir). A client that keeps sending at twice its quota
  makes the quota-value ratio rule evaluate, and the near-quota and ignoring-throttles alerts go pending.
- The chart's ``<release>-prometheus`` ConfigMap (a DNS-SRV scrape job for the headless metrics Service and
  the rules) passes ``promtool check config`` and is loaded by a real server. Nothing here runs the cluster
  DNS its SRV name needs, so that config scrapes nothing in the test.
"""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import helm_python as helm
import yaml

from quotaplane.v1 import quota_pb2 as quota_pb
from quotaplane.v1 import quota_pb2_grpc
from tests.prometheus_server import PrometheusServer, promtool, wait_for
from tests.services.test_up import Up, ok
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "prometheus"
CHART = ROOT / "helm" / "quotaplane"
QUOTA = 10_000.0  # bytes/s of alice/c1
ALICE = ("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "c1")


def shipped_config_for(metrics_address: str, workdir: Path) -> Path:
    """deploy/prometheus/prometheus.yml with the test-only changes of the module docstring."""
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(DEPLOY / rule_file) for rule_file in config["rule_files"]]
    [job] = config["scrape_configs"]
    job["scrape_interval"] = "1s"
    [static] = job["static_configs"]
    assert static["targets"] == ["127.0.0.1:9464"]  # what `up` serves by default
    static["targets"] = [metrics_address]
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


class Producer:
    """Usage (by default alice/c1 sending 10 kB: twice her quota) and request time through up's QuotaService
    every 0.5 s, never waiting out a throttle. Answers are collected to show the gateway did throttle."""

    def __init__(
        self,
        gateway: str,
        usage: tuple[quota_pb.UsageItem, ...] = (
            quota_pb.UsageItem(quota_type=quota_pb.PRODUCE, user="alice", client_id="c1", value=QUOTA),
        ),
        request_time: tuple[quota_pb.RequestTimeItem, ...] = (),
    ) -> None:
        self.throttles: list[int] = []
        self._usage, self._request_time = usage, request_time
        self._stop = threading.Event()
        self._channel = grpc.insecure_channel(gateway)
        self._stub = quota_pb2_grpc.QuotaServiceStub(self._channel)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            answer = self._stub.RecordUsageBatch(quota_pb.UsageBatch(items=self._usage), timeout=10)
            self.throttles.extend(answer.throttle_time_ms)
            if self._request_time:
                batch = quota_pb.RequestTimeBatch(items=self._request_time)
                self.throttles.extend(self._stub.RecordRequestTime(batch, timeout=10).throttle_time_ms)
            self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        self._channel.close()


def test_shipped_config_and_rules_scrape_a_running_up(env: dict[str, str], short_dir: Path, tmp_path: Path) -> None:
    data_dir = short_dir / "data"
    up = Up(data_dir, free_port(), env)
    producer: Producer | None = None
    prometheus: PrometheusServer | None = None
    try:
        up.wait_ready()
        [metrics_url] = [line.split("metrics on ", 1)[1] for line in up.lines if "metrics on " in line]
        [gateway] = [line.split("gateway gRPC on ", 1)[1] for line in up.lines if "gateway gRPC on " in line]
        assert ok(env, up.address, "quotas", "--alter", "--add-config", f"producer_byte_rate={QUOTA:g}", *ALICE)

        metrics_address = metrics_url.removeprefix("http://").removesuffix("/metrics")
        prometheus = PrometheusServer(shipped_config_for(metrics_address, tmp_path), tmp_path)
        producer = Producer(gateway)

        [series] = wait_for(
            lambda: prometheus.query('kafka_quota_produce_quota_value{user="alice",client_id="c1"}'),
            until=bool,
            timeout_s=30,
            what="Prometheus returning alice's quota value",
        )
        assert series["metric"]["job"] == "quotaplane"  # the shipped job name, which the rules' alerts name
        assert float(series["value"][1]) == QUOTA

        # the recording rule over the quota-value metric: usage / bound, about 2 for a client at twice its quota
        [ratio] = wait_for(
            lambda: prometheus.query('entity:kafka_quota_usage:ratio{user="alice",client_id="c1"} > 1.5'),
            until=bool,
            timeout_s=30,
            what="alice's usage ratio above 1.5",
        )
        assert ratio["metric"]["quota"] == "produce"
        assert 1.5 < float(ratio["value"][1]) < 3

        # she never waits out her throttles: both alerts are pending (their `for` is minutes)
        for alert in ("KafkaQuotaEntityNearQuota", "KafkaClientIgnoringThrottles"):
            [active] = wait_for(
                lambda alert=alert: prometheus.alerts(alert), until=bool, timeout_s=15, what=f"{alert} pending"
            )
            assert active["state"] == "pending"
            assert (active["labels"]["user"], active["labels"]["client_id"]) == ("alice", "c1")
        assert producer.throttles and max(producer.throttles) > 0

        prometheus.every_rule_evaluated_cleanly()
        assert prometheus.query('up{job="quotaplane"}')[0]["value"][1] == "1"
        assert not prometheus.alerts("QuotaplaneShardLagging") and not prometheus.alerts("QuotaplaneShardDown")
        prometheus.assert_running()
    finally:
        if producer is not None:
            producer.stop()
        if prometheus is not None:
            prometheus.stop()
        up.terminate()


def test_shipped_config_and_rules_pass_promtool() -> None:
    promtool("check", "config", str(DEPLOY / "prometheus.yml"))
    promtool("check", "rules", str(DEPLOY / "rules.yml"))
    # rules_test.yml: every recording rule and alert against series with known answers
    promtool("test", "rules", str(DEPLOY / "rules_test.yml"))


def test_the_charts_prometheus_config_loads_in_a_real_prometheus(tmp_path: Path) -> None:
    manifests = helm.Chart.load(CHART).render(None, name="quotaplane", namespace="kafka")
    [configmap] = [
        doc
        for path, text in manifests.items()
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "quotaplane-prometheus"
    ]
    for name, text in configmap["data"].items():  # the ConfigMap mounted as a directory
        (tmp_path / name).write_text(text)
    checked = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert "quotaplane-rules.yml" in checked  # the rule file was found and checked too

    prometheus = PrometheusServer(tmp_path / "prometheus.yml", tmp_path)
    try:
        groups = wait_for(prometheus.rule_groups, until=bool, timeout_s=30, what="the chart's rules loaded")
        shipped = yaml.safe_load((DEPLOY / "rules.yml").read_text())
        assert sorted(g["name"] for g in groups) == sorted(g["name"] for g in shipped["groups"])
        targets = prometheus.api("/api/v1/targets")
        assert targets["status"] == "success"
        config = yaml.safe_load(prometheus.api("/api/v1/status/config")["data"]["yaml"])
        [job] = config["scrape_configs"]
        assert job["job_name"] == "quotaplane"
        assert job["dns_sd_configs"][0]["names"] == ["_metrics._tcp.quotaplane-metrics.kafka.svc.cluster.local"]
        prometheus.assert_running()
    finally:
        prometheus.stop()
