"""From probe measurements to the profile's whole-step fit and per-request overhead.

Every measurement is a sum of steps whose shapes are known (and, for a TTFT, one request's
overhead): a TTFT of P tokens is ⌈P/B⌉ prefill chunks (B: the token budget per step) plus
the overhead; a decode gap is one step of b decodes; an interference gap is one step of b
decodes and a P-token chunk. Features are the simulator's ``StepShape`` sums
(``num_tokens``, ``prefill_attn`` = Σ q·(cached + q), ``decode_context`` = Σ (cached + 1),
``num_seqs``, ``num_sampled``) plus ``const`` per step and ``request`` per request; the fit
minimises the absolute relative error with non-negative coefficients
(``calibration.fitting.robust_nnls``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibration.fitting import robust_nnls
from endpoint.probes import GapPoint, TtftPoint

STEP = ("const", "num_tokens", "prefill_attn", "decode_context", "num_seqs", "num_sampled")
COLUMNS = (*STEP, "request")


def prefill_steps(prompt: int, budget: int) -> list[dict[str, float]]:
    """The steps of one prompt alone, chunked by the budget; the last one samples."""
    out, done = [], 0
    while done < prompt:
        q = min(budget, prompt - done)
        out.append({"const": 1.0, "num_tokens": q, "prefill_attn": q * (done + q), "decode_context": 0.0,
                    "num_seqs": 1.0, "num_sampled": float(done + q == prompt)})
        done += q
    return out


def rows(ttft: list[TtftPoint], gaps: list[GapPoint], budget: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    x, y, kind = [], [], []
    for t in ttft:
        f = dict.fromkeys(COLUMNS, 0.0)
        for s in prefill_steps(t.prompt, budget):
            for k, v in s.items():
                f[k] += v
        f["request"] = 1.0
        x.append([f[c] for c in COLUMNS])
        y.append(t.ttft)
        kind.append("ttft")
    for g in gaps:
        p = g.prompt
        f = {"const": 1.0, "num_tokens": g.batch + p, "prefill_attn": float(p * p),
             "decode_context": g.context, "num_seqs": g.batch + (p > 0), "num_sampled": g.batch + (p > 0),
             "request": 0.0}
        x.append([f[c] for c in COLUMNS])
        y.append(g.seconds)
        kind.append(g.kind)
    return np.asarray(x, dtype=float), np.asarray(y, dtype=float), kind


@dataclass
class Fit:
    coef: dict[str, float]
    ranges: dict[str, tuple[float, float]]
    stats: dict  # median |relative error| by kind, r²
    r2: float

    @property
    def request_overhead_s(self) -> float:
        return self.coef["request"]

    def step_coef(self) -> list[float]:
        return [self.coef[c] for c in STEP]


def fastest(ttft: list[TtftPoint], gaps: list[GapPoint]) -> tuple[list[TtftPoint], list[GapPoint]]:
    """Repeated measurements of the same point collapsed to their minimum: on a shared machine
    interference only ever adds time, so the fastest repeat is the server's own cost."""
    t: dict[int, TtftPoint] = {}
    for p in ttft:
        if p.prompt not in t or p.ttft < t[p.prompt].ttft:
            t[p.prompt] = p
    g: dict[tuple, GapPoint] = {}
    for p in gaps:
        key = (p.kind, p.batch, p.prompt, round(p.context / max(p.batch, 1), -1))
        if key not in g or p.seconds < g[key].seconds:
            g[key] = p
    return list(t.values()), list(g.values())


def fit(ttft: list[TtftPoint], gaps: list[GapPoint], budget: int) -> Fit:
    ttft, gaps = fastest(ttft, gaps)
    x, y, kind = rows(ttft, gaps, budget)
    if len(y) < len(COLUMNS):
        raise ValueError(f"{len(y)} measurements cannot fit {len(COLUMNS)} terms")
    # relative error, each kind of measurement weighing as much in total as any other (the
    # many TTFT points would otherwise outvote the decode steps that make up most of E2E)
    kinds = np.asarray(kind)
    share = {k: 1.0 / np.count_nonzero(kinds == k) for k in set(kind)}
    w = np.array([share[k] for k in kind]) / np.maximum(y, 1e-9)
    c = robust_nnls(x, y, w)
    pred = x @ c
    err = pred / y - 1
    stats = {"n": len(y), "median_abs_rel_error": float(np.median(np.abs(err)))}
    for k in ("ttft", "decode", "mixed"):
        m = kinds == k
        if m.any():
            stats[k] = {"n": int(m.sum()), "median_abs_rel_error": float(np.median(np.abs(err[m]))),
                        "bias": float(np.median(err[m]))}
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = float(np.clip(1 - ss_res / ss_tot if ss_tot > 0 else 1.0, -1, 1))
    # ranges a single step reached: a whole prompt's chunk, a batch's decode
    steps = [s for t in ttft for s in prefill_steps(t.prompt, budget)]
    per_step = {f: [s[f] for s in steps] for f in STEP[1:]}
    for g in gaps:
        vals = {"num_tokens": g.batch + g.prompt, "prefill_attn": g.prompt ** 2, "decode_context": g.context,
                "num_seqs": g.batch + (g.prompt > 0), "num_sampled": g.batch + (g.prompt > 0)}
        for f, v in vals.items():
            per_step[f].append(float(v))
    ranges = {f: (float(min(v)), float(max(v))) for f, v in per_step.items() if v}
    return Fit(dict(zip(COLUMNS, map(float, c), strict=True)), ranges, stats, r2)


def infer_budget(chunks: list[tuple[int, int | None]], decoding: int = 1) -> tuple[int | None, str]:
    """The token budget per step from (prompt tokens, prefill steps) seen while ``decoding``
    requests decode (they take their tokens of the budget first): P tokens in k steps means
    k = ⌈P / (B − decoding)⌉. The budget that explains the most observations (a slow spell
    can add a step to one), a power of two among those when there is one, else the smallest."""
    seen = [(p, k) for p, k in chunks if k is not None and k >= 1]
    if not seen:
        return None, "no prefill steps could be told apart"
    if all(k == 1 for _, k in seen):
        return None, f"every prompt (up to {max(p for p, _ in seen)} tokens) ran in one step"
    top = max(p for p, _ in seen) + decoding
    cand = np.arange(decoding + 1, top + 1)
    agree = sum((np.ceil(p / (cand - decoding)) == k).astype(int) for p, k in seen)
    best = cand[agree == agree.max()]
    powers = [int(b) for b in best if b & (b - 1) == 0]
    b = powers[0] if powers else int(best[0])
    how = f"{int(best[0])} ≤ budget ≤ {int(best[-1])}" if len(best) > 1 else f"budget {b}"
    return b, f"{how} explains {int(agree.max())} of {len(seen)} prefill step counts {seen}"
