"""A model's shape from its Hugging Face ``config.json`` (Llama-style decoders, optionally
mixture of experts), validated key by key: problems name the file and the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationError, ValidationInfo, field_validator

from sim.errors import ModelConfigError
from sim.inputs import check_file, read_text, validation_message
from sim.scenario.specs.models import ModelSpec

WHAT = "model config (config.json)"
HF_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
Size = Annotated[int, Field(gt=0, le=2**31 - 1)]


class HfConfig(BaseModel):
    """The keys of a config.json that decide memory and cost; the others are ignored. Keys
    checked against others come after them."""

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
    num_local_experts: Size | None = None  # Mixtral
    num_experts: Size | None = None  # Qwen-MoE and others
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
        experts = info.data.get("num_local_experts") or info.data.get("num_experts") or 1
        if experts > 1 and v > experts:
            raise ValueError(f"{v} exceeds the {experts} experts")
        return v

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def experts(self) -> int:
        return self.num_local_experts or self.num_experts or 1


def read_hf_config(path: Path) -> HfConfig:
    """Parse and validate a config.json file."""
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
    try:
        return HfConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or None
        msg = validation_message(err)
        if err["type"] == "missing":
            msg = "missing; expected a positive whole number (a config.json of a Llama-style model)"
        raise ModelConfigError(source, field, msg) from None


def model_from_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """The model a Hugging Face ``config.json`` (a file, or the folder holding it) describes;
    problems raise :class:`~sim.errors.ModelConfigError` naming the file and the key."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    cfg = read_hf_config(check_file(path, None, ModelConfigError, WHAT))
    experts = cfg.experts
    return ModelSpec(
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
        dtype=HF_DTYPES[cfg.torch_dtype or cfg.dtype or "bfloat16"],
        num_experts=experts,
        experts_per_token=cfg.num_experts_per_tok if experts > 1 else 1,
    )
