"""Timing plans on the engine: interleaved rounds, medians, per-op totals from the timer hook.

Each point is timed ``repeats`` times, in rounds that visit every point once (in a shuffled
order), so that a slow spell of a shared machine lands on all points alike instead of on a
few. Every visit first runs the plan once untimed: in the serving loop a step follows a step
much like it, whose data is still in the caches, and a small step timed right after a big
one would run up to 10% slower. The median of a point's runs is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from calibration.harness import Harness, Row, shape_of
from calibration.progress import Ticker
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


def measure(harness: Harness, plans: Sequence[Sequence[Row]], *, repeats: int, warmup: int,
            ticker: Ticker, timer=None, timed: Sequence[bool] | None = None,
            seed: int = 0) -> list[Sample]:
    """Time every plan ``repeats`` times in shuffled rounds. With ``timer``, each visit of a
    plan marked in ``timed`` (all by default) runs it twice, with the timer (per-op seconds)
    and without (the wall), back to back, so both see the machine in the same state."""
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
            harness.run(plans[i])  # warm the caches with this plan's data
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
