"""What a burst does: the queue series, peak queue, time to recover (on hand-made series),
SLO inside and outside bursts, and the summary figures that no longer mislead (mean decode
batch, goodput over the arrival window)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.loops.run import simulate
from sim.results.metrics import summarize
from sim.results.queue import binned, mean_between, merged, queue_series, recovery
from sim.results.summary_view import summary_blocks
from sim.scenario.load import load_scenario
from tests.conftest import REPO


def frame(arrival, scheduled, status=None, met=None) -> pd.DataFrame:
    n = len(arrival)
    return pd.DataFrame({
        "arrival": np.asarray(arrival, float), "first_scheduled": np.asarray(scheduled, float),
        "status": status or ["finished"] * n, "slo_met": met if met is not None else [True] * n})


def test_queue_series_counts_arrived_and_not_yet_scheduled():
    # arrivals at 0, 1, 2, 2; scheduled at 0 (at once), 3, 5; the last rejected without waiting
    df = frame([0, 1, 2, 2], [0, 3, 5, np.nan], ["finished", "finished", "finished", "rejected"])
    times, q = queue_series(df)
    assert times.tolist() == [0, 1, 2, 3, 5] and q.tolist() == [0, 1, 2, 1, 0]


def test_time_to_recover_on_a_hand_made_queue():
    # baseline over [40, 60): 1 for 10 s and 3 for 10 s → 2; burst [60, 80); the queue reaches
    # 9, is 4 when the burst ends, then 3 at 85, 2 at 90 (back to the baseline), 0 at 95
    times = np.array([0, 40, 50, 60, 70, 80, 85, 90, 95], float)
    q = np.array([0, 1, 3, 6, 9, 4, 3, 2, 0])
    assert mean_between(times, q, 40, 60) == pytest.approx(2.0)
    r = recovery(times, q, 60, 80)
    assert r == {"queue_before": pytest.approx(2.0), "peak_queue": 9, "recovered_at_s": 90.0,
                 "time_to_recover_s": 10.0}


def test_recovery_is_zero_when_already_back_and_none_when_never():
    times, q = np.array([0, 10, 15, 30], float), np.array([0, 5, 0, 0])
    assert recovery(times, q, 10, 20)["time_to_recover_s"] == 0.0
    times, q = np.array([0, 10], float), np.array([0, 5])
    r = recovery(times, q, 10, 20)
    assert r["time_to_recover_s"] is None and r["recovered_at_s"] is None and r["peak_queue"] == 5


def test_binned_queue_mean_and_peak():
    times, q = np.array([0, 1, 1.5, 3], float), np.array([2, 6, 0, 4])
    mean, peak = binned(times, q, np.array([0, 2, 4.0]))
    assert mean.tolist() == pytest.approx([(2 * 1 + 6 * 0.5) / 2, (0 * 1 + 4 * 1) / 2])
    assert peak.tolist() == [6, 4]


def test_overlapping_class_bursts_are_joined():
    assert merged([(10, 20, 2), (0, 5, 3), (15, 30, 4)]) == [(0, 5, 3), (10, 30, 4)]


def test_slo_inside_and_outside_bursts_by_arrival():
    class W:
        bursts = ((10.0, 20.0, 2.0),)
        ended_by = None

    df = frame([0, 5, 10, 12, 19, 25], [0, 5, 11, 14, 22, 25], met=[True, True, False, True, False, True])
    df["status"] = "finished"
    for col, v in (("completion", 30.0), ("prompt_tokens", 1), ("output_tokens", 1), ("cached_tokens", 0),
                   ("preemptions", 0), ("ttft", 0.1), ("tpot", 0.01), ("e2e", 1.0), ("queueing_delay", 0.0)):
        df[col] = v
    s = summarize(df, pd.DataFrame(), workload=W())
    assert s["slo_attainment_in_bursts"] == pytest.approx(1 / 3)
    assert s["slo_attainment_outside_bursts"] == 1.0
    assert s["bursts"][0]["requests"] == 3 and s["bursts"][0]["peak_queue"] == 1


def test_goodput_is_over_the_arrival_window_and_decode_batch_over_decode_steps():
    n = 11  # arrivals over 10 s, every one meets the SLO, the last completes at 40 s (a 30 s drain)
    df = frame(np.arange(n), np.arange(n))
    for col, v in (("completion", np.r_[np.arange(1, n), 40.0]), ("prompt_tokens", 1), ("output_tokens", 1),
                   ("cached_tokens", 0), ("preemptions", 0), ("ttft", 0.1), ("tpot", 0.01), ("e2e", 1.0),
                   ("queueing_delay", 0.0)):
        df[col] = v
    # a long prefill-only step with 2 sequences, then two short decode steps of 100 sequences
    steps = pd.DataFrame({"duration": [1.0, 0.01, 0.01], "num_seqs": [2, 100, 100], "decode_seqs": [0, 100, 100]})
    s = summarize(df, steps)
    assert s["goodput"] == pytest.approx(1.0)  # 11 met of 11, offered 10 gaps over 10 s
    assert s["request_throughput"] == pytest.approx(n / 40)  # with the drain
    assert s["mean_decode_batch"] == 100.0
    assert s["mean_batch_size"] < 5  # time-weighted: the prefill step dominates


@pytest.fixture(scope="module")
def burst_runs():
    path = REPO / "scenarios" / "burst.yaml"
    sets = ["workload.duration_s=160", "workload.arrival.rate.bursts=['x2 for 40 s at 60 s']"]
    flat = [*sets[:1], "workload.arrival.rate.bursts=[]"]
    return simulate(load_scenario(path, sets)), simulate(load_scenario(path, flat))


def test_a_burst_raises_the_peak_queue_and_the_summary_says_so(burst_runs):
    burst, flat = burst_runs
    s = burst.summary
    assert s["peak_queue"] > 3 * max(flat.summary["peak_queue"], 1)
    b = s["bursts"][0]
    assert (b["start_s"], b["end_s"], b["factor"]) == (60.0, 100.0, 2.0)
    assert b["time_to_recover_s"] is not None and b["recovered_at_s"] >= 100.0
    assert s["slo_attainment_in_bursts"] < s["slo_attainment_outside_bursts"]
    assert s["arrivals_ended_by"]["by"] == "duration_s"
    assert "bursts" not in flat.summary
    text = str(summary_blocks(burst)[1])
    assert "burst ×2 at 60–100 s" in text and "recovered" in text and "SLO in / outside bursts" in text


def test_the_report_draws_traffic_over_time(burst_runs, tmp_path):
    from sim.results.report import write_report

    html = write_report(burst_runs[0], tmp_path / "r.html").read_text()
    assert "Traffic over time" in html and "Shaded: the bursts" in html and "time to recover" in html
    flat = write_report(burst_runs[1], tmp_path / "f.html").read_text()
    assert "Traffic over time" in flat and "Shaded" not in flat


def test_one_command_answers_peak_queue_and_time_to_recover(tmp_path, capsys):
    import json

    from sim.cli.app import main

    out = tmp_path / "run"
    code = main(["run", "--out", str(out), "--set", "workload.duration_s=100", "--set",
                 "workload.arrival.rate={base: 14, bursts: ['x2 for 30 s at 40 s']}", "--set",
                 "workload.prompt_len={dist: lognormal, mean: 600, sigma: 0.9, max: 4096}"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "burst ×2 at 40–70 s" in printed and "peak queue" in printed and "arrivals ended by" in printed
    doc = json.loads((out / "summary.json").read_text())["summary"]
    b = doc["bursts"][0]
    assert b["peak_queue"] >= 1 and b["start_s"] == 40 and b["end_s"] == 70
    assert doc["arrivals_ended_by"]["by"] == "duration_s" and doc["requests"] > 1000  # not cut at the default


def test_first_at_or_below_finds_the_first_hit_past_its_chunks():
    from sim.results.queue import first_at_or_below

    q = np.full(20_000, 7)
    q[[3, 15_000, 15_001]] = 0
    assert first_at_or_below(q, 0.5, 0) == 3
    assert first_at_or_below(q, 0.5, 4) == 15_000  # past the first chunks of 1,024 and 4,096
    assert first_at_or_below(q, 0.5, 15_002) is None
