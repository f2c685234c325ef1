"""A Llama-style decoder (GQA, RoPE, RMSNorm, SwiGLU) that runs one flat batch per step.

A step is one flat run of ``T`` tokens from ``B`` sequences, each row a prefill chunk or a
single decode token, described by :class:`StepInputs`. K/V go into a paged cache and
attention reads them back from there, so chunks and decodes mix freely in one step.

Every operation runs inside ``self.timer(op)``: a no-op by default; calibration swaps in a
timer (see ``engine.timing``) to measure linear layers, attention, norms, RoPE and KV writes
on the engine's own tensors. The op names are listed in :data:`OPS`; per-layer ops are timed
once per layer. The executor adds ``prepare_inputs`` and ``sample`` around the forward.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from kernels import (
    build_cos_sin_cache,
    fused_add_rms_norm,
    paged_attention,
    rms_norm,
    rotary_embedding,
    silu_and_mul,
    write_kv_cache,
)
from sim.scenario.specs import ModelSpec

OpTimer = Callable[[str], AbstractContextManager]

# Names the forward passes to the timer, in the order they run within a layer.
OPS = (
    "embed", "input_norm", "qkv_proj", "rope", "kv_write", "attention", "o_proj",
    "post_attn_norm", "gate_up_proj", "act", "down_proj", "final_norm", "lm_head",
)  # fmt: skip

_NULL = nullcontext()


def no_timer(op: str) -> AbstractContextManager:
    return _NULL


TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def torch_dtype(name: str | torch.dtype) -> torch.dtype:
    """``"bf16"`` -> ``torch.bfloat16``; torch dtypes pass through."""
    if isinstance(name, torch.dtype):
        return name
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise ValueError(f"the engine runs fp32, bf16 or fp16, not {name!r}") from None


@dataclass
class StepInputs:
    """Tensors of one step, all on the model's device.

    ``query_start_loc[b]:query_start_loc[b+1]`` are row b's tokens in the flat batch;
    ``seq_lens[b]`` counts row b's cached tokens including this step's; ``slot_mapping[t]``
    is where token t's K/V go (``block_id * block_size + offset``; -1: nowhere); ``sample_idx``
    are the flat indices whose logits are wanted (the last token of each sampling row);
    ``max_context`` is ``max(seq_lens)`` if known on the host (the split-KV rule uses it);
    ``query_block`` fixes attention's rows per program (a CUDA graph's choice; None: the
    kernel's rule on this step's sizes).
    """

    input_ids: torch.Tensor  # int64 [T]
    positions: torch.Tensor  # int64 [T]
    query_start_loc: torch.Tensor  # int32 [B+1]
    seq_lens: torch.Tensor  # int32 [B]
    block_tables: torch.Tensor  # int32 [B, max_blocks]
    slot_mapping: torch.Tensor  # int64 [T]
    sample_idx: torch.Tensor  # int64 [S]
    max_context: int | None = None
    query_block: int | None = None


def _param(*shape: int, dtype: torch.dtype, device) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape, dtype=dtype, device=device), requires_grad=False)


class DecoderLayer(nn.Module):
    """Weights of one layer: fused QKV ``[q+2kv, H]`` and fused gate|up ``[2F, H]``."""

    def __init__(self, spec: ModelSpec, dtype: torch.dtype, device):
        super().__init__()
        h, f = spec.hidden_size, spec.intermediate_size
        self.input_layernorm = _param(h, dtype=dtype, device=device)
        self.qkv_proj = _param(spec.q_size + 2 * spec.kv_size, h, dtype=dtype, device=device)
        self.o_proj = _param(h, spec.q_size, dtype=dtype, device=device)
        self.post_attention_layernorm = _param(h, dtype=dtype, device=device)
        self.gate_up_proj = _param(2 * f, h, dtype=dtype, device=device)
        self.down_proj = _param(h, f, dtype=dtype, device=device)


class LlamaModel(nn.Module):
    """Weights are left uninitialised: fill them with ``engine.weights``."""

    def __init__(self, spec: ModelSpec, dtype: str | torch.dtype | None = None,
                 device: str | torch.device = "cpu", impl: str = "auto"):
        super().__init__()
        if spec.is_moe:
            raise NotImplementedError(f"{spec.name}: mixture-of-experts MLPs are not supported")
        if not spec.is_plain:
            raise NotImplementedError(f"{spec.name}: only Llama-style layers are supported ({spec.attention_kind})")
        self.spec = spec
        self.dtype = torch_dtype(dtype or spec.dtype)
        self.device = torch.device(device)
        self.impl = impl
        self.timer: OpTimer = no_timer
        dt, dev = self.dtype, self.device
        self.embed_tokens = _param(spec.vocab_size, spec.hidden_size, dtype=dt, device=dev)
        self.layers = nn.ModuleList(DecoderLayer(spec, dt, dev) for _ in range(spec.num_layers))
        self.norm = _param(spec.hidden_size, dtype=dt, device=dev)
        self.lm_head = (self.embed_tokens if spec.tie_embeddings
                        else _param(spec.vocab_size, spec.hidden_size, dtype=dt, device=dev))
        cache = build_cos_sin_cache(spec.max_model_len, spec.head_dim, spec.rope_theta,
                                    dtype=torch.float32, device=dev)
        self.register_buffer("cos_sin_cache", cache, persistent=False)
        self.scale = spec.head_dim**-0.5

    def forward(self, x: StepInputs, kv_caches: list[tuple[torch.Tensor, torch.Tensor]]
                ) -> torch.Tensor:
        """Hidden states ``[T, H]`` after the final norm; writes this step's K/V."""
        s, t, impl = self.spec, self.timer, self.impl
        n = x.input_ids.shape[0]
        hq, hk, d = s.num_heads, s.num_kv_heads, s.head_dim
        with t("embed"):
            h = F.embedding(x.input_ids, self.embed_tokens)
        residual = None
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches, strict=True):
            with t("input_norm"):
                if residual is None:
                    residual, h = h, rms_norm(h, layer.input_layernorm, s.norm_eps, impl=impl)
                else:
                    h, residual = fused_add_rms_norm(h, residual, layer.input_layernorm,
                                                     s.norm_eps, impl=impl)
            with t("qkv_proj"):
                qkv = F.linear(h, layer.qkv_proj)
            q, k, v = qkv.split([s.q_size, s.kv_size, s.kv_size], dim=-1)
            q, k, v = q.view(n, hq, d), k.view(n, hk, d), v.view(n, hk, d)
            with t("rope"):
                q, k = rotary_embedding(x.positions, q, k, self.cos_sin_cache,
                                        s.rope_interleaved, impl=impl)
            with t("kv_write"):
                write_kv_cache(k, v, k_cache, v_cache, x.slot_mapping, impl=impl)
            with t("attention"):
                o = paged_attention(q, k_cache, v_cache, x.block_tables, x.query_start_loc,
                                    x.seq_lens, self.scale, impl=impl, max_context=x.max_context,
                                    block_m=x.query_block)
            with t("o_proj"):
                h = F.linear(o.reshape(n, s.q_size), layer.o_proj)
            with t("post_attn_norm"):
                h, residual = fused_add_rms_norm(h, residual, layer.post_attention_layernorm,
                                                 s.norm_eps, impl=impl)
            with t("gate_up_proj"):
                gu = F.linear(h, layer.gate_up_proj)
            with t("act"):
                h = silu_and_mul(gu, impl=impl)
            with t("down_proj"):
                h = F.linear(h, layer.down_proj)
        with t("final_norm"):
            if residual is None:  # a model with no layers
                return rms_norm(h, self.norm, s.norm_eps, impl=impl)
            h, _ = fused_add_rms_norm(h, residual, self.norm, s.norm_eps, impl=impl)
        return h

    def compute_logits(self, hidden: torch.Tensor, sample_idx: torch.Tensor) -> torch.Tensor:
        """fp32 logits ``[S, V]`` of the rows ``sample_idx`` of ``hidden``."""
        with self.timer("lm_head"):
            return F.linear(hidden[sample_idx], self.lm_head).float()
