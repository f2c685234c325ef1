"""The study's figures (plotly): latency against load, goodput per GPU, Pareto, heatmaps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.study.objectives import lower_is_better, pareto_mask

_PALETTE = plotly.colors.qualitative.D3 + plotly.colors.qualitative.Set2


def _color(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


NICE = {
    "ttft_p50": "TTFT p50 (s)", "ttft_p90": "TTFT p90 (s)", "ttft_p99": "TTFT p99 (s)",
    "tpot_p50": "TPOT p50 (s)", "tpot_p90": "TPOT p90 (s)", "tpot_p99": "TPOT p99 (s)",
    "e2e_p50": "E2E p50 (s)", "e2e_p90": "E2E p90 (s)", "e2e_p99": "E2E p99 (s)",
    "slo_attainment": "SLO attainment", "goodput": "goodput (req/s)",
    "goodput_per_gpu": "goodput per GPU (req/s)", "request_throughput": "throughput (req/s)",
    "rate": "offered load (req/s)", "cost_per_hour": "cost (USD/h)",
    "max_rate": "max sustainable rate (req/s)", "max_rate_per_gpu": "max rate per GPU (req/s)",
    "max_rate_per_dollar": "requests per dollar", "num_gpus": "GPUs",
    "qualifying_cost_per_hour": "cost meeting the SLOs (USD/h)",
}


def nice(metric: str) -> str:
    return NICE.get(metric, metric)


def latency_vs_load(runs: pd.DataFrame, metrics: list[str], slo_target: float,
                    limits: dict[str, float]) -> go.Figure:
    """Each latency metric, and SLO attainment, against offered load: one line per config."""
    panels = [*metrics, "slo_attainment"]
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[nice(m) for m in panels],
                        horizontal_spacing=0.06)
    ok = runs[runs["status"] == "ok"]
    x = "rate" if ok["rate"].notna().any() else "request_throughput"
    for i, (label, grp) in enumerate(ok.groupby("config", sort=False)):
        grp = grp.sort_values(x)
        for col, m in enumerate(panels, start=1):
            fig.add_trace(go.Scatter(
                x=grp[x], y=grp[m], mode="lines+markers", name=label, legendgroup=label,
                showlegend=col == 1, line={"color": _color(i), "width": 2},
                marker={"size": 6}, hovertemplate=f"{label}<br>%{{x:.3g}} req/s: %{{y:.3g}}"
                "<extra></extra>"), row=1, col=col)
    for col, m in enumerate(panels, start=1):
        level = slo_target if m == "slo_attainment" else limits.get(m)
        if level is not None:
            fig.add_hline(y=level, line={"dash": "dot", "color": "#888"}, row=1, col=col)
        fig.update_xaxes(title_text=nice(x), row=1, col=col)
        if m != "slo_attainment" and _wide(ok[m]):
            fig.update_yaxes(type="log", row=1, col=col)
    fig.update_yaxes(tickformat=".0%", row=1, col=len(panels))
    fig.update_layout(height=420, margin={"t": 50, "b": 40}, legend={"orientation": "h",
                      "y": -0.25}, hovermode="closest")
    return fig


def _wide(values: pd.Series) -> bool:
    """Positive values spanning more than 20×: clearer on a log axis."""
    v = pd.to_numeric(values, errors="coerce").dropna()
    v = v[v > 0]
    return len(v) > 1 and v.max() / v.min() > 20


def bars(configs: pd.DataFrame, metric: str, best_label: str | None,
         passing: pd.Series | None = None) -> go.Figure:
    """One bar per configuration; the answer stands out, configs failing the SLO are grey."""
    df = configs[configs[metric].notna()] if metric in configs else configs.iloc[:0]
    colors = []
    for _, row in df.iterrows():
        if passing is not None and not bool(passing.get(row.name, True)):
            colors.append("#c7c7c7")
        else:
            colors.append("#d62728" if row["config"] == best_label else "#1f77b4")
    fig = go.Figure(go.Bar(x=df["config"], y=df[metric], marker_color=colors,
                           text=[f"{v:.3g}" for v in df[metric]], textposition="outside",
                           hovertemplate="%{x}: %{y:.4g}<extra></extra>"))
    fig.update_layout(height=420, margin={"t": 30, "b": 40}, yaxis_title=nice(metric),
                      xaxis={"type": "category"})
    return fig


def pareto(points: pd.DataFrame, x: str, y: str, label_cols: list[str]) -> go.Figure:
    """Every point, coloured by configuration, and the Pareto front (no point better on both
    axes) drawn as a step line."""
    df = points[points[x].notna() & points[y].notna()].copy()
    front = pareto_mask(df[x].to_numpy(float), df[y].to_numpy(float),
                        lower_is_better(x), lower_is_better(y))
    df["label"] = df[label_cols].astype(str).agg(" @ ".join, axis=1) if len(df) else []
    fig = go.Figure()
    for i, (config, grp) in enumerate(df.groupby("config", sort=False)):
        fig.add_trace(go.Scatter(x=grp[x], y=grp[y], mode="markers", name=str(config),
                                 text=grp["label"], marker={"size": 9, "color": _color(i),
                                                            "opacity": 0.75},
                                 hovertemplate="%{text}<br>%{x:.4g}, %{y:.4g}<extra></extra>"))
    f = df[front].sort_values(x)
    fig.add_trace(go.Scatter(x=f[x], y=f[y], mode="lines+markers", name="Pareto front",
                             text=f["label"], line={"color": "#222", "width": 2, "shape": "hv"},
                             marker={"size": 13, "color": "rgba(0,0,0,0)",
                                     "line": {"color": "#222", "width": 2}},
                             hovertemplate="%{text}<br>%{x:.4g}, %{y:.4g}<extra></extra>"))
    better = lambda m: "lower is better" if lower_is_better(m) else "higher is better"  # noqa: E731
    fig.update_layout(height=460, margin={"t": 30, "b": 40},
                      xaxis_title=f"{nice(x)} — {better(x)}",
                      yaxis_title=f"{nice(y)} — {better(y)}")
    if _wide(df[y]):
        fig.update_yaxes(type="log")
    if _wide(df[x]):
        fig.update_xaxes(type="log")
    return fig


def heatmap(configs: pd.DataFrame, fx: str, fy: str, metric: str,
            missing: str = "") -> go.Figure:
    """``metric`` over two swept fields, in the order the study lists their values; with more
    fields swept, each cell shows the best over the others. Empty cells read ``missing``."""
    df = configs.sort_values("config_index")[[fx, fy, metric]].copy()
    df[fx], df[fy] = df[fx].astype(str), df[fy].astype(str)
    agg = "min" if lower_is_better(metric) else "max"
    table = df.pivot_table(index=fy, columns=fx, values=metric, aggfunc=agg, sort=False,
                           dropna=False)
    table = table.reindex(index=list(dict.fromkeys(df[fy])), columns=list(dict.fromkeys(df[fx])))
    z = table.to_numpy(dtype=float)
    text = [[missing if np.isnan(v) else f"{v:.3g}" for v in row] for row in z]
    scale = "Viridis_r" if lower_is_better(metric) else "Viridis"
    fig = go.Figure(go.Heatmap(z=z, x=list(table.columns), y=list(table.index), text=text,
                               texttemplate="%{text}", colorscale=scale,
                               colorbar={"title": {"text": nice(metric)}},
                               hovertemplate=f"{fx}=%{{x}}<br>{fy}=%{{y}}<br>"
                               f"{nice(metric)}: %{{z:.4g}}<extra></extra>"))
    fig.update_layout(height=420, margin={"t": 30, "b": 40}, plot_bgcolor="#f4f4f4",
                      xaxis={"type": "category", "title": fx},
                      yaxis={"type": "category", "title": fy, "autorange": "reversed"})
    return fig
