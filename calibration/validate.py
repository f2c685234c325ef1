"""``servesim validate``: run a scenario on the engine and simulate it with a profile; compare.

The engine run pins the scenario to the engine's KV block count, and the simulation runs that
pinned scenario with ``cost: {model: profile, profile: FILE}``, so both schedule alike and only
the clock differs. Requests are joined by id; each metric's error is
``|sim − real| / real`` per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from calibration.compare import breakdown, diagnose, error_stats, join, spread, step_errors, summary_diff
from calibration.realtime import EngineRuns, StepRecorder
from sim.errors import InputError, ProfileError
from sim.loops.run import RunResult, simulate
from sim.pricing.profile import Profile, load_profile
from sim.results.jsonsafe import json_safe as _clean
from sim.scenario.load import apply_overrides, scenario_from_dict
from sim.scenario.schema import Scenario


@dataclass
class Validation:
    real: RunResult
    sim: RunResult
    joined: pd.DataFrame  # one row per request finished in both runs
    errors: dict[str, dict[str, float]]  # metric -> median / p90 / max / bias
    summary: dict[str, dict[str, float]]  # summary key -> real / sim / diff / rel_diff
    steps: dict[str, float]  # the cost model on the engine's own steps
    warnings: list[str] = field(default_factory=list)
    profile: Profile | None = None
    machine: dict[str, float] = field(default_factory=dict)  # probe timings: speed drift
    adjusted: dict[str, dict[str, float]] = field(default_factory=dict)  # errors, drift removed
    repeat: RunResult | None = None  # a second measured run of the same requests
    errors_repeat: dict[str, dict[str, float]] = field(default_factory=dict)  # sim vs the 2nd run
    spread: dict[str, dict[str, float]] = field(default_factory=dict)  # 2nd run vs the 1st
    breakdown: dict[str, dict[str, float]] = field(default_factory=dict)  # stage -> real / sim
    diagnosis: list[str] = field(default_factory=list)  # which part of the prediction is off
    context: dict = field(default_factory=dict)  # what else the run knows (endpoint, client)

    def to_json(self) -> dict:
        p = self.profile
        return _clean({
            "scenario": self.real.scenario.name,
            "requests": {"real": len(self.real.requests), "sim": len(self.sim.requests),
                         "joined": len(self.joined)},
            "errors": self.errors, "summary": self.summary, "steps": self.steps,
            "machine": self.machine, "errors_speed_adjusted": self.adjusted,
            "errors_vs_repeat": self.errors_repeat, "run_to_run_spread": self.spread,
            "breakdown": self.breakdown, "diagnosis": self.diagnosis, **self.context,
            "profile": None if p is None else {"model": p.model, "device": p.device.model_dump(),
                                               "dtype": p.dtype, "created": p.created,
                                               "source": p.source},
            "warnings": self.warnings,
        })


def metric_figures(j: dict) -> dict[str, float | None]:
    """A validation.json's per-metric figures as a benchmark table shows them: for E2E, TTFT and
    TPOT, the median error and bias, the second measured run's error and the runs' spread, and
    the error adjusted for the machine's drift."""
    row: dict[str, float | None] = {}
    for m in ("e2e", "ttft", "tpot"):
        row[f"{m}_error"] = j["errors"][m]["median"]
        row[f"{m}_bias"] = j["errors"][m]["bias"]
        row[f"{m}_spread"] = (j["run_to_run_spread"].get(m) or {}).get("median")
        row[f"{m}_adjusted"] = (j["errors_speed_adjusted"].get(m) or {}).get("median")
        row[f"{m}_error_vs_run2"] = (j["errors_vs_repeat"].get(m) or {}).get("median")
    return row


def check_profile(profile: Profile, path: str, device: str, dtype: str, threads: int | None,
                  device_name: str) -> list[str]:
    """Errors for a profile of another kind of device; warnings for a different one."""
    if profile.device.type != device and not (profile.device.type == "gpu" and device == "cuda"):
        raise ProfileError(path, "device.type",
                           f"profile measured on {profile.device.type} ({profile.device.name}), "
                           f"validating on {device}: calibrate on this device first")
    out = []
    if profile.device.name != device_name:
        out.append(f"profile measured on {profile.device.name!r}, running on {device_name!r}")
    if profile.dtype != dtype:
        out.append(f"profile measured in {profile.dtype}, the engine runs {dtype}")
    measured = profile.grid.get("threads")
    if device == "cpu" and measured is not None and threads is not None and measured != threads:
        out.append(f"profile measured with {measured} torch thread(s), the engine uses {threads}")
    return out


def simulated_scenario(pinned: Scenario, profile_path: str | Path, source: str) -> Scenario:
    """The engine-pinned scenario, priced by the profile."""
    data = pinned.model_dump(mode="json", exclude={"base_dir"})
    data = apply_overrides(data, ["cost.model=profile",
                                  f"cost.profile={Path(profile_path).resolve()}"], source)
    return scenario_from_dict(data, source, pinned.base_dir)


def simulate_with(scenario: Scenario, mode: str = "auto", speed: float = 1.0) -> RunResult:
    """Simulate with the scenario's profile; ``mode`` forces the step fit or the per-op model;
    ``speed`` scales every step (the machine's drift since calibration)."""
    if mode == "auto" and speed == 1.0:
        return simulate(scenario)
    from sim.pricing import make_cost_model
    from sim.pricing.profiled import ProfiledCost

    base = make_cost_model(scenario)
    if mode == "step" and base.profile.step is None:
        raise ProfileError(str(scenario.cost.profile), "step", "the profile has no whole-step fit")
    cost = ProfiledCost(base.profile, base.roofline, mode=mode)
    return simulate(scenario, cost=cost, scale=speed)


