"""A run's report.html opens in a real headless browser, loads plotly.min.js from its folder and
draws every plot without errors: one replica, six (the selector) with two traffic classes, and thirty
(aggregated: the fleet's spread, a filled band)."""

from __future__ import annotations

import pytest

from sim.cli.app import main
from tests.browser import console_errors, render
from tests.conftest import REPO


@pytest.mark.parametrize("args", [
    ["--set", "workload.num_requests=200", "--set", "replicas=2"],
    [str(REPO / "scenarios" / "multi-class.yaml"), "--set", "workload.duration_s=20", "--set", "replicas=6"],
    [str(REPO / "scenarios" / "burst.yaml"), "--set", "workload.duration_s=40",
     "--set", "workload.arrival.rate.bursts=['x2 for 10 s at 20 s']"],
    ["--set", "workload.num_requests=300", "--set", "replicas=30"],
], ids=["two-replicas", "six-replicas-two-classes", "burst", "thirty-replicas-aggregated"])
def test_run_report_renders_its_plots(chromium, tmp_path, args):
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), *args]) == 0
    found, log = render(chromium, out / "report.html", tmp_path)
    assert found["plots"] == 4 and found["drawn"] == 4  # latency CDFs, traffic, engines and power over time
    assert all(n > 0 for n in found["traces"]) and all(n > 0 for n in found["marks"])
    assert found["errors"] == [] and console_errors(log) == []


def test_burst_run_report_shows_the_traffic_chart_with_its_burst(chromium, tmp_path):
    """scenarios/burst.yaml as shipped: the traffic chart (arrivals, TTFT, queue) draws, its
    burst shaded in each of its three panels."""
    out = tmp_path / "run"
    assert main(["run", str(REPO / "scenarios" / "burst.yaml"), "--out", str(out)]) == 0
    found, log = render(chromium, out / "report.html", tmp_path)
    assert found["errors"] == [] and console_errors(log) == []
    assert found["plots"] == found["drawn"] == 4  # with power over time
    traffic = [i for i, names in enumerate(found["legends"]) if "arrivals" in names]
    assert len(traffic) == 1, found["legends"]
    assert {"queue (mean)", "queue (peak)"} <= set(found["legends"][traffic[0]])
    assert found["shapes"][traffic[0]] >= 3  # the burst, shaded in the arrivals, TTFT and queue panels


def test_a_report_without_its_plotly_file_says_so(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), "--set", "workload.num_requests=50"]) == 0
    (out / "plotly.min.js").unlink()
    page = (out / "report.html").read_text()
    assert "id='no-plotly'" in page  # shown unless plotly.js loads
