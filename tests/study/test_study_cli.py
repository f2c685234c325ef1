"""``servesim study`` and ``servesim compare`` end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import yaml

from sim.cli.app import main

from .helpers import SMALL, write_study

STUDY = {
    "name": "tiny",
    "vary": {"grid": {"scheduler.policy": ["continuous", "chunked-prefill"],
                      "replicas": [1, 2]}},
    "objective": {"kind": "curves", "rates": [4, 12, 24]},
}


def test_study_writes_tables_answer_and_report_then_resumes(tmp_path, capsys):
    path = write_study(tmp_path, STUDY, SMALL)
    out = tmp_path / "out"
    assert main(["study", str(path), "--out", str(out), "--jobs", "2"]) == 0
    text = capsys.readouterr().out
    assert "answer:" in text and "12 runs (0 reused, 0 failed)" in text
    for name in ("runs.csv", "runs.parquet", "configs.csv", "configs.parquet", "answer.json",
                 "report.html", "runs.jsonl"):
        assert (out / name).is_file(), name
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == 12 and set(runs["rate"]) == {4, 12, 24}
    assert {"scheduler.policy", "replicas", "ttft_p99", "goodput_per_gpu", "key"} <= set(runs)
    assert pd.read_csv(out / "runs.csv").shape == runs.shape
    answer = json.loads((out / "answer.json").read_text())
    assert answer["best"]["config"] in set(runs["config"])
    assert main(["study", str(path), "--out", str(out), "--jobs", "2"]) == 0
    captured = capsys.readouterr()
    assert "12 runs (12 reused, 0 failed)" in captured.out
    assert "resuming: 12 runs" in captured.err


def test_set_overrides_every_configuration_and_dry_run(tmp_path, capsys):
    path = write_study(tmp_path, STUDY, SMALL)
    assert main(["study", str(path), "--dry-run", "--set", "hardware.gpu=A100-80GB"]) == 0
    out = capsys.readouterr().out
    assert "4 configurations" in out and "3.58" in out  # 2 × A100-80GB at 1.79 $/h


# servesim as a terminal starts it, with Ctrl-C raising KeyboardInterrupt even where the tests
# themselves run as a background job (which ignores SIGINT, and children inherit that).
AS_IN_A_TERMINAL = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                    "runpy.run_module('sim.cli', run_name='__main__', alter_sys=True)")


def test_ctrl_c_keeps_finished_runs_and_the_next_run_resumes(tmp_path):
    study = {**STUDY, "vary": {"grid": {"scheduler.policy": ["continuous", "chunked-prefill"],
                                        "replicas": [1, 2, 3, 4], "seed": [0, 1]}}}
    path = write_study(tmp_path, study, SMALL)
    out = tmp_path / "out"
    # Runs of ~0.3 s each (the SimPy loop), so that the study is still going when Ctrl-C comes.
    cmd = [sys.executable, "-c", AS_IN_A_TERMINAL, "study", str(path), "--out", str(out), "--jobs", "2",
           "--set", "workload.num_requests=1000", "--set", "simulation.loop=simpy"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    runs = out / "runs.jsonl"
    deadline = time.time() + 600  # a wait for progress, not a bound: a busy machine may take long
    while time.time() < deadline and (not runs.exists() or
                                      len(runs.read_text().splitlines()) < 3):
        time.sleep(0.05)
    seen = len(runs.read_text().splitlines()) if runs.exists() else 0
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (seen, stdout[-1500:], stderr)
    assert "Traceback" not in stderr
    kept = [json.loads(line) for line in runs.read_text().splitlines()]
    assert 3 <= len(kept) < 48 and all(r["status"] == "ok" for r in kept)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"48 runs ({len(kept)} reused, 0 failed)" in " ".join(done.stdout.split())


def test_compare_runs_scenarios_on_the_same_traffic(tmp_path, capsys):
    a = {**SMALL, "name": "cont"}
    b = {**SMALL, "name": "chunked", "seed": 5,
         "scheduler": {"policy": "chunked-prefill", "chunk_size": 256, "max_num_seqs": 64},
         "workload": {**SMALL["workload"], "num_requests": 50}}
    for name, data in (("a.yaml", a), ("b.yaml", b)):
        (tmp_path / name).write_text(yaml.safe_dump(data))
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"),
                 "--out", str(out), "--jobs", "2"]) == 0
    assert "cont" in capsys.readouterr().out
    ra = pd.read_parquet(out / "requests-cont.parquet")
    rb = pd.read_parquet(out / "requests-chunked.parquet")
    assert len(ra) == len(rb) == 120  # b's own workload and seed were replaced by a's
    pd.testing.assert_series_equal(ra["arrival"], rb["arrival"])
    pd.testing.assert_series_equal(ra["prompt_tokens"], rb["prompt_tokens"])
    summary = pd.read_csv(out / "summary.csv")
    assert summary["scenario"].tolist() == ["cont", "chunked"]
    assert (out / "report.html").is_file()
    # --own-traffic keeps each scenario's workload
    assert main(["compare", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"),
                 "--out", str(out), "--jobs", "1", "--own-traffic"]) == 0
    assert len(pd.read_parquet(out / "requests-chunked.parquet")) == 50


def test_compare_errors_exit_2(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(SMALL))
    assert main(["compare", str(tmp_path / "a.yaml")]) == 2
    bad = {**SMALL, "replicas": 0}
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(bad))
    assert main(["compare", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]) == 2
    err = capsys.readouterr().err
    assert "b.yaml: replicas" in err and "Traceback" not in err
