"""Cost models as arrays for the compiled loop: the roofline's coefficients, and a calibration
profile's tables and fits, one row per replica (see ``kernel.price``).

A profile is priced with the same interpolation, the same roofline-shaped extrapolation and
the same sums as ``ProfiledCost``; the loop counts the steps that left the measured range and
``fold_counts`` hands them back to the ProfiledCost objects, so the run warns as SimPy does.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from sim.loops.compiled import kernel as k
from sim.pricing.profile import LinearFit, Table
from sim.pricing.profiled import ProfiledCost
from sim.pricing.roofline import COLLECTIVE_LATENCY_S, RooflineCost

TABLES = {"linear": k.T_LINEAR, "other": k.T_OTHER, "lm_head": k.T_LM_HEAD, "allreduce": k.T_ALLREDUCE}
FITS = {"attn_prefill": k.F_ATTN_PREFILL, "attn_decode": k.F_ATTN_DECODE, "step": k.F_STEP}
FEATURES = {"const": k.X_CONST, "num_tokens": k.X_NUM_TOKENS, "prefill_attn": k.X_PREFILL_ATTN,
            "decode_context": k.X_DECODE_CONTEXT, "num_seqs": k.X_NUM_SEQS, "num_sampled": k.X_NUM_SAMPLED,
            "prefill_rows": k.X_PREFILL_ROWS, "decode_rows": k.X_DECODE_ROWS}


@dataclass
class CostArrays:
    """Every replica's cost model: ``kind`` and roofline coefficients ``fp`` for all; for a
    profile, its tables (x and seconds), its linear fits (coefficients and the value above
    which a feature counts as extrapolated, features in the fit's order) and the counters."""

    kind: np.ndarray  # [R] ROOFLINE, PROFILE_STEP or PROFILE_OPS
    fp: np.ndarray  # [R, NUM_COST]
    tab: np.ndarray  # [R, 4, 2, points]
    tab_n: np.ndarray  # [R, 4] points in each table (0: none, the roofline's term instead)
    fit: np.ndarray  # [R, 3, 2, 8] coefficient, extrapolation threshold
    fit_x: np.ndarray  # [R, 3, 8] feature ids in the fit's order
    fit_n: np.ndarray  # [R, 3] features in each fit (0: none)
    extrap: np.ndarray  # [R, NUM_COUNTERS] steps beyond the measured range

    def arrays(self) -> list[np.ndarray]:
        return [getattr(self, f.name) for f in fields(self)]


def encode(costs: list[RooflineCost | ProfiledCost]) -> CostArrays:
    """One row per replica, from each replica's cost model (as ``make_cost_model`` built it)."""
    R = len(costs)
    points = max([2] + [len(t.x) for c in costs if isinstance(c, ProfiledCost) for t in _tables(c).values()])
    a = CostArrays(kind=np.zeros(R, dtype=np.int64), fp=np.zeros((R, k.NUM_COST)),
                   tab=np.zeros((R, len(TABLES), 2, points)), tab_n=np.zeros((R, len(TABLES)), dtype=np.int64),
                   fit=np.zeros((R, len(FITS), 2, len(FEATURES))),
                   fit_x=np.zeros((R, len(FITS), len(FEATURES)), dtype=np.int64),
                   fit_n=np.zeros((R, len(FITS)), dtype=np.int64),
                   extrap=np.zeros((R, k.NUM_COUNTERS), dtype=np.int64))
    for r, cost in enumerate(costs):
        roofline = cost.roofline if isinstance(cost, ProfiledCost) else cost
        _roofline_row(roofline, a.fp[r])
        if isinstance(cost, ProfiledCost):
            a.kind[r] = k.PROFILE_STEP if cost.mode == "step" else k.PROFILE_OPS
            a.fp[r, k.PROFILE_OVERHEAD] = cost.overhead
            for name, table in _tables(cost).items():
                t = TABLES[name]
                a.tab_n[r, t] = len(table.x)
                a.tab[r, t, 0, :len(table.x)] = table.x
                a.tab[r, t, 1, :len(table.x)] = table.seconds
            for name, fit in _fits(cost).items():
                _fit_row(fit, a, r, FITS[name])
    return a


def fold_counts(costs: list, arrays: CostArrays) -> None:
    """Add the loop's extrapolation counters to each ProfiledCost (whose warnings report them)."""
    names = {t: name for name, t in TABLES.items()}
    for fit, f in FITS.items():
        for feature, x in FEATURES.items():
            names[k.NUM_TABLES + f * len(FEATURES) + x] = f"{fit}.{feature}"
    for cost, counts in zip(costs, arrays.extrap, strict=True):
        if isinstance(cost, ProfiledCost):
            for i in np.flatnonzero(counts):
                cost._count(names[int(i)], int(counts[i]))


def _tables(cost: ProfiledCost) -> dict[str, Table]:
    ops = cost.profile.ops
    return {name: table for name, table in (("linear", ops.linear), ("other", ops.other),
                                            ("lm_head", ops.lm_head), ("allreduce", ops.allreduce))
            if table is not None}


def _fits(cost: ProfiledCost) -> dict[str, LinearFit]:
    ops = cost.profile.ops
    return {name: fit for name, fit in (("attn_prefill", ops.attn_prefill), ("attn_decode", ops.attn_decode),
                                        ("step", cost.profile.step)) if fit is not None}


def _fit_row(fit: LinearFit, a: CostArrays, r: int, f: int) -> None:
    a.fit_n[r, f] = len(fit.features)
    for j, (feature, coef) in enumerate(zip(fit.features, fit.coef, strict=True)):
        a.fit_x[r, f, j] = FEATURES[feature]
        a.fit[r, f, 0, j] = coef
        # ProfiledCost._fit: a value above 1.001 × the measured maximum counts as extrapolated.
        in_range = feature in fit.ranges and feature != "const"
        a.fit[r, f, 1, j] = fit.ranges[feature][1] * 1.001 if in_range else np.inf


def _roofline_row(c: RooflineCost, row: np.ndarray) -> None:
    """RooflineCost's per-token coefficients, as the kernel's ``roofline_time`` reads them."""
    row[k.OVERHEAD] = c.overhead
    for name, (f_, b0, b1) in zip(("QKV", "O", "MLP"), (c._linear[n] for n in ("qkv_proj", "o_proj", "mlp")),
                                  strict=True):
        row[getattr(k, f"{name}_F")], row[getattr(k, f"{name}_B0")], row[getattr(k, f"{name}_B1")] = f_, b0, b1
    row[k.PRE_F], row[k.PRE_B] = c._prefill
    row[k.DEC_F], row[k.DEC_B] = c._decode
    row[k.REST] = c._rest
    row[k.LM_F], row[k.LM_B] = c._lm_head
    if c.tp > 1:
        row[k.TP_GT_1] = 1.0
        row[k.TWO_L] = 2 * c.model.num_layers
        row[k.HIDDEN], row[k.ABYTES] = c.model.hidden_size, c.abytes
        row[k.AR_FACTOR] = 2 * (c.tp - 1) / c.tp
        row[k.LINK], row[k.LATENCY] = c.link, COLLECTIVE_LATENCY_S
