"""Bad profiles and options: a clear message naming the file and field, exit code 2."""

from __future__ import annotations

import json

import pytest

from sim.cli.app import main

pytest.importorskip("torch")


def _err(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


def _edited(quick_profile, tmp_path, name: str, edit) -> str:
    data = json.loads(quick_profile.read_text())
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _validate(scenario, profile, tmp_path, *extra) -> int:
    return main(["validate", str(scenario), "--profile", str(profile), "--out", str(tmp_path / "v"),
                 *extra])


def test_missing_and_corrupt_profiles(scenario, tmp_path, capsys):
    assert _validate(scenario, tmp_path / "nope.json", tmp_path) == 2
    err = _err(capsys)
    assert "nope.json: --profile: profile file not found" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert _validate(scenario, bad, tmp_path) == 2
    assert "bad.json: not valid JSON" in _err(capsys)
    assert not (tmp_path / "v").exists()  # nothing ran


@pytest.mark.parametrize(("edit", "field", "words"), [
    (lambda d: d.update(schema_version=7), "schema_version", "expected 1, got 7"),
    (lambda d: d["ops"]["linear"].update(seconds=[-1.0] * len(d["ops"]["linear"]["x"])),
     "ops.linear", "finite and ≥ 0"),
    (lambda d: d.update(step=None, prefer="step"), "(top level)", "prefer is 'step'"),
    (lambda d: d["step"].update(features=["const", "bogus", "a", "b", "c", "d"]), "step",
     "unknown features"),
    (lambda d: d["model_shape"].update(hidden_size=4096), "model_shape", "shape differs"),
    (lambda d: d["device"].update(type="cuda", name="NVIDIA H100"), "device.type",
     "calibrate on this device"),
    (lambda d: d.update(tp=2), "tp", "tp=2"),
    (lambda d: d.update(tp=True), "tp", "valid integer"),  # a boolean is no number
    (lambda d: d["ops"]["linear"]["x"].__setitem__(1, float("nan")), "ops.linear.x.1", "finite number"),
])
def test_invalid_profiles_name_the_field(quick_profile, scenario, tmp_path, capsys, edit, field, words):
    path = _edited(quick_profile, tmp_path, "edited.json", edit)
    assert _validate(scenario, path, tmp_path) == 2
    err = _err(capsys)
    assert "edited.json" in err and words in err
    if field != "(top level)":
        assert f": {field}" in err


def test_a_profile_of_another_model_in_a_plain_run(quick_profile, tmp_path, capsys):
    s = tmp_path / "s.yaml"
    s.write_text(f"model: llama-3-8b\ncost: {{model: profile, profile: {quick_profile}}}\n"
                 "workload: {num_requests: 5}\n")
    assert main(["run", str(s), "--out", str(tmp_path / "r")]) == 2
    err = _err(capsys)
    assert "model_shape" in err and "tiny-llama-12m" in err


@pytest.mark.parametrize(("args", "words"), [
    (["calibrate", "--model", "no-such-model"], "unknown model"),
    (["calibrate", "--repeats", "0"], "--repeats"),
    (["calibrate", "--no-ops", "--no-step"], "nothing left to measure"),
    (["calibrate", "--seed", "-1"], "--seed: expected a whole number from 0 to 2**63 - 1"),
])
def test_bad_calibrate_options(args, words, tmp_path, capsys):
    assert main([*args, "--out", str(tmp_path / "p.json")]) == 2
    assert words in _err(capsys)
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("bound", ["lots", "e2e=x", "latency=0.1", "e2e.p50=0.1", "-0.1"])
def test_bad_max_error(quick_profile, scenario, tmp_path, capsys, bound):
    assert _validate(scenario, quick_profile, tmp_path, "--max-error", bound) == 2
    assert "--max-error" in _err(capsys)


def test_unknown_threads(quick_profile, scenario, tmp_path, capsys):
    assert _validate(scenario, quick_profile, tmp_path, "--threads", "0") == 2
    assert "--threads" in _err(capsys)


def test_cuda_without_a_gpu(quick_profile, scenario, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["calibrate", "--device", "cuda", "--quick", "--out", str(tmp_path / "p.json")]) == 2
    assert "cuda requested but no CUDA device" in _err(capsys)
    assert _validate(scenario, quick_profile, tmp_path, "--device", "cuda") == 2
    assert "cuda requested but no CUDA device" in _err(capsys)


def test_output_locations_are_checked_before_measuring(quick_profile, scenario, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(["calibrate", "--quick", "--out", str(tmp_path)]) == 2
    assert "is a folder; expected the profile's file name" in _err(capsys)
    assert main(["calibrate", "--quick", "--out", str(tmp_path / "file" / "p.json")]) == 2
    assert "--out" in _err(capsys)
    assert main(["validate", str(scenario), "--profile", str(quick_profile), "--out",
                 str(tmp_path / "file")]) == 2
    assert "file: --out: exists and is not a folder" in _err(capsys)
    assert main(["validate", str(scenario), "--profile", str(tmp_path), "--out", str(tmp_path / "v")]) == 2
    assert "--profile: is a folder; expected a profile file" in _err(capsys)


def test_import_vidur_options(tmp_path, capsys):
    args = ["import-vidur", "--model", "llama-2-7b", "--out", str(tmp_path / "p.json")]
    assert main([*args, "--mlp", str(tmp_path)]) == 2
    assert "is a folder; expected a Vidur CSV file" in _err(capsys)
    (tmp_path / "mlp.csv").write_text("num_tokens,num_tensor_parallel_workers\n1,1\n")
    assert main([*args, "--mlp", str(tmp_path / "mlp.csv"), "--overhead-s", "nan"]) == 2
    assert "--overhead-s: expected seconds ≥ 0, got nan" in _err(capsys)
