"""Every shipped scenario validates and runs (shrunk to a few requests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import TraceError
from sim.loops.run import simulate
from sim.scenario.load import load_scenario
from tests.conftest import AZURE_TRACE, REPO

SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_shipped_scenario_runs(path: Path):
    text = path.read_text()
    if "shared/traces" in text and not AZURE_TRACE.is_file():
        pytest.skip("needs the shared Azure trace")
    s = load_scenario(path, ["workload.num_requests=60"] if "classes:" not in text else [])
    try:
        r = simulate(s)
    except TraceError as e:
        if "not found" in e.message and "shared" in e.source:
            pytest.skip(f"needs a trace that is not shipped: {e.source}")
        raise
    assert r.summary["finished"] + r.summary["rejected"] == r.summary["requests"] > 0


def test_there_is_a_scenario_per_policy():
    names = {p.name for p in SCENARIOS}
    assert {"policy-static.yaml", "policy-continuous.yaml", "policy-chunked-prefill.yaml",
            "quickstart.yaml", "azure-conversation.yaml"} <= names
