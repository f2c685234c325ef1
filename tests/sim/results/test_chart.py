"""A report's Chart lays its subplots out as plotly's make_subplots does and writes its numbers
as typed arrays plotly.js reads back exactly, NaN gaps included."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from plotly.subplots import make_subplots

from sim.results.chart import Chart, chart_html, typed


@pytest.mark.parametrize("rows, cols, kw, plotly_kw", [
    (1, 4, {"hspace": 0.05}, {"horizontal_spacing": 0.05}),
    (4, 1, {"vspace": 0.055, "shared_x": True}, {"vertical_spacing": 0.055, "shared_xaxes": True}),
    (2, 3, {"hspace": 0.1, "vspace": 0.2}, {"horizontal_spacing": 0.1, "vertical_spacing": 0.2}),
])
def test_the_grid_is_make_subplots_grid(rows, cols, kw, plotly_kw):
    titles = [f"t{i}" for i in range(rows * cols)]
    ours = Chart(rows, cols, titles, **kw).layout
    theirs = make_subplots(rows=rows, cols=cols, subplot_titles=titles, **plotly_kw).to_plotly_json()["layout"]
    for name, axis in theirs.items():
        if re.fullmatch(r"[xy]axis\d*", name):
            assert ours[name]["domain"] == pytest.approx(list(axis["domain"])), name
            assert ours[name]["anchor"] == axis["anchor"], name
            assert ours[name].get("matches") == axis.get("matches"), name
            assert bool(ours[name].get("showticklabels", True)) == bool(axis.get("showticklabels", True)), name
    for a, b in zip(ours["annotations"], theirs["annotations"], strict=True):
        assert (a["text"], a["x"], a["y"]) == (b["text"], pytest.approx(b["x"]), pytest.approx(b["y"]))


def test_traces_land_in_their_subplot_and_numbers_round_trip():
    c = Chart(2, 2)
    y = np.array([1.5, np.nan, 3.25], dtype=np.float32)
    c.add({"x": np.arange(3, dtype=np.float32), "y": y, "name": "a"}, row=2, col=2)
    c.vline(7.0, {"dash": "dot"}, row=1, col=2)
    t = c.data[0]
    assert (t["xaxis"], t["yaxis"]) == ("x4", "y4")
    back = np.frombuffer(base64.b64decode(t["y"]["bdata"]), dtype=np.float32)
    assert t["y"]["dtype"] == "f4" and np.array_equal(back, y, equal_nan=True)
    assert c.layout["shapes"][0] | {} == {"type": "line", "x0": 7.0, "x1": 7.0, "xref": "x2", "y0": 0, "y1": 1,
                                          "yref": "y2 domain", "line": {"dash": "dot"}}
    assert typed([1, 2]) == [1, 2]


def test_axis_updates_merge_and_reach_only_their_subplots():
    c = Chart(1, 3)
    c.yaxes(range=[0, 1], tickformat=".0%")
    c.yaxes(title={"text": "share"}, row=1, col=1)
    c.xaxes(type="log", row=1, col=2)
    assert c.layout["yaxis"]["title"] == {"standoff": 15, "text": "share"}  # merged into the style's title
    assert "text" not in c.layout["yaxis2"]["title"] and c.layout["yaxis3"]["range"] == [0, 1]
    assert c.layout["xaxis2"]["type"] == "log" and "type" not in c.layout["xaxis"]


def test_the_page_script_cannot_be_closed_by_a_name():
    c = Chart()
    c.add({"x": [1], "y": [2], "name": "</script><b>x"})
    c.update(height=300, note=np.float32(0.5))
    page = chart_html(c)
    assert page.count("</script>") == 1 and "<\\/script>" in page and "height:300px" in page
    spec = re.search(r"var f=(\{.*\});if", page).group(1)
    assert json.loads(spec)["layout"]["note"] == 0.5


def test_the_same_run_writes_the_same_report(tmp_path):
    from sim.cli.app import main

    for name in ("a", "b"):  # in one process: nothing page-global (a counter, a random id) leaks in
        assert main(["run", "--out", str(tmp_path / name), "--set", "workload.num_requests=100"]) == 0
    assert (tmp_path / "a" / "report.html").read_bytes() == (tmp_path / "b" / "report.html").read_bytes()

