"""The two loops give identical results, bit for bit, per request, per step and in the summary
and warnings: the compiled loop (sim/loops/compiled.py) and the SimPy reference
(sim/loops/simpy_loop.py) call the same scheduling and pricing core, and take events in the
same order. Shipped-like cases for every feature, then random scenarios that combine them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.loops.run import simulate
from tests.sim.helpers import scenario, write_profile

PRESSURE = {"hardware__memory_utilization": 0.235,
            "workload__arrival": {"process": "poisson", "rate": 40},
            "workload__output_len": {"dist": "uniform", "min": 100, "max": 700}}
BURSTY = {"workload__arrival": {"process": "gamma", "rate": 15, "cv": 3.0}}
LOADS = {"light": {}, "pressure": PRESSURE, "bursty": BURSTY}
SHARED = {"workload__shared_prefix": {"num_prompts": 3, "length": 400},
          "workload__prompt_len": {"dist": "uniform", "min": 10, "max": 300}}
CONVERSATIONS = {"workload__arrival": {"process": "poisson", "rate": 4},
                 "workload__shared_prefix": {"num_prompts": 2, "length": 300},
                 "workload__prompt_len": {"dist": "lognormal", "mean": 300, "sigma": 0.8, "max": 1500},
                 "workload__output_len": {"dist": "uniform", "min": 10, "max": 200},
                 "workload__conversations": {"turns": {"dist": "uniform", "min": 2, "max": 6},
                                             "think_time_s": {"dist": "exponential", "mean": 5},
                                             "max_context": 6000}}
TINY = Path(__file__).resolve().parents[3] / "benchmarks" / "vllm_cpu" / "tiny_models"


def tiny(name: str, blocks: int, block: int, **fields) -> dict:
    """A tiny model of benchmarks/vllm_cpu/tiny_models/ under KV pressure (its own KV blocks)."""
    return {"model": {"hf_config": str(TINY / name / "config.json")}, "hardware__kv_blocks": blocks,
            "scheduler__block_size": block, "workload__prompt_len": {"dist": "uniform", "min": 50, "max": 1800},
            **PRESSURE, **fields}


def both_loops(**fields):
    reference = simulate(scenario(simulation={"loop": "simpy"}, **fields))
    compiled = simulate(scenario(simulation={"loop": "compiled"}, **fields))
    assert reference.loop == "simpy" and compiled.loop == "compiled"
    return reference, compiled


def assert_identical(reference, compiled):
    assert reference.warnings == compiled.warnings
    pd.testing.assert_frame_equal(reference.requests, compiled.requests, check_exact=True)
    pd.testing.assert_frame_equal(reference.steps, compiled.steps, check_exact=True)
    assert same(reference.summary, compiled.summary)
    assert reference.events == compiled.events


def same(a, b) -> bool:
    """Equal, with NaN equal to NaN (no TPOT for 1-token outputs), nested dicts included."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b or (a != a and b != b)


@pytest.mark.parametrize("policy", ["static", "continuous", "chunked-prefill"])
@pytest.mark.parametrize("load", LOADS)
@pytest.mark.parametrize("replicas", [1, 3])
def test_loops_agree_for_every_policy_and_load(policy, load, replicas):
    reference, compiled = both_loops(scheduler__policy=policy, replicas=replicas, **LOADS[load])
    assert_identical(reference, compiled)
    if load == "pressure" and policy != "static":
        assert compiled.summary["preemptions"] > 0


