"""The questions a study answers: searches to run per configuration, then the tables.

- ``max_rate``: bisection on the arrival rate; the answer is the configuration with the
  highest sustainable rate (or per GPU, or per dollar).
- ``cheapest``: one run per configuration at the target rate; the answer is the lowest
  cost per hour among the configurations that meet the SLOs.
- ``curves``: every configuration at every rate; the answer is the Pareto front.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sim.results import fmt
from sim.results.money import token_costs
from sim.study.intervals import MEETS, METHOD, UNCERTAIN, combine, interval
from sim.study.intervals import verdict as judge
from sim.study.overrides import show
from sim.study.plan import Plan
from sim.study.schema import RUN_METRICS, Acceptance, Cheapest, Curves, MaxRate
from sim.study.search import Bisection, FixedRates, Record, Search

# Metrics where less is better; everything else (rates, goodput, attainment) is maximised.
_LOWER_IS_BETTER = ("ttft", "tpot", "e2e", "queueing_delay", "cost", "num_gpus", "preemptions",
                    "rejected", "unfinished")


def lower_is_better(metric: str) -> bool:
    return any(word in metric for word in _LOWER_IS_BETTER)


def judge_run(acc: Acceptance, rec: dict) -> tuple[str, str]:
    """One run's verdict (``meets`` or ``fails``: one seed's interval is its value) and why not."""
    return judge([rec.get("summary") or {}], [rec.get("status")], [rec.get("error")], acc.slo_target,
                 dict(acc.limits))


def passes(acc: Acceptance, rec: dict) -> bool:
    """A run meets the SLOs: enough requests within the limits, and every summary limit held."""
    return judge_run(acc, rec)[0] == MEETS


def make_searches(plan: Plan) -> list[Search]:
    """One search per configuration and seed (``plan.seeds``): a capacity search bisects each
    seed on its own; fixed rates run every rate on every seed."""
    obj = plan.study.objective
    out: list[Search] = []
    for c in plan.configs:
        if c.skipped:
            continue
        for k in range(plan.seeds):
            if isinstance(obj, MaxRate):
                out.append(Bisection(c.index, *obj.bracket, lambda r, o=obj: passes(o, r),
                                     obj.rel_tol, obj.abs_tol, seed=k))
            elif isinstance(obj, Curves):
                out.append(FixedRates(c.index, list(obj.rates), seed=k))
            else:
                out.append(FixedRates(c.index, [obj.rate], seed=k))
    return out


@dataclass
class Outcome:
    runs: pd.DataFrame  # one row per configuration and rate, its seeds combined (mean, interval)
    configs: pd.DataFrame  # one row per configuration, best first
    best: dict[str, Any] | None  # the answer's row, or None when nothing qualifies
    headline: str  # the column that ranks configurations
    note: str  # one line saying what the answer means
    seed_runs: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per run (per seed)
    seeds: int = 1


SUMMARY_COLUMNS = list(RUN_METRICS)
# The runs table's first columns after the configuration's: the stated rate, then what it was.
RATE_COLUMNS = ["rate", "offered_rate"]


def _cell(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool)) or v is None else show(v)


def _config_columns(plan: Plan, index: int) -> dict[str, Any]:
    c = plan.configs[index]
    return {"config": c.label, "config_index": c.index,
            **{k: _cell(v) for k, v in c.values.items()},
            "num_gpus": c.num_gpus, "gpus": show(c.gpus), "cost_per_hour": c.cost_per_hour}


def _numeric(df: pd.DataFrame) -> pd.DataFrame:
    if len(df):
        num = [c for c in df if c in SUMMARY_COLUMNS or c.endswith(("_lo", "_hi"))]
        df[num] = df[num].apply(pd.to_numeric, errors="coerce")
    return df


def _rate_order(rate: float | None) -> tuple[bool, float]:
    return rate is None, rate or 0.0


def seed_runs_table(plan: Plan, searches: list[Search]) -> pd.DataFrame:
    """Every run: one row per configuration, rate and seed, judged on its own."""
    acc = plan.study.objective
    rows = []
    for s in sorted(searches, key=lambda s: (s.config, s.seed)):
        for rate, rec in sorted(s.records.items(), key=lambda kv: _rate_order(kv[0])):
            summary = priced(rec, plan.configs[s.config].cost_per_hour).get("summary") or {}
            rows.append({
                **_config_columns(plan, s.config), "rate": rate, "offered_rate": summary.get("offered_rate"),
                "seed": plan.seed_of(plan.configs[s.config], s.seed), "key": rec.get("key"),
                "status": rec.get("status"), "error": rec.get("error"),
                "meets_slo": passes(acc, rec), "why": judge_run(acc, rec)[1],
                "wall_s": rec.get("wall_s"), **{k: summary.get(k) for k in SUMMARY_COLUMNS if k not in RATE_COLUMNS},
            })
    return _numeric(pd.DataFrame(rows))


def point_records(searches: list[Search]) -> dict[tuple[int, float | None], list[Record]]:
    """(configuration, rate) -> the records of its runs, one per seed that ran it, in seed order."""
    out: dict[tuple[int, float | None], list[Record]] = {}
    for s in sorted(searches, key=lambda s: (s.config, s.seed)):
        for rate, rec in s.records.items():
            out.setdefault((s.config, rate), []).append(rec)
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], *_rate_order(kv[0][1]))))


def combined(recs: list[Record], acc: Acceptance, intervals: bool) -> dict[str, Any]:
    """The seeds' runs of one point as one row: each metric's mean (with ``_lo``/``_hi``, its 95 %
    interval, when ``intervals``), the verdict on the interval, and why it is not met."""
    summaries = [r.get("summary") or {} for r in recs]
    statuses = [r.get("status") for r in recs]
    errors = [r.get("error") for r in recs]
    verdict, why = judge(summaries, statuses, errors, acc.slo_target, dict(acc.limits))
    values = combine(summaries, SUMMARY_COLUMNS)
    if not intervals:
        values = {k: v for k, v in values.items() if k in SUMMARY_COLUMNS}
    return {"seeds": len(recs), "key": ",".join(str(r.get("key")) for r in recs),
            "status": "ok" if all(st == "ok" for st in statuses) else "error",
            "error": next((e for e in errors if e), None), "verdict": verdict,
            "meets_slo": verdict == MEETS, "why": why,
            "wall_s": sum(r.get("wall_s") or 0.0 for r in recs), **values}


def priced(rec: Record, usd_per_hour: float) -> Record:
    """A run's record with its cost per token at the study's price of its configuration
    (``prices``), not only the scenario's own (``money``)."""
    summary = rec.get("summary")
    if rec.get("status") != "ok" or not summary:
        return rec
    return {**rec, "summary": {**summary, **token_costs(usd_per_hour, summary)}}


