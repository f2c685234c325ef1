"""Run a scenario: build its traffic and its cluster's core, run a loop, collect the results.

Two front doors. ``simulate`` prices every step with a cost model (the scenario's, or one
given, rescaled or not) on the loop ``simulation.loop`` picks: ``auto`` and ``compiled`` take
the compiled loop (every scenario runs there), ``simpy`` the reference SimPy loop; both give
identical results. ``drive`` runs the steps on executors — a real engine in real time
(``servesim execute``, validation), or a test's — over the SimPy loop.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy

from sim.core.jit import HAVE_NUMBA
from sim.core.plan import Executor
from sim.core.requests import RequestTable
from sim.core.state import Replica, ScaleCounter, Setting, build_core
from sim.errors import ScenarioError
from sim.pricing import CostModelExecutor, make_cost_model, request_overhead_s
from sim.pricing.costs import add_counts, encode, extrapolation_warnings
from sim.pricing.links import tier_specs
from sim.pricing.profiled import COUNTERS
from sim.pricing.roofline import engine_of
from sim.results.energy import run_energy, scenario_power
from sim.results.fleet import fleet_log, fleet_summary, held_gpu_hours, held_seconds
from sim.results.metrics import check_request_times, requests_frame, summarize
from sim.results.money import run_costs, window_s
from sim.results.steplog import StepLog, engine_rows
from sim.results.tiers import tier_summary
from sim.scenario.load import apply_overrides, scenario_from_dict
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
    events: int = 0  # steps the engines ran
    loop: str = "simpy"  # which loop ran it: simpy or compiled
    itl: dict | None = None  # inter-token gaps: histogram per class (see results.metrics)
    fleet: pd.DataFrame | None = None  # an autoscaled fleet's changes (see results.fleet)


def engine_costs(scenario: Scenario) -> list:
    """Each engine's cost model (a pipelined replica's virtual engines and attention DP ranks
    share the replica's)."""
    costs = []
    for spec in scenario.replica_specs:
        cost = make_cost_model(scenario, spec)
        costs += [cost] * spec.hardware.engines
    return costs


def simulate(scenario: Scenario, *, cost=None, scale: float = 1.0, progress: Callable[[int], None] | None = None,
             workload=None) -> RunResult:
    """Simulate ``scenario`` on the loop ``simulation.loop`` picks, every step priced by its
    replica's cost model (or by ``cost``, one RooflineCost or ProfiledCost for every engine)
    times ``scale`` (a machine's drift since calibration)."""
    wall = time.perf_counter()
    run = _Run(scenario, workload, request_overhead_s(scenario))
    costs = engine_costs(scenario) if cost is None else [cost] * run.core.counters.shape[0]
    if not _compiled_loop(scenario):
        return _on_simpy(run, [CostModelExecutor(c, scale) for c in costs], simpy.Environment(), None, progress,
                         "simulate", wall)
    from sim.loops.compiled import run_compiled
    from sim.loops.events import K_STEPS

    with _wrapping():
        loop = run_compiled(run.core, encode(costs, scale), run.closed, run.log.take, progress)
    counts = {name: int(n) for name, n in zip(COUNTERS, loop.extrap.sum(axis=0), strict=True) if n}
    result = run.collect(time.perf_counter() - wall, "simulate", counts)
    result.events, result.loop = int(loop.k[K_STEPS]), "compiled" if HAVE_NUMBA else "interpreted"
    return result


def drive(scenario: Scenario, executor_factory: Callable[[int], Executor], *, env: simpy.Environment | None = None,
          clock: Callable[[], float] | None = None, mode: str = "execute", workload=None) -> RunResult:
    """Run ``scenario``'s steps on executors (``executor_factory(e)``: engine e's — a real
    engine, or any Executor) over the SimPy loop; in real time given a real-time ``env`` and its
    wall ``clock`` (a step then lasts at least what it took). The engine runs in process:
    requests reach it as sent (no API server's overhead)."""
    if isinstance(env, simpy.RealtimeEnvironment):
        _compile_entries(scenario)
    wall = time.perf_counter()
    run = _Run(scenario, workload)
    executors = [executor_factory(e) for e in range(run.core.counters.shape[0])]
    return _on_simpy(run, executors, env or simpy.Environment(), clock, None, mode, wall)


