"""A study's outputs: the runs and configurations tables, answer.json, report.html, PNGs."""

from __future__ import annotations

import contextlib
import html
import json
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from sim.results import fmt, plotlyjs
from sim.results.atomic import Staging
from sim.results.chart import Chart
from sim.results.fmt import numeric
from sim.results.jsonsafe import json_safe as _clean
from sim.results.plotstyle import config_colors as colors_of
from sim.results.report import figure_html, page
from sim.study import figures
from sim.study.answer_band import answer_band_json, answer_band_text
from sim.study.columns import cell, heading, row_cell
from sim.study.driver import StudyRun
from sim.study.objectives import default_pareto, seeds_text
from sim.study.overrides import get_path, short_names
from sim.study.schema import Cheapest, Curves, MaxRate

STYLE = ("<style>.answer{background:#eef6ee;padding:0.8em 1.2em;border-left:4px solid #009E73;margin:.5em 0}"
         ".answer.none{background:#fbeeee;border-color:#D55E00} .meta{color:#555}"
         "tr.best td{font-weight:600;background:#f3f8f3}</style>")


def _fmt(v) -> str:
    """A value of no particular column (see columns.cell for those)."""
    return cell("", v)


def table_html(df: pd.DataFrame, columns: list[str], limit: int = 200,
               names: dict[str, str] | None = None, best: str | None = None) -> str:
    """The rows of ``df`` under readable headings with units; the ``best`` config's row bold
    with ★."""
    cols = [c for c in columns if c in df]
    texts = [[row_cell(r, c) for c in cols] for _, r in df.head(limit).iterrows()]
    configs = list(df["config"].head(limit)) if "config" in df else [None] * len(texts)
    right = [bool(texts) and all(numeric(t[i]) or t[i] in ("✓", "✗") for t in texts) for i in range(len(cols))]
    align = ["right" if r else "left" for r in right]
    head = "".join(f"<th title='{html.escape(c)}' style='text-align:{a}'>{html.escape(heading(c, names))}</th>"
                   for c, a in zip(cols, align, strict=True))
    rows = []
    for t, config in zip(texts, configs, strict=True):
        star = best is not None and config == best
        tds = "".join(f"<td style='text-align:{a}'>{'★ ' if star and i == 0 else ''}{html.escape(v)}</td>"
                      for i, (v, a) in enumerate(zip(t, align, strict=True)))
        rows.append(f"<tr{' class=best' if star else ''}>{tds}</tr>")
    more = f"<p class='meta'>… {len(df) - limit} more rows in the table files</p>" \
        if len(df) > limit else ""
    return f"<table class='grid'><tr>{head}</tr>{''.join(rows)}</table>{more}"


def answer_columns(run: StudyRun) -> list[str]:
    """The columns that tell the answer, in reading order (swept fields name the config)."""
    plan, obj = run.plan, run.plan.study.objective
    names = list(plan.swept) or ["config"]
    common = ["num_gpus", "cost_per_hour", "cost_per_1m_tokens", "energy_kwh_per_1m_tokens"]
    if isinstance(obj, MaxRate):
        configs = run.outcome.configs
        per_gpu = ["max_rate_per_gpu"] if "num_gpus" in configs and configs["num_gpus"].nunique() > 1 else []
        return [*names, "max_rate", "offered_rate", *per_gpu, "max_rate_per_dollar", *common,
                "slo_attainment", "ttft_p99", "tpot_p99", "outcome", "why"]
    if isinstance(obj, Cheapest):
        return [*names, *common, "verdict", "rate", "offered_rate", "slo_attainment", "goodput_per_gpu",
                "ttft_p99", "tpot_p99", "e2e_p99", "why"]
    return [*names, obj.rank_by, "at_rate", "offered_rate", "max_rate_meeting_slo", "seed_max_rate", *common,
            "pareto_points", "why"]


def headers(run: StudyRun) -> dict[str, str]:
    """Headings of the swept fields: the last part of each path (columns.heading does the rest)."""
    return short_names([c for c in run.plan.swept if c != "case"])


