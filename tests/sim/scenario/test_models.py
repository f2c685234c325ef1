"""Models by layer groups, read from their real config.json (issue 27): parameters against the
published figures, KV bytes per token per attention kind, quantization per tensor group, and
keys that would change the cost refused by name."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from sim.cli.app import main
from sim.errors import ModelConfigError
from sim.scenario.load import load_scenario
from sim.scenario.memory import memory_budget
from sim.scenario.specs import MODEL_CATALOG, get_gpu, get_model, model_from_hf_config
from sim.scenario.specs.catalog import config_names


def run_cli(capsys, *argv) -> tuple[int, str]:
    """Exit code and everything the command printed."""
    code = main(list(argv))
    return code, "".join(capsys.readouterr())


def write(tmp_path, text):
    (tmp_path / "s.yaml").write_text(text)
    return tmp_path / "s.yaml"

DATA = resources.files("sim.scenario.data").joinpath("models")

# Published total and active parameters. ``unit``: the figure's last published digit (a figure
# given as "37B" is 37 ± 0.5B); the test allows max(1%, half that unit), or, where the publisher
# truncates, up to one unit above. ``active``: which
# embeddings the publisher counts among the active parameters ("all": embedding and LM head,
# "head": the LM head only, the embedding being a lookup, "none": neither). ``vision``: the
# published total includes a vision tower servesim does not model, so the language model is
# below it by less than 2%.
PUBLISHED = {
    # DeepSeek-V3 technical report (arXiv 2412.19437): 671B total (685B with the MTP module), 37B activated
    "deepseek-v3": dict(total=671e9, active=37e9, unit=1e9, convention="head"),
    "deepseek-r1": dict(total=671e9, active=37e9, unit=1e9, convention="head"),
    # Kimi-K2 model card: 1T total, 32B activated
    "kimi-k2": dict(total=1.0e12, active=32e9, unit=0.1e12, convention="head"),
    # Qwen3 model cards: 235B / 22B, 30.5B / 3.3B, 32.8B, 8.2B
    "qwen3-235b-a22b": dict(total=235e9, active=22e9, unit=1e9, convention="all"),
    "qwen3-235b-a22b-fp8": dict(total=235e9, active=22e9, unit=1e9, convention="all"),
    # (the card truncates: 30.53B is "30.5B", 3.353B "3.3B")
    "qwen3-30b-a3b": dict(total=30.5e9, active=3.3e9, unit=0.1e9, convention="all", truncated=True),
    "qwen3-32b": dict(total=32.8e9, unit=0.1e9),
    "qwen3-8b": dict(total=8.2e9, unit=0.1e9),
    # Qwen3-Next-80B-A3B's architecture: the checkpoint's tensor sizes (safetensors headers of
    # Qwen3-Coder-Next, the same shapes) sum to 79,674,391,296; 3,874,929,408 active
    "qwen3-next-80b-a3b": dict(total=79_674_391_296, active=3_874_929_408, unit=1, convention="all"),
    # gpt-oss model card (OpenAI, 2025): 116.83B / 5.13B and 20.91B / 3.61B active, embedding excluded
    "gpt-oss-120b": dict(total=116.83e9, active=5.13e9, unit=0.01e9, convention="head"),
    "gpt-oss-20b": dict(total=20.91e9, active=3.61e9, unit=0.01e9, convention="head"),
    # Meta's Llama 4 announcement: Scout 109B / 17B active, Maverick 400B / 17B (vision encoder included)
    "llama-4-scout": dict(total=109e9, active=17e9, unit=1e9, convention="all", vision=True),
    "llama-4-maverick": dict(total=400e9, active=17e9, unit=1e9, convention="all"),
    "llama-3.1-405b": dict(total=405e9, unit=1e9),
    "llama-3.3-70b": dict(total=70.6e9, unit=0.1e9),
    # Gemma 3 technical report: 27B (text 27.0B with the 0.4B SigLIP encoder apart)
    "gemma-3-27b": dict(total=27e9, unit=1e9),
    # Mistral-Small-3.1: 24B with its vision encoder
    "mistral-small-3.1": dict(total=24e9, unit=1e9, vision=True),
    # Mistral's Mixtral-8x22B announcement: 141B total, 39B active
    "mixtral-8x22b": dict(total=141e9, active=39e9, unit=1e9, convention="all"),
    "mixtral-8x7b": dict(total=46.7e9, active=12.9e9, unit=0.1e9, convention="all"),
    # GLM-4.5 announcement (Z.ai): 355B total, 32B active (embeddings not counted)
    "glm-4.5": dict(total=355e9, active=32e9, unit=1e9, convention="none"),
    # Nemotron-H paper (NVIDIA, arXiv 2504.03624): 56B
    "nemotron-h-56b": dict(total=56e9, unit=1e9),
    # Llama 2 paper, Llama 3 model cards, Mistral 7B, Qwen2.5, SmolLM2 cards
    "llama-2-7b": dict(total=6.74e9, unit=0.01e9), "llama-2-13b": dict(total=13.0e9, unit=0.1e9),
    "llama-2-70b": dict(total=69.0e9, unit=0.1e9), "llama-3-8b": dict(total=8.03e9, unit=0.01e9),
    "llama-3-70b": dict(total=70.6e9, unit=0.1e9), "llama-3.1-8b": dict(total=8.03e9, unit=0.01e9),
    "llama-3.1-70b": dict(total=70.6e9, unit=0.1e9), "mistral-7b": dict(total=7.24e9, unit=0.01e9),
    "qwen2.5-7b": dict(total=7.61e9, unit=0.01e9), "smollm2-135m": dict(total=135e6, unit=1e6),
}
UNPUBLISHED = {"tiny-llama", "tiny-llama-12m"}  # test shapes of our own


def _close(ours: float, published: float, unit: float, truncated: bool = False) -> bool:
    if truncated:
        return published <= ours < published + unit
    return abs(ours - published) <= max(0.01 * published, unit / 2)


def test_every_catalog_model_has_a_published_figure():
    assert set(MODEL_CATALOG) - UNPUBLISHED == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_and_active_parameters_match_the_published_figures(name):
    m, pub = get_model(name), PUBLISHED[name]
    if pub.get("vision"):
        assert 0 < pub["total"] - m.num_params < 0.02 * pub["total"], m.num_params
    else:
        assert _close(m.num_params, pub["total"], pub["unit"]), m.num_params
    if "active" in pub:
        embed = m.vocab_size * m.hidden_size
        active = m.active_params - {"all": 0, "head": embed, "none": m.embedding_params}[pub["convention"]]
        assert _close(active, pub["active"], pub["unit"], pub.get("truncated", False)), active
    else:
        assert m.active_params == m.num_params  # dense: every parameter is active


def test_qwen3_next_counts_every_tensor_of_the_checkpoint():
    m = get_model("qwen3-next-80b-a3b")  # gated delta net, output gate, q/k norms, shared expert gate
    assert (m.num_params, m.active_params) == (79_674_391_296, 3_874_929_408)


# -- KV bytes per token, per attention kind ----------------------------------------------------
def test_mla_caches_the_latent_and_rope_key():
    m = get_model("deepseek-v3")
    assert m.kv_bytes_per_token() == (512 + 64) * 61 * 2 == 70_272
    assert m.kv_bytes_per_token("fp8") == 35_136
    assert m.kv_bytes_per_token_gpu(None, 8, 1) == 70_272  # one latent head: whole on every rank
    assert get_model("kimi-k2").kv_bytes_per_token() == 70_272


@pytest.mark.parametrize("name,layers,kv_heads,head_dim", [
    ("llama-3.3-70b", 80, 8, 128), ("qwen3-32b", 64, 8, 128), ("llama-3.1-405b", 126, 8, 128),
    ("qwen3-235b-a22b", 94, 4, 128), ("mistral-small-3.1", 40, 8, 128), ("glm-4.5", 92, 8, 128),
])
def test_gqa_caches_k_and_v_of_each_kv_head(name, layers, kv_heads, head_dim):
    m = get_model(name)
    assert m.kv_bytes_per_token() == 2 * layers * kv_heads * head_dim * 2
    assert m.kv_bytes_per_token_gpu("fp8", 8, 2) == 2 * layers * kv_heads * head_dim / (min(8, kv_heads) * 2)


def test_sliding_window_layers_follow_the_configs_pattern():
    gemma = get_model("gemma-3-27b")  # five sliding layers of 1024 tokens, then a global one
    kinds = [a for a, _ in gemma.layer_kinds()]
    assert kinds[:6] == ["sliding"] * 5 + ["full"] and kinds.count("sliding") == 52
    assert gemma.sliding_window == 1024 and gemma.kv_bytes_per_token() == 62 * 2 * 16 * 128 * 2
    oss = get_model("gpt-oss-120b")  # alternating, 128 tokens, with sinks
    assert [a for a, _ in oss.layer_kinds()][:4] == ["sliding", "full"] * 2
    assert oss.sliding_window == 128 and oss.attention_sinks and oss.kv_bytes_per_token() == 36 * 2 * 8 * 64 * 2
    scout = get_model("llama-4-scout")  # chunks of 8192, every fourth layer global (no RoPE)
    assert [a for a, _ in scout.layer_kinds()][:4] == ["chunked"] * 3 + ["full"] and scout.sliding_window == 8192


def test_linear_attention_and_mamba_hold_a_state_per_request_instead():
    nxt = get_model("qwen3-next-80b-a3b")
    assert nxt.kv_bytes_per_token() == 12 * 2 * 2 * 256 * 2  # only the 12 full-attention layers
    per_layer = 32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3  # recurrent state + conv inputs
    assert nxt.state_bytes_per_request() == 36 * per_layer * 2
    nem = get_model("nemotron-h-56b")
    assert nem.kv_bytes_per_token() == 10 * 2 * 8 * 128 * 2
    inner = 256 * 64
    assert nem.state_bytes_per_request() == 54 * (inner * 256 + (inner + 2 * 8 * 256) * 3) * 2


def test_ssm_state_is_reserved_for_max_num_seqs_out_of_the_kv_memory_where_the_engine_keeps_it_apart():
    m, h100 = get_model("qwen3-next-80b-a3b"), get_gpu("H100")
    a = memory_budget(m, h100, tp=4, max_num_seqs=64, activation_bytes=1e9, state_memory="reserved")
    b = memory_budget(m, h100, tp=4, max_num_seqs=128, activation_bytes=1e9, state_memory="reserved")
    assert a.state_bytes == m.state_bytes_per_request() * 64 / 4 and a.state_ppm == 0
    assert a.kv_bytes - b.kv_bytes == pytest.approx(m.state_bytes_per_request() * 64 / 4)


def test_ssm_state_comes_from_the_kv_blocks_per_running_request_in_vllm_v1():
    """Nothing reserved; each of the 36 gated delta nets' state (1,097,728 B, /4 per TP rank)
    padded to whole pages of one attention layer's 16 tokens (2 KV heads × 256 × 2 × 2 B = 2 KiB a
    token, one KV head per rank at TP 4: 16 KiB): ceil(274,432 / 16,384) = 17 pages each, against the 12
    attention layers' page of a block: 36 × 17 / 12 = 51 blocks a request."""
    m, h100 = get_model("qwen3-next-80b-a3b"), get_gpu("H100")
    a = memory_budget(m, h100, tp=4, max_num_seqs=64, activation_bytes=1e9)
    b = memory_budget(m, h100, tp=4, max_num_seqs=128, activation_bytes=1e9)
    assert a.state_bytes == 0 and a.kv_bytes == b.kv_bytes
    per_layer = (32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3) * 2
    assert per_layer == 1_097_728 and -(-per_layer // 4 // (16 * 2 * 256 * 2 * 2 // 2)) == 17
    assert a.state_ppm == 36 * 17 * 1_000_000 // 12 == 51_000_000
    plain = memory_budget(get_model("llama-3-8b"), h100)
    assert plain.state_ppm == 0 and plain.state_bytes == 0


# -- the issue's table: by name and by the real config.json ------------------------------------
@pytest.mark.parametrize("name", config_names())
def test_the_shipped_config_and_the_catalog_name_are_the_same_model(name):
    with resources.as_file(DATA.joinpath(f"{name}.json")) as path:
        assert model_from_hf_config(path, name) == get_model(name)


def test_issue_table_truths():
    ds = get_model("deepseek-v3")
    assert ds.mla is not None and ds.num_experts == 256 and ds.shared_expert_size == 2048
    assert [m for _, m in ds.layer_kinds()][:4] == ["dense"] * 3 + ["moe"] and ds.mtp_layers == 1
    assert get_model("qwen3-235b-a22b").expert_size == 1536
    scout = get_model("llama-4-scout")
    assert scout.shared_expert_size == 8192 and scout.active_params > 16.5e9  # the shared expert counts
    assert "vision tower is not modelled" in get_model("gemma-3-27b").notes[0]
    # Llama-3.3-70B read from its config.json is the built-in Llama-3.1-70B to the byte
    a, b = get_model("llama-3.3-70b"), get_model("llama-3.1-70b")
    assert (a.num_params, a.kv_bytes_per_token(), a.weight_bytes("fp8")) == (
        b.num_params, b.kv_bytes_per_token(), b.weight_bytes("fp8"))


@pytest.mark.parametrize("model,gpu,tp,weights", [
    ("qwen3-235b-a22b", "H100", 8, "fp8"), ("qwen3-235b-a22b-fp8", "H100", 8, None),
    ("gpt-oss-120b", "H100", 1, None), ("deepseek-v3", "H200", 8, None), ("llama-4-scout", "H100", 4, None),
    ("gemma-3-27b", "H100", 1, None), ("mistral-small-3.1", "H100", 1, None), ("llama-3.1-405b", "H100", 8, "fp8"),
    ("qwen3-30b-a3b", "H100", 1, None), ("kimi-k2", "H200", 8, None),
])
def test_issue_table_models_fit_where_they_are_deployed(model, gpu, tp, weights):
    over = [f"model={model}", f"hardware.gpu={gpu}", f"hardware.tp={tp}"]
    s = load_scenario(None, over + ([f"quantization.weights={weights}"] if weights else []))
    assert s.memory.num_blocks > 1000


def test_gpt_oss_keeps_attention_in_bf16_and_experts_in_mxfp4():
    m = get_model("gpt-oss-120b")
    assert m.dtype_of("attention") == "bf16" and m.dtype_of("experts") == "mxfp4"
    gib = m.weight_bytes() / 2**30
    assert 60 < gib < 62  # the checkpoint's 60.8 GiB: fits one 80 GB GPU
    assert m.dtype_of("experts", "fp8") == "fp8"  # the scenario's quantization replaces it


# -- quantization_config ----------------------------------------------------------------------
BASE = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
        "num_hidden_layers": 4, "intermediate_size": 1024, "vocab_size": 1000}