def _compile_entries(scenario: Scenario) -> None:
    """Compile (or load from the build) every core entry a SimPy run of ``scenario`` calls, by
    simulating a few of its requests on that loop: a run on the wall clock must not spend its
    first step compiling (on a cold build an engine's first step once took 16 to 55 s)."""
    data = scenario.model_dump(mode="json", exclude={"base_dir"})
    few = apply_overrides(data, ["workload.num_requests=4", "simulation.loop=simpy"], "<warm-up>")
    simulate(scenario_from_dict(few, "<warm-up>", scenario.base_dir))


class _Run:
    """A run's traffic, request table, core and step log (``request_overhead_s``: the API
    server's time per request before the router)."""

    def __init__(self, scenario: Scenario, workload=None, request_overhead_s: float = 0.0):
        self.scenario = scenario
        self.workload = workload if workload is not None else build_workload(scenario)
        self.table = RequestTable.from_workload(self.workload)
        self.closed = self.workload.closed_loop
        self.replica_rate = _replica_rate(scenario, self.workload)
        cost = engine_of(scenario)
        self.core = build_core(scenario, self.table, step_overhead_s=cost.step_overhead_s,
                               stage_latency_s=cost.stage_latency_s,
                               closed=self.closed, replica_rate=self.replica_rate, tiers=tier_specs(scenario),
                               request_overhead_s=request_overhead_s)
        self.log = StepLog()

    def collect(self, wall_s: float, mode: str, extrapolated: dict[str, int]) -> RunResult:
        return collect(self.scenario, self.table, self.workload, self.log.frame(self.core), self.core, wall_s, mode,
                       extrapolated)


def _replica_rate(scenario: Scenario, workload) -> float:
    """The SLA planner's sustainable rate of one replica (sim/pricing/capacity.py), 0 otherwise."""
    a = scenario.autoscale
    if a is None or a.policy != "sla":
        return 0.0
    from sim.pricing.capacity import replica_rate

    n = len(workload.prompt_len)
    return replica_rate(scenario, make_cost_model(scenario), workload.prompt_len.mean() if n else 1.0,
                        workload.output_len.mean() if n else 1.0)


def _on_simpy(run: _Run, executors: list[Executor], env: simpy.Environment, clock, progress, mode: str,
              wall: float) -> RunResult:
    from sim.loops.simpy_loop import SimpyCluster

    cluster = SimpyCluster(env, run.core, run.table, executors, clock=clock, on_log_full=run.log.take,
                           on_arrival=progress)
    if isinstance(env, simpy.RealtimeEnvironment):
        env.sync()  # the wall clock starts now: building the run is not traffic time
    with _wrapping():
        env.run()
    counts: dict[str, int] = {}
    for ex in {id(x): x for x in executors}.values():
        add_counts(counts, getattr(ex, "extrapolated", {}))
    result = run.collect(time.perf_counter() - wall, mode, counts)
    result.events = cluster.steps
    return result


def _wrapping():
    """As plain Python, the core's hashes let uint64 products wrap (as compiled) without warnings."""
    return contextlib.nullcontext() if HAVE_NUMBA else np.errstate(over="ignore")


def _compiled_loop(scenario: Scenario) -> bool:
    """Whether ``simulation.loop`` sends it to the event loop (``compiled``; without numba,
    ``auto`` runs that loop as plain Python: still faster than SimPy's, identical results)."""
    loop = scenario.simulation.loop
    if loop == "simpy":
        return False
    if not HAVE_NUMBA and loop == "compiled":
        raise ScenarioError(f"scenario {scenario.name!r}", "simulation.loop",
                            "the compiled loop needs numba (pip install numba; SERVESIM_JIT=0 turns it off); "
                            "use loop: auto or simpy")
    return True