CASES = {
    "least-outstanding": {"replicas": 3, "router": {"policy": "least-outstanding"}, **PRESSURE},
    "least-kv-chunked": {"replicas": 3, "router": {"policy": "least-kv"},
                         "scheduler__policy": "chunked-prefill", **BURSTY},
    "heterogeneous": {"replica_groups": [
        {"count": 1, "hardware": {"gpu": "A100-80GB"}},
        {"count": 2, "hardware": {"gpu": "H200", "tp": 2},
         "scheduler": {"policy": "chunked-prefill", "chunk_size": 256}}],
        "router": {"policy": "least-outstanding"}, **PRESSURE},
    "tensor-parallel-fp8": {"model": "llama-3-70b", "hardware": {"gpu": "H100-SXM", "tp": 4},
                            "quantization": {"weights": "fp8", "kv_cache": "fp8"}, **BURSTY},
    # A burst: everyone arrives within a step, ties between arrivals and wake-ups.
    "burst": {"workload__num_requests": 60, "workload__arrival": {"process": "constant", "rate": 5000}},
    # prompt = chunk + 1: the last prompt token looks like a decode and samples the first token.
    "chunk-plus-one": {"scheduler__policy": "chunked-prefill", "scheduler__chunk_size": 256,
                       "scheduler__max_num_seqs": 64, "workload__prompt_len": {"dist": "fixed", "value": 257},
                       "workload__arrival": {"process": "poisson", "rate": 2}},
    # Requests that can never run are rejected, for each reason.
    "batch-tokens": {"scheduler__max_batched_tokens": 512,
                     "workload__prompt_len": {"dist": "uniform", "min": 16, "max": 900}, **PRESSURE},
    # Sliding-window layers keep only their window of a long request's blocks (Gemma-3: 52 of 62).
    "sliding-window": {"model": "gemma-3-27b", "hardware__kv_blocks": 900,
                       "workload__prompt_len": {"dist": "uniform", "min": 500, "max": 4000}, **PRESSURE},
    "sliding-window-chunked-swap": {"model": "gpt-oss-120b", "scheduler__policy": "chunked-prefill",
                                    "scheduler__preemption": "swap", "hardware__kv_blocks": 700,
                                    "workload__prompt_len": {"dist": "uniform", "min": 100, "max": 3000},
                                    **PRESSURE},
    # With prefix caching too: a shared block's windowed share is freed once every window has left it.
    "prefix-caching-sliding-window": {"model": "gemma-3-27b", "hardware__kv_blocks": 900,
                                      "scheduler__prefix_caching": True,
                                      "workload__shared_prefix": {"num_prompts": 3, "length": 1500},
                                      "workload__prompt_len": {"dist": "uniform", "min": 10, "max": 2500},
                                      **PRESSURE},
    "prefix-caching-sliding-window-chunked-swap": {
        "model": "gpt-oss-120b", "scheduler__policy": "chunked-prefill", "scheduler__preemption": "swap",
        "scheduler__prefix_caching": True, "hardware__kv_blocks": 700,
        "workload__shared_prefix": {"num_prompts": 3, "length": 400},
        "workload__prompt_len": {"dist": "uniform", "min": 100, "max": 3000}, **PRESSURE},
    # A hybrid model's state per running request from the KV blocks (vLLM V1), padded to the page,
    # through growth, preemption (recompute, swap), decode runs and the hand-off; or reserved apart.
    "hybrid-state-pool": tiny("nemotron-h-tiny", 60, 128),
    "hybrid-state-pool-chunked-swap": tiny("qwen3-next-tiny", 40, 640, scheduler__policy="chunked-prefill",
                                           scheduler__chunk_size=512, scheduler__preemption="swap"),
    "hybrid-state-reserved": tiny("nemotron-h-tiny", 60, 128, engine="sglang"),
    # A sliding window holds the tokens in flight during a prefill chunk (and speculative drafts).
    "sliding-window-prefill-chunks": tiny("gemma3-tiny", 40, 128, scheduler__policy="chunked-prefill",
                                          scheduler__chunk_size=512),
    "sliding-window-speculative": {"model": "gemma-3-27b", "hardware__kv_blocks": 900,
                                   "scheduler__policy": "chunked-prefill", "scheduler__chunk_size": 1024,
                                   "scheduler__speculative": {"method": "ngram", "num_tokens": 3,
                                                              "acceptance_rate": 0.6},
                                   "workload__prompt_len": {"dist": "uniform", "min": 500, "max": 4000}, **PRESSURE},
    "kv-capacity": {"hardware__kv_blocks": 30, "workload__prompt_len": {"dist": "uniform", "min": 16, "max": 900}},
    "too-long": {"workload__prompt_len": {"dist": "uniform", "min": 4000, "max": 9000},
                 "workload__num_requests": 40},
    "few-seats": {"scheduler__max_num_seqs": 4, "scheduler__watermark": 0.2, **PRESSURE},
    # vLLM V1's admission under chunked prefill: only when the whole prompt fits (the vllm preset)
    "admit-whole-prompt": {"scheduler__policy": "chunked-prefill", "scheduler__chunk_size": 256,
                           "scheduler__admit_whole_prompt": True, "scheduler__watermark": 0.0, **PRESSURE},
    # TensorRT-LLM's defaults: GUARANTEED_NO_EVICT and whole prompts beside the decodes (the presets)
    "reserve-output-whole-prompts": {"scheduler__policy": "chunked-prefill", "scheduler__chunk_size": 1024,
                                     "scheduler__reserve_output": True, "scheduler__split_prompts": False,
                                     **PRESSURE},
    "reserve-output-disaggregated": {"scheduler__policy": "chunked-prefill", "scheduler__reserve_output": True,
                                     "disaggregation": {"prefill": {"count": 1}, "decode": {"count": 2}},
                                     **PRESSURE},
    "classes": {"workload": {"num_requests": 200, "classes": [
        {"name": "chat", "slo": {"ttft_s": 0.5}, "arrival": {"process": "poisson", "rate": 14},
         "prompt_len": {"dist": "uniform", "min": 16, "max": 300},
         "output_len": {"dist": "uniform", "min": 1, "max": 100}},
        {"name": "batch", "arrival": {"process": "poisson", "rate": 6},
         "prompt_len": {"dist": "uniform", "min": 500, "max": 2000},
         "output_len": {"dist": "uniform", "min": 50, "max": 300}}]}},
}


