"""``servesim bench``: the simulator's own speed, end to end (imports, load, simulate, write).

Every measurement runs in a fresh child process, so its peak memory is its own and imports
count. Figures are simulated requests per wall-second; compare loops by the ratio printed
from one run (the machines are shared and noisy).

- default: the embedded default scenario (Poisson traffic on H100s) under continuous batching
  and chunked prefill, priced by the roofline (or ``--cost profile``: the shipped H100 profile);
- ``--scenarios [FILE ...]``: every shipped scenario (or those given), 100,000 requests where
  the scenario generates its traffic, traces as shipped, each checked against 20,000 req/s;
- ``--cluster``: 1,000,000 requests over 8 replicas; ``--scaling``: 10k to 1M requests;
- ``--autoscale``: scenarios/autoscale-diurnal.yaml's day at full length, 24 hours of its curve
  (about 173,000 requests, the fleet 1 to 6 replicas), the issue's target under 30 s;
- ``--set FIELD=VALUE``: an override for every scenario measured (a larger trace, another GPU);
- ``--scale N ... --replicas R ...``: N requests over R replicas (10 req/s each; R defaults to
  N / 10,000), issue 31's measurement of memory at scale: 10M requests over 1,000 replicas in
  < 60 s and < 2 GB, and a run of 10M peaking within 1.2x of a run of 1M;
- ``--startup``: a 2,000-request ``servesim run`` from the command line, warm, and the first run
  in a fresh checkout (an empty numba cache: compiling included).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.table import Table

from sim.cli.startup import quiet, settle

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "calibration" / "profiles" / "h100-llama-2-70b-tp2.json"
SCENARIOS = ROOT / "scenarios"
TARGET_RPS = 20_000  # simulated requests per wall-second, end to end, for every shipped scenario
AUTOSCALED_DAY = ["workload.duration_s=86400", "workload.arrival.rate.diurnal.period_s=86400",
                  "workload.arrival.rate.diurnal.phase_s=50400"]  # the shipped scenario's day, uncompressed
TARGET_DAY_S = 30.0
TARGET_SCALE = (60.0, 2048.0)  # --scale: wall seconds and peak MB of a run (issue 31: 10M requests, 1,000 replicas)
TARGET_PEAK_RATIO = 1.2  # --scale: the largest run's peak over the smallest's
# What ``--cost`` prices with, as overrides of the default scenario, and the traffic per replica
# it serves below saturation (req/s).
COSTS = {
    "roofline": (["model=llama-3-8b"], 10),
    "profile": (["model=llama-2-70b", "hardware.tp=2", "cost.model=profile", f"cost.profile={PROFILE}"], 1.2),
}


@dataclass
class Measurement:
    name: str
    loop: str
    requests: int
    wall_s: float  # end to end: imports, load, simulate, write results
    simulate_s: float
    peak_mb: float
    steps: int
    import_s: float = 0.0  # of wall_s: importing the simulator (numpy, pandas, numba, ...)
    write_s: float = 0.0  # of wall_s: the tables, summary.json and report.html

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s

    def row(self) -> dict:
        return {**asdict(self), "req_per_s": round(self.rps),
                "simulate_req_per_s": round(self.requests / self.simulate_s)}


def default_overrides(requests: int, replicas: int = 1, policy: str = "continuous", loop: str = "compiled",
                      cost: str = "roofline") -> list[str]:
    """The embedded default scenario, as ``--set`` overrides."""
    overrides, rate = COSTS[cost]
    return [*overrides, "hardware.gpu=H100-SXM", "workload.arrival.process=poisson",
            f"workload.arrival.rate={rate * replicas}", f"replicas={replicas}", f"scheduler.policy={policy}",
            f"workload.num_requests={requests}", f"simulation.loop={loop}"]


def scenario_overrides(path: Path, requests: int, loop: str) -> list[str]:
    """Run ``path`` with ``requests`` requests where it generates its traffic (a trace runs as shipped)."""
    from sim.scenario.load import load_scenario

    w = load_scenario(path).workload
    streams = w.classes if w.classes is not None else (w,)
    generated = all(s.trace is None and s.arrival.process != "trace" for s in streams)
    sizes = [f"workload.num_requests={requests}", "workload.duration_s=null"] if generated else []
    return [*sizes, f"simulation.loop={loop}"]


def _one(path: str | None, overrides: list[str], name: str, queue) -> None:
    try:
        t0 = time.perf_counter()
        quiet()  # as servesim run starts (sim/cli/startup.py)
        from sim.loops.run import simulate
        from sim.results.write import write_results
        from sim.scenario.load import load_scenario

        imported = time.perf_counter()
        scenario = load_scenario(path, overrides)
        settle()
        result = simulate(scenario)
        simulated = time.perf_counter()
        with tempfile.TemporaryDirectory() as out:
            write_results(result, out)
        end = time.perf_counter()
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        queue.put(Measurement(name, result.loop, len(result.requests), end - t0, result.wall_s, peak_mb,
                              result.summary["steps"], imported - t0, end - simulated))
    except BaseException as e:
        queue.put(f"{type(e).__name__}: {e}")


def measure(name: str, overrides: list[str], path: Path | None = None) -> Measurement:
    """One run in a fresh child process."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_one, args=(None if path is None else str(path), overrides, name, q))
    p.start()
    while True:
        try:
            out = q.get(timeout=1.0)
            break
        except Exception:
            if not p.is_alive():
                out = f"the run died (exit code {p.exitcode})"
                break
    p.join()
    if isinstance(out, str):
        raise RuntimeError(f"bench run {name!r} failed: {out}")
    return out


