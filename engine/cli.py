"""``servesim execute``. Registered with the simulator's CLI; imports torch only when run."""

from __future__ import annotations

import argparse


def add_engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default=None,
                   help="default: fp32 on the CPU, the model's dtype on CUDA")
    p.add_argument("--threads", type=int, default=1, help="torch threads on the CPU (default 1)")
    p.add_argument("--weights", default=None,
                   help="a .gguf file or safetensors folder (default: random weights)")


def engine_setup(args):
    from engine.execute import EngineSetup

    if args.threads is not None and args.threads < 1:
        from sim.errors import InputError

        raise InputError("--threads", None, f"expected a positive number, got {args.threads}")
    return EngineSetup(device=args.device, dtype=args.dtype, threads=args.threads,
                       weights=args.weights)


def require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        from sim.errors import InputError

        raise InputError("servesim", None, "this command needs the engine: pip install -e '.[engine]'") \
            from None


def cmd_execute(args) -> int:
    require_torch()
    from engine.execute import execute
    from sim.cli.console import finish_run
    from sim.results.write import check_results_dir
    from sim.scenario.load import load_scenario

    scenario = load_scenario(args.scenario, args.set)
    check_results_dir(args.out, args.format)  # before anything runs: results are never lost
    result = execute(scenario, engine_setup(args), args.scenario or "<default scenario>")
    return finish_run(result, args.out, args.format, f"executed on {args.device}:")


def register(sub) -> None:
    p = sub.add_parser("execute", help="run a scenario on the real engine, in real time")
    p.add_argument("scenario", nargs="?", help="scenario YAML (default: the embedded default)")
    p.add_argument("--out", default="results-execute", help="output folder (default results-execute)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a scenario field, e.g. --set workload.num_requests=50")
    p.add_argument("--format", choices=["parquet", "csv"], default="parquet", help="table format")
    add_engine_options(p)
    p.set_defaults(func=cmd_execute)
