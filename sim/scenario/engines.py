"""Engine presets (``sim/scenario/data/engines.yaml``): what differs between serving engines.

A preset holds scheduling defaults (the scenario's ``scheduler`` and ``hardware`` fields it does
not set itself), what the memory utilisation is a share of (the whole GPU, or what the weights and
activations leave), and the runtime's overheads the roofline adds to every step. A scenario picks
one with ``engine: NAME`` or ``engine: {name: NAME, field: value}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

FILE = "engines.yaml"
DEFAULT_ENGINE = "vllm"
COST_FIELDS = ("step_overhead_s", "row_overhead_s", "layer_latency_s", "eager_layer_latency_s", "decode_gqa_reread",
               "allreduce_latency_scale")


@cache
def presets() -> dict[str, dict]:
    return yaml.safe_load(resources.files("sim.scenario.data").joinpath(FILE).read_text())


ENGINE_NAMES = ("vllm", "sglang", "tensorrt-llm", "lmdeploy", "llama.cpp")


@dataclass(frozen=True)
class EngineCost:
    """An engine's runtime overheads: per step (scheduler, input preparation, sampling), per
    running request per step, and the kernels' fixed latency per layer (launches, small kernels,
    synchronisation) that a roofline prices at ~0 at small sizes."""

    step_overhead_s: float = 0.0
    row_overhead_s: float = 0.0
    layer_latency_s: float = 0.0
    eager_layer_latency_s: float = 0.0  # more per layer in steps that prefill (run without CUDA graphs)
    # Share of a KV head's extra reads per query head its decode-attention kernel makes: 0 when the
    # kernel reads each KV head once for its whole group (GQA-aware kernels: FlashInfer, XQA), up
    # to 1 when every query head streams its KV again.
    decode_gqa_reread: float = 0.0
    # The engine's small all-reduce latency as a multiple of the link's (its own kernels: vLLM's and
    # SGLang's custom one-shot all-reduce, TensorRT-LLM's, NCCL), for tp > 1.
    allreduce_latency_scale: float = 1.0


def engine_cost(name: str, **overrides: float | None) -> EngineCost:
    """The engine's fitted overheads, with any given (not None) override."""
    from sim.scenario.specs.efficiency import calibrated

    base = calibrated()["engines"].get(name, {}) if fitted(name) else {}
    default = EngineCost()
    return EngineCost(**{f: float(overrides[f] if overrides.get(f) is not None else base.get(f, getattr(default, f)))
                         for f in COST_FIELDS})


def fitted(name: str) -> bool:
    """Whether the engine's runtime overheads were fitted on published cases (an engine without
    them is priced by the roofline alone, and its runs say so)."""
    return presets()[name].get("fitted", True)


def memory_of(name: str) -> str:
    return presets()[name].get("memory_of", "total")


def state_memory_of(name: str) -> str:
    """Where the engine keeps a request's linear-attention / SSM state: ``pool`` (taken from the
    KV blocks per running request) or ``reserved`` (its own pool for max_num_seqs requests)."""
    return presets()[name].get("state_memory", "reserved")


def kv_tiers_of(name: str) -> dict:
    """How the engine uses KV tiers: ``load``, ``min_load_tokens`` and ``write``."""
    return {"load": "async", "min_load_tokens": 0, "write": "through", **presets()[name].get("kv_tiers", {})}


def _name(engine: Any) -> str | None:
    if engine is None:
        return DEFAULT_ENGINE
    if isinstance(engine, str):
        return engine
    if isinstance(engine, dict):
        name = engine.get("name", DEFAULT_ENGINE)
        return name if isinstance(name, str) else None  # not a name: validation reports it
    return None


def _fill(section: Any, defaults: dict) -> Any:
    """``section`` (a mapping, or absent) with the preset's defaults under the fields it sets."""
    if section is None:
        return dict(defaults)
    if isinstance(section, dict):
        return {**defaults, **section}
    return section  # not a mapping: validation reports it


def with_engine_defaults(data: dict) -> dict:
    """The scenario's raw fields with its engine preset's scheduler and hardware defaults filled in
    (everywhere a scheduler or hardware section may be: top level, replica groups, pools)."""
    name = _name(data.get("engine"))
    if name not in presets():
        return data  # validation names the unknown engine
    p = presets()[name]
    out = dict(data)
    out["scheduler"] = _fill(out.get("scheduler"), p.get("scheduler", {}))
    out["hardware"] = _fill(out.get("hardware"), p.get("hardware", {}))
    groups = out.get("replica_groups")
    if isinstance(groups, list):
        out["replica_groups"] = [_group(g, p) for g in groups]
    dis = out.get("disaggregation")
    if isinstance(dis, dict):
        out["disaggregation"] = {k: (_group(v, p) if k in ("prefill", "decode") else v) for k, v in dis.items()}
    return out


def _group(g: Any, p: dict) -> Any:
    if not isinstance(g, dict):
        return g
    g = dict(g)
    for part in ("scheduler", "hardware"):
        if isinstance(g.get(part), dict):
            g[part] = _fill(g[part], p.get(part, {}))
    return g
