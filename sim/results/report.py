"""The HTML report of a run: what was simulated, the summary tables, latency CDFs and the
engines' state over time (plotly, with plotly.js loaded once per folder: see plotlyjs)."""

from __future__ import annotations

import html
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from sim.results import plotlyjs
from sim.results.chart import Chart, chart_html
from sim.results.fleet_spread import AGGREGATE_ABOVE, busiest, panel_keys, spread, spread_traces
from sim.results.fmt import numeric
from sim.results.plotstyle import SLO_LINE, base_layout, color, color_map, compact, log_axis, wide
from sim.results.summary_view import Block, summary_blocks

CDF_POINTS = 400  # quantiles drawn per curve (more in the tail)
MAX_OVERLAID = 4  # engines drawn together; beyond, a selector shows one at a time (or the fleet)
METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E latency"))


def _cdf_levels(n: int) -> np.ndarray:
    """Cumulative shares to draw a CDF of n values at: evenly spaced, denser towards p100."""
    if n <= CDF_POINTS:
        return (np.arange(n) + 1) / n
    tail = 1 - np.geomspace(0.1, 1 / n, CDF_POINTS // 4)
    return np.unique(np.concatenate([np.linspace(1 / n, 0.9, CDF_POINTS - CDF_POINTS // 4), tail, [1.0]]))


def cdf_points(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x, share of values ≤ x) at a few hundred points, exact for small samples."""
    v = np.sort(values[np.isfinite(values)])
    if not len(v):
        return v, v
    p = _cdf_levels(len(v))
    idx = np.minimum(np.ceil(p * len(v)).astype(int) - 1, len(v) - 1)
    return v[idx], p


def itl_cdf(itl: dict, classes: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The inter-token gaps' CDF from the core's histogram (bin centres, in seconds)."""
    from sim.core.state import ITL_LOG_MIN, ITL_PER_DECADE

    names = list(itl["classes"])
    rows = [names.index(c) for c in classes] if classes else range(len(names))
    hist = np.asarray(itl["hist"])[list(rows)].sum(axis=0)
    keep = np.flatnonzero(hist)
    if not len(keep):
        return np.zeros(0), np.zeros(0)
    mid = 10.0 ** (ITL_LOG_MIN + (keep + 0.5) / ITL_PER_DECADE)
    return mid, np.cumsum(hist[keep]) / hist.sum()


def latency_cdfs(runs: dict[str, pd.DataFrame], colors: dict[str, str] | None = None,
                 limits: dict[str, dict[str, float]] | None = None,
                 itl: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
                 limit_ink: str | None = None) -> Chart:
    """CDFs of TTFT, TPOT, (ITL,) E2E in ms, one line per named run; ``limits[name][metric]``
    (seconds) draws that run's SLO limit as a dotted line, in the run's colour (a class's own
    SLO) or, given ``limit_ink``, in that ink, each limit once (a comparison's: the limit
    belongs to no one scenario); ``itl[name]`` = (gaps, shares)."""
    colors = colors or color_map(runs)
    metrics = [(m, t) for m, t in METRICS if m != "itl" or itl]
    fig = Chart(1, len(metrics), [f"{t} (ms)" for _, t in metrics], hspace=0.05)
    for col, (metric, _) in enumerate(metrics, start=1):
        xs, drawn = [], set()
        for name, df in runs.items():
            if metric == "itl":
                x, y = (itl or {}).get(name, (np.zeros(0), np.zeros(0)))
            else:
                x, y = cdf_points(df[metric].to_numpy(float))
            if not len(x):
                continue
            x = x * 1e3
            xs.append(x)
            fig.add({"x": compact(x), "y": compact(y), "mode": "lines", "name": name, "legendgroup": name,
                     "showlegend": col == 1, "line": {"color": colors.get(name, color(0)), "width": 2},
                     "hovertemplate": f"{html.escape(name)}<br>%{{y:.1%}} ≤ %{{x:.3~f}} ms<extra></extra>"},
                    row=1, col=col)
            lim = (limits or {}).get(name, {}).get(metric)
            if lim is not None and not (limit_ink and lim * 1e3 in drawn):
                xs.append(np.array([lim * 1e3]))
                drawn.add(lim * 1e3)
                fig.vline(lim * 1e3, {**SLO_LINE, "color": limit_ink or colors.get(name, "#444")}, row=1, col=col)
        allx = np.concatenate(xs) if xs else np.zeros(0)
        if wide(allx):
            fig.xaxes(**log_axis(allx, "ms", 5), tickangle=0, row=1, col=col)
        else:
            fig.xaxes(rangemode="tozero", row=1, col=col)
    fig.yaxes(range=[0, 1.02], tickformat=".0%")
    fig.yaxes(title={"text": "share of requests (≤ x)"}, row=1, col=1)
    base_layout(fig, 360)
    fig.update(legend={"orientation": "h", "y": -0.18, "x": 0}, hovermode="closest")
    return fig


def slo_limits(scenario, names: list[str]) -> dict[str, dict[str, float]]:
    """Each curve's SLO limits by metric, for the dotted lines (a class's own, else the scenario's)."""
    from sim.results.describe import class_slo

    out = {}
    for n in names:
        slo = class_slo(scenario, n)
        out[n] = {m: getattr(slo, f"{m}_s") for m in ("ttft", "tpot", "e2e") if getattr(slo, f"{m}_s") is not None}
    return out


def timeline(result) -> tuple[Chart, str]:
    """The engines' state over time (see timeline.py) and a note on reading it."""
    from sim.results import timeline as tl

    eng = tl.engines(result.scenario)
    overlaid = 1 < len(eng) <= MAX_OVERLAID  # coarser bins and plain lines keep overlaid series apart
    b = tl.bin_run(result.steps, result.requests, eng, tl.MAX_BINS // 2 if overlaid else tl.MAX_BINS)
    preempting = bool(result.summary.get("preemptions"))
    cached = any(np.nanmax(np.nan_to_num(v, nan=0)) > 0 for v in b.kv_cached.values())
    panels = ["Decode batch (sequences)", "Prefill (tokens/s)",
              "KV cache (% of blocks; dotted: + reclaimable cached prefixes)" if cached else "KV cache in use (%)",
              "Waiting requests (arrived, not yet started; mean)"
              + ("; dotted: queued incl. preempted" if preempting else "")]
    fig = Chart(4, 1, panels, vspace=0.055, shared_x=True)
    x = compact(b.centers)
    step = {"shape": "linear" if overlaid else "hv", "width": 1.5}
    series: list[tuple[str, str, dict[str, np.ndarray]]] = [
        (e.label, color(i), {"decode": b.decode[e.index], "prefill": b.prefill_tps[e.index],
                             "kv": b.kv_active[e.index], "kv_all": b.kv_active[e.index] + b.kv_cached[e.index],
                             "waiting": b.waiting[e.index], "queued": b.queued[e.index]})
        for i, e in enumerate(eng)]
    selector = len(series) > MAX_OVERLAID
    values = [v for _, _, v in series]
    if selector:  # the fleet as a whole first, each engine behind the selector
        def total(key, how):
            stack = np.vstack([v[key] for v in values])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN bins: idle everywhere
                out = np.nanmean(stack, axis=0) if how == "mean" else np.nansum(stack, axis=0)
            if how == "sum" and key == "decode":
                out[np.all(np.isnan(stack), axis=0)] = np.nan
            return out

        fleet = {k: total(k, "mean" if k.startswith("kv") else "sum") for k in values[0]}
    band = None
    if len(series) > AGGREGATE_ABOVE:  # a large fleet: its spread and its busiest engines, not each engine
        band = spread(values)
        series = [series[i] for i in busiest(values)]
    if selector:
        series.insert(0, (f"all {len(eng)} engines (sum; KV: mean)", "#222", fleet))
    groups = []
    for k, (label, c, v) in enumerate(series):
        visible = (k == 0) if selector else True
        first = len(fig.data)
        for row, key, dash in panel_keys(cached, preempting):
            fig.add({"x": x, "y": compact(v[key]), "mode": "lines", "name": label, "legendgroup": label,
                     "showlegend": row == 1, "visible": visible, "connectgaps": False,
                     "line": {**step, "color": c, "dash": dash},
                     "hovertemplate": f"{html.escape(label)}<br>%{{x:.4g}} s: %{{y:.4~g}}<extra></extra>"},
                    row=row, col=1)
        groups.append((label, list(range(first, len(fig.data)))))
        if k == 0 and band is not None:
            first = len(fig.data)
            label = spread_traces(fig, x, band, len(eng), cached, preempting, step)
            groups.append((label, list(range(first, len(fig.data)))))
    if selector:
        n = len(fig.data)
        buttons = [{"label": label, "method": "update",
                    "args": [{"visible": [i in idx for i in range(n)]}]} for label, idx in groups]
        buttons.insert(1, {"label": "every engine" if band is None else "all of these", "method": "update",
                           "args": [{"visible": [True] * n}]})
        fig.update(updatemenus=[{"buttons": buttons, "x": 0, "xanchor": "left", "y": 1.09,
                                        "yanchor": "bottom", "showactive": True}])
    fig.yaxes(rangemode="tozero")
    drawn = [v for _, _, v in series] + ([{k: hi for k, (_, _, hi) in band.items()}] if band else [])
    if all(np.nanmax(np.nan_to_num(v["waiting"], nan=0)) < 1 for v in drawn):
        fig.yaxes(range=[0, 1], row=4, col=1)
    peak = max((np.nanmax(np.nan_to_num(v["kv_all"], nan=0)) for v in drawn), default=0)
    fig.yaxes(range=[0, min(100, max(20, 1.15 * float(peak)))], row=3, col=1)  # low use stays readable
    fig.xaxes(title={"text": "simulated time (s)"}, row=4, col=1)
    base_layout(fig, 760)
    fig.update(legend={"orientation": "h", "y": -0.08, "x": 0}, hovermode="x unified")
    note = (f"Each point is a {b.width:g} s bin: the mean while the engine was busy (gaps: idle), "
            "the decode batch held through prefill-only steps.")
    if any(s.hardware.pp > 1 for s in result.scenario.replica_specs):
        note += (" A pipelined replica keeps one micro-batch in flight per stage, each scheduled by its own "
                 "virtual engine: they are drawn separately.")
    if band:
        note += (f" {len(eng):,} engines are more than {AGGREGATE_ABOVE} drawn one by one: the menu shows the fleet, "
                 "or aggregated, each bin's mean over the engines busy in it and the band from the least to the "
                 f"most loaded, or one of the {len(series) - 1} engines with the most waiting requests.")
    elif selector:
        note += " The menu shows the fleet or one engine at a time."
    return fig, note


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em 2em;max-width:1250px;color:#222}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.2em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
table.kv,table.grid{border-collapse:collapse;font-size:14px;margin:.3em 0}
table.kv td{padding:2px 14px 2px 0;vertical-align:top} table.kv td:first-child{color:#555;white-space:nowrap}
table.grid th,table.grid td{padding:3px 10px;border-bottom:1px solid #e5e5e5;text-align:right}
table.grid th{background:#f4f4f4;font-weight:600} table.grid td:first-child,table.grid th:first-child{text-align:left}
.note{color:#555;font-size:13px;max-width:1000px;margin:.2em 0 .8em} .warn{color:#a33}
.cols{display:flex;gap:3em;flex-wrap:wrap;align-items:flex-start} .cols>div{flex:0 1 auto;max-width:580px}
.headline{display:flex;gap:1.2em;flex-wrap:wrap;margin:.6em 0}
.headline div{background:#f4f6f8;border-radius:6px;padding:.5em .9em;min-width:8em}
.headline b{display:block;font-size:1.35em} .headline span{color:#555;font-size:12px}
"""


def block_html(b: Block) -> str:
    """A summary table (``summary_view.Block``) as HTML."""
    esc = html.escape
    if b.headers:
        left = [not b.rows or not all(numeric(r[i]) for r in b.rows) for i in range(len(b.headers))]
        align = ["left" if x else "right" for x in left]
        head = "".join(f"<th style='text-align:{a}'>{esc(h)}</th>" for h, a in zip(b.headers, align, strict=True))
        body = "".join("<tr>" + "".join(f"<td style='text-align:{a}'>{esc(c)}</td>" for c, a in
                                        zip(r, align, strict=True)) + "</tr>" for r in b.rows)
        table = f"<table class='grid'><tr>{head}</tr>{body}</table>"
    else:
        table = "<table class='kv'>" + "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in b.rows) \
            + "</table>"
    note = f"<p class='note'>{esc(b.note)}</p>" if b.note else ""
    return f"<div><h2>{esc(b.title)}</h2>{table}{note}</div>"


def headline_html(items: list[tuple[str, str]]) -> str:
    return "<div class='headline'>" + "".join(
        f"<div><b>{html.escape(v)}</b><span>{html.escape(k)}</span></div>" for k, v in items) + "</div>"


def run_headline(summary: dict) -> list[tuple[str, str]]:
    from sim.results import fmt

    items = [("SLO attainment", fmt.pct(summary["slo_attainment"])), ("goodput", fmt.rate(summary["goodput"])),
             ("throughput", fmt.rate(summary["request_throughput"])),
             ("offered load", fmt.rate(summary.get("offered_rate")))]
    if not fmt.missing(summary.get("cost_per_1m_tokens")):
        from sim.results.money import dollars

        items.append(("per 1M tokens", dollars(summary["cost_per_1m_tokens"])))
    if not summary.get("classes"):
        items += [("TTFT p99", fmt.duration(summary.get("ttft_p99"))),
                  ("TPOT p99", fmt.duration(summary.get("tpot_p99")))]
    for b in summary.get("bursts") or []:
        items.append((f"peak queue, burst at {fmt.num(b['start_s'])} s", fmt.count(b["peak_queue"])))
        items.append(("time to recover", "not recovered" if b["time_to_recover_s"] is None
                      else fmt.duration(b["time_to_recover_s"])))
    return items


def page(title: str, parts: list[str], plotly: str | None = None, subtitle: str = "") -> str:
    """A whole page. ``plotly``: how it loads plotly.js (plotlyjs.MODES); None: a figure
    written with ``figure_html(fig, True)`` carries it."""
    head = plotlyjs.script_tag(plotly) if plotly else ""
    note = plotlyjs.no_js_note() if plotly else ""
    sub = f"<p class='note'>{html.escape(subtitle)}</p>" if subtitle else ""
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style>{head}</head><body><h1>{html.escape(title)}</h1>{sub}{note}"
            + "\n".join(parts) + "</body></html>")


def figure_html(fig, first: bool = False) -> str:
    """A figure's div (a ``Chart`` or a plotly figure); ``first`` inlines plotly.js with it (for
    pages written with plotly=None)."""
    config = {"displaylogo": False}
    if isinstance(fig, Chart):
        return (plotlyjs.script_tag("inline") if first else "") + chart_html(fig, config)
    return fig.to_html(full_html=False, include_plotlyjs=bool(first), config=config)


def report_parts(result) -> list[str]:
    """The body of a run's report."""
    s, summary = result.scenario, result.summary
    setup, blocks = summary_blocks(result)
    parts = [headline_html(run_headline(summary)), block_html(Block("What was simulated", [list(r) for r in setup]))]
    parts += [f"<p class='warn'>⚠ {html.escape(w)}</p>" for w in result.warnings]
    parts.append("<div class='cols'>" + "".join(block_html(b) for b in blocks) + "</div>")
    reqs = result.requests
    by_class = "classes" in summary
    curves = {str(c): df for c, df in reqs.groupby("class", sort=False)} if by_class else {s.name: reqs}
    colors = color_map(curves)
    itl = None
    if result.itl is not None:
        itl = {n: itl_cdf(result.itl, [n] if "classes" in summary else None) for n in curves}
    limits = slo_limits(s, list(curves)) if "classes" in summary else {s.name: slo_limits(s, ["-"])["-"]}
    parts.append("<h2>Latency distributions</h2><p class='note'>Share of requests (ITL: of token gaps) at or "
                 "below each latency; dotted lines: the SLO limits.</p>"
                 + figure_html(latency_cdfs(curves, colors, limits, itl)))
    if len(reqs):
        from sim.results.traffic_chart import traffic_over_time

        bursts = [(b["start_s"], b["end_s"], b["factor"]) for b in summary.get("bursts") or []]
        fig, note = traffic_over_time(reqs, bursts, None if by_class else s.slo.ttft_s)
        parts.append(f"<h2>Traffic over time</h2><p class='note'>{html.escape(note)}</p>" + figure_html(fig))
    if getattr(result, "fleet", None) is not None and "autoscale" in summary:
        from sim.results.fleet_chart import fleet_over_time

        fig, note = fleet_over_time(result)
        parts.append(f"<h2>Replicas over time</h2><p class='note'>{html.escape(note)}</p>" + figure_html(fig))
    if len(result.steps):
        fig, note = timeline(result)
        parts.append(f"<h2>Over time</h2><p class='note'>{html.escape(note)}</p>" + figure_html(fig))
        from sim.results.power_chart import power_over_time

        power = power_over_time(result)
        if power is not None:
            parts.append(f"<h2>Power over time</h2><p class='note'>{html.escape(power[1])}</p>"
                         + figure_html(power[0]))
    return parts


def write_report(result, path: str | Path, plotly: str = "file") -> Path:
    """Write ``result``'s report to ``path`` (``plotly``: how it loads plotly.js; with ``file``
    the caller puts plotly.min.js beside it: ``plotlyjs.stage``)."""
    s = result.scenario
    sub = f"servesim {result.mode} of {s.source or 'the default scenario'}, {result.loop} loop"
    path = Path(path)
    path.write_text(page(f"{s.name}", report_parts(result), plotly, sub), encoding="utf-8")
    return path
