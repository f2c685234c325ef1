"""A decoder's layers, one kind of attention and one kind of MLP each: the parts of a
``ModelSpec`` that are not a plain GQA-attention + SwiGLU layer.

Attention kinds: ``full`` (MHA/GQA/MQA), ``sliding`` (a window of ``sliding_window`` tokens:
Gemma-2/3, gpt-oss, Mistral), ``chunked`` (Llama-4's local attention within chunks of
``sliding_window`` tokens: at most that many keys, like a window), ``mla`` (DeepSeek's latent
attention), ``linear`` (Qwen3-Next's gated delta net), ``mamba`` (Mamba-2: Nemotron-H) and
``none`` (an MLP-only block). MLP kinds: ``dense``, ``moe`` and ``none`` (an attention- or
mixer-only block). The per-layer figures here (parameters, KV bytes per token, state bytes per
request) are what every other part (memory, pricing, the catalog listing) adds up.
"""

from __future__ import annotations

from dataclasses import dataclass

ATTENTION_KINDS = ("full", "sliding", "chunked", "mla", "linear", "mamba", "none")
WINDOWED = ("sliding", "chunked")  # at most sliding_window keys per query
KV_CACHED = ("full", "sliding", "chunked", "mla")  # a cache that grows with the context
STATEFUL = ("linear", "mamba")  # a fixed state per request instead
MLP_KINDS = ("dense", "moe", "none")


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): queries through a rank-``q_lora_rank``
    bottleneck (0: a plain projection), keys and values cached as one ``kv_lora_rank`` latent plus a
    shared ``qk_rope_head_dim`` RoPE key per token."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def params(self, h: int, heads: int) -> dict[str, int]:
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank:
            q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk
        else:
            q = h * heads * qk
        kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
              + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim))
        return {"qkv": q + kv, "o": heads * self.v_head_dim * h}

    @property
    def latent(self) -> int:
        """Elements cached per token and layer."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def prefill_flops_per_pair(self, heads: int) -> float:
        """Prefill runs the decompressed heads (qk·K over nope+rope dims, then ·V)."""
        return 2.0 * heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)

    def decode_flops_per_token(self, heads: int) -> float:
        """Decode runs on the latent with the absorbed weights (as FlashMLA and FlashInfer's MLA
        kernels do): each head scores all of the latent + rope and sums the latent."""
        return 2.0 * heads * (self.latent + self.kv_lora_rank)


@dataclass(frozen=True)
class LinearAttention:
    """Qwen3-Next's gated delta net: a (key_dim × value_dim) state per value head and a short
    convolution over the q/k/v projections."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def params(self, h: int) -> dict[str, int]:
        nv = self.num_value_heads
        qkv = (h * (2 * self.key_dim + 2 * self.value_dim) + h * 2 * nv  # in_proj_qkvz, in_proj_ba
               + self.conv_dim * self.conv_kernel + 2 * nv + self.value_head_dim)  # conv1d, dt_bias, A_log, norm
        return {"qkv": qkv, "o": self.value_dim * h}

    @property
    def state_elements(self) -> int:
        """The recurrent state and the convolution's last kernel − 1 inputs, per request and layer."""
        return self.num_value_heads * self.key_head_dim * self.value_head_dim + self.conv_dim * (self.conv_kernel - 1)

    @property
    def flops_per_token(self) -> float:
        """The recurrence: read, decay, update and query the state (≈ 3 multiply-adds per element)."""
        return 6.0 * self.num_value_heads * self.key_head_dim * self.value_head_dim


@dataclass(frozen=True)
class Mamba2:
    """A Mamba-2 mixer (Nemotron-H, Jamba): ``num_heads`` × ``head_dim`` channels, a
    ``state_size`` state per head shared over ``n_groups`` groups of B/C projections."""

    num_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int

    @property
    def inner(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.inner + 2 * self.n_groups * self.state_size

    def params(self, h: int) -> dict[str, int]:
        qkv = (h * (2 * self.inner + 2 * self.n_groups * self.state_size + self.num_heads)  # in_proj
               + self.conv_dim * (self.conv_kernel + 1)  # conv1d and its bias
               + 3 * self.num_heads + self.inner)  # dt bias, A, D, norm
        return {"qkv": qkv, "o": self.inner * h}

    @property
    def state_elements(self) -> int:
        return self.inner * self.state_size + self.conv_dim * (self.conv_kernel - 1)

    @property
    def flops_per_token(self) -> float:
        return 6.0 * self.inner * self.state_size


@dataclass(frozen=True)
class LayerGroup:
    """``count`` layers of one attention kind and one MLP kind."""

    count: int
    attention: str
    mlp: str
