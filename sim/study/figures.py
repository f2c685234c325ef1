"""The study's figures (plotly): latency against load, bars per configuration, Pareto front,
heatmaps. Every figure takes the report's colour map, so a configuration has one colour in all
of them; the answer is marked with ★ in every one (and an outline on bars), never by a colour
of its own. Lines join only runs at neighbouring rates of a study's list; a search's probes are
points (a line between two would draw rates never tried)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.results import fmt
from sim.results.plotstyle import SLO_LINE, base_layout, compact, config_colors, log_axis, wide
from sim.study.columns import cell, heading
from sim.study.objectives import lower_is_better, pareto_mask

MAX_LINES = 6  # configurations drawn against load; the rest are in the tables


def nice(metric: str) -> str:
    return heading(metric)


def _is_latency(metric: str) -> bool:
    return heading(metric).endswith("(ms)")


def _scaled(metric: str, values) -> np.ndarray:
    v = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(float)
    return v * 1e3 if _is_latency(metric) else v


def better(metric: str) -> str:
    return "lower is better" if lower_is_better(metric) else "higher is better"


STAR = "★ "


def latency_vs_load(runs: pd.DataFrame, metrics: list[str], slo_target: float, limits: dict[str, float],
                    colors: dict[str, str] | None = None, order: list[str] | None = None,
                    rates: list[float] | None = None, best: str | None = None) -> go.Figure:
    """Each latency metric (ms), and SLO attainment, against offered load, for the first
    ``MAX_LINES`` configurations of ``order`` (best first; ``best``, the answer, named with ★
    and drawn thicker). With the study's list of ``rates``, a line per configuration joins its
    runs at neighbouring rates of the list and breaks where a run is missing or failed;
    without (a search's probes), each run is a point."""
    panels = [*metrics, "slo_attainment"]
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[nice(m) for m in panels],
                        horizontal_spacing=0.06)
    ok = runs[runs["status"] == "ok"]
    x = "rate" if ok["rate"].notna().any() else "request_throughput"
    labels = [c for c in (order or list(dict.fromkeys(ok["config"]))) if c in set(ok["config"])][:MAX_LINES]
    colors = colors or config_colors(labels)
    if best in set(ok["config"]) and best not in labels:
        labels = [best, *labels[:MAX_LINES - 1]]
    for label in labels:
        grp = ok[ok["config"] == label].sort_values(x, kind="stable")
        if rates is not None and x == "rate":  # every rate of the list, NaN (a gap) where no run is
            grp = grp.drop_duplicates("rate").set_index("rate").reindex(sorted(rates)).reset_index()
        name = STAR + label if label == best else label
        for col, m in enumerate(panels, start=1):
            y = _scaled(m, grp[m])
            fig.add_trace(go.Scatter(
                x=compact(grp[x]), y=compact(y), mode="lines+markers" if rates is not None else "markers",
                name=name, legendgroup=label, showlegend=col == 1, connectgaps=False,
                line={"color": colors.get(label), "width": 3.5 if label == best else 2},
                marker={"size": 9 if label == best else 6, "color": colors.get(label)},
                hovertemplate=f"{name}<br>%{{x:.3~f}} req/s: %{{y:.3~f}}<extra></extra>"), row=1, col=col)
    for col, m in enumerate(panels, start=1):
        level = slo_target if m == "slo_attainment" else limits.get(m)
        if level is not None:
            fig.add_hline(y=level * (1e3 if _is_latency(m) else 1), line=SLO_LINE, row=1, col=col)
        fig.update_xaxes(title_text=nice(x), row=1, col=col)
        vals = _scaled(m, ok[ok["config"].isin(labels)][m])
        if m != "slo_attainment" and wide(vals):
            fig.update_yaxes(**log_axis(vals, "ms" if _is_latency(m) else "", 5), row=1, col=col)
        elif m != "slo_attainment":
            fig.update_yaxes(rangemode="tozero", row=1, col=col)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.05], row=1, col=len(panels))
    base_layout(fig, 400)
    fig.update_layout(legend={"orientation": "h", "y": -0.22, "x": 0}, hovermode="closest")
    return fig


def _wrap(label: str) -> str:
    return label.replace(", ", "<br>")


def bars(configs: pd.DataFrame, metric: str, best_label: str | None, passing: pd.Series | None = None,
         colors: dict[str, str] | None = None) -> go.Figure:
    """One bar per configuration in its colour; the answer carries ★ and an outline, bars of
    configurations failing the SLO are pale and say so."""
    df = configs[configs[metric].notna()] if metric in configs else configs.iloc[:0]
    colors = colors or config_colors(df["config"])
    fill, line, text = [], [], []
    for _, row in df.iterrows():
        fails = passing is not None and not bool(passing.get(row.name, True))
        c = colors.get(str(row["config"]), "#888")
        fill.append(c)
        line.append(3 if row["config"] == best_label else 0)
        mark = "★ " if row["config"] == best_label else ""
        text.append(mark + cell(metric, row[metric]) + (" (fails SLO)" if fails else ""))
    opacity = [0.35 if passing is not None and not bool(passing.get(i, True)) else 1.0 for i in df.index]
    fig = go.Figure(go.Bar(x=[_wrap(str(c)) for c in df["config"]], y=_scaled(metric, df[metric]),
                           marker={"color": fill, "opacity": opacity, "line": {"width": line, "color": "#111"}},
                           text=text, textposition="outside", cliponaxis=False,
                           hovertemplate="%{x}: %{text}<extra></extra>"))
    base_layout(fig, 420)
    fig.update_layout(yaxis_title=f"{nice(metric)} — {better(metric)}", xaxis={"type": "category"},
                      showlegend=False, margin={"t": 30, "b": 60})
    return fig


