"""Objectives find the answer of a case built to have one.

The KNOWN scenario is a D/D/1 queue: one request at a time, each one prefill step of fixed
length s. With constant arrivals at rate r > 1/s, request k waits k·(s − 1/r), so its TTFT is
s + k·(s − 1/r). With N requests, a TTFT limit L and target share q, the SLO holds exactly
while (L − s)/(s − 1/r) ≥ qN − 1, i.e. up to r* = 1 / (s − (L − s)/(qN − 1)).
"""

from __future__ import annotations

import copy

import pytest

from sim.loops.run import simulate
from sim.scenario.load import scenario_from_dict
from sim.study.driver import execute_plan
from sim.study.plan import plan_study
from sim.study.runners import SerialRunner
from sim.study.schema import load_study
from sim.study.store import RunStore

from .helpers import KNOWN, write_study


def service_time() -> float:
    """s: the TTFT of a request that never waits."""
    r = simulate(scenario_from_dict(KNOWN, "<known>"))
    ttft = r.requests["ttft"]
    assert ttft.max() - ttft.min() < 1e-9  # nobody waits at 1 req/s
    return float(ttft.iloc[0])


def known_max_rate(s: float, n: int, limit: float = 0.1, target: float = 0.9) -> float:
    return 1.0 / (s - (limit - s) / (target * n - 1))


def run(path, tmp_path):
    plan = plan_study(load_study(path), path)
    return execute_plan(plan, RunStore(tmp_path / "out"), SerialRunner())


def test_max_rate_search_lands_on_the_analytic_answer(tmp_path):
    s = service_time()
    expected = known_max_rate(s, n=200)
    assert 1 / s < expected < 1.1 / s  # the case is what the docstring says
    path = write_study(tmp_path, {"objective": {"kind": "max_rate", "bracket": [5, 100],
                                                "rel_tol": 0.01, "slo_target": 0.9}}, KNOWN)
    result = run(path, tmp_path)
    row = result.outcome.best
    assert row["outcome"] == "found"
    assert row["max_rate"] <= expected < row["upper_bound"]
    assert row["upper_bound"] - row["max_rate"] <= 0.01 * row["max_rate"]
    assert row["slo_attainment"] >= 0.9


def test_cheapest_finds_the_fewest_replicas(tmp_path):
    # Round robin splits constant arrivals evenly: c replicas each see rate R/c, N/c requests.
    s = service_time()
    target = 80.0
    feasible = [c for c in range(1, 6) if target / c <= known_max_rate(s, n=200 // c)]
    assert feasible and feasible[0] == 3
    path = write_study(tmp_path, {
        "vary": {"grid": {"replicas": [1, 2, 3, 4, 5]}},
        "objective": {"kind": "cheapest", "rate": target, "slo_target": 0.9},
        "prices": {"H100": 2.0},
    }, KNOWN)
    out = run(path, tmp_path).outcome
    assert out.best["replicas"] == 3
    assert out.best["cost_per_hour"] == pytest.approx(6.0)  # the price override holds
    passing = out.configs[out.configs["meets_slo"]]["replicas"].tolist()
    assert sorted(passing) == [3, 4, 5]


def test_a_latency_limit_moves_the_answer(tmp_path):
    # TTFT p50 ≤ 0.05 s: half the requests may wait at most 0.05 − s, so r* is where request
    # k = N/2 − 1 waits exactly that long (percentiles interpolate between neighbours).
    s = service_time()
    known = copy.deepcopy(KNOWN)
    known["slo"] = {"ttft_s": 10.0}
    path = write_study(tmp_path, {"objective": {
        "kind": "max_rate", "bracket": [5, 100], "rel_tol": 0.01,
        "limits": {"ttft_p50": 0.05}}}, known)
    row = run(path, tmp_path).outcome.best
    k = (200 - 1) * 0.5  # numpy's linear percentile position
    expected = 1.0 / (s - (0.05 - s) / k)
    assert row["max_rate"] <= expected < row["upper_bound"]
