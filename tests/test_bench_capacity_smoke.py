"""``bench/capacity.py`` on a small sample: the model's figures follow from its inputs (a fleet twice the size needs
twice the decisions and pushes), and the simulation ran the real core with no push refused. The CPU and memory
ratios are reported, not asserted (they are measurements on a shared machine)."""

from __future__ import annotations

import pytest

from tests.support import run_bench


def _run(*flags: str) -> dict:
    return run_bench("capacity.py", "--quick", "--sample", "2e-5", "--sim-s", "120", *flags, timeout=300)


def test_capacity_model_scales_with_the_fleet_and_the_simulation_runs_the_core() -> None:
    one = _run()
    two = _run("--clients", "20000000")
    assert set(one) >= {"workload", "unit_costs", "model_full_fleet", "simulation", "checks", "machine"}
    model_one, model_two = one["model_full_fleet"], two["model_full_fleet"]
    assert model_two["decisions_per_s"] == 2 * model_one["decisions_per_s"] == 2 * 10_000_000 * 0.5
    assert model_two["pushes_per_s"] == pytest.approx(2 * model_one["pushes_per_s"])
    assert model_one["shards"] >= 1 and model_one["memory_bytes"] > 0
    simulated = one["simulation"]
    assert simulated["clients"] == 200 and simulated["decisions"] > 0 and simulated["pushes"] > 0
    assert simulated["pushes_refused"] == 0  # every push on its interval is accepted by the real KIP-714 manager
    assert one["checks"]["cpu_ratio"] > 0 and one["checks"]["memory_ratio"] > 0
