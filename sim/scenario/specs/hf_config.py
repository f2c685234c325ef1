"""A model's description from its Hugging Face ``config.json``, validated key by key: problems
name the file and the key. Reads the families in ``hf_keys.MODEL_TYPES`` (multimodal wrappers:
their ``text_config``, the vision tower stated as not modelled) and a ``quantization_config``
(FP8, MXFP4, NVFP4, AWQ/GPTQ, compressed-tensors) as each tensor group's weight dtype. A key that
is neither read nor known not to matter is refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationError, ValidationInfo, field_validator

from sim.errors import ModelConfigError
from sim.inputs import check_file, read_text, validation_message
from sim.scenario.specs.hf_keys import IGNORED, MODEL_TYPES, READ, WRAPPERS
from sim.scenario.specs.layers import LinearAttention, Mamba2, Mla
from sim.scenario.specs.models import ModelSpec
from sim.scenario.specs.quant import weight_dtypes

WHAT = "model config (config.json)"
MODELOPT_FILE = "hf_quant_config.json"  # beside config.json: an NVIDIA ModelOpt checkpoint's quantization
HF_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
Size = Annotated[int, Field(gt=0, le=2**31 - 1)]

# Keys a family leaves to its config class's defaults (transformers' values).
DEFAULTS: dict[str | None, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262208, "head_dim": 256, "max_position_embeddings": 131072,
                    "tie_word_embeddings": True, "sliding_window": 4096, "sliding_window_pattern": 6,
                    "rms_norm_eps": 1e-6, "rope_theta": 1e6, "num_key_value_heads": 4},
    "gemma2": {"tie_word_embeddings": True, "sliding_window": 4096},
    "qwen3_next": {"attn_output_gate": True, "full_attention_interval": 4},
    "nemotron_h": {"tie_word_embeddings": False},
}


class HfConfig(BaseModel):
    """The keys every decoder has; family-specific ones are read in ``_describe``."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, populate_by_name=True)

    hidden_size: Size
    num_attention_heads: Size
    num_hidden_layers: Size
    intermediate_size: Size
    vocab_size: Size
    num_key_value_heads: Size | None = None  # None: as many as attention heads
    head_dim: Size | None = Field(None, validate_default=True)  # None: hidden / attention heads
    max_position_embeddings: Size = 4096
    tie_word_embeddings: bool = False
    rope_theta: PositiveFloat = 10000.0
    rms_norm_eps: PositiveFloat = 1e-5
    torch_dtype: Literal["float32", "float16", "bfloat16"] | None = None
    dtype: Literal["float32", "float16", "bfloat16"] | None = None  # newer name of torch_dtype
    num_local_experts: Size | None = None  # Mixtral, gpt-oss, Llama-4
    num_experts: Size | None = None  # Qwen-MoE and others
    n_routed_experts: Size | None = None  # DeepSeek, GLM
    num_experts_per_tok: Size = 1
    name_or_path: str | None = Field(None, alias="_name_or_path")

    @field_validator("num_key_value_heads")
    @classmethod
    def _divides_heads(cls, v: int | None, info: ValidationInfo) -> int | None:
        heads = info.data.get("num_attention_heads")
        if v is not None and heads and heads % v:
            raise ValueError(f"{v} must divide num_attention_heads ({heads})")
        return v

    @field_validator("head_dim")
    @classmethod
    def _head_dim(cls, v: int | None, info: ValidationInfo) -> int | None:
        hidden, heads = info.data.get("hidden_size"), info.data.get("num_attention_heads")
        if v is None and hidden and heads and hidden % heads:
            raise ValueError(f"missing, and num_attention_heads ({heads}) does not divide "
                             f"hidden_size ({hidden}); give head_dim")
        return v

    @field_validator("num_experts_per_tok")
    @classmethod
    def _within_experts(cls, v: int, info: ValidationInfo) -> int:
        experts = (info.data.get("num_local_experts") or info.data.get("num_experts")
                   or info.data.get("n_routed_experts") or 1)
        if experts > 1 and v > experts:
            raise ValueError(f"{v} exceeds the {experts} experts")
        return v

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def experts(self) -> int:
        return self.num_local_experts or self.num_experts or self.n_routed_experts or 1