def answer_lines(run: StudyRun) -> list[tuple[str, str]]:
    """(heading, value) pairs describing the answer, for the terminal and the report."""
    b = run.outcome.best
    if b is None:
        return []
    names = headers(run)
    lines = [(heading(c, names), cell(c, b.get(c))) for c in run.plan.swept]
    lines += [(heading(c), row_cell(b, c)) for c in answer_columns(run)
              if c in b and c not in run.plan.swept and c != "config" and not fmt.missing(b.get(c))
              and b.get(c) != ""]
    if b.get("outcome") == "above_bracket":
        lines.append(("note", "passes at the top of the bracket: raise objective.bracket"))
    close = runner_up_within(run.outcome.configs, run.outcome.headline)
    if close is not None:
        lines.append(("note", f"{close} is within the answer's 95% interval: more seeds may change the order"))
    lines.append(("error band", answer_band_text(run)))
    return lines


def none_qualifies(out) -> str:
    """What to do when no configuration qualifies but some are uncertain (a straddled limit)."""
    verdicts = out.configs.get("verdict")
    n = int((verdicts == "uncertain").sum()) if verdicts is not None else 0
    if not n:
        return ""
    one = n == 1
    return (f"{n} {'is' if one else 'are'} uncertain (the 95% interval straddles a limit): more seeds "
            f"may settle {'it' if one else 'them'}. ")


def runner_up_within(configs: pd.DataFrame, headline: str) -> str | None:
    """The second configuration when its interval of the ranking figure overlaps the answer's
    (the order of the two is not settled by these seeds), else None."""
    lo, hi = f"{headline}_lo", f"{headline}_hi"
    if len(configs) < 2 or lo not in configs or hi not in configs:
        return None
    a, b = configs.iloc[0], configs.iloc[1]
    if any(fmt.missing(v) for v in (a[lo], a[hi], b[lo], b[hi])):
        return None
    return str(b["config"]) if a[lo] <= b[hi] and b[lo] <= a[hi] else None


def config_colors(run: StudyRun) -> dict[str, str]:
    """One colour per configuration for every figure of the report, the colour it has in every
    other report too (a compare's included: ``plotstyle.config_colors``)."""
    return colors_of(c.label for c in run.plan.configs)