def _read(tmp_path, cfg):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return model_from_hf_config(tmp_path / "config.json")


@pytest.mark.parametrize("quant,expected", [
    ({"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}, "fp8"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4"),
    ({"quant_method": "gptq", "bits": 8}, "int8"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, "fp4"),
    ({"quant_method": "compressed-tensors", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int"}}}}, "int4"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}}}, "fp8"),
])
def test_quantization_config_sets_each_groups_weight_dtype(tmp_path, quant, expected):
    m = _read(tmp_path, {**BASE, "quantization_config": quant})
    assert {m.dtype_of(g) for g in ("attention", "mlp", "experts")} == {expected}
    plain = _read(tmp_path, BASE)
    # embeddings, LM head and norms stay in bf16
    assert m.weight_bytes() == pytest.approx(plain.weight_bytes(expected), rel=2e-3)


# -- keys that would change the cost: refused by name ------------------------------------------
@pytest.mark.parametrize("cfg,field,fragment", [
    ({**BASE, "num_kv_shared_layers": 12}, "num_kv_shared_layers", "not a key servesim understands"),
    ({**BASE, "model_type": "gemma4_text"}, "model_type", "not a model type servesim reads"),
    ({**BASE, "quantization_config": {"quant_method": "bitsandbytes"}}, "quantization_config.quant_method",
     "not a quantization servesim reads"),
    ({**BASE, "quantization_config": {"quant_method": "awq", "bits": 3}}, "quantization_config.bits", "3"),
    ({**BASE, "layer_types": ["full_attention", "mystery", "full_attention", "full_attention"]}, "layer_types",
     "'mystery' is not modelled"),
    ({"model_type": "gemma3", "text_config": {**BASE, "model_type": "gemma3_text", "index_topk": 2048}},
     "text_config.index_topk", "not a key servesim understands"),
    ({**BASE, "model_type": "nemotron_h", "hybrid_override_pattern": "M*E-", "mamba_num_heads": 8,
      "mamba_head_dim": 64, "ssm_state_size": 16}, "hybrid_override_pattern", "'E' is not modelled"),
])
def test_a_key_that_would_change_the_cost_is_refused_by_name(tmp_path, capsys, cfg, field, fragment):
    with pytest.raises(ModelConfigError) as e:
        _read(tmp_path, cfg)
    assert e.value.field == field and fragment in e.value.message
    path = write(tmp_path, "model: {hf_config: config.json}\nworkload: {num_requests: 5}\n")
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and f"config.json: {field}:" in " ".join(out.split()) and "Traceback" not in out


def test_windowed_models_name_what_prefix_caching_leaves_approximate():
    """The core caps their windowed layers' blocks with or without prefix caching (tests/sim/core/
    test_sliding_window_kv.py); with it, a freed windowed share stays findable until its block is
    evicted, and the run says so."""
    s = load_scenario(None, ["model=gemma-3-27b", "hardware.gpu=H100", "scheduler.prefix_caching=true"])
    notes = " ".join(s.model_notes)
    assert "gemma-3-27b" in notes and "52 sliding-window layers" in notes
    assert "until the block itself is evicted" in notes
    assert "over-counted" not in notes and "vision tower" in notes
    capped = " ".join(load_scenario(None, ["model=gemma-3-27b", "hardware.gpu=H100",
                                           "scheduler.prefix_caching=false"]).model_notes)
    assert "vision tower" in capped and "evicted" not in capped
    assert load_scenario(None, ["model=llama-3-8b", "scheduler.prefix_caching=true"]).model_notes == []


def test_list_models_shows_active_parameters_attention_and_kv(capsys):
    code, out = run_cli(capsys, "list", "models", "--format", "json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    ds = rows["deepseek-v3"]
    assert ds["kv_bytes_per_token"] == 70_272 and ds["attention"] == "mla" and round(ds["active_params_b"]) == 38
    assert "sliding ×18" in rows["gpt-oss-120b"]["attention"]


def test_a_run_warns_what_the_model_leaves_out(tmp_path, capsys):
    path = write(tmp_path, "model: gemma-3-27b\nworkload: {num_requests: 3}\n"
                           "scheduler: {prefix_caching: true}\n")
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"), "--format", "csv")
    assert code == 0 and "vision tower" in out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert any("sliding-window layers" in w for w in summary["warnings"])  # counted whole with prefix caching
    assert any("vision tower" in w for w in summary["warnings"])


def test_a_modelopt_checkpoint_reads_its_hf_quant_config(tmp_path):
    """NVIDIA's NVFP4 checkpoints keep their quantization beside config.json; ModelOpt lists the
    modules it leaves in bf16 layer by layer (here every layer's attention)."""
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"producer": {"name": "modelopt"}, "quantization": {
        "quant_algo": "NVFP4", "group_size": 16,
        "exclude_modules": ["lm_head"] + [f"model.layers.{i}.self_attn.q_proj" for i in range(4)]}}))
    m = _read(tmp_path, BASE)
    assert dict(m.weight_dtypes) == {"mlp": "fp4", "experts": "fp4"} and m.dtype_of("attention") == "bf16"
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "W4A8_AWQ"}}))
    with pytest.raises(ModelConfigError) as e:
        _read(tmp_path, BASE)
    assert e.value.source.endswith("hf_quant_config.json") and e.value.field == "quantization.quant_algo"


