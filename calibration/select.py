"""Reconciling the per-op model with whole steps, and choosing between it and the step fit.

The per-op model adds up ops timed one by one inside the forward (plus the host work around
them); on whole steps it can be off by a few percent either way (the timer's own cost, a
machine that drifts between the two passes). One scale and one offset, fitted on the whole
steps, keep its shape (a 1-row GEMV, the LM head's steps by rows) and take the whole steps'
level: ``t ← α·t_ops + β`` (``α`` on every table and fit, ``β`` in the ``other`` table, which
every step pays).
"""

from __future__ import annotations

import numpy as np

from calibration.fitting import robust_nnls
from calibration.measure import Sample
from sim.pricing.profile import SCHEMA_VERSION, Device, LinearFit, Ops, Profile, Table
from sim.scenario.specs import ModelSpec


def ops_cost(ops: Ops, spec: ModelSpec):
    """The per-op model alone (no loop overhead), for pricing measured plans."""
    from sim.pricing.profiled import ProfiledCost
    from sim.pricing.roofline import RooflineCost
    from sim.scenario.specs import get_gpu

    profile = Profile(schema_version=SCHEMA_VERSION, source="", created="",
                      device=Device(name="", type="cpu"), model=spec.name, model_shape={},
                      dtype="fp32", ops=ops)
    return ProfiledCost(profile, RooflineCost(spec, get_gpu("H100-SXM")), mode="ops")


def fit_scale(ops: Ops, samples: list[Sample], spec: ModelSpec) -> tuple[float, float]:
    """(α, β) with ``wall ≈ α·t_ops + β`` over measured whole steps (relative, robust)."""
    cost = ops_cost(ops, spec)
    pred = np.array([float(cost.step_time(s.shape)) for s in samples])
    wall = np.array([s.wall for s in samples])
    alpha, beta = robust_nnls(np.column_stack([pred, np.ones_like(pred)]), wall, 1.0 / wall)
    return float(alpha), float(beta)


def rescale(ops: Ops, alpha: float, beta: float) -> Ops:
    def table(t: Table | None, add: float = 0.0) -> Table | None:
        return None if t is None else Table(x=t.x, seconds=[alpha * s + add for s in t.seconds])

    def fit(f: LinearFit | None) -> LinearFit | None:
        return None if f is None else f.model_copy(update={"coef": [alpha * c for c in f.coef]})

    return Ops(linear=table(ops.linear), other=table(ops.other, beta), lm_head=table(ops.lm_head),
               attn_prefill=fit(ops.attn_prefill), attn_decode=fit(ops.attn_decode),
               allreduce=ops.allreduce)


def errors(ops: Ops, samples: list[Sample], spec: ModelSpec) -> dict[str, float]:
    """The per-op model's relative error on measured whole steps."""
    cost = ops_cost(ops, spec)
    err = np.array([float(cost.step_time(s.shape)) / s.wall - 1.0 for s in samples])
    if not len(err):
        return {}
    return {"median_abs_rel_error": float(np.median(np.abs(err))),
            "p90_abs_rel_error": float(np.percentile(np.abs(err), 90)),
            "bias": float(np.median(err))}


def choose(stats: dict) -> str:
    """The per-op model or the step fit: whichever errs less on whole steps (the step fit
    cross-validated; the per-op model has two parameters fitted on them)."""
    step = stats.get("step", {}).get("cv_median_abs_rel_error", float("nan"))
    ops = stats.get("ops_on_steps", {}).get("median_abs_rel_error", float("nan"))
    return "ops" if np.isfinite(ops) and not ops > step else "step"
