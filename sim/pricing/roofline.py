"""The roofline cost model: each operation of a step from its FLOPs and its bytes (a smooth roofline).

Works for any model and GPU in the catalogs with no profiling. The model is a parameter row
(``roofline_params``: per-token coefficients worked out once from the specs) and one compiled
function of a step's shape (``roofline_ops``), which every loop and every Python caller use.
The time is that of one batch through the whole model; a pipelined replica splits it over
its stages.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sim.core.jit import entry, jit, leaf
from sim.core.plan import (
    DECODE_CONTEXT,
    DECODE_SEQS,
    MAX_PREFILL_ROW,
    NUM_SAMPLED,
    NUM_SEQS,
    NUM_TOKENS,
    PREFILL_ATTN,
    PREFILL_TOKENS,
    SHAPE_SIZE,
    SWAP_TOKENS,
    VERIFY_TOKENS,
    StepShape,
)
from sim.scenario.engines import DEFAULT_ENGINE, EngineCost, engine_cost
from sim.scenario.specs import GpuSpec, ModelSpec, efficiency
from sim.scenario.specs.drafts import draft_spec
from sim.scenario.specs.layers import KV_CACHED, STATEFUL, WINDOWED
from sim.scenario.specs.models import DTYPE_BYTES, WEIGHT_GROUPS, math_dtype

NO_OVERHEAD = EngineCost()
BUS_FRACTION = 0.8  # an all-reduce's bus bandwidth as a share of the link's (nccl-tests busbw on NVLink)

# The parameter row (float64). A GEMM op of x tokens computes for c = F·x (at the plateau efficiency)
# and streams its weights and activations for m = B0 + B1·x; it takes (c^k + m^k)^(1/k): loads and
# math overlap imperfectly near the ridge, where it loses a factor 2^(1/k) = 1 + overlap, and the
# loss fades away from it (OVERLAP holds k; 0: max(c, m)). See efficiency.GemmCurve. Coefficients
# are sums over the model's layer groups (sim/scenario/specs/layers.py); SW_* are those of the
# sliding-window (and chunked) layers, which attend to at most WINDOW keys per query; STATE_* those
# of linear-attention / SSM layers (a fixed state per request); FL_* the physical floor's bytes and
# FLOPs in seconds at the GPU's datasheet peaks (see _floor).
(OVERHEAD, QKV_F, QKV_B0, QKV_B1, O_F, O_B0, O_B1, MLP_F, MLP_B0, MLP_B1, PRE_F, PRE_B, DEC_F, DEC_B, REST,
 LM_F, LM_B, TP, LAYERS, HIDDEN, ABYTES, LINK, COLL_LATENCY, IS_MOE, EXPERTS, TOPK, EXPERT_PARAMS, WBYTES,
 FLOPS, BANDWIDTH, EXPERT_PARALLEL, KV_TOKEN_GPU, HOST_BW, OVERLAP, LM_OVERLAP, ROW_OVERHEAD, LAYER_FIXED,
 DEC_ROW, EAGER_FIXED, MOE_LAYERS, ALLREDUCES, ATTN_LAYERS, SW_PRE_F, SW_PRE_B, SW_DEC_F, SW_DEC_B, WINDOW,
 STATE_TOKEN_F, STATE_SEQ_B, FL_WEIGHTS, FL_EXPERT, FL_LM_B, FL_LM_F, FL_TOKEN_F, FL_CTX_B, FL_CTX_F,
 FL_SW_CTX_B, FL_SW_CTX_F, FL_PAIR_F, FL_SW_PAIR_F, FL_STATE_B, FL_STATE_F, FL_KV_WRITE, MEMO_N,
 DP, IMBALANCE, TBO, A2A_TOKEN_S, A2A_LATENCY) = range(69)
NUM_PARAMS = 69
# Wide expert parallelism (sim/pricing/wide_ep.py): DP attention ranks (each computing 1/DP of the
# step's tokens and context with TP / DP GPUs), the busiest expert GPU's load over the mean
# (IMBALANCE), two-batch overlap (TBO), and the dispatch + combine all-to-all's seconds per token
# and latency per MoE layer.
# Decode steps repeat a few token counts millions of times, and each GEMM's smooth maximum costs
# two pow calls. The row ends with a memo: for 0 to MEMO_N - 1 tokens, the seconds of the
# operations that depend on the token count alone (OP_QKV to OP_MOE_ROUTER, then the LM head for
# as many sampled rows), made by the same functions, so reading them gives the same bits as
# computing them.
GEMM_MEMO = 512
MEMO = NUM_PARAMS
MEMO_WIDTH = 6
ROW_SIZE = MEMO + MEMO_WIDTH * GEMM_MEMO

# Operations, in the order a step's time adds them up (decode attention last).
(OP_QKV, OP_O, OP_MLP, OP_MOE_MLP, OP_MOE_ROUTER, OP_ATTN_PREFILL, OP_NORMS, OP_LM_HEAD, OP_ALLREDUCE,
 OP_ALL_TO_ALL, OP_SWAP, OP_DRAFT, OP_LAYER_FIXED, OP_ATTN_DECODE) = range(14)
NUM_OPS = 14
OP_NAMES = ("qkv_proj", "o_proj", "mlp", "moe_mlp", "moe_router", "attn_prefill", "norms_and_rest", "lm_head",
            "allreduce", "all_to_all", "swap", "draft", "layer_fixed", "attn_decode")


class _Rates:
    """A replica's achievable and peak rates per weight dtype."""

    def __init__(self, gpu: GpuSpec, compute_efficiency: float | None, memory_efficiency: float | None):
        self.gpu, self.ce = gpu, compute_efficiency
        self.bw = gpu.hbm_bandwidth * (memory_efficiency or efficiency.hbm_fraction(gpu))

    def flops(self, dtype: str) -> float:
        md = math_dtype(dtype)
        return self.gpu.peak_flops(md) * (self.ce or efficiency.gemm_curve(self.gpu, md).peak_fraction)


