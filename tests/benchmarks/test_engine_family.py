"""Each published case runs on the preset of the engine release it measured, and pays the API
server's time per request only where it was measured through one (benchmarks/published.py)."""

from __future__ import annotations

import pytest
import yaml

from benchmarks import published


@pytest.mark.parametrize("engine, version, date, family", [
    ("vllm", "0.6.0", "2024-09", "vllm-v0"),
    ("vllm", "0.7.3", "2025-02", "vllm-v0"),
    ("vllm", "0.8.0", "2025-03", "vllm"),
    ("vllm", "0.11.2.dev358", "2025", "vllm"),
    ("vllm", "main at PR #23696 (2025-08)", "2025-08", "vllm"),  # no version number: by its date
    ("vllm", "V1, main built from source (late 2025; no release named)", "2025", "vllm"),
    ("vllm", "not stated", "2024-06", "vllm-v0"),
    ("tensorrt-llm", "0.17", "2025-02", "tensorrt-llm-0.x"),
    ("tensorrt-llm", "1.0", "2025-09", "tensorrt-llm"),
    ("tensorrt-llm", "1.2", "2025", "tensorrt-llm"),
    ("tensorrt-llm", "PyTorch workflow, main 2025 (commit b6261862)", "2025", "tensorrt-llm"),
    ("nim", "NIM llama-3.3-70b-instruct 1.8.0 (TensorRT-LLM fp8 TP2 profile)", "2025", "tensorrt-llm-0.x"),
    ("sglang", "0.5.7", "2026-03-05", "sglang"),
    ("lmdeploy", "0.1.0a1 (TurboMind)", "2023-11", "lmdeploy"),
])
def test_a_source_runs_on_its_releases_family(engine, version, date, family):
    assert published.engine_family(engine, version, date) == family


def test_in_process_benchmarks_pay_no_api_server_time_and_served_ones_the_familys():
    cases = {c.source: c for c in published.load_cases()}
    offline = published.scenario_dict(cases["trtllm-1.0-perf-overview"])
    assert offline["engine"] == {"name": "tensorrt-llm", "request_overhead_s": 0.0}  # trtllm-bench
    served = published.scenario_dict(cases["nim-llm-benchmarking-performance"])
    assert served["engine"] == "tensorrt-llm-0.x"  # genai-perf over HTTP: the family's fitted overhead
    ids = {yaml.safe_load(f.read_text())["source"]["id"] for f in (published.HERE / "sources").glob("*.yaml")}
    assert ids >= published.SERVED  # every name is a source's