def build_figures(run: StudyRun) -> dict[str, tuple[str, go.Figure]]:
    """name -> (heading, figure); figures needing data the study lacks, or that would say
    nothing (one value on an axis, a per-GPU copy of a chart where every configuration has the
    same GPUs), are left out."""
    plan, out = run.plan, run.outcome
    study, obj = plan.study, plan.study.objective
    figs: dict[str, tuple[str, go.Figure]] = {}
    runs, configs = out.runs, out.configs
    colors = config_colors(run)
    best = out.best["config"] if out.best else None
    star = " — ★ the answer" if best else ""
    ok = runs[runs["status"] == "ok"] if len(runs) else runs
    order = [str(c) for c in configs["config"]] if "config" in configs else None
    if len(ok) and ok.groupby("config_index").size().max() > 1:  # a curve needs 2 points
        shown = min(len(order or []), figures.MAX_LINES)
        more = f" (the {shown} best of {len(order)} configurations)" if order and len(order) > shown else ""
        rates = list(obj.rates) if isinstance(obj, Curves) else None
        what = ("every run (a line breaks where a run failed)" if rates is not None else
                "every run, the search's probes as points (no line joins rates apart)"
                if isinstance(obj, MaxRate) else "every run")
        figs["latency_vs_load"] = (f"Latency and SLO attainment against load{more}: {what}",
                                   figures.latency_vs_load(runs, list(study.report.latency), obj.slo_target,
                                                           dict(obj.limits), colors, order, rates, best))
    gpus_differ = "num_gpus" in configs and figures.distinct(configs["num_gpus"]) > 1
    if isinstance(obj, MaxRate):
        if configs[obj.rank_by].notna().any():
            figs["max_rate"] = (f"{figures.nice(obj.rank_by)} — ★ the answer",
                                figures.bars(configs, obj.rank_by, best, colors=colors))
        # Goodput per GPU in the sense of DistServe: the highest rate per GPU within the SLOs.
        if obj.rank_by != "max_rate_per_gpu" and gpus_differ and configs["max_rate_per_gpu"].notna().any():
            figs["goodput_per_gpu"] = ("Goodput per GPU: max sustainable rate per GPU",
                                       figures.bars(configs, "max_rate_per_gpu", best, colors=colors))
    elif isinstance(obj, Cheapest):
        if "cost_per_hour" in configs and configs["cost_per_hour"].notna().any():
            figs["cost"] = ("Cost per hour — ★ the answer: the cheapest meeting the SLO; pale: fails it",
                            figures.bars(configs, "cost_per_hour", best, configs.get("meets_slo"), colors))
    elif "goodput_per_gpu" in configs and configs["goodput_per_gpu"].notna().any():
        figs["goodput_per_gpu"] = ("Goodput per GPU — ★ the answer: the best over the rates",
                                   figures.bars(configs, "goodput_per_gpu", best, configs.get("meets_slo"), colors))
    x, y = default_pareto(plan)
    points, labels = (runs, ["config", "rate"]) if not isinstance(obj, (MaxRate, Cheapest)) \
        else (configs, ["config"])
    if isinstance(obj, Cheapest) and len(points) and "meets_slo" in points:
        points = points[points["meets_slo"].fillna(False).astype(bool)]
    if len(points) and x in points and y in points:
        both = points[points[x].notna() & points[y].notna()]
        if len(both) > 1 and figures.distinct(both[x]) > 1 and figures.distinct(both[y]) > 1:
            at = out.best.get("at_rate") if out.best and "rate" in labels else None
            figs["pareto"] = (f"Pareto front: {figures.nice(y)} against {figures.nice(x)}{star}",
                              figures.pareto(points, x, y, labels, colors, best, at))
    axes = study.report.heatmap or heatmap_axes(plan.swept, configs)
    metric = out.headline
    if axes and len(configs) and all(a in configs for a in axes) and metric in configs and \
            configs[metric].notna().any():
        missing = "fails SLO" if isinstance(obj, Cheapest) else "–"
        names = headers(run)
        figs["heatmap"] = (f"{figures.nice(metric)} over {names.get(axes[0], axes[0])} × "
                           f"{names.get(axes[1], axes[1])}{star}",
                           figures.heatmap(configs, axes[0], axes[1], metric, missing, names, best))
    return figs


def heatmap_axes(swept: list[str], configs: pd.DataFrame) -> tuple[str, str] | None:
    """The first two swept fields that vary across each other (fields zipped together would
    fill one cell per row: no heatmap), or None."""
    fields = [f for f in swept if f in configs]
    for i, fx in enumerate(fields):
        for fy in fields[i + 1:]:
            pairs = configs[[fx, fy]].astype(str).drop_duplicates()
            if len(pairs) > max(pairs[fx].nunique(), pairs[fy].nunique()):
                return fx, fy
    return None


def _answer_html(run: StudyRun) -> str:
    out = run.outcome
    if out.best is None:
        return ("<div class='answer none'><b>No configuration qualifies.</b> "
                f"{html.escape(none_qualifies(out))}({html.escape(out.note)})</div>")
    b = out.best
    swept = set(headers(run).values()) | set(run.plan.swept)
    nums = ", ".join(f"{c}: {v}" for c, v in answer_lines(run) if c not in swept)
    return (f"<div class='answer'><b>★ {html.escape(str(b['config']))}</b><br>"
            f"{html.escape(nums)}<br><span class='meta'>{html.escape(out.note)}</span></div>")


