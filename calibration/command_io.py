"""What the calibration commands share, on the engine and against a server alike: option
checks, the profile's file (checked before measuring, written atomically) and a validation's
folder, table and verdict.

No torch and no HTTP here: both sides import this module, and it imports neither side.
"""

from __future__ import annotations

import json
from pathlib import Path

VALIDATION_FILES = ("validation.json", "requests.csv", "steps.csv", "report.html")


def positive(name: str, value) -> None:
    from sim.errors import InputError

    if value is not None and value < 1:
        raise InputError(name, None, f"expected a positive number, got {value}")


def check_profile_out(out: str) -> Path:
    """Before measuring: the profile can be written at ``out`` (a file, in a writable folder)."""
    from sim.errors import OutputError
    from sim.results.atomic import check_out_dir

    path = Path(out).expanduser()
    if path.is_dir():
        raise OutputError(str(path), "--out", "is a folder; expected the profile's file name "
                          "(e.g. profile.json)")
    check_out_dir(path.parent, "--out")
    return path


def write_profile(profile, path: Path) -> Path:
    """Save the profile under a temporary name, then rename it into place."""
    from sim.pricing.profile import save_profile
    from sim.results.atomic import Staging

    with Staging(path.parent) as st:
        save_profile(profile, st.file(path.name))
    return path


def check_validation_out(out: str) -> Path:
    """Before measuring: the validation's folder can be written (none of its files a folder)."""
    from sim.results.atomic import check_out_dir

    return check_out_dir(out, "--out", VALIDATION_FILES)


def write_validation(v, out: str | Path, steps=None) -> Path:
    """``validation.json``, ``requests.csv``, ``report.html`` and, given the steps of both runs,
    ``steps.csv``, renamed into ``out`` together (another validation's ``steps.csv`` is removed
    when there are none)."""
    from calibration.report import write_report
    from sim.results.atomic import Staging

    out = Path(out)
    with Staging(out) as st:
        st.file("validation.json").write_text(json.dumps(v.to_json(), indent=2))
        v.joined.to_csv(st.file("requests.csv"), index=False)
        if steps is not None:
            steps.to_csv(st.file("steps.csv"), index=False)
        else:
            st.remove("steps.csv")
        write_report(v, st.file("report.html"))
    return out


def validation_record(v, against: str):
    """What the profile keeps of a validation (``sim.pricing.trust`` shows it as the error band of
    every run priced by the profile): the median per-request error of TTFT, TPOT and E2E and the
    run's output-throughput error, with their signed medians."""
    import math
    from datetime import datetime, timezone

    from sim.pricing.profile import ValidationRecord

    errors, bias = {}, {}
    for m, e in v.errors.items():
        if e.get("n") and math.isfinite(e["median"]):
            errors[m], bias[m] = float(e["median"]), float(e["bias"])
    thr = v.summary.get("output_token_throughput", {}).get("rel_diff", math.nan)
    if math.isfinite(thr):
        errors["throughput"], bias["throughput"] = abs(float(thr)), float(thr)
    return ValidationRecord(created=datetime.now(timezone.utc).isoformat(timespec="seconds"), against=against,
                            scenario=v.real.scenario.name, requests=len(v.joined), errors=errors, bias=bias)


def record_validation(v, profile_path: str | Path, against: str, console) -> None:
    """Write the validation into the profile's ``validation`` field (replacing an earlier one);
    a profile that cannot be written is left as it was, with a warning (the validation's own
    files are already written)."""
    from sim.errors import InputError
    from sim.pricing.profile import load_profile

    path = Path(profile_path)
    if not len(v.joined):
        console.print(f"[yellow]warning:[/] no request finished in both runs: nothing recorded in {path}")
        return
    try:
        profile = load_profile(path, "--profile").model_copy(update={"validation": validation_record(v, against)})
        write_profile(profile, path)
    except (OSError, InputError) as e:
        console.print(f"[yellow]warning:[/] the validation is not recorded in the profile {path}: {e}")
        return
    console.print(f"recorded in {path} (its validation: the error band of runs priced by it)")


def report_validation(v, out: Path, files: str, bounds: dict[str, float], console) -> int:
    """Print the validation and its verdict; 1 when an error exceeds its bound, else 0."""
    from calibration.compare import bounds_exceeded

    print_validation(v, console)
    for d in v.diagnosis:
        console.print(f"  {d}")
    console.print(f"results in {Path(out).resolve()} ({files})")
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
