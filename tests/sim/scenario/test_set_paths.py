"""File paths: written in a scenario they start from the scenario's folder; given with ``--set``
they start from the working folder (where the person typing them stands), in ``run``,
``study`` and ``compare`` alike."""

from __future__ import annotations

import pandas as pd
import yaml

from sim.cli.app import main
from sim.scenario.load import load_scenario, paths_from_working_folder
from tests.study.helpers import write_study

ROWS = 7  # requests in the trace the working folder holds
TRACE = {"format": "csv", "columns": {"arrival": "t", "prompt_len": "p", "output_len": "o"}}


def _trace(path, rows: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"t": [0.1 * i for i in range(rows)], "p": [64] * rows, "o": [8] * rows}).to_csv(path, index=False)


def _scenario(folder, rows_beside_it: int = 3):
    """A scenario in its own folder whose trace (``trace.csv`` beside it) has 3 rows; the working
    folder's ``trace.csv`` has ROWS: which one a run reads shows where its path started."""
    _trace(folder / "trace.csv", rows_beside_it)
    data = {"name": "paths", "model": "llama-3-8b", "workload": {"trace": {"path": "trace.csv", **TRACE}}}
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_paths_in_set_start_from_the_working_folder(tmp_path, monkeypatch):
    work, scen = tmp_path / "work", tmp_path / "scen"
    _trace(work / "trace.csv", ROWS)
    path = _scenario(scen)
    monkeypatch.chdir(work)
    written = load_scenario(path)
    assert written.resolve(written.workload.trace.path) == scen / "trace.csv"  # the file's own path
    given = load_scenario(path, ["workload.trace.path=trace.csv"])
    assert given.resolve(given.workload.trace.path) == work / "trace.csv"
    whole = load_scenario(path, ["workload.trace={path: trace.csv, format: csv, "
                                 "columns: {arrival: t, prompt_len: p, output_len: o}}"])
    assert whole.resolve(whole.workload.trace.path) == work / "trace.csv"  # inside a mapping too


def test_only_file_fields_change():
    assert paths_from_working_folder("name", "trace.csv") == "trace.csv"
    assert paths_from_working_folder("workload.trace.format", "csv") == "csv"
    assert paths_from_working_folder("cost.profile", "/abs/p.json") == "/abs/p.json"
    assert paths_from_working_folder("model.hf_config", "m/config.json").endswith("/m/config.json")


def test_run_reads_the_working_folders_file(tmp_path, monkeypatch):
    work, scen = tmp_path / "work", tmp_path / "scen"
    _trace(work / "trace.csv", ROWS)
    path = _scenario(scen)
    monkeypatch.chdir(work)
    assert main(["run", str(path), "--out", "a"]) == 0
    assert len(pd.read_parquet(work / "a" / "requests.parquet")) == 3
    assert main(["run", str(path), "--out", "b", "--set", "workload.trace.path=trace.csv"]) == 0
    assert len(pd.read_parquet(work / "b" / "requests.parquet")) == ROWS


def test_study_and_compare_read_the_working_folders_file(tmp_path, monkeypatch):
    work, scen = tmp_path / "work", tmp_path / "scen"
    _trace(work / "trace.csv", ROWS)
    path = _scenario(scen)
    study = write_study(scen, {"scenario": "s.yaml", "vary": {"grid": {"scheduler.policy": ["continuous", "static"]}},
                               "objective": {"kind": "cheapest", "rate": None}})
    monkeypatch.chdir(work)
    assert main(["study", str(study), "--out", "st", "--jobs", "1", "--set", "workload.trace.path=trace.csv"]) == 0
    assert set(pd.read_parquet(work / "st" / "runs.parquet")["requests"]) == {ROWS}
    assert main(["compare", str(path), str(path), "--out", "cmp", "--jobs", "1",
                 "--set", "workload.trace.path=trace.csv"]) == 0
    assert set(pd.read_csv(work / "cmp" / "summary.csv")["requests"]) == {ROWS}


def test_paths_a_study_file_writes_start_from_the_study_file(tmp_path, monkeypatch):
    """The base scenario in one folder, the study (and the trace it names) in another, run from
    a third: the study's ``set`` and its cases' paths start from the study file's folder."""
    scen, studies, work = tmp_path / "scen", tmp_path / "studies", tmp_path / "work"
    _scenario(scen)
    _trace(studies / "mine.csv", 5)
    _trace(studies / "other.csv", 4)
    work.mkdir()
    study = write_study(studies, {"scenario": "../scen/s.yaml", "set": {"workload.trace.path": "mine.csv"},
                                  "vary": {"cases": [{"name": "mine"},
                                                     {"name": "other", "set": {"workload.trace.path": "other.csv"}}]},
                                  "objective": {"kind": "cheapest", "rate": None}})
    monkeypatch.chdir(work)
    assert main(["study", str(study), "--out", "st", "--jobs", "1"]) == 0
    runs = pd.read_parquet(work / "st" / "runs.parquet")
    assert sorted(runs["requests"]) == [4, 5]