def runs_table(plan: Plan, searches: list[Search]) -> pd.DataFrame:
    """One row per configuration and rate: its seeds' runs combined (``combined``)."""
    acc = plan.study.objective
    rows = []
    for (config, rate), recs in point_records(searches).items():
        recs = [priced(r, plan.configs[config].cost_per_hour) for r in recs]
        row = {**_config_columns(plan, config), "rate": rate, **combined(recs, acc, plan.seeds > 1)}
        first = [*_config_columns(plan, config), *RATE_COLUMNS]
        rows.append({**{c: row.get(c) for c in first}, **row})
    return _numeric(pd.DataFrame(rows))


# How ties on the ranking metric are broken, after the metric itself: the columns in order,
# each in its better direction, then the rows' own order (the configurations' order).
TIE_BREAK = ("cost_per_hour", "num_gpus")


def tie_rule(then: Sequence[str] = ()) -> str:
    """The tie-break rule of ``rank`` in words, for an answer's note."""
    names = {"cost_per_hour": "lower $/h", "num_gpus": "fewer GPUs"}
    steps = [names[c] for c in TIE_BREAK] + [f"{'lower' if lower_is_better(c) else 'higher'} {c}"
                                            for c in then if c not in TIE_BREAK]
    return "ties broken by " + ", then ".join([*steps, "the configurations' order"])


