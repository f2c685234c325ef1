"""``python -m engine.bench``: the JSON it writes, and its roofline floors."""

from __future__ import annotations

import json
import math

import pytest

from engine.bench import catalog_gpu, decode_cost, main, prefill_cost
from sim.scenario.specs import get_model


def test_floors_of_llama_3_8b_on_an_h100():
    """The issue's figures: 16.1 GB of bf16 weights read once take 4.8 ms at 3.35 TB/s."""
    spec = get_model("llama-3-8b")
    nbytes, flops = decode_cost(spec, "bf16", 1, 1024)
    assert nbytes == pytest.approx(16.06e9 + 1025 * 131072, rel=1e-3)
    assert nbytes / 3.35e12 == pytest.approx(4.8e-3, rel=0.01)
    assert flops / 989e12 < nbytes / 3.35e12  # decode at batch 1: memory-bound
    big = decode_cost(spec, "bf16", 128, 8192)
    assert big[0] - nbytes == pytest.approx(128 * 8193 * 131072 - 1025 * 131072)
    nbytes, flops = prefill_cost(spec, "bf16", 8192)
    assert flops / 989e12 > nbytes / 3.35e12  # a long prefill: compute-bound
    assert flops == pytest.approx(2 * 6.98e9 * 8192 + 2 * 32 * 4096 * 8192**2, rel=0.01)


@pytest.mark.parametrize("name,entry", [
    ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", None), ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("NVIDIA GeForce RTX 4090", None),
])
def test_gpu_names_to_catalog(name, entry):
    assert catalog_gpu(name) == entry


def test_cpu_bench_writes_the_issue_shape(tmp_path):
    out = tmp_path / "engine-cpu.json"
    argv = ["--model", "tiny-llama", "--device", "cpu", "--batch", "1", "3", "--context", "20", "200",
            "--prefill", "16", "48", "--repeats", "2", "--cv-steps", "12", "--cv-batch", "3",
            "--cv-context", "20", "--kv-mib", "0.2", "--hbm-gbps", "100", "--tflops", "2",
            "--out", str(out), "--quiet"]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert {"gpu", "model", "decode", "prefill", "step_cv"} <= set(res)
    assert res["gpu"].startswith("cpu") and res["model"] == "tiny-llama" and res["device"] == "cpu"
    assert res["roofline"] == {"hbm_bytes_per_s": 100e9, "flops": 2e12, "source": "flags"}
    spec = get_model("tiny-llama")
    assert [(p["batch"], p["context"]) for p in res["decode"]] == [(1, 20), (1, 200), (3, 20), (3, 200)]
    for p in res["decode"]:
        nbytes, flops = decode_cost(spec, "fp32", p["batch"], p["context"])
        assert p["floor_s"] == pytest.approx(max(nbytes / 100e9, flops / 2e12))
    fits = [p for p in res["decode"] if p["step_s"] is not None]
    assert len(fits) == 3 and all(p["step_s"] > 0 for p in fits)
    skipped = res["decode"][3]  # 3 x 201 tokens > the 0.2 MiB cache
    assert skipped["step_s"] is None and "do not fit" in skipped["skipped"]
    assert [p["tokens"] for p in res["prefill"]] == [16, 48]
    for p in res["prefill"]:
        nbytes, flops = prefill_cost(spec, "fp32", p["tokens"])
        assert p["floor_s"] == pytest.approx(max(nbytes / 100e9, flops / 2e12))
        assert p["tokens_per_s"] == pytest.approx(p["tokens"] / p["step_s"])
    assert res["step_cv_shape"]["steps"] == 12 and math.isfinite(res["step_cv"]) and res["step_cv"] >= 0
    assert res["warmup_s"] > 0 and res["steps_eager"] > 0 and res["graphs"] == "off"


def test_cpu_bench_measures_the_floors_without_flags(tmp_path, capsys, monkeypatch):
    """Without flags the floors come from a copy and a matmul timed on the device (here their
    time is given: 10 ms each, best of the runs)."""
    from engine import bench

    monkeypatch.setattr(bench, "_best", lambda fn, device, repeats=5: (fn(), 0.01)[1])
    assert main(["--model", "tiny-llama", "--device", "cpu", "--batch", "1", "--context", "8",
                 "--prefill", "8", "--repeats", "1", "--cv-steps", "2", "--cv-batch", "1",
                 "--cv-context", "8", "--graphs", "pad", "--quiet"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["roofline"]["source"] == "measured"
    copy = 256 * 1024**2 // 4  # float32 elements, read and written
    assert res["roofline"]["hbm_bytes_per_s"] == pytest.approx(2 * copy * 4 / 0.01)
    assert res["roofline"]["flops"] == pytest.approx(2 * 1024**3 / 0.01)
    assert res["graphs"] == "pad" and res["steps_from_graphs"] > 0
