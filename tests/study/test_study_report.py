"""The HTML reports open in a real headless browser and draw their plots without errors."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.study.driver import execute_plan
from sim.study.executors import SerialExecutor
from sim.study.plan import plan_study
from sim.study.report import build_figures, write_outputs, write_pngs
from sim.study.schema import load_study
from sim.study.store import RunStore

from .helpers import SMALL, write_study

# Collects uncaught errors and console.error calls, then, once the page has loaded, writes
# what it found (plots, drawn plots, traces per plot, errors) into the DOM for --dump-dom.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push('uncaught: ' + e.message));
window.addEventListener('unhandledrejection', e => window.__errors.push('rejection: ' + e.reason));
const __ce = console.error;
console.error = (...a) => { window.__errors.push(a.map(String).join(' ')); __ce(...a); };
window.addEventListener('load', () => setTimeout(() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const out = {
    plots: plots.length,
    drawn: plots.filter(p => p._fullLayout && p.querySelector('svg.main-svg')).length,
    traces: plots.map(p => (p._fullData || []).length),
    marks: plots.map(p => p.querySelectorAll('path.point, path.js-line, g.hm image, ' +
                                            'g.heatmaplayer image, path.bar, g.point').length),
    errors: window.__errors,
  };
  const pre = document.createElement('pre');
  pre.id = 'probe-result';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 300));
</script>"""


def render(chromium: str, page: Path, tmp_path: Path) -> tuple[dict, str]:
    """Load ``page`` in headless chromium; the probe's findings and the browser's log."""
    probed = tmp_path / f"probed-{page.parent.name}.html"
    probed.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'chrome-profile'}", "--enable-logging=stderr",
           "--v=0", "--virtual-time-budget=20000", "--window-size=1400,1000", "--dump-dom",
           probed.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="probe-result">(.*?)</pre>', done.stdout, re.S)
    assert m, f"the page never finished loading:\n{done.stderr[-3000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")), done.stderr


def console_errors(log: str) -> list[str]:
    """Messages the page sent to the console, as chromium logs them (errors, uncaught)."""
    return [line for line in log.splitlines() if "CONSOLE" in line and
            re.search(r"Uncaught|Error|error", line)]


@pytest.fixture(scope="module")
def study_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    study = {"vary": {"grid": {"scheduler.policy": ["continuous", "chunked-prefill"],
                               "replicas": [1, 2]}},
             "objective": {"kind": "curves", "rates": [4, 16, 32]}}
    path = write_study(tmp, study, SMALL)
    run = execute_plan(plan_study(load_study(path), path), RunStore(tmp / "out"),
                       SerialExecutor())
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


def test_max_rate_report_renders(chromium, tmp_path):
    study = {"vary": {"zip": {"hardware.tp": [1, 2], "replicas": [2, 1]},
                      "grid": {"scheduler.policy": ["continuous", "static"]}},
             "objective": {"kind": "max_rate", "bracket": [2, 40], "rel_tol": 0.25}}
    path = write_study(tmp_path, study, SMALL)
    assert main(["study", str(path), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 0
    found, log = render(chromium, tmp_path / "out" / "report.html", tmp_path)
    assert found["errors"] == [] and console_errors(log) == []
    assert found["plots"] == found["drawn"] >= 4


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


def test_figures_as_png(chromium, study_run, tmp_path):
    pytest.importorskip("kaleido")
    run, _ = study_run
    assert write_pngs(build_figures(run), tmp_path / "png") == []
    pngs = sorted(p.name for p in (tmp_path / "png").glob("*.png"))
    assert pngs == ["goodput_per_gpu.png", "heatmap.png", "latency_vs_load.png", "pareto.png"]
    for p in (tmp_path / "png").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
