"""A study's outputs: the runs and configurations tables, answer.json, report.html, PNGs."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from sim.results.atomic import Staging
from sim.results.report import figure_html, page
from sim.study import figures
from sim.study.driver import StudyRun
from sim.study.objectives import default_pareto
from sim.study.overrides import short_names
from sim.study.schema import Cheapest, MaxRate

STYLE = ("<style>table.data{border-collapse:collapse;font-size:13px;margin:0.5em 0}"
         "table.data th,table.data td{border-bottom:1px solid #ddd;padding:3px 10px;"
         "text-align:right}table.data th{background:#f4f4f4}table.data td:first-child,"
         "table.data th:first-child{text-align:left}.answer{background:#eef6ee;padding:0.8em "
         "1.2em;border-left:4px solid #2ca02c}.answer.none{background:#fbeeee;border-color:"
         "#d62728}.meta{color:#555}</style>")


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "✓" if v else "✗"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def table_html(df: pd.DataFrame, columns: list[str], limit: int = 200,
               names: dict[str, str] | None = None) -> str:
    cols = [c for c in columns if c in df]
    names = names or {}
    head = "".join(f"<th title='{html.escape(c)}'>{html.escape(names.get(c, c))}</th>"
                   for c in cols)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r[c]))}</td>" for c in cols)
                   + "</tr>" for _, r in df.head(limit).iterrows())
    more = f"<p class='meta'>… {len(df) - limit} more rows in the table files</p>" \
        if len(df) > limit else ""
    return f"<table class='data'><tr>{head}</tr>{rows}</table>{more}"


def answer_columns(run: StudyRun) -> list[str]:
    """The columns that tell the answer, in reading order (swept fields name the config)."""
    plan, obj = run.plan, run.plan.study.objective
    names = list(plan.swept) or ["config"]
    common = ["num_gpus", "cost_per_hour"]
    if isinstance(obj, MaxRate):
        return [*names, "max_rate", "max_rate_per_gpu", "max_rate_per_dollar", *common,
                "slo_attainment", "ttft_p99", "tpot_p99", "outcome"]
    if isinstance(obj, Cheapest):
        return [*names, *common, "meets_slo", "slo_attainment", "goodput_per_gpu",
                "ttft_p99", "tpot_p99", "e2e_p99"]
    return [*names, obj.rank_by, "at_rate", "max_rate_meeting_slo", *common, "pareto_points"]


HEADINGS = {
    "max_rate": "max rate (req/s)", "max_rate_per_gpu": "per GPU", "max_rate_per_dollar":
    "req per $", "num_gpus": "GPUs", "cost_per_hour": "$/h", "slo_attainment": "SLO met",
    "meets_slo": "meets SLO", "goodput_per_gpu": "goodput/GPU", "max_rate_meeting_slo":
    "max rate in SLO", "pareto_points": "on Pareto", "at_rate": "at rate",
}


def headers(run: StudyRun) -> dict[str, str]:
    """Short column headings: the last part of a swept field's path, short metric names."""
    return {**HEADINGS, **short_names([c for c in run.plan.swept if c != "case"])}


def answer_lines(run: StudyRun) -> list[tuple[str, str]]:
    """(name, value) pairs describing the answer, for the terminal and the report."""
    b = run.outcome.best
    if b is None:
        return []
    lines = [(c, _fmt(b.get(c))) for c in run.plan.swept]
    lines += [(c, _fmt(b.get(c))) for c in answer_columns(run)
              if c in b and c not in run.plan.swept and c != "config"]
    if b.get("outcome") == "above_bracket":
        lines.append(("note", "passes at the top of the bracket: raise objective.bracket"))
    return lines


def build_figures(run: StudyRun) -> dict[str, tuple[str, go.Figure]]:
    """name -> (heading, figure); figures needing data the study lacks are left out."""
    plan, out = run.plan, run.outcome
    study, obj = plan.study, plan.study.objective
    figs: dict[str, tuple[str, go.Figure]] = {}
    runs, configs = out.runs, out.configs
    best = out.best["config"] if out.best else None
    ok = runs[runs["status"] == "ok"] if len(runs) else runs
    if len(ok) and ok.groupby("config_index").size().max() > 1:  # a curve needs 2 points
        figs["latency_vs_load"] = ("Latency against load", figures.latency_vs_load(
            runs, list(study.report.latency), obj.slo_target, dict(obj.limits)))
    if isinstance(obj, MaxRate):
        # Goodput per GPU in the sense of DistServe: the highest rate per GPU within the SLOs.
        if "max_rate_per_gpu" in configs and configs["max_rate_per_gpu"].notna().any():
            figs["goodput_per_gpu"] = ("Goodput per GPU: max sustainable rate per GPU",
                                       figures.bars(configs, "max_rate_per_gpu", best))
        if obj.rank_by != "max_rate_per_gpu" and configs[obj.rank_by].notna().any():
            figs["max_rate"] = (figures.nice(obj.rank_by),
                                figures.bars(configs, obj.rank_by, best))
    elif "goodput_per_gpu" in configs and configs["goodput_per_gpu"].notna().any():
        figs["goodput_per_gpu"] = ("Goodput per GPU", figures.bars(
            configs, "goodput_per_gpu", best, configs.get("meets_slo")))
    x, y = default_pareto(plan)
    points, labels = (runs, ["config", "rate"]) if not isinstance(obj, (MaxRate, Cheapest)) \
        else (configs, ["config"])
    if isinstance(obj, Cheapest) and len(points) and "meets_slo" in points:
        points = points[points["meets_slo"]]
    if len(points) and x in points and y in points and \
            (points[x].notna() & points[y].notna()).any():
        figs["pareto"] = (f"Pareto front: {figures.nice(y)} vs {figures.nice(x)}",
                          figures.pareto(points, x, y, labels))
    axes = study.report.heatmap or (tuple(plan.swept[:2]) if len(plan.swept) >= 2 else None)
    metric = out.headline
    if axes and len(configs) and all(a in configs for a in axes) and metric in configs and \
            configs[metric].notna().any():
        missing = "fails SLO" if isinstance(obj, Cheapest) else "–"
        figs["heatmap"] = (f"{figures.nice(metric)} over {axes[0]} × {axes[1]}",
                           figures.heatmap(configs, axes[0], axes[1], metric, missing))
    return figs


