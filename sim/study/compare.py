"""``servesim compare``: several scenarios on the same traffic, drawn side by side, the winner
marked ★ by the rule a study's ``cheapest`` answer follows (``objectives.rank``)."""

from __future__ import annotations

import copy
import html
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.results import plotlyjs
from sim.results.atomic import Staging
from sim.results.energy import ENERGY_METRICS
from sim.results.metrics import ms_keys
from sim.results.money import COST_METRICS
from sim.results.plotstyle import base_layout, config_colors
from sim.results.report import figure_html, latency_cdfs, page
from sim.scenario.load import scenario_from_dict
from sim.scenario.schema import Scenario
from sim.study.columns import cell, heading
from sim.study.figures import STAR, better
from sim.study.objectives import passes, pick_best, tie_rule
from sim.study.overrides import apply
from sim.study.plan import RunSpec, read_scenario_mapping, run_key
from sim.study.runners import Runner
from sim.study.schema import Acceptance, StudyError

BAR_METRICS = ["slo_attainment", "goodput_per_gpu", "request_throughput", "ttft_p99", "tpot_p99", "e2e_p99"]
TABLE_METRICS = ["num_gpus", "offered_rate", "requests", "finished", "rejected", "request_throughput",
                 "goodput", "goodput_per_gpu", "slo_attainment", "ttft_p50", "ttft_p99", "tpot_p50",
                 "tpot_p99", "itl_p50", "itl_p99", "e2e_p50", "e2e_p99", "preemptions", "mean_batch_size",
                 "mean_kv_utilization", *COST_METRICS, *ENERGY_METRICS]


SLO_TARGET = Acceptance.model_fields["slo_target"].default  # as a study's, unless --slo-target
# After cost, GPUs: the other axis of a cheapest study's Pareto chart (objectives.default_pareto).
THEN = ("ttft_p99",)


@dataclass
class Winner:
    """The scenario compare marks ★ (None: none qualifies) and one line saying why."""

    name: str | None
    note: str


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
        if scenario.cost.model == "profile":  # (checking imports the core)
            from sim.pricing.profile_checks import check_scenario

            check_scenario(scenario)  # a profile that cannot price it stops before any run
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
                     "gpu": e.scenario.gpu_spec.name, "tp": hw.tp, "replicas": len(e.scenario.replica_specs),
                     "num_gpus": e.scenario.num_gpus, **s})
    return pd.DataFrame(rows)


def pick_winner(entries: list[Entry], slo_target: float = SLO_TARGET) -> Winner:
    """The cheapest scenario per hour among those meeting the SLO (at least ``slo_target`` of
    requests within it), ties broken as a study breaks them (``objectives.rank``): a cheapest
    study over these scenarios would give the same answer."""
    frame = summary_frame(entries)
    acc = Acceptance(slo_target=slo_target)
    meets = [passes(acc, e.record) for e in entries]
    cost = frame["cost_per_hour"] if "cost_per_hour" in frame else pd.Series(float("nan"), index=frame.index)
    frame["qualifying_cost_per_hour"] = cost.where(meets)
    rule = (f"the cheapest per hour of those with ≥ {slo_target:.0%} of requests within the SLO; "
            f"{tie_rule(THEN)}")
    best = pick_best(frame, "qualifying_cost_per_hour", THEN)
    if best is not None:
        return Winner(str(best["scenario"]), f"★ {best['scenario']}: {rule}")
    if not (frame["status"] == "ok").any():
        return Winner(None, "no winner: no scenario ran")
    if "slo_attainment" not in frame or frame["slo_attainment"].isna().all():
        return Winner(None, "no winner: no scenario sets an SLO to meet")
    return Winner(None, f"no winner: no scenario has ≥ {slo_target:.0%} of its requests within the SLO "
                        "(--slo-target sets that share)")


