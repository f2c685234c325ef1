"""The ``servesim`` command line."""

from __future__ import annotations

import argparse
import sys

from rich.markup import escape
from rich.table import Table

from sim.cli.console import console, err_console, finish_run, positive_int, progress_callback
from sim.errors import InputError
from sim.results import plotlyjs


def cmd_run(args) -> int:
    from sim.loops.run import simulate
    from sim.results.write import check_results_dir
    from sim.scenario.schema import load_scenario
    from sim.traffic import build_workload

    scenario = load_scenario(args.scenario, args.set)
    workload = build_workload(scenario)  # reads and checks traces before anything runs
    check_results_dir(args.out, args.format)  # and the output folder
    bar, cb = progress_callback(len(workload))
    if args.profile_sim:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        result = prof.runcall(simulate, scenario, workload=workload)
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(25)
        if result.loop == "compiled":
            console.print(f"The compiled loop ran it: its {result.events:,} steps run inside "
                          "simulate_kernel above; --set simulation.loop=simpy profiles the Python step loop.")
    elif bar is not None:
        with bar:
            result = simulate(scenario, progress=cb, workload=workload)
    else:
        result = simulate(scenario, workload=workload)
    return finish_run(result, args.out, args.format, "simulated", workload, args.plotlyjs)


def cmd_list(args) -> int:
    from sim.scenario.specs import GPU_CATALOG, MODEL_CATALOG

    if args.what == "models":
        t = Table("name", "params", "layers", "hidden", "heads", "kv heads", "ffn", "vocab",
                  "max len", "dtype", "experts")
        for m in MODEL_CATALOG.values():
            t.add_row(m.name, f"{m.num_params / 1e9:.2f}B", str(m.num_layers), str(m.hidden_size),
                      str(m.num_heads), str(m.num_kv_heads), str(m.intermediate_size),
                      str(m.vocab_size), str(m.max_model_len), m.dtype,
                      f"{m.num_experts} (top {m.experts_per_token})" if m.is_moe else "-")
    else:
        t = Table("name", "memory", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GB/s", "link GB/s",
                  "link", "$/h")
        for g in GPU_CATALOG.values():
            t.add_row(g.name, f"{g.memory_bytes / 1e9:.0f} GB", f"{g.bf16_flops / 1e12:.0f}",
                      f"{g.fp8_flops / 1e12:.0f}" if g.fp8_flops else "-",
                      f"{g.hbm_bandwidth / 1e9:.0f}", f"{g.interconnect_bandwidth / 1e9:.0f}",
                      g.interconnect, f"{g.price_per_hour:.2f}")
    t.columns[0].no_wrap = True
    console.print(t)
    return 0


def cmd_bench(args) -> int:
    from sim.cli.bench import run_bench

    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="servesim", description="Simulate LLM serving systems, and check the simulation "
        "against a real engine.")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate a scenario and write its results")
    run.add_argument("scenario", nargs="?", help="scenario YAML (default: the embedded default)")
    run.add_argument("--out", default="results", help="output folder (default: results)")
    run.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="override a scenario field, e.g. --set workload.arrival.rate=8")
    run.add_argument("--format", choices=["parquet", "csv"], default="parquet",
                     help="format of the requests and steps tables (default: parquet)")
    run.add_argument("--plotlyjs", choices=plotlyjs.MODES, default="file", help=plotlyjs.HELP)
    run.add_argument("--profile-sim", action="store_true",
                     help="print where the simulator's own time goes (cProfile)")
    run.set_defaults(func=cmd_run)

    ls = sub.add_parser("list", help="show the model or GPU catalog")
    ls.add_argument("what", choices=["models", "gpus"])
    ls.set_defaults(func=cmd_list)

    bench = sub.add_parser("bench", help="measure the simulator's own speed")
    bench.add_argument("--requests", type=positive_int, default=100_000,
                       help="requests per run where the traffic is generated (default 100000)")
    bench.add_argument("--policies", nargs="+", default=["continuous", "chunked-prefill"],
                       choices=["static", "continuous", "chunked-prefill"],
                       help="policies of the default scenario to measure")
    bench.add_argument("--scenarios", nargs="*", default=None, metavar="FILE",
                       help="measure these scenarios instead (no FILE: every shipped scenario), "
                            "each against 20,000 simulated requests per second")
    bench.add_argument("--cluster", action="store_true", help="also run 1,000,000 requests over 8 replicas")
    bench.add_argument("--scaling", action="store_true", help="also run 10k, 100k and 1M requests")
    bench.add_argument("--startup", action="store_true",
                       help="also time a 2,000-request servesim run, warm and in a fresh checkout (empty cache)")
    bench.add_argument("--loop", choices=["compiled", "simpy", "both"], default="compiled",
                       help="which simulation loop to measure (both: side by side, with their ratio)")
    bench.add_argument("--cost", choices=["roofline", "profile"], default="roofline",
                       help="price the default scenario with the roofline (Llama-3-8B, 10 req/s per replica) or "
                            "the shipped H100 profile (Llama-2-70B TP 2, 1.2 req/s per replica)")
    bench.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output format")
    bench.set_defaults(func=cmd_bench)

    for register in _extra_commands():
        register(sub)
    return p


def _extra_commands():
    """Commands that live beside the simulator (engine, calibration, studies)."""
    from sim.cli import commands

    return commands.registered()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as e:
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False)
        return 2
    except MemoryError:
        err_console.print("[red]error:[/] out of memory: this run needs more memory than the machine "
                          "has; expected fewer requests (workload.num_requests, duration_s), shorter "
                          "prompts or fewer replicas", highlight=False)
        return 2
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
