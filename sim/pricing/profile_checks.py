"""Checks that a calibration profile was measured on what the scenario simulates (its fits
are checked on load: ``sim.pricing.profile.check_fits``).

``check_against`` (when a scenario uses the profile): the GPU, model, dtype and engine the
profile was measured on must be the scenario's. A mismatch is refused (``ProfileError``, exit 2)
naming both, unless the user allowed it (``--allow-profile-mismatch``: then it is a warning).
A GPU is compared where the profile names one of the catalog's (a CPU's or an endpoint's profile
does not); an engine where the profile records one.
"""

from __future__ import annotations

import contextlib
import os
import sys

from sim.errors import ProfileError
from sim.pricing.profile import Profile

ALLOW_ENV = "SERVESIM_ALLOW_PROFILE_MISMATCH"  # "1": a mismatch is a warning (set by the CLI flag)
_WIDTH = {"fp32": "fp32", "bf16": "16-bit", "fp16": "16-bit", "fp8": "fp8", "int8": "int8", "int4": "int4"}
_warned: set[str] = set()


def allow_mismatch() -> None:
    """Make a mismatch a warning in this process and the processes it starts."""
    os.environ[ALLOW_ENV] = "1"


def mismatch_allowed() -> bool:
    return os.environ.get(ALLOW_ENV) == "1"


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
