"""Per-configuration searches: which rates to run next, given the runs so far.

A search never runs anything; the driver asks ``wanted()`` for rates, runs them (or finds
them already done) and hands each record back with ``record``. The sequence of probes
depends only on the records, so any runner, in any order, gives the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable

Record = dict
Passes = Callable[[Record], bool]


def round_rate(x: float) -> float:
    """Rates to 4 significant digits: readable in tables and stable as run keys."""
    return float(f"{x:.4g}")


class Search:
    def __init__(self, config: int, seed: int = 0):
        self.config = config
        self.seed = seed  # which replication it runs (Plan.spec)
        self.records: dict[float | None, Record] = {}
        self._asked: set[float | None] = set()
        self.error: str | None = None

    @property
    def done(self) -> bool:
        raise NotImplementedError

    def wanted(self) -> list[float | None]:
        """Rates to run now (each asked once)."""
        out = [r for r in self._next() if r not in self._asked]
        self._asked.update(out)
        return out

    def _next(self) -> list[float | None]:
        raise NotImplementedError

    def record(self, rate: float | None, rec: Record) -> None:
        self.records[rate] = rec

    @property
    def max_runs(self) -> int:
        """An upper bound on the runs this search makes (for the progress bar)."""
        raise NotImplementedError


class FixedRates(Search):
    """Every rate in a list (or one run at the scenario's own rate: ``[None]``)."""

    def __init__(self, config: int, rates: list[float | None], seed: int = 0):
        super().__init__(config, seed)
        self.rates = list(dict.fromkeys(rates))

    def _next(self):
        return self.rates

    @property
    def done(self) -> bool:
        return len(self.records) == len(self.rates)

    @property
    def max_runs(self) -> int:
        return len(self.rates)


class Bisection(Search):
    """The highest rate in [lo, hi] whose run passes, to within a tolerance.

    Assumes passing is monotone in the rate (more load never helps the SLOs), which holds
    for a queue served at a fixed speed but is only approximately true for a finite run with
    random arrivals: near the edge, a slightly higher rate can pass where a lower one failed.
    Probes the two ends first, then the geometric midpoint of the bracket, keeping
    ``lo`` passing and ``hi`` failing, until ``hi - lo ≤ max(rel_tol × lo, abs_tol)``.
    """

    def __init__(self, config: int, lo: float, hi: float, passes: Passes,
                 rel_tol: float = 0.05, abs_tol: float = 0.0, seed: int = 0):
        super().__init__(config, seed)
        self.lo, self.hi = round_rate(lo), round_rate(hi)
        self.passes = passes
        self.rel_tol, self.abs_tol = rel_tol, abs_tol
        self.outcome: str | None = None  # found | below_bracket | above_bracket | error
        self._span = (self.lo, self.hi)

    def _converged(self) -> bool:
        return self.hi - self.lo <= max(self.rel_tol * self.lo, self.abs_tol)

    def _mid(self) -> float | None:
        mid = round_rate(math.sqrt(self.lo * self.hi))
        return mid if self.lo < mid < self.hi else None

    def _next(self):
        if self.outcome is not None:
            return []
        ends = [r for r in self._span if r not in self.records]
        if ends:
            return ends
        mid = self._mid()
        return [] if mid is None else [mid]

    def record(self, rate, rec):
        super().record(rate, rec)
        if self.outcome is not None:
            return
        if rec.get("status") != "ok":
            self.outcome, self.error = "error", f"rate {rate}: {rec.get('error')}"
            return
        lo0, hi0 = self._span
        if lo0 not in self.records or hi0 not in self.records:
            return
        if rate in (lo0, hi0) and len(self.records) == 2:
            if not self.passes(self.records[lo0]):
                self.outcome = "below_bracket"
                return
            if self.passes(self.records[hi0]):
                self.outcome, self.lo = "above_bracket", hi0
                return
        elif self.passes(rec):
            self.lo = rate
        else:
            self.hi = rate
        if self._converged() or self._mid() is None:
            self.outcome = "found"

    @property
    def done(self) -> bool:
        return self.outcome is not None

    @property
    def best_rate(self) -> float | None:
        """The highest passing rate found (None when even the lowest fails)."""
        return None if self.outcome in ("below_bracket", "error") else self.lo

    @property
    def max_runs(self) -> int:
        lo, hi = self._span
        steps = math.log(hi / lo) / math.log1p(max(self.rel_tol, 1e-9))
        if self.abs_tol > 0:
            steps = min(steps, (hi - lo) / self.abs_tol)
        return 2 + max(0, math.ceil(math.log2(max(steps, 1.0))))