class _Reader:
    """Family-specific keys of one (unwrapped) config, each checked as it is read."""

    def __init__(self, source: str, raw: dict, prefix: str):
        self.source, self.raw, self.prefix = source, raw, prefix

    def fail(self, key: str, message: str) -> ModelConfigError:
        return ModelConfigError(self.source, self.prefix + key, message)

    def int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        v = self.raw.get(key, default)
        if v is None and default is None:
            raise self.fail(key, "missing; expected a whole number")
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= 2**31 - 1:
            raise self.fail(key, f"expected a whole number ≥ {minimum}, got {json.dumps(v)}")
        return v

    def flag(self, key: str, default: bool = False) -> bool:
        v = self.raw.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.fail(key, f"expected true or false, got {json.dumps(v)}")
        return v

    def kinds(self, key: str, n: int, names: dict[str, str]) -> tuple[str, ...]:
        v = self.raw.get(key)
        if not isinstance(v, list) or len(v) != n:
            raise self.fail(key, f"expected a list of {n} layer types (one per layer), got {json.dumps(v)[:80]}")
        bad = [x for x in v if x not in names]
        if bad:
            raise self.fail(key, f"layer type {bad[0]!r} is not modelled; expected one of {', '.join(names)}")
        return tuple(names[x] for x in v)

    def layer_list(self, key: str, n: int) -> set[int]:
        v = self.raw.get(key) or []
        if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in v):
            raise self.fail(key, f"expected a list of layer indices below {n}, got {json.dumps(v)[:80]}")
        return set(v)


def _unwrap(data: dict, source: str) -> tuple[dict, str, list[str]]:
    """The language model's keys (a wrapper's text_config, with the wrapper's dtype and
    quantization), the prefix that names them, and notes on what is not modelled."""
    notes: list[str] = []
    if "text_config" not in data:
        return data, "", notes
    text = data["text_config"]
    if not isinstance(text, dict):
        raise ModelConfigError(source, "text_config", "expected a JSON object of the language model's keys")
    kind = data.get("model_type")
    if kind is not None and kind not in WRAPPERS:
        raise ModelConfigError(source, "model_type", f"{kind!r} wraps a text_config, and is not a wrapper servesim "
                               f"reads; expected one of {', '.join(sorted(WRAPPERS))}")
    _check_keys(data, source, "", allowed={"text_config", "vision_config"})
    merged = dict(text)
    for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings", "_name_or_path"):
        if key in data and key not in merged:
            merged[key] = data[key]
    if "vision_config" in data:
        notes.append("the vision tower is not modelled (the language model's cost only: image tokens are "
                     "priced as text tokens, the encoder's own time and weights are left out)")
    return merged, "text_config.", notes


def _check_keys(cfg: dict, source: str, prefix: str, allowed: set[str] = frozenset()) -> None:
    for key in cfg:
        if key not in READ and key not in IGNORED and key not in allowed:
            raise ModelConfigError(source, prefix + key, "not a key servesim understands: it may change the "
                                   "model's memory or cost, so the config is refused rather than guessed at "
                                   "(sim/scenario/specs/hf_keys.py lists the keys read and those known not to matter)")


