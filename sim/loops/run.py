"""Run a scenario: build its traffic and cluster, run the SimPy environment, collect metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy

from sim.core.requests import RequestTable
from sim.errors import ScenarioError
from sim.loops.cluster import Cluster
from sim.loops.executor import Executor
from sim.pricing import CostModelExecutor, make_cost_model
from sim.results.metrics import requests_frame, summarize
from sim.scenario.schema import Scenario
from sim.traffic import build_workload


@dataclass
class RunResult:
    scenario: Scenario
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    warnings: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    mode: str = "simulate"
    events: int = 0  # step (or fast-forwarded run) events the replicas waited on
    loop: str = "simpy"  # which loop ran it: simpy or compiled


def simulate(scenario: Scenario, *, env: simpy.Environment | None = None,
             executor_factory: Callable[[int], Executor] | None = None,
             progress: Callable[[int], None] | None = None, mode: str = "simulate",
             clock: Callable[[], float] | None = None, workload=None) -> RunResult:
    """Simulate ``scenario`` (or, given a real-time env, engine executors and its wall
    ``clock``, execute it)."""
    wall = time.perf_counter()
    workload = workload if workload is not None else build_workload(scenario)
    table = RequestTable.from_workload(workload)
    if env is None and executor_factory is None and clock is None and _compiled_loop(scenario):
        from sim.loops.compiled import run_compiled

        steps, n, costs = run_compiled(scenario, table, progress)
        result = collect(scenario, table, workload, steps, time.perf_counter() - wall, mode, costs)
        result.events, result.loop = n, "compiled"
        return result
    if executor_factory is None:
        costs = [make_cost_model(scenario, spec) for spec in scenario.replica_specs]
        executor_factory = lambda i: CostModelExecutor(costs[i])  # noqa: E731
    env = env or simpy.Environment()
    cluster = Cluster(env, scenario, table, executor_factory)
    cluster.on_arrival = progress
    for replica in cluster.replicas:
        replica.clock = clock
    env.run()
    executors = [getattr(r, "executor", None) or r.engines[0].executor for r in cluster.replicas]
    result = collect(scenario, table, workload, cluster.log.frame(), time.perf_counter() - wall, mode,
                     [getattr(e, "cost", None) for e in executors])
    result.events = sum(e.events for r in cluster.replicas for e in getattr(r, "engines", [r]))
    return result


def _compiled_loop(scenario: Scenario) -> bool:
    """Whether ``simulation.loop`` (and what the scenario needs) sends it to the compiled loop."""
    loop = scenario.simulation.loop
    if loop == "simpy":
        return False
    from sim.loops.compiled import unsupported

    why = unsupported(scenario)
    if why is not None and loop == "compiled":
        raise ScenarioError(f"scenario {scenario.name!r}", "simulation.loop",
                            f"the compiled loop cannot run it: {why}; use loop: auto or simpy")
    return why is None


def collect(scenario: Scenario, table: RequestTable, workload, steps: pd.DataFrame, wall_s: float,
            mode: str, costs=()) -> RunResult:
    """Metrics, summary and warnings of a finished run; ``costs`` are the replicas' cost
    models (those that extrapolated beyond a profile say so)."""
    costs = list({id(c): c for c in costs if c is not None}.values())
    requests = requests_frame(table, scenario.slo, workload)
    capacity = np.array([r.memory.num_blocks for r in scenario.replica_specs], dtype=float)
    steps["kv_utilization"] = steps["kv_blocks_used"] / capacity[steps["replica"].to_numpy()]
    summary = summarize(requests, steps, num_gpus=scenario.num_gpus)
    warnings = list(getattr(workload, "notes", ()))
    warnings += [w for c in costs for w in getattr(c, "warnings", lambda: [])()] if costs else []
    rejected = requests[requests["status"] == "rejected"]
    if len(rejected):
        reasons = rejected["reject_reason"].value_counts()
        warnings += [f"{n} request(s) rejected: {r}" for r, n in reasons.items()]
    if summary["unfinished"]:
        warnings.append(f"{summary['unfinished']} request(s) never finished")
    return RunResult(scenario, requests, steps, summary, warnings, wall_s, mode)
