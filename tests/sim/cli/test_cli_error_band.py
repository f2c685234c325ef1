"""Every answer states how far to trust it (issue 28, part 5): ``run``'s terminal summary,
summary.json and report.html, ``run --seeds``, and a study's answer carry the error band of
sim.pricing.trust for the scenario simulated."""

from __future__ import annotations

import json

from sim.cli.app import main
from sim.pricing.trust import error_band
from sim.scenario.load import load_scenario, scenario_from_dict
from tests.study.helpers import SMALL as STUDY_BASE
from tests.study.helpers import write_study

SMALL = ["--set", "workload.num_requests=100"]


def test_run_prints_writes_and_reports_the_error_band(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "--out", str(out), *SMALL]) == 0
    text = " ".join(capsys.readouterr().out.split())
    expected = error_band(load_scenario(None))  # the default scenario: H100-SXM, vLLM, llama-3-8b bf16
    tpot = expected.bands["tpot"]
    assert tpot.error is not None and tpot.cases >= 3
    assert "Error band: how far to trust these figures" in text
    assert f"error of TPOT/ITL ±{tpot.error:.0%}: {tpot.basis}" in text
    block = json.loads((out / "summary.json").read_text())["error_band"]
    assert block["cost_model"] == "roofline" and set(block["metrics"]) == {"ttft", "tpot", "e2e", "throughput"}
    assert block["metrics"]["tpot"] == {"error": round(tpot.error, 4), "cases": tpot.cases,
                                        "bias": round(tpot.bias, 4), "basis": tpot.basis, "text": tpot.text}
    page = (out / "report.html").read_text()
    assert "Error band: how far to trust these figures" in page and tpot.basis in page


def test_a_user_defined_gpu_runs_end_to_end_and_says_not_validated(tmp_path, capsys):
    out = tmp_path / "r"
    gpu = "hardware.gpu={name: my-gpu, memory_gib: 96, hbm_tb_s: 4, peaks: {bf16: 900}, link: nvlink4}"
    assert main(["run", "--out", str(out), *SMALL, "--set", gpu, "--set", "hardware.price_per_gpu_hour=3"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "error of TTFT not validated: the GPU my-gpu is defined in the scenario" in text
    block = json.loads((out / "summary.json").read_text())["error_band"]
    assert all(m["error"] is None and m["cases"] == 0 for m in block["metrics"].values())


def test_run_on_seeds_carries_the_band_once_for_all_seeds(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["run", "--out", str(out), *SMALL, "--seeds", "2"]) == 0
    assert "Error band: how far to trust these figures" in capsys.readouterr().out
    top = json.loads((out / "summary.json").read_text())
    assert top["error_band"] == json.loads((out / "seed-0" / "summary.json").read_text())["error_band"]


def test_a_studys_answer_carries_the_band_of_its_configuration(tmp_path, capsys):
    study = {"name": "band", "vary": {"grid": {"hardware.gpu": ["H100-SXM", "MI355X"]}},
             "objective": {"kind": "cheapest", "rate": 4}}
    out = tmp_path / "out"
    assert main(["study", str(write_study(tmp_path, study, STUDY_BASE)), "--out", str(out), "--yes"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    answer = json.loads((out / "answer.json").read_text())
    gpu = "MI355X" if "MI355X" in answer["best"]["config"] else "H100-SXM"
    expected = error_band(scenario_from_dict({**STUDY_BASE, "hardware": {"gpu": gpu}}, "<test>"))
    assert answer["error_band"] == expected.to_json()
    assert f"{expected.short()} (answer.json: error_band)" in text
    assert f"error band: {expected.short()}" in (out / "report.html").read_text()
