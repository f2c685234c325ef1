"""Replications: a figure over several seeds as its mean and a 95 % interval, and whether an
SLO holds on that interval.

Run ``k`` of ``N`` uses the scenario's seed plus ``k`` (``seed_for``), so seed 0 is the
single-seed run and the same command gives the same seeds, and the same results, every time.

- Means, rates and shares (SLO attainment, goodput, throughput, offered rate, ``*_mean``, a
  capacity search's per-seed highest passing rate): Student t over the seeds,
  mean ± t(0.975, N − 1) · sd / √N (clipped at 0, shares also at 1).
- Percentiles (``*_p50``, ``*_p90``, ``*_p99``): a percentile bootstrap over the seeds: the
  seeds' values resampled with replacement (``BOOTSTRAP`` times, a fixed generator, so it is
  deterministic), the 2.5th and 97.5th percentiles of the resampled means. A tail percentile's
  spread across seeds is skewed, which the bootstrap follows and t does not; with few seeds it
  cannot reach beyond the values seen, so it reads narrower than t would.

A single seed gives the value itself as its interval (then every rule reads as it did before
seeds). An SLO check ``meets`` when the whole interval is on the right side of its limit,
``fails`` when the whole interval is on the wrong side, and is ``uncertain`` when it straddles
the limit; a run that failed fails.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from sim.results import fmt
from sim.results.money import dollars

LEVEL = 0.95
BOOTSTRAP = 2000
METHOD = ("mean of the seeds with a 95% interval: Student t for means and rates, a percentile bootstrap "
          "over the seeds for percentiles")

# t(0.975, df) for df = 1..30 (any table of Student's t, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959964
_PERCENTILE = re.compile(r"_p\d+$")
_SHARES = ("slo_attainment", "mean_kv_utilization", "prefix_hit_rate", "slo_attainment_in_bursts",
           "slo_attainment_outside_bursts")


def seed_for(base: int, k: int) -> int:
    """The seed of replication ``k`` (0-based) of a scenario whose seed is ``base``."""
    return base + k


def t_quantile(df: int) -> float:
    """Student t's 97.5th percentile with ``df`` degrees of freedom: the table to 30, then the
    Cornish–Fisher expansion around the normal (within 1e-4 of the exact value there)."""
    if df < 1:
        raise ValueError("df must be at least 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def is_percentile(metric: str) -> bool:
    return bool(_PERCENTILE.search(metric))


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float
    n: int

    @property
    def point(self) -> bool:
        return self.n < 2 or self.lo == self.hi


def interval(values: Iterable[float | None], metric: str = "") -> Interval:
    """Mean and 95 % interval of one metric's per-seed values (missing values left out)."""
    x = np.array([float(v) for v in values if not fmt.missing(v)], dtype=float)
    n = len(x)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if np.all(x == x[0]):  # one seed, or all alike: the value itself
        return Interval(mean, mean, mean, n)
    if is_percentile(metric):
        rng = np.random.default_rng(0)
        means = x[rng.integers(0, n, size=(BOOTSTRAP, n))].mean(axis=1)
        lo, hi = np.percentile(means, [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2])
    else:
        half = t_quantile(n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
        lo, hi = mean - half, mean + half
    lo = max(lo, 0.0)  # every figure here is a rate, a time, a count, a share or a price: never below 0
    if metric in _SHARES:
        hi = min(hi, 1.0)
    return Interval(mean, float(lo), float(hi), n)


def combine(summaries: Sequence[dict], metrics: Iterable[str]) -> dict[str, float]:
    """``metric``, ``metric_lo`` and ``metric_hi`` for each metric, over the seeds' summaries."""
    out: dict[str, float] = {}
    for m in metrics:
        iv = interval((s.get(m) for s in summaries), m)
        out[m], out[f"{m}_lo"], out[f"{m}_hi"] = iv.mean, iv.lo, iv.hi
    return out


def shown(metric: str, iv: Interval) -> str:
    """A figure as people read it: ``93.1%`` or ``93.1% (91.0%–95.2%)``, latencies with their
    unit (``1.42 s``, ``480 ms``)."""
    if iv.point:
        return _text(metric, iv.mean)
    return f"{_text(metric, iv.mean)} ({_text(metric, iv.lo)}–{_text(metric, iv.hi)})"


def _text(metric: str, v: float) -> str:
    if metric in _SHARES:
        return fmt.pct(v)
    if metric.rsplit("_", 1)[0] in ("ttft", "tpot", "e2e", "itl", "queueing_delay"):
        return fmt.duration(v)
    if metric.startswith("cost_"):
        return dollars(v)
    return fmt.num(v)


MEETS, UNCERTAIN, FAILS = "meets", "uncertain", "fails"


def check(metric: str, iv: Interval, limit: float, at_least: bool) -> tuple[str, str]:
    """One SLO check on an interval: (verdict, the reason in words; empty when it meets)."""
    name = "SLO attainment" if metric == "slo_attainment" else metric
    lim = _text(metric, limit)
    if iv.n == 0:
        return FAILS, f"{name} missing"
    good_lo, good_hi = (iv.lo >= limit, iv.hi >= limit) if at_least else (iv.hi <= limit, iv.lo <= limit)
    if good_lo:
        return MEETS, ""
    text = f"{name} {shown(metric, iv)}"
    if not good_hi:
        return FAILS, f"{text} {'<' if at_least else '>'} {lim}"
    return UNCERTAIN, f"{text} straddles {lim}"


def verdict(summaries: Sequence[dict], statuses: Sequence[str], errors: Sequence[str | None],
            slo_target: float, limits: dict[str, float]) -> tuple[str, str]:
    """Whether the runs of one point (a configuration at a rate, one run per seed) meet the SLO:
    ``meets``, ``uncertain`` or ``fails``, and why not (the limits missed, '; '-separated)."""
    bad = [e for st, e in zip(statuses, errors, strict=True) if st != "ok"]
    if bad:
        of = f" ({len(bad)} of {len(statuses)} seeds)" if len(statuses) > 1 else ""
        return FAILS, f"run failed{of}: {bad[0]}"
    checks = [check("slo_attainment", interval((s.get("slo_attainment") for s in summaries), "slo_attainment"),
                    slo_target, at_least=True)]
    checks += [check(m, interval((s.get(m) for s in summaries), m), lim, at_least=False)
               for m, lim in limits.items()]
    verdicts = [v for v, _ in checks]
    overall = FAILS if FAILS in verdicts else UNCERTAIN if UNCERTAIN in verdicts else MEETS
    why = "; ".join(w for v, w in checks if v == FAILS) if overall == FAILS else \
        "; ".join(w for _, w in checks if w)
    return overall, why


def ms_table(frame):
    """``metrics.ms_keys`` for a table with intervals: ``ttft_p99_lo``/``_hi`` become
    ``p99_ttft_ms_lo``/``_hi`` in milliseconds, beside ``p99_ttft_ms``."""
    import pandas as pd

    from sim.results.metrics import LATENCY_KEY, ms_keys

    renames = {}
    for c in frame.columns:
        if isinstance(c, str) and c.endswith(("_lo", "_hi")) and (m := LATENCY_KEY.match(c[:-3])):
            renames[c] = f"{m[2]}_{m[1]}_ms{c[-3:]}"
    out = ms_keys(frame)
    if renames:
        out = out.copy() if out is frame else out
        for c in renames:
            out[c] = pd.to_numeric(out[c], errors="coerce") * 1e3
        out = out.rename(columns=renames)
    return out
