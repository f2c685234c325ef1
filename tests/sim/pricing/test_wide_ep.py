"""Wide expert parallelism with data-parallel attention (sim/pricing/wide_ep.py, the roofline's
DP / IMBALANCE / TBO terms, sim/scenario/memory.py): the busiest expert GPU, EPLB's copies, the
all-to-all over a node's links and its NICs, KV held per rank, two-batch overlap, and no step
priced below physics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.plan import StepShape
from sim.errors import ScenarioError
from sim.loops.run import simulate
from sim.pricing import RooflineCost
from sim.pricing.wide_ep import all_to_all_seconds_per_byte, expert_imbalance, expert_shares
from sim.scenario.load import load_scenario
from sim.scenario.specs import get_gpu, get_model
from sim.scenario.specs.gpus import LINKS
from sim.scenario.specs.models import DTYPE_BYTES
from tests.sim.helpers import scenario
from tests.sim.pricing.test_physical_floor import floor_seconds, shapes


def decode(batch: int, context: int) -> StepShape:
    return StepShape(batch, batch, 0, 0, batch, batch * context, batch, 0, 0)


def test_the_busiest_gpu_follows_the_routing_and_eplb_evens_it_out():
    uniform = expert_shares(256)
    assert expert_imbalance(uniform, 64) == pytest.approx(1.0)
    skewed = expert_shares(256, "zipf", 1.0, seed=3)
    in_order = expert_imbalance(skewed, 64)
    balanced = expert_imbalance(skewed, 64, eplb=True)
    copied = expert_imbalance(skewed, 64, redundant=64, eplb=True)
    assert in_order > balanced >= copied >= 1.0
    assert in_order > 1.5 and copied < 1.1
    one_hot = expert_shares(8, counts=[1, 0, 0, 0, 0, 0, 0, 0])
    assert expert_imbalance(one_hot, 4) == pytest.approx(4.0)  # one GPU takes every token
    # 5 copies of 0.2 on 4 GPUs: one holds two (0.4) against a mean of 0.25
    assert expert_imbalance(one_hot, 4, redundant=4, eplb=True) == pytest.approx(1.6)


def test_the_all_to_all_runs_at_the_nvlink_inside_a_node_and_the_nic_beyond():
    h100 = get_gpu("H100-SXM")
    assert all_to_all_seconds_per_byte(h100, 1) == 0.0
    assert all_to_all_seconds_per_byte(h100, 8) == pytest.approx(1 / h100.interconnect_bandwidth)
    nic = LINKS[h100.scale_out].bandwidth
    assert all_to_all_seconds_per_byte(h100, 72) == pytest.approx((64 / 71) / nic)  # 64 of 71 peers off-node
    nvl72 = get_gpu("GB200-NVL72")
    assert all_to_all_seconds_per_byte(nvl72, 72) == pytest.approx(1 / nvl72.interconnect_bandwidth)


def test_each_attention_rank_holds_only_its_own_requests_kv():
    tp = scenario(model="deepseek-v3", quantization={"weights": "fp8"},
                  hardware={"gpu": "H200", "tp": 8, "expert_parallel": True})
    dp = scenario(model="deepseek-v3", quantization={"weights": "fp8"},
                  hardware={"gpu": "H200", "tp": 8, "expert_parallel": True, "dp_attention": 8})
    # MLA's latent is whole on every GPU of a TP group: with 8 ranks of one GPU, 1/8 of it per token
    assert tp.memory.kv_bytes_per_token == pytest.approx(8 * dp.memory.kv_bytes_per_token)
    # but every rank holds the non-expert weights: more weight per GPU, so not quite 8x the tokens
    assert dp.memory.weight_bytes > tp.memory.weight_bytes
    assert 4 * tp.memory.num_blocks < dp.memory.num_blocks < 8 * tp.memory.num_blocks
    copies = scenario(model="deepseek-v3", quantization={"weights": "fp8"},
                      hardware={"gpu": "H200", "tp": 8, "expert_parallel": True, "dp_attention": 8,
                                "expert_load": {"eplb": True, "redundant_experts": 8}})
    m = copies.model_spec
    one_expert = m.group_params()["experts"] * DTYPE_BYTES["fp8"] / m.num_experts
    assert copies.memory.weight_bytes - dp.memory.weight_bytes == pytest.approx(8 * one_expert / 8)


def test_a_decode_step_splits_attention_over_the_ranks_and_pays_the_all_to_all():
    m, h100 = get_model("deepseek-v3"), get_gpu("H100-SXM")
    wide = RooflineCost(m, h100, tp=32, weight_dtype="fp8", expert_parallel=True, dp=32, engine="sglang")
    ops = wide.op_times(decode(512, 2000))
    assert ops["all_to_all"] > 0 and "allreduce" not in ops  # one GPU per rank: no all-reduce
    tbo = RooflineCost(m, h100, tp=32, weight_dtype="fp8", expert_parallel=True, dp=32, engine="sglang",
                       two_batch_overlap=True)
    s = decode(512, 2000)
    assert tbo.step_time(s) < wide.step_time(s)
    hidden = wide.step_time(s) - tbo.step_time(s)
    assert hidden == pytest.approx(min(ops["all_to_all"], sum(v for k, v in ops.items() if k != "all_to_all")
                                       - ops.get("layer_fixed", 0.0)), rel=1e-6)
    skewed = RooflineCost(m, h100, tp=32, weight_dtype="fp8", expert_parallel=True, dp=32, engine="sglang",
                          imbalance=1.8)
    prefill = StepShape(16384, 8, 16384, 16384 * 1024, 0, 0, 8, 0, 0)
    assert skewed.op_times(prefill)["moe_mlp"] > 1.5 * wide.op_times(prefill)["moe_mlp"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["deepseek-v3", "qwen3-235b-a22b", "kimi-k2", "qwen3-30b-a3b"]),
       gpu=st.sampled_from(["H100-SXM", "H200", "B200", "GB200-NVL72", "MI300X"]),
       layout=st.sampled_from([(8, 8), (16, 16), (32, 32), (16, 4), (64, 64)]),
       weights=st.sampled_from([None, "fp8", "fp4"]), kv=st.sampled_from([None, "fp8"]),
       tbo=st.booleans(), imbalance=st.sampled_from([1.0, 1.3]), s=shapes())
def test_no_wide_ep_step_is_priced_below_the_physical_floor(name, gpu, layout, weights, kv, tbo, imbalance, s):
    tp, dp = layout
    m, g = get_model(name), get_gpu(gpu)
    cost = RooflineCost(m, g, tp=tp, weight_dtype=weights, kv_dtype=kv, expert_parallel=True, dp=dp,
                        imbalance=imbalance, two_batch_overlap=tbo, engine="sglang")
    assert cost.step_time(s) >= floor_seconds(m, g, tp, weights, kv, s, dp)


@pytest.mark.parametrize("hardware,field,fragment", [
    ({"tp": 8, "dp_attention": 8}, "hardware.dp_attention", "expert_parallel"),
    ({"tp": 8, "expert_parallel": True, "dp_attention": 3}, "hardware.dp_attention", "divide"),
    ({"tp": 8, "expert_parallel": True, "two_batch_overlap": True}, "hardware.two_batch_overlap",
     "dp_attention > 1"),
    ({"tp": 8, "expert_parallel": True, "expert_load": {"counts": [1, 2]}}, "hardware.expert_load.counts",
     "one count per expert"),
    ({"tp": 8, "expert_parallel": True, "expert_load": {"eplb": True, "redundant_experts": 3}},
     "hardware.expert_load.redundant_experts", "evenly"),
])
def test_what_wide_ep_cannot_represent_is_refused_by_name(hardware, field, fragment):
    with pytest.raises(ScenarioError) as e:
        scenario(model="qwen3-30b-a3b", hardware={"gpu": "H100-SXM", **hardware})
    assert e.value.field == field and fragment in e.value.message
    with pytest.raises(ScenarioError) as e:  # a dense model has no experts to spread
        scenario(model="llama-3-8b", hardware={"gpu": "H100-SXM", "tp": 8, "expert_parallel": True,
                                               "dp_attention": 8})
    assert "MoE model" in e.value.message


def test_the_deepseek_wide_ep_scenario_runs_in_both_loops_with_identical_results():
    import pandas as pd

    sets = ["workload.num_requests=400"]
    simpy = simulate(load_scenario("scenarios/deepseek-v3-wide-ep.yaml", [*sets, "simulation.loop=simpy"]))
    compiled = simulate(load_scenario("scenarios/deepseek-v3-wide-ep.yaml", [*sets, "simulation.loop=compiled"]))
    pd.testing.assert_frame_equal(simpy.requests, compiled.requests, check_exact=True)
    pd.testing.assert_frame_equal(simpy.steps, compiled.steps, check_exact=True)
    assert simpy.summary["finished"] == 400 and any("dp_attention" in w for w in simpy.warnings)
    assert np.isfinite(compiled.summary["tpot_p50"])


def test_the_slowest_rank_computes_the_largest_prefill_row_whole():
    """A row is never split over attention ranks: one 8,192-token prompt is one rank's work while
    the others idle, where eight prompts of 1,024 spread evenly."""
    m, h100 = get_model("deepseek-v3"), get_gpu("H100-SXM")
    wide = RooflineCost(m, h100, tp=8, weight_dtype="fp8", expert_parallel=True, dp=8, engine="sglang")
    one = StepShape(8192, 1, 8192, 8192 * 8192 // 2, 0, 0, 1, 0, 0, max_prefill_row=8192)
    eight = StepShape(8192, 8, 8192, 8 * 1024 * 1024 // 2, 0, 0, 8, 0, 0, max_prefill_row=1024)
    a, b = wide.op_times(one), wide.op_times(eight)
    assert a["qkv_proj"] > 4 * b["qkv_proj"] and a["norms_and_rest"] == pytest.approx(8 * b["norms_and_rest"])
    assert a["attn_prefill"] > 8 * b["attn_prefill"]  # the whole row, and its longer causal context
    assert a["moe_mlp"] == pytest.approx(b["moe_mlp"])  # the experts see the same tokens either way
    assert wide.step_time(one) > wide.step_time(eight)
