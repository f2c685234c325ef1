"""``servesim bench``: the simulator's own speed, end to end (load, simulate, write results).

Each configuration runs in a fresh child process, so its peak memory is its own and imports
count. Figures are simulated requests per wall-second; compare loops by the ratio printed
from one run (the machines are shared and noisy). The compiled loop's first run in a fresh
checkout also compiles it (numba caches the result beside the source); ``measure`` warms
that cache first, and the bench prints how long compiling took.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

PROFILE = Path(__file__).resolve().parents[2] / "calibration" / "profiles" / "h100-llama-2-70b-tp2.json"
# What ``--cost`` prices with, as overrides of the default scenario, and the traffic per
# replica it serves below saturation (req/s).
COSTS = {
    "roofline": (["model=llama-3-8b"], 10),
    "profile": (["model=llama-2-70b", "hardware.tp=2", "cost.model=profile", f"cost.profile={PROFILE}"], 1.2),
}


# The loops ``servesim bench`` compares: label -> (simulation.loop, simulation.fast_forward).
MODES = {"compiled": ("compiled", True), "simpy fast-forward": ("simpy", True),
         "simpy step by step": ("simpy", False)}


def bench_scenario(requests: int, replicas: int = 1, policy: str = "continuous",
                   mode: str = "compiled", cost: str = "roofline") -> list[str]:
    """The embedded default scenario, as ``--set`` overrides: Poisson traffic on H100s,
    Llama-3-8B priced by the roofline or Llama-2-70B (TP 2) by the shipped H100 profile."""
    loop, fast_forward = MODES[mode]
    overrides, rate = COSTS[cost]
    return [*overrides, "hardware.gpu=H100-SXM", "workload.arrival.process=poisson",
            f"workload.arrival.rate={rate * replicas}", f"replicas={replicas}",
            f"scheduler.policy={policy}", f"workload.num_requests={requests}",
            f"simulation.loop={loop}", f"simulation.fast_forward={fast_forward}"]


@dataclass
class Measurement:
    wall_s: float  # end to end: imports, load, simulate, write results
    simulate_s: float
    peak_mb: float
    steps: int
    events: int


def _one(overrides: list[str], queue) -> None:
    t0 = time.perf_counter()
    from sim.loops.run import simulate
    from sim.results.write import write_results
    from sim.scenario.schema import load_scenario

    scenario = load_scenario(None, overrides)
    result = simulate(scenario)
    with tempfile.TemporaryDirectory() as out:
        write_results(result, out)
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put(Measurement(wall, result.wall_s, peak_mb, result.summary["steps"], result.events))


def measure(overrides: list[str]) -> Measurement:
    """One run in a fresh child process."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_one, args=(overrides, q))
    p.start()
    out = q.get()
    p.join()
    return out


def _profile_load_s() -> float:
    from sim.pricing.profile import load_profile

    t0 = time.perf_counter()
    load_profile(PROFILE)
    return time.perf_counter() - t0


def run_bench(args) -> int:
    console = Console(width=max(Console().width, 130))
    table = Table("policy", "requests", "replicas", "mode", "steps", "events / request",
                  "wall s (end to end)", "req/s", "simulate-only req/s", "peak MB", title="servesim bench")

    def row(policy: str, n: int, replicas: int, label: str, m: Measurement) -> None:
        table.add_row(policy, f"{n:,}", str(replicas), label, f"{m.steps:,}", f"{m.events / n:.2f}",
                      f"{m.wall_s:.2f}", f"{n / m.wall_s:,.0f}", f"{n / m.simulate_s:,.0f}", f"{m.peak_mb:.0f}")

    warm_s = None
    if args.loop != "simpy":  # compile (or load the cached build) before anything is timed
        warm_s = measure(bench_scenario(100, mode="compiled")).wall_s
    modes = ["compiled", "simpy fast-forward"] + (["simpy step by step"] if args.compare_stepping else [])
    if args.loop != "both":
        modes = [m for m in modes if m.startswith(args.loop)]
    for policy in args.policies:
        rates = {}
        for mode in modes:
            m = measure(bench_scenario(args.requests, args.replicas, policy, mode, args.cost))
            rates[mode] = args.requests / m.wall_s
            row(policy, args.requests, args.replicas, mode, m)
        for fast, slow in (("compiled", "simpy fast-forward"), ("simpy fast-forward", "simpy step by step")):
            if fast in rates and slow in rates:
                table.add_row(policy, "", "", f"{fast} / {slow}", "", "", "",
                              f"×{rates[fast] / rates[slow]:.2f}", "", "")
    if args.cluster:
        n, replicas = 1_000_000, 8
        for mode in [m for m in modes if m != "simpy step by step"]:
            row("continuous", n, replicas, mode, measure(bench_scenario(n, replicas, mode=mode, cost=args.cost)))
    console.print(table)
    if args.scaling:
        mode = "compiled" if args.loop != "simpy" else "simpy fast-forward"
        curve = Table("requests", "wall s (end to end)", "µs per request", "µs per added request",
                      "events / request", "peak MB",
                      title=f"cost per simulated request (continuous, {mode}, 1 replica)")
        before = None
        for n in (10_000, 100_000, 1_000_000):
            m = measure(bench_scenario(n, mode=mode, cost=args.cost))
            # The cost of the requests beyond the previous size: fixed start-up cancels out.
            added = "" if before is None else f"{(m.wall_s - before[1]) / (n - before[0]) * 1e6:.1f}"
            curve.add_row(f"{n:,}", f"{m.wall_s:.1f}", f"{m.wall_s / n * 1e6:.1f}", added,
                          f"{m.events / n:.2f}", f"{m.peak_mb:.0f}")
            before = (n, m.wall_s)
        console.print(curve)
    if warm_s is not None:
        console.print(f"warm-up: 100 requests on the compiled loop took {warm_s:.1f} s end to end "
                      "(in a fresh checkout that includes compiling it; later runs load the cached build)")
    console.print(f"profile load ({PROFILE.name}): {_profile_load_s() * 1000:.1f} ms; "
                  "the roofline model needs no profiling or training step")
    overrides, rate = COSTS[args.cost]
    console.print(f"scenario: the embedded default with {', '.join(overrides)} on H100s, Poisson at {rate} "
                  "req/s per replica")
    return 0
