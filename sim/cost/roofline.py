"""Roofline cost model: each operation takes max(compute time, memory time).

Works for any model and GPU in the catalogs with no profiling. Every formula is vectorised:
the fields of a StepShape may be arrays, pricing many steps in one call. The time is that of
one batch through the whole model; a pipelined replica splits it over its stages.
"""

from __future__ import annotations

import numpy as np

from sim.plan import StepShape
from sim.specs import GpuSpec, ModelSpec
from sim.specs.models import DTYPE_BYTES

COLLECTIVE_LATENCY_S = 8e-6  # per collective, NCCL small-message floor


class RooflineCost:
    """Step time of one replica from the shapes of its batch."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, *, tp: int = 1, pp: int = 1,
                 compute_efficiency: float = 0.6, memory_efficiency: float = 0.8,
                 step_overhead_s: float = 0.002, weight_dtype: str | None = None,
                 kv_dtype: str | None = None, expert_parallel: bool = False,
                 draft: RooflineCost | None = None):
        self.model, self.gpu, self.tp, self.pp = model, gpu, tp, pp
        self.flops = gpu.peak_flops(weight_dtype or model.dtype) * compute_efficiency
        self.bandwidth = gpu.hbm_bandwidth * memory_efficiency
        self.link = gpu.interconnect_bandwidth
        self.overhead = step_overhead_s
        self.wbytes = DTYPE_BYTES[weight_dtype or model.dtype]
        self.abytes = DTYPE_BYTES[model.dtype]  # activations
        kv_shards = min(tp, model.num_kv_heads)
        self.kv_token_layer = 2 * model.kv_size * DTYPE_BYTES[kv_dtype or model.dtype] / kv_shards
        self.kv_token_gpu = self.kv_token_layer * model.num_layers / pp
        self.expert_parallel = expert_parallel and model.is_moe
        self.draft = draft  # speculative decoding's draft model (same GPU)

    def _op(self, flops, nbytes):
        return np.maximum(flops / self.flops, nbytes / self.bandwidth)

    def _collective(self, nbytes, kind: str = "allreduce"):
        tp = self.tp
        factor = 2 * (tp - 1) / tp if kind == "allreduce" else (tp - 1) / tp
        return factor * nbytes / self.link + COLLECTIVE_LATENCY_S

    def op_times(self, s: StepShape) -> dict[str, np.ndarray | float]:
        """Seconds per operation for the whole step (all layers)."""
        m, tp, L = self.model, self.tp, self.model.num_layers
        h = m.hidden_size
        tokens = np.asarray(s.num_tokens, dtype=float)
        act = tokens * h * self.abytes

        def linear(params):
            return L * self._op(2 * tokens * params / tp, params * self.wbytes / tp + 2 * act)

        times: dict[str, np.ndarray | float] = {
            "qkv_proj": linear(h * (m.q_size + 2 * m.kv_size)),
            "o_proj": linear(m.q_size * h),
        }
        if m.is_moe:
            k, e = m.experts_per_token, m.num_experts
            expert = 3 * h * m.intermediate_size
            touched = e * (1 - (1 - k / e) ** np.maximum(tokens, 1))  # distinct experts read
            times["moe_mlp"] = L * self._op(2 * tokens * k * expert / tp,
                                            touched * expert * self.wbytes / tp + 2 * act * k)
            times["moe_router"] = L * self._op(2 * tokens * h * e, h * e * self.wbytes)
        else:
            times["mlp"] = linear(3 * h * m.intermediate_size)
        q = m.q_size / tp
        prefill_tokens = np.asarray(s.prefill_tokens)
        times["attn_prefill"] = L * self._op(
            4 * np.asarray(s.prefill_attn) * q,
            prefill_tokens * self.kv_token_layer + 2 * prefill_tokens * q * self.abytes)
        decode_ctx = np.asarray(s.decode_context)
        verify = 1 + np.asarray(s.verify_tokens) / np.maximum(np.asarray(s.decode_seqs), 1)
        times["attn_decode"] = L * self._op(4 * decode_ctx * q * verify, decode_ctx * self.kv_token_layer)
        times["norms_and_rest"] = L * self._op(0.0, 8 * act)  # norms, rope, residual adds, kv write
        times["lm_head"] = self._op(2 * (np.asarray(s.num_sampled) + np.asarray(s.verify_tokens))
                                    * h * m.vocab_size / tp, m.vocab_size * h * self.wbytes / tp)
        if tp > 1:
            if self.expert_parallel:  # attention all-reduce, then dispatch + combine all-to-all
                times["allreduce"] = L * self._collective(act)
                times["all_to_all"] = 2 * L * self._collective(act * m.experts_per_token, "all_to_all")
            else:
                times["allreduce"] = 2 * L * self._collective(act)
        if np.any(np.asarray(s.swap_tokens) > 0):
            times["swap"] = np.asarray(s.swap_tokens) * self.kv_token_gpu / self.gpu.host_bandwidth
        if self.draft is not None and np.any(np.asarray(s.verify_tokens) > 0):
            times["draft"] = self._draft_time(s)
        return times

    def _draft_time(self, s: StepShape):
        """The draft proposes k tokens one decode step at a time, after reading the prompts."""
        seqs = np.maximum(np.asarray(s.decode_seqs), 1)
        k = np.asarray(s.verify_tokens) / seqs
        decode = StepShape(num_tokens=seqs, num_seqs=seqs, prefill_tokens=0.0, prefill_attn=0.0,
                           decode_seqs=seqs, decode_context=s.decode_context, num_sampled=seqs)
        prefill = StepShape(num_tokens=s.prefill_tokens, num_seqs=0.0, prefill_tokens=s.prefill_tokens,
                            prefill_attn=s.prefill_attn, decode_seqs=0.0, decode_context=0.0,
                            num_sampled=0.0)
        d = self.draft
        return k * (d.step_time(decode) - d.overhead) + np.where(
            np.asarray(s.prefill_tokens) > 0, d.step_time(prefill) - d.overhead, 0.0)

    def step_time(self, s: StepShape) -> np.ndarray | float:
        total = sum(self.op_times(s).values()) + self.overhead
        return total if np.ndim(total) else float(total)


def roofline_for(scenario, replica=None) -> RooflineCost:
    """The roofline of one replica of ``scenario`` (the first one by default)."""
    from sim.specs import get_model

    c = scenario.cost
    r = replica or scenario.replica_specs[0]
    hw, q = r.hardware, scenario.quantization
    draft = None
    spec = r.scheduler.speculative
    if spec is not None:
        draft = RooflineCost(get_model(spec.draft_model), r.gpu, tp=hw.tp,
                             compute_efficiency=c.compute_efficiency,
                             memory_efficiency=c.memory_efficiency, step_overhead_s=0.0)
    return RooflineCost(scenario.model_spec, r.gpu, tp=hw.tp, pp=hw.pp,
                        compute_efficiency=c.compute_efficiency,
                        memory_efficiency=c.memory_efficiency, step_overhead_s=c.step_overhead_s,
                        weight_dtype=q.weights, kv_dtype=q.kv_cache,
                        expert_parallel=hw.expert_parallel, draft=draft)