FEATURES = {
    "static-batching": {"scheduler__policy": "static", "scheduler__batch_size": 8, **BURSTY},
    "prefix-caching": {"scheduler__prefix_caching": True, **SHARED, **PRESSURE},
    "prefix-caching-chunked": {"scheduler__prefix_caching": True, "scheduler__policy": "chunked-prefill",
                               **SHARED, **BURSTY},
    "swap": {"scheduler__preemption": "swap", **PRESSURE},
    "swap-chunked-prefix": {"scheduler__preemption": "swap", "scheduler__policy": "chunked-prefill",
                            "scheduler__prefix_caching": True, **SHARED, **PRESSURE},
    "speculative": {"scheduler__speculative": {"draft_model": "tiny-llama-12m", "num_tokens": 4,
                                               "acceptance_rate": 0.7}, **PRESSURE},
    "speculative-per-position": {"scheduler__speculative": {"method": "eagle",
                                                            "acceptance_rates": [0.9, 0.75, 0.5, 0.3, 0.1]},
                                 "scheduler__policy": "chunked-prefill", **PRESSURE},
    "speculative-vllm-per-position": {"replica_groups": [
        {"count": 1, "scheduler": {"speculative": {"method": "ngram", "accepted_per_position": [0.6, 0.3]}}},
        {"count": 1, "scheduler": {"speculative": {"draft_model": "tiny-llama-12m",
                                                   "acceptance_rates": [0.8, 0.7, 0.6, 0.5, 0.4, 0.3]}}}],
        "router": {"policy": "least-outstanding"}, **BURSTY},
    "pipeline": {"model": "llama-3-70b", "hardware": {"gpu": "H100-SXM", "tp": 2, "pp": 2},
                 "workload__arrival": {"process": "poisson", "rate": 8}},
    # each stage's fixed time per micro-batch (TensorRT-LLM 1.x's fitted one)
    "pipeline-stage-latency": {"model": "llama-3-70b", "hardware": {"gpu": "H100-SXM", "tp": 1, "pp": 4},
                               "engine": {"name": "tensorrt-llm", "request_overhead_s": 0.0},
                               "workload__arrival": {"process": "poisson", "rate": 8}},
    "moe-expert-parallel": {"model": "mixtral-8x7b", "hardware": {"gpu": "H100-SXM", "tp": 2,
                                                                   "expert_parallel": True}},
    # wide EP: 8 attention ranks, experts over 8 GPUs placed by EPLB under skewed routing, two-batch overlap
    "moe-wide-ep": {"model": "qwen3-30b-a3b", "hardware": {
        "gpu": "H100-SXM", "tp": 8, "expert_parallel": True, "dp_attention": 8, "two_batch_overlap": True,
        "expert_load": {"distribution": "zipf", "skew": 1.0, "eplb": True, "redundant_experts": 8}}, **BURSTY},
    # attention DP ranks under KV pressure with chunked prefill (preemptions on a rank of its own), each
    # request to the least loaded rank
    "moe-dp-ranks-pressure": {"model": "qwen3-30b-a3b", "hardware": {
        "gpu": "H100-SXM", "tp": 4, "expert_parallel": True, "dp_attention": 4, "kv_blocks": 1200,
        "dp_balance": "shortest-queue"},
        "scheduler": {"policy": "chunked-prefill", "chunk_size": 2048, "max_num_seqs": 128},
        "workload__prompt_len": {"dist": "uniform", "min": 50, "max": 1500}, **PRESSURE},
    # prefill and decode pools of attention DP ranks (the decode pool's ranks receive the KV caches)
    "disaggregated-dp-ranks": {"model": "qwen3-30b-a3b", "hardware": {
        "gpu": "H100-SXM", "tp": 4, "expert_parallel": True, "dp_attention": 4}, "disaggregation": {
        "prefill": {"count": 1}, "decode": {"count": 1, "hardware": {
            "gpu": "H100-SXM", "tp": 8, "expert_parallel": True, "dp_attention": 8, "kv_blocks": 2000}}},
        **PRESSURE},
    "disaggregated": {"disaggregation": {"prefill": {"count": 2}, "decode": {
        "count": 1, "hardware": {"memory_utilization": 0.235}}, "link": {"layerwise_overlap": True}}, **PRESSURE},
    # The hand-off sends a windowed model's last window, not every token (gpt-oss: W = 128); the
    # prefill replicas share cached prompts, and let go of them (and their windows) once sent.
    "disaggregated-sliding-window": {"model": "gpt-oss-20b", "hardware": {"gpu": "H100-SXM"}, "disaggregation": {
        "prefill": {"count": 2}, "decode": {"count": 1, "hardware": {"kv_blocks": 2500}}},
        "scheduler__prefix_caching": True, "workload__shared_prefix": {"num_prompts": 2, "length": 600},
        "workload__prompt_len": {"dist": "uniform", "min": 100, "max": 3000}, **PRESSURE},
    # selective: short prompts (and, while the prefill queue is long, any) prefilled where they
    # decode; the others' KV cache back to the decode replica chosen on arrival, over links that
    # carry one transfer at a time
    "disaggregated-selective": {"disaggregation": {
        "prefill": {"count": 1}, "decode": {"count": 2, "hardware": {"kv_blocks": 1500}},
        "local_prefill_tokens": 250, "max_prefill_queue": 4, "link": {"type": "ethernet"}},
        "scheduler__prefix_caching": True, "router": {"policy": "least-outstanding"}, **SHARED, **BURSTY},
    "disaggregated-hybrid-state": {**tiny("nemotron-h-tiny", 60, 128), "disaggregation": {
        "prefill": {"count": 2}, "decode": {"count": 1}}},
    "power-of-two": {"replicas": 4, "router": {"policy": "power-of-two"}, **BURSTY},
    "prefix-affinity": {"replicas": 3, "router": {"policy": "prefix-affinity", "balance_abs": 2},
                        "scheduler__prefix_caching": True, **SHARED, **BURSTY},
    "closed-loop": {"workload__arrival": {"process": "closed", "concurrency": 12, "think_time_s": 0.2}},
    "multi-step": {"scheduler__num_scheduler_steps": 8, **BURSTY},
    "multi-step-pressure": {"scheduler__num_scheduler_steps": 4, **PRESSURE},
    "engine-tensorrt-llm": {"engine": "tensorrt-llm", "model": "llama-3-70b", "hardware": {"tp": 2},
                            "quantization": {"weights": "fp8", "kv_cache": "fp8"}, **BURSTY},
    "closed-loop-rejects": {"workload__arrival": {"process": "closed", "concurrency": 5},
                            "workload__prompt_len": {"dist": "uniform", "min": 4000, "max": 9000}},
    # KV tiers below the GPU: blocks the prefix cache gives up go to CPU memory, then NVMe (both
    # small: they overflow), loaded back asynchronously (vLLM) or layer by layer under the step
    # (SGLang), or recomputed when too few; a shared store written and read by every replica.
    "kv-tiers-async": {"scheduler__prefix_caching": True, "scheduler__policy": "chunked-prefill",
                       "hardware__kv_blocks": 300, **CONVERSATIONS,
                       "kv_tiers": {"tiers": [{"medium": "cpu", "capacity_gb": 0.4},
                                              {"medium": "nvme", "capacity_gb": 0.6}]}},
    "kv-tiers-layerwise-threshold": {"scheduler__prefix_caching": True, "hardware__kv_blocks": 300,
                                     **CONVERSATIONS, "engine": "sglang",
                                     "kv_tiers": {"tiers": [{"medium": "cpu", "capacity_gb": 1}],
                                                  "min_load_tokens": 200}},
    "kv-tiers-shared-affinity": {"replicas": 3, "router": {"policy": "prefix-affinity", "balance_abs": 2},
                                 "scheduler__prefix_caching": True, "hardware__kv_blocks": 250, **CONVERSATIONS,
                                 "kv_tiers": {"tiers": [{"medium": "cpu", "capacity_gb": 0.3},
                                                        {"medium": "shared", "capacity_gb": 2}]}},
    "kv-tiers-round-robin-shared": {"replicas": 2, "scheduler__prefix_caching": True,
                                    "hardware__kv_blocks": 250, **CONVERSATIONS,
                                    "kv_tiers": {"tiers": [{"medium": "shared", "capacity_gb": 2,
                                                            "bandwidth_gb_s": 2}], "load": "layerwise"}},
    # the API server's time per request (RunTime.FRONTEND): arrivals, a closed loop's sends and a
    # static batch's timeout all move by it
    "request-overhead": {"engine": {"name": "vllm", "request_overhead_s": 0.03}, "replicas": 2,
                         "router": {"policy": "round-robin"}, **BURSTY},
    "request-overhead-closed-static": {"engine": {"name": "vllm-v0", "request_overhead_s": 0.02},
                                       "scheduler__policy": "static", "scheduler__batch_size": 8,
                                       "workload__arrival": {"process": "closed", "concurrency": 6,
                                                             "think_time_s": 0.05}},
    # llama.cpp's fixed slots: requests longer than a slot rejected, the slots' contexts as KV
    "slots": {"engine": "llama.cpp", "scheduler__max_num_seqs": 4, "scheduler__slot_context": 1024,
              "scheduler__chunk_size": 512, "workload__prompt_len": {"dist": "uniform", "min": 16, "max": 1200},
              **BURSTY},
}