def roofline_params(model: ModelSpec, gpu: GpuSpec, *, tp: int = 1, pp: int = 1,
                    compute_efficiency: float | None = None, memory_efficiency: float | None = None,
                    engine: EngineCost = NO_OVERHEAD, weight_dtype: str | None = None,
                    kv_dtype: str | None = None, expert_parallel: bool = False, dp: int = 1,
                    imbalance: float = 1.0, two_batch_overlap: bool = False) -> np.ndarray:
    """The parameter row of one replica: per-token coefficients worked out once from the specs,
    the GPU's efficiencies (``compute_efficiency``/``memory_efficiency`` replace the plateau of
    its GEMM curve and its HBM share) and the engine's overheads. ``dp`` > 1: attention (and the
    dense layers, the LM head) run as ``dp`` data-parallel ranks of ``tp / dp`` GPUs, the experts
    over all ``tp`` (sim/pricing/wide_ep.py); ``imbalance``: the busiest expert GPU's load over
    the mean; ``two_batch_overlap``: the all-to-all hides behind the other half-batch's compute."""
    p = np.zeros(ROW_SIZE)
    kvdtype = kv_dtype or model.dtype
    wdtype = model.dtype_of("attention", weight_dtype)
    gemm, head = efficiency.gemm_curve(gpu, math_dtype(wdtype)), efficiency.gemm_curve(gpu, model.dtype)
    attn = efficiency.attention(gpu)
    rates = _Rates(gpu, compute_efficiency, memory_efficiency)
    head_flops = gpu.peak_flops(model.dtype) * (compute_efficiency or head.peak_fraction)
    attn_flops = gpu.peak_flops(kvdtype) * attn["prefill_fraction"]  # attention math in the KV dtype
    bw = rates.bw
    kv_bw = gpu.hbm_bandwidth * (memory_efficiency or attn["decode_hbm_fraction"])  # decode's KV reads
    abytes = DTYPE_BYTES[model.dtype]
    L, h, m = model.num_layers, model.hidden_size, model
    act_b = 2 * h * abytes / bw  # read + write the hidden state, per token

    tpa = tp / dp  # the GPUs of one attention rank

    def linear(count, params, group):
        d = m.dtype_of(group, weight_dtype)
        return count * 2 * params / tpa / rates.flops(d), count * params * DTYPE_BYTES[d] / tpa / bw, count * act_b

    def add(first, values):
        for i, v in enumerate(values):
            p[first + i] += v

    p[OVERHEAD], p[ROW_OVERHEAD] = engine.step_overhead_s, engine.row_overhead_s
    p[LAYER_FIXED], p[EAGER_FIXED] = L * engine.layer_latency_s, L * engine.eager_layer_latency_s
    p[OVERLAP], p[LM_OVERLAP] = gemm.exponent, head.exponent
    moe_layers = 0
    for g in m.groups:
        lp = m.layer_params(g.attention, g.mlp)
        add(QKV_F, linear(g.count, lp["qkv"], "attention"))
        add(O_F, linear(g.count, lp["o"], "attention"))
        if lp["mlp"]:
            add(MLP_F, linear(g.count, lp["mlp"], "mlp"))
        if g.mlp == "moe":
            moe_layers += g.count
        _attention_coefficients(p, m, g, tpa, kvdtype, abytes, attn_flops, bw, kv_bw, engine, attn["decode_row_s"])
    p[REST] = L * 4 * act_b  # norms, rope, residual adds, KV writes: memory-bound
    p[LM_F], p[LM_B] = 2 * h * m.vocab_size / tpa / head_flops, m.vocab_size * h * abytes / tpa / bw
    p[TP], p[LAYERS], p[HIDDEN], p[ABYTES] = tp, L, h, abytes
    p[LINK] = efficiency.collective_bandwidth(gpu, tp) * BUS_FRACTION
    p[COLL_LATENCY] = efficiency.collective_latency(gpu, tp) * engine.allreduce_latency_scale
    p[IS_MOE] = float(m.is_moe)
    xdtype = m.dtype_of("experts", weight_dtype)
    p[EXPERTS], p[TOPK], p[EXPERT_PARAMS] = m.num_experts, m.experts_per_token, m.mlp_matrices * h * m.expert_size
    # the experts' grouped GEMMs (and the router) at their own share of the plateau
    p[WBYTES], p[FLOPS], p[BANDWIDTH] = (DTYPE_BYTES[xdtype], rates.flops(xdtype) * efficiency.moe_gemm_fraction(gpu),
                                         bw)
    p[EXPERT_PARALLEL] = float(expert_parallel and m.is_moe)
    p[KV_TOKEN_GPU] /= pp
    p[HOST_BW] = gpu.host_bandwidth
    p[MOE_LAYERS] = moe_layers
    p[ATTN_LAYERS] = sum(g.count for g in m.groups if g.attention != "none")
    p[ALLREDUCES] = (2.0 * L if m.is_plain else
                     float(p[ATTN_LAYERS] + sum(g.count for g in m.groups if g.mlp != "none")))
    p[WINDOW] = m.sliding_window
    p[DP], p[IMBALANCE], p[TBO] = dp, imbalance, float(two_batch_overlap)
    if dp > 1 and p[EXPERT_PARALLEL] != 0.0:  # each GPU sends its share of every token's k copies, and back
        from sim.pricing.wide_ep import all_to_all_seconds_per_byte

        share = m.experts_per_token * h * abytes / tp * (tp - 1) / tp
        p[A2A_TOKEN_S] = share * all_to_all_seconds_per_byte(gpu, tp) / BUS_FRACTION
        p[A2A_LATENCY] = p[COLL_LATENCY]
    _floor_params(p, m, gpu, tp, weight_dtype, kvdtype, dp)
    _memoize(p)
    return p


