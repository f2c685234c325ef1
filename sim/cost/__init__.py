"""Cost models: from a step's shape to its duration."""

from __future__ import annotations

from sim.cost.roofline import RooflineCost, roofline_for
from sim.executor import StepResult
from sim.plan import BatchPlan
from sim.requests import RequestTable


class CostModelExecutor:
    """The simulator's executor: a step takes what the cost model predicts."""

    def __init__(self, cost):
        self.cost = cost

    def run(self, plan: BatchPlan, table: RequestTable) -> StepResult:
        return StepResult(float(self.cost.step_time(plan.shape())))


def make_cost_model(scenario, replica=None):
    """The cost model of one replica (the first by default)."""
    return roofline_for(scenario, replica)


__all__ = ["CostModelExecutor", "RooflineCost", "make_cost_model", "roofline_for"]
