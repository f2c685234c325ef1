"""A scenario's name follows ``--set model=`` (unless ``--set name=`` is given too)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("path,sets,name", [
    (None, ["model=qwen2.5-7b"], "default-qwen2.5-7b-h100"),
    ("scenarios/quickstart.yaml", ["model=qwen2.5-7b"], "quickstart-qwen2.5-7b"),
    ("scenarios/tensor-parallel-70b.yaml", ["model=llama-2-70b"], "tensor-parallel-70b-llama-2-70b"),
    ("scenarios/quickstart.yaml", ["model=qwen2.5-7b", "name=mine"], "mine"),
    ("scenarios/quickstart.yaml", ["workload.arrival.rate=3"], "quickstart"),
])
def test_the_scenario_name_follows_set_model(path, sets, name):
    from sim.scenario.load import load_scenario
    from tests.conftest import REPO

    assert load_scenario(None if path is None else REPO / path, sets).name == name
