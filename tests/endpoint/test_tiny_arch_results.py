"""benchmarks/vllm_cpu/tiny_models/ and benchmarks/results/vllm-cpu-tiny/: servesim reads each
tiny config.json with the parameters its keys imply, and the committed results agree with
themselves (no server: no timing)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sim.scenario.specs import model_from_hf_config

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "benchmarks" / "vllm_cpu" / "tiny_models"
RESULTS = REPO / "benchmarks" / "results" / "vllm-cpu-tiny"
NAMES = sorted(p.parent.name for p in TINY.glob("*/config.json"))
RUNS = sorted(str(p.parent.relative_to(RESULTS)) for p in
              [*RESULTS.glob("*/summary.json"), *RESULTS.glob("quick-calibration/*/summary.json")])


def cfg(name: str) -> dict:
    return json.loads((TINY / name / "config.json").read_text())


def _attn(c: dict, gate: bool = False) -> int:
    h, d = c["hidden_size"], c.get("head_dim") or c["attention_head_dim"]
    q = c["num_attention_heads"] * d
    return h * q * (2 if gate else 1) + 2 * h * c["num_key_value_heads"] * d + q * h


def _mla(c: dict) -> int:
    h, n = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    return (h * c["q_lora_rank"] + c["q_lora_rank"] * n * qk + h * (c["kv_lora_rank"] + c["qk_rope_head_dim"])
            + c["kv_lora_rank"] * n * (c["qk_nope_head_dim"] + c["v_head_dim"]) + n * c["v_head_dim"] * h)


def _experts(c: dict, k: int | None = None) -> int:
    """``k`` experts (all when None) + the shared ones + the router."""
    h, e = c["hidden_size"], c.get("n_routed_experts") or c["num_experts"]
    shared = c.get("n_shared_experts", 0) * c["moe_intermediate_size"] or c.get("shared_expert_intermediate_size", 0)
    gate = h if "shared_expert_intermediate_size" in c else 0
    return (e if k is None else k) * 3 * h * c["moe_intermediate_size"] + 3 * h * shared + h * e + gate


def _gdn(c: dict) -> int:
    h = c["hidden_size"]
    k = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    v = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    return h * (2 * k + 2 * v) + h * 2 * c["linear_num_value_heads"] + (2 * k + v) * c["linear_conv_kernel_dim"] + v * h


def _mamba(c: dict) -> int:
    h, di = c["hidden_size"], c["mamba_num_heads"] * c["mamba_head_dim"]
    gn = c["n_groups"] * c["ssm_state_size"]
    return h * (2 * di + 2 * gn + c["mamba_num_heads"]) + (di + 2 * gn) * c["conv_kernel"] + di * h


def implied(name: str, active: bool = False) -> int:
    """Parameters of the config's matrices (embeddings, attention, MLPs, experts), by hand
    from its keys; ``active``: one token's (top-k experts)."""
    c = cfg(name)
    h, n = c["hidden_size"], c["num_hidden_layers"]
    total = c["vocab_size"] * h * (1 if c.get("tie_word_embeddings") else 2)
    k = c["num_experts_per_tok"] if active else None
    kind = c["model_type"]
    if kind == "deepseek_v3":
        dense = c["first_k_dense_replace"]
        return total + n * _mla(c) + dense * 3 * h * c["intermediate_size"] + (n - dense) * _experts(c, k)
    if kind == "qwen3_moe":
        return total + n * (_attn(c) + _experts(c, k))
    if kind == "gemma3_text":
        return total + n * (_attn(c) + 3 * h * c["intermediate_size"])
    if kind == "qwen3_next":
        types = c["layer_types"]
        return (total + types.count("full_attention") * _attn(c, gate=True) + types.count("linear_attention") * _gdn(c)
                + n * _experts(c, k))
    if kind == "nemotron_h":
        p = c["hybrid_override_pattern"]
        mlp = 2 * h * c["intermediate_size"]  # relu²: two matrices
        return total + p.count("M") * _mamba(c) + p.count("*") * _attn(c) + p.count("-") * mlp
    raise AssertionError(kind)


def test_there_is_a_tiny_model_of_each_family_the_issue_names():
    kinds = {cfg(n)["model_type"] for n in NAMES}
    assert {"deepseek_v3", "qwen3_moe", "gemma3_text", "nemotron_h", "qwen3_next"} <= kinds


