"""The serving loop's own cost per step: scheduling, committing, logging, SimPy.

In ``servesim execute`` a step lasts from the moment the replica's loop took it up to the end
of ``executor.run``, so the policy's Python (plan, commit, record) and the event loop count
too. A short real-time run on the engine measures it: each logged step duration minus the
engine's own ``run`` time, fitted over the rows of the step.
"""

from __future__ import annotations

import numpy as np

from calibration.fitting import nnls
from calibration.grid import Grid
from calibration.progress import Ticker


class _Recorder:
    """Passes plans to the engine and keeps the engine's own time of each."""

    def __init__(self, executor, ticker: Ticker):
        self.executor = executor
        self.ticker = ticker
        self.durations: list[float] = []

    def run(self, plan, table):
        result = self.executor.run(plan, table)
        self.durations.append(result.duration)
        self.ticker.tick()
        return result


def _scenario(model, grid: Grid, executor, policy: str, n: int):
    from sim.scenario.load import scenario_from_dict

    longest = max(16, min(grid.max_tokens, 256))
    data = {
        "name": f"calibration-loop-{policy}", "seed": grid.seed, "model": model,
        "hardware": {"kv_blocks": executor.num_blocks},
        "scheduler": {"policy": policy, "max_num_seqs": min(grid.max_seqs, 32),
                      "max_batched_tokens": max(grid.max_tokens, longest),
                      "chunk_size": max(min(grid.max_tokens, 256), min(grid.max_seqs, 32)),
                      "block_size": executor.block_size},
        "workload": {"num_requests": n, "arrival": {"process": "poisson", "rate": 50.0},
                     "prompt_len": {"dist": "uniform", "min": 8, "max": longest},
                     "output_len": {"dist": "uniform", "min": 2, "max": 16}},
    }
    return scenario_from_dict(data, "<calibration loop>")


def loop_overhead(executor, model, grid: Grid, ticker: Ticker, drive) -> tuple[float, float, dict]:
    """(fixed seconds per step, seconds per row, stats) of the loop around ``executor.run``;
    ``drive(scenario, executor)`` runs a scenario through the serving loop (in real time)."""
    n = max(2, grid.loop_requests // 2)
    ticker.stage("serving loop", 2 * n * 10)
    gaps, seqs = [], []
    for policy in ("continuous", "chunked-prefill"):
        scenario = _scenario(model, grid, executor, policy, n)
        rec = _Recorder(executor, ticker)
        executor.reset()
        result = drive(scenario, rec)
        executor.reset()
        logged = result.steps["duration"].to_numpy()
        if len(logged) != len(rec.durations):  # never expected: one log row per engine step
            continue
        gaps.append(logged - np.asarray(rec.durations))
        seqs.append(result.steps["num_seqs"].to_numpy(dtype=float))
    if not gaps:
        return 0.0, 0.0, {"steps": 0}
    gap, n_seqs = np.concatenate(gaps), np.concatenate(seqs)
    keep = gap <= np.percentile(gap, 90)  # a late wake-up or a GC pause is not the loop's cost
    coef = nnls(np.column_stack([np.ones(keep.sum()), n_seqs[keep]]), gap[keep])
    stats = {"steps": len(gap), "median_s": float(np.median(gap)),
             "p90_s": float(np.percentile(gap, 90))}
    return float(coef[0]), float(coef[1]), stats
