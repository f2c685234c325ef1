"""The report's replicas over time, for an autoscaled fleet: active, provisioning and
draining replicas after each change, and the SLO attainment of the requests arriving between
changes (sim/results/fleet.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.results.chart import Chart
from sim.results.fleet import replicas_over_time
from sim.results.plotstyle import base_layout, color, compact

MAX_POINTS = 2000  # changes drawn; a longer series keeps every k-th (the GPU-hours are exact regardless)


def fleet_over_time(result) -> tuple[Chart, str]:
    """The chart and a note on reading it."""
    series = replicas_over_time(result.fleet, len(result.scenario.replica_specs))
    end = float(max(series["time"].iloc[-1], result.requests["arrival"].to_numpy().max(initial=0.0)))
    series = pd.concat([series, series.iloc[-1:].assign(time=end)], ignore_index=True)  # hold the last state
    if len(series) > MAX_POINTS:
        keep = np.unique(np.r_[np.arange(0, len(series), len(series) // MAX_POINTS + 1), len(series) - 1])
        series = series.iloc[keep]
    fig = Chart(2, 1, ["Replicas (active, provisioning, draining)",
                       "SLO attainment of the requests arriving between changes"], vspace=0.09, shared_x=True)
    x = compact(series["time"].to_numpy(float))
    for i, name in enumerate(("active", "provisioning", "draining")):
        fig.add({"x": x, "y": series[name].to_numpy(float).tolist(), "mode": "lines", "name": name,
                 "line": {"shape": "hv", "width": 1.5, "color": color(i)},
                 "hovertemplate": f"%{{x:.4g}} s: %{{y}} {name}<extra></extra>"}, row=1)
    stretches = [s for s in result.summary["autoscale"]["stretches"] if s["requests"]]
    xs, ys = [], []
    for s in stretches:
        xs += [s["start_s"], s["end_s"], None]
        ys += [s["slo_attainment"], s["slo_attainment"], None]
    fig.add({"x": xs, "y": ys, "mode": "lines", "name": "SLO attainment", "connectgaps": False,
             "line": {"width": 2, "color": color(3)},
             "hovertemplate": "%{x:.4g} s: %{y:.1%}<extra></extra>"}, row=2)
    fig.yaxes(rangemode="tozero", row=1, col=1)
    fig.yaxes(range=[0, 1.02], tickformat=".0%", row=2, col=1)
    fig.xaxes(title={"text": "simulated time (s)"}, row=2, col=1)
    base_layout(fig, 480)
    fig.update(legend={"orientation": "h", "y": -0.14, "x": 0}, hovermode="x unified")
    a = result.summary["autoscale"]
    note = (f"{a['scale_changes']:,} change(s) of the active count; {a['gpu_hours']:.4g} GPU-hours held over the "
            "cost window (provisioning, active and draining replicas; a fixed fleet of the peak would hold "
            f"{a['fixed_gpu_hours']:.4g}). A provisioning replica is paid for and serves nothing; a draining one "
            "finishes what it holds and takes nothing new.")
    return fig, note
