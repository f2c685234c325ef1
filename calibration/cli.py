"""``servesim calibrate``, ``servesim validate`` and ``servesim import-vidur``.

One door each: ``calibrate`` and ``validate`` check what both sides share (``--max-error``,
``--repeats``, the scenario, the profile and output paths), then go to the in-repo engine
(``calibration.engine_commands``) or, with ``--endpoint``, to the server
(``endpoint.commands``). Registered with the simulator's CLI; torch is imported only when a
command runs on the engine.
"""

from __future__ import annotations

import math

from sim.errors import InputError


def cmd_calibrate(args) -> int:
    if args.endpoint:
        from endpoint.commands import calibrate_endpoint

        return calibrate_endpoint(args)
    from calibration.engine_commands import calibrate_engine

    return calibrate_engine(args)


def cmd_validate(args) -> int:
    from calibration.command_io import check_validation_out, positive
    from calibration.compare import parse_bounds
    from sim.errors import ProfileError
    from sim.inputs import check_file
    from sim.scenario.load import load_scenario

    bounds = parse_bounds(args.max_error)
    positive("--repeats", args.repeats)
    check_file(args.profile, "--profile", ProfileError, "profile file")
    scenario = load_scenario(args.scenario, args.set)
    source = args.scenario or "<default scenario>"
    out = check_validation_out(args.out)
    if args.endpoint:
        from endpoint.commands import validate_endpoint

        return validate_endpoint(args, scenario, source, out, bounds)
    from calibration.engine_commands import validate_engine

    return validate_engine(args, scenario, source, out, bounds)


def cmd_import_vidur(args) -> int:
    from calibration.command_io import check_profile_out, positive, write_profile
    from calibration.vidur import import_vidur
    from sim.cli.console import console

    positive("--tp", args.tp)
    if not math.isfinite(args.overhead_s) or args.overhead_s < 0:
        raise InputError("--overhead-s", None, f"expected seconds ≥ 0, got {args.overhead_s}")
    out = check_profile_out(args.out)
    profile = import_vidur(args.mlp, attention=args.attention, all_reduce=args.all_reduce,
                           model=args.model, tp=args.tp, gpu=args.gpu,
                           overhead_s=args.overhead_s)
    path = write_profile(profile, out)
    console.print(f"imported {profile.model} on {profile.device.name} (tp={profile.tp}) into {path}")
    for n in profile.notes:
        console.print(f"  note: {n}")
    return 0


def register(sub) -> None:
    from endpoint.commands import add_endpoint_options
    from engine.cli import add_engine_options

    p = sub.add_parser("calibrate", help="measure the engine's costs on this device; write a profile")
    p.add_argument("--model", default=None, help="catalog model (default tiny-llama-12m); with "
                   "--endpoint: the served model for the simulator (catalog name or config.json)")
    p.add_argument("--out", default=None, help="profile JSON (default profile-MODEL-DEVICE.json)")
    p.add_argument("--quick", action="store_true", help="a small grid (seconds; for smoke tests)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per point (median kept)")
    p.add_argument("--step-plans", type=int, default=None, help="plans timed for the step fit")
    p.add_argument("--max-tokens", type=int, default=None, help="largest step (tokens)")
    p.add_argument("--max-seqs", type=int, default=None, help="largest batch (sequences)")
    p.add_argument("--max-context", type=int, default=None, help="longest cached context")
    p.add_argument("--no-ops", action="store_true", help="skip the per-op grid")
    p.add_argument("--no-step", action="store_true", help="skip the whole-step fit")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="with --endpoint: write the profile even when its "
                   "saturation check misses the measured closed loop by more than 5%%")
    p.add_argument("--time-budget", type=float, default=600.0, metavar="S",
                   help="with --endpoint: plan the probes to finish in about S seconds (rounds of the grid after "
                        "the first, and the saturation loop's requests, are cut to fit; said in the profile's "
                        "notes); 0: no budget (default 600)")
    add_engine_options(p)
    add_endpoint_options(p, "calibrate")
    p.set_defaults(func=cmd_calibrate)

    v = sub.add_parser("validate", help="run a scenario on the engine and simulate it with a "
                       "profile; report the per-request error")
    v.add_argument("scenario", nargs="?", help="scenario YAML (default: the embedded default)")
    v.add_argument("--profile", required=True, help="profile JSON from servesim calibrate")
    v.add_argument("--out", default="results-validate")
    v.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    v.add_argument("--max-error", action="append", default=[], metavar="[METRIC[.STAT]=]X",
                   help="fail (exit 1) above this relative error, e.g. 0.3, e2e=0.05, ttft.p90=0.2")
    v.add_argument("--idle", choices=["sleep", "spin"], default="sleep",
                   help="how the engine waits for arrivals: sleep (as servesim execute) or spin "
                   "(keeps its core on a shared machine)")
    v.add_argument("--cost-mode", choices=["auto", "step", "ops"], default="auto",
                   help="price steps with the profile's whole-step fit, its per-op model, or "
                   "its default (the step fit when present)")
    add_engine_options(v)
    add_endpoint_options(v, "validate")
    v.add_argument("--repeats", type=int, default=1,
                   help="measured runs of the workload (2: the run-to-run spread beside the error)")
    v.set_defaults(func=cmd_validate)

    i = sub.add_parser("import-vidur", help="turn Vidur's profiling CSVs into a servesim profile")
    i.add_argument("--mlp", required=True, help="Vidur mlp.csv (per-token ops)")
    i.add_argument("--attention", default=None, help="Vidur attention.csv")
    i.add_argument("--all-reduce", default=None, help="Vidur all_reduce.csv (TP > 1)")
    i.add_argument("--model", required=True, help="catalog model the CSVs measured")
    i.add_argument("--tp", type=int, default=1)
    i.add_argument("--gpu", default=None, help="device name (default: from the path, e.g. a100)")
    i.add_argument("--overhead-s", type=float, default=0.002,
                   help="per-step CPU overhead (Vidur's CSVs have none; default 2 ms)")
    i.add_argument("--out", required=True)
    i.set_defaults(func=cmd_import_vidur)