def rank(frame: pd.DataFrame, metric: str, then: Sequence[str] = ()) -> pd.DataFrame:
    """``frame``'s rows best first: by ``metric`` in its better direction (missing values
    last), ties broken by ``tie_rule``: lower ``cost_per_hour``, fewer ``num_gpus``, each of
    ``then`` in its better direction, then the rows' own order. Columns the frame lacks are
    skipped. The one ranking rule of studies and compare, so both mark the same winner."""
    if frame.empty or metric not in frame:
        return frame
    cols = list(dict.fromkeys([metric, *TIE_BREAK, *then]))
    cols = [c for c in cols if c in frame]
    keys = pd.DataFrame({f"k{i}": pd.to_numeric(frame[c], errors="coerce") for i, c in enumerate(cols)},
                        index=frame.index)
    keys["order"] = np.arange(len(frame))
    order = keys.sort_values(list(keys.columns), ascending=[lower_is_better(c) for c in cols] + [True],
                             na_position="last").index
    return frame.loc[order]


def pick_best(frame: pd.DataFrame, metric: str, then: Sequence[str] = ()) -> pd.Series | None:
    """The best row of ``frame`` by ``rank`` among those with a value of ``metric``, or None."""
    ok = frame[frame[metric].notna()] if metric in frame else frame.iloc[:0]
    if ok.empty:
        return None
    return rank(ok, metric, then).iloc[0]


def evaluate(plan: Plan, searches: list[Search]) -> Outcome:
    runs = runs_table(plan, searches)
    obj = plan.study.objective
    if isinstance(obj, MaxRate):
        out = _max_rate(plan, searches, runs, obj)
    elif isinstance(obj, Cheapest):
        out = _cheapest(plan, runs, obj)
    else:
        out = _curves(plan, runs, obj, searches)
    out.seed_runs, out.seeds = seed_runs_table(plan, searches), plan.seeds
    return out


def _point(runs: pd.DataFrame, config: int, rate) -> pd.Series | None:
    """The runs table's row of ``config`` at ``rate``, or None."""
    if runs.empty:
        return None
    sel = runs[(runs["config_index"] == config)
               & ((runs["rate"] == rate) if rate is not None else runs["rate"].isna())]
    return None if sel.empty else sel.iloc[0]


def _summary_of(row: pd.Series | None) -> dict[str, Any]:
    """A runs-table row's figures (and intervals) for a configurations-table row."""
    if row is None:
        return {}
    return {k: row[k] for k in row.index
            if k in SUMMARY_COLUMNS or (k.endswith(("_lo", "_hi")) and k[:-3] in SUMMARY_COLUMNS)}


def _with_skipped(plan: Plan, configs: pd.DataFrame) -> pd.DataFrame:
    """Rows for the configurations that could not run, saying why."""
    rows = [{**_config_columns(plan, c.index), "outcome": "skipped", "error": c.skipped,
             "why": f"cannot run: {c.skipped}"} for c in plan.configs if c.skipped]
    if not rows:
        return configs
    return pd.concat([configs, pd.DataFrame(rows)], ignore_index=True)


def _then(plan: Plan, headline: str) -> tuple[str, ...]:
    """The metric that breaks ties after cost and GPUs: the Pareto chart's other axis, so that
    the answer sits on the front."""
    x, y = default_pareto(plan)
    return tuple(m for m in (y, x) if m != headline and m not in TIE_BREAK)[:1]