def collect(scenario: Scenario, table: RequestTable, workload, steps: pd.DataFrame, core, wall_s: float,
            mode: str, extrapolated: dict[str, int] | None = None) -> RunResult:
    """Metrics, summary and warnings of a finished run; ``extrapolated``: steps a profile
    priced beyond its measured range, per counter."""
    check_request_times(table)
    requests = requests_frame(table, scenario.slo, workload)
    steps["kv_utilization"] = kv_utilization(steps, core.settings[:, Setting.NUM_BLOCKS].astype(float))
    itl = {"hist": core.itl_hist.copy(), "sum": core.itl_sum.copy(), "classes": table.class_names}
    summary = summarize(requests, steps, num_gpus=scenario.num_gpus, itl=itl, workload=workload)
    fleet = fleet_log(core)
    held, gpus, window = None, scenario.replica_specs[0].hardware.num_gpus, window_s(summary)
    held_s = None  # the seconds each engine's GPUs were held in the cost window (a fixed fleet: all of it)
    if fleet is not None:  # GPU-hours held over the cost window (sim.results.fleet)
        start = float(requests["arrival"].min()) if len(requests) else 0.0
        held = held_gpu_hours(fleet, gpus, start, start + window)
        # a replica's engines are consecutive (its pipeline's stages): each holds its replica's time
        held_s = np.repeat(held_seconds(fleet, len(scenario.replica_specs), start, start + window),
                           core.replicas[:, Replica.COUNT])
    summary.update(run_costs(scenario, summary, held))  # $/h and $ per 1M tokens (sim.results.money)
    summary.update(run_energy(scenario_power(scenario), steps, requests, summary,  # sim.results.energy
                              core.settings[:, Setting.BLOCK_SIZE].astype(np.float64), held_s))
    if fleet is not None:
        summary["autoscale"] = fleet_summary(fleet, requests, len(scenario.replica_specs), held, gpus, window)
        if held > 0 and window > 0:  # goodput per GPU: per GPU held on average, not per GPU of the largest fleet
            per = scenario.num_gpus / (held * 3600.0 / window)
            for part in (summary, *(summary.get("classes") or {}).values()):
                part["goodput_per_gpu"] *= per
    if scenario.kv_tiers is not None:  # hits per tier, bytes moved (sim.results.tiers)
        requests.insert(requests.columns.get_loc("cached_tokens") + 1, "tier_tokens", table.loaded_tokens)
        summary["kv_tiers"] = tier_summary(scenario, core, requests)
    warnings = list(scenario.model_notes)  # what the model's description leaves out or over-counts
    warnings += getattr(workload, "notes", ())
    warnings += extrapolation_warnings(extrapolated or {})
    rejected = requests[requests["status"] == "rejected"]
    if len(rejected):
        reasons = rejected["reject_reason"].value_counts()
        warnings += [f"{n} request(s) rejected: {r}" for r, n in reasons.items()]
    if summary["unfinished"]:
        warnings.append(f"{summary['unfinished']} request(s) never finished")
    if fleet is not None and core.scale_n[ScaleCounter.LOST]:
        warnings.append(f"the fleet's log ran out of room: {int(core.scale_n[ScaleCounter.LOST])} change(s) of "
                        "replica state are missing from its series and GPU-hours")
    return RunResult(scenario, requests, steps, summary, warnings, wall_s, mode, itl=itl, fleet=fleet)


def kv_utilization(steps: pd.DataFrame, capacity: np.ndarray) -> np.ndarray:
    """Each step's share of its engine's KV blocks in use, engine by engine (one new array)."""
    used = steps["kv_blocks_used"].to_numpy()
    out = np.empty(len(used))
    order, rows = engine_rows(steps["engine"].to_numpy())
    for e, sl in rows.items():
        if order is None:
            np.divide(used[sl], capacity[e], out=out[sl])
        else:
            out[order[sl]] = used[order[sl]] / capacity[e]
    return out