@pytest.mark.parametrize("case", {**CASES, **FEATURES}, ids=str)
def test_loops_agree_on_every_feature(case):
    reference, compiled = both_loops(**{**CASES, **FEATURES}[case])
    assert_identical(reference, compiled)

# Routers on sampled load (sim/core/router_signals.py): refreshes, late samples, a router's own
# routing added, each router that reads load; decode runs stop before a refresh.
REFRESHES = {
    "least-kv-refresh-delay": {"replicas": 3, "router": {"policy": "least-kv", "refresh_s": 0.2, "delay_s": 0.5},
                               **PRESSURE},
    "least-kv-add-routed": {"replicas": 3, "router": {"policy": "least-kv", "refresh_s": 0.1, "add_routed": True},
                            "scheduler__policy": "chunked-prefill", **BURSTY},
    "least-outstanding-sampled-closed": {"replicas": 3, "router": {"policy": "least-outstanding", "refresh_s": 0.1},
                                         "workload__arrival": {"process": "closed", "concurrency": 12,
                                                               "think_time_s": 0.2}},
    "power-of-two-sampled": {"replicas": 4, "router": {"policy": "power-of-two", "refresh_s": 0.05, "delay_s": 0.01},
                             **BURSTY},
    "prefix-affinity-sampled": {"replicas": 3, "router": {"policy": "prefix-affinity", "balance_abs": 2,
                                                          "refresh_s": 0.03},
                                "scheduler__prefix_caching": True, **SHARED, **BURSTY},
    "disaggregated-sampled": {"disaggregation": {"prefill": {"count": 2}, "decode": {
        "count": 2, "hardware": {"memory_utilization": 0.235}}}, "router": {"policy": "least-kv", "delay_s": 0.02},
        **PRESSURE},
    # Quiet engines decoding between arrivals: the compiled loop's decode runs must stop before a
    # refresh, or the sample reads steps the SimPy loop has not taken (both cases differ then).
    "decode-runs-stop-at-refreshes-kv": {"replicas": 2, "router": {"policy": "least-kv", "refresh_s": 0.7},
                                         "workload__num_requests": 40,
                                         "workload__arrival": {"process": "poisson", "rate": 2},
                                         "workload__output_len": {"dist": "uniform", "min": 100, "max": 800}},
    "decode-runs-stop-at-refreshes-outstanding": {
        "replicas": 3, "router": {"policy": "least-outstanding", "refresh_s": 0.3}, "workload__num_requests": 40,
        "workload__arrival": {"process": "poisson", "rate": 3},
        "workload__output_len": {"dist": "uniform", "min": 20, "max": 400}},
}


