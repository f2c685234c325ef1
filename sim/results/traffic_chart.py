"""The report's traffic over time: arrivals per second, TTFT p50/p99 of the requests arriving
in each bin, and the queue (mean and peak per bin), with any bursts shaded."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.results.chart import Chart
from sim.results.plotstyle import SLO_LINE, base_layout, color, compact
from sim.results.queue import binned, queue_series

MAX_BINS = 200
BURST_FILL = {"fillcolor": "#f2c14e", "opacity": 0.18, "line": {"width": 0}}


def traffic_over_time(requests: pd.DataFrame, bursts=(), ttft_limit: float | None = None
                      ) -> tuple[Chart, str]:
    """The chart and a note on reading it."""
    from sim.results.timeline import bin_edges

    arrival = requests["arrival"].to_numpy(float)
    times, q = queue_series(requests)
    end = float(max(times[-1] if len(times) else 0.0, arrival.max(initial=0.0)))
    edges = bin_edges(max(end, 1e-3), MAX_BINS)
    width = float(edges[1] - edges[0])
    mid = compact((edges[:-1] + edges[1:]) / 2)
    counts = np.histogram(arrival, edges)[0]
    fig = Chart(3, 1, ["Arrivals (requests/s)", "TTFT of the requests arriving (ms): p50 solid, p99 dashed",
                       "Queue (requests waiting: mean per bin, dotted: peak)"], vspace=0.07, shared_x=True)
    step = {"shape": "hv", "width": 1.5}
    fig.add({"x": mid, "y": compact(counts / width), "mode": "lines", "name": "arrivals",
             "line": {**step, "color": color(0)},
             "hovertemplate": "%{x:.4g} s: %{y:.4~g} req/s<extra></extra>"}, row=1)
    which = np.clip(np.searchsorted(edges, arrival, side="right") - 1, 0, len(edges) - 2)
    ttft = pd.Series(requests["ttft"].to_numpy(float)).groupby(which)
    for p, dash in ((0.5, "solid"), (0.99, "dash")):
        y = np.full(len(edges) - 1, np.nan)
        got = ttft.quantile(p).dropna()
        y[got.index.to_numpy(int)] = got.to_numpy() * 1e3
        fig.add({"x": mid, "y": compact(y), "mode": "lines", "name": f"TTFT p{round(p * 100)}",
                 "connectgaps": False, "line": {**step, "color": color(1), "dash": dash},
                 "hovertemplate": f"%{{x:.4g}} s: p{round(p * 100)} %{{y:.4~g}} ms<extra></extra>"}, row=2)
    if ttft_limit is not None:
        fig.layout["shapes"].append({"type": "line", "x0": 0, "x1": 1, "xref": "x2 domain", "y0": ttft_limit * 1e3,
                                     "y1": ttft_limit * 1e3, "yref": "y2", "line": SLO_LINE})
    mean, peak = binned(times, q, edges)
    for y, name, dash in ((mean, "queue (mean)", "solid"), (peak, "queue (peak)", "dot")):
        fig.add({"x": mid, "y": compact(np.asarray(y, float)), "mode": "lines", "name": name,
                 "line": {**step, "color": color(2), "dash": dash},
                 "hovertemplate": f"%{{x:.4g}} s: {name} %{{y:.4~g}}<extra></extra>"}, row=3)
    for a, b, _ in bursts:
        for k in range(3):
            fig.layout["shapes"].append({"type": "rect", "x0": a, "x1": b, "xref": f"x{k + 1 if k else ''}",
                                         "y0": 0, "y1": 1, "yref": f"y{k + 1 if k else ''} domain",
                                         "layer": "below", **BURST_FILL})
    fig.yaxes(rangemode="tozero")
    fig.xaxes(title={"text": "simulated time (s)"}, row=3, col=1)
    base_layout(fig, 620)
    fig.update(legend={"orientation": "h", "y": -0.1, "x": 0}, hovermode="x unified")
    note = (f"Each point is a {width:g} s bin. TTFT is by arrival time (a request's TTFT sits in the bin it "
            "arrived in); the queue counts requests arrived and not yet scheduled.")
    if len(bursts):
        note += " Shaded: the bursts of the arrival schedule; the dotted line in the TTFT panel is its SLO limit."
    elif ttft_limit is not None:
        note += " Dotted in the TTFT panel: its SLO limit."
    return fig, note
