"""Checks of a calibration profile: that what prices a step can price it, and that it was
measured on what the scenario simulates.

``check_fits`` (on load): the fit or tables the profile prices with must give a plausible time
over their measured range. A least-squares fit whose negative coefficients cancel most of a
step's time (pricing clamps at 0 s), or whose coefficients are all zero, would make steps nearly
free without a word; a table whose times fall steeply as the size grows is not a measurement of
one operation.

``check_against`` (when a scenario uses the profile): the GPU, model, dtype and engine the
profile was measured on must be the scenario's. A mismatch is refused (``ProfileError``, exit 2)
naming both, unless the user allowed it (``--allow-profile-mismatch``: then it is a warning).
A GPU is compared where the profile names one of the catalog's (a CPU's or an endpoint's profile
does not); an engine where the profile records one.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys

from sim.errors import ProfileError
from sim.pricing.profile import FLOOR, LinearFit, Profile, Table

ALLOW_ENV = "SERVESIM_ALLOW_PROFILE_MISMATCH"  # "1": a mismatch is a warning (set by the CLI flag)
DROP = 0.5  # a table's time may dip with noise, not fall below this share of an earlier one
CANCEL = 0.5  # a fit's negative terms may take off at most this share of its positive ones
_WIDTH = {"fp32": "fp32", "bf16": "16-bit", "fp16": "16-bit", "fp8": "fp8", "int8": "int8", "int4": "int4"}
_warned: set[str] = set()


def allow_mismatch() -> None:
    """Make a mismatch a warning in this process and the processes it starts."""
    os.environ[ALLOW_ENV] = "1"


def mismatch_allowed() -> bool:
    return os.environ.get(ALLOW_ENV) == "1"


def fit_range(fit: LinearFit) -> tuple[float, float, float, float]:
    """Over the fit's measured ranges (a feature without a range: from 0 to unbounded), the least
    and the most seconds it gives (a ``floor`` raises the sum so far, as in pricing), and, where it
    gives the least, what its positive and its negative terms add up to."""
    lo = hi = pos = neg = 0.0
    for feature, coef in zip(fit.features, fit.coef, strict=True):
        if feature == FLOOR:
            lo, hi = max(lo, coef), max(hi, coef)
            continue
        a, b = (1.0, 1.0) if feature == "const" else fit.ranges.get(feature, (0.0, math.inf))
        ends = (coef * a, coef * b if coef else 0.0)
        least = min(ends)
        lo, hi = lo + least, hi + max(ends)
        pos, neg = (pos + least, neg) if least >= 0 else (pos, neg - least)
    return lo, hi, pos, neg


def _fit_problem(name: str, fit: LinearFit) -> str | None:
    for feature, coef in zip(fit.features, fit.coef, strict=True):
        if coef < 0 and feature not in fit.ranges and feature not in ("const", FLOOR):
            return (f"{name} fit: the coefficient of {feature} is negative ({coef:g}) and the profile records no "
                    f"measured range for it, so its steps could cost nothing; refit with non-negative coefficients")
    lo, hi, pos, neg = fit_range(fit)
    if hi <= 0:
        return (f"{name} fit: every coefficient is zero or negative ({fit.coef}): a step would take no time; "
                "the measurements behind it are missing or broken")
    if neg > CANCEL * pos:
        negative = ", ".join(f"{f} {c:g}" for f, c in zip(fit.features, fit.coef, strict=True) if c < 0)
        return (f"{name} fit: negative coefficients ({negative}) make it predict {max(lo, 0):.3g} s within its "
                f"measured ranges, cancelling {neg / pos if pos else 1:.0%} of the step's time (at most "
                f"{CANCEL:.0%} is plausible); refit with non-negative coefficients")
    return None


def _table_problem(name: str, table: Table) -> str | None:
    secs = table.seconds
    if max(secs) <= 0:
        return f"{name}: every time is 0 s; the measurements behind it are missing"
    top, at = secs[0], table.x[0]
    for x, s in zip(table.x, secs, strict=True):
        if s < DROP * top:
            return (f"{name}: the time falls from {top:.3g} s at {at:g} to {s:.3g} s at {x:g}: not monotone in "
                    "the size; re-measure (a larger step cannot take less than half the time of a smaller one)")
        if s > top:
            top, at = s, x
    return None


def check_fits(profile: Profile, path: str, mode: str | None = None) -> None:
    """Refuse (``ProfileError`` naming the field) a profile whose pricing model, the step fit or
    the per-operation tables and fits (``mode``; default: the one it prices with), cannot give
    a positive step time over its measured range."""
    mode = mode or profile.prefer or ("step" if profile.step is not None else "ops")
    if mode == "step" and profile.step is not None:
        why = _fit_problem("step", profile.step)
        if why:
            raise ProfileError(path, "step.coef", why)
        return
    ops = profile.ops
    for name in ("linear", "other", "lm_head", "allreduce"):
        table = getattr(ops, name)
        why = table and _table_problem(name, table)
        if why:
            raise ProfileError(path, f"ops.{name}.seconds", why)
    for name in ("attn_prefill", "attn_decode"):
        fit = getattr(ops, name)
        why = fit and _fit_problem(name, fit)
        if why:
            raise ProfileError(path, f"ops.{name}.coef", why)


def _gpu(name: str) -> str | None:
    from sim.scenario.specs import get_gpu

    try:
        return get_gpu(name).name
    except KeyError:
        return None


def mismatches(profile: Profile, scenario, replica=None) -> list[tuple[str, str]]:
    """(field, what differs) for each way the profile's measurement differs from what
    ``scenario`` (its replica group ``replica``) simulates."""
    out = []
    hw = (replica or scenario.replica_specs[0]).hardware
    measured_gpu = _gpu(profile.device.name) if profile.device.type in ("cuda", "gpu") else None
    if measured_gpu is not None and measured_gpu != _gpu(hw.gpu):
        out.append(("device.name", f"measured on {measured_gpu}, the scenario simulates {hw.gpu}"))
    m = scenario.model_spec
    if profile.model.lower() != m.name.lower():
        out.append(("model", f"measured {profile.model}, the scenario simulates {m.name}"))
    q = scenario.quantization
    for what, dtype in (("weights", q.weights or m.dtype), ("KV cache", q.kv_cache)):
        if dtype and _WIDTH.get(dtype, dtype) != _WIDTH.get(profile.dtype, profile.dtype):
            out.append(("dtype", f"measured in {profile.dtype}, the scenario's {what} are {dtype}"))
    if profile.engine and profile.engine != scenario.engine.name:
        out.append(("engine", f"measured on {profile.engine}, the scenario simulates {scenario.engine.name}"))
    return out


def check_against(profile: Profile, scenario, path: str, replica=None) -> None:
    """Refuse a profile measured on another GPU, model, dtype or engine than the scenario's (a
    warning on stderr instead when ``--allow-profile-mismatch`` was given)."""
    m = scenario.model_spec
    expected = {"num_layers": m.num_layers, "hidden_size": m.hidden_size, "num_heads": m.num_heads,
                "num_kv_heads": m.num_kv_heads, "intermediate_size": m.intermediate_size}
    wrong = {k: (v, profile.model_shape.get(k)) for k, v in expected.items()
             if k in profile.model_shape and profile.model_shape[k] != v}
    if wrong:  # another shape cannot be priced at all
        detail = ", ".join(f"{k} {got} (scenario's {m.name}: {want})" for k, (want, got) in wrong.items())
        raise ProfileError(path, "model_shape", f"profile measured {profile.model}, whose shape differs: {detail}")
    hw = (replica or scenario.replica_specs[0]).hardware
    if profile.tp != hw.tp:
        raise ProfileError(path, "tp", f"profile measured at tp={profile.tp}, scenario uses tp={hw.tp}")
    found = mismatches(profile, scenario, replica)
    if not found:
        return
    what = "; ".join(text for _, text in found)
    if not mismatch_allowed():
        raise ProfileError(path, found[0][0], f"{what}: its timings do not describe this scenario. Use a profile "
                           "measured on the scenario's setup, or pass --allow-profile-mismatch to price with it anyway")
    line = f"warning: {path}: {what} (priced anyway: --allow-profile-mismatch)"
    if line not in _warned:
        _warned.add(line)
        with contextlib.suppress(OSError, ValueError):
            print(line, file=sys.stderr, flush=True)


def check_scenario(scenario) -> None:
    """Before a run: load the scenario's profile (checking its fits) and check it against every
    replica group (``check_against``); nothing to do for the roofline."""
    if scenario.cost.model != "profile":
        return
    from sim.pricing.profile import load_profile

    path = scenario.resolve(scenario.cost.profile)
    profile = load_profile(path)
    for replica in scenario.replica_specs:
        check_against(profile, scenario, str(path), replica)
