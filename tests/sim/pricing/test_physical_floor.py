"""No priced step is faster than physics allows (issue 27): every step of every catalog model on
every GPU, engine preset, dtype and batch shape takes at least max(bytes it must move / peak HBM
bandwidth, FLOPs / peak tensor-core rate) on one GPU of the replica. The floor here is worked
out from the model's description alone, not from the pricing's parameter row."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.plan import StepShape
from sim.pricing import RooflineCost
from sim.scenario.engines import ENGINE_NAMES
from sim.scenario.specs import GPU_CATALOG, MODEL_CATALOG, get_gpu, get_model
from sim.scenario.specs.layers import KV_CACHED, WINDOWED
from sim.scenario.specs.models import DTYPE_BYTES

FASTEST = ("bf16", "fp16", "fp8", "int8", "fp4")


def floor_seconds(m, gpu, tp: int, weights: str | None, kv: str | None, s: StepShape, dp: int = 1) -> float:
    """Bytes: the non-expert weights, top-k experts per MoE layer (the fewest a token can touch),
    the LM head if a row samples, the KV cache the decode rows read (with ``dp`` attention ranks
    of tp / dp GPUs, a GPU reads its rank's share); FLOPs: each token through its active weights
    and the sampled rows through the LM head. At the datasheet's peaks."""
    tokens = s.num_tokens
    if tokens == 0:
        return 0.0
    h, gp = m.hidden_size, m.group_params()
    moe_layers = sum(g.count for g in m.groups if g.mlp == "moe")
    expert = m.mlp_matrices * h * m.expert_size
    nbytes = (gp["attention"] * DTYPE_BYTES[m.dtype_of("attention", weights)]
              + gp["mlp"] * DTYPE_BYTES[m.dtype_of("mlp", weights)]
              + moe_layers * m.experts_per_token * expert * DTYPE_BYTES[m.dtype_of("experts", weights)]) / tp
    rows = s.num_sampled + s.verify_tokens
    if rows:
        nbytes += m.vocab_size * h * DTYPE_BYTES[m.dtype] / tp
    for g in m.groups:
        if g.attention in KV_CACHED:
            per_token = g.count * m.kv_elements_per_layer(g.attention) * DTYPE_BYTES[kv or m.dtype]
            read = min(s.decode_context, s.decode_seqs * m.sliding_window) if g.attention in WINDOWED else \
                s.decode_context
            nbytes += per_token * read / dp / m.kv_shards(g.attention, tp // dp)
    active = gp["attention"] + gp["mlp"] + moe_layers * m.experts_per_token * expert
    flops = (2 * tokens * active + 2 * rows * m.vocab_size * h) / tp
    return max(nbytes / gpu.hbm_bandwidth, flops / max(gpu.peak_flops(d) for d in FASTEST))


@st.composite
def shapes(draw) -> StepShape:
    decodes = draw(st.integers(0, 1024))
    context = decodes * draw(st.integers(1, 131072)) if decodes else 0
    prefill_rows = draw(st.integers(0 if decodes else 1, 8))
    prefill = draw(st.integers(prefill_rows, 16384)) if prefill_rows else 0
    cached = draw(st.integers(0, 65536))
    attn = prefill * cached + prefill * prefill // max(prefill_rows, 1)
    verify = decodes * draw(st.sampled_from([0, 0, 1, 4]))
    return StepShape(decodes + prefill + verify, decodes + prefill_rows, prefill, attn, decodes, context,
                     decodes + prefill_rows, verify, 0)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(MODEL_CATALOG)), gpu=st.sampled_from(sorted(GPU_CATALOG)),
       engine=st.sampled_from(ENGINE_NAMES), weights=st.sampled_from([None, "fp8", "int8", "int4", "fp4"]),
       kv=st.sampled_from([None, "fp8"]), tp=st.sampled_from([1, 2, 4, 8]), ep=st.booleans(), s=shapes())
def test_no_step_is_priced_below_the_physical_floor(name, gpu, engine, weights, kv, tp, ep, s):
    m, g = get_model(name), get_gpu(gpu)
    cost = RooflineCost(m, g, tp=tp, weight_dtype=weights, kv_dtype=kv, engine=engine, expert_parallel=ep)
    floor = floor_seconds(m, g, tp, weights, kv, s)
    price = cost.step_time(s)
    assert price >= floor, (price, floor)
    assert price >= floor + cost.engine.step_overhead_s * (1 - 1e-12)  # the overhead comes on top of it


def test_deepseek_v3_decode_on_b200_reads_at_least_the_weights_it_touches():
    """The issue's case: on 8×B200 with the sglang or tensorrt-llm preset, a decode step of
    DeepSeek-V3 was priced at 0.73–0.98× the time to read the weights it touches."""
    m, b200 = get_model("deepseek-v3"), get_gpu("B200")
    for engine in ("sglang", "tensorrt-llm"):
        cost = RooflineCost(m, b200, tp=8, engine=engine)
        for batch in (1, 8, 64, 256):
            s = StepShape(batch, batch, 0, 0, batch, batch * 4096, batch)
            assert cost.step_time(s) > 1.2 * floor_seconds(m, b200, 8, None, None, s)


def test_the_floor_holds_even_where_the_operations_would_price_less():
    """The floor is enforced by the pricing itself: with every operation's coefficients zeroed
    (a formula that forgot its bytes) the step still costs the floor plus the engine overhead."""
    import numpy as np

    from sim.pricing import roofline as r

    m, h100 = get_model("qwen3-235b-a22b"), get_gpu("H100")
    cost = RooflineCost(m, h100, tp=8, engine="vllm")
    p = cost.params.copy()
    p[r.QKV_F:r.REST + 1] = 0.0
    p[r.LM_F], p[r.LM_B], p[r.DEC_ROW], p[r.LAYER_FIXED], p[r.COLL_LATENCY] = 0.0, 0.0, 0.0, 0.0, 0.0
    p[r.FLOPS], p[r.BANDWIDTH], p[r.LINK], p[r.WBYTES] = 1e300, 1e300, 1e300, 0.0  # the experts' GEMMs
    p[r.MEMO_N] = 0  # no memo: the zeroed coefficients are used
    s = StepShape(64, 64, 0, 0, 64, 64 * 3000, 64)
    vec = np.asarray(s.vectors()[0])
    ops = np.zeros(r.NUM_OPS)
    t = r.roofline_time(p, np.zeros(r.ROW_SIZE), vec, ops)
    floor = r.floor_time(p, vec)
    assert floor >= floor_seconds(m, h100, 8, None, None, s) > 0
    assert t == p[r.OVERHEAD] + p[r.ROW_OVERHEAD] * 64 + floor
