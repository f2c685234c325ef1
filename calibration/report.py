"""The validation page: errors, summary differences, sim-vs-real scatter plots, overlaid CDFs."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from calibration.compare import METRICS
from calibration.validate import Validation
from sim.results.report import figure_html, latency_cdfs, page

LABELS = {"ttft": "TTFT (s)", "tpot": "TPOT (s)", "e2e": "E2E latency (s)"}


def scatter(v: Validation) -> go.Figure:
    """Simulated against measured, per request, with the y = x line."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=[LABELS[m] for m in METRICS])
    j = v.joined
    for col, m in enumerate(METRICS, start=1):
        x, y = j[f"{m}_real"].to_numpy(float), j[f"{m}_sim"].to_numpy(float)
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok], y[ok]
        text = [f"request {r}" for r in j["request_id"].to_numpy()[ok]]
        fig.add_trace(go.Scatter(x=x, y=y, mode="markers", text=text, showlegend=False,
                                 marker={"size": 5, "opacity": 0.6, "color": "#1f77b4"}),
                      row=1, col=col)
        if len(x):
            lo, hi = float(min(x.min(), y.min())), float(max(x.max(), y.max()))
            fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", showlegend=False,
                                     line={"color": "#999", "dash": "dash"}), row=1, col=col)
        fig.update_xaxes(title_text="real (engine)", row=1, col=col)
    fig.update_yaxes(title_text="simulated", row=1, col=1)
    fig.update_layout(height=380, margin={"t": 40, "b": 40})
    return fig


def step_scatter(v: Validation) -> go.Figure | None:
    steps = v.real.steps
    if "predicted" not in steps:
        return None
    fig = go.Figure(go.Scatter(x=steps["duration"], y=steps["predicted"], mode="markers",
                               marker={"size": 4, "opacity": 0.5,
                                       "color": steps["num_seqs"], "colorscale": "Viridis",
                                       "colorbar": {"title": "seqs"}},
                               text=[f"{n} seqs, {t} tokens" for n, t in
                                     zip(steps["num_seqs"], steps["num_tokens"], strict=True)]))
    hi = float(max(steps["duration"].max(), steps["predicted"].max()))
    fig.add_trace(go.Scatter(x=[0, hi], y=[0, hi], mode="lines", showlegend=False,
                             line={"color": "#999", "dash": "dash"}))
    fig.update_layout(height=420, width=520, xaxis_title="engine step (s)",
                      yaxis_title="profile's prediction (s)", margin={"t": 20}, showlegend=False)
    return fig


def _table(rows: list[list[str]], head: list[str]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table class='summary'><tr>{th}</tr>{body}</table>"


def _pct(x) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{x:.1%}"


def _num(x) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{x:.4g}"


def write_report(v: Validation, path: str | Path) -> Path:
    s = v.real.scenario
    p = v.profile
    parts = [f"<p>{html.escape(s.model_spec.name)}, policy <b>{html.escape(s.scheduler.policy)}"
             f"</b>, {len(v.joined)} requests finished in both runs. Profile: "
             f"{html.escape(p.model)} on {html.escape(p.device.name)} ({p.dtype}, {p.created}, "
             f"{html.escape(p.source)}).</p>" if p else ""]
    parts += [f"<p class='warn'>⚠ {html.escape(w)}</p>" for w in v.warnings]
    rows = [[m.upper(), _pct(e.get("median")), _pct(e.get("p90")), _pct(e.get("max")),
             _pct(e.get("bias")), _pct(v.adjusted.get(m, {}).get("median")),
             _pct(v.errors_repeat.get(m, {}).get("median")), _pct(v.spread.get(m, {}).get("median"))]
            for m, e in v.errors.items()]
    ratio = v.machine.get("speed_ratio")
    drift = "" if ratio is None else (
        f"<p>This machine ran a fixed probe {abs(ratio - 1):.0%} {'slower' if ratio > 1 else 'faster'} "
        "during this run than during calibration; the last column is the median error once the "
        "simulation is scaled by that ratio (the machine's drift, not the model).</p>")
    parts.append("<h2>Per-request error |sim − real| / real</h2>"
                 + _table(rows, ["metric", "median", "p90", "max", "median signed (bias)",
                                 "median, drift-adjusted", "median vs 2nd run",
                                 "run-to-run spread (median)"]) + drift)
    if v.spread:
        parts.append("<p>The last column compares two measured runs of the same requests, request by "
                     "request: an error no larger than it is within the measurement's own noise.</p>")
    if v.breakdown:
        rows = [[k, f"{d['real'] * 1e3:.1f}", f"{d['sim'] * 1e3:.1f}", f"{d['diff'] * 1e3:+.1f}",
                 _pct(d["share_of_e2e"])] for k, d in v.breakdown.items()]
        parts.append("<h2>Where the time goes (mean per request)</h2>"
                     + _table(rows, ["stage", "real (ms)", "sim (ms)", "sim − real (ms)", "of real E2E"]))
    if v.diagnosis:
        parts.append("<h2>Which part of the prediction is off</h2><ul>"
                     + "".join(f"<li>{html.escape(d)}</li>" for d in v.diagnosis) + "</ul>")
    rows = [[k, _num(d["real"]), _num(d["sim"]), _num(d["diff"]), _pct(d["rel_diff"])]
            for k, d in v.summary.items()]
    parts.append("<h2>Summary metrics</h2>" + _table(rows, ["metric", "real", "sim", "sim − real",
                                                            "relative"]))
    parts.append("<h2>Sim vs real, per request</h2>" + figure_html(scatter(v), True))
    cdfs = latency_cdfs({"real (engine)": v.real.requests, "simulated": v.sim.requests})
    parts.append("<h2>Latency CDFs</h2>" + figure_html(cdfs, False))
    fig = step_scatter(v)
    if fig is not None:
        parts.append("<h2>The profile on the engine's own steps</h2><pre>"
                     + html.escape(json.dumps(v.steps, indent=1)) + "</pre>"
                     + figure_html(fig, False))
    path = Path(path)
    path.write_text(page(f"servesim validate — {s.name}", parts))
    return path
