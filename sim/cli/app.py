"""The ``servesim`` command line."""

from __future__ import annotations

import argparse
import sys

from rich.markup import escape
from rich.table import Table

from sim.cli.console import console, err_console, finish_run, positive_int, progress_callback
from sim.cli.startup import quiet, settle
from sim.errors import InputError
from sim.results import plotlyjs
from sim.vocab import POLICIES


def cmd_run(args) -> int:
    from sim.cli import prebuild
    from sim.results.write import check_results_dir
    from sim.scenario.load import load_scenario
    from sim.traffic import build_workload

    scenario = load_scenario(args.scenario, args.set)
    if args.seeds > 1 and args.profile_sim:
        raise InputError("--profile-sim", None, "profiles one run; leave out --seeds")
    workload = build_workload(scenario)  # reads and checks traces before anything runs
    check_results_dir(args.out, args.format)  # and the output folder
    if not args.profile_sim and prebuild.should_interpret_first_run(scenario.simulation.loop, len(workload)):
        prebuild.interpret_this_process()  # before the core is imported: this run does not wait for numba
        prebuild.start_background_build()
    elif prebuild.is_ready():
        prebuild.mark_used()
    from sim.loops.run import simulate
    from sim.pricing import profile_checks  # (imports the core: after the choice above)

    if args.allow_profile_mismatch:
        profile_checks.allow_mismatch()
    profile_checks.check_scenario(scenario)  # a cost profile measured on what the scenario simulates

    settle()
    if args.seeds > 1:
        from sim.cli.seeds import run_on_seeds

        return run_on_seeds(args, scenario)
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


def catalog_records(what: str) -> list[dict]:
    """The model or GPU catalog, one record per entry, numbers as numbers (for csv and json)."""
    from sim.scenario.specs import GPU_CATALOG, MODEL_CATALOG

    if what == "models":
        return [{"name": m.name, "params_b": round(m.num_params / 1e9, 3),
                 "active_params_b": round(m.active_params / 1e9, 3), "attention": m.attention_kind,
                 "kv_bytes_per_token": round(m.kv_bytes_per_token()), "layers": m.num_layers,
                 "hidden": m.hidden_size, "heads": m.num_heads, "kv_heads": m.num_kv_heads,
                 "ffn": m.intermediate_size, "vocab": m.vocab_size, "max_len": m.max_model_len, "dtype": m.dtype,
                 "weights": ",".join(f"{g}:{d}" for g, d in m.weight_dtypes) or m.dtype,
                 "experts": m.num_experts, "experts_per_token": m.experts_per_token,
                 "state_bytes_per_request": round(m.state_bytes_per_request()), "mtp_layers": m.mtp_layers}
                for m in MODEL_CATALOG.values()]
    from sim.scenario.specs import efficiency

    def tflops(x: float) -> int | None:
        return round(x / 1e12) or None

    def allreduce(g) -> dict:  # a small all-reduce across the whole domain: fitted or derived
        return {"allreduce_domain_us": round(efficiency.collective_latency(g, g.link_domain) * 1e6, 1),
                "allreduce_latency": efficiency.link_constants(g.link)[2]}

    return [{"name": g.name, "memory_gib": round(g.memory_bytes / 2**30, 1), "memory_estimated": g.memory_estimated,
             "bf16_tflops": tflops(g.bf16_flops), "fp8_tflops": tflops(g.fp8_flops),
             "fp4_tflops": tflops(g.fp4_flops), "int8_tops": tflops(g.int8_flops),
             "hbm_gbps": round(g.hbm_bandwidth / 1e9), "link": g.interconnect,
             "link_gbps": round(g.interconnect_bandwidth / 1e9), "link_domain": g.link_domain,
             "scale_out": g.scale_out or None, "power_w": round(g.power_w), "usd_per_hour": g.price_per_hour,
             "price_source": g.price_source, "price_date": g.price_date, "source": g.source,
             "source_date": g.source_date, "figures": g.figures, **allreduce(g)} for g in GPU_CATALOG.values()]


