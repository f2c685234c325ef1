"""Open an HTML report in headless chromium and report what it drew and any errors."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

# Collects uncaught errors and console.error calls, then, once the page has loaded, writes
# what it found (plots, drawn plots, and per plot: traces, marks drawn, ★ shown, legend entries,
# shapes drawn; errors)
# into the DOM for --dump-dom.
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
    stars: plots.map(p => (p.textContent.match(/\u2605/g) || []).length),
    legends: plots.map(p => [...p.querySelectorAll('.legendtext')].map(t => t.textContent)),
    shapes: plots.map(p => p.querySelectorAll('.shapelayer path').length),
    errors: window.__errors,
  };
  const pre = document.createElement('pre');
  pre.id = 'probe-result';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 300));
</script>"""


def render(chromium: str, page: Path, tmp_path: Path) -> tuple[dict, str]:
    """Load ``page`` in headless chromium; the probe's findings and the browser's log. The
    probed copy sits beside the page, so files it loads by relative path (plotly.min.js) load."""
    probed = page.parent / f".probed-{page.stem}.html"
    probed.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'chrome-profile'}", "--enable-logging=stderr",
           "--v=0", "--virtual-time-budget=20000", "--window-size=1400,1000", "--dump-dom",
           probed.as_uri()]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        probed.unlink()
    m = re.search(r'<pre id="probe-result">(.*?)</pre>', done.stdout, re.S)
    assert m, f"the page never finished loading:\n{done.stderr[-3000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")), done.stderr


def console_errors(log: str) -> list[str]:
    """Messages the page sent to the console, as chromium logs them (errors, uncaught)."""
    return [line for line in log.splitlines() if "CONSOLE" in line and
            re.search(r"Uncaught|Error|error", line)]
