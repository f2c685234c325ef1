"""``servesim run --seeds N``: the scenario on N seeds (its seed, seed + 1, ...), each run's
results in its own ``seed-<seed>/`` folder, and at the top a summary.json and seeds.csv with
each headline figure's mean and 95 % interval over the seeds (``sim.study.intervals``).

Everything goes into place together (``atomic.Staging``): a failed run or write leaves the
folder's earlier results as they were.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from sim.results.atomic import Staging, check_out_dir
from sim.results.jsonsafe import json_safe
from sim.results.queue import burst_figures
from sim.results.write import FORMATS, TABLES, write_results
from sim.study.intervals import METHOD, interval, seed_for, shown

# The figures given with an interval (the rest are in each seed's own summary.json).
HEADLINE = ("slo_attainment", "goodput", "goodput_per_gpu", "offered_rate", "request_throughput",
            "output_token_throughput", "ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99",
            "itl_p50", "itl_p99", "e2e_p50", "e2e_p99", "queueing_delay_mean", "mean_batch_size",
            "mean_decode_batch", "mean_kv_utilization", "preemptions", "rejected", "peak_queue",
            "slo_attainment_in_bursts", "slo_attainment_outside_bursts", "cost_per_hour", "cost_per_1m_output_tokens",
            "cost_per_1m_tokens")
TOP_FILES = ("summary.json", "seeds.csv")


def seed_folder(seed: int) -> str:
    return f"seed-{seed}"


def intervals_document(name: str, seeds: list[int], summaries: list[dict]) -> dict:
    """summary.json of a run on several seeds: per headline metric, the mean, the 95 % interval
    and each seed's value."""
    figures = {}
    summaries = [{**s, **burst_figures(s)} for s in summaries]  # each burst's peak queue and recovery
    for m in dict.fromkeys([*HEADLINE, *(k for s in summaries for k in burst_figures(s))]):
        values = [s.get(m) for s in summaries]
        iv = interval(values, m)
        if iv.n:
            figures[m] = {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "values": values}
    return {"scenario": name, "seeds": seeds, "interval": f"95%: {METHOD}",
            "runs": {str(s): seed_folder(s) for s in seeds}, "summary": json_safe(figures)}


def run_on_seeds(args, scenario) -> int:
    """Simulate ``scenario`` on ``args.seeds`` seeds, write every run and the intervals, print
    them. Exit 0, or ``ALL_REJECTED`` when every request of every seed was rejected."""
    from sim.cli.console import ALL_REJECTED, console, print_block
    from sim.loops.run import simulate
    from sim.results.band_view import band_json, band_table
    from sim.results.summary_view import Block
    from sim.scenario.load import load_scenario
    from sim.traffic import build_workload

    out = check_out_dir(args.out, "--out", TOP_FILES)
    seeds = [seed_for(scenario.seed, k) for k in range(args.seeds)]
    results = []
    for seed in seeds:
        s = scenario if seed == scenario.seed else load_scenario(args.scenario, [*args.set, f"seed={seed}"])
        workload = build_workload(s)
        with console.status(f"seed {seed}: simulating {len(workload):,} requests"):
            results.append((simulate(s, workload=workload), workload))
    summaries = [r.summary for r, _ in results]
    doc = intervals_document(scenario.name, seeds, summaries)
    doc["error_band"] = band_json(results[0][0])  # the model's error, the same on every seed
    with Staging(out) as st:
        for seed, (result, workload) in zip(seeds, results, strict=True):
            write_results(result, st.folder_for(seed_folder(seed)), args.format, workload, args.plotlyjs)
        st.file("summary.json").write_text(json.dumps(doc, indent=2))
        pd.DataFrame([{"seed": seed, **{m: s.get(m) for m in HEADLINE}} for seed, s in zip(seeds, summaries,
                                                                                           strict=True)]
                     ).to_csv(st.file("seeds.csv"), index=False)
        for name in [f"{t}.{f}" for t in TABLES for f in FORMATS] + ["report.html"]:
            st.remove(name)  # a single run's files, from an earlier run here
        for old in Path(out).glob("seed-*"):
            if old.name not in {seed_folder(s) for s in seeds}:
                st.remove(old.name, folder=True)
    rows = [[m, shown(m, interval(f["values"], m)), *(shown(m, interval([v], m)) for v in f["values"])]
            for m, f in doc["summary"].items()]
    print_block(Block(f"{scenario.name}: {len(seeds)} seeds ({', '.join(map(str, seeds))}), mean (95% interval)",
                      rows, ["", "mean (95% interval)", *(f"seed {s}" for s in seeds)]))
    print_block(Block(*band_table(results[0][0])))
    console.print(f"Intervals: {METHOD}. Each seed's full results: {seed_folder(seeds[0])}/ ... "
                  f"{seed_folder(seeds[-1])}/", style="dim")
    wall = sum(r.wall_s for r, _ in results)
    console.print(f"simulated {len(seeds)} × {len(results[0][0].requests)} requests in {wall:.2f} s wall; "
                  f"results in {Path(out).resolve()} (summary.json, seeds.csv, "
                  f"{', '.join(seed_folder(s) + '/' for s in seeds)})", highlight=False)
    if all(s.get("requests") and s.get("rejected") == s.get("requests") for s in summaries):
        from sim.cli.console import err_console

        err_console.print(f"[red]error:[/] every request of every seed was rejected; exit code {ALL_REJECTED}")
        return ALL_REJECTED
    return 0