@pytest.mark.parametrize("name", NAMES)
def test_servesim_reads_each_tiny_config_with_the_parameters_it_implies(name):
    c = cfg(name)
    # SmolLM2's tokenizer; fp32 on this AVX2 CPU, but vLLM-CPU's gated delta net runs in bf16 only
    want = "bfloat16" if c["model_type"] == "qwen3_next" else "float32"
    assert c["vocab_size"] == 49152 and c["torch_dtype"] == want
    m = model_from_hf_config(TINY / name / "config.json")
    # the matrices by hand; servesim also counts the norm vectors (under 0.05% here)
    assert m.num_params == pytest.approx(implied(name), rel=5e-4)
    assert m.num_params >= implied(name)
    assert 10e6 <= m.num_params < 100e6  # tens of millions
    if c.get("num_experts_per_tok"):
        assert m.active_params == pytest.approx(implied(name, active=True), rel=5e-4)
        assert m.active_params < m.num_params
    assert m.dtype == {"float32": "fp32", "bfloat16": "bf16"}[want]


def test_the_tiny_configs_read_as_their_architecture():
    ds = model_from_hf_config(TINY / "deepseek-v3-tiny" / "config.json")
    assert set(ds.layer_attention) == {"mla"} and ds.layer_mlp[0] == "dense" and set(ds.layer_mlp[1:]) == {"moe"}
    assert ds.mla.kv_lora_rank + ds.mla.qk_rope_head_dim == 576  # the CPU MLA kernel's only size
    g = model_from_hf_config(TINY / "gemma3-tiny" / "config.json")
    assert g.layer_attention == ("sliding",) * 5 + ("full",) and g.sliding_window == 256
    nh = model_from_hf_config(TINY / "nemotron-h-tiny" / "config.json")
    assert nh.layer_attention.count("mamba") == 2 and nh.layer_attention.count("full") == 1
    qn = model_from_hf_config(TINY / "qwen3-next-tiny" / "config.json")
    assert qn.layer_attention == ("linear",) * 3 + ("full",) and qn.attn_output_gate


def test_assemble_copies_the_config_beside_the_tokenizer_files(tmp_path):
    from benchmarks.vllm_cpu.tiny_models import assemble

    tok = tmp_path / "tok"
    tok.mkdir()
    for f in assemble.TOKENIZER_FILES:
        (tok / f).write_text("{}")
    d = assemble.assemble("gemma3-tiny", tmp_path / "out", tok)
    assert json.loads((d / "config.json").read_text()) == cfg("gemma3-tiny")
    assert sorted(p.name for p in d.iterdir()) == sorted(["config.json", *assemble.TOKENIZER_FILES])
    assert assemble.names() == NAMES


def test_error_line_skips_the_consequences_for_the_cause(tmp_path):
    from benchmarks.tiny_arch_validation import error_line

    log = tmp_path / "server.log"
    log.write_text("INFO up\n(APIServer pid=3) WARNING 11-28 [system_utils.py:255] Found ulimit ... error: "
                   "`OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n\n"
                   "(Worker pid=1) ERROR [x.py:1] AssertionError: CPU GDN attention requires BF16.\n"
                   "(EngineCore pid=2) ERROR RuntimeError: Worker failed with error 'CPU GDN ...'\n")
    assert error_line(log) == "AssertionError: CPU GDN attention requires BF16."
    assert error_line(tmp_path / "none.log") is None