def gpu_readings(run: StudyRun) -> list[str]:
    """How each ambiguous GPU family name the study's configurations use was read ("H100 read as
    H100-SXM; write H100-PCIe or H100-NVL for the other H100 cards"): a label says ``gpu=H100``
    as the study wrote it, this says which card ran."""
    from sim.scenario.specs.gpus import resolution

    names = []
    for c in run.plan.configs:
        for field in ("hardware.gpu", *(k for k in c.values if k.endswith(".gpu"))):
            v = get_path(c.data, field)
            if isinstance(v, str) and resolution(v) and v not in names:
                names.append(v)
    return [str(resolution(v)) for v in names]


def _prices_text(plan) -> str:
    """The GPUs' prices per hour and their sources (cost per token: the fleet's $/h over the
    arrival window, per token served)."""
    from sim.results.money import catalog_price_text, cost_per_hour

    ran = [c for c in plan.configs if not c.skipped]
    names = sorted({g for c in ran for g in c.gpus})
    text = catalog_price_text(names, plan.study.prices)
    if any(abs(c.cost_per_hour - cost_per_hour(c.gpus, plan.study.prices)) > 1e-9 for c in ran):
        text += "; hardware.price_per_gpu_hour where a configuration sets it"
    return text


def base_rows(run: StudyRun) -> list[tuple[str, str]]:
    """What the study simulates, from its first configuration: model, traffic, SLO, what varies."""
    from sim.results.describe import has_slo, model_text, slo_text, traffic_text
    from sim.scenario.load import scenario_from_dict

    plan = run.plan
    obj = plan.study.objective
    path = Path(plan.scenario_path)
    with contextlib.suppress(ValueError):  # elsewhere: the absolute path
        path = path.resolve().relative_to(Path.cwd())
    rows = [("base scenario", str(path))]
    config = next((c for c in plan.configs if not c.skipped), None)
    if config is not None:
        try:
            s = scenario_from_dict(config.data, plan.source, plan.base_dir)
            rows += [("model", model_text(s)), ("traffic", traffic_text(s)),
                     ("SLO", slo_text(s.slo) if has_slo(s) else "none set")]
        except Exception:  # a description only: the runs say what went wrong
            pass
    rows += [("GPU", g) for g in gpu_readings(run)]
    limits = ", ".join(f"{heading(k)} ≤ {cell(k, v)}" for k, v in obj.limits.items())
    rows.append(("meets the SLO when", f"≥ {obj.slo_target:.0%} of requests within it" + (f", and {limits}"
                                                                                         if limits else "")))
    rows.append(("seeds", seeds_text(plan.seeds).removeprefix("on ")))
    rows.append(("GPU prices", _prices_text(plan)))
    short = headers(run)
    rows.append(("varies", "; ".join(f if short.get(f, f) == f else f"{short[f]} ({f})" for f in plan.swept)
                 or "nothing"))
    return rows


def write_report(run: StudyRun, path: Path, figs: dict[str, tuple[str, go.Figure]], plotly: str = "file") -> Path:
    from sim.results.report import block_html
    from sim.results.summary_view import Block

    plan, out, prog = run.plan, run.outcome, run.progress
    s = plan.study
    meta = (f"objective {s.objective.kind}; {len(plan.configs)} configurations, "
            f"{prog.done} runs ({prog.reused} reused from earlier, {prog.failed} failed) in {run.wall_s:.1f} s")
    parts = [STYLE]
    if run.interrupted:
        parts.append("<p class='answer none'>Interrupted: these are partial results. Run the "
                     "same command again to resume.</p>")
    parts += ["<h2>Answer</h2>", _answer_html(run),
              table_html(out.configs, answer_columns(run), names=headers(run),
                         best=out.best["config"] if out.best else None)]
    parts.append(block_html(Block("What the study simulates", [list(r) for r in base_rows(run)])))
    for heading_text, fig in figs.values():
        parts.append(f"<h2>{html.escape(heading_text)}</h2>" + figure_html(fig))
    failed = out.runs[out.runs["status"] != "ok"] if len(out.runs) else out.runs
    if len(failed):
        parts.append("<h2>Failed runs</h2>" + table_html(failed, ["config", "rate", "error"]))
    path.write_text(page(f"study: {plan.name}", parts, plotly, meta), encoding="utf-8")
    return path


