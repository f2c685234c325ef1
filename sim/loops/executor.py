"""What turns a BatchPlan into elapsed time: a cost model (simulate) or the engine (execute)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sim.core.plan import BatchPlan
from sim.core.requests import RequestTable


@dataclass(frozen=True)
class StepResult:
    duration: float  # seconds the step took (predicted or measured)
    stopped: np.ndarray | None = None  # bool [n]: rows whose sampled token ended the request (EOS)


class Executor(Protocol):
    def run(self, plan: BatchPlan, table: RequestTable) -> StepResult:
        """Execute (or price) one step. Must not change the table: the policy commits."""
        ...