def cli_run_s(env: dict | None = None) -> float:
    """Wall seconds of ``servesim run`` (2,000 requests of the default scenario) in a new process.
    Python caches the simulator's bytecode as it would for a user (PYTHONDONTWRITEBYTECODE,
    where this machine sets it, would have every run compile the simulator's modules anew)."""
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | (env or {})
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sim.cli", "run", "--out", out, "--set", "workload.num_requests=2000"],
                       check=True, capture_output=True, env=environ)
        return time.perf_counter() - t0


def startup_s() -> dict[str, float]:
    """Start-up costs of a 2,000-request ``servesim run``: warm (the median of three, after one
    that warms the caches); the first run in a fresh checkout (empty build cache: it runs as
    Python while the build is made in the background), how long that build takes, the run after
    it; and the first run made to compile in the foreground."""
    cli_run_s()
    out = {"small_run_warm_s": statistics.median(cli_run_s() for _ in range(3))}
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        out["first_run_cold_s"] = cli_run_s({"NUMBA_CACHE_DIR": cache, "SERVESIM_BACKGROUND_BUILD": "1"})
        while not list(Path(cache).glob("*.ready")):
            if time.perf_counter() - t0 > 900 or not list(Path(cache).glob("*.building")):
                break  # the build failed or stalled: the next run compiles for itself
            time.sleep(0.2)
        out["background_build_s"] = time.perf_counter() - t0
        out["second_run_s"] = cli_run_s({"NUMBA_CACHE_DIR": cache})
    with tempfile.TemporaryDirectory() as cache:
        out["first_run_compiling_s"] = cli_run_s({"NUMBA_CACHE_DIR": cache, "SERVESIM_BACKGROUND_BUILD": "0"})
    return {k: round(v, 2) for k, v in out.items()}


