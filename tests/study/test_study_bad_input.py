"""``study`` and ``compare``: bad options and files get a message and exit code 2 before any
run or any stored result is touched, and their output folders never mix two runs."""

from __future__ import annotations

import sys

import pytest
import yaml

from sim.cli.app import main

from .helpers import SMALL, run_cli, write_study

TINY = {**SMALL, "workload": {**SMALL["workload"], "num_requests": 30}}
STUDY = {"name": "tiny", "vary": {"grid": {"scheduler.policy": ["continuous", "chunked-prefill"]}},
         "objective": {"kind": "curves", "rates": [4]}}


@pytest.fixture
def study(tmp_path):
    return write_study(tmp_path, STUDY, TINY)


def files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("jobs", ["0", "-3", "many"])
@pytest.mark.parametrize("command", ["study", "compare"])
def test_jobs_must_be_a_positive_whole_number(study, tmp_path, capsys, command, jobs):
    targets = [study] if command == "study" else [tmp_path / "base.yaml"] * 2
    with pytest.raises(SystemExit) as e:
        main([command, *map(str, targets), "--jobs", jobs])
    assert e.value.code == 2
    assert f"--jobs/-j: expected a positive whole number, got '{jobs}'" in capsys.readouterr().err


@pytest.mark.parametrize("override", ["scheduler.policy=fifo", "scheduler={policy: fifo}",
                                      "scheduler.policy.x=1"])
def test_a_set_the_study_varies_is_refused(study, capsys, override):
    code, text = run_cli(capsys, "study", study, "--dry-run", "--set", override)
    assert code == 2 and "--set: scheduler" in text and "varied by the study" in text, text
    assert "vary.grid.scheduler.policy" in text


def test_a_set_beside_the_varied_fields_applies(study, capsys):
    code, text = run_cli(capsys, "study", study, "--dry-run", "--set", "scheduler={chunk_size: 1024}")
    assert code == 0, text


def test_address_needs_the_ray_runner(study, capsys):
    code, text = run_cli(capsys, "study", study, "--address", "auto")
    assert code == 2 and "--address: applies only to --runner ray" in text


def test_a_missing_runner_touches_no_stored_runs(study, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert run_cli(capsys, "study", study, "--out", out, "--jobs", "1")[0] == 0
    before = files(out)
    monkeypatch.setitem(sys.modules, "ray", None)  # Ray not installed
    code, text = run_cli(capsys, "study", study, "--out", out, "--fresh", "--executor", "ray")
    assert code == 2 and "Ray is not installed" in text
    assert files(out) == before  # runs.jsonl and the outputs as they were


@pytest.mark.parametrize("command", ["study", "compare"])
def test_output_folder_problems_stop_before_any_run(study, tmp_path, capsys, monkeypatch, command):
    import sim.study.runners

    monkeypatch.setattr(sim.study.runners, "make_runner",
                        lambda *a, **k: pytest.fail("started runs before checking the output folder"))
    (tmp_path / "file").write_text("x")
    targets = [study] if command == "study" else [tmp_path / "base.yaml"] * 2
    code, text = run_cli(capsys, command, *targets, "--out", tmp_path / "file" / "out", "--jobs", "1")
    assert code == 2 and "is a file, so it cannot hold a folder" in text, text


def test_a_failed_write_keeps_the_previous_study_outputs(study, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)  # an earlier --png run's figures
    assert run_cli(capsys, "study", study, "--out", out, "--jobs", "1")[0] == 0
    assert not (out / "figures").exists()  # they would not match these results
    before = files(out)
    import sim.study.report

    def broken(run, path, figs, plotly="file"):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sim.study.report, "write_report", broken)
    code, text = run_cli(capsys, "study", study, "--out", out, "--jobs", "1")
    assert code == 2 and "could not write the results" in text, text
    assert files(out) == before


def test_compare_removes_an_earlier_comparisons_tables(tmp_path, capsys):
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**TINY, "name": name}))
    out = tmp_path / "cmp"
    assert run_cli(capsys, "compare", tmp_path / "a.yaml", tmp_path / "c.yaml", "--out", out, "--jobs", "1")[0] == 0
    assert run_cli(capsys, "compare", tmp_path / "a.yaml", tmp_path / "b.yaml", "--out", out, "--jobs", "1")[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["plotly.min.js", "report.html", "requests-a.parquet",
                                                      "requests-b.parquet", "summary.csv"]
    assert run_cli(capsys, "compare", tmp_path / "a.yaml", tmp_path / "b.yaml", "--out", out, "--jobs", "1",
               "--plotlyjs", "inline")[0] == 0
    assert "plotly.min.js" not in {p.name for p in out.iterdir()}  # the page carries it now


@pytest.mark.parametrize("text,words", [
    ("scenario: base.yaml\nobjective: {kind: curves, rates: [4]}\nname: a\nname: b\n",
     ["duplicate key 'name'", "line 4"]),
    ("", ["the study file is empty"]),
    ("# only a comment\n", ["the study file is empty"]),
    ("scenario: base.yaml\nobjective: {kind: max_rate, bracket: [true, 5]}\n",
     ["objective.bracket", "expected a number, got true"]),
    ("scenario: base.yaml\nobjective: {kind: curves, rates: [.inf]}\n", ["objective.rates", "finite"]),
])
def test_bad_study_files(tmp_path, capsys, text, words):
    write_study(tmp_path, {}, TINY)
    (tmp_path / "study.yaml").write_text(text)
    code, out = run_cli(capsys, "study", tmp_path / "study.yaml", "--dry-run")
    assert code == 2 and "study.yaml" in out and "Traceback" not in out
    for w in words:
        assert w in out, out


def test_a_study_file_that_is_not_utf8_or_a_folder(tmp_path, capsys):
    (tmp_path / "study.yaml").write_bytes(b"name: caf\xe9\n")
    code, out = run_cli(capsys, "study", tmp_path / "study.yaml")
    assert code == 2 and "not UTF-8" in out
    code, out = run_cli(capsys, "study", tmp_path)
    assert code == 2 and "is a folder; expected a study file" in out


def test_a_duplicate_key_in_the_base_scenario_names_it(tmp_path, capsys):
    path = write_study(tmp_path, STUDY, TINY)
    (tmp_path / "base.yaml").write_text("model: llama-3-8b\nmodel: mistral-7b\n")
    code, out = run_cli(capsys, "study", path, "--dry-run")
    assert code == 2 and "base.yaml" in out and "duplicate key 'model'" in out


def test_set_reaches_into_lists_as_the_run_command_does(tmp_path, capsys):
    base = {**TINY, "workload": {"classes": [{"name": "a", "num_requests": 10},
                                             {"name": "b", "num_requests": 10}]}}
    path = write_study(tmp_path, {"objective": {"kind": "cheapest"}}, base)
    code, text = run_cli(capsys, "study", path, "--dry-run", "--set", "workload.classes.1.priority=2")
    assert code == 0, text
    code, text = run_cli(capsys, "study", path, "--dry-run", "--set", "workload.classes.5.priority=2")
    assert code == 2 and "expected an index below 2" in text, text


def test_a_scenario_given_as_a_study_and_the_other_way_round(study, tmp_path, capsys):
    code, text = run_cli(capsys, "study", tmp_path / "base.yaml")
    assert code == 2 and "this is a scenario file, not a study" in text and "servesim run" in text
    code, text = run_cli(capsys, "run", study, "--out", tmp_path / "o")
    assert code == 2 and "this is a study file" in text and "servesim study" in text
