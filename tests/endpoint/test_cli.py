"""The endpoint commands end to end against the fake server, and their bad-input handling."""

import json

import pandas as pd
import pytest
import yaml

from sim.cli.app import main


def run_cli(*argv):
    return main([str(a) for a in argv])


def test_bad_endpoint_url_and_server_exit_2(tmp_path, capsys):
    assert run_cli("loadgen", "--endpoint", "not a url", "--out", tmp_path) == 2
    assert "--endpoint" in capsys.readouterr().err
    assert run_cli("loadgen", "--endpoint", "http://127.0.0.1:9", "--out", tmp_path) == 2
    assert "no OpenAI-compatible server" in capsys.readouterr().err
    assert run_cli("calibrate", "--endpoint", "ftp://x", "--out", tmp_path / "p.json") == 2
    assert run_cli("validate", "--endpoint", "http://127.0.0.1:9", "--profile", tmp_path / "none.json") == 2


def test_bad_model_profile_and_scenario_exit_2(fake_server, tmp_path, capsys):
    assert run_cli("loadgen", "--endpoint", fake_server, "--model", "nope", "--out", tmp_path) == 2
    assert "serves fake" in capsys.readouterr().err
    assert run_cli("validate", "--endpoint", fake_server, "--profile", tmp_path / "missing.json") == 2
    assert "profile file not found" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: {arrival: {process: closed, concurrency: 0}}\n")
    assert run_cli("loadgen", bad, "--endpoint", fake_server, "--out", tmp_path) == 2
    assert "concurrency" in capsys.readouterr().err
    long = tmp_path / "long.yaml"
    long.write_text(yaml.safe_dump({"model": "tiny-llama-12m", "workload": {
        "num_requests": 2, "prompt_len": {"dist": "fixed", "value": 2000}}}))
    assert run_cli("loadgen", long, "--endpoint", fake_server, "--out", tmp_path) == 2
    assert "max_model_len" in capsys.readouterr().err


def scenario_file(tmp_path, profile_name, fragment, arrival):
    data = yaml.safe_load(fragment.read_text())
    data["cost"]["profile"] = str(tmp_path / profile_name)
    data |= {"name": "fake-check", "seed": 2, "workload": {
        "num_requests": 24, "arrival": arrival,
        "prompt_len": {"dist": "uniform", "min": 16, "max": 300},
        "output_len": {"dist": "uniform", "min": 4, "max": 24}}}
    path = tmp_path / "check.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
def test_calibrate_then_validate_against_a_known_server(fake_server, tmp_path):
    """The fake's scheduler and linear step cost are known: calibration must find them and the
    simulation must then predict the measured requests closely."""
    prof = tmp_path / "prof.json"
    assert run_cli("calibrate", "--endpoint", fake_server, "--quick", "--model", "tiny-llama-12m",
                   "--out", prof, "--no-progress") == 0
    p = json.loads(prof.read_text())
    assert p["source"] == "endpoint"
    sched = p["grid"]["scheduler"]
    assert sched["chunk_size"] == 128 and sched["max_num_seqs"] == 6 and sched["kv_blocks"] == 4096
    assert 0.001 < p["request_overhead_s"] < 0.02  # the fake's 4 ms (plus HTTP)
    fragment = prof.with_suffix(".scenario.yaml")
    assert yaml.safe_load(fragment.read_text())["scheduler"]["chunk_size"] == 128
    for arrival in ({"process": "poisson", "rate": 6.0}, {"process": "closed", "concurrency": 4}):
        sc = scenario_file(tmp_path, "prof.json", fragment, arrival)
        out = tmp_path / arrival["process"]
        code = run_cli("validate", sc, "--endpoint", fake_server, "--profile", prof, "--out", out,
                       "--repeats", "2", "--max-error", "e2e=0.25")
        v = json.loads((out / "validation.json").read_text())
        assert code == 0, v["errors"]
        assert v["requests"]["joined"] == 24
        assert set(v["run_to_run_spread"]) == {"ttft", "tpot", "e2e"}
        assert v["endpoint"]["loop"] == ("closed" if arrival["process"] == "closed" else "open")
        assert (out / "report.html").is_file() and (out / "run2" / "itl.parquet").is_file()
        assert len(pd.read_parquet(out / "run1" / "requests.parquet")) == 24
        # both runs' plain decode steps, priced by the calibrated profile for their batch sizes:
        # the fake's step cost is the profile's kind, so price and measurement agree
        steps = v["decode_steps"]
        assert len(steps) == 2 and all(d["n"] > 20 for d in steps)
        assert all(abs(d["rel_diff"]) < 0.25 for d in steps), steps
        assert any(line.startswith("plain decode steps:") for line in v["diagnosis"])