@pytest.mark.skipif(not RUNS, reason="no committed tiny-architecture results")
@pytest.mark.parametrize("name", RUNS)
def test_committed_results_agree_with_themselves(name):
    from benchmarks.endpoint_validation import targets_met

    d = RESULTS / name
    s = json.loads((d / "summary.json").read_text())
    readme = (d / "README.md").read_text()
    arch = d.name
    assert s["arch"] == arch and s["config"] == f"benchmarks/vllm_cpu/tiny_models/{arch}/config.json"
    assert s["params_sim"] == model_from_hf_config(TINY / arch / "config.json").num_params
    assert ("--quick-calibration" in s["command"]) == (d.parent.name == "quick-calibration")
    assert s["command"] in readme
    assert len(s["load_before"]) == 3 and len(s["load_after"]) == 3 and s["started_utc"] <= s["finished_utc"]
    for a in s["attempts"]:
        assert "--load-format dummy" in a["command"] and "taskset -c" in a["command"]
        assert a["command"] in readme
    if "refused" in s:  # vLLM-CPU's own error line, quoted in the README
        assert s["refused"] and all(e in readme for e in s["refused"])
        assert not s["workloads"]
        return
    assert s["dtype"] in s["server_command"] and not s["attempts"][-1].get("error")
    assert (d / "profile.json").is_file() and (d / "profile.scenario.yaml").is_file()
    assert s["calibration"]["seconds"] <= 600
    names = [r["workload"] for r in s["workloads"]]
    assert names == ["poisson-light", "kv-pressure"]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| ([a-z-]+) \| \d+ \|.*$", readme, re.M)}
    for r in s["workloads"]:
        v = json.loads((d / r["workload"] / "validation.json").read_text())
        assert r["requests"] == v["requests"]["joined"]
        assert r["e2e_error"] == pytest.approx(v["errors"]["e2e"]["median"])
        assert r["ttft_error"] == pytest.approx(v["errors"]["ttft"]["median"])
        assert len(r["measured_preemptions"]) == 2
        for k in (1, 2):
            assert (d / r["workload"] / f"run{k}" / "requests.parquet").is_file()
        row = rows[r["workload"]]
        e_ok, t_ok = targets_met(r)
        figures = (r["e2e_error"], r["e2e_spread"], r["e2e_adjusted"], r["ttft_error"])
        assert "| " + " | ".join(f"{x:.1%}" for x in figures) + " |" in row
        assert row.split(" | ")[-3:-1] == ["met" if e_ok else "missed", "met" if t_ok else "missed"]
    light, pressure = s["workloads"]
    # the KV-pressure workload made vLLM preempt in both runs; the light one did not
    assert all(p and p > 0 for p in pressure["measured_preemptions"])
    assert all(p == 0 for p in light["measured_preemptions"])


def test_kv_blocks_count_every_layer_where_vllms_hybrid_allocator_counts_one_group():
    """vLLM's blocks in servesim's, less vLLM V1's null block (vllm/v1/core/block_pool.py: one
    block taken off the free queue at start, never held by a request)."""
    from endpoint.calibrate import kv_blocks_of

    gemma = model_from_hf_config(TINY / "gemma3-tiny" / "config.json")  # 6 layers, 512 B per token each (fp32)
    cache = {"num_gpu_blocks": "128", "block_size": "128", "kv_cache_memory_bytes": "8388608", "cache_dtype": "auto"}
    notes: list[str] = []
    assert kv_blocks_of(cache, gemma, 128, 16, notes) == 8388608 * 127 // 128 // (128 * 6 * 512) == 21
    assert "128 blocks of one layer group" in notes[0]
    assert kv_blocks_of(cache | {"cache_dtype": "fp8"}, gemma, 128, 16) == 127  # another KV dtype: as published
    assert kv_blocks_of({k: v for k, v in cache.items() if k != "kv_cache_memory_bytes"}, gemma, 128, 16) == 127
    # every layer alike (MLA here): vLLM's blocks are servesim's, whatever the memory says
    ds = model_from_hf_config(TINY / "deepseek-v3-tiny" / "config.json")
    assert kv_blocks_of({"num_gpu_blocks": "227", "kv_cache_memory_bytes": "1"}, ds, 16, 16) == 226
    assert kv_blocks_of({"num_gpu_blocks": "227"}, ds, 16, 16, engine="sglang") == 227  # no null block there
    # Mamba layers: vLLM V1 takes each running request's state from these blocks (4 MiB over 64 tokens
    # of the one attention layer, 1 KiB a token in float32); an engine that reserves it for
    # max_num_seqs requests (SGLang's preset) has that taken first
    nh = model_from_hf_config(TINY / "nemotron-h-tiny" / "config.json")
    mem = 4 * 1024**2
    cache = {"num_gpu_blocks": "1000", "kv_cache_memory_bytes": str(mem)}
    assert kv_blocks_of(cache, nh, 64, 16) == int(mem * 999 / 1000) // (64 * 1024) == 63
    want = int((mem - 16 * nh.state_bytes_per_request()) // (64 * nh.kv_bytes_per_token()))
    assert kv_blocks_of(cache, nh, 64, 16, engine="sglang") == want < 64
    assert kv_blocks_of({}, gemma, 128, 16) is None
