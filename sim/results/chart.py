"""Charts as plain plotly.js figures: ``data`` (a list of trace dicts) and ``layout``, written
straight into the page for plotly.js to draw.

A run's report draws a handful of charts, but plotly's Python figure objects validate every
property as it is set; for a report that cost more than simulating a few thousand requests
(0.2 s of a warm 2,000-request run, against 0.03 s for the same charts as dicts). A ``Chart``
holds the same figure as dicts, lays out a grid of subplots the way
``plotly.subplots.make_subplots`` does, and carries numbers as typed arrays (base64, as plotly
itself sends them), so NaN gaps survive and a page stays small. Study and calibration pages,
which are not on a run's path, keep plotly's objects; ``figure_html`` draws either.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import itertools
import json
from typing import Any

import numpy as np

from sim.results.plotstyle import GRID

DTYPES = {np.dtype(np.float32): "f4", np.dtype(np.float64): "f8", np.dtype(np.int32): "i4"}

# What the reports take from plotly's "plotly_white" template, set explicitly.
STYLE = {
    "paper_bgcolor": "white", "plot_bgcolor": "white", "font": {"color": "#2a3f5f"},
    "hoverlabel": {"align": "left"},
}
AXIS_STYLE = {"gridcolor": GRID, "linecolor": GRID, "zerolinecolor": GRID, "zerolinewidth": 2,
              "ticks": "", "automargin": True, "title": {"standoff": 15}}


def typed(a) -> dict | Any:
    """A numeric array as plotly.js's typed-array spec (base64); anything else as it is."""
    if isinstance(a, np.ndarray) and a.dtype in DTYPES:
        return {"dtype": DTYPES[a.dtype], "bdata": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()}
    return a


def _plain(v):
    """numpy values in a chart's properties, as JSON."""
    if isinstance(v, np.ndarray):
        return typed(v) if v.dtype in DTYPES else v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"not a chart value: {type(v).__name__}")


def _merge(into: dict, more: dict) -> None:
    """Nested update, as plotly's ``update_*`` does (a dict value merges into a dict value)."""
    for k, v in more.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


class Chart:
    """A grid of ``rows`` × ``cols`` subplots (``titles`` above them, row by row); with
    ``shared_x`` the rows of a column share one x axis, labelled at the bottom."""

    def __init__(self, rows: int = 1, cols: int = 1, titles: list[str] | None = None,
                 hspace: float | None = None, vspace: float | None = None, shared_x: bool = False) -> None:
        self.rows, self.cols = rows, cols
        hspace = 0.2 / cols if hspace is None else hspace  # make_subplots' defaults without titles
        vspace = 0.3 / rows if vspace is None else vspace
        self.data: list[dict] = []
        self.layout: dict = {**copy.deepcopy(STYLE), "annotations": [], "shapes": []}
        width = (1 - hspace * (cols - 1)) / cols
        height = (1 - vspace * (rows - 1)) / rows
        for r, c in itertools.product(range(rows), range(cols)):
            k = r * cols + c + 1
            x = [c * (width + hspace), c * (width + hspace) + width]
            y = [1 - (r + 1) * height - r * vspace, 1 - r * height - r * vspace]
            xa = {**copy.deepcopy(AXIS_STYLE), "anchor": f"y{k if k > 1 else ''}", "domain": x}
            if shared_x and r < rows - 1:
                xa |= {"matches": self._name("x", rows - 1, c), "showticklabels": False}
            self.layout[f"xaxis{k if k > 1 else ''}"] = xa
            self.layout[f"yaxis{k if k > 1 else ''}"] = {**json.loads(json.dumps(AXIS_STYLE)),
                                                         "anchor": f"x{k if k > 1 else ''}", "domain": y}
            if titles and k <= len(titles):
                self.layout["annotations"].append({
                    "text": titles[k - 1], "x": (x[0] + x[1]) / 2, "y": y[1], "xref": "paper", "yref": "paper",
                    "xanchor": "center", "yanchor": "bottom", "showarrow": False, "font": {"size": 16}})

    def _name(self, axis: str, r: int, c: int) -> str:
        k = r * self.cols + c + 1
        return axis if k == 1 else f"{axis}{k}"

    def add(self, trace: dict, row: int = 1, col: int = 1) -> None:
        """A trace (``type`` defaults to scatter) in subplot (row, col), both counted from 1."""
        t = {"type": "scatter", **trace, "xaxis": self._name("x", row - 1, col - 1),
             "yaxis": self._name("y", row - 1, col - 1)}
        for key in ("x", "y"):
            if key in t:
                t[key] = typed(t[key])
        self.data.append(t)

    def vline(self, x: float, line: dict, row: int = 1, col: int = 1) -> None:
        """A vertical line across subplot (row, col) at ``x``."""
        xa, ya = self._name("x", row - 1, col - 1), self._name("y", row - 1, col - 1)
        self.layout["shapes"].append({"type": "line", "x0": x, "x1": x, "xref": xa, "y0": 0, "y1": 1,
                                      "yref": f"{ya} domain", "line": line})

    def _axes(self, axis: str, row: int | None, col: int | None):
        for r, c in itertools.product(range(self.rows), range(self.cols)):
            if (row is None or r == row - 1) and (col is None or c == col - 1):
                yield self.layout[self._name(f"{axis}axis", r, c)]

    def xaxes(self, row: int | None = None, col: int | None = None, **props) -> None:
        """Set x-axis properties (every subplot's, or one row's / column's / subplot's)."""
        for a in self._axes("x", row, col):
            _merge(a, copy.deepcopy(props))

    def yaxes(self, row: int | None = None, col: int | None = None, **props) -> None:
        for a in self._axes("y", row, col):
            _merge(a, copy.deepcopy(props))

    def update(self, **layout) -> None:
        _merge(self.layout, layout)

    def to_dict(self) -> dict:
        return {"data": self.data, "layout": self.layout}


def chart_html(chart: Chart, config: dict | None = None) -> str:
    """The chart's div and the script that draws it (plotly.js loaded by the page)."""
    height = chart.layout.get("height")
    style = f"height:{height}px; width:100%;" if height else "width:100%;"
    # a JavaScript literal, not JSON: NaN is allowed there
    spec = json.dumps({"data": chart.data, "layout": chart.layout, "config": config or {}},
                      separators=(",", ":"), default=_plain).replace("</", "<\\/")
    div = "chart-" + hashlib.sha1(spec.encode()).hexdigest()[:16]  # the same run, the same page
    return (f"<div id='{div}' class='plotly-graph-div' style='{style}'></div><script type='text/javascript'>"
            f"(function(){{var f={spec};if(window.Plotly)Plotly.newPlot('{div}',f.data,f.layout,"
            "Object.assign({responsive:true},f.config));})();</script>")
