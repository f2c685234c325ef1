#!/usr/bin/env python3
"""The evidence for each part of the roofline's structure: the published benchmark with one part
taken out at a time (set to what servesim did before issue 13), and the cases it moves.

    python benchmarks/published_ablation.py            # markdown table (all cases)
    python benchmarks/published_ablation.py --part layer-latency --part gib
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import published as bench

from sim.scenario.specs import efficiency, gpus


@contextlib.contextmanager
def _constants(edit: Callable[[dict], None]) -> Iterator[None]:
    values = copy.deepcopy(efficiency.calibrated())
    edit(values)
    original = efficiency.calibrated
    efficiency.calibrated = lambda: values  # type: ignore[assignment]
    try:
        yield
    finally:
        efficiency.calibrated = original


@contextlib.contextmanager
def _decimal_gb() -> Iterator[None]:
    """80GB cards as 80·10⁹ bytes (the catalog before issue 13)."""
    nominal = {"A100-40GB": 40e9, "A100-80GB": 80e9, "H100-SXM": 80e9, "H200": 141e9, "L40S": 48e9, "B200": 180e9}
    saved = dict(gpus.GPU_CATALOG)
    for name, g in saved.items():
        gpus.GPU_CATALOG[name] = dataclasses.replace(g, memory_bytes=nominal.get(name, g.memory_bytes))
    try:
        yield
    finally:
        gpus.GPU_CATALOG.update(saved)


@contextlib.contextmanager
def _scenario_edit(edit: Callable[[bench.Case, dict], None]) -> Iterator[None]:
    original = bench.scenario_dict

    def patched(case: bench.Case) -> dict:
        data = original(case)
        edit(case, data)
        return data

    bench.scenario_dict = patched
    try:
        yield
    finally:
        bench.scenario_dict = original


def _each_engine(field: str, value: float):
    def edit(v: dict) -> None:
        for e in v["engines"].values():
            e[field] = value
    return edit


def _gpus(field: str, value):
    def edit(v: dict) -> None:
        for g in v["gpus"].values():
            if field.startswith("gemm"):
                for k in ("gemm_bf16", "gemm_fp8"):
                    g[k] = [g[k][0], value]
            else:
                g[field] = value
    return edit


def _no_links(v: dict) -> None:
    v["links"] = {k: [1e-9, 0.0] for k in v.get("links", {})}


def _one_engine(case: bench.Case, data: dict) -> None:
    """Every source run by the vLLM preset (scheduling defaults and overheads)."""
    data["engine"] = "vllm"


def _no_multi_step(case: bench.Case, data: dict) -> None:
    data.get("scheduler", {}).pop("num_scheduler_steps", None)


PARTS: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager]]] = {
    "gib": ("GPU memory as 80·10⁹ bytes instead of the driver's 80 GiB", _decimal_gb),
    "gemm-overlap": ("GEMMs as max(compute, memory): no imperfect overlap near the ridge",
                     lambda: _constants(_gpus("gemm", 0.0))),
    "layer-latency": ("no fixed latency per layer (graph or eager)",
                      lambda: _constants(lambda v: (_each_engine("layer_latency_s", 0.0)(v),
                                                    _each_engine("eager_layer_latency_s", 0.0)(v)))),
    "row-overhead": ("no per-running-request CPU overhead per step",
                     lambda: _constants(_each_engine("row_overhead_s", 0.0))),
    "collective-latency": ("all-reduces priced by bytes only (no latency)", lambda: _constants(_no_links)),
    "decode-rows": ("no per-row decode-attention cost", lambda: _constants(_gpus("decode_row_s", 0.0))),
    "engine-presets": ("every engine run with the vLLM preset", lambda: _scenario_edit(_one_engine)),
    "multi-step": ("vLLM without its multi-step scheduling", lambda: _scenario_edit(_no_multi_step)),
}


def run_part(name: str | None, cases: list[bench.Case]) -> dict[str, float]:
    for c in cases:
        c.notes.clear()
        c.predicted = math.nan
    ctx = PARTS[name][1]() if name else contextlib.nullcontext()
    with ctx:
        bench.run(cases)
    return {c.id: (abs(c.error) if not math.isnan(c.predicted) else math.inf) for c in cases}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", action="append", choices=sorted(PARTS))
    ap.add_argument("--split", choices=["holdout", "fit", "all"], default="all")
    args = ap.parse_args(argv)
    cases = [c for c in bench.load_cases() if args.split == "all" or c.split == args.split]
    base = run_part(None, cases)
    split = {c.id: c.split for c in cases}

    def within(errs: dict[str, float], s: str) -> str:
        e = [v for k, v in errs.items() if split[k] == s]
        return f"{sum(x <= bench.WITHIN for x in e) / len(e):.0%}" if e else "-"

    print("| part taken out | what that means | within 15% fit / holdout (with the part: "
          f"{within(base, 'fit')} / {within(base, 'holdout')}) | cases it moves by > 5 points (worse, better) |")
    print("|---|---|---|---|")
    for name in args.part or PARTS:
        errs = run_part(name, cases)
        worse = sorted((k for k in errs if errs[k] > base[k] + 0.05), key=lambda k: base[k] - errs[k])
        better = sorted((k for k in errs if errs[k] < base[k] - 0.05), key=lambda k: errs[k] - base[k])
        examples = ", ".join(f"`{k}` {base[k]:.0%}→{errs[k]:.0%}" for k in worse[:3])
        print(f"| {name} | {PARTS[name][0]} | {within(errs, 'fit')} / {within(errs, 'holdout')} | "
              f"{len(worse)}, {len(better)}: {examples} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
