"""The profiled cost model: step times from operation costs measured on a real engine.

A calibration profile is packed into arrays (``encode_profile``) and priced by one compiled
function (``profile_time``): either the whole-step fit (when the profile has one, unless its
``prefer`` says ``ops``) or the per-operation tables and fits added up, with the roofline for
whatever the profile did not measure. Outside the measured range a table extrapolates with the
roofline's shape (the measured edge value scaled by the roofline's ratio) and a fit continues
linearly; pricing reports which counters left the range as bits of a flag word, so the loop
that ran the step can count them (pricing itself has no side effects).
"""

from __future__ import annotations

import numpy as np

from sim.core.jit import entry, jit, leaf
from sim.core.plan import (
    DECODE_CONTEXT,
    DECODE_SEQS,
    NUM_SAMPLED,
    NUM_SEQS,
    NUM_TOKENS,
    PREFILL_ATTN,
    PREFILL_TOKENS,
    SHAPE_SIZE,
    StepShape,
)
from sim.pricing.profile import LinearFit, Profile, Table
from sim.pricing.roofline import (
    ABYTES,
    HIDDEN,
    LAYERS,
    NUM_OPS,
    OP_ALL_TO_ALL,
    OP_ALLREDUCE,
    OP_ATTN_DECODE,
    OP_ATTN_PREFILL,
    OP_DRAFT,
    OP_LM_HEAD,
    OP_MLP,
    OP_MOE_MLP,
    OP_NORMS,
    OP_O,
    OP_QKV,
    OP_SWAP,
    TP,
    RooflineCost,
    roofline_ops,
)

TABLES = ("linear", "other", "lm_head", "allreduce")
T_LINEAR, T_OTHER, T_LM_HEAD, T_ALLREDUCE = range(4)
NUM_TABLES = 4
FITS = ("attn_prefill", "attn_decode", "step")
F_ATTN_PREFILL, F_ATTN_DECODE, F_STEP = range(3)
FEATURES = ("const", "num_tokens", "prefill_attn", "decode_context", "num_seqs", "num_sampled", "prefill_rows",
            "decode_rows", "floor")
X_CONST, X_NUM_TOKENS, X_PREFILL_ATTN, X_DECODE_CONTEXT, X_NUM_SEQS, X_NUM_SAMPLED, X_PREFILL_ROWS, X_DECODE_ROWS, \
    X_FLOOR = range(9)
NUM_FEATURES = 9
# Extrapolation counters, one bit each: the tables, then each fit's features.
COUNTERS = (*TABLES, *(f"{fit}.{feature}" for fit in FITS for feature in FEATURES))
MODE_STEP, MODE_OPS = 1, 2


class ProfileArrays:
    """One profile as arrays: tables (x and seconds), fits (coefficient and the value above which a
    feature counts as extrapolated, features in the fit's order)."""

    def __init__(self, profile: Profile, mode: str, points: int):
        self.mode = MODE_STEP if mode == "step" else MODE_OPS
        self.overhead = profile.overhead_s
        self.tab = np.zeros((len(TABLES), 2, points))
        self.tab_n = np.zeros(len(TABLES), dtype=np.int64)
        self.fit = np.zeros((len(FITS), 2, NUM_FEATURES))
        self.fit_x = np.zeros((len(FITS), NUM_FEATURES), dtype=np.int64)
        self.fit_n = np.zeros(len(FITS), dtype=np.int64)
        for t, table in enumerate(profile_tables(profile)):
            if table is not None:
                self.tab_n[t] = len(table.x)
                self.tab[t, 0, :len(table.x)] = table.x
                self.tab[t, 1, :len(table.x)] = table.seconds
        for f, fit in enumerate((profile.ops.attn_prefill, profile.ops.attn_decode, profile.step)):
            if fit is not None:
                self._fit_row(f, fit)

    def _fit_row(self, f: int, fit: LinearFit) -> None:
        self.fit_n[f] = len(fit.features)
        for j, (feature, coef) in enumerate(zip(fit.features, fit.coef, strict=True)):
            self.fit_x[f, j] = FEATURES.index(feature)
            self.fit[f, 0, j] = coef
            in_range = feature in fit.ranges and feature != "const"
            self.fit[f, 1, j] = fit.ranges[feature][1] * 1.001 if in_range else np.inf


