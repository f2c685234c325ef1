"""benchmarks/server_configs_validation.py and benchmarks/results/vllm-cpu-configs/: the
configurations are what their comments say (shapes, KV sizes in whole blocks, a KV-pressure
workload that cannot fit), and the committed results agree with themselves and with the
servers they ran (no server here: no timing)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from benchmarks.endpoint_validation import targets_met
from benchmarks.server_configs_validation import CONFIGS, RESULTS, hf_config, server_flags, workloads
from sim.scenario.specs import model_from_hf_config

RUNS = sorted(p.parent.name for p in RESULTS.glob("*/summary.json"))


def kv_bytes_per_token(name: str) -> int:
    c = json.loads(hf_config(CONFIGS[name]).read_text())
    return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * c.get("head_dim", 64) * 2  # K and V, bf16


@pytest.mark.parametrize("name", list(CONFIGS))
def test_each_configuration_holds_whole_blocks_and_a_workload_that_cannot_fit(name):
    cfg = CONFIGS[name]
    tokens = cfg["kv_bytes"] // kv_bytes_per_token(name)
    assert tokens >= cfg["max_model_len"]  # one sequence of the full context fits
    w = workloads(cfg, 2.0)
    press = w["kv-pressure"]
    assert press["arrival"]["concurrency"] == cfg["max_num_seqs"]
    def demand(end):
        return cfg["max_num_seqs"] * (press["prompt_len"][end] + press["output_len"][end])

    assert demand("min") > tokens  # even its shortest requests, all at once, overflow the cache
    assert (demand("min") + demand("max")) / 2 > 1.7 * tokens  # on average by more than two thirds
    assert w["long-prompts"]["prompt_len"]["max"] + w["long-prompts"]["output_len"]["max"] <= cfg["max_model_len"]
    assert w["poisson-heavy"]["arrival"]["rate"] == pytest.approx(1.8)  # 90% of the saturation measured
    assert w["poisson-light"]["arrival"]["rate"] == pytest.approx(0.6)
    flags = server_flags(cfg)
    assert ("--load-format" in flags) == bool(cfg["shape"])
    assert flags[flags.index("--max-num-seqs") + 1] == str(cfg["max_num_seqs"])


def test_the_issues_configuration_is_a_360m_llama_with_2432_tokens_of_kv():
    cfg = CONFIGS["llama-360m"]
    assert cfg["kv_bytes"] // kv_bytes_per_token("llama-360m") == 2432 == 19 * 128
    assert (cfg["max_num_seqs"], cfg["max_num_batched_tokens"]) == (8, 256)
    m = model_from_hf_config(hf_config(cfg))
    c = json.loads(hf_config(cfg).read_text())
    h, i, n, d = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["head_dim"]
    by_hand = c["vocab_size"] * h + n * (2 * h * h + 2 * h * c["num_key_value_heads"] * d + 3 * h * i)
    assert m.num_params == pytest.approx(by_hand, rel=1e-3) and 355e6 < m.num_params < 370e6


@pytest.mark.skipif(not RUNS, reason="no committed results of other vLLM configurations")
@pytest.mark.parametrize("name", RUNS)
def test_committed_results_agree_with_themselves(name):
    d = RESULTS / name
    s = json.loads((d / "summary.json").read_text())
    readme = (d / "README.md").read_text()
    cfg = CONFIGS[name]
    assert s["config"] == name and s["limits"] == {k: v for k, v in cfg.items() if k != "what"}
    assert s["server_command"] in readme and " ".join(server_flags(cfg)) in s["server_command"]
    assert s["params_sim"] == model_from_hf_config(hf_config(cfg)).num_params
    assert s["calibration"]["seconds"] <= 600  # the issue's 10 minutes
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| ([a-z-]+) \| \d+ \|.*$", readme, re.M)}
    for r in s["workloads"]:
        v = json.loads((d / r["workload"] / "validation.json").read_text())
        assert r["requests"] == v["requests"]["joined"] == r["spec"]["num_requests"]
        assert r["e2e_error"] == pytest.approx(v["errors"]["e2e"]["median"])
        assert r["ttft_error"] == pytest.approx(v["errors"]["ttft"]["median"])
        for k in (1, 2):
            df = pd.read_parquet(d / r["workload"] / f"run{k}" / "requests.parquet")
            assert len(df) == r["requests"] and (df["error"].fillna("") == "").all()
        e_ok, t_ok = targets_met(r)
        row = rows[r["workload"]]
        assert "| " + " | ".join(f"{x:.1%}" for x in (r["e2e_error"], r["e2e_spread"])) + " |" in row
        assert row.split(" | ")[-3:-1] == ["met" if e_ok else "missed", "met" if t_ok else "missed"]
    pressure = next(r for r in s["workloads"] if r["workload"] == "kv-pressure")
    assert all(p and p > 0 for p in pressure["measured_preemptions"])  # vLLM preempted in both runs