def _attention_coefficients(p, m: ModelSpec, g, tp, kvdtype, abytes, attn_flops, bw, kv_bw, engine,
                            row_s) -> None:
    """Add one layer group's attention (or state) coefficients to the row (``kv_bw``: the
    bandwidth decode reads the KV cache at)."""
    c, kvb = g.count, DTYPE_BYTES[kvdtype]
    if g.attention in STATEFUL:
        mixer = m.linear_attention if g.attention == "linear" else m.mamba
        p[STATE_TOKEN_F] += c * mixer.flops_per_token / tp / attn_flops
        p[STATE_SEQ_B] += c * 2 * mixer.state_elements * abytes / tp / bw  # read and write the state
        return
    if g.attention not in KV_CACHED:
        return
    if g.attention == "mla":
        heads = m.num_heads / tp
        kv_token_layer = m.mla.latent * kvb  # the latent is whole on every rank
        q = heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim)
        pre_f = c * m.mla.prefill_flops_per_pair(heads) / attn_flops
        dec_f = c * m.mla.decode_flops_per_token(heads) / attn_flops
        reread = 1.0  # one latent head, read once for all query heads
    else:
        kv_token_layer = m.kv_elements_per_layer(g.attention) * kvb / m.kv_shards(g.attention, tp)
        q = m.q_size / tp
        pre_f = dec_f = c * 4 * q / attn_flops
        group = m.num_heads / m.num_kv_heads  # query heads per KV head (GQA ratio)
        reread = 1.0 + engine.decode_gqa_reread * (group - 1.0)  # KV reads per KV head and step
    windowed = g.attention in WINDOWED
    p[SW_PRE_F if windowed else PRE_F] += pre_f
    p[SW_PRE_B if windowed else PRE_B] += c * (kv_token_layer + 2 * q * abytes) / bw
    p[SW_DEC_F if windowed else DEC_F] += dec_f
    p[SW_DEC_B if windowed else DEC_B] += c * kv_token_layer * reread / kv_bw
    p[DEC_ROW] += c * row_s
    p[KV_TOKEN_GPU] += kv_token_layer * c


