"""Roofline cost model: each operation takes max(compute time, memory time).

Works for any model and GPU in the catalogs with no profiling. Every formula is vectorised:
the fields of a StepShape may be arrays, pricing many steps in one call.
"""

from __future__ import annotations

import numpy as np

from sim.plan import StepShape
from sim.specs import GpuSpec, ModelSpec
from sim.specs.models import DTYPE_BYTES

ALLREDUCE_LATENCY_S = 8e-6  # per collective, NCCL small-message floor


class RooflineCost:
    """Step time of one replica (one pipeline stage's worth of work per GPU)."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, *, tp: int = 1, pp: int = 1,
                 compute_efficiency: float = 0.6, memory_efficiency: float = 0.8,
                 step_overhead_s: float = 0.002, weight_dtype: str | None = None,
                 kv_dtype: str | None = None):
        self.model, self.gpu, self.tp, self.pp = model, gpu, tp, pp
        self.flops = gpu.peak_flops(weight_dtype or model.dtype) * compute_efficiency
        self.bandwidth = gpu.hbm_bandwidth * memory_efficiency
        self.link = gpu.interconnect_bandwidth
        self.overhead = step_overhead_s
        self.wbytes = DTYPE_BYTES[weight_dtype or model.dtype]
        self.abytes = DTYPE_BYTES[model.dtype]  # activations
        self.kv_token_layer = 2 * model.kv_size * DTYPE_BYTES[kv_dtype or model.dtype] / tp
        self.layers = model.num_layers  # every layer runs once per step, whichever stage holds it

    def _op(self, flops, nbytes):
        return np.maximum(flops / self.flops, nbytes / self.bandwidth)

    def op_times(self, s: StepShape) -> dict[str, np.ndarray | float]:
        """Seconds per operation for the whole step (all layers)."""
        m, tp, L = self.model, self.tp, self.layers
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
            times["mlp"] = L * self._op(2 * tokens * k * expert / tp,
                                        touched * expert * self.wbytes / tp + 2 * act)
        else:
            times["mlp"] = linear(3 * h * m.intermediate_size)
        q = m.q_size / tp
        times["attn_prefill"] = L * self._op(
            4 * np.asarray(s.prefill_attn) * q,
            np.asarray(s.prefill_tokens) * self.kv_token_layer + 2 * np.asarray(s.prefill_tokens) * q * self.abytes)
        times["attn_decode"] = L * self._op(
            4 * np.asarray(s.decode_context) * q,
            np.asarray(s.decode_context) * self.kv_token_layer)
        times["norms_and_rest"] = L * self._op(0.0, 8 * act)  # norms, rope, residual adds, kv write
        times["lm_head"] = self._op(2 * np.asarray(s.num_sampled) * h * m.vocab_size / tp,
                                    m.vocab_size * h * self.wbytes / tp)
        if tp > 1:
            ring = 2 * (tp - 1) / tp * act / self.link + ALLREDUCE_LATENCY_S
            times["allreduce"] = 2 * L * ring
        return times

    def step_time(self, s: StepShape) -> np.ndarray | float:
        total = sum(self.op_times(s).values()) + self.overhead
        return total if np.ndim(total) else float(total)


def roofline_for(scenario) -> RooflineCost:
    c, hw = scenario.cost, scenario.hardware
    return RooflineCost(scenario.model_spec, scenario.gpu_spec, tp=hw.tp, pp=hw.pp,
                        compute_efficiency=c.compute_efficiency,
                        memory_efficiency=c.memory_efficiency, step_overhead_s=c.step_overhead_s)
