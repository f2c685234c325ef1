"""Pricing: from a step's shape to its duration.

``roofline`` (any model on any GPU, from specs) and ``profiled`` (a calibration profile
measured on a real engine) are parameter rows for one compiled function, ``costs.price``,
which every loop calls. ``make_cost_model`` builds a replica's model from its scenario;
``CostModelExecutor`` is the simulator's step executor.
"""

from __future__ import annotations

import numpy as np

from sim.core.plan import BatchPlan, StepResult
from sim.pricing.costs import Pricer, add_counts, counts_of
from sim.pricing.roofline import RooflineCost, roofline_for


class CostModelExecutor:
    """The simulator's executor: a step takes what the cost model predicts. It counts the steps
    a profile priced beyond its measured range (``extrapolated``), for the run's warnings."""

    def __init__(self, cost, scale: float = 1.0):
        self.cost = cost
        self.pricer = Pricer(cost, scale)  # a RooflineCost or ProfiledCost, priced as the compiled loop prices
        self.extrapolated: dict[str, int] = {}

    def run(self, plan: BatchPlan, table) -> StepResult:
        seconds, flags = self.pricer.price(plan.shape_vector()[None, :])
        if flags[0]:
            add_counts(self.extrapolated, counts_of(flags))
        return StepResult(float(seconds[0]))

    def run_group(self, shapes: np.ndarray) -> StepResult:
        """A step of attention DP ranks together (one shape per rank that planned)."""
        return StepResult(self.pricer.price_group(shapes))


def make_cost_model(scenario, replica=None):
    """The cost model of one replica (the first by default): the roofline, or a calibration
    profile (checked against the scenario's model) priced with the roofline's help."""
    roofline = roofline_for(scenario, replica)
    if scenario.cost.model != "profile":
        return roofline
    from sim.pricing.profile import load_profile
    from sim.pricing.profile_checks import check_against
    from sim.pricing.profiled import ProfiledCost

    path = scenario.resolve(scenario.cost.profile)
    profile = load_profile(path)
    check_against(profile, scenario, str(path), replica)  # measured on what the scenario simulates
    return ProfiledCost(profile, roofline)


def request_overhead_s(scenario) -> float:
    """The API server's time per request outside the steps (its TTFT and E2E carry it): the
    scenario's ``engine.request_overhead_s`` where it sets one, else a profile's measured one,
    else the engine family's fitted one."""
    if scenario.engine.request_overhead_s is not None:
        return float(scenario.engine.request_overhead_s)
    if scenario.cost.model == "profile":
        from sim.pricing.profile import load_profile

        return float(load_profile(scenario.resolve(scenario.cost.profile)).request_overhead_s)
    return float(scenario.engine.cost.request_overhead_s)


__all__ = ["CostModelExecutor", "RooflineCost", "make_cost_model", "request_overhead_s", "roofline_for"]
