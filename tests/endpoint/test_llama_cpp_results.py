"""benchmarks/results/llama-cpp/: the committed run against llama.cpp's own server agrees with
itself and with the server it ran (no server here: no timing). Its calibration took the slots
and their context as the server published them and inferred the token budget it was started
with; every workload was measured twice, with no request lost."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sim.scenario.load import scenario_from_dict

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "llama-cpp"
pytestmark = pytest.mark.skipif(not (RESULTS / "summary.json").is_file(), reason="no committed llama.cpp run")


def summary() -> dict:
    return json.loads((RESULTS / "summary.json").read_text())


def flag(cmd: list[str], name: str) -> int:
    """The value of the server's own flag ``name`` (after the binary: ``taskset -c`` is not it)."""
    own = cmd[next(i for i, a in enumerate(cmd) if a.endswith("llama-server")):]
    return int(own[own.index(name) + 1])


def test_calibration_read_the_slots_and_inferred_the_budget_the_server_ran():
    s = summary()
    cmd = s["server_command"]
    slots, ctx, batch = flag(cmd, "-np"), flag(cmd, "-c"), flag(cmd, "-b")
    assert "--no-cache-prompt" in cmd and flag(cmd, "--cache-ram") == 0  # its prompt caches off
    sched = s["calibration"]["scheduler"]
    assert sched["policy"] == "slots" and sched["max_num_seqs"] == slots and sched["slot_context"] == ctx // slots
    assert sched["chunk_size"] == batch  # n_batch: inferred from the prefill steps, not published
    assert s["calibration"]["engine"] == "llama.cpp"
    assert s["server"]["sources"]["max_seqs"] == "/props total_slots"
    frag = scenario_from_dict({**yaml.safe_load((RESULTS / "profile.scenario.yaml").read_text()),
                               "cost": {"model": "roofline"}}, "<fragment>")
    assert frag.scheduler.policy == "slots" and frag.memory.num_blocks == slots * -(-(ctx // slots) // 16)


def test_every_workload_was_measured_twice_without_a_lost_request():
    for row in summary()["workloads"]:
        runs = sorted((RESULTS / row["workload"]).glob("run*"))
        assert [r.name for r in runs] == ["run1", "run2"], row["workload"]
        for r in runs:
            df = pd.read_parquet(r / "requests.parquet")
            assert len(df) == row["requests"] and (df["error"].fillna("") == "").all(), (row["workload"], r.name)


def test_the_readme_table_is_the_summary():
    text = (RESULTS / "README.md").read_text()
    for row in summary()["workloads"]:
        line = next(x for x in text.splitlines() if x.startswith(f"| {row['workload']} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[2] == f"{row['e2e_error']:.1%}" and cells[4] == f"{row['ttft_error']:.1%}", line
        assert re.fullmatch(r"met|missed", cells[7]) and re.fullmatch(r"met|missed", cells[8])