def profile_tables(profile: Profile) -> tuple[Table | None, ...]:
    ops = profile.ops
    return ops.linear, ops.other, ops.lm_head, ops.allreduce


def points_of(profile: Profile) -> int:
    return max([2] + [len(t.x) for t in profile_tables(profile) if t is not None])


@leaf
def _max(a, b):
    return a if a >= b else b


@leaf
def _interp(xs, ys, n, x):
    """np.interp at one point, with numpy's arithmetic."""
    if x < xs[0]:
        return ys[0]
    if x >= xs[n - 1]:
        return ys[n - 1]
    lo, hi = 0, n - 1  # xs[lo] <= x < xs[hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if xs[mid] <= x:
            lo = mid
        else:
            hi = mid
    if xs[lo] == x:
        return ys[lo]
    slope = (ys[lo + 1] - ys[lo]) / (xs[lo + 1] - xs[lo])
    return slope * (x - xs[lo]) + ys[lo]


@jit
def _roof_at(p, draft, t, x):
    """The roofline's value, at size ``x``, of the operations table ``t`` stands for (its shape)."""
    shape = np.zeros(SHAPE_SIZE)
    ops = np.empty(NUM_OPS)
    shape[NUM_TOKENS] = x
    shape[NUM_SEQS] = 1.0
    if t == T_LM_HEAD:
        shape[NUM_SEQS] = x
        shape[NUM_SAMPLED] = x
    roofline_ops(p, draft, shape, ops)
    if t == T_LINEAR:
        return 0.0 + ops[OP_QKV] + ops[OP_O] + ops[OP_MLP] + ops[OP_MOE_MLP]
    if t == T_OTHER:
        return 0.0 + ops[OP_NORMS]
    if t == T_LM_HEAD:
        return ops[OP_LM_HEAD]
    return x  # the all-reduce: bytes


@jit
def _table(tab, tab_n, t, p, draft, x):
    """Interpolate; beyond the last point scale the last value by the roofline's ratio
    t(x)/t(x_max). Returns (seconds, extrapolated)."""
    n = tab_n[t]
    xs, ys = tab[t, 0], tab[t, 1]
    if not x > xs[n - 1]:
        return _interp(xs, ys, n, x), False
    edge = xs[n - 1]
    return ys[n - 1] * (_roof_at(p, draft, t, x) / _roof_at(p, draft, t, edge)), True


@leaf
def _feature(x, s):
    if x == X_CONST:
        return 1.0
    if x == X_NUM_TOKENS:
        return s[NUM_TOKENS]
    if x == X_PREFILL_ATTN:
        return s[PREFILL_ATTN]
    if x == X_DECODE_CONTEXT:
        return s[DECODE_CONTEXT]
    if x == X_NUM_SEQS:
        return s[NUM_SEQS]
    if x == X_NUM_SAMPLED:
        return s[NUM_SAMPLED]
    if x == X_PREFILL_ROWS:
        return s[NUM_SEQS] - s[DECODE_SEQS]
    return s[DECODE_SEQS]


@jit
def _fit(fit, fit_x, fit_n, f, s):
    """Σ coef·feature in the fit's order, floored at 0; a ``floor`` term raises the sum so far to
    at least its coefficient. Returns (seconds, extrapolation bits)."""
    total = 0.0
    flags = 0
    for j in range(fit_n[f]):
        x = fit_x[f, j]
        if x == X_FLOOR:
            total = _max(total, fit[f, 0, j])
            continue
        v = _feature(x, s)
        if v > fit[f, 1, j]:
            flags |= 1 << (NUM_TABLES + f * NUM_FEATURES + x)
        total = total + fit[f, 0, j] * v
    return (total if (total >= 0.0 or total != total) else 0.0), flags


