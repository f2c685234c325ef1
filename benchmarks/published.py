#!/usr/bin/env python3
"""servesim against published measurements of production engines (benchmarks/published/).

Each case of ``published/sources/*.yaml`` becomes a scenario (the setup the source describes,
run by the engine's preset), is simulated with the compiled loop, and its metric is derived
the way the source's tool defines it. Prints each case's error and the aggregates of the fit
half and of the held-out half (on which no constant was fitted).

    python benchmarks/published.py                      # held-out half, table
    python benchmarks/published.py --split all --format json
    python benchmarks/published.py --source trtllm-0.9.0-performance --split all
    python benchmarks/published.py --write-bands        # held-out errors -> sim/scenario/data/error_bands.yaml
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HERE = Path(__file__).resolve().parent / "published"
from sim.scenario.specs import GPU_CATALOG  # noqa: E402

WITHIN = 0.15  # the tolerance

# Which engine preset runs each source's engine: its release family, from the version the source
# states (``engine_family``). NIM's and MLPerf v4.1's TensorRT-LLM are 0.x releases (engines built ahead).
ENGINES = {"tensorrt-llm": "tensorrt-llm", "nim": "tensorrt-llm", "vllm": "vllm", "sglang": "sglang",
           "lmdeploy": "lmdeploy"}


def engine_family(engine: str, version: str, date: str) -> str:
    """The preset of a source's engine release: vLLM 0.8 and later is V1 (``vllm``), earlier V0
    (``vllm-v0``); TensorRT-LLM 1.x and its PyTorch workflow are ``tensorrt-llm``, earlier releases
    ``tensorrt-llm-0.x``. A version the source does not state as a number goes by its date (vLLM
    made V1 its default in 0.8, 2025-03)."""
    import re

    name = ENGINES[engine]
    m = re.search(r"(?<![\w.])(\d+)\.(\d+)", str(version))
    if name == "vllm":
        if re.search(r"\bV1\b", str(version)):
            return "vllm"
        if m:
            return "vllm" if (int(m[1]), int(m[2])) >= (0, 8) else "vllm-v0"
        return "vllm" if str(date) >= "2025-03" else "vllm-v0"
    if name == "tensorrt-llm":
        if engine == "tensorrt-llm" and ("pytorch" in str(version).lower() or (m and int(m[1]) >= 1)):
            return "tensorrt-llm"
        return "tensorrt-llm-0.x"
    return name


# Sources measured through the engine's API server (an HTTP client: bench_serving, genai-perf, the
# Triton client): their requests pay the engine family's request_overhead_s. The others drive the
# engine in process (trtllm-bench, gptManagerBenchmark, gptSessionBenchmark, LMDeploy's profilers,
# MLPerf's LoadGen harness): no API server, request_overhead_s 0.
SERVED = {"nim-llm-benchmarking-performance", "trtllm-0.14-online-serving", "sglang-0.3.0-vs-vllm-0.6.0-sglang",
          "sglang-0.3.0-vs-vllm-0.6.0-vllm", "inferencex-870-dsr1-fp8-h200-sglang",
          "inferencex-870-dsr1-fp4-b200-sglang", "vllm-pr23696-gpt-oss-120b-b200", "mooncake-vllm-pd-qwen3-8b-h800",
          "mooncake-sglang-pd-qwen3-235b-h20", "mooncake-ssd-offload-qwen3-8b-a100",
          "lmcache-blog-mooncake-qwen25-72b-h800", "vllm-recipe-llama33-70b-mi355x"}

# Real-prompt datasets whose lengths the sources do not print: lognormal lengths with the means
# below (sources in benchmarks/published/README.md, "Datasets"), clipped as the tools clip them.
DATASETS = {
    # ShareGPT as vLLM's / SGLang's bench_serving sample it (prompt ≤ 1024, prompt + output ≤ 2048):
    # ~217 input tokens per request (vllm benchmark_serving on 1000 ShareGPT prompts prints 215,196–217,393
    # input tokens), 194 output tokens (SGLang's offline table: 4281.51 tok/s / 22.03 req/s).
    "sharegpt": {"prompt_len": {"dist": "lognormal", "mean": 217, "sigma": 1.0, "max": 1024},
                 "output_len": {"dist": "lognormal", "mean": 194, "sigma": 1.0, "max": 1024}},
    # MLPerf's OpenOrca subset: 290 output tokens per sample (tokens/s ÷ samples/s in the result logs);
    # input mean not printed, taken as equal to the output mean (inputs are capped at 1024 tokens).
    "mlperf-openorca-llama2-70b": {"prompt_len": {"dist": "lognormal", "mean": 290, "sigma": 0.8, "max": 1024},
                                   "output_len": {"dist": "lognormal", "mean": 290, "sigma": 0.8, "max": 1024}},
}

DATASET_SIZE = {"mlperf-openorca-llama2-70b": 24576}  # samples, when a source gives no request count

# Settings the sources state for their runs (not fitted): scheduler limits and memory fractions.
SOURCE_SETUP: dict[str, dict] = {
    # SGLang's wide EP as the LMSYS post ran it: two-batch overlap, EPLB with 32 redundant experts (the
    # routing's skew is not published: uniform, the "simulated perfect EPLB" column's assumption)
    "lmsys-2025-05-large-scale-ep-dsv3-h100": {"hardware": {
        "two_batch_overlap": True, "expert_load": {"distribution": "uniform", "eplb": True, "redundant_experts": 32}}},
    # gptManagerBenchmark: engines built with max_batch_size 2048, max_num_tokens 2048, chunked context,
    # kv_cache_free_gpu_mem_fraction 0.9 (the page's command table).
    "trtllm-0.10.0-perf-overview": {"scheduler": {"max_num_seqs": 2048, "chunk_size": 2048,
                                                  "max_batched_tokens": 2048},
                                    "hardware": {"memory_utilization": 0.9}},
    # trtllm-bench with --kv_cache_free_gpu_mem_fraction 0.95 ("in many cases", the pages say).
    "trtllm-0.17-perf-overview": {"hardware": {"memory_utilization": 0.95}},
    "trtllm-0.17-perf-overview-moe": {"hardware": {"memory_utilization": 0.95}},
    "trtllm-1.0-perf-overview": {"hardware": {"memory_utilization": 0.95}},
    "trtllm-1.0-perf-overview-moe": {"hardware": {"memory_utilization": 0.95}},
    "trtllm-1.0-perf-overview-rest": {"hardware": {"memory_utilization": 0.95}},  # the same page as the two above
    "trtllm-1.2-perf-overview": {"hardware": {"memory_utilization": 0.95}},  # the same advice on its page
    "trtllm-1.2-perf-overview-dep": {"hardware": {"memory_utilization": 0.95}},
    # vLLM server flags printed in the README: --max_model_len 4096 (so 4096 tokens per step)
    # and --num-scheduler-steps 10 (multi-step scheduling).
    "sglang-0.3.0-vs-vllm-0.6.0-vllm": {"scheduler": {"max_batched_tokens": 4096, "num_scheduler_steps": 10}},
    # the vLLM ROCm recipe's server: --max-num-batched-tokens 32768 (V1: the budget of a step)
    "vllm-recipe-llama33-70b-mi355x": {"scheduler": {"max_batched_tokens": 32768, "chunk_size": 32768}},
    # InferenceX dsr1-fp4-b200-sglang: 'TP=8 EP=8' (experts split over the TP group).
    "inferencex-870-dsr1-fp4-b200-sglang": {"hardware": {"expert_parallel": True}},
}
# Sources measured with ``trtllm-bench throughput``: it sizes the engine's batch and token budget
# itself from the model, the GPUs and the dataset's mean ISL/OSL (``trtllm_bench_limits``), and runs
# with its own defaults: --scheduler_policy guaranteed_no_evict and chunked context off (the engine
# presets' reserve_output and split_prompts: false); with attention DP, the limits are each rank's.
# Cases that state their own limits (the DeepSeek-R1 best-practice commands) run with those.
TRTLLM_BENCH = {"trtllm-0.17-perf-overview", "trtllm-0.17-perf-overview-moe", "trtllm-1.0-perf-overview",
                "trtllm-1.0-perf-overview-moe", "trtllm-1.0-perf-overview-rest", "trtllm-1.2-perf-overview",
                "trtllm-1.2-perf-overview-dep"}
# MLPerf v4.1 NVIDIA configs: max batch per replica (Server, Offline) for H100 TP2 and H200 TP1.
MLPERF_BATCH = {("H100-SXM", "server"): 1024, ("H100-SXM", "offline"): 896,
                ("H200", "server"): 896, ("H200", "offline"): 806}
# Sources that ran Llama 3.1 / 3.3 (the 128K-context variants of the catalog's Llama 3 shapes).
LLAMA_31 = {"nim-llm-benchmarking-performance", "sglang-0.3.0-vs-vllm-0.6.0-sglang",
            "sglang-0.3.0-vs-vllm-0.6.0-vllm", "trtllm-0.14-online-serving", "trtllm-0.17-perf-overview",
            "trtllm-1.0-perf-overview"}
WARMUP = 0.25  # open-loop runs: the first quarter of arrivals warms the server up and is not scored

# GenAI-Perf / AIPerf (NIM) define ITL per request as (e2e − TTFT) / (output tokens − 1), then average it.
PER_REQUEST_ITL = {"nim-llm-benchmarking-performance"}
# GenAI-Perf measures in windows once the load is stable: the ramp-up (every user's first request) is not scored.
STEADY_CLOSED_LOOP = {"nim-llm-benchmarking-performance"}
FAMILY = {"ttft": "ttft", "first": "ttft", "itl": "itl-tpot", "tpot": "itl-tpot", "e2e": "e2e",
          "output": "throughput", "total": "throughput", "request": "throughput", "input": "throughput"}


@dataclass
class Case:
    id: str
    source: str
    engine: str
    split: str
    metric: str
    value: float
    model: str
    gpu: str
    num_gpus: int
    tp: int
    pp: int
    weights: str | None
    kv_cache: str
    workload: dict
    table: str = ""
    published: str = ""
    ep: int | None = None  # wide EP: the experts' GPUs (the replica) and its attention ranks
    dp_attention: int | None = None
    limits: dict = field(default_factory=dict)  # the engine's limits the source states
    disagg: dict | None = None  # prefill/decode pools: {prefill_gpus, decode_gpus, measured}
    predicted: float = math.nan
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def family(self) -> str:
        return FAMILY[self.metric.split("_")[0]]

    @property
    def served(self) -> bool:
        """Measured through the engine's API server (``SERVED``)."""
        return self.source in SERVED

    @property
    def replica_gpus(self) -> int:
        """GPUs per replica: its TP group, or with attention DP its expert-parallel group."""
        return (self.ep if self.dp_attention else self.tp) * self.pp

    @property
    def replicas(self) -> int:
        """Independent copies of the setup sharing the load (a disaggregated setup is one)."""
        return 1 if self.disagg else self.num_gpus // self.replica_gpus

    @property
    def phase(self) -> str | None:
        """The one phase of a disaggregated setup the source measured alone (prefill or decode)."""
        measured = (self.disagg or {}).get("measured", "both")
        return None if measured == "both" else measured

    @property
    def error(self) -> float:
        return self.predicted / self.value - 1.0


