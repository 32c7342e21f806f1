"""The chart's Spark CronJobs with a Kubernetes master (``spark.master: k8s://...``): the CronJob's pod is the
Spark driver in client mode and gets what Spark on Kubernetes needs (the executor image, the namespace, a
service account allowed to manage executor pods, the driver's pod name and IP, the data volume for executors);
the default (``local[*]``) renders none of it."""

from __future__ import annotations

import helm_python as helm
import kubernetes_validate
import pytest

from .test_helm import CHART, KUBERNETES_VERSION, by_kind, one, render

K8S_VALUES = {
    "spark": {
        "master": "k8s://https://kubernetes.default.svc",
        "kubernetes": {
            "image": "registry.example.com/quotaplane-spark:0.1.0",
            "executorInstances": 3,
            "conf": {"spark.executorEnv.PYSPARK_PYTHON": "/usr/bin/python3"},
        },
    }
}


def _pod(job: dict) -> dict:
    return job["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def test_kubernetes_master_gives_the_driver_what_spark_on_kubernetes_needs():
    docs = render(K8S_VALUES)
    assert one(docs, "ConfigMap", "quotaplane")["data"]["QUOTAPLANE_SPARK_MASTER"] == K8S_VALUES["spark"]["master"]
    claim = one(docs, "PersistentVolumeClaim")["metadata"]["name"]
    jobs = by_kind(docs, "CronJob")
    assert len(jobs) == 2
    for job in jobs:
        pod = _pod(job)
        assert pod["serviceAccountName"] == "quotaplane-spark"
        [container] = pod["containers"]
        args = container["args"]
        assert "--master=$(QUOTAPLANE_SPARK_MASTER)" in args
        confs = dict(a.removeprefix("--conf=").split("=", 1) for a in args if a.startswith("--conf="))
        assert confs["spark.kubernetes.namespace"] == "kafka"
        assert confs["spark.kubernetes.container.image"] == "registry.example.com/quotaplane-spark:0.1.0"
        assert confs["spark.kubernetes.authenticate.driver.serviceAccountName"] == "quotaplane-spark"
        assert confs["spark.kubernetes.driver.pod.name"] == "$(SPARK_DRIVER_POD_NAME)"
        assert confs["spark.driver.host"] == "$(SPARK_DRIVER_POD_IP)"
        assert confs["spark.executor.instances"] == "3"
        assert confs["spark.kubernetes.executor.volumes.persistentVolumeClaim.data.options.claimName"] == claim
        assert confs["spark.kubernetes.executor.volumes.persistentVolumeClaim.data.mount.path"] == "/data"
        assert confs["spark.executorEnv.PYSPARK_PYTHON"] == "/usr/bin/python3"
        env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
        assert env == {"SPARK_DRIVER_POD_NAME": "metadata.name", "SPARK_DRIVER_POD_IP": "status.podIP"}
    role = one(docs, "Role", "-spark")
    assert {"pods", "configmaps", "services", "persistentvolumeclaims"} <= set(role["rules"][0]["resources"])
    binding = one(docs, "RoleBinding", "-spark")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "quotaplane-spark", "namespace": "kafka"}]
    assert one(docs, "ServiceAccount", "-spark")["metadata"]["name"] == "quotaplane-spark"
    for doc in docs:
        if doc["kind"] in ("CronJob", "Role", "RoleBinding", "ServiceAccount"):
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    report = helm.lint(CHART, K8S_VALUES, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    assert report["errors"] == [] and report["messages"] == [], report


def test_default_master_renders_todays_cronjobs():
    docs = render()
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding", "ServiceAccount")]
    for job in by_kind(docs, "CronJob"):
        pod = _pod(job)
        assert "serviceAccountName" not in pod and "env" not in pod["containers"][0]
        assert not [a for a in pod["containers"][0]["args"] if a.startswith("--conf")]


def test_kubernetes_master_without_an_executor_image_is_refused():
    values = {"spark": {"master": "k8s://https://kubernetes.default.svc"}}
    with pytest.raises(helm.HelmError, match=r"spark\.kubernetes\.image is required"):
        render(values)
