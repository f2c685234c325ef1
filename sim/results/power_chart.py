"""The report's power over time: the fleet's GPUs' draw (idle plus the steps' work, sim.results.energy),
with its idle floor, TDP and cap."""

from __future__ import annotations

import numpy as np

from sim.results.chart import Chart
from sim.results.plotstyle import SLO_LINE, base_layout, color, compact

MAX_BINS = 200


def power_over_time(result) -> tuple[Chart, str] | None:
    """The chart and a note on reading it (None: the fleet has no power model)."""
    from sim.pricing.power import CAP, IDLE, TDP
    from sim.results.energy import power_series, scenario_power
    from sim.results.timeline import bin_edges

    fleet = scenario_power(result.scenario)
    steps = result.steps
    if not fleet.modelled or not len(steps):
        return None
    end = float((steps["start"] + steps["duration"]).max())
    edges = bin_edges(max(end, 1e-3), MAX_BINS)
    watts = power_series(fleet, steps, edges)
    mid = compact((edges[:-1] + edges[1:]) / 2)
    fig = Chart(1, 1, ["Fleet GPU power (kW)"])
    fig.add({"x": mid, "y": compact(watts / 1e3), "mode": "lines", "name": "draw",
             "line": {"shape": "hv", "width": 1.5, "color": color(3)},
             "hovertemplate": "%{x:.4g} s: %{y:.4~g} kW<extra></extra>"})
    limit = np.where(fleet.power[:, CAP] > 0, fleet.power[:, CAP], fleet.power[:, TDP])
    lines = [("idle", float(fleet.gpus @ fleet.power[:, IDLE])), ("TDP", float(fleet.gpus @ fleet.power[:, TDP]))]
    if (fleet.power[:, CAP] > 0).any():
        lines.append(("cap", float(fleet.gpus @ limit)))
    for name, w in lines:
        fig.layout["shapes"].append({"type": "line", "x0": 0, "x1": 1, "xref": "x domain", "y0": w / 1e3,
                                     "y1": w / 1e3, "yref": "y", "line": SLO_LINE})
        fig.layout["annotations"].append(
            {"x": 1, "xref": "x domain", "y": w / 1e3, "yref": "y", "text": name, "showarrow": False,
             "xanchor": "left", "font": {"size": 10}})
    fig.yaxes(rangemode="tozero")
    fig.xaxes(title={"text": "simulated time (s)"}, row=1, col=1)
    base_layout(fig, 320)
    note = (f"Each point is the mean draw of all {fmt_count(fleet.gpus.sum())} GPUs over a {edges[1] - edges[0]:g} s "
            "bin: idle power on every GPU plus each step's work (sim/pricing/power.py). Dotted: the fleet's idle "
            "floor, its TDP" + (" and its power cap" if len(lines) > 2 else "") + " (README, \"GPUs\").")
    return fig, note


def fmt_count(n: float) -> str:
    return f"{round(n):,}"
