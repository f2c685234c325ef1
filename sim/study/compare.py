"""``servesim compare``: several scenarios on the same traffic, drawn side by side."""

from __future__ import annotations

import copy
import html
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.results.atomic import Staging
from sim.results.report import figure_html, latency_cdfs, page
from sim.scenario.schema import Scenario, scenario_from_dict
from sim.study.overrides import apply
from sim.study.plan import RunSpec, read_scenario_mapping, run_key
from sim.study.runners import Runner
from sim.study.schema import StudyError

BAR_METRICS = [("ttft_p50", "TTFT p50 (s)"), ("ttft_p99", "TTFT p99 (s)"),
               ("tpot_p50", "TPOT p50 (s)"), ("tpot_p99", "TPOT p99 (s)"),
               ("e2e_p50", "E2E p50 (s)"), ("e2e_p99", "E2E p99 (s)"),
               ("request_throughput", "throughput (req/s)"),
               ("goodput_per_gpu", "goodput per GPU (req/s)"),
               ("slo_attainment", "SLO attainment")]
TABLE_METRICS = ["num_gpus", "requests", "finished", "rejected", "request_throughput",
                 "goodput", "goodput_per_gpu", "slo_attainment", "ttft_p50", "ttft_p99",
                 "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99", "preemptions",
                 "mean_batch_size"]


@dataclass
class Entry:
    name: str
    path: Path
    data: dict
    scenario: Scenario
    record: dict = field(default_factory=dict)


def _absolute_paths(workload: dict, base_dir: Path) -> dict:
    """The workload with relative file paths made absolute, so it reads the same anywhere."""
    out = copy.deepcopy(workload)

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "path" and isinstance(v, str) and not Path(v).expanduser().is_absolute():
                    node[k] = str((base_dir / v).resolve())
                else:
                    walk(v)

    walk(out)
    return out


def load_entries(paths: list[str], overrides: dict, same_traffic: bool) -> list[Entry]:
    """Read each scenario; with ``same_traffic`` the first one's workload, seed and SLO
    replace the others', so every scenario serves exactly the same requests."""
    if len(paths) < 2:
        raise StudyError("compare", None, "give at least two scenario files")
    raw = []
    for p in paths:
        path = Path(p)
        data = apply(read_scenario_mapping(path), overrides, str(path), "--set")
        raw.append((path, data))
    first_path, first = raw[0]
    shared = {"workload": _absolute_paths(first.get("workload") or {}, first_path.parent)}
    for key in ("seed", "slo"):
        if key in first:
            shared[key] = first[key]
    entries, names = [], set()
    for path, data in raw:
        if same_traffic:
            data = {**{k: v for k, v in data.items() if k not in ("workload", "seed", "slo")},
                    **copy.deepcopy(shared)}
        scenario = scenario_from_dict(data, str(path), path.parent)
        name = scenario.name
        if name in names:
            name = f"{name} ({path.stem})"
        names.add(name)
        entries.append(Entry(name, path, data, scenario))
    return entries


def run_entries(entries: list[Entry], runner: Runner) -> None:
    for i, e in enumerate(entries):
        runner.submit(RunSpec(run_key(e.data), i, None, e.data, str(e.path.parent),
                                str(e.path), keep_requests=True))
    while runner.in_flight:
        spec, rec = runner.next_done()
        entries[spec.config].record = rec


def summary_frame(entries: list[Entry]) -> pd.DataFrame:
    rows = []
    for e in entries:
        hw = e.scenario.hardware
        s = e.record.get("summary") or {}
        rows.append({"scenario": e.name, "file": str(e.path), "status": e.record.get("status"),
                     "error": e.record.get("error"), "policy": e.scenario.scheduler.policy,
                     "gpu": e.scenario.gpu_spec.name, "tp": hw.tp, "replicas": e.scenario.replicas,
                     "num_gpus": e.scenario.replicas * hw.tp * hw.pp, **s})
    return pd.DataFrame(rows)


def summary_bars(frame: pd.DataFrame) -> go.Figure:
    ok = frame[frame["status"] == "ok"]
    metrics = [(m, t) for m, t in BAR_METRICS if m in ok and ok[m].notna().any()]
    cols = 3
    rows = max(1, -(-len(metrics) // cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[t for _, t in metrics],
                        vertical_spacing=0.12)
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]
    colors = [palette[i % len(palette)] for i in range(len(ok))]
    for i, (m, _) in enumerate(metrics):
        fig.add_trace(go.Bar(x=ok["scenario"], y=ok[m], marker_color=colors, showlegend=False,
                             text=[f"{v:.3g}" for v in ok[m]], textposition="auto",
                             hovertemplate="%{x}: %{y:.4g}<extra></extra>"),
                      row=i // cols + 1, col=i % cols + 1)
    fig.update_layout(height=300 * rows, margin={"t": 40, "b": 30})
    return fig


COMPARE_FILES = ("summary.csv", "report.html")


def write_compare(entries: list[Entry], out_dir: Path, png: bool) -> tuple[dict, list[str]]:
    """Write the comparison (renamed into place together; an earlier comparison's per-scenario
    tables and figures go)."""
    frame = summary_frame(entries)
    ok = {e.name: e.record["requests"] for e in entries if e.record.get("status") == "ok"}
    figs = {"latency_cdfs": ("Latency CDFs", latency_cdfs(ok)),
            "summary_bars": ("Summary", summary_bars(frame))} if ok else {}
    same = entries[0].scenario.workload
    parts = [f"<p>{len(entries)} scenarios on the same traffic: {len(next(iter(ok.values())))} "
             f"requests (seed {entries[0].scenario.seed}).</p>" if ok and all(
                 e.scenario.workload == same for e in entries) else ""]
    from sim.study.report import STYLE, table_html, write_pngs

    parts.insert(0, STYLE)
    parts.append(table_html(frame, ["scenario", "policy", "gpu", "tp", "replicas",
                                    *TABLE_METRICS]))
    for i, (heading, fig) in enumerate(figs.values()):
        parts.append(f"<h2>{html.escape(heading)}</h2>" + figure_html(fig, i == 0))
    failed = frame[frame["status"] != "ok"]
    if len(failed):
        parts.append("<h2>Failed runs</h2>" + table_html(failed, ["scenario", "error"]))
    title = "servesim compare — " + " vs ".join(e.name for e in entries)
    warnings = []
    with Staging(out_dir) as st:
        frame.to_csv(st.file("summary.csv"), index=False)
        for name, df in ok.items():
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
            df.to_parquet(st.file(f"requests-{safe}.parquet"), index=False)
        for old in out_dir.glob("requests-*.parquet"):
            st.remove(old.name)
        st.file("report.html").write_text(page(title, parts))
        if png:
            warnings = write_pngs(figs, st.folder_for("figures"))
        else:
            st.remove("figures", folder=True)
        paths = st.commit()
    return paths, warnings
