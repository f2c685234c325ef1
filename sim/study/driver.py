"""Running a study: feed each configuration's search, execute what is not already stored,
record every run as it finishes, and evaluate the objective at the end."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sim.study.objectives import Outcome, evaluate, make_searches
from sim.study.plan import Plan
from sim.study.runners import Runner
from sim.study.search import Search
from sim.study.store import RunStore


@dataclass
class Progress:
    """Counts for a progress display; ``total`` is an upper bound that shrinks as searches end."""

    total: int = 0
    done: int = 0
    reused: int = 0
    failed: int = 0


@dataclass
class StudyRun:
    plan: Plan
    searches: list[Search]
    outcome: Outcome
    progress: Progress
    interrupted: bool = False
    wall_s: float = 0.0
    paths: dict[str, Path] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _total(searches: list[Search]) -> int:
    return sum(len(s.records) if s.done else max(s.max_runs, len(s.records)) for s in searches)


def execute_plan(plan: Plan, store: RunStore, runner: Runner,
                 on_progress: Callable[[Progress], None] | None = None) -> StudyRun:
    """Run the plan to completion (or until Ctrl-C, keeping every finished run)."""
    wall = time.perf_counter()
    searches = make_searches(plan)
    prog = Progress(total=_total(searches))
    waiting: dict[str, list[tuple[Search, float | None]]] = {}

    def tick() -> None:
        prog.total = max(_total(searches), prog.done)
        if on_progress:
            on_progress(prog)

    def feed() -> None:
        """Give every search what it asks for: a stored record, or a submitted run."""
        for s in searches:
            asked = s.wanted()
            while asked:
                again = False
                for rate in asked:
                    spec = plan.spec(plan.configs[s.config], rate, s.seed)
                    rec = store.get(spec.key)
                    if rec is not None:
                        s.record(rate, rec)
                        prog.done += 1
                        prog.reused += 1
                        prog.failed += rec.get("status") != "ok"
                        again = True
                    elif spec.key in waiting:
                        waiting[spec.key].append((s, rate))
                    else:
                        waiting[spec.key] = [(s, rate)]
                        runner.submit(spec)
                asked = s.wanted() if again else []

    interrupted = False
    try:
        feed()
        tick()
        while runner.in_flight:
            spec, rec = runner.next_done()
            cfg = plan.configs[spec.config]
            store.append({**rec, "config": cfg.label, "rate": spec.rate, "seed": spec.data.get("seed")})
            for s, rate in waiting.pop(spec.key, []):
                s.record(rate, rec)
                prog.done += 1
                prog.failed += rec.get("status") != "ok"
            feed()
            tick()
    except KeyboardInterrupt:
        interrupted = True
        runner.close(cancel=True)
    finally:
        store.close()
    outcome = evaluate(plan, searches)
    return StudyRun(plan, searches, outcome, prog, interrupted, time.perf_counter() - wall)
