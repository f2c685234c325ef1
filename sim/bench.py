"""``servesim bench``: the simulator's own speed, end to end (load, simulate, write results).

Each configuration runs in a fresh child process, so its peak memory is its own and imports
count. Figures are simulated requests per wall-second; compare modes by the ratio printed
from one run (the machines are shared and noisy).
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

RATE_PER_REPLICA = 10  # req/s: Llama-3-8B on one H100 serves this with a few dozen running
PROFILE = Path(__file__).resolve().parent.parent / "calibration" / "profiles" / "h100-llama-2-70b-tp2.json"


def bench_scenario(requests: int, replicas: int = 1, policy: str = "continuous",
                   fast_forward: bool = True) -> list[str]:
    """The embedded default scenario, as ``--set`` overrides: Poisson traffic on H100s."""
    return ["model=llama-3-8b", "hardware.gpu=H100-SXM", "workload.arrival.process=poisson",
            f"workload.arrival.rate={RATE_PER_REPLICA * replicas}", f"replicas={replicas}",
            f"scheduler.policy={policy}", f"workload.num_requests={requests}",
            f"simulation.fast_forward={fast_forward}"]


@dataclass
class Measurement:
    wall_s: float  # end to end: imports, load, simulate, write results
    simulate_s: float
    peak_mb: float
    steps: int
    events: int


def _one(overrides: list[str], queue) -> None:
    t0 = time.perf_counter()
    from sim.results import write_results
    from sim.scenario import load_scenario
    from sim.simulate import simulate

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
    from sim.cost.profile_schema import load_profile

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

    modes = [("fast-forward", True)] + ([("step by step", False)] if args.compare_stepping else [])
    for policy in args.policies:
        rates = {}
        for label, ff in modes:
            m = measure(bench_scenario(args.requests, args.replicas, policy, ff))
            rates[label] = args.requests / m.wall_s
            row(policy, args.requests, args.replicas, label, m)
        if len(rates) == 2:
            table.add_row(policy, "", "", "speed-up", "", "", "",
                          f"×{rates['fast-forward'] / rates['step by step']:.2f}", "", "")
    if args.cluster:
        n, replicas = 1_000_000, 8
        row("continuous", n, replicas, "fast-forward", measure(bench_scenario(n, replicas)))
    console.print(table)
    if args.scaling:
        curve = Table("requests", "wall s (end to end)", "µs per request", "events / request", "peak MB",
                      title="cost per simulated request (continuous, fast-forward, 1 replica)")
        for n in (10_000, 100_000, 1_000_000):
            m = measure(bench_scenario(n))
            curve.add_row(f"{n:,}", f"{m.wall_s:.1f}", f"{m.wall_s / n * 1e6:.0f}", f"{m.events / n:.2f}",
                          f"{m.peak_mb:.0f}")
        console.print(curve)
    console.print(f"profile load ({PROFILE.name}): {_profile_load_s() * 1000:.1f} ms; "
                  "the roofline model needs no profiling or training step")
    console.print(f"scenario: the embedded default (Llama-3-8B on H100s), Poisson at {RATE_PER_REPLICA} req/s "
                  "per replica")
    return 0
