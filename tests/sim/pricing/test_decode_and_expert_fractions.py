"""Decode attention streams the KV cache at its own share of the HBM bandwidth
(``attn_decode_hbm_fraction``), and the experts' grouped GEMMs run at their own share of the GEMM
plateau (``moe_gemm_fraction``), each per GPU architecture (sim/scenario/data/calibrated.yaml)."""

from __future__ import annotations

import pytest

from sim.core.plan import StepShape
from sim.pricing import RooflineCost
from sim.scenario.engines import EngineCost
from sim.scenario.specs import efficiency, get_gpu, get_model

H100, B200 = get_gpu("H100-SXM"), get_gpu("B200")
NONE = EngineCost()


def decode(batch, ctx):
    return StepShape(batch, batch, 0, 0, batch, batch * ctx, batch)


def test_decode_attention_reads_the_kv_cache_at_its_own_share_of_hbm():
    m = get_model("llama-3-8b")
    cost = RooflineCost(m, H100, engine=NONE)
    b, ctx = 256, 2000
    kv_bytes = b * ctx * m.num_layers * 2 * m.num_kv_heads * m.head_dim * 2  # K and V, bf16
    attn = efficiency.attention(H100)
    assert attn["decode_hbm_fraction"] != efficiency.hbm_fraction(H100)  # fitted apart from the weights'
    rows = b * m.num_layers * attn["decode_row_s"]
    expected = kv_bytes / (H100.hbm_bandwidth * attn["decode_hbm_fraction"]) + rows
    assert cost.op_times(decode(b, ctx))["attn_decode"] == pytest.approx(expected, rel=1e-9)


def test_a_scenarios_memory_efficiency_sets_both_shares():
    m = get_model("llama-3-8b")
    cost = RooflineCost(m, H100, engine=NONE, memory_efficiency=0.5)
    b, ctx = 64, 1000
    kv_bytes = b * ctx * m.num_layers * 2 * m.num_kv_heads * m.head_dim * 2
    rows = b * m.num_layers * efficiency.attention(H100)["decode_row_s"]
    assert cost.op_times(decode(b, ctx))["attn_decode"] == pytest.approx(
        kv_bytes / (H100.hbm_bandwidth * 0.5) + rows, rel=1e-9)


def test_grouped_expert_gemms_compute_at_their_share_of_the_plateau():
    """A prefill of 8192 tokens through Mixtral's experts on B200 is compute-bound: its expert
    GEMMs take FLOPs / (peak · plateau · moe_gemm_fraction), up to the ridge's overlap."""
    m = get_model("mixtral-8x7b")
    assert efficiency.moe_gemm_fraction(B200) < 1.0
    n = 8192
    shape = StepShape(n, 1, n, n * n, 0, 0, 1)
    with_fraction = RooflineCost(m, B200, engine=NONE).op_times(shape)["moe_mlp"]
    curve = efficiency.gemm_curve(B200, "bf16")
    flops = 2 * n * m.experts_per_token * m.mlp_matrices * m.hidden_size * m.expert_size * m.num_layers
    compute = flops / (B200.peak_flops("bf16") * curve.peak_fraction * efficiency.moe_gemm_fraction(B200))
    assert compute <= with_fraction <= compute * (1 + curve.overlap)


def test_an_architecture_without_a_fitted_share_takes_the_weights_and_the_plateau():
    l40s = get_gpu("L40S")  # the default row: nothing fitted apart
    assert efficiency.attention(l40s)["decode_hbm_fraction"] == efficiency.hbm_fraction(l40s)
    assert efficiency.moe_gemm_fraction(l40s) == 1.0
