"""Output folders: checked before simulating, written all or nothing (never two runs mixed),
what summary.json records of trace runs, and the exit code of a run that served nobody."""

from __future__ import annotations

import hashlib
import json
import os

import pandas as pd
import pytest

from sim.cli.app import main

GOOD = "model: llama-3-8b\nworkload: {num_requests: 20, arrival: {process: poisson, rate: 5}}\n"


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(GOOD)
    return path


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if anything is simulated."""
    import sim.loops.run

    def boom(*a, **k):
        raise AssertionError("simulated before checking the output folder")

    monkeypatch.setattr(sim.loops.run, "simulate", boom)


def run(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, " ".join((out.out + out.err).split())


def snapshot(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("make,words", [
    (lambda t: (t / "f").write_text("x") and t / "f", "exists and is not a folder"),
    (lambda t: (t / "f").write_text("x") and t / "f" / "sub" / "dir", "is a file, so it cannot hold"),
    (lambda t: (t / "r").mkdir() or (t / "r" / "report.html").mkdir() or t / "r",
     "report.html: --out: is a folder where the results need a file"),
])
def test_bad_output_folders_fail_before_simulating(tmp_path, capsys, scenario, no_simulation, make, words):
    out = make(tmp_path)
    code, text = run(capsys, "run", scenario, "--out", out)
    assert code == 2 and words in text and "Traceback" not in text, text


def test_an_unwritable_output_folder_fails_before_simulating(tmp_path, capsys, scenario, no_simulation):
    if os.geteuid() == 0:  # root writes anywhere: take a place no one can create folders in
        out = "/proc/servesim-results"
        if not os.path.isdir("/proc"):
            pytest.skip("no /proc")
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        out = locked / "results"
    code, text = run(capsys, "run", scenario, "--out", out)
    assert code == 2 and "--out: cannot create or write in this folder" in text, text
    assert not os.path.exists(out)


def test_checking_leaves_no_trace_when_the_run_then_fails(tmp_path, capsys, monkeypatch):
    path = tmp_path / "s.yaml"
    path.write_text("model: llama-3-8b\ncost: {model: profile, profile: p.json}\n")
    code, text = run(capsys, "run", path, "--out", tmp_path / "new" / "results")
    assert code == 2 and "p.json" in text
    assert not (tmp_path / "new").exists()


def test_a_failed_write_leaves_the_previous_results_whole(tmp_path, capsys, scenario, monkeypatch):
    out = tmp_path / "out"
    assert run(capsys, "run", scenario, "--out", out)[0] == 0
    before = snapshot(out)
    import sim.results.write

    def broken_report(result, path, plotly="file"):
        path.write_text("half a report")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sim.results.write, "write_report", broken_report)
    code, text = run(capsys, "run", scenario, "--out", out, "--set", "seed=7")
    assert code == 2 and "could not write the results: No space left on device" in text, text
    assert snapshot(out) == before  # every file of the first run, none of the second
    assert sorted(p.name for p in out.iterdir()) == sorted(before)  # no temporary files left


def test_a_folder_in_the_way_at_commit_time_replaces_nothing(tmp_path, scenario):
    from sim.errors import OutputError
    from sim.results.atomic import Staging

    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old a")
    (out / "b.txt").mkdir()
    st = Staging(out)
    st.file("a.txt").write_text("new a")
    st.file("b.txt").write_text("new b")
    with pytest.raises(OutputError, match=r"b\.txt"):
        st.commit()
    assert (out / "a.txt").read_text() == "old a"
    assert sorted(p.name for p in out.iterdir()) == ["a.txt", "b.txt"]


def test_a_run_in_another_format_replaces_the_earlier_tables(tmp_path, capsys, scenario):
    out = tmp_path / "out"
    assert run(capsys, "run", scenario, "--out", out)[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["plotly.min.js", "report.html", "requests.parquet",
                                                      "steps.parquet", "summary.json"]
    assert run(capsys, "run", scenario, "--out", out, "--format", "csv", "--set", "seed=3",
               "--plotlyjs", "cdn")[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "requests.csv", "steps.csv",
                                                      "summary.json"]
    assert "cdn.plot.ly" in (out / "report.html").read_text()
    assert json.loads((out / "summary.json").read_text())["config"]["seed"] == 3
    assert oct((out / "summary.json").stat().st_mode & 0o777) != oct(0o600)  # not a private temp


def test_trace_runs_record_what_was_applied(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:{10 + i}.00,{100 + i},{10 + i}\n" for i in range(10)))
    path = tmp_path / "s.yaml"
    path.write_text("model: llama-3-8b\nworkload: {trace: {path: t.csv, start_s: 2, duration_s: 5, "
                    "rate: 2}}\n")
    assert run(capsys, "run", path, "--out", tmp_path / "out")[0] == 0
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    w = doc["config"]["workload"]
    assert "num_requests" not in w and "arrival" not in w and "prompt_len" not in w
    [t] = doc["traces"]
    assert t["sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()
    assert t["field"] == "workload.trace" and t["path"].endswith("t.csv")
    assert t["rows_read"] == 10 and t["rows_used"] == 5 and t["window_s"] == [2, 7]
    assert t["rate"] == 2 and t["mean_rate"] == pytest.approx(2)
    assert doc["summary"]["requests"] == 5


def test_generated_runs_keep_their_full_config(tmp_path, capsys, scenario):
    assert run(capsys, "run", scenario, "--out", tmp_path / "out")[0] == 0
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert doc["config"]["workload"]["num_requests"] == 20 and "traces" not in doc


def test_a_run_that_rejects_every_request_exits_3(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("model: llama-3-8b\nworkload: {num_requests: 5, "
                    "prompt_len: {dist: fixed, value: 100000}}\n")
    code, text = run(capsys, "run", path, "--out", tmp_path / "out")
    assert code == 3
    assert "every request was rejected" in text and "a slot's context) (5)" in text and "the model's max length" in text
    assert len(pd.read_parquet(tmp_path / "out" / "requests.parquet")) == 5  # results still written


def test_json_safe_writes_null_for_nan_and_plain_numbers_for_numpy():
    import numpy as np

    from sim.results.jsonsafe import json_safe

    got = json_safe({"a": np.float32("nan"), "b": [np.int64(3), (float("inf"), np.float64(0.5))], "c": "x"})
    assert got == {"a": None, "b": [3, [None, 0.5]], "c": "x"}
    assert type(got["b"][0]) is int


def test_results_through_a_link_to_the_folder_replace_its_contents_not_the_link(tmp_path, capsys, scenario):
    real = tmp_path / "real"
    real.mkdir()
    (real / "notes.txt").write_text("mine")  # not the run's: kept
    (real / "data").mkdir()
    (real / "data" / "x.csv").write_text("1,2")
    link = tmp_path / "link"
    link.symlink_to(real)
    assert run(capsys, "run", scenario, "--out", link)[0] == 0
    assert link.is_symlink() and (real / "summary.json").is_file() and (real / "notes.txt").read_text() == "mine"
    assert (real / "data" / "x.csv").read_text() == "1,2"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # nothing left beside
