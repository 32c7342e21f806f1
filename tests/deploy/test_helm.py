"""The Helm chart (helm/quotaplane) and the kustomize manifests (k8s/), rendered by real tools and checked against
the Kubernetes schemas of a pinned version.

Helm is the Helm v4 library itself (helm-python-sdk binds it; lint in strict mode, then render, offline), kustomize
is ``kubectl kustomize``, the schemas are kubernetes-validate's. The custom resources (KubeRay's RayCluster, the
Prometheus Operator's ServiceMonitor and PrometheusRule) have no schema there: the RayCluster is checked for what
KubeRay requires, the PrometheusRule for carrying deploy/prometheus/rules.yml.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "quotaplane"
K8S = ROOT / "k8s"
KUBERNETES_VERSION = "1.31.0"
CUSTOM_KINDS = {"RayCluster", "ServiceMonitor", "PrometheusRule"}

sys.path.insert(0, str(K8S))
import render_base  # noqa: E402


def production_values() -> dict:
    return yaml.safe_load((CHART / "values-production.yaml").read_text())


def render(values: dict | None = None) -> list[dict]:
    manifests = helm.Chart.load(CHART).render(values, name="quotaplane", namespace="kafka")
    return [
        doc
        for path, text in sorted(manifests.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def kustomize(directory: Path) -> list[dict]:
    kubectl = shutil.which("kubectl") or "/usr/bin/kubectl"
    out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=True, timeout=60)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name_suffix: str = "") -> dict:
    [doc] = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    return doc


def pod_specs(docs: list[dict]) -> list[dict]:
    specs = []
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "Job"):
            specs.append(d["spec"]["template"]["spec"])
        elif d["kind"] == "CronJob":
            specs.append(d["spec"]["jobTemplate"]["spec"]["template"]["spec"])
        elif d["kind"] == "RayCluster":
            specs.append(d["spec"]["headGroupSpec"]["template"]["spec"])
            specs.extend(g["template"]["spec"] for g in d["spec"]["workerGroupSpecs"])
    return specs


# The frontends in proxy mode in front of a three-broker cluster, behind a NodePort Service and a NetworkPolicy.
PROXY_VALUES = {
    "frontend": {
        "enabled": True,
        "advertisedHost": "kafka.example.com",
        "service": {"type": "NodePort"},
        "proxy": {
            "enabled": True,
            "upstreamBootstrap": "kafka-0.kafka:9092,kafka-1.kafka:9092",
            "brokerPortBase": 31000,
            "brokerNodeIds": [1, 2, 5],
            "failClosed": True,
        },
    },
    "networkPolicy": {"enabled": True},
}


def with_proxy(**proxy) -> dict:
    """PROXY_VALUES with ``frontend.proxy`` keys replaced (None: removed)."""
    values = json.loads(json.dumps(PROXY_VALUES))
    values["frontend"]["proxy"].update(proxy)
    values["frontend"]["proxy"] = {k: v for k, v in values["frontend"]["proxy"].items() if v is not None}
    return values


# The same proxy authenticating to the upstream with SASL/PLAIN, its password in a Secret of the user's.
PROXY_SASL_VALUES = with_proxy(
    sasl={"username": "quota$proxy", "existingSecret": "upstream-kafka", "passwordKey": "pw"}
)

RENDERINGS = {
    "helm-default": lambda: render(),
    "helm-production": lambda: render(production_values()),
    "helm-proxy": lambda: render(PROXY_VALUES),
    "helm-proxy-sasl": lambda: render(PROXY_SASL_VALUES),
    "kustomize-base": lambda: kustomize(K8S / "base"),
    "kustomize-production": lambda: kustomize(K8S / "overlays" / "production"),
}


@pytest.fixture(scope="module", params=sorted(RENDERINGS))
def rendered(request) -> list[dict]:
    return RENDERINGS[request.param]()


@pytest.mark.parametrize("values", [None, "production", "proxy", "proxy-sasl"])
def test_lint_strict_is_clean(values):
    chosen = {None: None, "production": production_values(), "proxy": PROXY_VALUES, "proxy-sasl": PROXY_SASL_VALUES}[
        values
    ]
    report = helm.lint(CHART, chosen, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    assert report["errors"] == [] and report["messages"] == [], report


def test_every_core_object_is_valid_for_the_pinned_kubernetes(rendered):
    kinds = {d["kind"] for d in rendered}
    assert {"ConfigMap", "Deployment", "Service", "CronJob", "RayCluster", "PersistentVolumeClaim"} <= kinds
    for doc in rendered:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_raycluster_has_what_kuberay_requires(rendered):
    ray = one(rendered, "RayCluster")
    assert ray["apiVersion"] == "ray.io/v1"
    head = ray["spec"]["headGroupSpec"]
    assert isinstance(head["rayStartParams"], dict) and head["template"]["spec"]["containers"]
    # KubeRay takes the Ray container to be the first one
    assert head["template"]["spec"]["containers"][0]["name"] == "ray-head"
    [workers] = ray["spec"]["workerGroupSpecs"]
    for field in ("groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams", "template"):
        assert field in workers, field
    assert workers["minReplicas"] <= workers["replicas"] <= workers["maxReplicas"]
    assert workers["template"]["spec"]["containers"][0]["name"] == "ray-worker"
    # the event log's volume is mounted in every Ray pod at the data dir
    claim = one(rendered, "PersistentVolumeClaim")["metadata"]["name"]
    for spec in [head["template"]["spec"], workers["template"]["spec"]]:
        [volume] = [v for v in spec["volumes"] if v["name"] == "data"]
        assert volume["persistentVolumeClaim"]["claimName"] == claim
        assert {"name": "data", "mountPath": "/data"} in spec["containers"][0]["volumeMounts"]
    # the bootstrap joins the head's own Ray, the gateways the head's Service
    bootstrap = head["template"]["spec"]["containers"][1]
    assert "quotaplane up --ray-address=127.0.0.1:6379" in bootstrap["args"][0]
    config = one(rendered, "ConfigMap", "quotaplane")
    assert config["data"]["QUOTAPLANE_RAY_ADDRESS"] == f"{ray['metadata']['name']}-head-svc:6379"


def test_every_container_has_resources_and_probes(rendered):
    for spec in pod_specs(rendered):
        sidecars = [c for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
        for container in spec["containers"] + sidecars:
            assert container["resources"]["requests"] and container["resources"]["limits"], container["name"]
            # a batch job has no port to probe: its deadline ends a run that hangs
            if spec.get("restartPolicy") != "Never":
                assert "livenessProbe" in container, container["name"]
    for job in by_kind(rendered, "CronJob"):
        assert job["spec"]["concurrencyPolicy"] == "Forbid"
        assert 60 <= job["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] < 3600  # the jobs are hourly
        for container in spec.get("initContainers", []):
            assert container["resources"]["limits"], container["name"]
        assert spec["securityContext"]["runAsNonRoot"] is True


def test_the_gateways_scale_and_probe_grpc_health(rendered):
    gateway = one(rendered, "Deployment", "-gateway")
    hpa = one(rendered, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == gateway["metadata"]["name"]
    pdb = one(rendered, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == gateway["spec"]["selector"]["matchLabels"]
    pod = gateway["spec"]["template"]
    [up] = pod["spec"]["containers"]
    assert up["readinessProbe"]["grpc"] == {"port": 9094, "service": "quotaplane.v1.QuotaService"}
    assert up["livenessProbe"]["grpc"] == {"port": 9093}
    assert "--ray-address=$(QUOTAPLANE_RAY_ADDRESS)" in up["args"] and "--frontend-port=-1" in up["args"]
    # replicas would repeat the fleet's series: only the head's bootstrap serves metrics
    assert "--metrics-port=-1" in up["args"] and "prometheus.io/scrape" not in pod["metadata"].get("annotations", {})


def test_one_metrics_endpoint_per_release_on_the_head(rendered):
    head = one(rendered, "RayCluster")["spec"]["headGroupSpec"]["template"]
    assert head["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert head["metadata"]["annotations"]["prometheus.io/port"] == "9464"
    bootstrap = next(c for c in head["spec"]["containers"] if c["name"] == "bootstrap")
    assert {"name": "metrics", "containerPort": 9464} in bootstrap["ports"]
    assert "--metrics-port=9464" in bootstrap["args"][0]
    service = one(rendered, "Service", "-metrics")
    assert service["spec"]["clusterIP"] == "None"  # headless: DNS SRV lists the pod
    assert service["spec"]["selector"].items() <= head["metadata"]["labels"].items()  # selects the head pod
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "ray-head"
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9464, "targetPort": "metrics", "appProtocol": "http"}
    ]
    for other in by_kind(rendered, "Service"):
        if other is not service:
            assert all(p["name"] != "metrics" for p in other["spec"]["ports"]), other["metadata"]["name"]


def advertised_host(docs: list[dict]) -> str:
    """The frontends' --advertised-host as the kubelet expands it: $(VAR) from the ConfigMap of envFrom."""
    frontend = one(docs, "Deployment", "-frontend")["spec"]["template"]["spec"]["containers"][0]
    [arg] = [a for a in frontend["args"] if a.startswith("--advertised-host=")]
    [source] = [e["configMapRef"]["name"] for e in frontend["envFrom"]]
    [config] = [c for c in by_kind(docs, "ConfigMap") if c["metadata"]["name"] == source]
    return re.sub(r"\$\((\w+)\)", lambda m: config["data"][m.group(1)], arg.split("=", 1)[1])


