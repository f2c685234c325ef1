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
DEFAULT_GPU = "H100-SXM"  # hardware.gpu where a scenario gives none (sim/scenario/schema.py: Hardware)
COST_FIELDS = ("step_overhead_s", "row_overhead_s", "layer_latency_s", "eager_layer_latency_s", "decode_gqa_reread",
               "allreduce_latency_scale", "request_overhead_s", "stage_latency_s")


@cache
def presets() -> dict[str, dict]:
    return yaml.safe_load(resources.files("sim.scenario.data").joinpath(FILE).read_text())


# The presets by release family, as users name them (engines.yaml says which releases each covers).
ENGINE_NAMES = ("vllm", "vllm-v0", "sglang", "tensorrt-llm", "tensorrt-llm-0.x", "lmdeploy", "llama.cpp")


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
    # The API server's time per request outside the steps (HTTP, tokenisation, the scheduler's
    # pick-up, detokenisation and streaming): a request reaches the scheduler this long after it
    # is sent, so its TTFT and E2E carry it (sim/core/handlers.py: arrivals). 0 for an engine
    # driven in process (an offline benchmark).
    request_overhead_s: float = 0.0
    # Pipeline parallelism: each stage's fixed time per micro-batch beside its share of the compute
    # (that rank's own executor iteration for the micro-batch: its launches and the send / receive
    # handshake with the next stage), so a stage of few layers is slower than its share (pp > 1).
    stage_latency_s: float = 0.0


def engine_cost(name: str, **overrides: float | None) -> EngineCost:
    """The engine's fitted overheads, with any given (not None) override."""
    from sim.scenario.specs.efficiency import calibrated

    base = calibrated()["engines"].get(overheads_of(name), {}) if fitted(name) else {}
    default = EngineCost()
    return EngineCost(**{f: float(overrides[f] if overrides.get(f) is not None else base.get(f, getattr(default, f)))
                         for f in COST_FIELDS})


def overheads_of(name: str) -> str:
    """Whose fitted overheads the engine takes: its own, or (``overheads_from``) an earlier release
    family's where no published case of its own could fit them."""
    return presets()[name].get("overheads_from", name)


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


def gpu_defaults(name: str, gpu: Any) -> dict:
    """The preset's scheduler defaults for ``gpu`` (a catalog name or a definition as the scenario
    writes it): its ``scheduler``, under the first of its ``gpu_defaults`` whose ``min_memory_gib``
    the GPU has and whose ``not_arch`` it is not (vLLM V1 sizes its token budget and sequence limit
    by the device's memory and name: vllm/engine/arg_utils.py)."""
    p = presets()[name]
    out = dict(p.get("scheduler", {}))
    spec = _gpu_spec(gpu)
    for rule in p.get("gpu_defaults", ()):
        if spec is None:
            break
        if spec.memory_bytes >= rule.get("min_memory_gib", 0) * 2**30 and spec.arch not in rule.get("not_arch", ()):
            out.update(rule["scheduler"])
            break
    return out


def _gpu_spec(gpu: Any):
    """The GpuSpec a scenario's ``hardware.gpu`` names or defines, or None (validation reports it)."""
    from sim.scenario.gpu_input import GpuDefinition
    from sim.scenario.specs.gpus import get_gpu

    try:
        if isinstance(gpu, str):
            return get_gpu(gpu)
        if isinstance(gpu, dict):
            return GpuDefinition.model_validate(gpu).spec()
    except (KeyError, ValueError):
        return None
    return None


def _scheduler(section: Any, name: str, gpu: Any) -> Any:
    """``section`` (the scenario's scheduler) with the preset's defaults for ``gpu`` under it."""
    defaults = gpu_defaults(name, gpu)
    own = section if isinstance(section, dict) else {}
    policy = own.get("policy", defaults.get("policy"))
    # a sequence limit left to the preset stays within the step's token budget the scenario sets
    # (vLLM: max_num_seqs = min(its default, max_num_batched_tokens); vllm/engine/arg_utils.py)
    budget = own.get("chunk_size" if policy == "chunked-prefill" else "max_batched_tokens")
    if "max_num_seqs" not in own and isinstance(budget, int) and "max_num_seqs" in defaults:
        defaults = {**defaults, "max_num_seqs": max(1, min(defaults["max_num_seqs"], budget))}
    return _fill(section, defaults)


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
    gpu = _gpu_of(out.get("hardware"), DEFAULT_GPU)
    own = out.get("scheduler")
    out["scheduler"] = _scheduler(own, name, gpu)
    out["hardware"] = _fill(out.get("hardware"), p.get("hardware", {}))
    groups = out.get("replica_groups")
    if isinstance(groups, list):
        out["replica_groups"] = [_group(g, name, gpu, own) for g in groups]
    dis = out.get("disaggregation")
    if isinstance(dis, dict):
        out["disaggregation"] = {k: (_group(v, name, gpu, own) if k in ("prefill", "decode") else v)
                                 for k, v in dis.items()}
    return out


def _gpu_of(hardware: Any, default: Any = None) -> Any:
    return hardware.get("gpu", default) if isinstance(hardware, dict) else default


def _group(g: Any, name: str, gpu: Any, top: Any) -> Any:
    """A replica group (or pool) with the defaults of its own GPU: a group on another GPU than the
    scenario's that leaves its scheduler out takes the scenario's own fields over its GPU's
    defaults (``top``: the scenario's scheduler as written)."""
    if not isinstance(g, dict):
        return g
    g = dict(g)
    own_gpu = _gpu_of(g.get("hardware"), gpu)
    if g.get("scheduler") is None and own_gpu != gpu and (top is None or isinstance(top, dict)):
        g["scheduler"] = dict(top or {})
    if isinstance(g.get("scheduler"), dict):
        g["scheduler"] = _scheduler(g["scheduler"], name, own_gpu)
    if isinstance(g.get("hardware"), dict):
        g["hardware"] = _fill(g["hardware"], presets()[name].get("hardware", {}))
    return g
