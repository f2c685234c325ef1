"""The HTML report: summary table, latency CDFs, and the replica's state over time (plotly)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

MAX_POINTS = 4000  # thin long series so the page stays light


def _thin(x: np.ndarray, n: int = MAX_POINTS) -> np.ndarray:
    if len(x) <= n:
        return np.arange(len(x))
    return np.linspace(0, len(x) - 1, n).astype(int)


def latency_cdfs(runs: dict[str, pd.DataFrame]) -> go.Figure:
    """CDFs of TTFT, TPOT and E2E, one line per named run."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=("TTFT (s)", "TPOT (s)", "E2E latency (s)"))
    for i, (name, df) in enumerate(runs.items()):
        for col, metric in enumerate(("ttft", "tpot", "e2e"), start=1):
            v = np.sort(df[metric].dropna().to_numpy())
            if not len(v):
                continue
            idx = _thin(v)
            fig.add_trace(go.Scatter(x=v[idx], y=(idx + 1) / len(v), mode="lines", name=name,
                                     legendgroup=name, showlegend=col == 1,
                                     line={"color": _color(i)}), row=1, col=col)
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    fig.update_layout(height=380, margin={"t": 40, "b": 40})
    return fig


def timeline(steps: pd.DataFrame) -> go.Figure:
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("batch size (sequences)", "KV cache used (%)",
                                        "queue length"))
    replica = steps["replica"].to_numpy()
    for r, rid in enumerate(np.unique(replica)):
        rows = np.flatnonzero(replica == rid)  # thin first: a big run's steps are never copied
        s = steps.iloc[rows[_thin(rows)]]
        t = s["start"]
        kw = {"legendgroup": f"replica {rid}", "line": {"color": _color(r), "width": 1}}
        fig.add_trace(go.Scatter(x=t, y=s["num_seqs"], name=f"replica {rid}", **kw), row=1, col=1)
        fig.add_trace(go.Scatter(x=t, y=100 * s["kv_utilization"],
                                 showlegend=False, **kw), row=2, col=1)
        fig.add_trace(go.Scatter(x=t, y=s["queue_len"], showlegend=False, **kw), row=3, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=3, col=1)
    fig.update_layout(height=640, margin={"t": 40, "b": 40})
    return fig


_PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf"]


def _color(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


def summary_table_html(summary: dict) -> str:
    rows = []
    for k, v in summary.items():
        if isinstance(v, dict):
            continue
        val = f"{v:.4g}" if isinstance(v, float) else str(v)
        rows.append(f"<tr><td>{html.escape(k)}</td><td>{html.escape(val)}</td></tr>")
    return "<table class='summary'>" + "".join(rows) + "</table>"


def page(title: str, parts: list[str]) -> str:
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
             "table.summary{border-collapse:collapse;font-size:14px}"
             "table.summary td{border-bottom:1px solid #ddd;padding:2px 12px}"
             ".warn{color:#a33}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
            + "\n".join(parts) + "</body></html>")


def figure_html(fig: go.Figure, first: bool) -> str:
    """Embed plotly.js once per page (inline, so reports open offline)."""
    return fig.to_html(full_html=False, include_plotlyjs=bool(first))


def write_report(result, path: str | Path) -> Path:
    s = result.scenario
    layout = ", ".join(f"{r.role} #{r.index}: {r.hardware.gpu} TP{r.hardware.tp} PP{r.hardware.pp}"
                       for r in s.replica_specs[:8]) + (" …" if len(s.replica_specs) > 8 else "")
    parts = [f"<p>{html.escape(s.model_spec.name)} on {s.num_gpus} GPUs ({html.escape(layout)}), "
             f"policy <b>{html.escape(s.scheduler.policy)}</b>, router {s.router.policy}, "
             f"{result.mode} mode.</p>"]
    parts += [f"<p class='warn'>⚠ {html.escape(w)}</p>" for w in result.warnings]
    parts.append("<h2>Summary</h2>" + summary_table_html(result.summary))
    for name, cls in result.summary.get("classes", {}).items():
        parts.append(f"<h3>Class {html.escape(name)}</h3>" + summary_table_html(cls))
    by_class = dict(iter(result.requests.groupby("class"))) if "classes" in result.summary else {}
    curves = by_class or {s.name: result.requests}
    parts.append("<h2>Latency</h2>" + figure_html(latency_cdfs(curves), True))
    if len(result.steps):
        parts.append("<h2>Over time</h2>"
                     + figure_html(timeline(result.steps), False))
    path = Path(path)
    path.write_text(page(f"servesim — {s.name}", parts))
    return path