def _floor_params(p, m: ModelSpec, gpu: GpuSpec, tp: int, weight_dtype, kvdtype, dp: int = 1) -> None:
    """The physical floor's coefficients: bytes at the datasheet's HBM bandwidth, FLOPs at the
    fastest tensor-core rate any of the step's dtypes has (a bound no kernel beats). With ``dp``
    attention ranks a GPU attends over its rank's share of the context with ``tp / dp`` GPUs."""
    bw = gpu.hbm_bandwidth
    dtypes = {math_dtype(m.dtype_of(g, weight_dtype)) for g in WEIGHT_GROUPS} | {m.dtype, kvdtype}
    peak = max(gpu.peak_flops(d) for d in dtypes)
    gp = m.group_params()
    weights = sum(gp[g] * DTYPE_BYTES[m.dtype_of(g, weight_dtype)] for g in ("attention", "mlp"))
    weights += (gp["other"] - m.hidden_size) * DTYPE_BYTES[m.dtype]  # norms and routers
    p[FL_WEIGHTS] = weights / tp / bw
    xbytes = DTYPE_BYTES[m.dtype_of("experts", weight_dtype)]
    p[FL_EXPERT] = p[MOE_LAYERS] * p[EXPERT_PARAMS] * xbytes / tp / bw
    lm = m.vocab_size * m.hidden_size
    p[FL_LM_B], p[FL_LM_F] = lm * DTYPE_BYTES[m.dtype] / tp / bw, 2 * lm / tp / peak
    active_linear = gp["attention"] + gp["mlp"] + p[MOE_LAYERS] * m.experts_per_token * p[EXPERT_PARAMS]
    p[FL_TOKEN_F] = 2 * active_linear / tp / peak
    kvb = DTYPE_BYTES[kvdtype]
    tpa = tp // dp
    for g in m.groups:
        if g.attention in KV_CACHED:
            per_token = g.count * m.kv_elements_per_layer(g.attention) * kvb / m.kv_shards(g.attention, tpa) / dp
            if g.attention == "mla":
                heads = m.num_heads / tpa
                ctx_f = m.mla.decode_flops_per_token(heads) / dp
                pair_f = m.mla.prefill_flops_per_pair(heads) / dp
            else:
                ctx_f = pair_f = 4 * m.q_size / tp
            w = g.attention in WINDOWED
            p[FL_SW_CTX_B if w else FL_CTX_B] += per_token / bw
            p[FL_SW_CTX_F if w else FL_CTX_F] += g.count * ctx_f / peak
            p[FL_SW_PAIR_F if w else FL_PAIR_F] += g.count * pair_f / peak
            p[FL_KV_WRITE] += per_token / bw
        elif g.attention in STATEFUL:
            mixer = m.linear_attention if g.attention == "linear" else m.mamba
            p[FL_STATE_B] += g.count * 2 * mixer.state_elements * DTYPE_BYTES[m.dtype] / tp / bw
            p[FL_STATE_F] += g.count * mixer.flops_per_token / tp / peak


@leaf
def _max(a, b):
    return a if a >= b else b


@leaf
def _min(a, b):
    return a if a <= b else b


@leaf
def _collective(p, nbytes, factor):
    return factor * nbytes / p[LINK] + p[COLL_LATENCY]


@leaf
def roofline_ops(p, draft, s, out):
    """Seconds per operation of the step of shape ``s`` (all layers), into ``out[NUM_OPS]``.
    ``draft``: the speculative draft model's parameter row (all zeros: none). The drafter runs
    on every step that verifies drafts or prefills prompts: a draft model, an MTP layer or an
    EAGLE head keeps its own KV cache of each prompt, as the engines run it."""
    _model_ops(p, s, out)
    if draft[FLOPS] != 0.0 and (s[VERIFY_TOKENS] != 0.0 or s[PREFILL_TOKENS] > 0.0):
        out[OP_DRAFT] = _draft_time(draft, s)


@leaf
def _gemm(c, m, k):
    """A GEMM computing for ``c`` and streaming for ``m`` seconds: (c^k + m^k)^(1/k), max(c, m)
    for k = 0 (see efficiency.GemmCurve)."""
    hi = _max(c, m)
    if k == 0.0 or hi <= 0.0:
        return hi
    r = (m if c >= m else c) / hi
    return hi * (1.0 + r ** k) ** (1.0 / k)


