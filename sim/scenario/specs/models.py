"""Model architectures: the shapes that decide memory and cost.

A ``ModelSpec`` describes a decoder by its layers (``layers.py``): each has an attention kind
(full GQA, sliding window, chunked, MLA, linear attention, Mamba-2, none) and an MLP kind
(dense, mixture of experts, none). A plain Llama-style decoder (GQA, RoPE, RMSNorm, SwiGLU) is
the default: every layer full attention with a dense MLP (or an MoE one, Mixtral-style, when
``num_experts`` > 1). Parameters, active parameters, weight bytes per tensor group, KV bytes per
token and state bytes per request all come from that one description. Sizes come from the
models' published ``config.json`` files (``sim/scenario/data/models``, read by ``hf_config``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property

from sim.scenario.specs.kv_bytes import kv_bytes_held
from sim.scenario.specs.layers import KV_CACHED, WINDOWED, LayerGroup, LinearAttention, Mamba2, Mla

# Bytes per element. fp4 is NVFP4 (4-bit values + an fp8 scale per 16), mxfp4 OCP MXFP4 (an
# 8-bit scale per 32); both compute as fp4 where the GPU has fp4 tensor cores.
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
               "fp4": 0.5625, "mxfp4": 0.53125}
MATH_DTYPE = {"mxfp4": "fp4"}  # the tensor-core math a storage format runs (else its own name)
WEIGHT_GROUPS = ("attention", "mlp", "experts")  # tensor groups a quantization_config may set apart


def math_dtype(dtype: str) -> str:
    return MATH_DTYPE.get(dtype, dtype)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int  # the dense MLP's (and, with no moe_intermediate_size, each expert's)
    vocab_size: int
    max_model_len: int
    head_dim: int = 0  # 0: hidden_size // num_heads
    tie_embeddings: bool = False
    rope_theta: float = 10000.0
    rope_interleaved: bool = False
    norm_eps: float = 1e-5
    dtype: str = "bf16"
    num_experts: int = 1  # >1: mixture of experts
    experts_per_token: int = 1
    # -- beyond a plain decoder (defaults: a Llama / Mixtral layer everywhere) --
    layer_attention: tuple[str, ...] = ()  # per layer (layers.ATTENTION_KINDS); (): all "full" ("mla" with mla)
    layer_mlp: tuple[str, ...] = ()  # per layer (layers.MLP_KINDS); (): all "moe" if num_experts > 1, else "dense"
    sliding_window: int = 0  # tokens a sliding layer attends to (the chunk of a chunked layer)
    attention_sinks: bool = False  # a learned sink logit per head (gpt-oss)
    attn_output_gate: bool = False  # q_proj also makes a sigmoid gate per head (Qwen3-Next)
    qk_norm: bool = False  # an RMSNorm weight over each query and key head (Qwen3, Gemma-3)
    shared_expert_gate: bool = False  # a sigmoid gate (hidden → 1) on the shared expert (Qwen-MoE)
    mla: Mla | None = None
    linear_attention: LinearAttention | None = None
    mamba: Mamba2 | None = None
    moe_intermediate_size: int = 0  # each routed expert's (0: intermediate_size)
    shared_expert_size: int = 0  # intermediate size of the always-active shared expert(s), all together
    mlp_matrices: int = 3  # gate, up, down (2 for relu² MLPs: Nemotron-H)
    mtp_layers: int = 0  # multi-token-prediction (next-n) layers shipped with the model
    weight_dtypes: tuple[tuple[str, str], ...] = ()  # (tensor group, storage dtype) a checkpoint quantizes
    notes: tuple[str, ...] = ()  # what of the checkpoint is not modelled (a vision tower, ...)

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        for what, kinds in (("layer_attention", self.layer_attention), ("layer_mlp", self.layer_mlp)):
            if kinds and len(kinds) != self.num_layers:
                raise ValueError(f"{what} lists {len(kinds)} layers, not num_layers ({self.num_layers})")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def expert_size(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    # -- the layers -------------------------------------------------------------------------
    def layer_kinds(self) -> list[tuple[str, str]]:
        """(attention kind, MLP kind) of each layer."""
        attn = self.layer_attention or ("mla" if self.mla else "full",) * self.num_layers
        mlp = self.layer_mlp or ("moe" if self.is_moe else "dense",) * self.num_layers
        return list(zip(attn, mlp, strict=True))

    @cached_property
    def groups(self) -> tuple[LayerGroup, ...]:
        """Layers of one kind together, in order of first appearance."""
        counts = Counter(self.layer_kinds())
        return tuple(LayerGroup(n, a, m) for (a, m), n in counts.items())

    @property
    def is_plain(self) -> bool:
        """Every layer full attention (no window, no MLA) with one MLP kind: today's Llama/Mixtral
        decoder, priced and sized by the original formulas."""
        return len(self.groups) == 1 and self.groups[0].attention == "full" and not (
            self.attention_sinks or self.attn_output_gate or self.shared_expert_size or self.moe_intermediate_size
            or self.mlp_matrices != 3 or self.qk_norm)

    @property
    def attention_kind(self) -> str:
        """A short name of the attention the layers use (for listings)."""
        kinds = Counter(a for a, _ in self.layer_kinds() if a != "none")
        parts = [f"{k}" if n == self.num_layers else f"{k} ×{n}" for k, n in kinds.items()]
        if "sliding" in kinds or "chunked" in kinds:
            parts.append(f"W={self.sliding_window}")
        if self.attention_sinks:
            parts.append("sinks")
        return ", ".join(parts)

    def dtype_of(self, group: str, weight_dtype: str | None = None) -> str:
        """Storage dtype of a tensor group: ``weight_dtype`` (the scenario's quantization), else
        the checkpoint's own quantization of that group, else the model dtype."""
        if weight_dtype:
            return weight_dtype
        return dict(self.weight_dtypes).get(group, self.dtype)

    def attention_params(self, kind: str) -> dict[str, int]:
        h = self.hidden_size
        if kind in ("full", *WINDOWED):
            q = self.q_size * (2 if self.attn_output_gate else 1)
            extra = (self.num_heads if self.attention_sinks else 0) + (2 * self.head_dim if self.qk_norm else 0)
            return {"qkv": h * (q + 2 * self.kv_size) + extra, "o": self.q_size * h}
        if kind == "mla":
            return self.mla.params(h, self.num_heads)
        if kind == "linear":
            return self.linear_attention.params(h)
        if kind == "mamba":
            return self.mamba.params(h)
        return {"qkv": 0, "o": 0}

    def layer_params(self, attention: str, mlp: str) -> dict[str, int]:
        """Weight parameters of one layer, by operation (``experts``: all routed experts)."""
        h, m = self.hidden_size, self.mlp_matrices
        out = self.attention_params(attention)
        out |= {"mlp": 0, "experts": 0, "router": 0}
        if mlp == "dense":
            out["mlp"] = m * h * self.intermediate_size
        elif mlp == "moe":
            out["mlp"] = m * h * self.shared_expert_size
            out["experts"] = m * h * self.expert_size * self.num_experts
            out["router"] = h * self.num_experts + (h if self.shared_expert_gate and self.shared_expert_size else 0)
        out["norm"] = h * ((attention != "none") + (mlp != "none"))
        return out

    def params_per_layer(self) -> dict[str, int]:
        """Weight parameters of one decoder layer, by operation (the first layer's kind; Mixtral
        style MoE counts its experts under ``mlp``)."""
        p = self.layer_params(*self.layer_kinds()[0])
        return {"qkv": p["qkv"], "o": p["o"], "mlp": p["mlp"] + p["experts"], "router": p["router"],
                "norm": p["norm"]}

    def _layers_total(self, active: bool = False) -> int:
        total = 0
        for g in self.groups:
            p = self.layer_params(g.attention, g.mlp)
            if active and g.mlp == "moe":
                p["experts"] = p["experts"] * self.experts_per_token // self.num_experts
            total += g.count * sum(p.values())
        return total

    @property
    def num_params(self) -> int:
        """All parameters of the model as served (MTP layers apart: ``mtp_params``)."""
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_embeddings else embed
        if self.is_plain:
            return self.num_layers * sum(self.params_per_layer().values()) + embed + head + self.hidden_size
        return self._layers_total() + embed + head + self.hidden_size

    @property
    def active_params(self) -> int:
        """Parameters one token runs through: every routed expert layer counts its top-k experts."""
        return self._layers_total(active=True) + self.embedding_params + self.hidden_size

    @property
    def mtp_params(self) -> int:
        """The next-n prediction layers: a decoder layer each (of the last layer's kind) plus the
        projection of [embedding; hidden] back to the hidden size and its norms."""
        if not self.mtp_layers:
            return 0
        h = self.hidden_size
        return self.mtp_layers * (sum(self.layer_params(*self.layer_kinds()[-1]).values()) + 2 * h * h + 3 * h)

    @property
    def embedding_params(self) -> int:
        """The token embedding and the LM head (one matrix when tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)

    def group_params(self) -> dict[str, int]:
        """Parameters per tensor group (WEIGHT_GROUPS, plus ``embedding``: embedding and LM head,
        and ``other``: norms and routers, kept in the model dtype)."""
        out = dict.fromkeys((*WEIGHT_GROUPS, "other"), 0)
        for g in self.groups:
            p = self.layer_params(g.attention, g.mlp)
            out["attention"] += g.count * (p["qkv"] + p["o"])
            out["mlp"] += g.count * p["mlp"]
            out["experts"] += g.count * p["experts"]
            out["other"] += g.count * (p["router"] + p["norm"])
        out["other"] += self.hidden_size
        out["embedding"] = self.embedding_params
        return out

    def weight_bytes(self, weight_dtype: str | None = None) -> float:
        """Bytes of the weights; quantized checkpoints (FP8, INT8, INT4, FP4) keep the embedding
        and the LM head in the model's own dtype, as ModelOpt, vLLM and TensorRT-LLM do by
        default. A checkpoint's own quantization (``weight_dtypes``) sets each group's dtype;
        the scenario's ``weight_dtype`` replaces it for all of them."""
        if self.is_plain and not self.weight_dtypes:
            rest = self.num_params - self.embedding_params
            return rest * DTYPE_BYTES[weight_dtype or self.dtype] + self.embedding_params * DTYPE_BYTES[self.dtype]
        p = self.group_params()
        total = (p["embedding"] + p["other"]) * DTYPE_BYTES[self.dtype]
        for g in WEIGHT_GROUPS:
            total += p[g] * DTYPE_BYTES[self.dtype_of(g, weight_dtype)]
        return total

    # -- the KV cache and the per-request state ---------------------------------------------
    def kv_elements_per_layer(self, kind: str) -> int:
        """Elements one token adds to the cache of one layer of ``kind``."""
        if kind in ("full", *WINDOWED):
            return 2 * self.kv_size
        if kind == "mla":
            return self.mla.latent
        return 0

    def kv_shards(self, kind: str, tp: int) -> int:
        """Over how many tensor-parallel ranks a layer's cache is split: KV heads (replicated
        beyond their number); MLA's latent is one head, held whole by every rank."""
        return 1 if kind == "mla" else min(tp, self.num_kv_heads)

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> float:
        """Bytes of K and V one token occupies across all layers (sliding-window layers
        included: a token within the window)."""
        b = DTYPE_BYTES[kv_dtype or self.dtype]
        if self.is_plain:
            return 2 * self.num_layers * self.kv_size * b
        return float(sum(g.count * self.kv_elements_per_layer(g.attention) for g in self.groups
                         if g.attention in KV_CACHED)) * b

    def kv_bytes_per_token_gpu(self, kv_dtype: str | None, tp: int, pp: int) -> float:
        """KV bytes per token on one GPU of a tp × pp replica."""
        b = DTYPE_BYTES[kv_dtype or self.dtype]
        if self.is_plain:
            return self.kv_bytes_per_token(kv_dtype) / (min(tp, self.num_kv_heads) * pp)
        return sum(g.count * self.kv_elements_per_layer(g.attention) * b / self.kv_shards(g.attention, tp)
                   for g in self.groups if g.attention in KV_CACHED) / pp

    def kv_bytes_per_token_split(self, kv_dtype: str | None = None) -> tuple[float, float]:
        """``kv_bytes_per_token`` in two parts: the layers that keep every token (full attention,
        MLA) and the windowed ones (sliding, chunked), which keep only their window."""
        b = DTYPE_BYTES[kv_dtype or self.dtype]
        windowed = float(sum(g.count * self.kv_elements_per_layer(g.attention) for g in self.groups
                             if g.attention in WINDOWED)) * b
        return self.kv_bytes_per_token(kv_dtype) - windowed, windowed

    def kv_bytes_of_request(self, tokens: int, block_size: int, kv_dtype: str | None = None) -> float:
        """KV bytes a request of ``tokens`` tokens holds across all layers (what a disaggregated
        hand-off moves): see ``kv_bytes_held``."""
        full, windowed = self.kv_bytes_per_token_split(kv_dtype)
        return kv_bytes_held(tokens, full, windowed, self.sliding_window, self.chunked, block_size,
                             self.state_bytes_per_request())

    @property
    def chunked(self) -> bool:
        """Whether the windowed layers are chunked (Llama-4's local attention) rather than sliding."""
        return any(g.attention == "chunked" for g in self.groups)

    @property
    def windowed_layers(self) -> int:
        return sum(g.count for g in self.groups if g.attention in WINDOWED)

    def state_bytes_per_request(self) -> float:
        """Linear-attention / SSM state one request holds, in the model dtype (vLLM's default
        mamba cache dtype), across all layers."""
        b = DTYPE_BYTES[self.dtype]
        total = 0
        for g in self.groups:
            if g.attention == "linear":
                total += g.count * self.linear_attention.state_elements
            elif g.attention == "mamba":
                total += g.count * self.mamba.state_elements
        return total * b

    def with_name(self, name: str) -> ModelSpec:
        return replace(self, name=name)



def _m(**kw) -> ModelSpec:
    return ModelSpec(**kw)


BUILTIN_MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        _m(name="llama-2-7b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=32,
           intermediate_size=11008, vocab_size=32000, max_model_len=4096),
        _m(name="llama-2-13b", num_layers=40, hidden_size=5120, num_heads=40, num_kv_heads=40,
           intermediate_size=13824, vocab_size=32000, max_model_len=4096),
        _m(name="llama-2-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
           intermediate_size=28672, vocab_size=32000, max_model_len=4096),
        _m(name="llama-3-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
           intermediate_size=14336, vocab_size=128256, max_model_len=8192, rope_theta=500000.0),
        _m(name="llama-3-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
           intermediate_size=28672, vocab_size=128256, max_model_len=8192, rope_theta=500000.0),
        # Llama 3.1: Llama 3's shapes with a 128K context (config.json max_position_embeddings 131072).
        _m(name="llama-3.1-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
           intermediate_size=14336, vocab_size=128256, max_model_len=131072, rope_theta=500000.0),
        _m(name="llama-3.1-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
           intermediate_size=28672, vocab_size=128256, max_model_len=131072, rope_theta=500000.0),
        _m(name="mistral-7b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
           intermediate_size=14336, vocab_size=32000, max_model_len=32768, rope_theta=1e6),
        _m(name="qwen2.5-7b", num_layers=28, hidden_size=3584, num_heads=28, num_kv_heads=4,
           intermediate_size=18944, vocab_size=152064, max_model_len=32768, rope_theta=1e6,
           norm_eps=1e-6),
        _m(name="mixtral-8x7b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
           intermediate_size=14336, vocab_size=32000, max_model_len=32768, rope_theta=1e6,
           num_experts=8, experts_per_token=2),
        _m(name="smollm2-135m", num_layers=30, hidden_size=576, num_heads=9, num_kv_heads=3,
           intermediate_size=1536, vocab_size=49152, max_model_len=8192, tie_embeddings=True,
           rope_theta=100000.0, rope_interleaved=True),
        # Tiny models: fast enough to execute on a laptop CPU, for tests and validation.
        _m(name="tiny-llama", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
           intermediate_size=128, vocab_size=256, max_model_len=2048, dtype="fp32"),
        _m(name="tiny-llama-12m", num_layers=4, hidden_size=256, num_heads=8, num_kv_heads=2,
           intermediate_size=768, vocab_size=8192, max_model_len=4096, dtype="fp32"),
    ]
}