def test_the_kustomize_overlay_advertises_the_public_name():
    # the overlay merges one ConfigMap key (no patch by argument position); the base advertises the Service
    assert advertised_host(kustomize(K8S / "overlays" / "production")) == "kafka-quotas.example.com"
    assert advertised_host(kustomize(K8S / "base")) == "quotaplane-kafka"


def ray_resources(ray_start_params: dict) -> dict:
    """The custom resources of a group as ``ray start`` gets them: KubeRay puts ``--resources=<value>`` on a
    shell command line, so the value must survive shell unquoting as JSON."""
    [arg] = shlex.split(f"--resources={ray_start_params['resources']}")
    return json.loads(arg.removeprefix("--resources="))


def test_the_actors_are_pinned_where_they_belong(rendered):
    ray_cluster = one(rendered, "RayCluster")["spec"]
    head = ray_resources(ray_cluster["headGroupSpec"]["rayStartParams"])
    [workers] = ray_cluster["workerGroupSpecs"]
    assert head["quotaplane_controller"] == 1  # only the head (with the event log) runs the controller
    assert ray_resources(workers["rayStartParams"]) == {"quotaplane_shard": 1000}
    assert head.get("quotaplane_shard", 0) == (0 if workers["maxReplicas"] else 1000)  # production: workers only
    flags = ["--controller-resource=quotaplane_controller", "--shard-resource=quotaplane_shard", "--spread-shards"]
    bootstrap = next(
        c for c in ray_cluster["headGroupSpec"]["template"]["spec"]["containers"] if c["name"] == "bootstrap"
    )
    assert all(flag in bootstrap["args"][0].split() for flag in flags)
    for deployment in by_kind(rendered, "Deployment"):  # the same flags on every `up`: none creates actors elsewhere
        assert all(flag in deployment["spec"]["template"]["spec"]["containers"][0]["args"] for flag in flags)


