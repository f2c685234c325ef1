"""The error band of a run (sim/pricing/trust.py): the held-out error of the nearest published
cases for the roofline, the recorded validation for a profile, "not validated" otherwise."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from sim.pricing.trust import MIN_CASES, error_band, table
from sim.scenario.load import scenario_from_dict

REPO = Path(__file__).resolve().parents[3]
FAMILY = {"ttft": "ttft", "tpot": "itl-tpot", "e2e": "e2e", "throughput": "throughput"}


def rows(metric: str, **keys) -> list[float]:
    """The shipped held-out errors of ``metric`` on cases matching ``keys``."""
    return [r["error"] for r in table()["cases"]
            if r["metric"] == FAMILY[metric] and all(r[k] == v for k, v in keys.items())]


def band(**data):
    return error_band(scenario_from_dict(data, "<test>"))


def test_h100_vllm_bf16_takes_the_hopper_dense_cases_when_too_few_are_that_close():
    got = band(engine="vllm", model="llama-3-8b", hardware={"gpu": "H100-SXM"})
    assert got.cost_model == "roofline"
    for metric in ("ttft", "tpot", "throughput"):
        exact = rows(metric, gpu="H100-SXM", engine="vllm", dtype="bf16/fp16", model="dense")
        broad = rows(metric, arch="hopper", model="dense")
        assert len(exact) < MIN_CASES <= len(broad)  # (what this test is about; true of the shipped table)
        b = got.bands[metric]
        assert b.cases == len(broad) and b.error == pytest.approx(statistics.median(abs(e) for e in broad))
        assert b.bias == pytest.approx(statistics.median(broad))
        assert (f"median held-out error of {len(broad)} published cases, Hopper (H100-SXM, H200) / dense, "
                f"any engine and dtype; fewer than {MIN_CASES} on H100-SXM / vLLM V1 / bf16/fp16 / dense") in b.text
        label = {"ttft": "TTFT", "tpot": "TPOT/ITL", "throughput": "throughput"}[metric]
        assert b.text.startswith(f"{label} ±{b.error:.0%} (")


def test_enough_cases_on_the_gpu_engine_and_dtype_give_the_band_at_the_nearest_level():
    exact = rows("throughput", gpu="H100-SXM", engine="tensorrt-llm", dtype="fp8", model="dense")
    assert len(exact) >= MIN_CASES
    b = band(engine="tensorrt-llm", model="llama-3-70b", hardware={"gpu": "H100-SXM", "tp": 2},
             quantization={"weights": "fp8"}).bands["throughput"]
    assert b.cases == len(exact) and b.error == pytest.approx(statistics.median(abs(e) for e in exact))
    assert f"of {len(exact)} published cases, H100-SXM / TensorRT-LLM 1.x / fp8 / dense)" in b.text


def test_a_gpu_defined_in_the_scenario_is_not_validated():
    for gpu in ({"base": "H100-SXM", "memory_gib": 94},
                {"name": "my-gpu", "memory_gib": 96, "hbm_tb_s": 4, "peaks": {"bf16": 900}, "link": "nvlink4"}):
        got = band(hardware={"gpu": gpu, "price_per_gpu_hour": 3.0})
        for b in got.bands.values():
            assert b.error is None and b.cases == 0
            assert "not validated (the GPU" in b.text and "is defined in the scenario" in b.text


def test_an_architecture_or_a_model_kind_without_published_cases_is_not_validated():
    assert not [r for r in table()["cases"] if r["arch"] == "cdna3"]
    for b in band(hardware={"gpu": "MI300X"}).bands.values():
        assert b.error is None and "no published" in b.basis and "CDNA3 GPUs with a dense model" in b.basis
    for b in band(model="nemotron-h-56b", hardware={"gpu": "H100-SXM", "tp": 8}).bands.values():
        assert b.error is None and "with a hybrid model" in b.basis
    # Mixtral on Hopper: its TTFT cases are fewer than MIN_CASES, so not validated (with the count)
    few = rows("ttft", arch="hopper", model="moe")
    assert 0 < len(few) < MIN_CASES
    b = band(model="mixtral-8x7b", engine="tensorrt-llm", quantization={"weights": "fp8"}).bands["ttft"]
    assert b.error is None and b.cases == len(few) and f"only {len(few)} published TTFT case" in b.basis


def test_replicas_on_two_gpus_take_the_less_trusted_band():
    mixed = band(replica_groups=[{"count": 1, "hardware": {"gpu": "H100-SXM"}},
                                 {"count": 1, "hardware": {"gpu": "MI300X"}}])
    assert all(b.error is None for b in mixed.bands.values())
    both = band(replica_groups=[{"count": 1, "hardware": {"gpu": "H100-SXM"}},
                                {"count": 1, "hardware": {"gpu": "A100-80GB"}}])
    for m, b in both.bands.items():
        one = [band(hardware={"gpu": g}).bands[m] for g in ("H100-SXM", "A100-80GB")]
        known = [x.error for x in one if x.error is not None]
        assert b.error == (max(known) if len(known) == 2 else None)


def test_constants_the_scenario_replaces_are_named():
    got = band(engine={"name": "vllm", "step_overhead_s": 0.001}, cost={"compute_efficiency": 0.5})
    assert got.notes == ["cost.compute_efficiency set by the scenario: the cases were scored with the fitted value",
                         "engine.step_overhead_s set by the scenario: the cases were scored with the preset's"]
    assert band().notes == []


def test_features_no_published_case_uses_are_named():
    got = band(model="llama-3-70b", hardware={"gpu": "H100-SXM", "tp": 2, "pp": 2})
    assert got.notes == ["no published case uses pipeline parallelism: the band covers the step costs alone"]
    got = band(disaggregation={"prefill": {"count": 1}, "decode": {"count": 1}, "link": {"type": "nvlink"}})
    assert got.notes == ["no published case uses disaggregation: the band covers the step costs alone"]


def _profile(tmp_path: Path, validation: dict | None) -> Path:
    path = tmp_path / "p.json"
    shutil.copy(REPO / "calibration" / "profiles" / "h100-llama-2-70b-tp2.json", path)
    if validation is not None:
        data = json.loads(path.read_text())
        path.write_text(json.dumps({**data, "validation": validation}))
    return path


PROFILED = {"model": "llama-2-70b", "hardware": {"gpu": "H100-SXM", "tp": 2}, "quantization": {"weights": "fp16"}}


def test_a_profile_shows_the_errors_of_its_recorded_validation(tmp_path):
    rec = {"created": "2026-11-20T10:00:00+00:00", "against": "the endpoint http://gpu-box:8000 (llama)",
           "scenario": "chat", "requests": 400, "errors": {"ttft": 0.061, "tpot": 0.024, "e2e": 0.03},
           "bias": {"ttft": -0.05, "tpot": 0.02, "e2e": 0.01}}
    got = band(**PROFILED, cost={"model": "profile", "profile": str(_profile(tmp_path, rec))})
    assert got.cost_model == "profile"
    assert got.bands["ttft"].error == 0.061 and got.bands["ttft"].cases == 400 and got.bands["ttft"].bias == -0.05
    assert got.bands["ttft"].text == ("TTFT ±6% (median per-request error over 400 requests, validated against "
                                      "the endpoint http://gpu-box:8000 (llama) on 2026-11-20 (chat))")
    assert got.bands["throughput"].error is None and "did not measure it" in got.bands["throughput"].text


def test_a_profile_without_a_validation_is_not_validated_and_a_bad_record_is_refused(tmp_path):
    from sim.errors import ProfileError
    from sim.pricing.profile import load_profile

    got = band(**PROFILED, cost={"model": "profile", "profile": str(_profile(tmp_path, None))})
    assert all(b.error is None and "records no validation" in b.text for b in got.bands.values())
    bad = _profile(tmp_path, {"created": "x", "against": "y", "scenario": "z", "requests": 3,
                              "errors": {"ttft": -0.1}})
    with pytest.raises(ProfileError, match=r"validation\.errors\.ttft"):
        load_profile(bad)


def test_a_measured_run_states_no_model_error():
    from types import SimpleNamespace

    from sim.results.band_view import band_json, band_table

    measured = SimpleNamespace(mode="execute", scenario=scenario_from_dict({}, "<test>"))
    note = "not predicted but measured (mode: execute): no model error to state"
    assert band_json(measured) == {"cost_model": "measured", "metrics": {}, "notes": [note]}
    assert band_table(measured)[1] == [["note", note]]
