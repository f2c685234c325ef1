#!/usr/bin/env python3
"""Fit the roofline's shared constants on the FIT half of the published benchmark.

The constants are per GPU architecture (GEMM efficiency curve per math dtype, HBM share, attention
kernels), per interconnect (collective latency) and per engine (runtime overheads): never per case.
Each lies in a physically plausible range (the bounds below, from public kernel measurements).
The loss is the mean over the fit half of min(|log(predicted / published)|, log 1.35): a robust
loss, so that cases no shared constant can reach (an engine version's own regressions, say) do
not drag the constants away from the cases they can fit. The held-out half is not looked at.
Coordinate descent in log space: each constant moves only the cases that depend on it, so a move
is scored on those cases alone (the others' errors do not change). The result is written
to sim/scenario/data/calibrated.yaml with a record of what was fitted.

    python benchmarks/published_fit.py            # fit and write
    python benchmarks/published_fit.py --dry-run  # fit and print, write nothing
    python benchmarks/published_fit.py --bound    # fit on every case, held-out ones too: what the
                                                  # structure reaches at best (a diagnostic; writes nothing)
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import json
import math
import multiprocessing
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import published as bench

from sim.scenario.engines import overheads_of
from sim.scenario.specs import efficiency, get_gpu
from sim.scenario.specs.gpus import LINKS

OUT = bench.ROOT / "sim" / "scenario" / "data" / "calibrated.yaml"
CAP = math.log(1.35)  # a case's loss stops growing beyond 35% off
MISS = CAP  # a case that could not run


@dataclass
class Param:
    path: tuple
    lo: float
    hi: float
    depends: Callable[[bench.Case], bool]
    additive: bool = False  # may be 0: steps are added, not multiplied

    @property
    def name(self) -> str:
        return ".".join(str(p) for p in self.path)


def _arch(case: bench.Case) -> str:
    return get_gpu(case.gpu).arch


def _link(case: bench.Case) -> str:
    return get_gpu(case.gpu).interconnect


@functools.cache
def _model_classes(model: str, gpu: str, weights: str | None) -> frozenset[str]:
    from sim.scenario.specs import get_model
    from sim.scenario.specs.models import WEIGHT_GROUPS, math_dtype

    m, g = get_model(model), get_gpu(gpu)
    return frozenset(efficiency.math_class(g, math_dtype(m.dtype_of(group, weights))) for group in WEIGHT_GROUPS)


@functools.cache
def _moe_model(model: str) -> bool:
    from sim.scenario.specs import get_model

    return get_model(model).is_moe


def _is_moe(case: bench.Case) -> bool:
    return _moe_model(bench.scenario_dict(case)["model"])


def _classes(case: bench.Case) -> frozenset[str]:
    """The tensor-core classes the case's GEMMs run on (a checkpoint's groups may differ: gpt-oss's
    MXFP4 experts and bf16 attention)."""
    return _model_classes(bench.scenario_dict(case)["model"], case.gpu, case.weights)


def params_for(cases: list[bench.Case]) -> list[Param]:
    """The constants the fit half can inform: one set per architecture, link and engine it has."""
    out: list[Param] = []
    for arch in sorted({_arch(c) for c in cases}):
        on = lambda c, a=arch: _arch(c) == a  # noqa: E731
        # cuBLAS/CUTLASS reach 70–85% of the dense peak on large GEMMs; loads and math overlap 0–100%.
        out += [Param(("gpus", arch, "gemm_bf16", 0), 0.4, 0.9, on),
                Param(("gpus", arch, "gemm_bf16", 1), 0.0, 1.0, on, additive=True)]
        for cls in ("fp8", "fp4", "w4"):  # 8- and 4-bit tensor cores, 4-bit weights on 16-bit math
            runs = lambda c, a=arch, k=cls: _arch(c) == a and k in _classes(c)  # noqa: E731
            if any(runs(c) for c in cases):
                out += [Param(("gpus", arch, f"gemm_{cls}", 0), {"fp4": 0.3, "w4": 0.2}.get(cls, 0.4), 0.9, runs),
                        Param(("gpus", arch, f"gemm_{cls}", 1), 0.0, 1.0, runs, additive=True)]
        # Streaming kernels reach 60–92% of HBM bandwidth; FlashAttention-2/3 reach up to ~75% of peak.
        out += [Param(("gpus", arch, "hbm_fraction"), 0.6, 0.92, on),
                Param(("gpus", arch, "attn_prefill_fraction"), 0.2, 0.75, on),
                Param(("gpus", arch, "attn_decode_hbm_fraction"), 0.6, 0.95, on)]
        moe = lambda c, a=arch: _arch(c) == a and _is_moe(c)  # noqa: E731
        if any(moe(c) for c in cases):  # grouped expert GEMMs: a share of the dense plateau
            out += [Param(("gpus", arch, "moe_gemm_fraction"), 0.3, 1.0, moe)]
        out += [Param(("gpus", arch, "decode_row_s"), 1e-9, 5e-6, on)]
    for link in sorted({_link(c) for c in cases if c.tp > 1}):
        on = lambda c, lk=link: c.tp > 1 and _link(c) == lk  # noqa: E731
        out += [Param(("links", link, 0), 1e-7, 1e-4, on), Param(("links", link, 1), 1e-8, 5e-5, on)]
    for engine in sorted({c.engine for c in cases if overheads_of(c.engine) == c.engine}):
        on = lambda c, e=engine: c.engine == e  # noqa: E731
        out += [Param(("engines", engine, "step_overhead_s"), 1e-5, 0.03, on),
                Param(("engines", engine, "row_overhead_s"), 1e-8, 2e-4, on),
                Param(("engines", engine, "layer_latency_s"), 1e-7, 3e-4, on),
                Param(("engines", engine, "eager_layer_latency_s"), 1e-7, 3e-4, on),
                Param(("engines", engine, "decode_gqa_reread"), 0.0, 1.0, on, additive=True)]
        if any(on(c) and c.served for c in cases):  # its API server's time per request (TTFT, E2E)
            served = lambda c, e=engine: c.engine == e and c.served  # noqa: E731
            out += [Param(("engines", engine, "request_overhead_s"), 0.0, 0.1, served, additive=True)]
        if any(on(c) and c.pp > 1 for c in cases):  # each pipeline stage's fixed time per micro-batch
            piped = lambda c, e=engine: c.engine == e and c.pp > 1  # noqa: E731
            out += [Param(("engines", engine, "stage_latency_s"), 0.0, 0.02, piped, additive=True)]
        if any(on(c) and c.tp > 1 for c in cases):  # its all-reduce kernels' latency, relative to the link's
            tp = lambda c, e=engine: c.engine == e and c.tp > 1  # noqa: E731
            out += [Param(("engines", engine, "allreduce_latency_scale"), 0.25, 4.0, tp)]
    return out


def _get(d: dict, path: tuple):
    for p in path[:-1]:
        d = d[p]
    return d[path[-1]]


def _set(d: dict, path: tuple, v: float) -> None:
    for p in path[:-1]:
        d = d.setdefault(p, {}) if not isinstance(p, int) else d[p]
    d[path[-1]] = v


def _ensure(values: dict, params: list[Param]) -> None:
    """Give every fitted constant a starting value (links absent from the file: the catalog's)."""
    for p in params:
        if p.path[0] == "gpus":  # an architecture fitted for the first time starts from the defaults
            arch = values["gpus"].setdefault(p.path[1], copy.deepcopy(values["gpus"]["default"]))
            arch.setdefault("attn_decode_hbm_fraction", arch["hbm_fraction"])
            arch.setdefault("moe_gemm_fraction", 1.0)
            if p.path[2] in ("gemm_fp4", "gemm_w4"):
                arch.setdefault(p.path[2], list(arch[f"gemm_{efficiency.FALLBACK[p.path[2][5:]]}"]))
        if p.path[0] == "links":
            link = p.path[1]
            values.setdefault("links", {}).setdefault(link, [LINKS[link].latency_s, 0.0])
        elif p.path[0] == "engines":
            values["engines"][p.path[1]].setdefault(p.path[2], 1.0 if p.path[2].endswith("_scale") else 0.0)
        _set(values, p.path, min(max(_get(values, p.path), p.lo), p.hi))  # start inside the bounds


JOBS = 1  # processes evaluating cases (--jobs)


def _ratios(values: dict, cases: list[bench.Case]) -> dict[str, float]:
    efficiency.calibrated.cache_clear()
    original = efficiency.calibrated
    efficiency.calibrated = lambda: values  # type: ignore[assignment]
    try:
        out = {}
        runs: dict = {}
        for c in cases:
            c.notes.clear()
            try:
                out[c.id] = bench.predict(c, runs) / c.value
            except Exception:  # a failing case costs MISS
                out[c.id] = math.nan
        return out
    finally:
        efficiency.calibrated = original


class Objective:
    """Σ |log(predicted / published)| over cases, under candidate constants."""

    def __init__(self, cases: list[bench.Case], values: dict):
        self.cases, self.values = cases, values
        self.evals = 0

    def errors(self, values: dict, cases: list[bench.Case]) -> dict[str, float]:
        """|log(predicted / published)| per case."""
        return {k: (abs(math.log(r)) if r > 0 and math.isfinite(r) else MISS)
                for k, r in self.ratios(values, cases).items()}

    def ratios(self, values: dict, cases: list[bench.Case]) -> dict[str, float]:
        """predicted / published per case under ``values``; the cases of one setup run together
        (they share a simulation), setups spread over ``--jobs`` forked processes."""
        self.evals += 1
        groups: dict[str, list[bench.Case]] = {}
        for c in cases:
            groups.setdefault(json.dumps(bench.scenario_dict(c) | {"name": ""}, sort_keys=True, default=str),
                              []).append(c)
        chunks = [[] for _ in range(max(1, min(JOBS, len(groups))))]
        for i, g in enumerate(sorted(groups.values(), key=len, reverse=True)):
            chunks[i % len(chunks)] += g
        if len(chunks) == 1:
            return _ratios(values, chunks[0])
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(len(chunks)) as pool:
            parts = pool.starmap(_ratios, [(values, ch) for ch in chunks])
        return {k: v for part in parts for k, v in part.items()}

    def loss(self, values: dict, cases: list[bench.Case]) -> float:
        return sum(min(e, CAP) for e in self.errors(values, cases).values())


def fit(cases: list[bench.Case], values: dict, sweeps: int, log=print, only: tuple[str, ...] = (),
        checkpoint: Callable[[dict, list[Param]], None] | None = None,
        max_cases: int = 0) -> tuple[dict, list[Param]]:
    """Coordinate descent over the constants the fit half informs (``only``: those whose names
    start with one of these, in that order; the others keep their values). ``checkpoint`` gets
    the values after each constant (a long fit keeps what it has found). ``max_cases``: a constant
    is scored on at most this many of the cases it moves (every k-th), 0: all of them."""
    params = params_for(cases)
    if only:
        params = [p for prefix in only for p in params if p.name.startswith(prefix)]
    values = copy.deepcopy(values)
    _ensure(values, params)
    obj = Objective(cases, values)
    log(f"fitting {len(params)} constants on {len(cases)} fit cases; start: mean capped |log error| "
        f"{obj.loss(values, cases) / len(cases):.4f}")
    for sweep in range(sweeps):
        step = 2.0 ** (1.0 / (sweep + 1))  # ×2, ×1.41, ×1.26, … per sweep
        for p in params:
            sub = [c for c in cases if p.depends(c)]
            if not sub:
                continue
            if max_cases and len(sub) > max_cases:  # every k-th of them (in the sources' order): a faster fit
                sub = sub[::math.ceil(len(sub) / max_cases)]
            best_v = _get(values, p.path)
            best = obj.loss(values, sub)
            s = step
            for _ in range(4):  # pattern search: move while it helps, else shrink the step
                moved = False
                for direction in (1, -1):
                    if p.additive:
                        v = min(max(best_v + direction * 0.5 * (s - 1.0) * (p.hi - p.lo), p.lo), p.hi)
                    else:
                        v = min(max(best_v * s ** direction, p.lo), p.hi)
                    if v == best_v:
                        continue
                    trial = copy.deepcopy(values)
                    _set(trial, p.path, v)
                    loss = obj.loss(trial, sub)
                    if loss < best - 1e-9:
                        best, best_v, values, moved = loss, v, trial, True
                        break
                if not moved:
                    s = math.sqrt(s)
                    if s < 1.02:
                        break
            log(f"  sweep {sweep + 1} {p.name:40s} = {best_v:.4g}")
            if checkpoint is not None:
                checkpoint(values, params)
        total = obj.loss(values, cases)
        log(f"after sweep {sweep + 1}: mean capped |log error| {total / len(cases):.4f} ({obj.evals} evaluations)")
    return values, params


def _plain(v):
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return float(f"{v:.4g}") if isinstance(v, float) else v


HEADER = """\
# Constants of the roofline, fitted on the FIT half of benchmarks/published/ by
#   python benchmarks/published_fit.py
# which rewrote this file (the held-out half is never used to fit; `fit` records the run).
# docs/roofline.md explains each constant and the cases that justify it.
#
# gpus.<arch>:  gemm_<bf16|fp8>: [peak_fraction, overlap]: a GEMM takes (c^k + m^k)^(1/k), c its FLOPs at
#                 peak_fraction of the dtype's dense peak, m its bytes at hbm_fraction, 2^(1/k) = 1 + overlap
#                 (the loss at the ridge, fading away from it)
#               hbm_fraction: share of the HBM bandwidth streaming weights and KV reaches
#               attn_prefill_fraction: share of the KV dtype's dense peak prefill attention reaches
#               attn_decode_hbm_fraction: share of the HBM bandwidth decode attention reads the KV cache at
#               moe_gemm_fraction: share of the GEMM plateau the experts' grouped GEMMs reach
#               decode_row_s: fixed seconds per decode row and layer of paged decode attention
# links.<link>: [base, per_peer] seconds of one small all-reduce among tp GPUs = base + per_peer·(tp − 1)
# engines.<name>: step_overhead_s, row_overhead_s (per running request), layer_latency_s (per layer),
#                 eager_layer_latency_s (more per layer in steps that prefill),
#                 decode_gqa_reread (extra KV reads per grouped query head, 0–1),
#                 allreduce_latency_scale (its all-reduce latency as a multiple of the link's, tp > 1),
#                 stage_latency_s (pp > 1: each pipeline stage's fixed time per micro-batch)
"""


def write(values: dict, record: dict, path: Path = OUT) -> None:
    data = {k: _plain(v) for k, v in values.items() if k != "fit"}
    data["fit"] = record
    text = HEADER + yaml.safe_dump(data, sort_keys=False, width=110, default_flow_style=None)
    path.write_text(text)


def bound(sweeps: int) -> int:
    """Fit the same constants on all cases and score each half: no set of shared constants does
    better on the held-out half than this (up to the fit's own optimum), so a target above it
    needs more structure, not another fit."""
    cases = bench.load_cases()
    values, _ = fit(cases, copy.deepcopy(efficiency.calibrated()), sweeps)
    ratios = Objective(cases, values).ratios(values, cases)
    for split in ("fit", "holdout"):
        errs = sorted(abs(ratios[c.id] - 1) if math.isfinite(ratios[c.id]) else math.inf
                      for c in cases if c.split == split)
        print(f"{split:8s} {len(errs)} cases: within 15% {sum(e <= bench.WITHIN for e in errs) / len(errs):.1%}, "
              f"median |error| {errs[len(errs) // 2]:.1%}")
    for c in cases:
        if not abs(ratios[c.id] - 1) <= bench.WITHIN:
            print(f"  {c.split:8s} {c.id} {ratios[c.id] - 1:+.1%}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweeps", type=int, default=2)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--only", action="append", default=[],
                    help="fit only the constants whose names start with this (repeatable, in this order); "
                         "the others keep the file's values")
    ap.add_argument("--max-cases", type=int, default=0,
                    help="score each constant's moves on at most this many of its cases (every k-th; 0: all)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="processes evaluating the cases (the results do not depend on it)")
    ap.add_argument("--bound", action="store_true",
                    help="fit on every case, the held-out half too, and print how close the structure gets "
                         "at best (not a fit: writes nothing)")
    args = ap.parse_args(argv)
    global JOBS
    JOBS = max(1, args.jobs)
    if args.bound:
        return bound(args.sweeps)
    cases = [c for c in bench.load_cases() if c.split == "fit"]
    start = copy.deepcopy(efficiency.calibrated())
    previous = start.get("fit", {})
    command = " ".join(["python benchmarks/published_fit.py", f"--sweeps {args.sweeps}",
                        *([f"--max-cases {args.max_cases}"] if args.max_cases else []),
                        *(f"--only {o}" for o in args.only)])

    def kept(params: list[Param]) -> dict:
        """What a fit of some constants keeps from the fit before it."""
        if not args.only:
            return {}
        names = {p.name for p in params}
        return {"kept": sorted(set(previous.get("constants", [])) - names),
                "kept_from": {k: previous.get(k) for k in ("command", "date", "cases")}}

    def checkpoint(values: dict, params: list[Param]) -> None:
        if not args.dry_run:
            write(values, {"command": command, "date": datetime.date.today().isoformat(), "partial": True,
                           "constants": [p.name for p in params], **kept(params)})

    values, params = fit(cases, start, args.sweeps, only=tuple(args.only), checkpoint=checkpoint,
                         max_cases=args.max_cases)
    obj = Objective(cases, values)
    ratios = obj.ratios(values, cases)
    errs = {k: (abs(math.log(r)) if r > 0 and math.isfinite(r) else MISS) for k, r in ratios.items()}
    within = sum(abs(r - 1) <= bench.WITHIN for r in ratios.values())
    record = {"command": command, "date": datetime.date.today().isoformat(),
              "cases": len(cases), "split": "fit", "constants": [p.name for p in params], **kept(params),
              "loss": "mean of min(|log(predicted / published)|, log 1.35)",
              "mean_capped_log_error": round(sum(min(e, CAP) for e in errs.values()) / len(errs), 4),
              "mean_abs_log_error": round(sum(errs.values()) / len(errs), 4),
              "fit_within_15pct": round(float(within) / len(errs), 3)}
    print(yaml.safe_dump(_plain({k: v for k, v in values.items() if k != "fit"}), sort_keys=False))
    print(record)
    if not args.dry_run:
        write(values, record)
        print(f"wrote {OUT.relative_to(bench.ROOT)}; now: python benchmarks/published.py --split holdout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
