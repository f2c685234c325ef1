"""The command line fits the field: plain rows when piped, --format table|csv|json, --version,
help on every option, --png that fails early and clearly, and output folders of one run."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys

import pytest
import yaml

from sim.cli.app import build_parser, main
from tests.study.helpers import SMALL, write_study

ENV = {**os.environ, "COLUMNS": "60"}  # a narrow terminal would have cut a rich table


def servesim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], capture_output=True, text=True, env=ENV,
                          timeout=300)


def test_catalogs_piped_are_whole_rows():
    p = servesim("list", "models")
    assert p.returncode == 0 and "…" not in p.stdout
    row = next(line for line in p.stdout.splitlines() if line.startswith("llama-3-8b "))
    assert row.split()[1:5] == ["8.03B", "8.03B", "full", "131,072"]  # every column, nothing cut
    assert row.split()[-2:] == ["bf16", "-"]


@pytest.mark.parametrize("what", ["models", "gpus"])
def test_catalogs_as_csv_and_json(capsys, what):
    assert main(["list", what, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert main(["list", what, "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == [r["name"] for r in records] and len(records) > 3
    number = "params_b" if what == "models" else "hbm_gbps"
    assert all(isinstance(r[number], (int, float)) for r in records)  # numbers, not text


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("servesim 0.")


def test_every_option_of_every_command_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {a.option_strings or a.dest}" for name, p in sub.choices.items() for a in p._actions
               if not a.help and not isinstance(a, argparse._HelpAction)]
    assert not missing


def test_a_closed_pipe_ends_quietly():
    p = subprocess.run(f"{sys.executable} -m sim.cli list models --format json | head -c 10", shell=True,
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr


@pytest.fixture
def study_file(tmp_path):
    study = {"vary": {"grid": {"scheduler.policy": ["continuous", "chunked-prefill"]}},
             "objective": {"kind": "curves", "rates": [4, 8]}}
    return write_study(tmp_path, study, SMALL)


def test_study_as_csv_and_json_on_stdout_only(study_file, tmp_path, capsys):
    assert main(["study", str(study_file), "--out", str(tmp_path / "o"), "--jobs", "1", "--format", "csv"]) == 0
    out = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out.out)))
    assert {r["scheduler.policy"] for r in rows} == {"continuous", "chunked-prefill"}
    assert "results in" in out.err  # messages go to stderr
    assert main(["study", str(study_file), "--out", str(tmp_path / "o"), "--jobs", "1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["best"]["config"] in {c["config"] for c in doc["configs"]}
    assert main(["study", str(study_file), "--dry-run", "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


def test_study_table_piped_is_plain_and_marks_the_answer(study_file, tmp_path):
    p = servesim("study", str(study_file), "--out", str(tmp_path / "o"), "--jobs", "1")
    assert p.returncode == 0, p.stderr
    assert "┃" not in p.stdout and "…" not in p.stdout
    assert sum(line.startswith("★ ") for line in p.stdout.splitlines()) == 1


def test_compare_as_json(tmp_path, capsys):
    for name, policy in (("a.yaml", "continuous"), ("b.yaml", "chunked-prefill")):
        (tmp_path / name).write_text(yaml.safe_dump({**SMALL, "name": policy, "scheduler": {"policy": policy}}))
    assert main(["compare", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--out", str(tmp_path / "c"),
                 "--jobs", "1", "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["scenario"] for r in records] == ["continuous", "chunked-prefill"]
    assert all(0 <= r["slo_attainment"] <= 1 and r["p99_ttft_ms"] > 0 for r in records)  # vllm's keys


def test_png_without_kaleido_stops_before_running(study_file, tmp_path, capsys, monkeypatch):
    import sim.study.report

    monkeypatch.setattr(sim.study.report, "png_problem", lambda: "PNG figures need kaleido: pip install kaleido")
    out = tmp_path / "o"
    assert main(["study", str(study_file), "--out", str(out), "--png"]) == 2
    assert "--png" in capsys.readouterr().err and not out.exists()
    assert main(["compare", str(study_file.parent / "base.yaml"), str(study_file.parent / "base.yaml"),
                 "--out", str(out), "--png"]) == 2
    assert not out.exists()


def test_png_missing_kaleido_is_found(monkeypatch):
    from sim.study.report import png_problem

    monkeypatch.setitem(sys.modules, "kaleido", None)  # import kaleido fails
    assert "kaleido" in png_problem()


def test_a_study_folder_holds_one_runs_files(study_file, tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["study", str(study_file), "--out", str(out), "--jobs", "1"]) == 0
    assert (out / "plotly.min.js").is_file()
    assert main(["study", str(study_file), "--out", str(out), "--jobs", "1", "--plotlyjs", "cdn"]) == 0
    assert not (out / "plotly.min.js").exists() and "cdn.plot.ly" in (out / "report.html").read_text()


def test_a_missing_trace_says_where_to_get_it(tmp_path, capsys):
    from tests.conftest import REPO

    assert main(["run", str(REPO / "scenarios" / "azure-conversation.yaml"), "--out", str(tmp_path),
                 "--set", f"workload.trace.path={tmp_path / 'absent.csv'}"]) == 2
    err = capsys.readouterr().err
    assert "trace file not found" in err and "github.com/Azure/AzurePublicDataset" in err