@jit
def _token_ops(p, tokens, out):
    """The operations that depend on the token count alone: the QKV, O and MLP GEMMs, and a
    mixture of experts' GEMMs and router."""
    w = p[OVERLAP]
    if tokens > 0.0:
        _dense_ops(p, tokens / p[DP], out)  # one attention rank's share (all of them with one rank)
    if p[IS_MOE] != 0.0:
        L, tp = p[MOE_LAYERS], p[TP]
        h, k, e, expert = p[HIDDEN], p[TOPK], p[EXPERTS], p[EXPERT_PARAMS]
        act = tokens * h * p[ABYTES]
        busiest = p[IMBALANCE]  # the busiest GPU's tokens over the mean GPU's
        touched = e * (1.0 - (1.0 - k / e) ** _max(tokens, 1.0))  # distinct experts read
        # the tokens' activations in and out: with experts split over the GPUs each GPU moves those of
        # its own experts' tokens (1/tp of them, the busiest more); split by columns, every token's
        routed = 2.0 * act * k * busiest / (tp if p[EXPERT_PARALLEL] != 0.0 else 1.0)
        out[OP_MOE_MLP] = L * _gemm(2.0 * tokens * k * expert / tp / p[FLOPS] * busiest,
                                    (touched * expert * p[WBYTES] / tp + routed) / p[BANDWIDTH], w)
        out[OP_MOE_ROUTER] = L * _max(2.0 * tokens * h * e / p[FLOPS], h * e * p[WBYTES] / p[BANDWIDTH])


@leaf
def _dense_ops(p, t, out):
    """The QKV, O and dense MLP GEMMs of ``t`` tokens on one attention rank."""
    w = p[OVERLAP]
    out[OP_QKV] = _gemm(p[QKV_F] * t, p[QKV_B0] + p[QKV_B1] * t, w)
    out[OP_O] = _gemm(p[O_F] * t, p[O_B0] + p[O_B1] * t, w)
    out[OP_MLP] = _gemm(p[MLP_F] * t, p[MLP_B0] + p[MLP_B1] * t, w)


@leaf
def _lm_head(p, rows):
    return _gemm(p[LM_F] * rows, p[LM_B], p[LM_OVERLAP])


@leaf
def _memo_row(p, count):
    """Where the memo holds ``count`` tokens' operations (-1: it does not)."""
    if count < p[MEMO_N] and count == np.floor(count):
        return MEMO + MEMO_WIDTH * int(count)
    return -1


@entry
def _memoize(p):
    """Fill the row's memo (see GEMM_MEMO)."""
    ops = np.zeros(NUM_OPS)
    for n in range(GEMM_MEMO):
        ops[:] = 0.0
        _token_ops(p, float(n), ops)
        i = MEMO + MEMO_WIDTH * n
        for j in range(OP_MOE_ROUTER + 1):
            p[i + j] = ops[OP_QKV + j]
        p[i + MEMO_WIDTH - 1] = _lm_head(p, float(n))
    p[MEMO_N] = GEMM_MEMO


