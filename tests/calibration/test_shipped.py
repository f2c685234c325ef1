"""The shipped profiles load, and the scenario that uses one runs (without torch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.loops.run import simulate
from sim.pricing import make_cost_model
from sim.pricing.profile import load_profile
from sim.pricing.profiled import ProfiledCost
from sim.pricing.roofline import RooflineCost
from sim.scenario.load import load_scenario
from tests.conftest import REPO

PROFILES = sorted((REPO / "calibration" / "profiles").glob("*.json"))
SCENARIO = REPO / "scenarios" / "vidur-a100-llama2-70b.yaml"


def test_profiles_are_shipped_and_small():
    assert len(PROFILES) >= 1
    for path in PROFILES:
        assert path.stat().st_size < 32_000


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_shipped_profile_loads(path: Path):
    p = load_profile(path)
    assert p.source.startswith("vidur import") and p.device.type == "cuda"
    assert p.notes and any("roofline" in n for n in p.notes)


def test_the_vidur_scenario_uses_the_profile_and_differs_from_the_roofline():
    s = load_scenario(SCENARIO, ["workload.num_requests=80"])
    cost = make_cost_model(s)
    assert isinstance(cost, ProfiledCost) and cost.profile.device.name.startswith("A100")
    profiled = simulate(s)
    roofline = simulate(load_scenario(SCENARIO, ["workload.num_requests=80", "cost.model=roofline"]))
    assert isinstance(make_cost_model(roofline.scenario), RooflineCost)
    assert profiled.summary["finished"] == 80
    a, b = profiled.summary["tpot_p50"], roofline.summary["tpot_p50"]
    assert a != pytest.approx(b, rel=0.01)
    assert 0.01 < a < 0.5  # tens of ms per token for a 70B model on two A100s