def summary_bars(frame: pd.DataFrame, colors: dict[str, str] | None = None, winner: str | None = None) -> go.Figure:
    """The key numbers side by side, one colour per scenario (as in the CDFs), the winner's
    bars outlined and marked ★. Every axis is linear and starts at zero: a bar's length is
    its value (on a log axis it would not be, and a tenfold TTFT would look a few times longer)."""
    ok = frame[frame["status"] == "ok"]
    colors = colors or config_colors(ok["scenario"])
    metrics = [m for m in BAR_METRICS if m in ok and ok[m].notna().any()]
    cols = 3
    rows = max(1, -(-len(metrics) // cols))
    fig = make_subplots(rows=rows, cols=cols, vertical_spacing=0.16, horizontal_spacing=0.07,
                        subplot_titles=[f"{heading(m)}, {better(m)}" for m in metrics])
    names = list(ok["scenario"])
    for i, m in enumerate(metrics):
        scale = 1e3 if heading(m).endswith("(ms)") else 1
        fig.add_trace(go.Bar(x=[n.replace(" ", "<br>", 1) if len(n) > 18 else n for n in names],
                             y=ok[m].astype(float) * scale, showlegend=False,
                             marker={"color": [colors.get(n) for n in names],
                                     "line": {"width": [3 if n == winner else 0 for n in names], "color": "#111"}},
                             text=[(STAR if n == winner else "") + cell(m, v)
                                   for n, v in zip(names, ok[m], strict=True)],
                             textposition="auto", hovertemplate="%{x}: %{text}<extra></extra>"),
                      row=i // cols + 1, col=i % cols + 1)
    fig.update_yaxes(rangemode="tozero")
    for i, m in enumerate(metrics):
        if m == "slo_attainment":
            fig.update_yaxes(tickformat=".0%", range=[0, 1.05], row=i // cols + 1, col=i % cols + 1)
    base_layout(fig, 300 * rows)
    fig.update_annotations(font_size=13)
    return fig


def setup_table(entries: list[Entry]) -> str:
    """What was simulated, scenario by scenario: rows that differ first and bold."""
    from sim.results.describe import setup_rows

    ok = [e for e in entries if e.record.get("status") == "ok"]
    cols = [dict(setup_rows(e.scenario, e.record.get("summary") or {})) for e in ok]
    keys = list(dict.fromkeys(k for c in cols for k in c))
    differ = [k for k in keys if len({c.get(k, "–") for c in cols}) > 1]
    same = [k for k in keys if k not in differ]
    esc = html.escape
    head = "<tr><th></th>" + "".join(f"<th style='text-align:left'>{esc(e.name)}</th>" for e in ok) + "</tr>"
    body = ""
    for k in differ + same:
        style = " style='font-weight:600'" if k in differ else " style='color:#555'"
        body += f"<tr{style}><td style='text-align:left'>{esc(k)}</td>" + "".join(
            f"<td style='text-align:left'>{esc(c.get(k, '–'))}</td>" for c in cols) + "</tr>"
    return f"<table class='grid'>{head}{body}</table>"


def metric_rows(frame: pd.DataFrame, winner: str | None = None) -> tuple[list[str], list[list[str]]]:
    """Metric rows × scenario columns, formatted (what the terminal and the report show); the
    winner's column headed ★."""
    names = [STAR + n if n == winner else n for n in frame["scenario"]]
    rows = [["status", *(str(v) for v in frame["status"])]]
    one_gpu = "num_gpus" in frame and (frame["num_gpus"] == 1).all()
    for m in TABLE_METRICS:
        if m == "goodput_per_gpu" and one_gpu:
            continue
        if m in frame and frame[m].notna().any():
            rows.append([heading(m), *(cell(m, v) for v in frame[m])])
    return ["", *names], rows


def metrics_html(frame: pd.DataFrame, winner: str | None = None) -> str:
    head, rows = metric_rows(frame, winner)
    esc = html.escape
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table class='grid'><tr>{th}</tr>{body}</table>"


def print_compare(entries: list[Entry], fmt: str, winner: Winner) -> None:
    """The comparison to stdout: metric rows × scenarios (table) and the winner, or the summary
    as CSV/JSON (a ``winner`` column)."""
    import json
    import sys

    from rich.table import Table

    from sim.cli.console import print_rows

    frame = summary_frame(entries)
    frame["winner"] = frame["scenario"] == winner.name
    keep = [c for c in frame.columns if c not in ("classes",)]
    if fmt == "csv":
        ms_keys(frame[keep]).to_csv(sys.stdout, index=False)
    elif fmt == "json":
        print(json.dumps(json.loads(ms_keys(frame[keep]).to_json(orient="records")), indent=2))
    else:
        head, rows = metric_rows(frame, winner.name)
        print_rows(Table(*head, title="compare"), rows)
        readings = {r.hardware.gpu_resolution for e in entries for r in e.scenario.replica_specs}
        for line in sorted(g for g in readings if g):  # which card an H100 or A100 was read as
            print(line)
        print(winner.note)


def new_folder(parent: Path, stem: str = "compare") -> Path:
    """``parent/stem-<n>``, n one more than the highest there: each comparison gets its own
    folder, and an earlier one is never replaced unless ``--out`` names it."""
    import re

    taken = [int(m.group(1)) for p in (parent.iterdir() if parent.is_dir() else ())
             if (m := re.fullmatch(re.escape(stem) + r"-(\d+)", p.name))]
    return parent / f"{stem}-{max(taken, default=0) + 1}"


COMPARE_FILES = ("summary.csv", "report.html", plotlyjs.FILE)


def write_compare(entries: list[Entry], out_dir: Path, png: bool, plotly: str = "file",
                  winner: Winner | None = None) -> tuple[dict, list[str]]:
    """Write the comparison (renamed into place together; an earlier comparison's per-scenario
    tables and figures go)."""
    from sim.results.plotstyle import SLO_LINE
    from sim.results.report import itl_cdf, slo_limits

    winner = winner or pick_winner(entries)
    frame = summary_frame(entries)
    frame["winner"] = frame["scenario"] == winner.name
    ok = {e.name: e.record["requests"] for e in entries if e.record.get("status") == "ok"}
    colors = config_colors(e.name for e in entries)
    first = entries[0].scenario
    same = all(e.scenario.workload == first.workload and e.scenario.slo == first.slo for e in entries)
    itl = {e.name: itl_cdf(e.record["itl"]) for e in entries if e.record.get("itl") is not None and e.name in ok}
    limits = {n: slo_limits(e.scenario, ["-"])["-"] for e in entries for n in [e.name] if n in ok}
    figs = {"latency_cdfs": ("Latency distributions (dotted: SLO limits)",
                             latency_cdfs(ok, colors, limits, itl or None, SLO_LINE["color"])),
            "summary_bars": (f"Side by side{' — ★ the winner' if winner.name else ''}",
                             summary_bars(frame, colors, winner.name))} if ok else {}
    from sim.study.report import STYLE, table_html, write_pngs

    traffic = (f"Every scenario served the same {len(next(iter(ok.values()))):,} requests (seed {first.seed}) "
               "and was held to the same SLO." if ok and same else "Each scenario ran its own traffic and SLO.")
    box = "answer" if winner.name else "answer none"
    parts = [STYLE, f"<p>{html.escape(traffic)}</p>", f"<div class='{box}'>{html.escape(winner.note)}</div>",
             "<h2>Results</h2>", metrics_html(frame, winner.name),
             "<h2>What was simulated</h2><p class='note'>Rows that differ are bold.</p>", setup_table(entries)]
    for heading_text, fig in figs.values():
        parts.append(f"<h2>{html.escape(heading_text)}</h2>" + figure_html(fig))
    failed = frame[frame["status"] != "ok"]
    if len(failed):
        parts.append("<h2>Failed runs</h2>" + table_html(failed, ["scenario", "error"]))
    title = "compare: " + " vs ".join(e.name for e in entries)
    warnings = []
    with Staging(out_dir) as st:
        ms_keys(frame.drop(columns=["classes"], errors="ignore")).to_csv(st.file("summary.csv"), index=False)
        for name, df in ok.items():
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
            df.to_parquet(st.file(f"requests-{safe}.parquet"), index=False)
        for old in out_dir.glob("requests-*.parquet"):
            st.remove(old.name)
        st.file("report.html").write_text(page(title, parts, plotly), encoding="utf-8")
        plotlyjs.stage(st, plotly)
        if png:
            warnings = write_pngs(figs, st.folder_for("figures"))
            if warnings:
                st.drop("figures")
                st.remove("figures", folder=True)
        else:
            st.remove("figures", folder=True)
        paths = st.commit()
    return paths, warnings