@pytest.mark.parametrize("case", REFRESHES)
def test_loops_agree_with_routers_on_sampled_load(case):
    assert_identical(*both_loops(**REFRESHES[case]))


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_loops_agree_on_random_scenarios_with_sampled_load(profiles, data):
    fields = data.draw(scenarios(profiles))
    if fields["router"]["policy"] == "round-robin":
        fields["router"]["policy"] = "least-kv"
    refresh = data.draw(st.sampled_from([0.0, 0.01, 0.05, 0.3]))
    fields["router"].update(refresh_s=refresh)
    if refresh:
        fields["router"].update(delay_s=data.draw(st.sampled_from([0.0, 0.004, 0.7])),
                                add_routed=data.draw(st.booleans()))
    assert_identical(*both_loops(**fields))


SHIPPED_PROFILE = Path(__file__).resolve().parents[3] / "calibration" / "profiles" / "a100-llama-2-70b-tp2.json"
PROFILES = {  # profile settings, scenario fields
    "ops": ({}, PRESSURE),
    "ops-chunked": ({}, {"scheduler__policy": "chunked-prefill", **BURSTY}),
    "step-fit": ({"mode": "step"}, PRESSURE),
    "step-fit-chunked": ({"mode": "step", "reach": 300}, {"scheduler__policy": "chunked-prefill", **PRESSURE}),
    "ops-tp2-heterogeneous": ({"tp": 2}, {"replica_groups": [
        {"count": 1, "hardware": {"gpu": "A100-80GB", "tp": 2}},
        {"count": 2, "hardware": {"gpu": "H200", "tp": 2}, "scheduler": {"policy": "chunked-prefill"}}],
        "router": {"policy": "least-kv"}, **BURSTY}),
    # Only the linear table: every other term is the roofline's.
    "linear-only-tp2": ({"tables": (), "fits": (), "tp": 2}, {"hardware": {"gpu": "H100-SXM", "tp": 2}, **PRESSURE}),
    "tables-no-fits": ({"fits": ()}, {"replicas": 2, **BURSTY}),
    "fits-no-tables": ({"tables": ()}, {"scheduler__policy": "chunked-prefill", **PRESSURE}),
    "wide-range": ({"reach": 100_000}, PRESSURE),
}


@pytest.mark.parametrize("case", PROFILES, ids=str)
def test_compiled_loop_prices_profiles_as_simpy_does(case, tmp_path):
    settings_, fields = PROFILES[case]
    path = write_profile(tmp_path / "p.json", **settings_)
    reference, compiled = both_loops(cost={"model": "profile", "profile": path}, **fields)
    assert_identical(reference, compiled)
    extrapolated = [w for w in compiled.warnings if "extrapolated" in w]
    assert bool(extrapolated) == (case != "wide-range"), compiled.warnings