def _answer_html(run: StudyRun) -> str:
    out = run.outcome
    if out.best is None:
        return ("<div class='answer none'><b>No configuration qualifies.</b> "
                f"({html.escape(out.note)})</div>")
    b = out.best
    nums = ", ".join(f"{c} = {v}" for c, v in answer_lines(run) if c not in run.plan.swept)
    return (f"<div class='answer'><b>Best: {html.escape(str(b['config']))}</b><br>"
            f"{html.escape(nums)}<br><span class='meta'>{html.escape(out.note)}</span></div>")


def write_report(run: StudyRun, path: Path, figs: dict[str, tuple[str, go.Figure]]) -> Path:
    plan, out, prog = run.plan, run.outcome, run.progress
    s = plan.study
    meta = (f"<p class='meta'>Base scenario <code>{html.escape(str(plan.scenario_path))}</code>; "
            f"objective <b>{s.objective.kind}</b>; {len(plan.configs)} configurations, "
            f"{prog.done} runs ({prog.reused} reused from earlier, {prog.failed} failed) in "
            f"{run.wall_s:.1f} s.</p>")
    parts = [STYLE, meta]
    if run.interrupted:
        parts.append("<p class='answer none'>Interrupted: these are partial results. Run the "
                     "same command again to resume.</p>")
    parts += ["<h2>Answer</h2>", _answer_html(run),
              table_html(out.configs, answer_columns(run), names=headers(run))]
    for i, (heading, fig) in enumerate(figs.values()):
        parts.append(f"<h2>{html.escape(heading)}</h2>" + figure_html(fig, i == 0))
    failed = out.runs[out.runs["status"] != "ok"] if len(out.runs) else out.runs
    if len(failed):
        parts.append("<h2>Failed runs</h2>" + table_html(failed, ["config", "rate", "error"]))
    path.write_text(page(f"servesim study — {plan.name}", parts))
    return path


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return _clean(v.item())
    return v


STUDY_FILES = ("runs.csv", "runs.parquet", "configs.csv", "configs.parquet", "answer.json",
               "report.html", "runs.jsonl")


def write_outputs(run: StudyRun, out_dir: str | Path, png: bool = False) -> dict[str, Path]:
    """Write the tables, the answer and the report (all renamed into place together, so the
    folder never mixes two studies' outputs); returns what was written."""
    answer = {
        "study": run.plan.name, "objective": run.plan.study.objective.kind,
        "note": run.outcome.note, "interrupted": run.interrupted,
        "best": None if run.outcome.best is None
        else {k: _clean(v) for k, v in run.outcome.best.items()},
        "runs": run.progress.done, "failed": run.progress.failed,
        "reused": run.progress.reused, "wall_s": run.wall_s,
    }
    figs = build_figures(run)
    run.warnings = []
    with Staging(out_dir) as st:
        for name, df in (("runs", run.outcome.runs), ("configs", run.outcome.configs)):
            df.to_csv(st.file(f"{name}.csv"), index=False)
            df.to_parquet(st.file(f"{name}.parquet"), index=False)
        st.file("answer.json").write_text(json.dumps(answer, indent=2, default=str))
        write_report(run, st.file("report.html"), figs)
        if png or run.plan.study.report.png:
            run.warnings += write_pngs(figs, st.folder_for("figures"))
        else:
            st.remove("figures", folder=True)  # an earlier run's figures would not match these results
        paths = st.commit()
    run.paths = paths
    return paths


def write_pngs(figs: dict[str, tuple[str, go.Figure]], folder: Path) -> list[str]:
    """Each figure as PNG (kaleido + a Chrome/Chromium); problems become warnings."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return ["PNG figures need kaleido: pip install 'kaleido>=1' (and Chrome or Chromium)"]
    import plotly.io as pio

    names = list(figs)
    try:
        pio.write_images([figs[n][1] for n in names], [folder / f"{n}.png" for n in names],
                         width=1200, height=[figs[n][1].layout.height or 450 for n in names],
                         scale=2)
    except Exception as e:  # no browser, kaleido failure: the study's results still stand
        return [f"could not write PNG figures: {type(e).__name__}: {e}"]
    return []