def pareto(points: pd.DataFrame, x: str, y: str, label_cols: list[str],
           colors: dict[str, str] | None = None, best: str | None = None, best_rate=None) -> go.Figure:
    """Every point, coloured by configuration, the Pareto front (no point better on both
    axes) drawn as a step line, and the answer (``best``; its run at ``best_rate`` where points
    are runs) marked ★."""
    df = points[points[x].notna() & points[y].notna()].copy()
    front = pareto_mask(df[x].to_numpy(float), df[y].to_numpy(float), lower_is_better(x), lower_is_better(y))
    df["label"] = df[label_cols].astype(str).agg(" @ ".join, axis=1) if len(df) else []
    colors = colors or config_colors(df["config"])
    fig = go.Figure()
    for config, grp in df.groupby("config", sort=False):
        fig.add_trace(go.Scatter(x=compact(_scaled(x, grp[x])), y=compact(_scaled(y, grp[y])), mode="markers",
                                 name=str(config), text=grp["label"],
                                 marker={"size": 10, "color": colors.get(str(config)), "opacity": 0.85},
                                 hovertemplate="%{text}<br>%{x:.4~f}, %{y:.4~f}<extra></extra>"))
    f = df[front].sort_values(x)
    fig.add_trace(go.Scatter(x=_scaled(x, f[x]), y=_scaled(y, f[y]), mode="lines+markers", name="Pareto front",
                             text=f["label"], line={"color": "#222", "width": 2, "shape": "hv"},
                             marker={"size": 15, "color": "rgba(0,0,0,0)", "line": {"color": "#222", "width": 2}},
                             hovertemplate="%{text}<br>%{x:.4~f}, %{y:.4~f}<extra></extra>"))
    star = df[df["config"] == best] if best is not None else df.iloc[:0]
    if best_rate is not None and "rate" in star and (star["rate"] == best_rate).any():
        star = star[star["rate"] == best_rate]
    if len(star):
        fig.add_trace(go.Scatter(x=compact(_scaled(x, star[x])), y=compact(_scaled(y, star[y])), mode="markers+text",
                                 name=STAR + "the answer", text=["★"] * len(star), textposition="top center",
                                 textfont={"size": 18, "color": "#111"}, hoverinfo="skip",
                                 marker={"size": 20, "symbol": "star-open", "color": "#111"}))
    base_layout(fig, 460)
    fig.update_layout(xaxis_title=f"{nice(x)} — {better(x)}", yaxis_title=f"{nice(y)} — {better(y)}")
    for axis, m in (("y", y), ("x", x)):
        vals = _scaled(m, df[m])
        if wide(vals):
            settings = log_axis(vals, "ms" if _is_latency(m) else "", 6)
            (fig.update_yaxes if axis == "y" else fig.update_xaxes)(**settings)
    return fig


def distinct(values) -> int:
    """How many different values (NaN left out): a chart over one value says nothing."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").dropna()
    return int(v.round(9).nunique())


def heatmap(configs: pd.DataFrame, fx: str, fy: str, metric: str, missing: str = "",
            names: dict[str, str] | None = None, best: str | None = None) -> go.Figure:
    """``metric`` over two swept fields, in the order the study lists their values; with more
    fields swept, each cell shows the best over the others. Empty cells read ``missing``; the
    cell of the answer (the configuration ``best``) reads ★."""
    names = names or {}
    df = configs.sort_values("config_index")[[fx, fy, metric]].copy()
    df[fx], df[fy] = df[fx].astype(str), df[fy].astype(str)
    agg = "min" if lower_is_better(metric) else "max"
    table = df.pivot_table(index=fy, columns=fx, values=metric, aggfunc=agg, sort=False, dropna=False)
    table = table.reindex(index=list(dict.fromkeys(df[fy])), columns=list(dict.fromkeys(df[fx])))
    z = _scaled(metric, table.to_numpy(dtype=float).ravel()).reshape(table.shape)
    text = [[missing if np.isnan(v) else (fmt.num(v)) for v in row] for row in z]
    hit = configs[configs["config"] == best] if best is not None and "config" in configs else configs.iloc[:0]
    if len(hit):
        i = list(table.index).index(str(hit[fy].iloc[0]))
        j = list(table.columns).index(str(hit[fx].iloc[0]))
        text[i][j] = STAR + text[i][j]
    scale = "Viridis_r" if lower_is_better(metric) else "Viridis"
    fig = go.Figure(go.Heatmap(z=z, x=list(table.columns), y=list(table.index), text=text,
                               texttemplate="%{text}", colorscale=scale,
                               colorbar={"title": {"text": nice(metric)}},
                               hovertemplate=f"{names.get(fx, fx)}=%{{x}}<br>{names.get(fy, fy)}=%{{y}}<br>"
                               f"{nice(metric)}: %{{text}}<extra></extra>"))
    base_layout(fig, 420)
    fig.update_layout(plot_bgcolor="#f4f4f4", xaxis={"type": "category", "title": names.get(fx, fx)},
                      yaxis={"type": "category", "title": names.get(fy, fy), "autorange": "reversed"})
    return fig