def test_compiled_loop_prices_the_shipped_vidur_profile():
    reference, compiled = both_loops(model="llama-2-70b", hardware={"gpu": "A100-80GB", "tp": 2},
                                     cost={"model": "profile", "profile": str(SHIPPED_PROFILE)},
                                     scheduler__policy="chunked-prefill", **BURSTY)
    assert_identical(reference, compiled)
    roofline = simulate(scenario(model="llama-2-70b", hardware={"gpu": "A100-80GB", "tp": 2},
                                 scheduler__policy="chunked-prefill", **BURSTY))
    assert roofline.steps["duration"].sum() != compiled.steps["duration"].sum()  # the profile priced it


def test_rejection_reasons_are_all_exercised():
    reasons = set()
    for case in ("batch-tokens", "kv-capacity", "too-long"):
        _, compiled = both_loops(**CASES[case])
        reasons |= set(compiled.requests["reject_reason"]) - {""}
    assert len(reasons) == 3, reasons


def test_auto_picks_the_compiled_loop_and_is_deterministic():
    a = simulate(scenario(**PRESSURE))
    b = simulate(scenario(**PRESSURE))
    assert a.loop == "compiled"
    assert_identical(a, b)


@pytest.mark.parametrize("policy", ["continuous", "chunked-prefill"])
@pytest.mark.parametrize("priorities", [(0, 1), (5, -2), (1, 1)])
def test_classes_with_priorities_are_served_alike(policy, priorities):
    classes = [dict(c, priority=p) for c, p in zip(CASES["classes"]["workload"]["classes"], priorities,
                                                    strict=True)]
    classes.append({**classes[0], "name": "bulk", "priority": 3})
    fields = {"workload": {"num_requests": 400, "classes": classes}, "scheduler__policy": policy,
              "replicas": 2, "router": {"policy": "least-outstanding"},
              "hardware__memory_utilization": 0.22}  # less KV than PRESSURE leaves (GiB cards): preemptions
    reference, compiled = both_loops(**fields)
    assert_identical(reference, compiled)
    if policy == "continuous":  # the queue is busy enough for its order to matter
        assert compiled.summary["preemptions"] > 0
        r = compiled.requests
        waits = (r["first_scheduled"] - r["arrival"]).groupby(r["class"]).mean()
        if priorities[0] < priorities[1]:
            assert waits["chat"] < waits["batch"]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    folder = tmp_path_factory.mktemp("profiles")
    return {mode: write_profile(folder / f"{mode}.json", mode=mode, reach=reach)
            for mode, reach in (("ops", 512), ("step", 256))}


