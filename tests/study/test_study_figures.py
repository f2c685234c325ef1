"""The study's figures: ★ on the answer in every chart, lines only between rates tried, and a
configuration's colour the same in every report."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.results.plotstyle import config_colors
from sim.study import figures


def _runs(rates_ok: dict[str, dict[float, bool]]) -> pd.DataFrame:
    rows = []
    for i, (config, rates) in enumerate(rates_ok.items()):
        for rate, ok in rates.items():
            rows.append({"config": config, "config_index": i, "rate": rate, "status": "ok" if ok else "error",
                         "ttft_p99": 0.1 * rate, "slo_attainment": 1.0, "goodput_per_gpu": rate,
                         "policy": config})
    return pd.DataFrame(rows)


def _traces(fig, name: str):
    return [t for t in fig.data if t.legendgroup == name]


def test_lines_break_at_rates_not_run_and_probes_are_points():
    runs = _runs({"a": {1: True, 2: False, 4: True, 8: True}, "b": {1: True, 2: True, 4: True}})
    fig = figures.latency_vs_load(runs, ["ttft_p99"], 0.9, {}, None, ["a", "b"], rates=[1, 2, 4, 8], best="b")
    a = _traces(fig, "a")[0]
    assert list(a.x) == [1, 2, 4, 8] and a.mode == "lines+markers" and a.connectgaps is False
    assert np.isnan(a.y[1]) and not np.isnan(a.y[2])  # the failed run at 2 breaks the line
    b = _traces(fig, "b")[0]
    assert np.isnan(b.y[3])  # b never ran at 8: no line beyond 4
    assert b.name.startswith("★") and not a.name.startswith("★")
    probes = figures.latency_vs_load(runs, ["ttft_p99"], 0.9, {}, None, ["a", "b"])
    assert {t.mode for t in probes.data} == {"markers"}  # a search's probes: no line across untried rates


def test_the_answer_is_drawn_even_when_not_among_the_first_lines():
    runs = _runs({f"c{i}": {1: True, 2: True} for i in range(figures.MAX_LINES + 2)})
    order = [f"c{i}" for i in range(figures.MAX_LINES + 2)]
    fig = figures.latency_vs_load(runs, ["ttft_p99"], 0.9, {}, None, order, [1, 2], best=order[-1])
    assert any(t.name == "★ " + order[-1] for t in fig.data)


def test_pareto_and_heatmap_mark_the_answer():
    runs = _runs({"a": {1: True, 2: True}, "b": {1: True, 2: True}})
    runs["ttft_p99"] = [0.1, 0.3, 0.05, 0.5]
    fig = figures.pareto(runs, "goodput_per_gpu", "ttft_p99", ["config", "rate"], best="b", best_rate=2)
    star = [t for t in fig.data if t.name.startswith("★")]
    assert len(star) == 1 and list(star[0].x) == [2] and list(star[0].y) == [500]
    configs = pd.DataFrame({"config": ["p=1, q=x", "p=2, q=x", "p=1, q=y", "p=2, q=y"], "config_index": range(4),
                            "p": [1, 2, 1, 2], "q": ["x", "x", "y", "y"], "max_rate": [3.0, 5.0, 4.0, 2.0]})
    hm = figures.heatmap(configs, "p", "q", "max_rate", best="p=2, q=x")
    text = hm.data[0].text
    assert text[0][1].startswith("★") and sum(c.startswith("★") for row in text for c in row) == 1


def test_a_configuration_has_one_colour_in_every_report():
    study = config_colors(["policy=static", "policy=continuous", "policy=chunked-prefill"])
    compare = config_colors(["policy-chunked-prefill", "policy-static", "policy-continuous"])
    for policy in ("static", "continuous", "chunked-prefill"):
        assert study[f"policy={policy}"] == compare[f"policy-{policy}"]
    labels = ["gpu=H100-SXM", "gpu=A100-80GB", "gpu=H200", "tp=2", "tp=4"]
    assert config_colors(labels) == config_colors(labels[::-1])  # not by place in the list
    assert len(set(config_colors(labels).values())) == len(labels)  # and distinct within one report
