"""``servesim calibrate`` and ``servesim validate`` on the in-repo engine (no ``--endpoint``).

Reached through the doors in ``calibration/cli.py``, which have checked what both sides
share (``--max-error``, ``--repeats``, the output paths); torch is imported here, when a
command runs.
"""

from __future__ import annotations

from pathlib import Path

from sim.errors import InputError


def calibrate_engine(args) -> int:
    """Measure the engine on this device; write the profile to ``--out`` (default
    ``profile-MODEL-DEVICE.json``)."""
    from engine.cli import require_torch

    require_torch()
    args.model = args.model or "tiny-llama-12m"
    from calibration.calibrate import Options, calibrate
    from calibration.command_io import check_profile_out, positive, write_profile
    from calibration.grid import grid_for
    from sim.cli.console import console
    from sim.scenario.specs import get_model

    for name in ("repeats", "step_plans", "max_tokens", "max_seqs", "max_context", "threads"):
        positive(f"--{name.replace('_', '-')}", getattr(args, name))
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
    path = check_profile_out(args.out or f"profile-{spec.name}-{args.device}.json")
    profile = calibrate(opts, grid)
    write_profile(profile, path)
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


def validate_engine(args, scenario, source: str, out: Path, bounds: dict[str, float]) -> int:
    """Run ``scenario`` on the engine and simulate it with ``--profile``; write and judge."""
    from engine.cli import engine_setup, require_torch

    require_torch()
    from calibration.command_io import record_validation, report_validation, write_validation
    from calibration.validate import validate
    from sim.cli.console import console

    v = validate(scenario, args.profile, engine_setup(args), source,
                 log=lambda m: console.print(m), idle=args.idle, cost_mode=args.cost_mode,
                 repeats=args.repeats)
    import pandas as pd

    steps = pd.concat([v.real.steps.assign(run="real"), v.sim.steps.assign(run="sim")],
                      ignore_index=True)
    write_validation(v, out, steps)
    record_validation(v, args.profile, f"servesim's engine on {args.device}", console)
    return report_validation(v, out, "validation.json, report.html, requests.csv, steps.csv", bounds,
                             console)