@jit
def _model_ops(p, s, out):
    """Every operation but the draft model's."""
    out[:] = 0.0
    tokens = s[NUM_TOKENS]
    i = _memo_row(p, tokens)
    if i >= 0:
        for j in range(OP_MOE_ROUTER + 1):
            out[OP_QKV + j] = p[i + j]
    else:
        _token_ops(p, tokens, out)
    tp, dp = p[TP], p[DP]
    prefill = s[PREFILL_TOKENS]
    if prefill > 0.0:  # causal: a row of q new tokens on c cached ones attends q·c + q²/2 pairs
        rows = _max(s[NUM_SEQS] - s[DECODE_SEQS], 1.0)
        pairs = _max(s[PREFILL_ATTN] - 0.5 * prefill * prefill / rows, 0.5 * s[PREFILL_ATTN])
        out[OP_ATTN_PREFILL] = _max(p[PRE_F] * pairs, p[PRE_B] * prefill)
        if p[WINDOW] > 0.0:  # a windowed layer's query sees at most WINDOW keys
            sw = _min(pairs, prefill * p[WINDOW])
            out[OP_ATTN_PREFILL] += _max(p[SW_PRE_F] * sw, p[SW_PRE_B] * prefill)
        if p[STATE_TOKEN_F] != 0.0:
            out[OP_ATTN_PREFILL] += _max(p[STATE_TOKEN_F] * prefill, p[STATE_SEQ_B] * rows)
    verify = s[VERIFY_TOKENS]
    f, sw_f = p[DEC_F], p[SW_DEC_F]
    if verify != 0.0:  # speculative decodes attend with 1 + k queries each
        queries = 1.0 + verify / _max(s[DECODE_SEQS], 1.0)
        f, sw_f = f * queries, sw_f * queries
    out[OP_ATTN_DECODE] = _max(f * s[DECODE_CONTEXT], p[DEC_B] * s[DECODE_CONTEXT]) + p[DEC_ROW] * s[DECODE_SEQS]
    if p[WINDOW] > 0.0:  # each decode row reads at most WINDOW tokens of a windowed layer
        ctx = _min(s[DECODE_CONTEXT], s[DECODE_SEQS] * p[WINDOW])
        out[OP_ATTN_DECODE] += _max(sw_f * ctx, p[SW_DEC_B] * ctx)
    if p[STATE_SEQ_B] != 0.0:  # each decode row reads and writes its state once per layer
        out[OP_ATTN_DECODE] += _max(p[STATE_TOKEN_F] * (s[DECODE_SEQS] + verify), p[STATE_SEQ_B] * s[DECODE_SEQS])
    rank_tokens = tokens / dp
    if dp > 1.0:  # the slowest attention rank: an even share of the decodes, and of the prefill
        # tokens, but at least the largest prefill row whole (a row is never split over ranks)
        big = s[MAX_PREFILL_ROW]
        share = _max(1.0 / dp, big / prefill) if prefill > 0.0 else 1.0 / dp
        out[OP_ATTN_PREFILL] *= share
        out[OP_ATTN_DECODE] /= dp
        rank_tokens = _max(rank_tokens, share * prefill + (tokens - prefill) / dp)
        if rank_tokens > tokens / dp:
            _dense_ops(p, rank_tokens, out)
    out[OP_NORMS] = p[REST] * rank_tokens
    rows = s[NUM_SAMPLED] + verify
    if rows > 0.0:  # weights read if any row samples
        i = _memo_row(p, rows) if dp == 1.0 else -1
        out[OP_LM_HEAD] = p[i + MEMO_WIDTH - 1] if i >= 0 else _lm_head(p, rows / dp)
    if dp > 1.0:
        _wide_ep_ops(p, tokens, out)
    elif tp > 1.0:
        act = tokens * p[HIDDEN] * p[ABYTES]
        if p[EXPERT_PARALLEL] != 0.0:  # attention all-reduce, then dispatch + combine all-to-all
            out[OP_ALLREDUCE] = p[ATTN_LAYERS] * _collective(p, act, 2.0 * (tp - 1.0) / tp)
            out[OP_ALL_TO_ALL] = 2.0 * p[MOE_LAYERS] * _collective(p, act * p[TOPK], (tp - 1.0) / tp)
        else:
            out[OP_ALLREDUCE] = p[ALLREDUCES] * _collective(p, act, 2.0 * (tp - 1.0) / tp)
    if s[SWAP_TOKENS] != 0.0:
        out[OP_SWAP] = s[SWAP_TOKENS] * p[KV_TOKEN_GPU] / p[HOST_BW]
    if tokens > 0.0:  # steps with prefill rows run eagerly (no CUDA graph): each kernel is launched
        out[OP_LAYER_FIXED] = p[LAYER_FIXED] + (p[EAGER_FIXED] if prefill > 0.0 else 0.0)


@leaf
def _wide_ep_ops(p, tokens, out):
    """DP attention ranks and experts over every GPU: each rank's all-reduce over its own GPUs,
    each MoE layer's dispatch and combine all-to-all among all of them; with two-batch overlap
    the all-to-all runs while the other half-batch computes, and only what outlasts that adds."""
    tpa = p[TP] / p[DP]
    if tpa > 1.0:
        act = tokens / p[DP] * p[HIDDEN] * p[ABYTES]
        out[OP_ALLREDUCE] = p[ATTN_LAYERS] * _collective(p, act, 2.0 * (tpa - 1.0) / tpa)
    if p[EXPERT_PARALLEL] != 0.0 and tokens > 0.0:
        a2a = 2.0 * p[MOE_LAYERS] * (tokens * p[A2A_TOKEN_S] + p[A2A_LATENCY])
        if p[TBO] != 0.0:
            compute = 0.0
            for j in range(NUM_OPS):
                if j != OP_ALL_TO_ALL:
                    compute += out[j]
            a2a = _max(a2a - compute, 0.0)
        out[OP_ALL_TO_ALL] = a2a


@leaf
def floor_time(p, s):
    """The physical floor of a step: max(bytes it must move / peak HBM bandwidth, FLOPs / peak
    tensor-core rate) on one GPU of the replica (``floor_parts``)."""
    nbytes, flops = floor_parts(p, s)
    return _max(nbytes, flops)