def seeds_text(n: int) -> str:
    """How many seeds each figure stands on, and what its interval is, for an answer's note."""
    if n == 1:
        return "on 1 seed (--seeds N for intervals)"
    return (f"on {n} seeds: {METHOD}; a configuration meets the SLO when the whole interval "
            "does, is uncertain when it straddles a limit")


def _finish(configs: pd.DataFrame, headline: str, note: str, runs: pd.DataFrame,
            plan: Plan) -> Outcome:
    configs = _with_skipped(plan, configs)
    then = _then(plan, headline)
    best = pick_best(configs, headline, then)
    if not configs.empty and headline in configs:
        configs = rank(configs, headline, then).reset_index(drop=True)
    note = f"{note}; {seeds_text(plan.seeds)}; {tie_rule(then)}"
    return Outcome(runs, configs, None if best is None else best.to_dict(), headline, note)


def _limits_text(acc: Acceptance) -> str:
    return "".join(f", {k} ≤ ${v:g}" if k.startswith("cost_") else f", {k} ≤ {v:g} s" for k, v in acc.limits.items())


def _with_interval(row: dict, name: str, values: list[float], seeds: int) -> None:
    """``name`` (the mean of ``values``), with ``name_lo``/``name_hi`` when there are seeds."""
    iv = interval(values, name)
    row[name] = iv.mean if iv.n else None
    if seeds > 1:
        row[f"{name}_lo"], row[f"{name}_hi"] = (iv.lo, iv.hi) if iv.n else (None, None)


def _capacity(plan, runs, config: int, group: list[Bisection], obj: MaxRate) -> dict[str, Any]:
    """One configuration's capacity over its seeds' searches: each seed's highest passing rate,
    their mean and t interval (``capacity``: the figure as text, ``≥ X`` when a seed passed at
    the top of the bracket, ``< X`` when the seeds fail even at its bottom)."""
    n = len(group)
    lo, hi = group[0]._span
    outcomes = [s.outcome for s in group]
    row: dict[str, Any] = {"seeds": n, "probes": sum(len(s.records) for s in group), "error": None,
                           "why": None}
    error = next((s for s in group if s.outcome == "error"), None)
    below = outcomes.count("below_bracket")
    if error is not None:
        row |= {"outcome": "error", "error": error.error, "max_rate": None, "capacity": "–",
                "why": f"run failed: {error.error}"}
        at = None
    elif below:
        at_lo = _point(runs, config, lo)
        why = at_lo["why"] if at_lo is not None else ""
        of = "" if below == n else f" on {below} of {n} seeds"
        row |= {"outcome": "below_bracket" if below == n else "uncertain", "max_rate": None,
                "capacity": f"< {lo:g}{of}", "why": f"fails at the lowest rate tried, {lo:g} req/s{of}: {why}"}
        at = [(s, lo) for s in group]
    else:
        rates = [s.best_rate for s in group]
        _with_interval(row, "max_rate", rates, plan.seeds)
        top = outcomes.count("above_bracket")
        iv = interval(rates, "max_rate")
        text = f"{fmt.num(iv.mean)}" + ("" if iv.point else f" ({fmt.num(iv.lo)}–{fmt.num(iv.hi)})")
        row |= {"outcome": "above_bracket" if top == n else "found",
                "upper_bound": float(np.mean([s.hi for s in group])) if top < n else None,
                "capacity": f"≥ {hi:g}" if top == n else (f"≥ {text}" if top else text)}
        at = [(s, s.best_rate) for s in group]
    c = plan.configs[config]
    if row.get("max_rate") is not None:
        per = {"max_rate_per_gpu": c.num_gpus, "max_rate_per_dollar": c.cost_per_hour / 3600
               if c.cost_per_hour else None}
        for name, div in per.items():
            for suffix in ("", "_lo", "_hi"):
                if f"max_rate{suffix}" in row:
                    row[f"{name}{suffix}"] = row[f"max_rate{suffix}"] / div if div else None
    if at:  # the figures of each seed's run at its own answer (or at the bottom of the bracket)
        recs = [s.records[r] for s, r in at if r in s.records]
        point = combined(recs, obj, plan.seeds > 1)
        row |= {k: v for k, v in point.items() if k in SUMMARY_COLUMNS or k.endswith(("_lo", "_hi"))}
    return row


