"""``servesim calibrate``: measure the engine on this device and write a profile.

1. load the engine (random weights unless given), warm it up;
2. the serving loop's own per-step cost, from a short real-time run (``calibration.loop``);
3. the per-op grid, timed inside the engine's forward (``calibration.ops``), and whole steps
   on varied plans, fitted to the plan's features (``calibration.steps``), in one set of
   shuffled rounds; the per-op model rescaled to the whole steps (``calibration.select``);
4. a :class:`Profile` with the device, dtype, model, versions, grid and date.
"""

from __future__ import annotations

import datetime as dt
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from calibration import select
from calibration.grid import Grid, grid_for
from calibration.loop import loop_overhead
from calibration.measure import make_timer, measure, noise_factor
from calibration.ops import build_ops, points
from calibration.probe import probe, wake_penalty
from calibration.progress import Ticker, ticker
from calibration.steps import fit_steps, step_plans
from engine.plan_timer import PlanTimer
from sim.pricing.profile import SCHEMA_VERSION, Device, Ops, Profile
from sim.scenario.specs import ModelSpec, get_model

CPU_KV_BYTES = 256 * 1024**2


@dataclass(frozen=True)
class Options:
    model: str = "tiny-llama-12m"
    device: str = "cpu"
    dtype: str | None = None  # default: fp32 on the CPU, the model's dtype on CUDA
    threads: int | None = 1
    weights: str | None = None
    quick: bool = False
    ops: bool = True
    step: bool = True
    loop: bool = True  # measure the serving loop's per-step cost
    seed: int = 0
    progress: bool = True


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name(0)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def versions() -> dict[str, str]:
    import numpy
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "numpy": numpy.__version__}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = "none"
    try:
        from importlib.metadata import version

        out["servesim"] = version("servesim")
    except Exception:
        pass
    return out


@dataclass
class Target:
    """What calibration measures: an executor, its model and dtype, the per-op timer hooked
    into its steps, and ``drive(scenario, executor)``: a serving-loop run of a scenario on it
    (``servesim execute``'s, in real time). Tests give a stand-in whose step times are given."""

    executor: Any
    spec: ModelSpec
    dtype: str
    op_timer: Any
    drive: Callable[[Any, Any], Any]


def load_engine(opts: Options) -> Target:
    from engine.executor import EngineExecutor

    spec = get_model(opts.model)
    dtype = opts.dtype or ("fp32" if opts.device == "cpu" else spec.dtype)
    kv = CPU_KV_BYTES if opts.device == "cpu" else None
    executor = EngineExecutor.load(opts.weights or spec, dtype=dtype, device=opts.device,
                                   seed=opts.seed, kv_memory_bytes=kv, keep_tokens=False,
                                   num_threads=opts.threads if opts.device == "cpu" else None)
    return Target(executor, executor.spec, dtype, make_timer(opts.device), run_in_real_time)


def run_in_real_time(scenario, executor):
    """``servesim execute`` of ``scenario`` on a loaded, warm ``executor``."""
    from engine.execute import EngineSetup, execute

    return execute(scenario, EngineSetup(warmup=False), prepared=(scenario, executor))


def _scenario_model(spec: ModelSpec, weights: str | None):
    """How a scenario names the engine's model: a catalog name, or the weights' config."""
    try:
        get_model(spec.name)
        return spec.name
    except KeyError:
        if weights and Path(weights).is_dir():
            return {"hf_config": weights, "name": spec.name}
        return None


def calibrate(opts: Options, grid: Grid | None = None, target: Target | None = None) -> Profile:
    """Measure and fit; returns the profile (not yet written). ``target``: what to measure
    (default: the engine ``opts`` describes, loaded)."""
    if opts.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            from sim.errors import InputError

            raise InputError("--device", None, "cuda requested but no CUDA device is available")
    if not (opts.ops or opts.step):
        raise ValueError("nothing to measure: enable the per-op grid or the whole-step fit")
    target = target or load_engine(opts)
    grid = (grid or grid_for(opts.device, opts.quick)).clipped(target.spec.max_model_len)
    target.executor.warmup()
    with ticker(opts.progress) as tick:
        profile = _measure(opts, grid, target, PlanTimer(target.executor), tick)
    return profile


