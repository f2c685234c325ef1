"""The HTML reports open in a real headless browser and draw their plots without errors."""

from __future__ import annotations

import pytest
import yaml

from sim.cli.app import main
from sim.study.driver import execute_plan
from sim.study.plan import plan_study
from sim.study.report import build_figures, write_outputs, write_pngs
from sim.study.runners import SerialRunner
from sim.study.schema import load_study
from sim.study.store import RunStore
from tests.browser import console_errors, render

from .helpers import SMALL, write_study


@pytest.fixture(scope="module")
def study_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    study = {"vary": {"grid": {"scheduler.policy": ["continuous", "chunked-prefill"],
                               "replicas": [1, 2]}},
             "objective": {"kind": "curves", "rates": [4, 16, 32]}}
    path = write_study(tmp, study, SMALL)
    run = execute_plan(plan_study(load_study(path), path), RunStore(tmp / "out"),
                       SerialRunner())
    write_outputs(run, tmp / "out")
    return run, tmp / "out"


def test_study_report_renders_every_plot(chromium, study_run, tmp_path):
    run, out = study_run
    figs = build_figures(run)
    assert set(figs) == {"latency_vs_load", "goodput_per_gpu", "pareto", "heatmap"}
    found, log = render(chromium, out / "report.html", tmp_path)
    assert found["errors"] == [], found["errors"]
    assert console_errors(log) == []
    assert found["plots"] == found["drawn"] == len(figs)
    assert all(n > 0 for n in found["traces"]), found
    assert all(n > 0 for n in found["marks"]), found
    assert all(n > 0 for n in found["stars"]), found  # ★ on every chart, the heatmap and Pareto front too


def test_max_rate_report_renders(chromium, tmp_path):
    study = {"vary": {"zip": {"hardware.tp": [1, 2], "replicas": [2, 1]},
                      "grid": {"scheduler.policy": ["continuous", "static"]}},
             "objective": {"kind": "max_rate", "bracket": [2, 40], "rel_tol": 0.25}}
    path = write_study(tmp_path, study, SMALL)
    assert main(["study", str(path), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 0
    found, log = render(chromium, tmp_path / "out" / "report.html", tmp_path)
    assert found["errors"] == [] and console_errors(log) == []
    # latency against load, max-rate bars, heatmap; every configuration has 2 GPUs at one price,
    # so neither per-GPU bars nor a cost Pareto front (they would repeat the bars, or be one column)
    assert found["plots"] == found["drawn"] == 3
    assert all(n > 0 for n in found["stars"]), found
    # the heatmap crosses the policy with tp, not tp with replicas (zipped: one cell per row)
    assert "max rate (req/s) over policy × tp — ★ the answer<" in (tmp_path / "out" / "report.html").read_text()


def test_compare_report_renders(chromium, tmp_path):
    for name, policy in (("a.yaml", "continuous"), ("b.yaml", "static")):
        data = {**SMALL, "name": policy, "scheduler": {"policy": policy}}
        (tmp_path / name).write_text(yaml.safe_dump(data))
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--out",
                 str(out), "--jobs", "1"]) == 0
    found, log = render(chromium, out / "report.html", tmp_path)
    assert found["errors"] == [] and console_errors(log) == []
    assert found["plots"] == found["drawn"] == 2
    assert found["stars"][1] > 0  # the winner's bars carry ★
    assert "★ continuous" in (out / "report.html").read_text()  # and the answer box names it


def test_figures_as_png(chromium, study_run, tmp_path):
    pytest.importorskip("kaleido")
    run, _ = study_run
    assert write_pngs(build_figures(run), tmp_path / "png") == []
    pngs = sorted(p.name for p in (tmp_path / "png").glob("*.png"))
    assert pngs == ["goodput_per_gpu.png", "heatmap.png", "latency_vs_load.png", "pareto.png"]
    for p in (tmp_path / "png").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