def validate(scenario: Scenario, profile_path: str | Path, setup, source: str = "<scenario>",
             log=None, idle: str = "sleep", cost_mode: str = "auto", repeats: int = 1,
             engine: EngineRuns | None = None) -> Validation:
    """Execute ``scenario`` on the engine, simulate it with the profile, compare.

    ``idle``: how the engine run waits for arrivals (``sleep`` as ``servesim execute`` does,
    or ``spin``); ``cost_mode``: the profile's step fit, per-op model, or its default;
    ``repeats``: engine runs (a second one gives the measurement's run-to-run spread);
    ``engine``: what loads and runs it (default: the engine of ``setup``, in real time)."""
    from calibration.calibrate import device_name
    from calibration.probe import probe
    from engine.plan_timer import PlanTimer
    from sim.pricing import make_cost_model
    from sim.pricing.profiled import ProfiledCost

    path = str(profile_path)
    profile = load_profile(path, "--profile")
    if setup.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError("--device", None, "cuda requested but no CUDA device is available")
    warnings = check_profile(profile, path, setup.device, setup.torch_dtype(scenario),
                             setup.threads, device_name(setup.device))
    make_cost_model(simulated_scenario(scenario, path, source))  # the model matches? (fails fast)
    engine = engine or EngineRuns(setup, idle)
    pinned, executor = engine.prepare(scenario, source)
    sim_scenario = simulated_scenario(pinned, path, source)
    cost = make_cost_model(sim_scenario)
    if cost_mode != "auto":
        cost = ProfiledCost(cost.profile, cost.roofline, mode=cost_mode)
    if profile.model != scenario.model_spec.name:
        warnings.append(f"profile measured {profile.model}, the scenario runs {scenario.model_spec.name}")
    harness = PlanTimer(executor)
    settle = int(profile.grid.get("settle", 1))  # the probe timed as calibration timed it
    before = probe(harness, settle=settle)
    recorder = StepRecorder(executor)
    if log:
        log(f"executing {scenario.workload.num_requests or ''} requests on the engine "
            f"({setup.device}) ...")
    real = engine.run(pinned, recorder, source)
    again_real = None
    if repeats > 1:
        if log:
            log("executing it again (the run-to-run spread) ...")
        executor.reset()  # the first run's last finished requests still hold their rows and KV blocks
        again_real = engine.run(pinned, StepRecorder(executor), source)
    if log:
        log("simulating with the profile ...")
    sim = simulate_with(sim_scenario, cost_mode)
    machine = machine_drift(profile, before, probe(harness, settle=settle))
    wake = profile.grid.get("wake_penalty", 0.0)
    if idle == "sleep" and wake > 0.1:
        warnings.append(f"on this machine a step right after the engine sleeps runs {wake:.0%} "
                        "slower (measured at calibration), which the simulator does not model: "
                        "requests arriving at an idle engine get a longer TTFT for real "
                        "(--idle spin keeps the engine's core)")
    ratio = machine.get("speed_ratio", 1.0)
    if abs(ratio - 1) > 0.1:
        warnings.append(f"this machine ran the probe steps {abs(ratio - 1):.0%} "
                        f"{'slower' if ratio > 1 else 'faster'} than during calibration: part "
                        "of the error is the machine, not the model")
    joined = join(real.requests, sim.requests)
    adjusted = {}
    if "speed_ratio" in machine:  # the same, on a machine as fast as it is now
        again = simulate_with(sim_scenario, cost_mode, machine["speed_ratio"])
        adjusted = error_stats(join(real.requests, again.requests))
    steps, pred = step_errors(cost, recorder.shapes, real.steps["duration"].to_numpy())
    if len(pred) == len(real.steps):
        real.steps["predicted"] = pred
    warnings += [f"simulation: {w}" for w in sim.warnings]
    warnings += [f"engine run: {w}" for w in real.warnings]
    errors = error_stats(joined)
    spread_ = spread(real.requests, again_real.requests) if again_real is not None else {}
    vs_repeat = error_stats(join(again_real.requests, sim.requests)) if again_real is not None else {}
    stages = breakdown(stage_means(real.requests), stage_means(sim.requests))
    return Validation(real, sim, joined, errors, summary_diff(real.summary, sim.summary), steps, warnings,
                      profile, machine, adjusted, again_real, vs_repeat, spread_, stages,
                      diagnose(errors, spread_, stages))


def stage_means(requests: pd.DataFrame) -> dict[str, float]:
    """Mean seconds per finished request waiting (arrival → first scheduled), in prefill
    (→ first token), decoding (→ last token), and end to end."""
    fin = requests[requests["status"] == "finished"]
    return {"wait_s": float(fin["queueing_delay"].mean()),
            "prefill_s": float((fin["first_token"] - fin["first_scheduled"]).mean()),
            "decode_s": float((fin["completion"] - fin["first_token"]).mean()),
            "e2e_s": float(fin["e2e"].mean())}


def machine_drift(profile: Profile, before: float, after: float) -> dict[str, float]:
    """Probe seconds now against calibration's (> 1: this machine is slower now)."""
    out = {"probe_before_s": before, "probe_after_s": after}
    calibrated = profile.grid.get("probe_s")
    if calibrated:
        out["probe_calibration_s"] = float(calibrated)
        out["speed_ratio"] = (before + after) / 2 / float(calibrated)
    return out


