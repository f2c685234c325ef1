"""The shipped scenarios and studies teach: each says what to look for, has an SLO, and still
makes its point (scenarios/check_examples.py, which the lead reruns after a pricing change)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from sim.results.describe import has_slo
from sim.scenario.load import load_scenario
from tests.conftest import REPO


def _checks():
    spec = importlib.util.spec_from_file_location("check_examples", REPO / "scenarios" / "check_examples.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_examples"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


CHECKS = _checks()
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
STUDIES = sorted((REPO / "scenarios" / "studies").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS + STUDIES, ids=lambda p: p.name)
def test_every_example_says_what_to_look_for(path):
    header = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
    assert "What you should see:" in header, f"{path.name}: add a 'What you should see:' line to its header"


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_scenario_has_an_slo(path):
    assert has_slo(load_scenario(path)), f"{path.name} sets no SLO: its attainment would read 100%"


def test_every_shipped_file_has_a_check():
    assert CHECKS.shipped() <= CHECKS.covered()


@pytest.mark.parametrize("name", list(CHECKS.EXAMPLES))
def test_example_makes_its_point(name):
    ex, skipped = CHECKS.check(name)
    if skipped:
        pytest.skip(skipped)
    failed = [f"{c.text}: {c.measured}" for c in ex.claims if CHECKS.status(c) == "FAIL"]
    assert not failed, f"{name} no longer makes its point (retune it; see scenarios/check_examples.py): {failed}"
