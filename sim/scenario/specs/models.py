"""Model architectures: the shapes that decide memory and cost.

A ``ModelSpec`` describes a Llama-style decoder (GQA, RoPE, RMSNorm, SwiGLU), optionally with
mixture-of-experts MLPs. Sizes come from the models' published ``config.json`` files.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
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

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    def params_per_layer(self) -> dict[str, int]:
        """Weight parameters of one decoder layer, by operation."""
        h, f = self.hidden_size, self.intermediate_size
        return {
            "qkv": h * (self.q_size + 2 * self.kv_size),
            "o": self.q_size * h,
            "mlp": 3 * h * f * self.num_experts,
            "router": h * self.num_experts if self.is_moe else 0,
            "norm": 2 * h,
        }

    @property
    def num_params(self) -> int:
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_embeddings else embed
        return self.num_layers * sum(self.params_per_layer().values()) + embed + head + self.hidden_size

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> float:
        """Bytes of K and V one token occupies across all layers."""
        return 2 * self.num_layers * self.kv_size * DTYPE_BYTES[kv_dtype or self.dtype]

    @property
    def embedding_params(self) -> int:
        """The token embedding and the LM head (one matrix when tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)

    def weight_bytes(self, weight_dtype: str | None = None) -> float:
        """Bytes of the weights; quantized checkpoints (FP8, INT8, INT4) keep the embedding and
        the LM head in the model's own dtype, as ModelOpt, vLLM and TensorRT-LLM do by default."""
        rest = self.num_params - self.embedding_params
        return rest * DTYPE_BYTES[weight_dtype or self.dtype] + self.embedding_params * DTYPE_BYTES[self.dtype]

    def with_name(self, name: str) -> ModelSpec:
        return replace(self, name=name)


def _m(**kw) -> ModelSpec:
    return ModelSpec(**kw)


MODEL_CATALOG: dict[str, ModelSpec] = {
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


def get_model(name: str) -> ModelSpec:
    """Look a model up by catalog name (case-insensitive)."""
    try:
        return MODEL_CATALOG[name.lower()]
    except KeyError:
        known = ", ".join(sorted(MODEL_CATALOG))
        raise KeyError(f"unknown model {name!r}; known models: {known}") from None
