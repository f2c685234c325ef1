"""The whole-step profile: the engine's wall time on varied plans, fitted to the plan's features.

``seconds = c0 + c1·tokens + c2·Σ q·kv (prefill) + c3·Σ kv (decode) + c4·seqs + c5·sampled``:
``executor.run`` timed whole (input preparation, forward, sampling, Python), so whatever the
per-op view misses is in it.
"""

from __future__ import annotations

import numpy as np

from calibration.fitting import fit_linear, relative_errors
from calibration.grid import Grid, random_plans
from calibration.measure import Sample
from engine.plan_timer import PlanTimer
from sim.pricing.profile import STEP_FEATURES, LinearFit


def step_plans(harness: PlanTimer, grid: Grid):
    return [p for p in random_plans(grid) if harness.fits(p)]


def fit_steps(samples: list[Sample], per_seq_s: float = 0.0) -> tuple[LinearFit, dict]:
    """Fit the step model; ``per_seq_s`` (the serving loop's per-row work) is added to it."""
    feats = [s.features() for s in samples]
    seconds = [s.wall for s in samples]
    fit = fit_linear(list(STEP_FEATURES), feats, seconds)
    err = np.abs(relative_errors(fit, feats, seconds))
    if per_seq_s:
        coef = [c + per_seq_s if f == "num_seqs" else c for f, c in zip(fit.features, fit.coef, strict=True)]
        fit = fit.model_copy(update={"coef": coef})
    stats = {"plans": len(samples), "median_abs_rel_error": float(np.median(err)),
             "p90_abs_rel_error": float(np.percentile(err, 90)), "r2": fit.r2,
             "cv_median_abs_rel_error": cross_validated(feats, seconds)}
    return fit, stats


def cross_validated(feats: list[dict], seconds: list[float], folds: int = 5) -> float:
    """Median |relative error| of the step fit on plans it was not fitted on (k-fold)."""
    n = len(seconds)
    if n < 2 * folds:
        return float("nan")
    order = np.random.default_rng(0).permutation(n)
    errs = []
    for k in range(folds):
        test = order[k::folds]
        train = np.setdiff1d(order, test)
        fit = fit_linear(list(STEP_FEATURES), [feats[i] for i in train], [seconds[i] for i in train])
        errs.append(relative_errors(fit, [feats[i] for i in test], [seconds[i] for i in test]))
    return float(np.median(np.abs(np.concatenate(errs))))