def read_hf_config(path: Path) -> tuple[HfConfig, dict, str, list[str]]:
    """Parse and validate a config.json file: the common keys, all keys (unwrapped), their
    prefix and notes."""
    source = str(path)
    try:
        data = json.loads(read_text(path, None, ModelConfigError, WHAT))
    except json.JSONDecodeError as e:
        raise ModelConfigError(source, None, f"not valid JSON (line {e.lineno}, column {e.colno}): "
                               f"{e.msg}") from None
    except RecursionError:
        raise ModelConfigError(source, None, "not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise ModelConfigError(source, None, f"expected a JSON object of config keys (a Hugging "
                               f"Face config.json), got a {type(data).__name__}")
    raw, prefix, notes = _unwrap(data, source)
    kind = raw.get("model_type")
    if kind not in MODEL_TYPES or kind in WRAPPERS:
        known = ", ".join(k for k in MODEL_TYPES if k)
        raise ModelConfigError(source, prefix + "model_type", f"{kind!r} is not a model type servesim reads; "
                               f"expected one of {known}")
    _check_keys(raw, source, prefix)
    defaults = DEFAULTS.get(kind, {})
    raw = {**defaults, **{k: v for k, v in raw.items() if v is not None or k not in defaults}}
    if kind == "nemotron_h" and "attention_head_dim" in raw:
        raw.setdefault("head_dim", raw["attention_head_dim"])
    if kind == "nemotron_h" and "layer_norm_epsilon" in raw:
        raw.setdefault("rms_norm_eps", raw["layer_norm_epsilon"])
    if "experts_per_token" in raw:  # gpt-oss names it both ways
        raw.setdefault("num_experts_per_tok", raw["experts_per_token"])
    try:
        return HfConfig.model_validate(raw), raw, prefix, notes
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or None
        msg = validation_message(err)
        if err["type"] == "missing":
            msg = "missing; expected a positive whole number (a config.json of a Llama-style model)"
        raise ModelConfigError(source, prefix + (field or ""), msg) from None


def _attention_layers(cfg: HfConfig, r: _Reader, kind: str | None) -> tuple[tuple[str, ...], int]:
    """Each layer's attention kind and the window (or chunk) of the windowed ones."""
    n, raw = cfg.num_hidden_layers, r.raw
    window = raw.get("sliding_window")
    if kind == "llama4_text":
        chunk = r.int("attention_chunk_size", 8192)
        if "no_rope_layers" in raw:  # 1: RoPE and chunked attention; 0: global attention without RoPE
            rope = r.raw["no_rope_layers"]
            if not isinstance(rope, list) or len(rope) != n or any(x not in (0, 1) for x in rope):
                raise r.fail("no_rope_layers", f"expected {n} flags of 0 or 1")
        else:
            rope = [int((i + 1) % 4 != 0) for i in range(n)]
        return tuple("chunked" if x else "full" for x in rope), chunk
    if kind == "qwen3_next":
        if "layer_types" in raw:
            return r.kinds("layer_types", n, {"linear_attention": "linear", "full_attention": "full"}), 0
        every = r.int("full_attention_interval", 4)
        return tuple("full" if (i + 1) % every == 0 else "linear" for i in range(n)), 0
    if kind == "nemotron_h":
        return (), 0  # from the hybrid pattern (see _nemotron_h)
    if kind in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        return ("mla",) * n, 0
    if "layer_types" in raw:
        types = r.kinds("layer_types", n, {"sliding_attention": "sliding", "full_attention": "full"})
        return types, (r.int("sliding_window") if "sliding" in types else 0)
    if window is None or (kind in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and not r.flag("use_sliding_window")):
        return ("full",) * n, 0
    w = r.int("sliding_window")
    if kind == "gemma3_text":
        every = r.int("sliding_window_pattern", 6)
        return tuple("full" if (i + 1) % every == 0 else "sliding" for i in range(n)), w
    if kind == "gemma2":
        return tuple("sliding" if i % 2 == 0 else "full" for i in range(n)), w
    if kind in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):  # sliding from max_window_layers on
        first = r.int("max_window_layers", n, minimum=0)
        return tuple("sliding" if i >= first else "full" for i in range(n)), w
    return ("sliding",) * n, w  # Mistral, Mixtral, Phi-3: every layer


