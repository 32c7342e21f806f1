"""The Helm chart (helm/quotaplane) and the kustomize manifests (k8s/), rendered by real tools and checked against
the Kubernetes schemas of a pinned version.

Helm is the Helm v4 library itself (helm-python-sdk binds it; lint in strict mode, then render, offline), kustomize
is ``kubectl kustomize``, the schemas are kubernetes-validate's. The custom resources (KubeRay's RayCluster, the
Prometheus Operator's ServiceMonitor and PrometheusRule) have no schema there: the RayCluster is checked for what
KubeRay requires, the PrometheusRule for carrying deploy/prometheus/rules.yml.
"""

from __future__ import annotations

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


RENDERINGS = {
    "helm-default": lambda: render(),
    "helm-production": lambda: render(production_values()),
    "kustomize-base": lambda: kustomize(K8S / "base"),
    "kustomize-production": lambda: kustomize(K8S / "overlays" / "production"),
}


@pytest.fixture(scope="module", params=sorted(RENDERINGS))
def rendered(request) -> list[dict]:
    return RENDERINGS[request.param]()


@pytest.mark.parametrize("values", [None, "production"])
def test_lint_strict_is_clean(values):
    report = helm.lint(
        CHART, production_values() if values else None, strict=True, kube_version=f"v{KUBERNETES_VERSION}"
    )
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
            assert "livenessProbe" in container, container["name"]
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
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9464"
    [up] = pod["spec"]["containers"]
    assert up["readinessProbe"]["grpc"] == {"port": 9094, "service": "quotaplane.v1.QuotaService"}
    assert up["livenessProbe"]["grpc"] == {"port": 9093}
    assert "--ray-address=$(QUOTAPLANE_RAY_ADDRESS)" in up["args"] and "--frontend-port=-1" in up["args"]


def test_production_values():
    docs = render(production_values())
    frontend = one(docs, "Deployment", "-frontend")
    args = frontend["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--advertised-host=kafka-quotas.example.com" in args and "--advertised-port=9092" in args
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
    assert one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["port"] == "metrics"
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yml").read_text())
    assert one(docs, "PrometheusRule")["spec"] == rules
    assert len(by_kind(docs, "NetworkPolicy")) == 2


def test_the_default_rules_configmap_is_deploy_prometheus_rules():
    shipped = (ROOT / "deploy" / "prometheus" / "rules.yml").read_text()
    # .Files.Get reads only inside the chart: the copy there must stay identical
    assert (CHART / "files" / "prometheus" / "rules.yml").read_text() == shipped
    config = one(render(), "ConfigMap", "-prometheus-rules")
    assert yaml.safe_load(config["data"]["quotaplane-rules.yml"]) == yaml.safe_load(shipped)


def test_k8s_base_is_the_chart_rendered():
    files = render_base.render()
    on_disk = {p.name: p.read_text() for p in (K8S / "base").glob("*.yaml")}
    assert on_disk == files, "k8s/base/ is stale: run .venv/bin/python k8s/render_base.py"


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"shards": 0}, "/shards"),
        ({"frontend": {"enabled": True}}, "/frontend/advertisedHost"),
        ({"frontend": {"enabled": True, "advertisedHost": ""}}, "/frontend/advertisedHost"),
        ({"persistence": {"enabled": True, "storageClass": ""}}, "/persistence/storageClass"),
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


def test_persistence_off_renders_without_claim_or_jobs():
    docs = render({"persistence": {"enabled": False, "storageClass": ""}})
    assert not by_kind(docs, "PersistentVolumeClaim") and not by_kind(docs, "CronJob")
    head = one(docs, "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]
    assert {"name": "data", "emptyDir": {}} in head["volumes"]