def _max_rate(plan, searches, runs, obj: MaxRate) -> Outcome:
    groups: dict[int, list[Bisection]] = {}
    for s in searches:
        assert isinstance(s, Bisection)
        groups.setdefault(s.config, []).append(s)
    rows = [{**_config_columns(plan, config), **_capacity(plan, runs, config, group, obj)}
            for config, group in groups.items()]
    configs = pd.DataFrame(rows)
    units = {"max_rate": "req/s", "max_rate_per_gpu": "req/s per GPU",
             "max_rate_per_dollar": "requests per dollar", "cost_per_1m_tokens": "USD per 1M tokens at the max rate",
             "cost_per_1m_output_tokens": "USD per 1M output tokens at the max rate"}
    note = (f"highest arrival rate with SLO attainment ≥ {obj.slo_target:.0%}{_limits_text(obj)}, "
            f"ranked by {obj.rank_by} ({units[obj.rank_by]})"
            + ("; each seed's search finds its own highest passing rate" if plan.seeds > 1 else ""))
    return _finish(configs, obj.rank_by, note, runs, plan)


def _cheapest(plan, runs, obj: Cheapest) -> Outcome:
    rows = []
    qualifying = f"qualifying_{obj.rank_by}"
    for c in plan.configs:
        if c.skipped:
            continue
        point = _point(runs, c.index, obj.rate)
        ok = point is not None and point["verdict"] == MEETS
        rows.append({**_config_columns(plan, c.index),
                     **({k: point[k] for k in ("seeds", "verdict", "meets_slo", "why", "status", "error")}
                        if point is not None else {"meets_slo": False}),
                     qualifying: (c.cost_per_hour if obj.rank_by == "cost_per_hour" else point[obj.rank_by])
                     if ok else None,
                     "rate": obj.rate, **_summary_of(point)})
    configs = pd.DataFrame(rows)
    at = f"{obj.rate:g} req/s" if obj.rate else "the scenario's traffic"
    what = {"cost_per_hour": "GPU cost per hour", "cost_per_1m_tokens": "cost per 1M tokens (prompt + output)",
            "cost_per_1m_output_tokens": "cost per 1M output tokens"}[obj.rank_by]
    note = f"lowest {what} meeting SLO attainment ≥ {obj.slo_target:.0%}{_limits_text(obj)} at {at}"
    out = _finish(configs, qualifying, note, runs, plan)
    if not out.configs.empty and "verdict" in out.configs:  # passing ones first, then uncertain, then the rest
        cfg = out.configs
        group = cfg["verdict"].map({MEETS: 0, UNCERTAIN: 1}).fillna(2)
        rest = cfg[group > 0].assign(_g=group[group > 0]).sort_values(
            ["_g", "slo_attainment"], ascending=[True, False], kind="stable", na_position="last")
        out.configs = pd.concat([cfg[group == 0], rest.drop(columns="_g")]).reset_index(drop=True)
    return out


def pareto_mask(x: np.ndarray, y: np.ndarray, x_min: bool, y_min: bool) -> np.ndarray:
    """Points that no other point beats on both axes (NaN points are never on the front)."""
    xs = np.where(x_min, x, -x).astype(float)
    ys = np.where(y_min, y, -y).astype(float)
    ok = ~(np.isnan(xs) | np.isnan(ys))
    front = np.zeros(len(xs), dtype=bool)
    for i in np.flatnonzero(ok):
        better = ok & (xs <= xs[i]) & (ys <= ys[i]) & ((xs < xs[i]) | (ys < ys[i]))
        front[i] = not better.any()
    return front


