"""A run's report.html opens in a real headless browser and draws every plot without errors."""

from __future__ import annotations

from sim.cli.app import main
from tests.browser import console_errors, render


def test_run_report_renders_its_plots(chromium, tmp_path):
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), "--set", "workload.num_requests=200", "--set", "replicas=2"]) == 0
    found, log = render(chromium, out / "report.html", tmp_path)
    assert found["plots"] == 2 and found["drawn"] == 2  # latency CDFs, state over time
    assert all(n > 0 for n in found["traces"])
    assert found["errors"] == [] and console_errors(log) == []
