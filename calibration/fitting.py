"""Fitting measurements: robust non-negative fits on relative error, and tables.

Costs are fitted to minimise the *relative* error of each measurement (a 5 ms decode step
matters as much as a 500 ms prefill), in absolute value rather than squared (iteratively
reweighted least squares), so that a run disturbed by another process on a shared machine
pulls the fit no more than any other point; coefficients are non-negative (no feature makes a
step faster). ``r2`` is reported on the plain seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sim.pricing.profile import FLOOR, LinearFit, Table


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int = 200) -> np.ndarray:
    """argmin ‖a·x − b‖ subject to x ≥ 0 (Lawson–Hanson active set)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n = a.shape[1]
    x = np.zeros(n)
    free = np.zeros(n, dtype=bool)
    tol = 1e-10 * max(1.0, float(np.abs(a.T @ b).max()))
    w = a.T @ b
    for _ in range(max_iter):
        if free.all() or w[~free].max() <= tol:
            break
        free[np.argmax(np.where(free, -np.inf, w))] = True
        while True:
            s = np.zeros(n)
            s[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
            if s[free].min() > 0:
                break
            bad = free & (s <= 0)
            alpha = float(np.min(x[bad] / (x[bad] - s[bad])))
            x = x + alpha * (s - x)
            free &= x > 1e-15
            if not free.any():
                s = np.zeros(n)
                break
        x = s
        w = a.T @ (b - a @ x)
    return np.maximum(x, 0.0)


def robust_nnls(x: np.ndarray, y: np.ndarray, w: np.ndarray, iters: int = 30) -> np.ndarray:
    """argmin Σ w·|x·c − y| over c ≥ 0, by iteratively reweighted least squares."""
    scale = np.maximum(np.abs(x).max(axis=0), 1e-30)  # condition the columns
    xs = x / scale
    c = nnls(xs * w[:, None], y * w)
    floor = 1e-3 * float(np.median(np.abs(y * w))) + 1e-15
    for _ in range(iters):
        r = np.abs(xs @ c - y) * w
        v = w / np.sqrt(np.maximum(r, floor))
        new = nnls(xs * v[:, None], y * v)
        if np.allclose(new, c, rtol=1e-6, atol=1e-15):
            break
        c = new
    return c / scale


def fit_linear(features: Sequence[str], rows: Sequence[Mapping[str, float]],
               seconds: Sequence[float], relative: bool = True) -> LinearFit:
    """Fit ``seconds ≈ Σ coef·feature`` (``const`` is the column of ones)."""
    y = np.asarray(seconds, dtype=float)
    if len(y) < len(features):
        raise ValueError(f"{len(y)} measurements cannot fit {len(features)} features")
    x = np.array([[1.0 if f == "const" else float(r[f]) for f in features] for r in rows])
    w = 1.0 / np.maximum(y, 1e-9) if relative else np.ones_like(y)
    coef = robust_nnls(x, y, w)
    pred = x @ coef
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    ranges = {f: (float(x[:, i].min()), float(x[:, i].max()))
              for i, f in enumerate(features) if f != "const"}
    return LinearFit(features=list(features), coef=[float(c) for c in coef],
                     r2=float(np.clip(r2, -1.0, 1.0)), ranges=ranges)


def predict(fit: LinearFit, row: Mapping[str, float]) -> float:
    """Σ coef·feature in the fit's order (a ``floor`` raises the sum so far), as ``profile_time``."""
    total = 0.0
    for f, c in zip(fit.features, fit.coef, strict=True):
        if f == FLOOR:
            total = max(total, c)
        else:
            total += c * (1.0 if f == "const" else float(row[f]))
    return max(total, 0.0)


def relative_errors(fit: LinearFit, rows: Sequence[Mapping[str, float]],
                    seconds: Sequence[float]) -> np.ndarray:
    pred = np.array([predict(fit, r) for r in rows])
    return pred / np.maximum(np.asarray(seconds, dtype=float), 1e-12) - 1.0


def isotonic(y: Sequence[float]) -> np.ndarray:
    """The closest non-decreasing sequence (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in y:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, n2 = blocks.pop()
            m1, n1 = blocks[-1]
            blocks[-1] = [(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2]
    return np.concatenate([np.full(int(n), m) for m, n in blocks])


def table(points: Mapping[float, float] | Sequence[tuple[float, float]]) -> Table:
    """A Table from (size, seconds) points: duplicate sizes merged by their median, then made
    non-decreasing (a bigger op never costs less; noise can say otherwise)."""
    items = points.items() if isinstance(points, Mapping) else points
    xs: dict[float, list[float]] = {}
    for x, s in items:
        xs.setdefault(float(x), []).append(float(s))
    x = sorted(xs)
    y = isotonic([float(np.median(xs[k])) for k in x])
    return Table(x=x, seconds=[max(0.0, float(v)) for v in y])


def thin(x: Sequence[float], y: Sequence[float], n: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``n`` of the points, spread evenly on a log scale of ``x`` (ends kept)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) <= n:
        return x, y
    order = np.argsort(x)
    x, y = x[order], y[order]
    targets = np.geomspace(max(x[0], 1e-12), x[-1], n)
    idx = np.unique(np.clip(np.searchsorted(x, targets), 0, len(x) - 1))
    idx = np.unique(np.concatenate(([0], idx, [len(x) - 1])))
    return x[idx], y[idx]
