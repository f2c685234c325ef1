"""What a planner reads: the summary (terminal and HTML alike) and the report's charts."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from sim.cli.app import main
from sim.loops.run import simulate
from sim.results import fmt
from sim.results import timeline as tl
from sim.results.plotstyle import color_map, log_ticks
from sim.results.report import timeline
from sim.results.summary_view import summary_blocks
from sim.scenario.load import load_scenario, scenario_from_dict
from tests.conftest import REPO

SMALL = {"name": "small", "model": "llama-3-8b", "workload": {
    "num_requests": 300, "arrival": {"process": "poisson", "rate": 20},
    "prompt_len": {"dist": "uniform", "min": 64, "max": 2048}, "output_len": {"dist": "uniform", "min": 8, "max": 256}},
    "slo": {"ttft_s": 0.2, "tpot_s": 0.02}}


def small(**changes) -> dict:
    return json.loads(json.dumps({**SMALL, **changes}))


@pytest.mark.parametrize("value,text", [(45210.0, "45,210"), (4.521e4, "45,210"), (0.000123, "0.000123"),
                                        (12.345, "12.3"), (0.5, "0.500"), (1234567.0, "1,234,567"),
                                        (float("nan"), "–"), (None, "–"), (3, "3")])
def test_numbers_never_in_scientific_notation(value, text):
    assert fmt.num(value) == text


def test_shares_never_round_up_to_all():
    assert fmt.pct(0.9996) == "99.9%" and fmt.pct(1.0) == "100%" and fmt.pct(0.0004) == "0.0%"
    assert fmt.ms(0.0123) == "12.3" and fmt.duration(0.0123) == "12.3 ms" and fmt.duration(2.5) == "2.50 s"


def plain_summary(capsys, *args) -> str:
    assert main(["run", *map(str, args)]) == 0
    return capsys.readouterr().out


def test_the_summary_says_what_was_simulated_and_reads_in_ms(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(small(replicas=2)))
    out = plain_summary(capsys, path, "--out", tmp_path / "r")
    s = json.loads((tmp_path / "r" / "summary.json").read_text())["summary"]
    assert "2 × H100-SXM: 2 GPUs, 2 replicas" in out and "Poisson arrivals, 20 req/s" in out
    assert "TTFT ≤ 200 ms, TPOT ≤ 20 ms" in out  # the SLO applied
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("  ")}
    assert rows["TTFT"] == [fmt.ms(s[f"ttft_{k}"]) for k in ("mean", "p50", "p90", "p99")]
    assert rows["ITL"] == [fmt.ms(s[f"itl_{k}"]) for k in ("mean", "p50", "p90", "p99")]
    # throughput below the offered rate, and why
    assert s["request_throughput"] < s["offered_rate"]
    assert f"offered {fmt.rate(s['offered_rate'])}" in out and "to drain" in out
    assert not re.search(r"\de[+-]\d", out)  # no scientific notation anywhere


def test_summary_keeps_its_keys_and_adds_the_offered_load(tmp_path, capsys):
    plain_summary(capsys, "--out", tmp_path, "--set", "workload.num_requests=100")
    s = json.loads((tmp_path / "summary.json").read_text())["summary"]
    old = {"requests", "finished", "rejected", "duration_s", "request_throughput", "output_token_throughput",
           "slo_attainment", "goodput", "goodput_per_gpu", "ttft_p99", "tpot_p99", "itl_p99", "e2e_p99",
           "mean_batch_size", "mean_kv_utilization", "prefix_hit_rate"}
    assert old <= set(s)
    assert s["arrival_span_s"] < s["duration_s"]
    assert s["offered_rate"] == pytest.approx((s["requests"] - 1) / s["arrival_span_s"])


def test_a_scenario_without_slo_says_so(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({k: v for k, v in small().items() if k != "slo"}))
    out = plain_summary(capsys, path, "--out", tmp_path / "r")
    assert "none set: every finished request counts as meeting it" in out


def test_classes_are_never_mixed(tmp_path, capsys):
    out = plain_summary(capsys, REPO / "scenarios" / "multi-class.yaml", "--out", tmp_path,
                        "--set", "workload.duration_s=60")
    s = json.loads((tmp_path / "summary.json").read_text())["summary"]
    assert "Latency per class (ms)" in out and "Latency (ms)" not in out
    chat = next(line for line in out.splitlines() if line.split()[:2] == ["chat", "TTFT"])
    assert chat.split()[-1] == fmt.ms(s["classes"]["chat"]["ttft_p99"])  # not the mixed p99
    assert "chat: TTFT ≤ 500 ms, TPOT ≤ 50 ms; batch: E2E ≤ 30 s" in out
    html = (tmp_path / "report.html").read_text()
    assert "Latency per class (ms)" in html and "SLO per class" in html


def test_the_report_is_small_and_loads_plotly_from_the_folder(tmp_path, capsys):
    # 20,000 requests over 4 replicas: its steps and CDFs are binned, not dumped
    plain_summary(capsys, "--out", tmp_path, "--set", "workload.num_requests=20000", "--set", "replicas=4",
                  "--set", "workload.arrival.rate=40")
    html = (tmp_path / "report.html").read_text()
    assert (tmp_path / "report.html").stat().st_size < 500_000
    assert "<script src='plotly.min.js'" in html and "Plotly.newPlot" in html
    assert (tmp_path / "plotly.min.js").stat().st_size > 1_000_000
    assert "1 GPUs" not in html and not re.search(r"\d\.\d+e[+-]\d\d<", html)


def test_idle_time_draws_no_line_and_prefills_draw_no_comb():
    # two busy stretches of 1 s with 2 s idle between; continuous batching: every 4th step a
    # prefill-only step while 10 sequences decode
    start = np.concatenate([np.arange(0, 1, 0.01), np.arange(3, 4, 0.01)])
    dur = np.full(len(start), 0.01)
    prefill_only = np.arange(len(start)) % 4 == 1
    decode = np.where(prefill_only, 0, 10)
    prefill = np.where(prefill_only, 512, 0)
    edges = tl.bin_edges(4.0, 40)
    held = tl.busy_mean(start, dur, tl.held_decodes(start, dur, decode, prefill), edges)
    centers = (edges[1:] + edges[:-1]) / 2
    idle = (centers > 1.0) & (centers < 3.0)
    assert np.isnan(held[idle]).all()  # a gap, not a line across the idle time
    busy = ~idle & ~np.isnan(held)
    assert np.allclose(held[busy], 10)  # no dips to 0 (or 1) at each prefill step
    rate = tl.per_second(start, dur, prefill, edges)
    assert rate[idle].max() == 0 and rate.sum() * (edges[1] - edges[0]) == pytest.approx(prefill.sum())


def test_waiting_requests_show_a_queue_that_clears_within_a_step():
    edges = np.array([0.0, 1.0, 2.0])
    # 10 requests each waiting 50 ms in the first second: 0.5 waiting on average
    up = np.linspace(0, 0.9, 10)
    waiting = tl.mean_count(up, up + 0.05, edges)
    assert waiting == pytest.approx([0.5, 0.0])


def test_kv_splits_active_and_reclaimable_cached_blocks():
    r = simulate(load_scenario(REPO / "scenarios" / "shared-prompts.yaml", ["workload.num_requests=300"]))
    assert (r.steps["kv_blocks_cached"] > 0).any()
    fig, _ = timeline(r)
    dotted = [t for t in fig.data if t["line"]["dash"] == "dot"]
    assert dotted and "reclaimable" in fig.layout["annotations"][2]["text"]


def test_a_pipelined_replica_draws_each_virtual_engine():
    r = simulate(load_scenario(REPO / "scenarios" / "pipeline-parallel-70b.yaml", ["workload.num_requests=100"]))
    fig, note = timeline(r)
    names = {t["name"] for t in fig.data}
    assert names == {"replica 0 · virtual engine 0", "replica 0 · virtual engine 1"}
    assert "virtual engine" in note


def test_many_replicas_get_a_selector_and_the_fleet():
    r = simulate(scenario_from_dict(small(replicas=6), "<t>"))
    fig, _ = timeline(r)
    menu = fig.layout["updatemenus"][0]
    labels = [b["label"] for b in menu["buttons"]]
    assert labels[0].startswith("all 6 engines") and labels[1] == "every engine" and "replica 5" in labels
    visible = [t["visible"] is not False for t in fig.data]
    assert sum(visible) == len([t for t in fig.data if t["name"].startswith("all 6")])  # the fleet first


def test_log_ticks_read_with_units():
    vals, text = log_ticks(8, 3000, "ms")
    assert text[0] == "10 ms" and "1 s" in text and len(vals) <= 6
    assert log_ticks(100, 1e8, "ms", 5)[1][-1].endswith("s")
    assert log_ticks(6e4, 1.2e5, "ms")[1] == ["1 min", "2 min"]  # a narrow span: its ends


def test_one_colour_per_name_in_order():
    m = color_map(["b", "a", "b", "c"])
    assert list(m) == ["b", "a", "c"] and len(set(m.values())) == 3


def test_summary_blocks_per_class_have_their_own_slo(tmp_path):
    r = simulate(load_scenario(REPO / "scenarios" / "multi-class.yaml", ["workload.duration_s=30"]))
    _, blocks = summary_blocks(r)
    per_class = next(b for b in blocks if b.title == "SLO per class")
    assert [row[:2] for row in per_class.rows] == [["chat", "TTFT ≤ 500 ms, TPOT ≤ 50 ms"], ["batch", "E2E ≤ 30 s"]]


def test_requests_table_names_the_engine_each_request_queued_at():
    r = simulate(load_scenario(REPO / "scenarios" / "pipeline-parallel-70b.yaml", ["workload.num_requests=40"]))
    assert set(r.requests["arrival_engine"]) == {0, 1}  # virtual engines take turns
    d = simulate(load_scenario(REPO / "scenarios" / "disaggregated.yaml", ["workload.num_requests=40"]))
    assert (d.requests["arrival_engine"] == 0).all() and (d.requests["replica"] == 1).all()  # prefill 0, decode 1
    assert isinstance(d.requests, pd.DataFrame)


def test_plotly_js_is_one_file_on_disk_for_many_folders(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("a", "b"):
        plain_summary(capsys, "--out", tmp_path / name, "--set", "workload.num_requests=20")
    a, b = tmp_path / "a" / "plotly.min.js", tmp_path / "b" / "plotly.min.js"
    assert a.read_bytes() == b.read_bytes() and a.stat().st_size > 1_000_000
    assert a.samefile(b)  # hard links to the user's cached copy (same file system here)


def test_a_rerun_leaves_no_temporary_link_behind(tmp_path, capsys):
    for _ in range(2):  # the second run's plotly.min.js is the same file as the first's
        plain_summary(capsys, "--out", tmp_path, "--set", "workload.num_requests=20")
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
