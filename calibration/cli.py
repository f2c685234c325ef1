"""``servesim calibrate``, ``servesim validate`` and ``servesim import-vidur``.

Registered with the simulator's CLI; torch is imported only when a command runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from sim.errors import InputError


def _positive(name: str, value):
    if value is not None and value < 1:
        raise InputError(name, None, f"expected a positive number, got {value}")


def _check_profile_out(out: str) -> Path:
    """Before measuring: the profile can be written at ``out`` (a file, in a writable folder)."""
    from sim.errors import OutputError
    from sim.results.atomic import check_out_dir

    path = Path(out).expanduser()
    if path.is_dir():
        raise OutputError(str(path), "--out", "is a folder; expected the profile's file name "
                          "(e.g. profile.json)")
    check_out_dir(path.parent, "--out")
    return path


def _write_profile(profile, path: Path) -> Path:
    """Save the profile under a temporary name, then rename it into place."""
    from sim.pricing.profile import save_profile
    from sim.results.atomic import Staging

    with Staging(path.parent) as st:
        save_profile(profile, st.file(path.name))
    return path


def cmd_calibrate(args) -> int:
    if args.endpoint:
        from endpoint.cli import cmd_calibrate as calibrate_endpoint

        return calibrate_endpoint(args)
    from engine.cli import require_torch

    require_torch()
    args.model = args.model or "tiny-llama-12m"
    from calibration.calibrate import Options, calibrate
    from calibration.grid import grid_for
    from sim.cli.console import console
    from sim.scenario.specs import get_model

    for name in ("repeats", "step_plans", "max_tokens", "max_seqs", "max_context", "threads"):
        _positive(f"--{name.replace('_', '-')}", getattr(args, name))
    if not 0 <= args.seed < 2**63:
        raise InputError("--seed", None, f"expected a whole number from 0 to 2**63 - 1, got {args.seed}")
    try:
        spec = get_model(args.model)
    except KeyError as e:
        raise InputError("--model", None, e.args[0]) from None
    if args.no_ops and args.no_step:
        raise InputError("--no-ops/--no-step", None, "nothing left to measure")
    opts = Options(model=spec.name, device=args.device, dtype=args.dtype, threads=args.threads,
                   weights=args.weights, quick=args.quick, ops=not args.no_ops,
                   step=not args.no_step, seed=args.seed, progress=not args.no_progress)
    grid = grid_for(args.device, args.quick, repeats=args.repeats, step_plans=args.step_plans,
                    max_tokens=args.max_tokens, max_seqs=args.max_seqs,
                    max_context=args.max_context)
    out = _check_profile_out(args.out or f"profile-{spec.name}-{args.device}.json")
    profile = calibrate(opts, grid)
    path = _write_profile(profile, out)
    fit = profile.grid.get("fit", {})
    step = fit.get("step")
    console.print(f"calibrated {profile.model} on {profile.device.name} ({profile.dtype}); "
                  f"profile in {path}")
    if step:
        console.print(f"whole-step fit on {step['plans']} plans: median error "
                      f"{step['median_abs_rel_error']:.1%} (cross-validated "
                      f"{step['cv_median_abs_rel_error']:.1%}), r² {step['r2']:.3f}")
    held_out = fit.get("ops_on_steps")
    if held_out:
        console.print(f"per-op model on those plans: median error "
                      f"{held_out['median_abs_rel_error']:.1%}, bias {held_out['bias']:+.1%}")
    console.print(f"serving-loop overhead {profile.overhead_s * 1e3:.2f} ms/step; "
                  f"prefers the {profile.prefer or ('step' if profile.step else 'ops')} model")
    for note in profile.notes:
        if "slower" in note:
            console.print(f"[yellow]note:[/] {note}")
    return 0


def parse_bounds(items: list[str]) -> dict[str, float]:
    """``0.3`` bounds every metric's median; ``e2e=0.05`` or ``ttft.p90=0.2`` one statistic."""
    from calibration.compare import METRICS, STATS

    out: dict[str, float] = {}
    for item in items:
        key, _, raw = item.rpartition("=")
        try:
            limit = float(raw)
        except ValueError:
            raise InputError("--max-error", item, "expected a number, METRIC=X or METRIC.STAT=X") \
                from None
        if limit < 0:
            raise InputError("--max-error", item, "must be ≥ 0")
        keys = [key] if key else list(METRICS)
        for k in keys:
            metric, _, stat = k.partition(".")
            if metric not in METRICS or (stat and stat not in STATS):
                raise InputError("--max-error", item,
                                 f"metric must be one of {', '.join(METRICS)}, optionally "
                                 f".{'/.'.join(STATS)}")
            out[k] = limit
    return out