def catalog_table(what: str, records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Headings and text rows for the terminal."""
    if what == "models":
        head = ["name", "params", "active", "attention", "KV B/token", "layers", "hidden", "heads", "kv heads",
                "vocab", "max len", "weights", "experts"]
        rows = [[r["name"], f"{r['params_b']:.2f}B", f"{r['active_params_b']:.2f}B", r["attention"],
                 f"{r['kv_bytes_per_token']:,}" + (f" + {r['state_bytes_per_request'] / 2**20:.1f} MiB/req"
                                                   if r["state_bytes_per_request"] else ""),
                 *(str(r[k]) for k in ("layers", "hidden", "heads", "kv_heads", "vocab", "max_len")), r["weights"],
                 f"{r['experts']} (top {r['experts_per_token']})" if r["experts"] > 1 else "-"] for r in records]
    else:
        head = ["name", "memory GiB", "bf16", "fp8", "fp4", "int8", "HBM GB/s", "link", "GB/s", "domain",
                "beyond", "W", "$/h", "source, date"]
        rows = [[r["name"], f"{r['memory_gib']:.1f}" + ("~" if r["memory_estimated"] else ""),
                 *(str(r[k] or "-") for k in ("bf16_tflops", "fp8_tflops", "fp4_tflops", "int8_tops", "hbm_gbps")),
                 r["link"], str(r["link_gbps"]), str(r["link_domain"]), r["scale_out"] or "-", str(r["power_w"]),
                 f"{r['usd_per_hour']:.2f}" + ("~" if r["price_source"].startswith("estimate") else ""),
                 f"{r['source']}, {r['source_date']}"] for r in records]
    return head, rows


def cmd_list(args) -> int:
    import json

    from sim.cli.console import print_rows

    records = catalog_records(args.what)
    if args.format == "json":
        print(json.dumps(records, indent=2))
        return 0
    if args.format == "csv":
        import csv

        w = csv.DictWriter(sys.stdout, fieldnames=list(records[0]))
        w.writeheader()
        w.writerows(records)
        return 0
    head, rows = catalog_table(args.what, records)
    t = Table(*head)
    t.columns[0].no_wrap = True
    print_rows(t, rows)
    if args.what == "gpus":
        print("TFLOP/s dense; link GB/s per GPU and direction within the domain, 'beyond' the link between "
              "domains; ~ an estimate (--format json for every source and price date)")
    return 0


def cmd_bench(args) -> int:
    from sim.cli.bench import run_bench

    return run_bench(args)


BUILTIN = ("run", "list", "bench")


def build_parser(extras: bool = True) -> argparse.ArgumentParser:
    """The whole command line; ``extras=False`` leaves out the commands other packages register
    (engine, calibration, endpoint, study), which import far more than ``run`` needs."""
    p = argparse.ArgumentParser(
        prog="servesim", description="Simulate LLM serving systems, and check the simulation "
        "against a real engine.")
    p.add_argument("--version", action=VersionAction, help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate a scenario and write its results")
    run.add_argument("scenario", nargs="?", help="scenario YAML (default: the embedded default)")
    run.add_argument("--out", default="results", help="output folder (default: results)")
    run.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="override a scenario field, e.g. --set workload.arrival.rate=8")
    run.add_argument("--format", choices=["parquet", "csv"], default="parquet",
                     help="format of the requests and steps tables (default: parquet)")
    run.add_argument("--plotlyjs", choices=plotlyjs.MODES, default="file", help=plotlyjs.HELP)
    run.add_argument("--allow-profile-mismatch", action="store_true",
                     help="price with a cost profile measured on another GPU, model, dtype or engine than the "
                          "scenario's, with a warning (default: refuse)")
    run.add_argument("--profile-sim", action="store_true",
                     help="print where the simulator's own time goes (cProfile)")
    run.add_argument("--seeds", type=positive_int, default=1, metavar="N",
                     help="run on N seeds (the scenario's seed, seed+1, ...): each in OUT/seed-<seed>/, and "
                          "summary.json with each headline figure's mean and 95%% interval (default 1)")
    run.set_defaults(func=cmd_run)

    ls = sub.add_parser("list", help="show the model or GPU catalog")
    ls.add_argument("what", choices=["models", "gpus"], help="which catalog: models or gpus")
    ls.add_argument("--format", choices=["table", "csv", "json"], default="table",
                    help="table (readable; plain rows when piped), csv or json")
    ls.set_defaults(func=cmd_list)

    bench = sub.add_parser("bench", help="measure the simulator's own speed")
    bench.add_argument("--requests", type=positive_int, default=100_000,
                       help="requests per run where the traffic is generated (default 100000)")
    bench.add_argument("--policies", nargs="+", default=["continuous", "chunked-prefill"],
                       choices=list(POLICIES),
                       help="policies of the default scenario to measure")
    bench.add_argument("--scenarios", nargs="*", default=None, metavar="FILE",
                       help="measure these scenarios instead (no FILE: every shipped scenario), "
                            "each against 20,000 simulated requests per second")
    bench.add_argument("--cluster", action="store_true", help="also run 1,000,000 requests over 8 replicas")
    bench.add_argument("--scaling", action="store_true", help="also run 10k, 100k and 1M requests")
    bench.add_argument("--autoscale", action="store_true",
                       help="also run scenarios/autoscale-diurnal.yaml's autoscaled day at full length (target < 30 s)")
    bench.add_argument("--scale", type=positive_int, nargs="+", default=[], metavar="N",
                       help="also run N requests over --replicas replicas (10 req/s each), e.g. issue 31's "
                            "--scale 1000000 10000000 --replicas 100 1000 (target: 10M in < 60 s and < 2 GB, "
                            "and its peak within 1.2x of 1M's)")
    bench.add_argument("--replicas", type=positive_int, nargs="+", default=[], metavar="R",
                       help="replicas of each --scale run (one for all, or one per N; default N / 10,000)")
    bench.add_argument("--startup", action="store_true",
                       help="also time a 2,000-request servesim run: warm, and in a fresh checkout (empty "
                            "build cache; the build made in the background, or in the foreground)")
    bench.add_argument("--loop", choices=["compiled", "simpy", "both"], default="compiled",
                       help="which simulation loop to measure (both: side by side, with their ratio)")
    bench.add_argument("--cost", choices=["roofline", "profile"], default="roofline",
                       help="price the default scenario with the roofline (Llama-3-8B, 10 req/s per replica) or "
                            "the shipped H100 profile (Llama-2-70B TP 2, 1.2 req/s per replica)")
    bench.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a field of every scenario measured, e.g. --set "
                            "workload.trace.path=big.jsonl (repeatable)")
    bench.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output format")
    bench.set_defaults(func=cmd_bench)

    for register in _extra_commands() if extras else ():
        register(sub)
    for cmd in sub.choices.values():
        fill_help(cmd)
    return p


# The options every command shares mean the same everywhere; a command that registers one
# without a help text gets this one.
SHARED_HELP = {
    "--out": "output folder (or file) for the results",
    "--set": "override a scenario field, e.g. --set workload.arrival.rate=8 (repeatable)",
    "--format": "output format",
    "--device": "where the engine runs: cpu or cuda",
    "--seed": "random seed (same seed, same results)",
    "--no-progress": "no progress bar",
    "--tp": "tensor-parallel degree the measurements were taken at",
}


def fill_help(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if action.help is None:
            for opt in action.option_strings:
                if opt in SHARED_HELP:
                    action.help = SHARED_HELP[opt]
                    if action.default not in (None, False, [], argparse.SUPPRESS):
                        action.help += " (default: %(default)s)"
                    break


def trace_hint(path, message: str) -> str:
    """Where to get a trace that is not there: the scenario's (or study's) own header comment
    says so, e.g. scenarios/azure-conversation.yaml."""
    if not path or not isinstance(path, str) or "trace file not found" not in message:
        return ""
    try:
        from pathlib import Path

        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return ""
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line[1:].strip())
    start = next((i for i, t in enumerate(header) if "not shipped" in t or "download" in t.lower()), None)
    if start is None:
        return ""
    hint = []
    for t in header[start:]:
        if not t and hint:
            break
        hint.append(t)
    return f"hint ({path}): " + " ".join(hint)


class VersionAction(argparse.Action):
    """``--version``, looked up only when asked for (package metadata costs a run 10 ms)."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"servesim {version()}")
        parser.exit()


