"""Weight loading: safetensors round trip, GGUF metadata."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from engine_ref import dense_logits, make_executor, plan_for, table_for

from engine.weights import load_model, load_safetensors, random_model, save_safetensors
from sim.scenario.specs import get_model


@pytest.mark.parametrize("tied", [False, True])
def test_safetensors_round_trip(tmp_path, tied):
    spec = replace(get_model("tiny-llama"), tie_embeddings=tied, num_kv_heads=1)
    model = random_model(spec, seed=11)
    folder = save_safetensors(model, tmp_path / "tiny")
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is tied and cfg["torch_dtype"] == "float32"

    back = load_safetensors(folder)
    assert replace(back.spec, name=spec.name) == spec
    for (name, a), (_, b) in zip(model.named_parameters(), back.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    prompt = list(range(3, 30))
    table = table_for([prompt])
    logits = [make_executor(m, [prompt]).forward(plan_for(table, 4, [(0, 27)]), table)
              for m in (model, back)]
    assert torch.equal(logits[0], logits[1])
    assert torch.equal(dense_logits(model, prompt), dense_logits(back, prompt))
    assert load_model(folder).spec.num_kv_heads == 1  # the one entry point finds the folder


def test_safetensors_checkpoint_in_hf_names(tmp_path):
    from safetensors import safe_open

    folder = save_safetensors(random_model("tiny-llama"), tmp_path / "m")
    with safe_open(folder / "model.safetensors", framework="pt") as f:
        keys = set(f.keys())
        q = f.get_tensor("model.layers.1.self_attn.q_proj.weight")
    assert {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
            "model.layers.0.mlp.gate_proj.weight", "model.layers.0.self_attn.k_proj.weight"} <= keys
    assert q.shape == (64, 64)


def test_safetensors_load_casts_dtype(tmp_path):
    folder = save_safetensors(random_model("tiny-llama"), tmp_path / "m")
    assert load_safetensors(folder, dtype="bf16").embed_tokens.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="fp32, bf16 or fp16"):
        load_safetensors(folder, dtype="int4")


def test_missing_tensor_is_named(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = save_safetensors(random_model("tiny-llama"), tmp_path / "m")
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(KeyError, match="up_proj"):
        load_safetensors(folder)


def test_interleaved_models_refuse_hf_export(tmp_path):
    model = random_model(replace(get_model("tiny-llama"), rope_interleaved=True))
    with pytest.raises(ValueError, match="half-split"):
        save_safetensors(model, tmp_path / "x")


def test_moe_is_refused_clearly():
    with pytest.raises(NotImplementedError, match="mixture-of-experts"):
        random_model(replace(get_model("tiny-llama"), num_experts=4, experts_per_token=2))


def test_gguf_spec_matches_the_catalog(smollm2):
    model, _ = smollm2
    want = get_model("smollm2-135m")
    assert model.spec == replace(want, dtype="fp32")
