"""``servesim bench``: the simulator's own speed, end to end (load, simulate, write results).

Each configuration runs in a fresh child process, so its peak memory is its own. Figures are
simulated requests per wall-second; compare modes by the ratio printed from one run.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import tempfile
import time

from rich.console import Console
from rich.table import Table

BENCH_SCENARIO = [
    "model=llama-3-8b", "hardware.gpu=H100-SXM", "workload.arrival.process=poisson",
    "workload.arrival.rate=10",
]


def _one(overrides: list[str], queue) -> None:
    from sim.results import write_results
    from sim.scenario import load_scenario
    from sim.simulate import simulate

    t0 = time.perf_counter()
    scenario = load_scenario(None, overrides)
    result = simulate(scenario)
    with tempfile.TemporaryDirectory() as out:
        write_results(result, out)
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put((wall, result.wall_s, peak_mb, result.summary["steps"]))


def measure(overrides: list[str]) -> tuple[float, float, float, int]:
    """(end-to-end wall s, simulate-only wall s, peak MB, steps) of one run in a child."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_one, args=(overrides, q))
    p.start()
    out = q.get()
    p.join()
    return out


def run_bench(args) -> int:
    console = Console(width=max(Console().width, 130))
    table = Table("policy", "requests", "mode", "steps", "wall s (end to end)", "req/s",
                  "simulate-only req/s", "peak MB", title="servesim bench")
    modes = [("fast-forward", True)] + ([("step by step", False)] if args.compare_stepping else [])
    for policy in args.policies:
        rates = {}
        for label, ff in modes:
            ov = [*BENCH_SCENARIO, f"scheduler.policy={policy}",
                  f"workload.num_requests={args.requests}", f"simulation.fast_forward={ff}"]
            wall, sim_wall, peak, steps = measure(ov)
            rates[label] = args.requests / wall
            table.add_row(policy, f"{args.requests:,}", label, f"{steps:,}", f"{wall:.2f}",
                          f"{args.requests / wall:,.0f}", f"{args.requests / sim_wall:,.0f}",
                          f"{peak:.0f}")
        if len(rates) == 2:
            table.add_row(policy, "", "speed-up", "", "", f"×{rates['fast-forward'] / rates['step by step']:.2f}",
                          "", "")
    console.print(table)
    if args.scaling:
        curve = Table("requests", "wall s", "µs per request", "peak MB",
                      title="cost per simulated request (continuous, fast-forward)")
        for n in (10_000, 100_000, 1_000_000):
            wall, _, peak, _ = measure([*BENCH_SCENARIO, f"workload.num_requests={n}"])
            curve.add_row(f"{n:,}", f"{wall:.1f}", f"{wall / n * 1e6:.0f}", f"{peak:.0f}")
        console.print(curve)
    console.print(f"scenario: embedded default with {' '.join(BENCH_SCENARIO)}")
    return 0