def _mlp_layers(cfg: HfConfig, r: _Reader, kind: str | None) -> tuple[tuple[str, ...], dict[str, Any]]:
    """Each layer's MLP kind and the MoE settings."""
    n, experts = cfg.num_hidden_layers, cfg.experts
    if experts <= 1:
        return (), {}
    extra: dict[str, Any] = {}
    if kind in ("deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe"):
        first, freq = r.int("first_k_dense_replace", 0, minimum=0), r.int("moe_layer_freq", 1)
        mlp = tuple("moe" if i >= first and i % freq == 0 else "dense" for i in range(n))
        extra["moe_intermediate_size"] = r.int("moe_intermediate_size")
        extra["shared_expert_size"] = r.int("n_shared_experts", 0, minimum=0) * extra["moe_intermediate_size"]
    elif kind == "llama4_text":
        step = r.int("interleave_moe_layer_step", 1)
        moe = set(range(step - 1, n, step))
        if "moe_layers" in r.raw:
            moe = r.layer_list("moe_layers", n)
        mlp = tuple("moe" if i in moe else "dense" for i in range(n))
        extra["moe_intermediate_size"] = cfg.intermediate_size  # experts and the shared expert
        extra["shared_expert_size"] = cfg.intermediate_size
        extra["intermediate_size"] = r.int("intermediate_size_mlp", cfg.intermediate_size)  # dense layers
    else:  # Mixtral, gpt-oss, Qwen-MoE, Qwen3-Next
        step = r.int("decoder_sparse_step", 1)
        dense = r.layer_list("mlp_only_layers", n)
        mlp = tuple("moe" if i not in dense and (i + 1) % step == 0 else "dense" for i in range(n))
        if "moe_intermediate_size" in r.raw:
            extra["moe_intermediate_size"] = r.int("moe_intermediate_size")
        extra["shared_expert_size"] = r.int("shared_expert_intermediate_size", 0, minimum=0)
    return mlp, extra


def _nemotron_h(cfg: HfConfig, r: _Reader) -> dict[str, Any]:
    """Nemotron-H's hybrid pattern: one block per character, M a Mamba-2 mixer, * attention, - an MLP."""
    pattern = r.raw.get("hybrid_override_pattern")
    n = cfg.num_hidden_layers
    if not isinstance(pattern, str) or len(pattern) != n:
        raise r.fail("hybrid_override_pattern", f"expected a string of {n} block types (M, *, -)")
    bad = sorted(set(pattern) - set("M*-"))
    if bad:
        raise r.fail("hybrid_override_pattern", f"block type {bad[0]!r} is not modelled; expected M (Mamba-2), "
                     "* (attention) or - (MLP)")
    attn = {"M": "mamba", "*": "full", "-": "none"}
    mlp = {"M": "none", "*": "none", "-": "dense"}
    act = r.raw.get("mlp_hidden_act", "relu2")
    return {
        "layer_attention": tuple(attn[c] for c in pattern), "layer_mlp": tuple(mlp[c] for c in pattern),
        "mamba": Mamba2(r.int("mamba_num_heads"), r.int("mamba_head_dim"), r.int("ssm_state_size"),
                        r.int("n_groups", 1), r.int("conv_kernel", 4)),
        "mlp_matrices": 2 if act in ("relu2", "relu", "gelu") else 3,
    }