# Families read from a config.json beyond the catalog (the keys of their published config.json
# that set a shape), against the published totals.
FAMILIES = {
    "phi-4": (dict(model_type="phi3", hidden_size=5120, intermediate_size=17920, num_attention_heads=40,
                   num_hidden_layers=40, num_key_value_heads=10, vocab_size=100352, max_position_embeddings=16384,
                   sliding_window=None, resid_pdrop=0.0, embd_pdrop=0.0, original_max_position_embeddings=16384),
              14.7e9, 0.1e9, "full"),
    "gemma-2-27b": (dict(model_type="gemma2", hidden_size=4608, intermediate_size=36864, num_attention_heads=32,
                         num_hidden_layers=46, num_key_value_heads=16, head_dim=128, vocab_size=256000,
                         sliding_window=4096, cache_implementation="hybrid", final_logit_softcapping=30.0,
                         attn_logit_softcapping=50.0, query_pre_attn_scalar=144, hidden_activation="gelu_pytorch_tanh"),
                    27.2e9, 0.1e9, "sliding ×23, full ×23, W=4096"),
    "deepseek-v2-lite": (dict(model_type="deepseek_v2", hidden_size=2048, intermediate_size=10944,
                              moe_intermediate_size=1408, n_routed_experts=64, n_shared_experts=2,
                              num_experts_per_tok=6, first_k_dense_replace=1, moe_layer_freq=1,
                              num_attention_heads=16, num_key_value_heads=16, num_hidden_layers=27,
                              kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64,
                              v_head_dim=128, vocab_size=102400), 15.7e9, 0.1e9, "mla"),
    "mistral-7b-v0.1": (dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                             num_hidden_layers=32, num_key_value_heads=8, vocab_size=32000, sliding_window=4096,
                             max_position_embeddings=32768), 7.24e9, 0.01e9, "sliding, W=4096"),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_families_read_from_their_config(tmp_path, name):
    cfg, total, unit, attention = FAMILIES[name]
    m = _read(tmp_path, cfg)
    assert _close(m.num_params, total, unit) and m.attention_kind == attention
    if name == "deepseek-v2-lite":  # no query LoRA: a plain query projection
        assert m.mla.q_lora_rank == 0 and m.kv_bytes_per_token() == 27 * 576 * 2


