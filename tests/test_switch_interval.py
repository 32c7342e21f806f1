"""The GIL's switch interval of a serving process (``quotaplane.switch_interval``), and its override."""

from __future__ import annotations

import subprocess
import sys

import pytest

from quotaplane.services.launcher import LaunchError, launch
from quotaplane.switch_interval import (
    SERVING_SWITCH_INTERVAL_S,
    SWITCH_INTERVAL_ENV,
    serving_switch_interval,
    use_serving_switch_interval,
)


def test_a_serving_process_takes_half_a_millisecond_unless_told_otherwise(monkeypatch) -> None:
    monkeypatch.delenv(SWITCH_INTERVAL_ENV, raising=False)
    assert serving_switch_interval() == SERVING_SWITCH_INTERVAL_S == 0.0005
    monkeypatch.setenv(SWITCH_INTERVAL_ENV, " 0.005 ")
    assert serving_switch_interval() == 0.005


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "5ms", "1e-400"])
def test_a_bad_override_is_refused_naming_the_variable(monkeypatch, raw) -> None:
    monkeypatch.setenv(SWITCH_INTERVAL_ENV, raw)
    with pytest.raises(ValueError, match=f"{SWITCH_INTERVAL_ENV} must be a number of seconds > 0, got '{raw}'"):
        serving_switch_interval()


def test_the_interval_is_set_for_the_whole_process() -> None:
    """In a fresh interpreter (the setting is process-wide): CPython's 5 ms before, the serving 0.5 ms after."""
    code = (
        "import sys; from quotaplane.switch_interval import use_serving_switch_interval as use; "
        "before = sys.getswitchinterval(); print(before, use(), sys.getswitchinterval())"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != SWITCH_INTERVAL_ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    before, returned, after = map(float, out.stdout.split())
    assert before == pytest.approx(0.005)
    assert returned == after == pytest.approx(0.0005)


def test_launch_refuses_a_bad_override_in_one_line_before_starting_anything(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(SWITCH_INTERVAL_ENV, "fast")
    with pytest.raises(LaunchError, match=f"^{SWITCH_INTERVAL_ENV} must be a number of seconds > 0, got 'fast'$"):
        launch(tmp_path / "data", admin_port=0, gateway_port=0, metrics_port=None)
    assert not (tmp_path / "data").exists()


def test_use_returns_what_it_set(monkeypatch) -> None:
    previous = sys.getswitchinterval()
    try:
        monkeypatch.setenv(SWITCH_INTERVAL_ENV, "0.002")
        assert use_serving_switch_interval() == pytest.approx(0.002) == sys.getswitchinterval()
    finally:
        sys.setswitchinterval(previous)


def test_a_shard_keeps_the_interval_it_has_when_the_override_is_bad(monkeypatch, caplog) -> None:
    previous = sys.getswitchinterval()
    monkeypatch.setenv(SWITCH_INTERVAL_ENV, "-1")
    assert use_serving_switch_interval(strict=False) == previous == sys.getswitchinterval()
    assert f"{SWITCH_INTERVAL_ENV} must be a number of seconds > 0, got '-1'" in caplog.text