def version() -> str:
    """The installed package's version, else the source tree's."""
    try:
        from importlib.metadata import version as installed

        return installed("servesim")
    except Exception:
        import sim

        return sim.__version__


def _extra_commands():
    """Commands that live beside the simulator (engine, calibration, studies)."""
    from sim.cli import commands

    return commands.registered()


def main(argv: list[str] | None = None) -> int:
    quiet()  # until settle(): cmd_run's once its imports are done, any other command's now
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser(extras=not argv or argv[0] not in BUILTIN)
        args = parser.parse_args(argv)
        if args.func is not cmd_run:
            settle()
        return args.func(args)
    except InputError as e:
        err_console.print(f"[red]error:[/] {escape(str(e))}", highlight=False)
        hint = trace_hint(getattr(args, "scenario", None) or getattr(args, "study", None), str(e))
        if hint:
            err_console.print(hint, highlight=False, markup=False)
        return 2
    except MemoryError:
        err_console.print("[red]error:[/] out of memory: this run needs more memory than the machine "
                          "has; expected fewer requests (workload.num_requests, duration_s), shorter "
                          "prompts or fewer replicas", highlight=False)
        return 2
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except BrokenPipeError:  # the reader stopped reading (| head): not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        settle()


if __name__ == "__main__":
    sys.exit(main())
