"""From probe measurements to the profile's whole-step fit and per-request overhead.

Every measurement is a sum of steps whose shapes are known (and, for a TTFT, one request's
overhead): a TTFT of P tokens is ⌈P/B⌉ prefill chunks (B: the token budget per step) plus
the overhead; a decode gap is one step of b decodes; an interference gap is one step of b
decodes and a P-token chunk. Features are the simulator's ``StepShape`` sums
(``num_tokens``, ``prefill_attn`` = Σ q·(cached + q), ``decode_context`` = Σ (cached + 1),
``num_seqs``, ``num_sampled``) plus ``const`` per step and ``request`` per request; the fit
minimises the absolute relative error with non-negative coefficients
(``calibration.fitting.robust_nnls``). A step's compute (its tokens, rows and prefill
attention) has a **floor**: on a CPU a step of a few decodes costs what streaming the weights
costs, whatever its rows (the roofline's max(memory, compute)); the per-step constant and the
decodes' KV reads add on top. The floor is fitted with the rest (which steps sit on it is
found by alternating), and left out when it does not help.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from calibration.fitting import robust_nnls
from endpoint.probes import GapPoint, TtftPoint

STEP = ("const", "num_tokens", "prefill_attn", "decode_context", "num_seqs", "num_sampled")
COLUMNS = (*STEP, "request")
# The step's compute (bounded below by the floor: a step of a few rows streams the weights
# once however few rows it has) and what adds on top of it (the loop's own per-step cost, the
# decodes' KV reads).
COMPUTE = ("num_tokens", "prefill_attn", "num_seqs", "num_sampled")
ON_TOP = ("const", "decode_context")
FLOOR_STARTS = (0, 2, 4, 6, 8, 12, 16, 24)  # first guesses: steps of ≤ k tokens on the floor


def prefill_steps(prompt: int, budget: int) -> list[dict[str, float]]:
    """The steps of one prompt alone, chunked by the budget; the last one samples."""
    out, done = [], 0
    while done < prompt:
        q = min(budget, prompt - done)
        out.append({"const": 1.0, "num_tokens": q, "prefill_attn": q * (done + q), "decode_context": 0.0,
                    "num_seqs": 1.0, "num_sampled": float(done + q == prompt)})
        done += q
    return out


def gap_step(g: GapPoint) -> dict[str, float]:
    """The one step behind a decode gap (b decodes) or a mixed gap (b decodes and a P-token chunk)."""
    p = g.prompt
    return {"const": 1.0, "num_tokens": g.batch + p, "prefill_attn": float(p * p), "decode_context": g.context,
            "num_seqs": g.batch + (p > 0), "num_sampled": g.batch + (p > 0)}


@dataclass
class Measured:
    """What the fit sees: each measurement as the steps it spans (and whether it includes one
    request's overhead), its seconds and its kind."""

    steps: list[list[dict[str, float]]]
    request: np.ndarray
    y: np.ndarray
    kind: list[str]


def measured(ttft: list[TtftPoint], gaps: list[GapPoint], budget: int) -> Measured:
    steps = [prefill_steps(t.prompt, budget) for t in ttft] + [[gap_step(g)] for g in gaps]
    return Measured(steps, np.array([1.0] * len(ttft) + [0.0] * len(gaps)),
                    np.array([t.ttft for t in ttft] + [g.seconds for g in gaps], dtype=float),
                    ["ttft"] * len(ttft) + [g.kind for g in gaps])


def rows(ttft: list[TtftPoint], gaps: list[GapPoint], budget: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The plain linear design: each measurement's summed step features and request count."""
    m = measured(ttft, gaps, budget)
    x = np.array([[sum(s[c] for s in st) for c in STEP] + [r] for st, r in zip(m.steps, m.request, strict=True)])
    return x, m.y, m.kind


def _design(m: Measured, floored: list[np.ndarray]) -> np.ndarray:
    """Columns COLUMNS + floor: a floored step contributes its on-top terms and one floor."""
    x = np.zeros((len(m.y), len(COLUMNS) + 1))
    for i, (st, fl) in enumerate(zip(m.steps, floored, strict=True)):
        for s, f in zip(st, fl, strict=True):
            for j, c in enumerate(STEP):
                if not (f and c in COMPUTE):
                    x[i, j] += s[c]
            x[i, -1] += f
        x[i, len(STEP)] = m.request[i]
    return x


def _compute(c: dict[str, float], s: dict[str, float]) -> float:
    return sum(c[k] * s[k] for k in COMPUTE)


def predict(coef: dict[str, float], floor: float, m: Measured) -> np.ndarray:
    """Each measurement's seconds: Σ over its steps of max(floor, compute) + on-top terms."""
    return np.array([sum(max(floor, _compute(coef, s)) + sum(coef[k] * s[k] for k in ON_TOP) for s in st)
                     + coef["request"] * r for st, r in zip(m.steps, m.request, strict=True)])


@dataclass
class Fit:
    coef: dict[str, float]
    ranges: dict[str, tuple[float, float]]
    stats: dict  # median |relative error| by kind, r²
    r2: float
    floor: float = 0.0  # seconds: no step's compute runs faster (0: none)

    @property
    def request_overhead_s(self) -> float:
        return self.coef["request"]

    def features(self) -> list[str]:
        """The profile's step terms, in pricing order (the floor after the terms it bounds)."""
        return [*COMPUTE, "floor", *ON_TOP] if self.floor > 0 else list(STEP)

    def step_coef(self) -> list[float]:
        return [self.floor if c == "floor" else self.coef[c] for c in self.features()]


def collapse(ttft: list[TtftPoint], gaps: list[GapPoint], how: str = "median") -> tuple[list[TtftPoint],
                                                                                    list[GapPoint]]:
    """Repeated measurements of the same point collapsed to one: their median (``how``), the
    server's typical cost on this machine as validation will meet it (a shared machine's
    other processes included), or their minimum (the server alone)."""
    pick = np.median if how == "median" else np.min
    t: dict[int, list[TtftPoint]] = {}
    for p in ttft:
        t.setdefault(p.prompt, []).append(p)
    g: dict[tuple, list[GapPoint]] = {}
    for p in gaps:
        g.setdefault((p.kind, p.batch, p.prompt, round(p.context / max(p.batch, 1), -1)), []).append(p)
    ttft_out = [replace(v[0], ttft=float(pick([p.ttft for p in v]))) for v in t.values()]
    gaps_out = [replace(v[0], seconds=float(pick([p.seconds for p in v])),
                        context=float(np.mean([p.context for p in v]))) for v in g.values()]
    return ttft_out, gaps_out


def _fit_floored(m: Measured, w: np.ndarray, start: int, iters: int = 20) -> tuple[dict[str, float], float]:
    """Alternate: fit the linear terms and the floor with a guess of which steps sit on it, then
    put on it the steps whose fitted compute falls below it, until that no longer changes."""
    floored = [np.array([s["num_tokens"] <= start for s in st]) for st in m.steps]
    for _ in range(iters):
        c = robust_nnls(_design(m, floored), m.y, w)
        coef, floor = dict(zip(COLUMNS, map(float, c[:-1]), strict=True)), float(c[-1])
        again = [np.array([floor > 0 and _compute(coef, s) < floor for s in st]) for st in m.steps]
        if all((a == b).all() for a, b in zip(again, floored, strict=True)):
            break
        floored = again
    return coef, floor


def fit(ttft: list[TtftPoint], gaps: list[GapPoint], budget: int, floor: bool = True, how: str = "median") -> Fit:
    """The step terms, the floor (``floor``: try one) and the per-request overhead that explain
    the measurements best (Σ weight·|relative error|); every kind of measurement weighs as much
    in total as any other (the many TTFT points would otherwise outvote the decode steps that
    make up most of E2E); repeats of a point collapse to their median (``how``: or min)."""
    ttft, gaps = collapse(ttft, gaps, how)
    m = measured(ttft, gaps, budget)
    y = m.y
    if len(y) < len(COLUMNS):
        raise ValueError(f"{len(y)} measurements cannot fit {len(COLUMNS)} terms")
    floor = floor and len(y) > len(COLUMNS)  # a floor needs one more
    kinds = np.asarray(m.kind)
    share = {k: 1.0 / np.count_nonzero(kinds == k) for k in set(m.kind)}
    w = np.array([share[k] for k in m.kind]) / np.maximum(y, 1e-9)
    best = None
    for start in FLOOR_STARTS if floor else (0,):
        coef, fl = _fit_floored(m, w, start)
        loss = float(np.sum(w * np.abs(predict(coef, fl, m) - y)))
        if best is None or loss < best[0] - 1e-12:
            best = (loss, coef, fl, start)
    loss, coef, fl, _ = best
    pred = predict(coef, fl, m)
    err = pred / y - 1
    stats = {"n": len(y), "median_abs_rel_error": float(np.median(np.abs(err))), "loss": loss,
             "floor_s": fl, "repeats": how}
    for k in ("ttft", "decode", "mixed"):
        sel = kinds == k
        if sel.any():
            stats[k] = {"n": int(sel.sum()), "median_abs_rel_error": float(np.median(np.abs(err[sel]))),
                        "bias": float(np.median(err[sel]))}
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = float(np.clip(1 - ss_res / ss_tot if ss_tot > 0 else 1.0, -1, 1))
    # ranges a single step reached: a whole prompt's chunk, a batch's decode
    steps = [s for st in m.steps for s in st]
    ranges = {f: (float(min(s[f] for s in steps)), float(max(s[f] for s in steps))) for f in STEP[1:]}
    return Fit(coef, ranges, stats, r2, fl)


def infer_budget(chunks: list[tuple[int, int | None]], decoding: int = 1) -> tuple[int | None, str]:
    """The token budget per step from (prompt tokens, prefill steps) seen while ``decoding``
    requests decode (they take their tokens of the budget first): P tokens in k steps means
    k = ⌈P / (B − decoding)⌉. A slow spell can make a gap look like one more step, never fewer:
    budgets that predict more steps than any observation showed are ruled out (unless none is
    left), then the budget that explains the most observations, a power of two among those when
    there is one, else the smallest."""
    seen = [(p, k) for p, k in chunks if k is not None and k >= 1]
    if not seen:
        return None, "no prefill steps could be told apart"
    if all(k == 1 for _, k in seen):
        return None, f"every prompt (up to {max(p for p, _ in seen)} tokens) ran in one step"
    top = max(p for p, _ in seen) + decoding
    cand = np.arange(decoding + 1, top + 1)
    agree = sum((np.ceil(p / (cand - decoding)) == k).astype(int) for p, k in seen)
    fewer = np.logical_and.reduce([np.ceil(p / (cand - decoding)) <= k for p, k in seen])
    if fewer.any():
        cand, agree = cand[fewer], agree[fewer]
    best = cand[agree == agree.max()]
    powers = [int(b) for b in best if b & (b - 1) == 0]
    b = powers[0] if powers else int(best[0])
    how = f"{int(best[0])} ≤ budget ≤ {int(best[-1])}" if len(best) > 1 else f"budget {b}"
    return b, f"{how} explains {int(agree.max())} of {len(seen)} prefill step counts {seen}"