def test_production_values():
    docs = render(production_values())
    frontend = one(docs, "Deployment", "-frontend")
    args = frontend["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--advertised-port=9092" in args
    assert advertised_host(docs) == "kafka-quotas.example.com"
    assert "--sasl-credentials-file=/etc/quotaplane/sasl/sasl-credentials" in args
    assert "--kafka-operators=User:admin" in args
    assert one(docs, "Service", "-kafka")["spec"]["type"] == "LoadBalancer"
    pvc = one(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["storageClassName"] == "efs-sc" and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    for job in by_kind(docs, "CronJob"):
        assert (
            "--master=$(QUOTAPLANE_SPARK_MASTER)"
            in job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
        )
    assert one(docs, "ConfigMap", "quotaplane")["data"]["QUOTAPLANE_SPARK_MASTER"].startswith("spark://")
    assert {"compact-log", "compact-telemetry"} == {
        j["metadata"]["name"].removeprefix("quotaplane-") for j in by_kind(docs, "CronJob")
    }
    monitor = one(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    metrics_service = one(docs, "Service", "-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= metrics_service["metadata"]["labels"].items()
    assert metrics_service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "quotaplane"  # rules' job label
    assert not [c for c in by_kind(docs, "ConfigMap") if c["metadata"]["name"].endswith("-prometheus")]
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yml").read_text())
    assert one(docs, "PrometheusRule")["spec"] == rules
    assert len(by_kind(docs, "NetworkPolicy")) == 2


def test_the_default_prometheus_configmap_carries_deploy_prometheus_rules():
    shipped = (ROOT / "deploy" / "prometheus" / "rules.yml").read_text()
    # .Files.Get reads only inside the chart: the copy there must stay identical
    assert (CHART / "files" / "prometheus" / "rules.yml").read_text() == shipped
    config = one(render(), "ConfigMap", "-prometheus")
    assert yaml.safe_load(config["data"]["quotaplane-rules.yml"]) == yaml.safe_load(shipped)
    prometheus = yaml.safe_load(config["data"]["prometheus.yml"])
    assert prometheus["rule_files"] == ["quotaplane-rules.yml"]
    [job] = prometheus["scrape_configs"]
    assert job["job_name"] == "quotaplane"  # the job the rules' endpoint-down alert names
    # the SRV name of the headless metrics Service's `metrics` port, in the release's namespace
    assert job["dns_sd_configs"] == [
        {
            "names": ["_metrics._tcp.quotaplane-metrics.kafka.svc.cluster.local"],
            "type": "SRV",
            "refresh_interval": "30s",
        }
    ]


def test_k8s_base_is_the_chart_rendered():
    files = render_base.render()
    on_disk = {p.name: p.read_text() for p in (K8S / "base").glob("*.yaml")}
    assert on_disk == files, "k8s/base/ is stale: run .venv/bin/python k8s/render_base.py"


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"shards": 0}, "/shards"),
        ({"shards": 1025}, "/shards"),  # beyond MAX_SHARDS: the reshard would be refused
        ({"frontend": {"enabled": True}}, "/frontend/advertisedHost"),
        ({"frontend": {"enabled": True, "advertisedHost": ""}}, "/frontend/advertisedHost"),
        ({"persistence": {"enabled": True, "storageClass": ""}}, "/persistence/storageClass"),
        ({"metrics": {"prometheus": {"scrapeInterval": "15"}}}, "/metrics/prometheus/scrapeInterval"),
        (with_proxy(upstreamBootstrap=None), "/frontend/proxy/upstreamBootstrap"),
        (with_proxy(upstreamBootstrap=""), "/frontend/proxy/upstreamBootstrap"),
        (with_proxy(upstreamBootstrap="kafka-0.kafka"), "/frontend/proxy/upstreamBootstrap"),
        (with_proxy(brokerNodeIds=[]), "/frontend/proxy/brokerNodeIds"),
        (with_proxy(brokerNodeIds=[1, 1]), "/frontend/proxy/brokerNodeIds"),
        (with_proxy(brokerNodeIds=[-1]), "/frontend/proxy/brokerNodeIds/0"),
        (with_proxy(brokerPortBase=70000), "/frontend/proxy/brokerPortBase"),
        (with_proxy(failClosed="yes"), "/frontend/proxy/failClosed"),
        (with_proxy(sasl={"username": 1}), "/frontend/proxy/sasl/username"),
        (with_proxy(sasl={"username": "u", "existingSecret": "Not_A_Name"}), "/frontend/proxy/sasl/existingSecret"),
        (
            with_proxy(sasl={"username": "u", "existingSecret": "s", "passwordKey": ""}),
            "/frontend/proxy/sasl/passwordKey",
        ),
        (with_proxy(sasl={"username": "u", "password": "secret"}), "/frontend/proxy/sasl"),  # never in values
    ],
)
def test_values_that_cannot_work_are_rejected_naming_the_value(values, named):
    chart = helm.Chart.load(CHART)
    with pytest.raises(helm.HelmError) as schema:
        chart.validate_schema(chart.merge_values(values))
    assert named in str(schema.value)
    with pytest.raises(helm.HelmError) as rendering:
        chart.render(values, name="quotaplane")
    assert named in str(rendering.value)
    report = helm.lint(CHART, values, strict=True)
    assert any(named in m["error"] for m in report["messages"] if m["severity"] == 3), report