@leaf
def floor_parts(p, s):
    """A step's work on one GPU of the replica, in seconds at the datasheet's peaks: (bytes it
    must move / peak HBM bandwidth, FLOPs / peak tensor-core rate). Bytes: the non-expert
    weights, the distinct experts its tokens route to (at least top-k per MoE layer), the LM head
    if a row samples, the KV it reads (a windowed layer at most its window per row) and writes,
    the SSM states; FLOPs: every token through its active weights, the LM head's rows,
    attention's pairs. The power model (sim/pricing/power.py) reads a step's utilisation from it."""
    tokens = s[NUM_TOKENS]
    if tokens <= 0.0:
        return 0.0, 0.0
    k, e = p[TOPK], p[EXPERTS]
    touched = e * (1.0 - (1.0 - k / e) ** tokens) if p[IS_MOE] != 0.0 else 0.0
    touched = _max(_min(touched, e), _min(k, e) if p[IS_MOE] != 0.0 else 0.0)
    rows = s[NUM_SAMPLED] + s[VERIFY_TOKENS]
    ctx, seqs = s[DECODE_CONTEXT], s[DECODE_SEQS]
    sw_ctx = _min(ctx, seqs * p[WINDOW])
    prefill = s[PREFILL_TOKENS]
    pairs = s[PREFILL_ATTN] * 0.5  # at least half of q·c is causal work
    sw_pairs = _min(pairs, prefill * p[WINDOW])
    nbytes = (p[FL_WEIGHTS] + touched * p[FL_EXPERT] + (p[FL_LM_B] if rows > 0.0 else 0.0)
              + p[FL_CTX_B] * ctx + p[FL_SW_CTX_B] * sw_ctx + p[FL_KV_WRITE] * tokens + p[FL_STATE_B] * seqs)
    flops = (p[FL_TOKEN_F] * tokens + p[FL_LM_F] * rows + p[FL_CTX_F] * ctx + p[FL_SW_CTX_F] * sw_ctx
             + p[FL_PAIR_F] * pairs + p[FL_SW_PAIR_F] * sw_pairs + p[FL_STATE_F] * tokens)
    return nbytes, flops


@leaf
def roofline_time(p, draft, s, ops):
    """A step's seconds: the engine's CPU overhead (per step and per running request) plus every
    operation (``ops``: room for them, so that pricing a step allocates nothing)."""
    roofline_ops(p, draft, s, ops)
    return p[OVERHEAD] + p[ROW_OVERHEAD] * s[NUM_SEQS] + _max(_sum(ops), floor_time(p, s))


@jit
def group_time(p, draft, shapes, n, merged, ops):
    """The seconds of a step that ``n`` attention DP ranks take together (``shapes``: each rank's
    own; ``merged``: their sum): each rank computes its attention, dense layers, norms and LM
    head on its own rows on its tp / dp GPUs, and the slowest sets that part; the experts, their
    router and all-to-all (and a draft model) take every rank's tokens. The engine's CPU overhead
    is paid once per step and per running request of the busiest rank: each rank's scheduler is
    a process of its own (SGLang, TensorRT-LLM), so their host work runs side by side. Never
    below the merged step's physical floor."""
    dp = p[DP]
    scaled = np.empty(SHAPE_SIZE)
    slowest = 0.0
    seqs = 0.0
    for i in range(n):
        # a rank's own parts: the row priced as if every rank had this one's rows (it divides them by dp)
        for j in range(SHAPE_SIZE):
            scaled[j] = shapes[i, j] * dp
        scaled[MAX_PREFILL_ROW] = shapes[i, MAX_PREFILL_ROW]
        scaled[SWAP_TOKENS] = shapes[i, SWAP_TOKENS]
        roofline_ops(p, draft, scaled, ops)
        own = _sum(ops) - ops[OP_MOE_MLP] - ops[OP_MOE_ROUTER] - ops[OP_ALL_TO_ALL] - ops[OP_DRAFT]
        slowest = _max(slowest, own)
        seqs = _max(seqs, shapes[i, NUM_SEQS])
    roofline_ops(p, draft, merged, ops)
    shared = ops[OP_MOE_MLP] + ops[OP_MOE_ROUTER] + ops[OP_ALL_TO_ALL] + ops[OP_DRAFT]
    return p[OVERHEAD] + p[ROW_OVERHEAD] * seqs + _max(slowest + shared, floor_time(p, merged))


@leaf
def _sum(ops):
    total = 0.0
    for i in range(NUM_OPS):
        total = total + ops[i]
    return total


@jit
def _model_time(p, s):
    """The GPU time of the model's operations (no CPU overhead)."""
    ops = np.empty(NUM_OPS)
    _model_ops(p, s, ops)
    return _sum(ops)


@jit
def _draft_time(d, s):
    """The draft proposes k tokens one decode step at a time, after reading the prompts."""
    seqs = _max(s[DECODE_SEQS], 1.0)
    k = s[VERIFY_TOKENS] / seqs
    shape = np.zeros(SHAPE_SIZE)
    shape[NUM_TOKENS] = seqs
    shape[NUM_SEQS] = seqs
    shape[DECODE_SEQS] = seqs
    shape[DECODE_CONTEXT] = s[DECODE_CONTEXT]
    shape[NUM_SAMPLED] = seqs
    t = k * _model_time(d, shape)
    if s[PREFILL_TOKENS] > 0.0:
        shape[:] = 0.0
        shape[NUM_TOKENS] = s[PREFILL_TOKENS]
        shape[NUM_SEQS] = s[NUM_SEQS] - s[DECODE_SEQS]
        shape[PREFILL_TOKENS] = s[PREFILL_TOKENS]
        shape[PREFILL_ATTN] = s[PREFILL_ATTN]
        t = t + _model_time(d, shape)
    return t