def _measure(opts: Options, grid: Grid, target: Target, harness: PlanTimer, tick: Ticker) -> Profile:
    executor, spec, dtype = target.executor, target.spec, target.dtype
    notes: list[str] = []
    stats: dict = {}
    fixed = per_seq = 0.0
    probes = [probe(harness, settle=grid.settle)]
    model_ref = _scenario_model(spec, opts.weights)
    if opts.loop and model_ref is not None:
        fixed, per_seq, stats["loop"] = loop_overhead(executor, model_ref, grid, tick, target.drive)
        executor.reset()
    elif opts.loop:
        notes.append("serving-loop overhead not measured (the model has no scenario name)")
    ops, step = None, None
    pts = points(grid, harness) if opts.ops else None
    op_plans = pts.all() if pts else []
    st_plans = step_plans(harness, grid) if opts.step else []
    # One set of shuffled rounds for both, so that a machine that drifts meanwhile drifts
    # under the per-op grid and the whole steps alike.
    tick.stage("per-op grid + whole steps", (len(op_plans) + len(st_plans)) * grid.repeats)
    measured = measure(harness, op_plans + st_plans, repeats=grid.repeats, warmup=grid.warmup, settle=grid.settle,
                       ticker=tick, timer=target.op_timer if op_plans else None,
                       timed=[True] * len(op_plans) + [False] * len(st_plans), seed=grid.seed)
    samples, step_samples = measured[: len(op_plans)], measured[len(op_plans):]
    if opts.ops:
        ops, stats["ops"] = build_ops(pts, samples)
    if opts.step:
        step, stats["step"] = fit_steps(samples + step_samples, per_seq)
    if ops is not None and step_samples:
        stats["ops_raw_on_steps"] = select.errors(ops, step_samples, spec)
        alpha, beta = select.fit_scale(ops, samples + step_samples, spec)
        ops = select.rescale(ops, alpha, beta)
        stats["ops_scale"] = {"alpha": alpha, "beta_s": beta}
        stats["ops_on_steps"] = select.errors(ops, step_samples, spec)
    # Medians keep a disturbed run from bending the fits; the serving loop pays the mean.
    kappa = stats["noise_factor"] = noise_factor(samples + step_samples)
    if ops is not None:
        ops = select.rescale(ops, kappa, 0.0)
    if step is not None:
        step = step.model_copy(update={"coef": [kappa * c for c in step.coef]})
    if ops is not None and per_seq:
        ops = _add_row_cost(ops, per_seq)
    probes.append(probe(harness, settle=grid.settle))
    wake = wake_penalty(harness)
    if wake > 0.05:
        notes.append(f"a step right after the engine sleeps 20 ms runs {wake:.0%} slower here "
                     "(the machine's other processes take the core); the profile times steps "
                     "back to back")
    if ops is None:  # the schema needs a linear table: derive one from the step fit's token term
        ops = _ops_from_step(step, grid)
        notes.append("no per-op grid measured: ops.linear is the step fit's token term; "
                     "other ops fall back to the roofline")
    notes.append("times are executor.run wall seconds (input preparation, forward, sampling); "
                 "overhead_s and the per-row loop cost (in the num_seqs/row terms) come from "
                 "the serving loop around it")
    if opts.device == "cpu":
        notes.append(f"CPU, {opts.threads} torch thread(s); attention is the per-sequence "
                     "PyTorch reference, so per-row costs are large")
    prefer = select.choose(stats) if opts.ops and step is not None else None
    if prefer:
        notes.append(f"prefer: {prefer} (the model with the smaller error on whole steps)")
    notes.append(f"step times are medians of {grid.repeats} runs scaled by {kappa:.3f}, the mean "
                 "run's ratio to its median on this machine (the loop pays the mean)")
    if "ops_scale" in stats:
        notes.append("per-op model rescaled to whole steps: t = α·t_ops + β with "
                     f"α = {stats['ops_scale']['alpha']:.3f}, β = {stats['ops_scale']['beta_s'] * 1e3:.2f} ms "
                     "(β in ops.other)")
    return Profile(
        schema_version=SCHEMA_VERSION, source="servesim calibrate (engine)", prefer=prefer,
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        device=Device(name=device_name(opts.device), type=opts.device), model=spec.name,
        model_shape=shape_dict(spec), dtype=dtype, tp=1, versions=versions(),
        grid={**grid.to_json(), "threads": opts.threads, "block_size": executor.block_size,
              "kv_blocks": executor.num_blocks, "fit": stats,
              "probe_s": float(np.mean(probes)), "probe_drift": float(probes[1] / probes[0] - 1),
              "wake_penalty": wake},
        ops=ops, step=step, overhead_s=fixed, notes=notes)


def shape_dict(spec: ModelSpec) -> dict[str, int]:
    return {"num_layers": spec.num_layers, "hidden_size": spec.hidden_size,
            "num_heads": spec.num_heads, "num_kv_heads": spec.num_kv_heads,
            "intermediate_size": spec.intermediate_size, "vocab_size": spec.vocab_size}


def _add_row_cost(ops: Ops, per_row: float) -> Ops:
    def bump(fit, feature):
        if fit is None:
            return None
        coef = [c + per_row if f == feature else c for f, c in zip(fit.features, fit.coef, strict=True)]
        return fit.model_copy(update={"coef": coef})

    return ops.model_copy(update={"attn_prefill": bump(ops.attn_prefill, "prefill_rows"),
                                  "attn_decode": bump(ops.attn_decode, "decode_rows")})


def _ops_from_step(step, grid: Grid) -> Ops:
    from sim.pricing.profile import Table

    coef = dict(zip(step.features, step.coef, strict=True))
    top = float(max(grid.max_tokens, 2))
    return Ops(linear=Table(x=[1.0, top], seconds=[coef.get("num_tokens", 0.0) * 1,
                                                   coef.get("num_tokens", 0.0) * top]))
