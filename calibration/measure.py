"""Timing plans on the engine: interleaved rounds, medians, per-op totals from the timer hook.

Each point is timed ``repeats`` times, in rounds that visit every point once (in a shuffled
order), so that a slow spell of a shared machine lands on all points alike instead of on a
few. Every visit first runs the plan ``settle`` times untimed, so that it is timed settled, as
the serving loop mostly runs its steps: a decode step follows decode steps of the same rows.
On the CPU a step settles over a few runs of its shape (a one-row decode of tiny-llama-12m
ran 35% slower as the first run after a 512-token prefill, 15% as the second, within 5% from
the fourth). A prompt's step follows some other step and runs a few percent slower than
settled; the simulator prices a step by its shape alone, so that is left out. The median of a
point's runs is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from calibration.progress import Ticker
from engine.plan_timer import PlanTimer, Row, shape_of
from sim.core.plan import StepShape


@dataclass
class Sample:
    """One measured plan: its shape, wall seconds of ``executor.run`` and per-op seconds."""

    rows: list[Row]
    shape: StepShape
    wall: float  # median wall seconds of executor.run, without a timer
    ops: dict[str, float] = field(default_factory=dict)  # median seconds per op (with a timer)
    timed_wall: float = float("nan")  # median wall seconds with the timer hooked in
    walls: tuple[float, ...] = ()  # every untimed run (their median is ``wall``)

    def features(self) -> dict[str, float]:
        s = self.shape
        return {"num_tokens": s.num_tokens, "num_seqs": s.num_seqs, "prefill_tokens": s.prefill_tokens,
                "prefill_attn": s.prefill_attn, "prefill_rows": s.num_seqs - s.decode_seqs,
                "decode_rows": s.decode_seqs, "decode_seqs": s.decode_seqs,
                "decode_context": s.decode_context, "num_sampled": s.num_sampled}


def make_timer(device: str):
    """The per-op timer for ``device``: CUDA events on a GPU (no sync per op), else wall."""
    from engine.timing import CudaEventTimer, SyncTimer

    return CudaEventTimer() if device == "cuda" else SyncTimer(device)


def measure(harness: PlanTimer, plans: Sequence[Sequence[Row]], *, repeats: int, warmup: int,
            ticker: Ticker, timer=None, timed: Sequence[bool] | None = None,
            seed: int = 0, settle: int = 1) -> list[Sample]:
    """Time every plan ``repeats`` times in shuffled rounds, each visit after ``settle`` untimed
    runs of it. With ``timer``, each visit of a plan marked in ``timed`` (all by default) then
    runs it twice, with the timer (per-op seconds) and without (the wall), back to back, so both
    see the machine in the same state."""
    plans = [list(p) for p in plans]
    timed_plan = [timer is not None] * len(plans) if timed is None else \
        [timer is not None and t for t in timed]
    rng = np.random.default_rng(seed)
    for rows in plans[: max(warmup, 0)]:
        harness.run(rows)
    walls: list[list[float]] = [[] for _ in plans]
    timed: list[list[float]] = [[] for _ in plans]
    ops: list[list[dict[str, float]]] = [[] for _ in plans]
    for _ in range(repeats):
        for i in rng.permutation(len(plans)):
            for _ in range(settle):  # warm the caches with this plan's data
                harness.run(plans[i])
            if timed_plan[i]:
                timer.reset()
                timed[i].append(harness.run(plans[i], timer))
                ops[i].append(timer.totals())
            walls[i].append(harness.run(plans[i]))
            ticker.tick()
    out = []
    for rows, w, tw, o in zip(plans, walls, timed, ops, strict=True):
        names = {k for d in o for k in d}
        per_op = {k: float(np.median([d.get(k, 0.0) for d in o])) for k in sorted(names)}
        out.append(Sample(rows, shape_of(rows, harness.block_size), float(np.median(w)), per_op,
                          float(np.median(tw)) if tw else float("nan"), tuple(w)))
    return out


def noise_factor(samples: Sequence[Sample]) -> float:
    """Mean over all runs of (run / its plan's median): how much longer a step takes on
    average than its median on this machine (> 1 when other processes sometimes slow a run
    down, never speed it up). The serving loop pays the mean."""
    ratios = [w / s.wall for s in samples for w in s.walls if s.wall > 0]
    return float(np.mean(ratios)) if ratios else 1.0