def describe(cfg: HfConfig, raw: dict, source: str, prefix: str = "") -> dict[str, Any]:
    """ModelSpec fields beyond the common ones, from the family-specific keys."""
    kind = raw.get("model_type")
    r = _Reader(source, raw, prefix)
    out: dict[str, Any] = {}
    if kind == "nemotron_h":
        out |= _nemotron_h(cfg, r)
    attn, window = _attention_layers(cfg, r, kind)
    if attn and set(attn) != {"full"}:
        out["layer_attention"] = attn
    if window:
        out["sliding_window"] = window
    mlp, moe = _mlp_layers(cfg, r, kind)
    if mlp and set(mlp) != {"moe"}:
        out["layer_mlp"] = mlp
    out |= {k: v for k, v in moe.items() if v}
    if kind in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        out["mla"] = Mla(r.int("q_lora_rank", 0, minimum=0), r.int("kv_lora_rank"), r.int("qk_nope_head_dim"),
                         r.int("qk_rope_head_dim"), r.int("v_head_dim"))
    if kind == "qwen3_next":
        out["linear_attention"] = LinearAttention(
            r.int("linear_num_key_heads"), r.int("linear_num_value_heads"), r.int("linear_key_head_dim"),
            r.int("linear_value_head_dim"), r.int("linear_conv_kernel_dim", 4))
        out["attn_output_gate"] = r.flag("attn_output_gate", True)
    if kind == "gpt_oss":
        out["attention_sinks"] = True
    out["qk_norm"] = kind in ("qwen3", "qwen3_moe", "qwen3_next", "gemma3_text") or (
        kind == "glm4_moe" and r.flag("use_qk_norm"))
    out["shared_expert_gate"] = kind in ("qwen2_moe", "qwen3_next")
    out["mtp_layers"] = r.int("num_nextn_predict_layers", 0, minimum=0)
    act = raw.get("hidden_act") or raw.get("hidden_activation")
    if act in ("relu2",):
        out["mlp_matrices"] = 2
    return out


def _modelopt_config(path: Path) -> dict:
    """A ModelOpt ``hf_quant_config.json``'s quantization, as a quantization_config."""
    source = str(path)
    try:
        data = json.loads(read_text(path, None, ModelConfigError, "ModelOpt quantization config"))
    except json.JSONDecodeError as e:
        raise ModelConfigError(source, None, f"not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}") from None
    q = data.get("quantization") if isinstance(data, dict) else None
    if not isinstance(q, dict):
        raise ModelConfigError(source, "quantization", "missing; expected the ModelOpt quantization settings")
    return {"quant_method": "modelopt", **q}


def model_from_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """The model a Hugging Face ``config.json`` (a file, or the folder holding it) describes;
    problems raise :class:`~sim.errors.ModelConfigError` naming the file and the key."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    cfg, raw, prefix, notes = read_hf_config(check_file(path, None, ModelConfigError, WHAT))
    source = str(path)
    experts = cfg.experts
    dtype = HF_DTYPES[cfg.torch_dtype or cfg.dtype or "bfloat16"]
    fields = describe(cfg, raw, source, prefix)
    quant_config, where = raw.get("quantization_config"), f"{prefix}quantization_config"
    if quant_config is None and (path.parent / MODELOPT_FILE).is_file():  # NVIDIA ModelOpt checkpoints
        quant_config, source, where = _modelopt_config(path.parent / MODELOPT_FILE), str(path.parent / MODELOPT_FILE), \
            "quantization"
    try:
        quant = weight_dtypes(quant_config, cfg.num_hidden_layers)
    except ValueError as e:
        key, _, msg = str(e).partition(": ")
        raise ModelConfigError(source, f"{where}.{key}".rstrip("."), msg) from None
    source = str(path)
    spec = dict(
        name=name or cfg.name_or_path or path.parent.name,
        num_layers=cfg.num_hidden_layers,
        hidden_size=cfg.hidden_size,
        num_heads=cfg.num_attention_heads,
        num_kv_heads=cfg.kv_heads,
        intermediate_size=cfg.intermediate_size,
        vocab_size=cfg.vocab_size,
        max_model_len=cfg.max_position_embeddings,
        head_dim=cfg.head_dim or 0,
        tie_embeddings=cfg.tie_word_embeddings,
        rope_theta=cfg.rope_theta,
        norm_eps=cfg.rms_norm_eps,
        dtype=dtype,
        num_experts=experts,
        experts_per_token=cfg.num_experts_per_tok if experts > 1 else 1,
        weight_dtypes=quant,
        notes=tuple(notes),
    )
    return ModelSpec(**(spec | fields))
