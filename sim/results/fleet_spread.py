"""A large fleet's engines over time, aggregated: per bin the mean across engines and the
min–max band, plus the few busiest engines by name, so a report's size does not grow with the
fleet (one trace per engine at 10,000 replicas wrote a 2.5 GB page: issue 31).

Fleets of up to ``AGGREGATE_ABOVE`` engines keep one trace per engine."""

from __future__ import annotations

import warnings

import numpy as np

from sim.results.plotstyle import compact

AGGREGATE_ABOVE = 24  # engines drawn one trace each; a larger fleet is drawn as its spread
BUSIEST_SHOWN = 3  # engines named beside a large fleet's spread: the most waiting requests
INK, BAND = "#0072B2", "rgba(0, 114, 178, 0.2)"


def _quiet(fn, stack: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN bins: idle everywhere
        return fn(stack, axis=0)


def spread(values: list[dict[str, np.ndarray]]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per panel key, per bin: (mean, min, max) across engines, over the engines with a value
    there (NaN: idle, as the engines' own series have it)."""
    out = {}
    for key in values[0]:
        stack = np.vstack([v[key] for v in values])
        out[key] = (_quiet(np.nanmean, stack), _quiet(np.nanmin, stack), _quiet(np.nanmax, stack))
    return out


def busiest(values: list[dict[str, np.ndarray]], k: int = BUSIEST_SHOWN) -> list[int]:
    """The places of the ``k`` engines with the most waiting requests over the run (time mean),
    ties broken by KV cache in use, then by place."""
    def score(v):
        return (-float(np.nansum(v["waiting"])), -float(np.nansum(np.nan_to_num(v["kv"], nan=0.0))))

    return sorted(range(len(values)), key=lambda i: (*score(values[i]), i))[:k]


def panel_keys(cached: bool, preempting: bool) -> list[tuple[int, str, str]]:
    """The timeline's traces of one series: (panel row, value key, dash)."""
    keys = [(1, "decode", "solid"), (2, "prefill", "solid"), (3, "kv", "solid")]
    if cached:
        keys.append((3, "kv_all", "dot"))
    keys.append((4, "waiting", "solid"))
    if preempting:
        keys.append((4, "queued", "dot"))
    return keys


def spread_traces(fig, x, band: dict, engines: int, cached: bool, preempting: bool, line: dict) -> str:
    """Draw the spread onto the timeline (hidden until chosen in its menu): per panel the mean
    across engines, and for the solid traces the min–max band. Returns the series' label."""
    label = f"aggregated: mean of {engines:,} engines, band min–max"
    for row, key, dash in panel_keys(cached, preempting):
        mean, lo, hi = band[key]
        common = {"mode": "lines", "legendgroup": label, "visible": False, "connectgaps": False}
        if dash == "solid":
            fig.add({**common, "x": x, "y": compact(lo), "name": f"{label} (min)", "showlegend": False,
                     "line": {**line, "width": 0, "color": BAND}, "hoverinfo": "skip"}, row=row)
            fig.add({**common, "x": x, "y": compact(hi), "name": f"{label} (max)", "showlegend": False,
                     "fill": "tonexty", "fillcolor": BAND, "line": {**line, "width": 0, "color": BAND},
                     "hovertemplate": "max over engines<br>%{x:.4g} s: %{y:.4~g}<extra></extra>"}, row=row)
        fig.add({**common, "x": x, "y": compact(mean), "name": label, "showlegend": row == 1,
                 "line": {**line, "color": INK, "dash": dash},
                 "hovertemplate": "mean over engines<br>%{x:.4g} s: %{y:.4~g}<extra></extra>"}, row=row)
    return label
