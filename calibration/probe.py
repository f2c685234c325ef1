"""A fixed, small set of steps timed on the engine: how fast is this machine right now?

Calibration records it; validation times it again before and after its engine run. On a
shared machine the ratio tells how much of a validation error is the machine having sped up
or slowed down since calibration, rather than the model being wrong.
"""

from __future__ import annotations

import time

import numpy as np

from calibration.measure import measure
from calibration.progress import Ticker
from engine.plan_timer import PlanTimer, Row, decode_rows

PROBE = ((1, 128, 1), (8, 128, 1), (1, 0, 128))  # (rows, cached tokens, new tokens)


def probe_plans() -> list[list[Row]]:
    out = []
    for rows, cached, new in PROBE:
        out.append(decode_rows(rows, cached) if new == 1 else [Row(cached, new)] * rows)
    return out


def probe(harness: PlanTimer, repeats: int = 9, settle: int = 1) -> float:
    """Seconds of the probe steps (sum of each step's median), each timed as calibration times
    its plans (``settle`` runs of it first: calibration's grid says how many)."""
    samples = measure(harness, probe_plans(), repeats=repeats, warmup=0, ticker=Ticker(None), settle=settle)
    return float(sum(s.wall for s in samples))


def wake_penalty(harness: PlanTimer, idle_s: float = 0.02, repeats: int = 7) -> float:
    """How much slower the probe steps run right after the engine slept ``idle_s`` (as the
    real-time loop does between arrivals) than back to back: > 0 on a machine whose other
    processes take the core while the engine sleeps. The simulator does not model it."""
    plans = probe_plans()
    hot: list[list[float]] = [[] for _ in plans]
    cold: list[list[float]] = [[] for _ in plans]
    for _ in range(repeats):
        for i, rows in enumerate(plans):
            harness.run(rows)
            hot[i].append(harness.run(rows))
            time.sleep(idle_s)
            cold[i].append(harness.run(rows))
    return float(sum(np.median(c) for c in cold) / sum(np.median(h) for h in hot) - 1)
