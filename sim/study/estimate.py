"""A study's size before it runs: how many runs at most, roughly how long, and whether to ask.

The time is a rough guide, from the requests each run simulates: the compiled core simulates
about ``REQUESTS_PER_S`` requests a second on one core (``servesim bench`` measures it), plus a
fixed cost per run (building the scenario, the summary). A study above ``ASK_RUNS`` runs or
``ASK_S`` seconds of estimated time needs ``--yes`` (or a ``--max-runs`` it fits in): a terminal
is asked, anything else is refused with a message that names the flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.study.overrides import get_path

if TYPE_CHECKING:
    from sim.study.plan import Plan

REQUESTS_PER_S = 20_000.0
PER_RUN_S = 0.2
ASK_RUNS = 1_000
ASK_S = 3_600.0
_DEFAULT_REQUESTS = 1_000


@dataclass(frozen=True)
class Estimate:
    runs: int  # at most (a bisection may stop sooner)
    seconds: float  # of wall time, on ``workers`` parallel workers
    workers: int

    @property
    def large(self) -> bool:
        return self.runs > ASK_RUNS or self.seconds > ASK_S

    def describe(self) -> str:
        if not self.runs:
            return "no runs left to make"
        return f"up to {self.runs:,} runs, about {duration(self.seconds)} on {self.workers} worker(s)"


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds // 3600:.0f} h {seconds % 3600 / 60:02.0f} min"


def requests_per_run(data: dict, rate: float | None) -> float:
    """How many requests a run of this scenario mapping simulates (roughly: a trace's length is
    not read here)."""
    w = data.get("workload") or {}
    n = get_path(data, "workload.num_requests", None)
    duration_s = get_path(data, "workload.duration_s", None)
    classes = w.get("classes") if isinstance(w, dict) else None
    if classes:
        return float(sum(c.get("num_requests") or _DEFAULT_REQUESTS for c in classes if isinstance(c, dict)))
    if duration_s and not n:
        r = rate or get_path(data, "workload.arrival.rate", None) or 1.0
        return float(duration_s) * float(r)
    return float(n or _DEFAULT_REQUESTS)


def estimate(plan: Plan, workers: int, stored: int = 0) -> Estimate:
    """The most runs ``plan`` makes (less those already ``stored``) and their time."""
    from sim.study.objectives import make_searches

    searches = make_searches(plan)
    runs, seconds = 0, 0.0
    for s in searches:
        n = s.max_runs
        config = plan.configs[s.config]
        rates = getattr(s, "rates", None) or [getattr(s, "hi", None)]
        per_run = sum(requests_per_run(config.data, r) for r in rates) / len(rates)
        runs += n
        seconds += n * (PER_RUN_S + per_run / REQUESTS_PER_S)
    left = max(runs - stored, 0)
    if runs:
        seconds *= left / runs
    return Estimate(left, seconds / max(workers, 1), max(workers, 1))


def refusal(est: Estimate, max_runs: int | None) -> str | None:
    """Why this study should not start without more from the user, or None."""
    if max_runs is not None:
        if est.runs > max_runs:
            return (f"this study makes {est.describe()}, more than --max-runs {max_runs}: raise the limit, "
                    "or make the study smaller (fewer values in vary, a narrower bracket)")
        return None
    if est.large:
        return (f"this study makes {est.describe()}: run it with --yes to go ahead, or with --max-runs N "
                "to go ahead only if it needs at most N runs")
    return None