@jit
def profile_time(mode, overhead, tab, tab_n, fit, fit_x, fit_n, p, draft, s):
    """A step's seconds under a profile, and its extrapolation bits (see COUNTERS)."""
    if mode == MODE_STEP:
        t, flags = _fit(fit, fit_x, fit_n, F_STEP, s)
        return t + overhead, flags
    roof = np.empty(NUM_OPS)
    roofline_ops(p, draft, s, roof)
    flags = 0
    t, out = _table(tab, tab_n, T_LINEAR, p, draft, s[NUM_TOKENS])
    if out:
        flags |= 1 << T_LINEAR
    total = 0.0 + t
    if tab_n[T_OTHER]:
        t, out = _table(tab, tab_n, T_OTHER, p, draft, s[NUM_TOKENS])
        if out:
            flags |= 1 << T_OTHER
        total = total + t
    else:
        total = total + roof[OP_NORMS]
    sampled = s[NUM_SAMPLED]
    if tab_n[T_LM_HEAD]:
        if sampled > 0.0:
            t, out = _table(tab, tab_n, T_LM_HEAD, p, draft, _max(sampled, tab[T_LM_HEAD, 0, 0]))
            if out:
                flags |= 1 << T_LM_HEAD
            total = total + t
        else:
            total = total + 0.0
    else:
        total = total + roof[OP_LM_HEAD]
    if fit_n[F_ATTN_PREFILL]:
        t, bits = _fit(fit, fit_x, fit_n, F_ATTN_PREFILL, s)
        flags |= bits
        total = total + (t if s[PREFILL_TOKENS] > 0.0 else 0.0)
    else:
        total = total + roof[OP_ATTN_PREFILL]
    if fit_n[F_ATTN_DECODE]:
        t, bits = _fit(fit, fit_x, fit_n, F_ATTN_DECODE, s)
        flags |= bits
        total = total + (t if s[DECODE_SEQS] > 0.0 else 0.0)
    else:
        total = total + roof[OP_ATTN_DECODE]
    if p[TP] > 1.0:
        if tab_n[T_ALLREDUCE]:
            act = s[NUM_TOKENS] * p[HIDDEN] * p[ABYTES]
            t, out = _table(tab, tab_n, T_ALLREDUCE, p, draft, act)
            if out:
                flags |= 1 << T_ALLREDUCE
            total = total + 2.0 * p[LAYERS] * t
        else:
            total = total + roof[OP_ALLREDUCE]
        total = total + roof[OP_ALL_TO_ALL]
    total = total + roof[OP_SWAP] + roof[OP_DRAFT]  # never measured by a profile: the roofline's
    return total + overhead, flags


@entry
def _profile_many(mode, overhead, tab, tab_n, fit, fit_x, fit_n, p, draft, shapes, out, flags):
    for i in range(shapes.shape[0]):
        out[i], flags[i] = profile_time(mode, overhead, tab, tab_n, fit, fit_x, fit_n, p, draft, shapes[i])


class ProfiledCost:
    """A calibration profile, priced with the roofline's help (for what it did not measure)."""

    def __init__(self, profile: Profile, roofline: RooflineCost, mode: str = "auto"):
        self.profile = profile
        self.roofline = roofline
        if mode == "auto":
            mode = profile.prefer or ("step" if profile.step is not None else "ops")
        self.mode = mode
        self.overhead = profile.overhead_s
        self.draft = roofline.draft
        self.arrays = ProfileArrays(profile, mode, points_of(profile))

    def price(self, shapes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of each shape (rows of a [steps, SHAPE_SIZE] array) and its extrapolation bits."""
        a = self.arrays
        shapes = np.ascontiguousarray(shapes, dtype=np.float64)
        out = np.empty(len(shapes))
        flags = np.empty(len(shapes), dtype=np.int64)
        _profile_many(a.mode, a.overhead, a.tab, a.tab_n, a.fit, a.fit_x, a.fit_n, self.roofline.params,
                      self.roofline.draft_params, shapes, out, flags)
        return out, flags

    def step_time(self, s: StepShape) -> np.ndarray | float:
        out, _ = self.price(s.vectors())
        return float(out[0]) if s.is_scalar else out