VALIDATION_FILES = ("validation.json", "requests.csv", "steps.csv", "report.html")


def cmd_validate(args) -> int:
    if args.endpoint:
        from endpoint.cli import cmd_validate as validate_endpoint

        return validate_endpoint(args)
    from engine.cli import engine_setup, require_torch

    require_torch()
    bounds = parse_bounds(args.max_error)
    from calibration.compare import bounds_exceeded
    from calibration.report import write_report
    from calibration.validate import validate
    from sim.cli.console import console
    from sim.errors import ProfileError
    from sim.inputs import check_file
    from sim.results.atomic import Staging, check_out_dir
    from sim.scenario.schema import load_scenario

    scenario = load_scenario(args.scenario, args.set)
    source = args.scenario or "<default scenario>"
    if args.repeats < 1:
        raise InputError("--repeats", None, f"expected a positive number, got {args.repeats}")
    check_file(args.profile, "--profile", ProfileError, "profile file")
    out = check_out_dir(args.out, "--out", VALIDATION_FILES)
    v = validate(scenario, args.profile, engine_setup(args), source,
                 log=lambda m: console.print(m), idle=args.idle, cost_mode=args.cost_mode,
                 repeats=args.repeats)
    import pandas as pd

    steps = pd.concat([v.real.steps.assign(run="real"), v.sim.steps.assign(run="sim")],
                      ignore_index=True)
    with Staging(out) as st:
        st.file("validation.json").write_text(json.dumps(v.to_json(), indent=2))
        v.joined.to_csv(st.file("requests.csv"), index=False)
        steps.to_csv(st.file("steps.csv"), index=False)
        write_report(v, st.file("report.html"))
    print_validation(v, console)
    for d in v.diagnosis:
        console.print(f"  {d}")
    console.print(f"results in {out.resolve()} (validation.json, report.html, requests.csv, "
                  "steps.csv)")
    failed = bounds_exceeded(v.errors, bounds)
    for f in failed:
        console.print(f"[red]FAIL:[/] {f}")
    return 1 if failed else 0


def print_validation(v, console) -> None:
    from rich.table import Table

    t = Table(title=f"{v.real.scenario.name}: per-request error |sim − real| / real")
    for c in ("metric", "median", "p90", "max", "bias", "n"):
        t.add_column(c, justify="right" if c != "metric" else "left")
    for m, e in v.errors.items():
        t.add_row(m.upper(), *(f"{e[k]:.1%}" if e.get(k) == e.get(k) else "–"
                               for k in ("median", "p90", "max", "bias")), str(e.get("n", 0)))
    console.print(t)
    s = Table(title="summary metrics")
    for c in ("metric", "real", "sim", "relative"):
        s.add_column(c, justify="right" if c != "metric" else "left")
    for k, d in v.summary.items():
        s.add_row(k, f"{d['real']:.4g}", f"{d['sim']:.4g}",
                  f"{d['rel_diff']:+.1%}" if d["rel_diff"] == d["rel_diff"] else "–")
    console.print(s)
    st = v.steps
    if st.get("n"):
        console.print(f"profile on the engine's own {st['n']} steps: median error "
                      f"{st['median_abs']:.1%}, bias {st['bias']:+.1%}")
    ratio = v.machine.get("speed_ratio")
    if ratio is not None:
        adj = v.adjusted.get("e2e", {}).get("median", float("nan"))
        console.print(f"machine speed vs calibration: probe {ratio - 1:+.1%}; E2E median error "
                      f"once the simulation is scaled by it: {adj:.1%}")
    for w in v.warnings:
        console.print(f"[yellow]warning:[/] {w}")


def cmd_import_vidur(args) -> int:
    from calibration.vidur import import_vidur
    from sim.cli.console import console

    _positive("--tp", args.tp)
    if not math.isfinite(args.overhead_s) or args.overhead_s < 0:
        raise InputError("--overhead-s", None, f"expected seconds ≥ 0, got {args.overhead_s}")
    out = _check_profile_out(args.out)
    profile = import_vidur(args.mlp, attention=args.attention, all_reduce=args.all_reduce,
                           model=args.model, tp=args.tp, gpu=args.gpu,
                           overhead_s=args.overhead_s)
    path = _write_profile(profile, out)
    console.print(f"imported {profile.model} on {profile.device.name} (tp={profile.tp}) into {path}")
    for n in profile.notes:
        console.print(f"  note: {n}")
    return 0


def register(sub) -> None:
    from endpoint.cli import add_endpoint_options
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