@st.composite
def scenarios(draw, profiles):
    """Random settings that combine the features (as far as they go together)."""
    policy = draw(st.sampled_from(["static", "continuous", "chunked-prefill"]))
    paged = policy != "static"
    max_num_seqs = draw(st.sampled_from([2, 8, 64, 256]))
    f = {"seed": draw(st.integers(0, 1000)), "scheduler__policy": policy,
         "scheduler__max_num_seqs": max_num_seqs, "scheduler__chunk_size": max(512, max_num_seqs),
         "scheduler__block_size": draw(st.sampled_from([8, 16, 32])),
         "scheduler__watermark": draw(st.sampled_from([0.0, 0.01, 0.1])),
         "scheduler__admit_whole_prompt": draw(st.booleans()),
         "scheduler__reserve_output": draw(st.booleans()),
         "scheduler__split_prompts": draw(st.booleans()),
         "scheduler__batch_size": draw(st.sampled_from([1, 4, 16])),
         "hardware__memory_utilization": draw(st.sampled_from([0.23, 0.25, 0.3, 0.9])),
         "workload__num_requests": 60,
         "workload__prompt_len": {"dist": "uniform", "min": 1, "max": draw(st.integers(20, 3000))},
         "workload__output_len": {"dist": "uniform", "min": 1, "max": draw(st.integers(1, 800))}}
    arrival = draw(st.sampled_from(["poisson", "gamma", "closed"]))
    rate = draw(st.sampled_from([2.0, 20.0, 80.0]))
    f["workload__arrival"] = ({"process": "closed", "concurrency": draw(st.integers(1, 20)),
                               "think_time_s": draw(st.sampled_from([0.0, 0.05]))} if arrival == "closed"
                              else {"process": arrival, "rate": rate, **({"cv": 2.5} if arrival == "gamma" else {})})
    layout = draw(st.sampled_from(["replicas", "groups", "disaggregated", "pipeline"]))
    if layout == "disaggregated" and not paged:
        layout = "replicas"
    if layout == "replicas":
        f["replicas"] = draw(st.integers(1, 3))
    elif layout == "groups":
        f["replica_groups"] = [{"count": 1, "hardware": {"gpu": "A100-80GB"}},
                               {"count": draw(st.integers(1, 2)), "hardware": {"gpu": "H200", "tp": 2}}]
    elif layout == "disaggregated":
        f["disaggregation"] = {"prefill": {"count": draw(st.integers(1, 2))}, "decode": {"count": 1},
                               "link": {"layerwise_overlap": draw(st.booleans())}}
    else:
        f["model"] = "llama-3-70b"
        f.pop("hardware__memory_utilization")
        f["hardware"] = {"gpu": "H100-SXM", "tp": 2, "pp": 2, "kv_blocks": draw(st.sampled_from([200, 5000]))}
    f["router"] = {"policy": draw(st.sampled_from(["round-robin", "least-outstanding", "least-kv", "power-of-two",
                                                   "prefix-affinity"])), "balance_abs": draw(st.integers(0, 8))}
    f["scheduler__prefix_caching"] = False  # the preset's default (vLLM V1: on) drawn, not taken
    if draw(st.booleans()):  # the API server's time per request
        f["engine"] = {"name": "vllm", "request_overhead_s": draw(st.sampled_from([0.01, 0.2]))}
    if paged and draw(st.booleans()):
        f["scheduler__prefix_caching"] = True
        if arrival != "closed" or draw(st.booleans()):
            f["workload__shared_prefix"] = {"num_prompts": draw(st.integers(1, 4)),
                                            "length": draw(st.sampled_from([64, 400]))}
    if paged and draw(st.booleans()):
        f["scheduler__preemption"] = "swap"
    if paged and draw(st.integers(0, 3)) == 0:
        k = draw(st.integers(1, 5))
        f["scheduler__speculative"] = {"draft_model": "tiny-llama-12m", "num_tokens": k}
        if draw(st.booleans()):
            f["scheduler__speculative"]["acceptance_rate"] = draw(st.sampled_from([0.0, 0.5, 0.9]))
        else:  # a rate per position, as the engines report them
            f["scheduler__speculative"]["acceptance_rates"] = draw(st.lists(
                st.sampled_from([0.0, 0.3, 0.6, 0.95]), min_size=k, max_size=k))
    cost = draw(st.sampled_from(["roofline", "roofline", "ops", "step"]))
    if cost != "roofline" and layout in ("replicas", "disaggregated"):  # the profiles are tp=1
        f["cost"] = {"model": "profile", "profile": profiles[cost]}
    if layout in ("replicas", "disaggregated") and "cost" not in f and draw(st.booleans()):
        # windowed layers (gpt-oss W = 128, gemma3-tiny W = 256): the cap, tokens in flight, loose cached
        # blocks, the hand-off; a hybrid's state from the blocks (nemotron-h-tiny, vLLM V1)
        f["model"] = draw(st.sampled_from(["gpt-oss-20b", "gpt-oss-20b", *(
            {"hf_config": str(TINY / name / "config.json")} for name in ("gemma3-tiny", "nemotron-h-tiny"))]))
        f.pop("hardware__memory_utilization")
        f["hardware__kv_blocks"] = draw(st.sampled_from([400, 3000]))
    plain = "hardware__kv_blocks" not in f and layout != "pipeline"  # no windowed or state layers, pp 1
    if f.get("scheduler__prefix_caching") and plain and draw(st.booleans()):  # KV tiers below the GPU
        tiers = [{"medium": "cpu", "capacity_gb": draw(st.sampled_from([0.05, 2.0]))}]
        if draw(st.booleans()):
            tiers.append({"medium": "shared", "capacity_gb": draw(st.sampled_from([0.1, 8.0])),
                          "bandwidth_gb_s": draw(st.sampled_from([0.5, 50.0]))})
        f["kv_tiers"] = {"tiers": tiers, "write": draw(st.sampled_from(["through", "back"])),
                         "load": draw(st.sampled_from(["async", "layerwise"])),
                         "min_load_tokens": draw(st.sampled_from([0, 0, 100]))}
    if layout == "disaggregated" and draw(st.booleans()):  # selective: short prompts prefilled on decode
        f["disaggregation"]["local_prefill_tokens"] = draw(st.sampled_from([0, 200, 1000]))
        if draw(st.booleans()):
            f["disaggregation"]["max_prefill_queue"] = draw(st.sampled_from([0, 2]))
    if arrival != "closed" and draw(st.integers(0, 3)) == 0:  # traffic classes with priorities
        base = {k.removeprefix("workload__"): f.pop(k) for k in list(f) if k.startswith("workload__")}
        base.pop("num_requests")
        f["workload"] = {"num_requests": 60, "classes": [
            {**base, "name": "a", "priority": draw(st.integers(-1, 1))},
            {**base, "name": "b", "priority": draw(st.integers(-1, 1))}]}
    return f


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_loops_agree_on_random_scenarios(profiles, data):
    fields = data.draw(scenarios(profiles))
    assert_identical(*both_loops(**fields))


