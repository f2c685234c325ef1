"""Money per token everywhere (issue 32): ``run``'s summary, summary.json and report, ``compare``'s
table and CSV, and a study's tables, all from one rule (sim/results/money.py): the fleet's $/h
(every GPU; ``hardware.price_per_gpu_hour``, a study's prices, else the catalog's dated, sourced
price) over the arrival window, per 1M output tokens and per 1M tokens with prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sim.cli.app import main
from sim.scenario.specs import get_gpu

REPO = Path(__file__).resolve().parents[3]
SMALL = ["--set", "workload.num_requests=200"]


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_run_prints_and_writes_cost_per_token_with_the_price_source(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "--out", str(out), *SMALL]) == 0
    text = capsys.readouterr().out
    doc = _summary(out)
    s, h100 = doc["summary"], get_gpu("H100-SXM")
    assert s["cost_per_hour"] == pytest.approx(h100.price_per_hour)
    # over the arrival window, per the finished requests' tokens
    spent = s["cost_per_hour"] * s["arrival_span_s"] / 3600
    assert s["cost_per_1m_output_tokens"] == pytest.approx(spent / s["output_tokens"] * 1e6)
    assert s["cost_per_1m_tokens"] == pytest.approx(spent / (s["output_tokens"] + s["prompt_tokens"]) * 1e6)
    assert s["arrival_span_s"] < s["duration_s"]  # (the drain is not billed)
    assert doc["prices"] == [{"gpu": "H100-SXM", "count": 1, "usd_per_hour": h100.price_per_hour,
                              "source": h100.price_source, "date": h100.price_date}]
    assert f"1 × H100-SXM at ${h100.price_per_hour:.2f}/h" in text and "per 1M output tokens" in text
    assert h100.price_source in text and h100.price_date in text
    html = (out / "report.html").read_text()
    assert "per 1M tokens" in html and h100.price_date in html


def test_a_price_per_gpu_hour_sets_the_cost(tmp_path, capsys):
    base, priced = tmp_path / "a", tmp_path / "b"
    assert main(["run", "--out", str(base), *SMALL]) == 0
    assert main(["run", "--out", str(priced), *SMALL, "--set", "hardware.price_per_gpu_hour=5"]) == 0
    assert "hardware.price_per_gpu_hour" in capsys.readouterr().out
    a, b = _summary(base)["summary"], _summary(priced)["summary"]
    assert b["cost_per_hour"] == 5
    assert b["cost_per_1m_tokens"] == pytest.approx(a["cost_per_1m_tokens"] * 5 / a["cost_per_hour"])
    assert _summary(priced)["prices"][0]["source"] == "hardware.price_per_gpu_hour"


def test_disaggregated_and_heterogeneous_fleets_count_every_gpu(tmp_path):
    for name, gpus in (("disaggregated", {"H100-SXM": 2}), ("heterogeneous", {"H100-SXM": 2, "A100-80GB": 2})):
        out = tmp_path / name
        assert main(["run", str(REPO / "scenarios" / f"{name}.yaml"), "--out", str(out), *SMALL]) == 0
        doc = _summary(out)
        assert {p["gpu"]: p["count"] for p in doc["prices"]} == gpus
        expected = sum(n * get_gpu(g).price_per_hour for g, n in gpus.items())
        assert doc["summary"]["cost_per_hour"] == pytest.approx(expected)


def test_compare_shows_cost_per_token_columns(tmp_path, capsys):
    scen = {"name": "x", "model": "llama-3-8b", "workload": {"num_requests": 100, "arrival": {
        "process": "poisson", "rate": 8}}}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(scen))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({**scen, "name": "y", "hardware": {"gpu": "A100-80GB"}}))
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--out", str(out),
                 "--jobs", "1"]) == 0
    text = capsys.readouterr().out
    assert "$ per 1M tokens" in text and "$ per 1M output tokens" in text
    frame = pd.read_csv(out / "summary.csv").set_index("scenario")
    assert frame.loc["x", "cost_per_hour"] == pytest.approx(get_gpu("H100-SXM").price_per_hour)
    assert frame.loc["y", "cost_per_hour"] == pytest.approx(get_gpu("A100-80GB").price_per_hour)
    assert (frame["cost_per_1m_tokens"] > 0).all()
    a100 = get_gpu("A100-80GB")
    html = (out / "report.html").read_text()  # each scenario's prices and their sources
    assert "GPU prices" in html and f"A100-80GB ${a100.price_per_hour:.2f}/h" in html and a100.price_date in html


def test_a_study_ranks_by_cost_per_token_at_its_own_prices(tmp_path, capsys):
    scen = {"name": "s", "model": "llama-3-8b", "workload": {"num_requests": 100, "arrival": {
        "process": "poisson", "rate": 6}}, "slo": {"ttft_s": 2.0}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scen))
    study = {"scenario": "s.yaml", "vary": {"grid": {"hardware.gpu": ["H100-SXM", "A100-80GB"]}},
             "prices": {"H100-SXM": 1.0},  # the study's price: H100 now cheaper than the A100
             "objective": {"kind": "cheapest", "rate": 6, "rank_by": "cost_per_1m_tokens"}}
    (tmp_path / "st.yaml").write_text(yaml.safe_dump(study))
    out = tmp_path / "o"
    assert main(["study", str(tmp_path / "st.yaml"), "--out", str(out), "--jobs", "1"]) == 0
    assert "$ per 1M tokens" in capsys.readouterr().out
    runs = pd.read_csv(out / "runs.csv").set_index("hardware.gpu")
    h100, a100 = runs.loc["H100-SXM"], runs.loc["A100-80GB"]
    assert h100["cost_per_hour"] == 1.0
    # same traffic, same tokens: cost per token follows the study's price, not the catalog's
    assert h100["cost_per_1m_tokens"] / a100["cost_per_1m_tokens"] == pytest.approx(
        1.0 / get_gpu("A100-80GB").price_per_hour, rel=1e-6)
    best = json.loads((out / "answer.json").read_text())["best"]
    assert best["hardware.gpu"] == "H100-SXM"
    html = (out / "report.html").read_text()
    assert "H100-SXM $1.00/h (the study&#x27;s prices)" in html and get_gpu("A100-80GB").price_source[:20] in html


def test_a_study_refuses_a_cost_bound_its_prices_would_contradict(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", "model": "llama-3-8b"}))
    study = {"scenario": "s.yaml", "prices": {"H100-SXM": 1.0},
             "objective": {"kind": "cheapest", "rate": 6, "limits": {"cost_per_1m_tokens": 0.5}}}
    (tmp_path / "st.yaml").write_text(yaml.safe_dump(study))
    assert main(["study", str(tmp_path / "st.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "st.yaml" in err and "hardware.price_per_gpu_hour" in err and "Traceback" not in err
