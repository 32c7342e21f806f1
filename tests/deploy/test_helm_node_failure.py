"""The chart's Ray node failure detection: the GCS on the head gets quotaplane's settings as ``RAY_<name>``
variables (Ray reads its system config from them), equal to the ones the code documents and the chaos
benchmark measures (``NODE_FAILURE_DETECTION``), and a value's override reaches the pod."""

from __future__ import annotations

import pytest

from quotaplane.services.launcher import NODE_FAILURE_DETECTION

from .test_helm import one, production_values, render


def _head_env(values: dict | None = None) -> dict[str, str]:
    cluster = one(render(values), "RayCluster")
    [head] = [c for c in cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"] if c["name"] == "ray-head"]
    return {e["name"]: e["value"] for e in head.get("env", []) if e["name"].startswith("RAY_health_check")}


def test_the_head_runs_the_gcs_with_quotaplanes_node_failure_detection():
    assert _head_env() == {f"RAY_{name}": str(value) for name, value in NODE_FAILURE_DETECTION.items()}


def test_an_override_reaches_the_gcs():
    values = production_values()
    values["ray"]["nodeFailureDetection"] = {"periodMs": 3000, "timeoutMs": 10000, "failureThreshold": 5}
    env = _head_env(values)
    assert env["RAY_health_check_period_ms"] == "3000" and env["RAY_health_check_timeout_ms"] == "10000"


@pytest.mark.parametrize(
    "bad", [{"periodMs": 0}, {"timeoutMs": "fast"}, {"failureThreshold": 0}, {"periodMs": 100, "typo": 1}]
)
def test_a_bad_setting_is_refused_by_the_schema(bad):
    values = production_values()
    values["ray"]["nodeFailureDetection"] = bad
    with pytest.raises(Exception, match=r"nodeFailureDetection|periodMs|timeoutMs|failureThreshold|typo"):
        render(values)


def test_the_names_are_rays():
    # each setting is a key of Ray's system config (RayConfig); a misspelt RAY_<name> is ignored without a word
    from ray._raylet import Config

    for name in NODE_FAILURE_DETECTION:
        assert hasattr(Config, name), name
