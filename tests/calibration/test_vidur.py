"""Importing Vidur's profiling CSVs: a small fixture in its format, and the real files."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.vidur import import_vidur
from sim.cli.app import main
from sim.pricing.profile import load_profile
from sim.scenario.specs import get_model
from tests.calibration.vidur_fixture import (
    MLP_OPS,
    TOKENS,
    allreduce_ms,
    decode_ms,
    mlp_ms,
    prefill_ms,
    write_allreduce,
    write_attention,
    write_mlp,
)
from tests.conftest import SHARED

MODEL = "llama-2-7b"
LINEAR = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


@pytest.fixture
def csvs(tmp_path):
    return {"mlp": write_mlp(tmp_path / "mlp.csv"), "attention": write_attention(tmp_path / "attention.csv"),
            "all_reduce": write_allreduce(tmp_path / "all_reduce.csv")}


def test_import_builds_tables_and_fits(csvs):
    p = import_vidur(csvs["mlp"], attention=csvs["attention"], all_reduce=csvs["all_reduce"],
                     model=MODEL, tp=2, gpu="A100-80GB")
    layers = get_model(MODEL).num_layers
    assert p.tp == 2 and p.device.type == "cuda" and p.device.name == "A100-80GB"
    assert p.ops.linear.x == list(map(float, TOKENS))
    for t, got in zip(TOKENS, p.ops.linear.seconds, strict=True):
        want = (layers * sum(mlp_ms(o, t) for o in LINEAR) + mlp_ms("emb", t)) * 1e-3
        assert got == pytest.approx(want, rel=1e-9)
    other = [o for o in MLP_OPS if o not in (*LINEAR, "emb")]
    t = TOKENS[3]
    want = (layers * sum(mlp_ms(o, t) * (2 if o == "add" else 1) for o in other)
            + mlp_ms("input_layernorm", t)) * 1e-3
    assert p.ops.other.seconds[3] == pytest.approx(want, rel=1e-9)
    # Attention: the linear fits reproduce Vidur's points (their formulas are linear).
    pre, dec = p.ops.attn_prefill, p.ops.attn_decode
    assert pre.features == ["const", "prefill_attn"]  # one prompt per row: no per-row term
    c = dict(zip(pre.features, pre.coef, strict=True))
    assert c["const"] + c["prefill_attn"] * 256 * (256 + 512) == pytest.approx(
        layers * prefill_ms(256, 512) * 1e-3, rel=1e-3)
    c = dict(zip(dec.features, dec.coef, strict=True))
    assert c["const"] + 16 * c["decode_rows"] + 16 * 1025 * c["decode_context"] == pytest.approx(
        layers * decode_ms(16, 1024) * 1e-3, rel=1e-3)
    assert p.ops.allreduce.seconds[-1] == pytest.approx(allreduce_ms(16777216) * 1e-3)
    assert p.ops.lm_head is None and p.step is None
    assert any("lm_head" in n and "roofline" in n for n in p.notes)


def test_import_without_attention_notes_the_roofline(csvs):
    p = import_vidur(csvs["mlp"], model=MODEL, tp=1)
    assert p.ops.attn_prefill is None and p.ops.attn_decode is None
    assert any("attention falls back to the roofline" in n for n in p.notes)
    assert p.device.name == "GPU"


def test_cli_import_then_simulate(csvs, tmp_path, capsys):
    out = tmp_path / "a100.json"
    assert main(["import-vidur", "--mlp", str(csvs["mlp"]), "--attention", str(csvs["attention"]),
                 "--all-reduce", str(csvs["all_reduce"]), "--model", MODEL, "--tp", "2",
                 "--out", str(out)]) == 0
    assert load_profile(out).model == MODEL
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"model: {MODEL}\nhardware: {{gpu: A100-80GB, tp: 2}}\n"
        f"cost: {{model: profile, profile: {out.name}}}\n"
        "workload: {num_requests: 50, arrival: {process: poisson, rate: 5},\n"
        "  prompt_len: {dist: uniform, min: 64, max: 1500}, output_len: {dist: fixed, value: 20}}\n")
    assert main(["run", str(scenario), "--out", str(tmp_path / "r")]) == 0
    text = capsys.readouterr().out
    # Prompts up to 1500 tokens: beyond the 512 measured, the tables extrapolate and say so.
    assert "extrapolated beyond its measured range (linear)" in " ".join(text.split())


def test_bad_vidur_input_names_the_file_and_field(csvs, tmp_path, capsys):
    def fails(*args) -> str:
        assert main(["import-vidur", *args, "--out", str(tmp_path / "x.json")]) == 2
        return " ".join(capsys.readouterr().err.split())

    err = fails("--mlp", str(csvs["mlp"]), "--model", MODEL, "--tp", "8")
    assert "mlp.csv: num_tensor_parallel_workers" in err and "tp=8" in err
    err = fails("--mlp", str(tmp_path / "nope.csv"), "--model", MODEL)
    assert "nope.csv" in err and "not found" in err
    wrong = write_mlp(tmp_path / "other.csv", n_embd=8192)
    err = fails("--mlp", str(wrong), "--model", MODEL)
    assert "other.csv: n_embd" in err and "another model" in err
    broken = tmp_path / "broken.csv"
    broken.write_text("num_tokens,num_tensor_parallel_workers\n1,1\n")
    err = fails("--mlp", str(broken), "--model", MODEL)
    assert "broken.csv: time_stats.attn_pre_proj.median" in err
    err = fails("--mlp", str(csvs["mlp"]), "--model", "no-such-model")
    assert "--model" in err and "unknown model" in err
    assert not (tmp_path / "x.json").exists()


VIDUR = SHARED / "vidur-profiles"


@pytest.mark.skipif(not VIDUR.is_dir(), reason="the shared Vidur profiles are not present")
def test_real_vidur_a100_profile_imports():
    base = VIDUR / "compute" / "a100" / "meta-llama" / "Llama-2-70b-hf"
    p = import_vidur(base / "mlp.csv", attention=base / "attention.csv",
                     all_reduce=VIDUR / "network" / "a100_dgx" / "all_reduce.csv",
                     model="llama-2-70b", tp=2)
    assert p.device.name == "A100"
    assert len(p.ops.linear.x) <= 66 and p.ops.linear.x[-1] == 4096
    assert np.all(np.diff(p.ops.linear.seconds) >= 0)
    # Llama-2-70B at TP=2, 80 layers: a 512-token step's matmuls take tens of ms on an A100.
    t512 = float(np.interp(512, p.ops.linear.x, p.ops.linear.seconds))
    assert 0.02 < t512 < 0.2
    assert p.ops.attn_prefill.r2 > 0.9 and p.ops.attn_decode.r2 > 0.9
