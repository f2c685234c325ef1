"""``servesim execute`` runs a scenario on the real engine and writes what ``run`` writes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from sim.cli.app import main

SCENARIO = """
name: execute-small
model: tiny-llama
scheduler: {policy: chunked-prefill, chunk_size: 64, max_num_seqs: 8, block_size: 16}
workload:
  num_requests: 6
  arrival: {process: poisson, rate: 20}
  prompt_len: {dist: uniform, min: 8, max: 90}
  output_len: {dist: uniform, min: 2, max: 6}
"""


@pytest.fixture
def scenario_file(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO)
    return p


def test_execute_writes_the_same_files_and_columns_as_run(tmp_path, scenario_file):
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "sim")]) == 0
    assert main(["execute", str(scenario_file), "--out", str(tmp_path / "real"), "--device", "cpu"]) == 0
    for name in ("requests.parquet", "steps.parquet", "summary.json", "report.html"):
        assert (tmp_path / "real" / name).is_file()
    for table in ("requests", "steps"):
        sim = pd.read_parquet(tmp_path / "sim" / f"{table}.parquet")
        real = pd.read_parquet(tmp_path / "real" / f"{table}.parquet")
        assert list(sim.columns) == list(real.columns)
    real = pd.read_parquet(tmp_path / "real" / "requests.parquet")
    assert (real["status"] == "finished").all()
    assert (real["output_tokens"] == real["max_output_tokens"]).all()  # EOS ignored for timing
    assert (real["ttft"] > 0).all() and (real["e2e"] >= real["ttft"]).all()
    summary = json.loads((tmp_path / "real" / "summary.json").read_text())
    assert summary["mode"] == "execute"
    sim_summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert set(summary["summary"]) == set(sim_summary["summary"])


def test_over_capacity_requests_are_rejected_and_others_finish(tmp_path, scenario_file):
    # 4 KV blocks of 16 tokens: prompts + outputs above 64 tokens can never fit.
    code = main(["execute", str(scenario_file), "--out", str(tmp_path / "o"),
                 "--set", "hardware.kv_blocks=4", "--set", "scheduler.max_num_seqs=4"])
    assert code == 0
    df = pd.read_parquet(tmp_path / "o" / "requests.parquet")
    big = df["prompt_tokens"] + df["max_output_tokens"] > 64
    assert big.any() and (~big).any()
    assert (df.loc[big, "status"] == "rejected").all()
    assert (df.loc[big, "reject_reason"].str.contains("KV cache capacity")).all()
    assert (df.loc[~big, "status"] == "finished").all()


def test_execute_refuses_what_the_engine_cannot_run(tmp_path, scenario_file, capsys):
    code = main(["execute", str(scenario_file), "--set", "replicas=2", "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert "replicas" in err and "one replica" in err


def test_prepare_sizes_graphs_and_warmup_from_the_scheduler(scenario_file, capsys):
    from engine.execute import EngineSetup, prepare
    from sim.scenario.load import load_scenario

    scenario = load_scenario(str(scenario_file), [])
    _, ex = prepare(scenario, EngineSetup(graphs="pad"))
    ladder = ex.graph_runner.ladder
    assert ladder.max_seqs == 8 and ladder.largest.tokens == 64  # max_num_seqs, chunk_size
    assert ex.last_warmup.prefill_lengths[-1] == 64
    assert ex.graph_runner.visited == set(ex.graph_runner.keys)
    assert "engine warm-up: " in capsys.readouterr().err


def test_execute_checks_the_output_folder_before_running(tmp_path, scenario_file, capsys):
    blocker = tmp_path / "taken"
    blocker.write_text("a file, not a folder")
    assert main(["execute", str(scenario_file), "--out", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert "taken" in err and "Traceback" not in err
    assert blocker.read_text() == "a file, not a folder"