# What a case may `need` (README, "Wide EP, disaggregation and KV tiers") that this harness can set up:
# dp-attention and wide-ep (hardware.dp_attention over the expert-parallel group, the source's
# per-rank limits; wide EP's two-batch overlap and EPLB from SOURCE_SETUP); pd-disagg (one prefill and
# one decode pool of the source's GPUs, the whole setup measured; the link's default for its type,
# never the transfer rate the source printed), or one phase of it measured alone with the other
# given unlimited resources: a replica of that phase's GPUs doing only that phase (``one_phase``).
# Cases needing anything else are skipped by load_cases and counted in SKIPPED.
SUPPORTED_NEEDS: frozenset[str] = frozenset({"dp-attention", "wide-ep"})
# Needs the harness can set up but leaves out unless asked (--include): pd-disagg, because the
# error bands match a run on GPU, engine, dtype, model kind and metric but not on its layout, so
# a disaggregated setup's TTFT would set a colocated run's band.
OPTIONAL_NEEDS: frozenset[str] = frozenset({"pd-disagg"})
SKIPPED: dict[str, int] = {}  # unmet needs ("+"-joined) -> cases the last load_cases call skipped


def unmet_needs(case: dict, include: frozenset[str] = frozenset()) -> list[str]:
    """What a transcribed case needs that the harness does not set up (``include``: which of
    OPTIONAL_NEEDS it sets up too). One phase of a disaggregated setup measured alone needs no
    disaggregation: a replica doing only that phase (``one_phase``)."""
    needs = set(case.get("needs") or ())
    if (case.get("disagg") or {}).get("measured", "both") != "both":
        needs.discard("pd-disagg")
    return sorted(needs - SUPPORTED_NEEDS - (include & OPTIONAL_NEEDS))