def run_bench(args) -> int:
    from sim.cli.console import console, print_rows

    rows: list[Measurement] = []
    loops = ["compiled", "simpy"] if args.loop == "both" else [args.loop]
    replicas = scale_replicas(args.scale, args.replicas)  # a bad count is the user's error, before anything runs
    measure("warm-up", default_overrides(100))  # compile (or load the cached build) before timing
    extra = {}
    if args.startup:  # first: a large run just before leaves the machine reclaiming its memory
        extra |= startup_s()
    paths = None if args.scenarios is None else [Path(p) for p in args.scenarios] or sorted(SCENARIOS.glob("*.yaml"))
    if args.set:  # a bad override is the user's error (exit 2), not a run to skip
        from sim.scenario.load import load_scenario

        load_scenario(None if not paths else paths[0], args.set)
    if paths is not None:
        for path in paths:
            for loop in loops:
                try:
                    rows.append(measure(path.stem, [*scenario_overrides(path, args.requests, loop), *args.set], path))
                except RuntimeError as e:
                    console.print(f"[yellow]skipped[/] {e}")
    else:
        for policy in args.policies:
            for loop in loops:
                rows.append(measure(f"default {policy}", [*default_overrides(args.requests, 1, policy, loop,
                                                                             args.cost), *args.set]))
    if args.cluster:
        for loop in loops:
            rows.append(measure("1M over 8 replicas",
                                [*default_overrides(1_000_000, 8, loop=loop, cost=args.cost), *args.set]))
    if args.autoscale:
        for loop in loops:
            day = measure("autoscaled day", [*AUTOSCALED_DAY, f"simulation.loop={loop}", *args.set],
                          SCENARIOS / "autoscale-diurnal.yaml")
            rows.append(day)
            extra[f"autoscaled_day_{loop}_under_{TARGET_DAY_S:g}_s"] = day.wall_s < TARGET_DAY_S
    if args.scale:
        runs = [measure(f"{n:,} over {r:,} replicas", [*default_overrides(n, r, cost=args.cost), *args.set])
                for n, r in zip(args.scale, replicas, strict=True)]
        rows += runs
        for m, r in zip(runs, replicas, strict=True):
            extra[f"{m.requests}_over_{r}_replicas_under_{TARGET_SCALE[0]:g}_s_and_{TARGET_SCALE[1]:g}_mb"] = \
                m.wall_s < TARGET_SCALE[0] and m.peak_mb < TARGET_SCALE[1]
        if len(runs) > 1:
            small, large = min(runs, key=lambda m: m.requests), max(runs, key=lambda m: m.requests)
            ratio = large.peak_mb / small.peak_mb
            extra[f"peak_ratio_{large.requests}_over_{small.requests}"] = round(ratio, 2)
            extra[f"peak_ratio_within_{TARGET_PEAK_RATIO:g}"] = ratio <= TARGET_PEAK_RATIO
    if args.scaling:
        for n in (10_000, 100_000, 1_000_000):
            rows.append(measure(f"scaling {n:,}", [*default_overrides(n, cost=args.cost), *args.set]))

    records = [m.row() | ({"meets_20k": m.rps >= TARGET_RPS} if args.scenarios is not None else {}) for m in rows]
    if args.format == "json":
        print(json.dumps({"runs": records, **extra}, indent=2))
        return 0
    columns = ["name", "loop", "requests", "steps", "wall_s", "import_s", "simulate_s", "write_s", "req_per_s",
               "simulate_req_per_s", "peak_mb",
               *(["meets_20k"] if args.scenarios is not None else [])]
    print_rows(Table(*columns, title="servesim bench (simulated requests per wall-second, end to end)"),
               [[_cell(r[c]) for c in columns] for r in records], args.format)
    for name in sorted({m.name for m in rows}):
        by_loop = {m.loop: m for m in rows if m.name == name}
        if {"compiled", "simpy"} <= by_loop.keys():
            console.print(f"{name}: compiled over SimPy ×{by_loop['compiled'].rps / by_loop['simpy'].rps:.1f} "
                          "(same run)")
    for key, value in extra.items():
        unit = "" if isinstance(value, bool) or key.startswith("peak_ratio") else " s"
        console.print(f"{key.replace('_', ' ')}: {value}{unit}")
    return 0


def scale_replicas(requests: list[int], replicas: list[int]) -> list[int]:
    """The replicas of each ``--scale`` run: one count for all, one per run, or N / 10,000."""
    if not replicas:
        return [max(1, n // 10_000) for n in requests]
    if len(replicas) == 1:
        return replicas * len(requests)
    if len(replicas) != len(requests):
        from sim.errors import InputError

        raise InputError("--replicas", None, f"give one count, or one per --scale run ({len(requests)})")
    return list(replicas)


def _cell(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.2f}" if v < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)
