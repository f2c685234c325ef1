"""A large fleet's report stays small: beyond ``AGGREGATE_ABOVE`` engines the timeline draws the
fleet's spread and its busiest engines instead of a trace per engine, and replica groups are named by
index ranges (issue 31)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from sim.cli.app import main
from sim.loops.run import simulate
from sim.results.describe import index_ranges, scheduler_rows
from sim.results.fleet_spread import AGGREGATE_ABOVE, BUSIEST_SHOWN, busiest, spread
from sim.results.report import timeline
from sim.scenario.load import scenario_from_dict

MB = 1 << 20


def fleet(replicas: int, requests: int = 300) -> dict:
    return {"name": "fleet", "model": "llama-3-8b", "replicas": replicas, "workload": {
        "num_requests": requests, "arrival": {"process": "poisson", "rate": 400},
        "prompt_len": {"dist": "uniform", "min": 64, "max": 2048},
        "output_len": {"dist": "uniform", "min": 8, "max": 256}}, "slo": {"ttft_s": 0.2, "tpot_s": 0.02}}


def engine_names(fig) -> set[str]:
    return {t["name"] for t in fig.data if t["name"].startswith("replica ")}


def test_a_fleet_at_the_threshold_keeps_a_trace_per_replica():
    fig, note = timeline(simulate(scenario_from_dict(fleet(AGGREGATE_ABOVE), "<t>")))
    assert engine_names(fig) == {f"replica {i}" for i in range(AGGREGATE_ABOVE)}
    assert not any("aggregated" in t["name"] for t in fig.data) and "aggregated" not in note
    assert fig.layout["updatemenus"][0]["buttons"][1]["label"] == "every engine"


def test_a_larger_fleet_draws_its_spread_and_its_busiest_replicas():
    r = simulate(scenario_from_dict(fleet(AGGREGATE_ABOVE + 1), "<t>"))
    fig, note = timeline(r)
    assert len(engine_names(fig)) == BUSIEST_SHOWN
    spread_traces = [t for t in fig.data if t["name"].startswith("aggregated: mean of 25 engines")]
    bands = [t for t in spread_traces if t.get("fill") == "tonexty"]
    assert len(bands) == 4 and len([t for t in spread_traces if t.get("showlegend")]) == 1  # a band per panel
    labels = [b["label"] for b in fig.layout["updatemenus"][0]["buttons"]]
    assert labels[0].startswith("all 25 engines") and labels[2].startswith("aggregated: mean of 25 engines")
    assert "aggregated" in note and "25 engines are more than 24" in note


def test_spread_is_the_mean_and_range_over_the_busy_engines():
    nan = np.nan
    a = {"waiting": np.array([0.0, 1.0, 0.0]), "kv": np.array([10.0, nan, 30.0])}
    b = {"waiting": np.array([2.0, 3.0, 0.0]), "kv": np.array([20.0, nan, nan])}
    c = {"waiting": np.array([0.0, 0.0, 0.0]), "kv": np.array([60.0, nan, 50.0])}
    mean, lo, hi = spread([a, b, c])["kv"]
    assert mean[[0, 2]] == pytest.approx([30.0, 40.0]) and np.isnan(mean[1])  # idle everywhere: a gap
    assert lo[[0, 2]] == pytest.approx([10.0, 30.0]) and hi[[0, 2]] == pytest.approx([60.0, 50.0])
    assert busiest([a, b, c], 2) == [1, 0]  # most waiting first
    assert busiest([a, a], 1) == [0]  # a tie: the first


def test_a_run_with_many_replicas_writes_a_report_under_2_mb(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(fleet(300, 600)))
    assert main(["run", str(path), "--out", str(tmp_path / "r")]) == 0
    page = (tmp_path / "r" / "report.html").read_text()
    assert len(page.encode()) < 2 * MB
    over_time = page.split("<h2>Over time</h2>")[1]
    assert '"name":"aggregated: mean of 300 engines' in over_time
    assert len(set(re.findall(r'"name":"replica \d+"', over_time))) == BUSIEST_SHOWN  # not one per replica


def test_replica_groups_are_named_by_index_ranges():
    d = fleet(1)
    del d["replicas"]
    d["replica_groups"] = [{"count": 40}, {"count": 2, "scheduler": {"max_num_seqs": 7}}]
    rows = dict(scheduler_rows(scenario_from_dict(d, "<t>")))
    assert list(rows) == ["scheduler (replicas 0–39)", "scheduler (replicas 40, 41)"]
    assert index_ranges([0, 1, 2, 5, 7, 8, 9, 10]) == "0–2, 5, 7–10"