def load_cases(sources: list[str] | None = None, include: frozenset[str] = frozenset()) -> list[Case]:
    """The cases of ``sources`` (all by default) whose needs the harness sets up (``include``:
    which of OPTIONAL_NEEDS to set up too)."""
    cases = []
    SKIPPED.clear()
    for path in sorted((HERE / "sources").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        src = data["source"]
        if sources and src["id"] not in sources:
            continue
        for c in data["cases"]:
            missing = unmet_needs(c, include)
            if not missing and c["gpu"] not in GPU_CATALOG:
                missing.append(f"gpu {c['gpu']}")
            if missing:
                key = "+".join(missing)
                SKIPPED[key] = SKIPPED.get(key, 0) + 1
                continue
            engine = engine_family(src["engine"], src.get("engine_version", ""), src.get("date", ""))
            cases.append(Case(id=c["id"], source=src["id"], engine=engine, split=c["split"],
                              metric=c["metric"], value=float(c["value"]), model=c["model"], gpu=c["gpu"],
                              num_gpus=c["num_gpus"], tp=c["tp"], pp=c["pp"],
                              weights=_dtype(c["weights"]), kv_cache=_dtype(c["kv_cache"]),
                              workload=c["workload"], table=c.get("table", ""), published=c.get("published", ""),
                              ep=c.get("ep"), dp_attention=c.get("dp_attention"), limits=c.get("limits") or {},
                              disagg=c.get("disagg")))
    return cases


def _dtype(d: str) -> str | None:
    """A case's dtype as the scenario takes it; ``checkpoint`` (weights only): the model's own
    per-group dtypes from its quantization_config (gpt-oss: MXFP4 experts, bf16 attention)."""
    return {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "int8": "int8", "int4": "int4", "fp4": "fp4",
            "checkpoint": None}[d]


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# One phase measured alone (the LMSYS wide-EP runs): how the replica of that phase is loaded. Prefill:
# every rank takes PHASE_PREFILL_TOKENS prompt tokens a step (the source's tokens_per_gpu where it
# gives one; the LMSYS prefill table's 16,384 otherwise), PHASE_STEPS steps' worth of prompts queued
# at once, one output token each. Decode: the source's batch per GPU, all at once, each decoding
# PHASE_DECODE tokens from a prompt PHASE_DECODE / 2 shorter than the stated KV length (so the KV
# length is the stated one on average), scored between the last first token and the first completion.
PHASE_PREFILL_TOKENS = 16384
PHASE_STEPS = 10
PHASE_DECODE = 512


def one_phase(case: Case) -> tuple[dict, dict]:
    """The workload and scheduler of a replica doing only the phase the source measured."""
    w, ranks = case.workload, case.dp_attention or 1
    isl = int(w["input_len"])
    if case.phase == "prefill":
        per_rank = int(w.get("tokens_per_gpu") or PHASE_PREFILL_TOKENS)
        n = PHASE_STEPS * ranks * per_rank // isl
        seqs = max(per_rank // isl, 1)
        out = 1
        prompt = isl
    else:
        per_rank = PHASE_PREFILL_TOKENS  # the prompts' burst before the decodes (not scored)
        seqs = int(w["batch_per_gpu"])
        n = seqs * ranks
        out = PHASE_DECODE
        prompt = isl - PHASE_DECODE // 2
    wl = {"prompt_len": {"dist": "fixed", "value": prompt}, "output_len": {"dist": "fixed", "value": out},
          "num_requests": n, "arrival": {"process": "closed", "concurrency": n}}
    budget = max(per_rank, seqs) * ranks
    return wl, {"policy": "chunked-prefill", "chunk_size": budget, "max_batched_tokens": budget,
                "max_num_seqs": seqs * ranks}


def scenario_dict(case: Case) -> dict:
    """The scenario of one replica of the case's setup (replicas share the load evenly)."""
    w = case.workload
    wl: dict = {}
    if case.phase:
        wl, scheduler = one_phase(case)
    elif w["dataset"] in DATASETS:
        wl.update(DATASETS[w["dataset"]])
    else:
        wl["prompt_len"] = {"dist": "fixed", "value": int(w["input_len"])}
        wl["output_len"] = {"dist": "fixed", "value": int(w["output_len"])}
    if not case.phase:
        scheduler: dict = {}
    kind = "phase" if case.phase else w["kind"]
    if kind == "phase":
        pass
    elif kind == "single":
        n = 2 if w["output_len"] == 1 else 3
        wl.update(num_requests=n, arrival={"process": "closed", "concurrency": 1})
    elif kind == "static":
        b = int(w["batch_size"])
        wl.update(num_requests=b, arrival={"process": "closed", "concurrency": b})
        scheduler.update(policy="static", batch_size=b, max_num_seqs=b)
    elif kind == "concurrency":
        c = int(w["concurrency"])
        # the tool's request count where it states one (its drain is then as long as the real one)
        n = int(w["num_prompts"]) if w.get("num_prompts") else max(4 * c, 8)
        wl.update(num_requests=n, arrival={"process": "closed", "concurrency": c})
        if case.engine == "lmdeploy":  # the profiling scripts size the engine's batch to their threads
            scheduler.update(max_num_seqs=max(c, 1), chunk_size=max(8192, c))
    else:  # rate
        rate = w["rate"]
        n = int(w.get("num_prompts") or DATASET_SIZE.get(w["dataset"], 1000))
        if rate is None or math.isinf(float(rate)):  # everything queued at once
            n = min(n, 6000 * case.replicas) // case.replicas
            wl.update(num_requests=n, arrival={"process": "closed", "concurrency": n})
        elif w.get("num_prompts"):  # the tool's own run: its request count, every request scored
            n = int(w["num_prompts"]) // case.replicas
        else:  # a long run (MLPerf: ≥ 2400 s): 4 minutes of arrivals after the warm-up
            n = max(min(n, 1200) // case.replicas, int(240 * float(rate) / case.replicas / (1 - WARMUP)))
        if rate is not None and not math.isinf(float(rate)):
            wl.update(num_requests=n, arrival={"process": "poisson", "rate": float(rate) / case.replicas})
    model = case.model
    if case.source in LLAMA_31 and model.startswith("llama-3-"):
        model = model.replace("llama-3-", "llama-3.1-")
    data = {
        "name": case.id,
        # an engine driven in process pays no API server's time per request
        "engine": case.engine if case.served else {"name": case.engine, "request_overhead_s": 0.0},
        "model": model,
        "hardware": {"gpu": case.gpu, "tp": case.tp, "pp": case.pp},
        "quantization": {"weights": case.weights, "kv_cache": case.kv_cache},
        "workload": wl,
        "scheduler": scheduler,
    }
    if case.disagg and not case.phase:  # a prefill pool and a decode pool of the case's replicas, over the default link
        per = case.tp * case.pp
        hw = data.pop("hardware")
        data["disaggregation"] = {"prefill": {"count": case.disagg["prefill_gpus"] // per, "hardware": hw},
                                  "decode": {"count": case.disagg["decode_gpus"] // per, "hardware": hw},
                                  "link": {"type": "infiniband"}}
    if case.dp_attention:  # one replica: attention ranks over the expert-parallel group
        d, lim = case.dp_attention, case.limits
        data["hardware"].update(tp=case.ep, expert_parallel=True, dp_attention=d)
        if "max_batch_size_per_rank" in lim:
            data["scheduler"]["max_num_seqs"] = lim["max_batch_size_per_rank"] * d
        if "max_num_tokens_per_rank" in lim:
            budget = lim["max_num_tokens_per_rank"] * d
            data["scheduler"].update(chunk_size=max(budget, data["scheduler"].get("max_num_seqs", 0)),
                                     max_batched_tokens=budget)
        if "kv_cache_free_gpu_mem_fraction" in lim:
            data["hardware"]["memory_utilization"] = lim["kv_cache_free_gpu_mem_fraction"]
    if case.source in TRTLLM_BENCH and not case.limits and kind == "rate":
        fraction = SOURCE_SETUP.get(case.source, {}).get("hardware", {}).get("memory_utilization", 0.9)
        max_bs, max_tokens = trtllm_bench_limits(case, model, fraction)
        ranks = case.dp_attention or 1  # attention DP: every rank schedules its own batch within them
        data["scheduler"].update(max_num_seqs=max_bs * ranks, max_batched_tokens=max_tokens * ranks,
                                 chunk_size=max_tokens * ranks)
    if case.source.startswith("mlperf"):
        mode = "offline" if kind == "rate" and math.isinf(float(w["rate"])) else "server"
        data["scheduler"]["max_num_seqs"] = MLPERF_BATCH[(case.gpu, mode)]
    data = _merge(data, SOURCE_SETUP.get(case.source, {}))
    return data


def trtllm_bench_limits(case: Case, model: str, kv_fraction: float) -> tuple[int, int]:
    """max_batch_size and max_num_tokens as ``trtllm-bench throughput`` picks them when it is not
    given them (tensorrt_llm/bench/build/tuning.py: calc_engine_setting, finetune_setting, 0.17 to
    1.2): the requests of the dataset's mean ISL + OSL that the KV cache holds, after weights
    estimated at its bytes per parameter of the checkpoint's quantization (NVFP4 0.5, FP8 1, any
    other 2) times the elements its safetensors hold (a 4-bit tensor's two values a byte and a
    scale per block of 16, NVFP4, or 32, MXFP4), per pipeline stage, rounded up; the
    token budget that many requests' share of prompt tokens, at least 2,048; with chunked context
    off (its default) at least the longest prompt plus the batch."""
    from sim.scenario.specs import get_gpu, get_model
    from sim.scenario.specs.models import WEIGHT_GROUPS

    m, g = get_model(model), get_gpu(case.gpu)
    isl, osl = int(case.workload["input_len"]), int(case.workload["output_len"])
    gib = 1024.0 ** 3
    # bytes per counted parameter by the checkpoint's quantization: NVFP4 0.5, FP8 1, others
    # (bf16, MXFP4, which its table does not list) 2
    per_param = {"fp8": 1.0, "fp4": 0.5}.get(case.weights or "", 2.0)
    groups = m.group_params()  # safetensors elements: a 4-bit tensor packs two a byte, plus a scale per block
    packed = {"fp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32}
    counted = groups["embedding"] + groups["other"] + sum(groups[k] * packed.get(m.dtype_of(k, case.weights), 1.0)
                                                          for k in WEIGHT_GROUPS)
    kv_bytes = 1.0 if case.kv_cache == "fp8" else 2.0
    attn_layers = sum(1 for a in m.layer_attention if a != "none") if m.layer_attention else m.num_layers
    tp = case.ep if case.dp_attention else case.tp  # DEP n: trtllm-bench --tp n --ep n, attention DP
    per_token = 2 * attn_layers * max(tp, m.num_kv_heads) * m.head_dim * kv_bytes / gib  # MLA: as its config reads
    gpus = tp * case.pp
    cache = (g.memory_bytes / gib * gpus - counted * per_param / gib) * kv_fraction
    max_requests = cache / (per_token * (isl + osl))
    raw_bs = min(max_requests, 4096) / case.pp
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    bs = _round_up(raw_bs, 64, ((256, 32), (1024, 128), (math.inf, 256)))
    tokens = _round_up(raw_tokens, 2048, ((4096, 256), (8192, 512), (math.inf, 1024)))
    return bs, max(tokens, isl + bs)


def _round_up(x: float, least: int, steps: tuple[tuple[float, int], ...]) -> int:
    """``x`` rounded up to the step of the first band it is below, at least ``least`` (trtllm-bench's
    finetune_setting)."""
    step = next(s for below, s in steps if x < below)
    return max(least, step * math.ceil(x / step))


def predict(case: Case, runs: dict | None = None) -> float:
    """Simulate the case and derive its metric the way the source's tool does. ``runs`` caches
    the simulations of one evaluation: cases of one setup (a source's TTFT, ITL and throughput
    of the same run) share theirs."""
    from sim.loops.run import simulate
    from sim.scenario.load import scenario_from_dict

    data = scenario_dict(case)
    key = json.dumps({k: v for k, v in data.items() if k != "name"}, sort_keys=True)
    if runs is None or key not in runs:
        result = simulate(scenario_from_dict(data, f"<published case {case.id}>"))
        summary = result.summary
        if case.phase == "decode":  # the decode steps' own tokens, while every request decodes
            summary = dict(summary, phase_tokens=_decode_window(result.requests, result.steps))
        run = (result.requests, summary)
        if runs is not None:
            runs[key] = run
    else:
        run = runs[key]
    return metric_of(case, *run)


def _open_loop(case: Case) -> bool:
    rate = case.workload["rate"]
    return case.workload["kind"] == "rate" and rate is not None and not math.isinf(float(rate))


def _steady(case: Case) -> bool:
    """An open-loop run scored in its steady state (a long run whose tool reports no request
    count, MLPerf's); a run of a stated number of requests (bench_serving, Triton's client) is
    scored over all of them, the way its tool does."""
    return _open_loop(case) and not case.workload.get("num_prompts")


def metric_of(case: Case, requests, summary: dict) -> float:
    """The case's metric from the run's requests: latencies over the scored requests (open-loop runs
    skip the warm-up), throughput over the whole setup (all replicas; per GPU where the source is)."""
    fin = requests[requests["status"] == "finished"]
    if len(fin) < len(requests):
        case.notes.append(f"{len(requests) - len(fin)} of {len(requests)} requests not finished")
    if case.phase:
        return _phase_throughput(case, fin, summary) * 8 / case.num_gpus  # per node of 8 GPUs
    scored = fin
    if _steady(case):
        start = float(np.quantile(requests["arrival"], WARMUP))
        scored = fin[fin["arrival"] >= start]
    elif case.source in STEADY_CLOSED_LOOP:  # the first wave of every user is the ramp-up
        scored = fin[fin["request_id"] >= int(case.workload["concurrency"])]
    m = case.metric
    if m.startswith(("output_throughput",)):
        if _steady(case):
            value = _steady_throughput(fin, requests)
        elif case.source in STEADY_CLOSED_LOOP:
            value = scored["output_tokens"].sum() / (scored["completion"].max() - scored["arrival"].min())
        else:
            value = summary["output_token_throughput"]
        value *= case.replicas
        return value / case.num_gpus if m.endswith("per_gpu") else value
    column, stat = {"first": ("ttft", "mean"), "ttft": ("ttft", None), "tpot": ("tpot", None),
                    "e2e": ("e2e", None), "itl": ("itl", None)}[m.split("_")[0]]
    stat = stat or m.split("_")[1]
    if column == "itl":
        if case.source in PER_REQUEST_ITL or _open_loop(case):
            column = "tpot"  # per request (e2e − TTFT) / (tokens − 1); fixed lengths: the mean gap
        else:
            return float(summary[f"itl_{'p50' if stat == 'median' else stat}"])
    x = scored[column].dropna().to_numpy()
    return float({"mean": np.mean, "median": np.median, "p99": lambda v: np.percentile(v, 99)}[stat](x))


def _phase_throughput(case: Case, fin, summary: dict) -> float:
    """One phase's tokens/s (``one_phase``): prefill, the prompt tokens over the whole run; decode,
    the tokens the steps decoded while every request decodes (``_decode_window``)."""
    if case.phase == "prefill":
        return float(fin["prompt_tokens"].sum() / (fin["completion"].max() - fin["arrival"].min()))
    if math.isnan(summary["phase_tokens"]):
        case.notes.append("no moment when every request decoded")
    return summary["phase_tokens"]


def _decode_window(requests, steps) -> float:
    """Tokens/s decoded by the steps that start after the last first token and end by the first
    completion (every request decoding: the batch and KV length the source held), NaN if none."""
    a, b = float(requests["first_token"].max()), float(requests["completion"].min())
    start = steps["start"].to_numpy()
    end = start + steps["duration"].to_numpy()
    inside = (start >= a) & (end <= b)
    if not inside.any():
        return math.nan
    return float(steps["decode_seqs"].to_numpy()[inside].sum() / (end[inside].max() - start[inside].min()))


def _steady_throughput(fin, requests) -> float:
    """Output tokens/s generated between the end of the warm-up and the last arrival, each request's
    tokens spread evenly between its first token and its completion."""
    a = float(np.quantile(requests["arrival"], WARMUP))
    b = float(requests["arrival"].max())
    first, done = fin["first_token"].to_numpy(), fin["completion"].to_numpy()
    n = fin["output_tokens"].to_numpy().astype(float)
    span = np.maximum(done - first, 1e-12)
    inside = np.clip(np.minimum(done, b) - np.maximum(first, a), 0.0, None) / span * (n - 1)
    inside += ((first >= a) & (first < b))
    return float(inside.sum() / (b - a))


def run(cases: list[Case], progress=None) -> list[Case]:
    runs: dict = {}
    for c in cases:
        t = time.perf_counter()
        try:
            c.predicted = predict(c, runs)
        except Exception as e:  # a case that cannot run is reported, not fatal
            c.notes.append(f"{type(e).__name__}: {e}")
        c.wall_s = time.perf_counter() - t
        if progress:
            progress(c)
    return cases


def aggregate(cases: list[Case]) -> dict:
    ok = [c for c in cases if not math.isnan(c.predicted)]
    errs = [abs(c.error) for c in ok]
    if not errs:
        return {"cases": len(cases), "scored": 0}
    worst = max(ok, key=lambda c: abs(c.error))
    return {"cases": len(cases), "scored": len(ok),
            "within_15pct": sum(e <= WITHIN for e in errs) / len(errs),
            "median_abs_error": statistics.median(errs), "mean_abs_error": statistics.fmean(errs),
            "worst": {"id": worst.id, "error": worst.error}}


def report(cases: list[Case]) -> dict:
    halves = {s: aggregate([c for c in cases if c.split == s]) for s in ("fit", "holdout")}
    return {"cases": [{"id": c.id, "source": c.source, "engine": c.engine, "split": c.split, "metric": c.metric,
                       "published": c.value, "predicted": c.predicted,
                       "error": None if math.isnan(c.predicted) else c.error, "notes": c.notes,
                       "wall_s": round(c.wall_s, 3)} for c in cases],
            "aggregate": {**{k: v for k, v in halves.items() if v["cases"]}, "all": aggregate(cases)}}


def _fmt(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"


def print_table(cases: list[Case], out=sys.stdout) -> None:
    print(f"{'case':78s} {'split':7s} {'published':>10s} {'predicted':>10s} {'error':>7s}", file=out)
    for c in cases:
        err = "  n/a" if math.isnan(c.predicted) else f"{c.error:+7.1%}"
        flag = "" if math.isnan(c.predicted) or abs(c.error) <= WITHIN else "  *"
        print(f"{c.id:78s} {c.split:7s} {_fmt(c.value):>10s} {_fmt(c.predicted):>10s} {err}{flag}"
              + (f"  ({'; '.join(c.notes)})" if c.notes else ""), file=out)
    agg = report(cases)["aggregate"]
    print(file=out)
    for name, a in agg.items():
        if not a.get("scored"):
            continue
        print(f"{name:8s} {a['scored']:3d} cases: within 15% {a['within_15pct']:6.1%}   median |error| "
              f"{a['median_abs_error']:6.1%}   mean |error| {a['mean_abs_error']:6.1%}   worst "
              f"{a['worst']['error']:+.0%} ({a['worst']['id']})", file=out)


BANDS = ROOT / "sim" / "scenario" / "data" / "error_bands.yaml"
BAND_COLUMNS = ("id", "gpu", "arch", "engine", "dtype", "model", "metric", "error")


def band_keys(case: Case) -> list:
    """What a run is matched on in the error bands file (sim.pricing.trust reads it): the case's id,
    GPU, architecture, engine preset, weight dtype, model kind and metric family."""
    from sim.pricing.trust import dtype_group, model_kind
    from sim.scenario.specs import get_gpu, get_model

    model = get_model(case.model)
    return [case.id, case.gpu, get_gpu(case.gpu).arch, case.engine, dtype_group(case.weights, model),
            model_kind(model), case.family]


def band_row(case: Case) -> list:
    """A scored held-out case's row: its keys and its signed relative error (4 decimals)."""
    return [*band_keys(case), round(float(case.error), 4)]


def bands_text(cases: list[Case], date: str) -> str:
    """The error bands file for the scored held-out ``cases``."""
    rows = [band_row(c) for c in cases if c.split == "holdout" and not math.isnan(c.predicted)]
    head = (f"# servesim's roofline against the held-out half of benchmarks/published/ (one row per case;\n"
            f"# error: predicted / published - 1). sim/pricing/trust.py turns it into each run's error band;\n"
            f"# summary: the median |error| and count per GPU, engine, dtype, model kind and metric, for reading.\n"
            f"# Written by `python benchmarks/published.py --write-bands` on {date}; do not edit by hand\n"
            f"# (tests/sim/pricing/test_error_bands_fresh.py checks it against the benchmark).\n")
    from sim.pricing.trust import GROUP, summary_rows

    summary = summary_rows([dict(zip(BAND_COLUMNS, r, strict=True)) for r in rows])
    body = yaml.safe_dump({"written": {"command": "python benchmarks/published.py --write-bands", "date": date},
                           "columns": list(BAND_COLUMNS), "cases": rows,
                           "summary_columns": [*GROUP, "median_abs_error", "cases"], "summary": summary},
                          sort_keys=False, default_flow_style=None, width=200)
    return head + body


def write_bands(cases: list[Case], path: Path = BANDS) -> Path:
    unscored = [c.id for c in cases if c.split == "holdout" and math.isnan(c.predicted)]
    if unscored:
        raise SystemExit(f"error: cannot write {path}: held-out cases not scored: {', '.join(unscored)}")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(bands_text(cases, time.strftime("%Y-%m-%d", time.gmtime())))
    tmp.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=["holdout", "fit", "all"], default="holdout")
    ap.add_argument("--format", choices=["table", "json"], default="table")
    ap.add_argument("--source", action="append", help="only this source id (repeatable)")
    ap.add_argument("--case", help="only cases whose id contains this text")
    ap.add_argument("--write-bands", action="store_true",
                    help=f"score every held-out case and write their errors to {BANDS.relative_to(ROOT)}")
    ap.add_argument("--include", action="append", choices=sorted(OPTIONAL_NEEDS), default=[],
                    help="also score the cases that need this (left out of the table and the error bands)")
    args = ap.parse_args(argv)
    if args.write_bands and (args.source or args.case or args.split != "holdout" or args.include):
        ap.error("--write-bands scores every held-out case: no --source, --case, --split or --include")
    cases = load_cases(args.source, frozenset(args.include))
    if SKIPPED:
        print(f"skipped {sum(SKIPPED.values())} cases that need what this harness cannot simulate yet: "
              + ", ".join(f"{k} {v}" for k, v in sorted(SKIPPED.items())), file=sys.stderr)
    if args.split != "all":
        cases = [c for c in cases if c.split == args.split]
    if args.case:
        cases = [c for c in cases if args.case in c.id]
    run(cases)
    if args.write_bands:
        print(f"wrote {write_bands(cases)}", file=sys.stderr)
    if args.format == "json":
        json.dump(report(cases), sys.stdout, indent=1)
        print()
    else:
        print_table(cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