STUDY_FILES = ("runs.csv", "runs.parquet", "seed_runs.csv", "seed_runs.parquet", "configs.csv", "configs.parquet",
               "answer.json",
               "report.html", "runs.jsonl", plotlyjs.FILE)


def write_outputs(run: StudyRun, out_dir: str | Path, png: bool = False, plotly: str = "file") -> dict[str, Path]:
    """Write the tables, the answer and the report (all renamed into place together, so the
    folder never mixes two studies' outputs); returns what was written."""
    answer = {
        "study": run.plan.name, "objective": run.plan.study.objective.kind, "seeds": run.outcome.seeds,
        "note": run.outcome.note, "interrupted": run.interrupted,
        "best": None if run.outcome.best is None
        else {k: _clean(v) for k, v in run.outcome.best.items()},
        "runs": run.progress.done, "failed": run.progress.failed,
        "reused": run.progress.reused, "wall_s": run.wall_s,
        "error_band": answer_band_json(run),  # how far to trust the answer's figures (sim.pricing.trust)
    }
    from sim.study.intervals import ms_table

    figs = build_figures(run)
    run.warnings = []
    with Staging(out_dir) as st:
        tables = [("runs", run.outcome.runs), ("configs", run.outcome.configs)]
        if run.outcome.seeds > 1:  # every run on its own; runs.* combine each point's seeds
            tables.append(("seed_runs", run.outcome.seed_runs))
        else:
            st.remove("seed_runs.csv")
            st.remove("seed_runs.parquet")
        for name, df in tables:
            ms_table(df).to_csv(st.file(f"{name}.csv"), index=False)  # latencies in ms (parquet: seconds)
            df.to_parquet(st.file(f"{name}.parquet"), index=False)
        st.file("answer.json").write_text(json.dumps(answer, indent=2, default=str))
        write_report(run, st.file("report.html"), figs, plotly)
        plotlyjs.stage(st, plotly)
        if png or run.plan.study.report.png:
            run.warnings += write_pngs(figs, st.folder_for("figures"))
            if run.warnings:  # no figures: no empty folder either
                st.drop("figures")
                st.remove("figures", folder=True)
        else:
            st.remove("figures", folder=True)  # an earlier run's figures would not match these results
        paths = st.commit()
    run.paths = paths
    return paths


def png_problem() -> str | None:
    """Why PNG figures cannot be written here (no kaleido, no Chrome/Chromium), or None."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return "PNG figures need kaleido: pip install 'kaleido>=1' (and Chrome or Chromium)"
    try:
        from choreographer.browsers.chromium import Chromium
    except ImportError:  # another kaleido layout: let it try
        return None
    try:
        found = Chromium.find_browser(skip_local=False)
    except Exception:  # its own search failed: let kaleido try and report
        return None
    if not found:
        return ("PNG figures need Chrome or Chromium, and kaleido found neither: install one, or run "
                "python -c 'import kaleido; kaleido.get_chrome_sync()'")
    return None


def write_pngs(figs: dict[str, tuple[str, go.Figure]], folder: Path) -> list[str]:
    """Each figure as PNG (kaleido + a Chrome/Chromium); problems become warnings."""
    folder.mkdir(parents=True, exist_ok=True)
    problem = png_problem()
    if problem:
        return [problem]
    import plotly.io as pio

    names = list(figs)
    # a report's Chart (sim.results.chart) is a plain figure dict here
    plain = [f.to_dict() if isinstance(f, Chart) else f.to_plotly_json() for f in (figs[n][1] for n in names)]
    try:
        pio.write_images(plain, [folder / f"{n}.png" for n in names], width=1200,
                         height=[f["layout"].get("height") or 450 for f in plain], scale=2)
    except Exception as e:  # kaleido failure: the study's results still stand
        return [f"could not write PNG figures: {type(e).__name__}: {e}"]
    return []
