"""Roofline cost model: each operation takes max(compute time, memory time).

Works for any model and GPU in the catalogs with no profiling. Every formula is vectorised:
the fields of a StepShape may be arrays, pricing many steps in one call. The time is that of
one batch through the whole model; a pipelined replica splits it over its stages.
"""

from __future__ import annotations

import numpy as np

from sim.core.plan import StepShape
from sim.scenario.specs import GpuSpec, ModelSpec
from sim.scenario.specs.models import DTYPE_BYTES

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
        self._decode_rest_cache: dict[int, float] = {}  # decode_steps' cache: batch size -> seconds
        self._decode_rest_table = np.full(1, np.nan)  # the same, as an array indexed by size

        # Per-token coefficients (seconds), so that pricing a step is a handful of mults:
        # an op costs max(compute, memory) = max(f·x, b0 + b1·x) for its size x.
        L, h, m = model.num_layers, model.hidden_size, model
        act_b = 2 * h * self.abytes / self.bandwidth  # read + write the hidden state, per token

        def linear(params):
            return (L * 2 * params / tp / self.flops, L * params * self.wbytes / tp / self.bandwidth, L * act_b)

        self._linear = {"qkv_proj": linear(h * (m.q_size + 2 * m.kv_size)), "o_proj": linear(m.q_size * h)}
        if not m.is_moe:
            self._linear["mlp"] = linear(3 * h * m.intermediate_size)
        q = m.q_size / tp
        self._prefill = (L * 4 * q / self.flops,
                         L * (self.kv_token_layer + 2 * q * self.abytes) / self.bandwidth)
        self._decode = (L * 4 * q / self.flops, L * self.kv_token_layer / self.bandwidth)
        self._rest = L * 4 * act_b  # norms, rope, residual adds, KV writes: memory-bound
        self._lm_head = (2 * h * m.vocab_size / tp / self.flops,
                         m.vocab_size * h * self.wbytes / tp / self.bandwidth)

    def _op(self, flops, nbytes):
        return _max(flops / self.flops, nbytes / self.bandwidth)

    def _collective(self, nbytes, kind: str = "allreduce"):
        tp = self.tp
        factor = 2 * (tp - 1) / tp if kind == "allreduce" else (tp - 1) / tp
        return factor * nbytes / self.link + COLLECTIVE_LATENCY_S

    def op_times(self, s: StepShape) -> dict[str, np.ndarray | float]:
        """Seconds per operation for the whole step (all layers). Works on floats (one step)
        and arrays (many) with the very same arithmetic, so both give identical results."""
        m, tp, L = self.model, self.tp, self.model.num_layers
        tokens = s.num_tokens
        times: dict[str, np.ndarray | float] = {
            name: _max(f * tokens, b0 + b1 * tokens) for name, (f, b0, b1) in self._linear.items()}
        if m.is_moe:
            h, k, e = m.hidden_size, m.experts_per_token, m.num_experts
            tok = np.asarray(tokens, dtype=float)
            act = tok * h * self.abytes
            expert = 3 * h * m.intermediate_size
            touched = e * (1 - (1 - k / e) ** np.maximum(tok, 1))  # distinct experts read
            times["moe_mlp"] = L * self._op(2 * tok * k * expert / tp,
                                            touched * expert * self.wbytes / tp + 2 * act * k)
            times["moe_router"] = L * self._op(2 * tok * h * e, h * e * self.wbytes)
        f, b = self._prefill
        times["attn_prefill"] = _max(f * s.prefill_attn, b * s.prefill_tokens)
        f, b = self._decode
        verify = s.verify_tokens
        if not _is_zero(verify):  # speculative decodes attend with 1 + k queries each
            f = f * (1 + verify / np.maximum(s.decode_seqs, 1))
        times["attn_decode"] = _max(f * s.decode_context, b * s.decode_context)
        times["norms_and_rest"] = self._rest * tokens
        f, b = self._lm_head
        rows = s.num_sampled if _is_zero(verify) else s.num_sampled + verify
        times["lm_head"] = _max(f * rows, b * (rows > 0))  # weights are read if anyone samples
        if tp > 1:
            act = tokens * m.hidden_size * self.abytes
            if self.expert_parallel:  # attention all-reduce, then dispatch + combine all-to-all
                times["allreduce"] = L * self._collective(act)
                times["all_to_all"] = 2 * L * self._collective(act * m.experts_per_token, "all_to_all")
            else:
                times["allreduce"] = 2 * L * self._collective(act)
        if not _is_zero(s.swap_tokens):
            times["swap"] = s.swap_tokens * self.kv_token_gpu / self.gpu.host_bandwidth
        if self.draft is not None and not _is_zero(verify):
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
        # sim/compiled/kernel.py's step_time adds the same terms in the same order.
        ops = self.op_times(s)
        attn_decode = ops.pop("attn_decode")
        total = self.overhead
        for t in ops.values():
            total = total + t
        total = total + attn_decode  # last, so a decode run can price it alone (decode_steps)
        return total if isinstance(total, np.ndarray) else float(total)

    def decode_steps(self, seqs: np.ndarray, context: np.ndarray) -> np.ndarray:
        """Durations of pure-decode steps of ``seqs[j]`` sequences reading ``context[j]``
        tokens of KV: everything but decode attention depends on the batch size alone and is
        priced once per size. Bit-identical to ``step_time`` of each step."""
        if seqs[0] == seqs[-1]:
            rest = self._decode_rest(int(seqs[0]))
        else:
            table = self._decode_rest_table
            if seqs[0] >= len(table) or np.isnan(table[seqs[-1]]) or np.isnan(table[seqs]).any():
                for n in set(seqs.tolist()):
                    self._decode_rest(n)
                table = self._decode_rest_table
            rest = table[seqs]
        c = np.asarray(context, dtype=np.float64)
        f, b = self._decode
        return rest + np.maximum(c * f, c * b)

    def _decode_rest(self, n: int) -> float:
        rest = self._decode_rest_cache.get(n)
        if rest is None:
            ops = self.op_times(StepShape(float(n), float(n), 0.0, 0.0, float(n), 0.0, float(n)))
            del ops["attn_decode"]
            rest = self.overhead
            for t in ops.values():
                rest = rest + t
            rest = self._decode_rest_cache[n] = float(rest)
            table = self._decode_rest_table
            if n >= len(table):
                table = self._decode_rest_table = np.concatenate([table, np.full(n + 1 - len(table), np.nan)])
            table[n] = rest
        return rest


def _max(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return a if a >= b else b


def _is_zero(x) -> bool:
    return not np.any(x) if isinstance(x, np.ndarray) else x == 0


def roofline_for(scenario, replica=None) -> RooflineCost:
    """The roofline of one replica of ``scenario`` (the first one by default)."""
    from sim.scenario.specs import get_model

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