def default_pareto(plan: Plan) -> tuple[str, str]:
    obj = plan.study.objective
    if plan.study.report.pareto:
        return plan.study.report.pareto
    if isinstance(obj, MaxRate):
        return ("cost_per_hour", "max_rate")
    if isinstance(obj, Cheapest):
        return ("cost_per_hour", "ttft_p99")
    return ("goodput_per_gpu", "ttft_p99")


def _per_seed_capacity(searches: list[Search], config: int, acc: Acceptance) -> list[float | None]:
    """Each seed's highest rate whose own run passes (None: none passes)."""
    out = []
    for s in sorted((s for s in searches if s.config == config), key=lambda s: s.seed):
        good = [r for r, rec in s.records.items() if r is not None and passes(acc, rec)]
        out.append(max(good) if good else None)
    return out


def _curves(plan, runs, obj: Curves, searches: list[Search]) -> Outcome:
    """Each configuration's best ``rank_by`` among the rates that meet the SLO (never one that
    fails it), and its highest rate meeting it: ``≥ X`` when that is the top rate tried, ``< X``
    when even the lowest fails. With several seeds, ``seed_max_rate`` is the mean of each seed's
    own highest passing rate, with its t interval (only when every seed passes at some rate)."""
    rows = []
    top, bottom = max(obj.rates), min(obj.rates)
    for c in plan.configs:
        if c.skipped:
            continue
        recs = runs[runs["config_index"] == c.index] if len(runs) else runs
        good = recs[recs["verdict"] == MEETS] if len(recs) else recs
        best_rate = float(good["rate"].max()) if len(good) else None
        row = {**_config_columns(plan, c.index), "runs": int(recs["seeds"].sum()) if len(recs) else 0,
               "failed": int((recs["status"] != "ok").sum()) if len(recs) else 0,
               "max_rate_meeting_slo": best_rate,
               "capacity": f"< {bottom:g}" if best_rate is None else
               f"≥ {top:g}" if best_rate == top else f"{best_rate:g}",
               "verdict": MEETS if len(good) else UNCERTAIN if (recs["verdict"] == UNCERTAIN).any() else "fails"}
        per_seed = _per_seed_capacity(searches, c.index, obj)
        if plan.seeds > 1 and None not in per_seed:
            _with_interval(row, "seed_max_rate", per_seed, plan.seeds)
        if not len(good):
            lowest = _point(runs, c.index, bottom)
            row["why"] = (f"no rate meets the SLO; at {bottom:g} req/s: {lowest['why']}"
                          if lowest is not None else "no rate meets the SLO")
        metric = obj.rank_by
        if len(good) and metric in good and good[metric].notna().any():
            best = pick_best(good, metric)
            row |= {metric: best[metric], "at_rate": best["rate"], "offered_rate": best["offered_rate"]}
            row |= {f"{m}{suffix}": best[f"{m}{suffix}"] for m in (metric, "offered_rate")
                    for suffix in ("_lo", "_hi") if f"{m}{suffix}" in best}
        if "goodput_per_gpu" not in row:  # (the bars of goodput per GPU)
            row["goodput_per_gpu"] = float(good["goodput_per_gpu"].max()) if len(good) else None
        rows.append(row)
    configs = pd.DataFrame(rows)
    x, y = default_pareto(plan)
    if len(runs) and x in runs and y in runs:
        runs["pareto"] = pareto_mask(runs[x].to_numpy(float), runs[y].to_numpy(float),
                                     lower_is_better(x), lower_is_better(y))
        on_front = runs[runs["pareto"]].groupby("config_index").size()
        configs["pareto_points"] = configs["config_index"].map(on_front).fillna(0).astype(int)
    note = (f"best {obj.rank_by} over the rates {', '.join(f'{r:g}' for r in obj.rates)} req/s that meet "
            f"SLO attainment ≥ {obj.slo_target:.0%}{_limits_text(obj)}; Pareto front on {x} vs {y}")
    return _finish(configs, obj.rank_by, note, runs, plan)
