"""Every class of bad input gets a message naming the file, the field and what was expected,
exit code 2 and no traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sim.cli.app import main

GOOD = """
model: llama-3-8b
workload:
  num_requests: 10
  arrival: {process: poisson, rate: 5}
"""


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


CASES = [
    # (yaml text, expected fragments in the message)
    ("model: llama-3-8b\nbogus: 1\n", ["bogus", "unknown field"]),
    ("model: llama-3-8b\nworkload: {arrival: {process: poisson, rate: -2}}\n",
     ["workload.arrival.rate", "greater than 0"]),
    ("model: llama-3-8b\nworkload: {arrival: {process: poisson, rate: fast}}\n",
     ["workload.arrival.rate", "valid number"]),
    ("model: llama-3-8b\nscheduler: {policy: chunked-prefill, chunk_size: 0}\n",
     ["scheduler.chunk_size", "greater than 0"]),
    ("model: llama-3-70b\nhardware: {gpu: H100-SXM, tp: 1}\n",
     ["hardware", "does not fit", "llama-3-70b"]),
    ("model: llama-9\n", ["model", "unknown model"]),
    ("hardware: {gpu: K80}\n", ["hardware.gpu", "unknown GPU"]),
    ("workload: {prompt_len: {dist: uniform, min: 10, max: 5}}\n",
     ["workload.prompt_len", "min (10) must be ≤ max (5)"]),
    ("workload: {arrival: {process: gammy, rate: 1}}\n", ["workload.arrival", "poisson"]),
    ("scheduler: {policy: chunked-prefill, chunk_size: 64, max_num_seqs: 256}\n",
     ["scheduler", "chunk_size (64) must be ≥ max_num_seqs (256)"]),
    ("model: [unclosed\n", ["not valid YAML", "line"]),
    ("- just\n- a list\n", ["expected a mapping"]),
    ("hardware: {memory_utilization: 1.5}\n", ["hardware.memory_utilization", "less than or equal"]),
    ("workload: {trace: {path: nowhere.csv}}\n", ["nowhere.csv", "workload.trace.path", "not found"]),
]


@pytest.mark.parametrize("text,fragments", CASES)
def test_bad_scenario_names_file_and_field(tmp_path, capsys, text, fragments):
    path = write(tmp_path, text)
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert "Traceback" not in out
    assert "s.yaml" in out or "nowhere.csv" in out
    for f in fragments:
        assert f in out, f"{f!r} not in {out!r}"
    assert not (tmp_path / "out").exists(), "no results for a scenario that failed validation"


@pytest.mark.parametrize("override,fragments", [
    ("workload.arrival.rate=0", ["workload.arrival.rate", "greater than 0"]),
    ("scheduler.nope=3", ["scheduler.nope", "unknown field"]),
    ("no-equals-sign", ["--set", "expected field.path=value"]),
    ("seed.x=1", ["seed", "valid integer"]),
    ("workload.num_requests.x=1", ["workload.num_requests", "cannot set"]),
])
def test_bad_override(tmp_path, capsys, override, fragments):
    path = write(tmp_path, GOOD)
    code, out = run_cli(capsys, "run", str(path), "--set", override, "--out", str(tmp_path / "o"))
    assert code == 2
    for f in fragments:
        assert f in out


BAD_TRACES = [
    ("TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46.68,10,5\n",
     ["missing column", "ContextTokens"]),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,5\n", ["TIMESTAMP (line 2)", "datetime"]),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,5\n"
     "2023-11-16 18:15:47.1,-3,5\n", ["ContextTokens (line 3)", "positive whole number"]),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n", ["no requests"]),
]


@pytest.mark.parametrize("csv,fragments", BAD_TRACES)
def test_bad_trace_names_file_line_and_column(tmp_path, capsys, csv, fragments):
    (tmp_path / "t.csv").write_text(csv)
    path = write(tmp_path, "workload: {trace: {path: t.csv}}\n")
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2
    assert "t.csv" in out
    for f in fragments:
        assert f in out, f"{f!r} not in {out!r}"


def test_missing_scenario_file(tmp_path, capsys):
    code, out = run_cli(capsys, "run", str(tmp_path / "absent.yaml"))
    assert code == 2
    assert "absent.yaml" in out and "scenario file not found" in out


def test_bad_cli_argument_exits_2_without_traceback(tmp_path):
    p = subprocess.run([sys.executable, "-m", "sim.cli", "run", "--format", "xls"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "invalid choice" in p.stderr and "Traceback" not in p.stderr
