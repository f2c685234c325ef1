"""benchmarks/results/vllm-cpu-offload/: the committed KV-offload run (issue #30) agrees with
itself and with the servers it ran (no server here: no timing). Every configuration vLLM-CPU
refused keeps its error line and log; every one it served was measured twice with no request
lost, its per-answer cached tokens and its prefix-cache counters tell the same hit rate, the
small primary cache hits less than the large one, and the README's tables are the summary's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "vllm-cpu-offload"
pytestmark = pytest.mark.skipif(not (RESULTS / "summary.json").is_file(), reason="no committed KV-offload run")


def summary() -> dict:
    return json.loads((RESULTS / "summary.json").read_text())


def served() -> dict[str, dict]:
    return {c: r for c, r in summary()["configs"].items() if "error" not in r}


def test_every_configuration_was_served_or_refused_with_its_error_kept():
    s = summary()
    assert {"primary-small", "primary-large"} <= served().keys()
    assert any(c.startswith("offload-") for c in s["configs"])
    for c, r in s["configs"].items():
        assert r["command"].startswith("VLLM_CPU_OMP_THREADS_BIND=") and "--enable-prefix-caching" in r["command"]
        assert f"--kv-cache-memory-bytes {r['kv_cache_memory_bytes']}" in r["command"]
        if c.startswith("offload-"):
            assert "--kv-offloading-size" in r["command"] or "--kv-transfer-config" in r["command"]
        if "error" in r:
            log = RESULTS / "refused" / f"{c}.log"
            assert r["error"] and log.is_file(), c
            assert r["error"].split(": ", 1)[1][:60] in log.read_text(), c


def test_the_servers_ran_the_cache_sizes_asked():
    s = summary()
    for c, r in served().items():
        cache = r["cache_config"]
        assert int(cache["kv_cache_memory_bytes"]) == r["kv_cache_memory_bytes"], c
        tokens = int(cache["num_gpu_blocks"]) * int(cache["block_size"])
        assert tokens * s["kv_bytes_per_token"] <= r["kv_cache_memory_bytes"] < (tokens + int(cache["block_size"])) \
            * s["kv_bytes_per_token"], c
        assert cache["enable_prefix_caching"] == "True", c
    small, large = served()["primary-small"]["cache_config"], served()["primary-large"]["cache_config"]
    assert int(small["num_gpu_blocks"]) < int(large["num_gpu_blocks"])


def test_every_served_configuration_was_measured_twice_without_a_lost_request():
    s = summary()
    for c, r in served().items():
        runs = sorted((RESULTS / c).glob("run*"))
        assert [x.name for x in runs] == ["run1", "run2"], c
        assert len(r["runs"]) == len(r["counters"]) == 2, c
        for run, fig in zip(runs, r["runs"], strict=True):
            df = pd.read_parquet(run / "requests.parquet")
            assert len(df) == fig["n"] == fig["finished"] == s["workload"]["num_requests"], (c, run.name)
            assert (df["status"] == "finished").all() and (df["error"].fillna("") == "").all(), (c, run.name)
            assert int(df["cached_tokens"].sum()) == fig["cached_tokens"], (c, run.name)
            assert int(df["prompt_tokens"].sum()) == fig["prompt_tokens"], (c, run.name)
            assert fig["ttft_median_s"] == pytest.approx(float(df["ttft"].median()))
            assert fig["e2e_median_s"] == pytest.approx(float(df["e2e"].median()))


def test_the_answers_and_the_counters_tell_the_same_hits():
    for c, r in served().items():
        for fig, d in zip(r["runs"], r["counters"], strict=True):
            assert d["prompt_tokens"] == fig["prompt_tokens"], c  # the run's requests, nothing else
            assert d["queries"] >= fig["prompt_tokens"], c  # a preempted request asks again
            local = sum(v for k, v in d["cached_by_source"].items() if k == "device")
            assert local == d["hits"], c
            assert d["hits"] + (d["external_hits"] or 0) == pytest.approx(fig["cached_tokens"], abs=0.5), c
            assert d["hit_rate"] == pytest.approx(d["hits"] / d["queries"])
            if "offload" not in c:
                assert not d["external_hits"] and not d["cached_by_source"].get("host"), c


def test_the_small_cache_loses_prefixes_the_large_one_keeps():
    small, large = served()["primary-small"]["runs"], served()["primary-large"]["runs"]
    for a, b in zip(small, large, strict=True):
        assert a["prompt_tokens"] == b["prompt_tokens"]  # the same requests
        assert a["hit_rate"] < b["hit_rate"]


def test_the_workload_file_is_the_summarys():
    s = summary()
    w = yaml.safe_load((RESULTS / "workload.yaml").read_text())
    assert w["workload"] == s["workload"] and w["seed"] == 7
    assert s["workload"]["conversations"]["turns"]["min"] >= 2


def test_the_simulations_cover_what_was_served():
    s = summary()
    rows = s["simulations"]
    assert {r["against"] for r in rows} >= set(served())
    tiers = [r for r in rows if "kv_tiers" in r["simulation"]]
    if s["kv_tiers"] == "simulated":
        assert {r["against"] for r in tiers} == {"primary-small", "primary-large"}
    else:
        assert s["kv_tiers"].startswith("servesim kv_tiers not available") and not tiers
    for r in rows:
        run1 = served()[r["against"]]["runs"][0]
        assert r["measured"][0] == run1
        assert r["median_ttft_diff"] == pytest.approx(abs(r["sim"]["ttft_median_s"] / run1["ttft_median_s"] - 1))
        assert r["sim"]["n"] == run1["n"]


def test_the_readme_tables_are_the_summary():
    text = (RESULTS / "README.md").read_text()
    lines = text.splitlines()
    for c, r in summary()["configs"].items():
        row = next(x for x in lines if x.startswith(f"| {c} | {r['what']} |"))
        assert ("refused" in row) == ("error" in r), c
        if "error" in r:
            assert r["error"] in row
    for c, r in served().items():
        for k, fig in enumerate(r["runs"], start=1):
            row = next(x for x in lines if x.startswith(f"| {c} | {k} |"))
            cells = [x.strip() for x in row.strip("|").split("|")]
            assert cells[3] == f"{fig['ttft_median_s'] * 1e3:.0f}" and cells[4] == f"{fig['e2e_median_s'] * 1e3:.0f}"
            assert cells[5] == f"{fig['hit_rate']:.1%}"
