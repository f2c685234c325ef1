"""The search logic on its own: bisection on a known threshold, brackets, errors, Pareto."""

from __future__ import annotations

import numpy as np
import pytest

from sim.study.objectives import pareto_mask
from sim.study.search import Bisection, FixedRates


def run_search(s, threshold: float, fail_at: float | None = None) -> list[float]:
    """Drive a search with a fake run: passes below ``threshold``; errors at ``fail_at``."""
    order = []
    while not s.done:
        wanted = s.wanted()
        assert wanted, "a search that is not done must want something"
        for rate in wanted:
            order.append(rate)
            if rate == fail_at:
                s.record(rate, {"status": "error", "error": "boom"})
            else:
                s.record(rate, {"status": "ok", "pass": rate <= threshold})
    return order


def passes(rec):
    return rec["status"] == "ok" and rec["pass"]


@pytest.mark.parametrize("threshold", [1.37, 7.0, 23.9, 63.0])
def test_bisection_brackets_the_threshold_within_tolerance(threshold):
    s = Bisection(0, 1.0, 64.0, passes, rel_tol=0.02)
    probes = run_search(s, threshold)
    assert s.outcome == "found"
    assert s.lo <= threshold < s.hi
    assert s.hi - s.lo <= 0.02 * s.lo
    assert len(probes) <= s.max_runs
    assert len(set(probes)) == len(probes)


def test_bisection_with_an_absolute_tolerance():
    s = Bisection(0, 1.0, 100.0, passes, rel_tol=1.0, abs_tol=0.5)
    run_search(s, 42.42)
    assert s.lo <= 42.42 < s.hi and s.hi - s.lo <= max(0.5, 1.0 * s.lo)


def test_bisection_outside_the_bracket():
    low = Bisection(0, 2.0, 8.0, passes)
    run_search(low, 1.0)
    assert low.outcome == "below_bracket" and low.best_rate is None
    high = Bisection(0, 2.0, 8.0, passes)
    probes = run_search(high, 100.0)
    assert high.outcome == "above_bracket" and high.best_rate == 8.0 and len(probes) == 2


def test_a_failed_probe_ends_the_search_with_its_error():
    s = Bisection(0, 1.0, 64.0, passes)
    run_search(s, 10.0, fail_at=8.0)
    assert s.outcome == "error" and "boom" in s.error and s.best_rate is None


def test_the_probe_sequence_depends_only_on_the_results():
    a, b = (Bisection(0, 0.5, 50.0, passes, rel_tol=0.05) for _ in range(2))
    assert run_search(a, 9.3) == run_search(b, 9.3)


def test_fixed_rates_ask_each_rate_once():
    s = FixedRates(0, [1.0, 2.0, 2.0, 4.0])
    assert s.wanted() == [1.0, 2.0, 4.0]
    assert s.wanted() == []
    for r in (1.0, 2.0, 4.0):
        s.record(r, {"status": "ok"})
    assert s.done


def test_pareto_front():
    # throughput (maximise) vs latency (minimise)
    x = np.array([1.0, 2.0, 3.0, 2.5, 3.0, np.nan])
    y = np.array([0.1, 0.2, 0.5, 0.6, 0.4, 0.0])
    front = pareto_mask(x, y, x_min=False, y_min=True)
    assert front.tolist() == [True, True, False, False, True, False]