@pytest.mark.parametrize("output", [64, 65, 66, 129, 130, 131, 700])
def test_long_decode_runs_are_cut_and_resumed_with_the_same_results(output, monkeypatch):
    """Long answers on a quiet engine: the compiled loop commits decode steps in runs of at most
    RUN_STEPS and resumes; the SimPy loop steps one by one. Answers ending at, just before and
    just after a run's last step."""
    import sim.loops.compiled as compiled
    from sim.loops.decode_runs import RUN_STEPS
    from sim.loops.events import K_JUMPED, K_STEPS

    loops = []
    run = compiled.run_compiled

    def keep(*args, **kwargs):
        loops.append(run(*args, **kwargs))
        return loops[-1]

    monkeypatch.setattr(compiled, "run_compiled", keep)
    reference, fast = both_loops(workload__num_requests=3, workload__arrival={"process": "constant", "rate": 0.01},
                                 workload__output_len={"dist": "fixed", "value": output})
    assert_identical(reference, fast)
    jumped, steps = int(loops[0].k[K_JUMPED]), int(loops[0].k[K_STEPS])
    assert jumped >= 3 * min(output - 2, RUN_STEPS)  # every answer's decodes went in runs
    assert steps - jumped >= 3 * (output // (RUN_STEPS + 1))  # a plain step after each full run


POWER_CAPS = {  # a GPU power cap slows the steps that would draw more (sim/pricing/power.py)
    "cap-prefill-heavy": {"hardware__power_cap_w": 350, "scheduler__policy": "chunked-prefill", **PRESSURE},
    "cap-pipeline-heterogeneous": {"replica_groups": [
        {"count": 1, "hardware": {"gpu": "H100-SXM", "tp": 2, "pp": 2, "power_cap_w": 300}},
        {"count": 1, "hardware": {"gpu": "A100-80GB", "tp": 4, "power_cap_w": 250}}],
        "model": "llama-3-70b", "router": {"policy": "least-outstanding"}, **BURSTY},
}


@pytest.mark.parametrize("case", POWER_CAPS, ids=str)
def test_loops_agree_under_a_power_cap(case):
    reference, compiled = both_loops(**POWER_CAPS[case])
    assert_identical(reference, compiled)
    fields = POWER_CAPS[case]
    uncapped = simulate(scenario(**{k: v for k, v in fields.items() if k != "hardware__power_cap_w"})) \
        if "hardware__power_cap_w" in fields else None
    if uncapped is not None:  # the cap slowed some steps
        assert compiled.steps["duration"].sum() > uncapped.steps["duration"].sum()


def test_loops_agree_on_a_profile_under_a_power_cap(tmp_path):
    path = write_profile(tmp_path / "p.json")
    reference, compiled = both_loops(cost={"model": "profile", "profile": path}, hardware__power_cap_w=300,
                                     **PRESSURE)
    assert_identical(reference, compiled)


SPIKE = {"workload__num_requests": 250, "hardware__memory_utilization": 0.3,
         "workload__arrival": {"process": "poisson", "rate": {"segments": [
             {"duration_s": 2, "rate": 5}, {"duration_s": 3, "rate": 60}, {"duration_s": 40, "rate": 4}]}}}
FAST_SCALE = {"interval_s": 0.5, "cold_start_s": 1.0, "scale_down_stabilization_s": 1.5}
AUTOSCALE = {
    "autoscale-queue": {"autoscale": {"max_replicas": 4, "policy": "queue", "target": 2, **FAST_SCALE},
                        "scheduler__max_num_seqs": 8, **SPIKE},
    "autoscale-kv-least-kv-chunked": {"autoscale": {"max_replicas": 3, "policy": "kv", "target": 0.3, **FAST_SCALE},
                                      "router": {"policy": "least-kv"}, "scheduler__policy": "chunked-prefill",
                                      **SPIKE},
    "autoscale-sla-trend-prefix-affinity": {
        "autoscale": {"min_replicas": 2, "max_replicas": 4, "policy": "sla", "forecast": "trend", "target": 0.5,
                      **FAST_SCALE},
        "router": {"policy": "prefix-affinity", "balance_abs": 2}, "scheduler__prefix_caching": True,
        "slo": {"tpot_s": 0.03}, **SHARED, **SPIKE},
    # two spikes: a replica still provisioning is cancelled, a draining one serves again
    "autoscale-cancel-and-reactivate-power-of-two": {
        "autoscale": {"max_replicas": 4, "target": 1, "interval_s": 0.5, "provisioning_s": 2.0, "cold_start_s": 0,
                      "scale_down_stabilization_s": 0.0},
        "router": {"policy": "power-of-two"}, "scheduler__max_num_seqs": 8, **SPIKE,
        "workload__arrival": {"process": "poisson", "rate": {"segments": [
            {"duration_s": 1, "rate": 5}, {"duration_s": 1, "rate": 40}, {"duration_s": 2, "rate": 0.2},
            {"duration_s": 1, "rate": 40}, {"duration_s": 40, "rate": 3}]}}},
}


@pytest.mark.parametrize("case", AUTOSCALE, ids=str)
def test_loops_agree_on_autoscaling(case):
    reference, compiled = both_loops(**AUTOSCALE[case])
    assert_identical(reference, compiled)
    pd.testing.assert_frame_equal(reference.fleet, compiled.fleet, check_exact=True)
    assert compiled.summary["autoscale"]["scale_changes"] >= 2  # the fleet grew and shrank