def test_operator_tokens_guard_every_admin_service_of_the_release():
    docs = render(
        {"operatorTokens": {"existingSecret": "qp-operators"}, "frontend": {"enabled": True, "advertisedHost": "k"}}
    )
    head = one(docs, "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]
    pods = [head, one(docs, "Deployment", "-gateway")["spec"]["template"]["spec"]]
    pods.append(one(docs, "Deployment", "-frontend")["spec"]["template"]["spec"])
    flag = "--operator-tokens-file=/etc/quotaplane/operator/operator-tokens"
    for pod in pods:
        [up] = [c for c in pod["containers"] if c["name"] in ("up", "bootstrap")]
        assert flag in " ".join(up["args"])
        assert {"name": "operator-tokens", "mountPath": "/etc/quotaplane/operator", "readOnly": True} in up[
            "volumeMounts"
        ]
        [token] = [e for e in up["env"] if e["name"] == "QUOTAPLANE_TOKEN"]  # for `kubectl exec ... quotaplane`
        assert token["valueFrom"]["secretKeyRef"] == {"name": "qp-operators", "key": "cli-token", "optional": True}
        [volume] = [v for v in pod["volumes"] if v["name"] == "operator-tokens"]
        assert volume["secret"]["secretName"] == "qp-operators"
    for doc in render():  # off by default
        assert "operator-tokens" not in yaml.safe_dump(doc)


def test_persistence_off_renders_without_claim_or_jobs():
    docs = render({"persistence": {"enabled": False, "storageClass": ""}})
    assert not by_kind(docs, "PersistentVolumeClaim") and not by_kind(docs, "CronJob")
    head = one(docs, "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]
    assert {"name": "data", "emptyDir": {}} in head["volumes"]


def frontend_up(docs: list[dict]) -> dict:
    [up] = one(docs, "Deployment", "-frontend")["spec"]["template"]["spec"]["containers"]
    return up


def test_proxy_mode_exposes_every_listed_broker_on_base_plus_id():
    docs = render(PROXY_VALUES)
    up = frontend_up(docs)
    args = up["args"]
    assert "--upstream-bootstrap=kafka-0.kafka:9092,kafka-1.kafka:9092" in args
    assert "--upstream-broker-port-base=31000" in args
    assert "--upstream-max-brokers=6" in args  # ids above the highest listed are left out, not advertised
    assert "--upstream-fail-closed" in args
    # the bootstrap port and the advertised host stay the frontend's own
    assert "--frontend-port=9092" in args and advertised_host(docs) == "kafka.example.com"
    brokers = {"broker-1": 31001, "broker-2": 31002, "broker-5": 31005}
    ports = {p["name"]: p["containerPort"] for p in up["ports"]}
    assert ports == {"admin": 9093, "gateway": 9094, "kafka": 9092, **brokers}
    service = one(docs, "Service", "-kafka")
    exposed = {p["name"]: p for p in service["spec"]["ports"]}
    assert exposed.keys() == {"kafka", *brokers}
    for name, port in brokers.items():
        # clients are told <advertised host>:<base + id>: a NodePort Service must expose that very port
        assert exposed[name] == {"name": name, "port": port, "targetPort": name, "nodePort": port}
    policy = one(docs, "NetworkPolicy", "-grpc")
    [clients] = [rule for rule in policy["spec"]["ingress"] if "from" not in rule]  # from anywhere
    assert {p["port"] for p in clients["ports"]} == {9092, *brokers.values()}
    notes = helm.Chart.load(CHART).render(PROXY_VALUES, name="quotaplane")["quotaplane/templates/NOTES.txt"]
    assert "31005 (broker 5)" in notes and "Every frontend replica serves every broker port" in notes


def test_proxy_mode_on_a_load_balancer_passes_what_it_is_given():
    values = with_proxy(brokerPortBase=None, brokerNodeIds=[0, 1, 2], failClosed=None)
    values["frontend"]["service"] = {"type": "LoadBalancer"}
    docs = render(values)
    args = frontend_up(docs)["args"]
    assert "--upstream-broker-port-base=19092" in args and "--upstream-max-brokers=3" in args
    assert "--upstream-fail-closed" not in args
    ports = one(docs, "Service", "-kafka")["spec"]["ports"]
    assert [(p["name"], p["port"], "nodePort" in p) for p in ports[1:]] == [
        ("broker-0", 19092, False),
        ("broker-1", 19093, False),
        ("broker-2", 19094, False),
    ]
    for doc in docs:
        if doc["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_proxy_mode_is_off_by_default():
    for docs in (render(), render({"frontend": {"enabled": True, "advertisedHost": "k"}}), render(production_values())):
        assert "upstream" not in yaml.safe_dump(docs) and "broker-" not in yaml.safe_dump(docs)


def test_proxy_sasl_mounts_the_users_secret_and_passes_its_path():
    docs = render(PROXY_SASL_VALUES)
    pod = one(docs, "Deployment", "-frontend")["spec"]["template"]["spec"]
    up = frontend_up(docs)
    # "$" doubled: the kubelet's $(VAR) expansion turns it back into the username as given
    assert "--upstream-sasl-username=quota$$proxy" in up["args"]
    assert "--upstream-sasl-password-file=/etc/quotaplane/upstream-sasl/password" in up["args"]
    assert up["args"][-2:] == [a for a in up["args"] if a.startswith("--upstream-sasl-")]
    assert {"name": "upstream-sasl", "mountPath": "/etc/quotaplane/upstream-sasl", "readOnly": True} in up[
        "volumeMounts"
    ]
    [volume] = [v for v in pod["volumes"] if v["name"] == "upstream-sasl"]
    assert volume["secret"] == {"secretName": "upstream-kafka", "items": [{"key": "pw", "path": "password"}]}
    # the password itself is nowhere in the release: no Secret of the chart's carries it
    assert not by_kind(docs, "Secret")
    # only the frontends talk to the upstream
    for deployment in by_kind(docs, "Deployment"):
        if deployment is not one(docs, "Deployment", "-frontend"):
            assert "upstream-sasl" not in yaml.safe_dump(deployment)
    assert "upstream-sasl" not in yaml.safe_dump(one(docs, "RayCluster"))
    notes = helm.Chart.load(CHART).render(PROXY_SASL_VALUES, name="quotaplane")["quotaplane/templates/NOTES.txt"]
    assert "SASL/PLAIN as quota$proxy" in notes and "pw of Secret upstream-kafka" in notes


def test_proxy_sasl_is_off_by_default_and_outside_proxy_mode():
    # the default passwordKey needs no value; off, the frontend pods are exactly those without the setting
    with_default_key = render(with_proxy(sasl={"username": "u", "existingSecret": "s"}))
    volumes = one(with_default_key, "Deployment", "-frontend")["spec"]["template"]["spec"]["volumes"]
    [volume] = [v for v in volumes if v["name"] == "upstream-sasl"]
    assert volume["secret"]["items"] == [{"key": "password", "path": "password"}]
    assert "upstream-sasl" not in yaml.safe_dump(render(PROXY_VALUES))
    notes = helm.Chart.load(CHART).render(PROXY_VALUES, name="quotaplane")["quotaplane/templates/NOTES.txt"]
    assert "connect to the upstream without SASL" in notes
    # a username with proxy mode off changes nothing
    values = with_proxy(enabled=False, sasl={"username": "u"})
    assert render(values) == render(with_proxy(enabled=False))


def test_proxy_sasl_username_without_its_secret_fails_the_render():
    message = "frontend.proxy.sasl.existingSecret is required with frontend.proxy.sasl.username: the name of a Secret"
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(with_proxy(sasl={"username": "u"}))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (with_proxy(brokerPortBase=65535), "broker 1's port 65536 (brokerPortBase + id) is past 65535"),
        (
            with_proxy(brokerPortBase=9092, brokerNodeIds=[2]),
            "broker 2's port 9094 (brokerPortBase + id) is ports.gateway's",
        ),
        (with_proxy(brokerPortBase=19092), "broker 1's port 19093 (brokerPortBase + id) is outside 30000-32767"),
    ],
)
def test_broker_ports_that_cannot_work_fail_the_render(values, message):
    with pytest.raises(helm.HelmError, match=re.escape(f"frontend.proxy: {message}")):
        render(values)


@pytest.mark.parametrize(
    ("proxy", "message"),
    [
        (
            {"upstreamBootstrap": None},
            "frontend.proxy.upstreamBootstrap is required with frontend.proxy.enabled: HOST:PORT[,HOST:PORT...]",
        ),
        ({"brokerNodeIds": []}, "frontend.proxy.brokerNodeIds is required with frontend.proxy.enabled"),
    ],
)
def test_proxy_without_upstream_fails_even_without_the_schema(tmp_path, proxy, message):
    # as `helm template --skip-schema-validation` would: the template's own check names what is missing
    chart = tmp_path / "quotaplane"
    shutil.copytree(CHART, chart)
    (chart / "values.schema.json").unlink()
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        helm.Chart.load(chart).render(with_proxy(**proxy), name="quotaplane")


# --- TLS: the gRPC listeners (mutual), the Kafka listener (client certificates), SCRAM; files from Secrets only ------
TLS_VALUES = {
    "frontend": {"enabled": True, "advertisedHost": "kafka.example.com"},
    "grpcTls": {
        "existingSecret": "qp-grpc",
        "serverName": "localhost",
        "mutual": True,
        "adminSslPrincipalMappingRules": "RULE:^CN=([^,]*).*$/$1/L,DEFAULT",
        "frontendClientSecret": "qp-frontend-client",
    },
    "kafkaTls": {"existingSecret": "qp-kafka", "clientAuth": True, "sslPrincipalMappingRules": "RULE:^CN=(.*)$/$1/"},
    "sasl": {"scram": {"existingSecret": "qp-scram"}, "kafkaOperators": ["User:admin"]},
}


def _containers(docs: list[dict]) -> dict[str, tuple[dict, dict]]:
    """The `up` container of the bootstrap, a gateway and a frontend, each with its pod spec."""
    head = one(docs, "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]
    [bootstrap] = [c for c in head["containers"] if c["name"] == "bootstrap"]
    out = {"bootstrap": (bootstrap, head)}
    for name in ("gateway", "frontend"):
        pod = one(docs, "Deployment", f"-{name}")["spec"]["template"]["spec"]
        out[name] = (pod["containers"][0], pod)
    return out


def test_tls_values_lint_clean_and_render_valid_objects():
    report = helm.lint(CHART, TLS_VALUES, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    assert report["errors"] == [] and report["messages"] == [], report
    for doc in render(TLS_VALUES):
        if doc["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_tls_flags_come_from_mounted_secrets_never_values():
    docs = render(TLS_VALUES)
    grpc_flags = [
        "--tls-cert=/etc/quotaplane/grpc-tls/tls.crt",
        "--tls-key=/etc/quotaplane/grpc-tls/tls.key",
        "--tls-client-ca=/etc/quotaplane/grpc-tls/ca.crt",
    ]
    grpc_mount = {"name": "grpc-tls", "mountPath": "/etc/quotaplane/grpc-tls", "readOnly": True}
    for name, (up, pod) in _containers(docs).items():
        args = " ".join(up["args"])
        assert all(flag in args for flag in grpc_flags), name
        assert grpc_mount in up["volumeMounts"], name
        [volume] = [v for v in pod["volumes"] if v["name"] == "grpc-tls"]
        assert volume["secret"]["secretName"] == "qp-grpc"
        assert {i["key"] for i in volume["secret"]["items"]} == {"tls.crt", "tls.key", "ca.crt"}
    # the rules ride in the ConfigMap: a "$1" reaches `up` as written (the kubelet inserts a $(VAR) verbatim; the
    # bootstrap's shell expands its quoted "$VAR" once)
    config = one(docs, "ConfigMap", "quotaplane")["data"]
    assert config["QUOTAPLANE_ADMIN_SSL_PRINCIPAL_MAPPING_RULES"] == "RULE:^CN=([^,]*).*$/$1/L,DEFAULT"
    assert config["QUOTAPLANE_KAFKA_SSL_PRINCIPAL_MAPPING_RULES"] == "RULE:^CN=(.*)$/$1/"
    containers = _containers(docs)
    bootstrap = containers["bootstrap"][0]["args"][0]
    assert '"--admin-ssl-principal-mapping-rules=$QUOTAPLANE_ADMIN_SSL_PRINCIPAL_MAPPING_RULES"' in bootstrap
    rules_flag = "--admin-ssl-principal-mapping-rules=$(QUOTAPLANE_ADMIN_SSL_PRINCIPAL_MAPPING_RULES)"
    assert rules_flag in containers["gateway"][0]["args"] and rules_flag in containers["frontend"][0]["args"]

    up, pod = containers["frontend"]
    for flag in (
        "--kafka-tls-cert=/etc/quotaplane/kafka-tls/tls.crt",
        "--kafka-tls-key=/etc/quotaplane/kafka-tls/tls.key",
        "--kafka-tls-client-ca=/etc/quotaplane/kafka-tls/ca.crt",
        "--kafka-ssl-principal-mapping-rules=$(QUOTAPLANE_KAFKA_SSL_PRINCIPAL_MAPPING_RULES)",
        "--sasl-scram-credentials-file=/etc/quotaplane/sasl-scram/scram-credentials",
        "--kafka-operators=User:admin",  # the listener authenticates (SCRAM, certificates): the list is its only grant
        "--frontend-tls-ca=/etc/quotaplane/grpc-tls/ca.crt",
        "--frontend-tls-server-name=localhost",
        "--frontend-tls-cert=/etc/quotaplane/grpc-client/tls.crt",
        "--frontend-tls-key=/etc/quotaplane/grpc-client/tls.key",
    ):
        assert flag in up["args"], flag
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {
        "grpc-tls": "qp-grpc",
        "kafka-tls": "qp-kafka",
        "sasl-scram": "qp-scram",
        "grpc-client": "qp-frontend-client",
    }
    mounts = {m["name"]: m for m in up["volumeMounts"]}
    assert all(mounts[name]["readOnly"] for name in secrets)
    # the Kafka listener's material is the frontends' only; no Secret of the chart's holds any of it
    for name in ("gateway", "bootstrap"):
        assert not {"kafka-tls", "sasl-scram", "grpc-client"} & {v["name"] for v in containers[name][1]["volumes"]}
    assert not by_kind(docs, "Secret")


def test_tls_probes_and_the_bootstrap_wait_speak_tls():
    docs = render(TLS_VALUES)
    for name, (up, pod) in _containers(docs).items():
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert "grpc" not in up[probe] and up[probe]["exec"]["command"][:2] == ["python", "-c"], (name, probe)
        if name != "bootstrap":
            [wait] = [c for c in pod["initContainers"] if c["name"] == "wait-for-bootstrap"]
            assert wait["command"] == ["sh", "-c"] and wait["args"][2] == "quotaplane-bootstrap:9093"
            assert {"name": "grpc-tls", "mountPath": "/etc/quotaplane/grpc-tls", "readOnly": True} in wait[
                "volumeMounts"
            ]
    gateway = _containers(docs)["gateway"][0]
    assert gateway["readinessProbe"]["exec"]["command"][3:] == ["127.0.0.1:9094", "quotaplane.v1.QuotaService"]
    assert gateway["livenessProbe"]["exec"]["command"][3:] == ["127.0.0.1:9093", ""]


def test_the_tls_probe_passes_against_a_serving_mutual_tls_admin_service(tmp_path):
    """The rendered probe, run as the kubelet runs it, against a real mutual-TLS AdminService: SERVING passes;
    a service the server does not know, or a certificate it does not trust, fails."""
    from quotaplane.config import ConfigStore
    from quotaplane.services._security import ServerSecurity
    from quotaplane.services.admin import serve
    from tests.services.test_frontend_grpc_tls import _dual_use
    from tests.services.test_security import _ca, _write

    ca = _ca("helm probe CA")
    _write(tmp_path / "ca", ca[0])
    _write(tmp_path / "pod", *_dual_use("localhost", ca))  # cert-manager's kind: server and client authentication
    files = tmp_path / "grpc-tls"
    files.mkdir()
    for source, target in (("ca.pem", "ca.crt"), ("pod.pem", "tls.crt"), ("pod.key", "tls.key")):
        (files / target).write_bytes((tmp_path / source).read_bytes())
    gateway = _containers(render(TLS_VALUES))["gateway"][0]
    script = gateway["livenessProbe"]["exec"]["command"][2].replace("/etc/quotaplane/grpc-tls/", f"{files}/")
    security = ServerSecurity.load(
        cert_file=files / "tls.crt", key_file=files / "tls.key", client_ca_file=files / "ca.crt"
    )
    store = ConfigStore.open(tmp_path / "log", fsync=False)
    server, port = serve(store, security=security)
    try:

        def probe(*args: str) -> int:
            return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, timeout=30).returncode

        assert probe(f"127.0.0.1:{port}", "") == 0
        assert probe(f"127.0.0.1:{port}", "quotaplane.v1.AdminService") == 0
        assert probe(f"127.0.0.1:{port}", "no.such.Service") != 0
        other = _ca("another CA")
        _write(tmp_path / "other", other[0])
        (files / "ca.crt").write_bytes((tmp_path / "other.pem").read_bytes())  # trusts another CA: refused
        assert probe(f"127.0.0.1:{port}", "") != 0
    finally:
        server.stop(None).wait()
        store.close()


def test_a_kafka_listener_with_client_certificates_only_gets_its_operators():
    values = {
        "frontend": {"enabled": True, "advertisedHost": "k"},
        "kafkaTls": {"existingSecret": "qp-kafka", "clientAuth": True},
        "sasl": {"kafkaOperators": ["User:ops"]},
    }
    args = frontend_up(render(values))["args"]
    assert "--kafka-operators=User:ops" in args and "--kafka-tls-client-ca=/etc/quotaplane/kafka-tls/ca.crt" in args
    assert not any(a.startswith(("--sasl-", "--tls-", "--frontend-tls-")) for a in args)  # nothing else turned on
    # TLS without client authentication authenticates no one: no list passed (the admin APIs stay open)
    values["kafkaTls"]["clientAuth"] = False
    args = frontend_up(render(values))["args"]
    assert not any(a.startswith("--kafka-operators") for a in args) and "--kafka-tls-cert=" in " ".join(args)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"grpcTls": {"existingSecret": "qp-grpc"}}, "grpcTls.serverName is required with grpcTls.existingSecret"),
        (
            {"grpcTls": {"existingSecret": "qp-grpc", "serverName": "x", "adminSslPrincipalMappingRules": "DEFAULT"}},
            "grpcTls.adminSslPrincipalMappingRules maps client certificates: it needs grpcTls.mutual",
        ),
        (
            {
                "frontend": {"enabled": True, "advertisedHost": "k"},
                "kafkaTls": {"existingSecret": "qp-kafka", "sslPrincipalMappingRules": "DEFAULT"},
            },
            "kafkaTls.sslPrincipalMappingRules maps client certificates",
        ),
    ],
)
def test_tls_settings_that_cannot_work_fail_the_render(values, message):
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(values)


def test_tls_is_off_by_default():
    for docs in (render(), render(production_values()), render(PROXY_VALUES)):
        text = yaml.safe_dump(docs)
        assert "grpc-tls" not in text and "kafka-tls" not in text and "scram" not in text and "--tls-" not in text
