"""Cost profiles are checked: a fit or table that cannot price a step is refused with the reason,
and a profile measured on another GPU, model, dtype or engine than the scenario's is refused
naming both (or priced with a warning under --allow-profile-mismatch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli.app import main

REPO = Path(__file__).resolve().parents[3]
A100 = REPO / "calibration" / "profiles" / "a100-llama-2-70b-tp2.json"
H100 = REPO / "calibration" / "profiles" / "h100-llama-2-70b-tp2.json"
SCENARIO = ("model: llama-2-70b\nhardware: {{gpu: {gpu}, tp: 2}}\ncost: {{model: profile, profile: {profile}}}\n"
            "workload: {{num_requests: 20, arrival: {{process: poisson, rate: 1}}}}\n{extra}")


@pytest.fixture(autouse=True)
def _refuse_mismatches(monkeypatch):
    """--allow-profile-mismatch sets an environment variable (for the workers): undone after each test."""
    from sim.pricing.profile_checks import ALLOW_ENV

    monkeypatch.setenv(ALLOW_ENV, "0")


def run(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, " ".join((out.out + out.err).split())


def scenario(tmp_path, profile, gpu="A100-80GB", extra="") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(gpu=gpu, profile=profile, extra=extra))
    return path


def edited(tmp_path, base: Path = A100, **changes) -> Path:
    """A copy of a shipped profile with fields replaced (``ops__linear`` is ops.linear)."""
    data = json.loads(base.read_text())
    for key, value in changes.items():
        node, *path = key.split("__")
        target = data
        for part in [node, *path][:-1]:
            target = target[part]
        target[[node, *path][-1]] = value
    out = tmp_path / "p.json"
    out.write_text(json.dumps(data))
    return out


STEP = {"features": ["const", "num_tokens", "decode_context", "num_seqs"], "r2": 0.99,
        "ranges": {"num_tokens": [1, 4096], "decode_context": [1, 500000], "num_seqs": [1, 128]}}


@pytest.mark.parametrize("change,field,words", [
    ({"step": {**STEP, "coef": [0.0, 0.0, 0.0, 0.0]}, "prefer": "step"}, "step.coef",
     "every coefficient is zero or negative"),
    ({"step": {**STEP, "coef": [0.012, -2.9e-6, 1e-9, 1e-5]}, "prefer": "step"}, "step.coef",
     "negative coefficients (num_tokens -2.9e-06) make it predict 0.000132 s within its measured ranges"),
    ({"step": {**STEP, "features": ["const", "num_sampled"], "coef": [0.01, -1e-5], "ranges": {}}, "prefer": "step"},
     "step.coef", "coefficient of num_sampled is negative"),
    ({"ops__linear": {"x": [1, 64, 512, 4096], "seconds": [0.02, 0.021, 0.004, 0.05]}}, "ops.linear.seconds",
     "not monotone"),
    ({"ops__linear": {"x": [1, 4096], "seconds": [0.0, 0.0]}}, "ops.linear.seconds", "every time is 0 s"),
])
def test_a_fit_or_table_that_cannot_price_a_step_is_refused(tmp_path, capsys, change, field, words):
    path = scenario(tmp_path, edited(tmp_path, **change))
    code, text = run(capsys, "run", path, "--out", tmp_path / "out")
    assert code == 2 and f"{field}: " in text and words in text and "Traceback" not in text, text
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("gpu,extra,change,words", [
    ("A100-80GB", "", {}, "measured on H100-SXM, the scenario simulates A100-80GB"),
    ("H100", "", {"model": "llama-2-70b-chat"}, "measured llama-2-70b-chat, the scenario simulates llama-2-70b"),
    ("H100", "quantization: {weights: fp8}\n", {}, "measured in fp16, the scenario's weights are fp8"),
    ("H100", "", {"engine": "sglang"}, "measured on sglang, the scenario simulates vllm"),
])
def test_a_profile_measured_on_something_else_is_refused_or_priced_with_a_warning(tmp_path, capsys, gpu, extra,
                                                                                  change, words):
    path = scenario(tmp_path, edited(tmp_path, H100, **change), gpu, extra)
    code, text = run(capsys, "run", path, "--out", tmp_path / "out")
    assert code == 2 and words in text and "--allow-profile-mismatch" in text and "Traceback" not in text, text
    code, text = run(capsys, "run", path, "--out", tmp_path / "out", "--allow-profile-mismatch")
    assert code == 0 and f"warning: {tmp_path / 'p.json'}: {words}" in text, text


def test_a_matching_profile_and_fp16_for_bf16_pass(tmp_path, capsys):
    assert run(capsys, "run", scenario(tmp_path, A100), "--out", tmp_path / "out")[0] == 0


def test_a_study_checks_every_configuration_s_profile_before_running(tmp_path, capsys):
    import yaml

    scenario(tmp_path, A100)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"scenario": "s.yaml", "vary": {"grid": {"hardware.gpu": ["A100-80GB", "H100"]}},
                                     "objective": {"kind": "curves", "rates": [1]}}))
    code, text = run(capsys, "study", study, "--out", tmp_path / "out", "--jobs", "1")
    assert code == 2 and "configuration [gpu=H100]" in text
    assert "measured on A100-80GB, the scenario simulates H100" in text
    assert not (tmp_path / "out" / "runs.jsonl").exists()


def test_compare_checks_each_scenario_s_profile_before_running(tmp_path, capsys):
    good = scenario(tmp_path, A100)
    bad = tmp_path / "h100.yaml"
    bad.write_text(good.read_text().replace("gpu: A100-80GB", "gpu: H100"))
    code, text = run(capsys, "compare", good, bad, "--out", tmp_path / "out", "--jobs", "1")
    assert code == 2 and "measured on A100-80GB, the scenario simulates H100" in text, text
    assert not (tmp_path / "out").exists()