def test_fp4_weights_stream_their_bits_and_compute_where_the_gpu_can():
    """NVFP4 weights: 4 bits and an fp8 scale per 16 (4.5 bits) to read; on Hopper the math runs
    in bf16 with the weights dequantized in the kernel (the W4A16 curve, ``w4``), on a GPU with fp4
    tensor cores at its fp4 rate (gpu.peak_flops)."""
    from sim.core.plan import StepShape
    from sim.pricing import RooflineCost
    from sim.scenario.specs import efficiency

    m, h100 = get_model("llama-3.3-70b"), get_gpu("H100")
    decode, prefill = StepShape(1, 1, 0, 0, 1, 100, 1), StepShape(8192, 1, 8192, 8192**2, 0, 0, 1)
    bf16, fp4 = (RooflineCost(m, h100, weight_dtype=w, engine="vllm") for w in (None, "fp4"))
    # (the activations it streams and the ridge's overlap add the last percent)
    assert fp4.op_times(decode)["mlp"] == pytest.approx(bf16.op_times(decode)["mlp"] * 4.5 / 16, rel=0.05)
    assert h100.peak_flops("fp4") == h100.bf16_flops  # no fp4 tensor cores: weight-only
    assert efficiency.math_class(h100, "fp4") == "w4"
    # a large prefill runs at the plateaus: bf16's against the W4A16 kernels'
    plateaus = efficiency.gemm_curve(h100, "bf16").peak_fraction / efficiency.gemm_curve(h100, "fp4").peak_fraction
    assert fp4.op_times(prefill)["mlp"] == pytest.approx(bf16.op_times(prefill)["mlp"] * plateaus, rel=0.05)
    b200 = get_gpu("B200")
    fast = RooflineCost(m, b200, weight_dtype="fp4", engine="vllm").op_times(prefill)["mlp"]
    slow = RooflineCost(m, b200, engine="vllm").op_times(prefill)["mlp"]
    assert fast <= slow  # never slower than bf16 math
    if b200.peak_flops("fp4") > b200.bf16_flops:  # fp4 tensor cores (GpuSpec.fp4_flops)
        assert fast < slow