@entry
def _times(p, draft, shapes, out):
    ops = np.empty(NUM_OPS)
    for i in range(shapes.shape[0]):
        out[i] = roofline_time(p, draft, shapes[i], ops)


@entry
def _ops_of(p, draft, shapes, out):
    for i in range(shapes.shape[0]):
        roofline_ops(p, draft, shapes[i], out[i])


class RooflineCost:
    """The roofline of one replica, for Python callers (tests, calibration, reports).
    ``engine``: an engine preset's name or its overheads; ``step_overhead_s`` replaces the
    engine's per-step overhead; ``power_cap_w`` caps each GPU's draw (``Pricer`` and the loops
    apply it)."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, *, tp: int = 1, pp: int = 1,
                 compute_efficiency: float | None = None, memory_efficiency: float | None = None,
                 step_overhead_s: float | None = None, weight_dtype: str | None = None,
                 kv_dtype: str | None = None, expert_parallel: bool = False,
                 draft: RooflineCost | None = None, engine: str | EngineCost = DEFAULT_ENGINE,
                 power_cap_w: float | None = None, dp: int = 1, imbalance: float = 1.0,
                 two_batch_overlap: bool = False):
        self.model, self.gpu, self.tp, self.pp = model, gpu, tp, pp
        self.power_cap_w = power_cap_w  # W per GPU: slows the steps that would draw more (sim/pricing/power.py)
        cost = engine_cost(engine) if isinstance(engine, str) else engine
        if step_overhead_s is not None:
            cost = replace(cost, step_overhead_s=step_overhead_s)
        self.engine = cost
        self.params = roofline_params(model, gpu, tp=tp, pp=pp, compute_efficiency=compute_efficiency,
                                      memory_efficiency=memory_efficiency, engine=cost,
                                      weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                                      expert_parallel=expert_parallel, dp=dp, imbalance=imbalance,
                                      two_batch_overlap=two_batch_overlap)
        self.draft = draft
        self.draft_params = draft.params if draft is not None else np.zeros(ROW_SIZE)
        self.overhead = cost.step_overhead_s

    def step_time(self, s: StepShape) -> np.ndarray | float:
        shapes = s.vectors()
        out = np.empty(len(shapes))
        _times(self.params, self.draft_params, shapes, out)
        return float(out[0]) if s.is_scalar else out

    def op_times(self, s: StepShape) -> dict[str, np.ndarray | float]:
        """Seconds per operation (those the step has)."""
        shapes = s.vectors()
        out = np.empty((len(shapes), NUM_OPS))
        _ops_of(self.params, self.draft_params, shapes, out)
        return {name: (float(out[0, i]) if s.is_scalar else out[:, i]) for i, name in enumerate(OP_NAMES)
                if out[:, i].any()}


def engine_of(scenario) -> EngineCost:
    """The scenario's engine overheads, with ``cost.step_overhead_s`` where it is given."""
    cost = scenario.engine.cost
    if scenario.cost.step_overhead_s is not None:
        cost = replace(cost, step_overhead_s=scenario.cost.step_overhead_s)
    return cost


def roofline_for(scenario, replica=None) -> RooflineCost:
    """The roofline of one replica of ``scenario`` (the first one by default)."""
    c = scenario.cost
    r = replica or scenario.replica_specs[0]
    hw, q = r.hardware, scenario.quantization
    draft = None
    spec = r.scheduler.speculative
    drafter = None if spec is None else draft_spec(spec.method, scenario.model_spec, spec.draft_model)
    if drafter is not None:
        draft = RooflineCost(drafter, r.gpu, tp=hw.tp,
                             compute_efficiency=c.compute_efficiency, memory_efficiency=c.memory_efficiency,
                             weight_dtype=q.weights if spec.method in ("mtp", "eagle") else None,
                             engine=NO_OVERHEAD)
    return RooflineCost(scenario.model_spec, r.gpu, tp=hw.tp, pp=hw.pp,
                        compute_efficiency=c.compute_efficiency, memory_efficiency=c.memory_efficiency,
                        weight_dtype=q.weights, kv_dtype=q.kv_cache,
                        expert_parallel=hw.expert_parallel, draft=draft, engine=engine_of(scenario),
                        power_cap_w=hw.power_cap_w, dp=hw.dp_attention,
                        imbalance=hw.expert_imbalance(scenario.model_spec, scenario.seed),
                        two_batch_overlap=hw.two_batch_overlap)
