"""The questions a study answers: searches to run per configuration, then the tables.

- ``max_rate``: bisection on the arrival rate; the answer is the configuration with the
  highest sustainable rate (or per GPU, or per dollar).
- ``cheapest``: one run per configuration at the target rate; the answer is the lowest
  cost per hour among the configurations that meet the SLOs.
- ``curves``: every configuration at every rate; the answer is the Pareto front.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sim.results.money import token_costs
from sim.study.overrides import show
from sim.study.plan import Plan
from sim.study.schema import RUN_METRICS, Acceptance, Cheapest, Curves, MaxRate
from sim.study.search import Bisection, FixedRates, Search

# Metrics where less is better; everything else (rates, goodput, attainment) is maximised.
_LOWER_IS_BETTER = ("ttft", "tpot", "e2e", "queueing_delay", "cost", "num_gpus", "preemptions",
                    "rejected", "unfinished")


def lower_is_better(metric: str) -> bool:
    return any(word in metric for word in _LOWER_IS_BETTER)


def passes(acc: Acceptance, rec: dict) -> bool:
    """A run meets the SLOs: enough requests within the limits, and every summary limit held."""
    if rec.get("status") != "ok":
        return False
    s = rec.get("summary") or {}
    att = s.get("slo_attainment")
    if att is None or att < acc.slo_target:
        return False
    for metric, limit in acc.limits.items():
        v = s.get(metric)
        if v is None or not v <= limit:
            return False
    return True


def make_searches(plan: Plan) -> list[Search]:
    obj = plan.study.objective
    out: list[Search] = []
    for c in plan.configs:
        if c.skipped:
            continue
        if isinstance(obj, MaxRate):
            out.append(Bisection(c.index, *obj.bracket, lambda r, o=obj: passes(o, r),
                                 obj.rel_tol, obj.abs_tol))
        elif isinstance(obj, Curves):
            out.append(FixedRates(c.index, list(obj.rates)))
        else:
            out.append(FixedRates(c.index, [obj.rate]))
    return out


@dataclass
class Outcome:
    runs: pd.DataFrame  # one row per run
    configs: pd.DataFrame  # one row per configuration, best first
    best: dict[str, Any] | None  # the answer's row, or None when nothing qualifies
    headline: str  # the column that ranks configurations
    note: str  # one line saying what the answer means


SUMMARY_COLUMNS = list(RUN_METRICS)


def _cell(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool)) or v is None else show(v)


def _config_columns(plan: Plan, index: int) -> dict[str, Any]:
    c = plan.configs[index]
    return {"config": c.label, "config_index": c.index,
            **{k: _cell(v) for k, v in c.values.items()},
            "num_gpus": c.num_gpus, "gpus": show(c.gpus), "cost_per_hour": c.cost_per_hour}


def runs_table(plan: Plan, searches: list[Search]) -> pd.DataFrame:
    acc = plan.study.objective
    rows = []
    for s in searches:
        usd_per_hour = plan.configs[s.config].cost_per_hour  # the study's prices too
        for rate, rec in sorted(s.records.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            summary = rec.get("summary") or {}
            rows.append({
                **_config_columns(plan, s.config), "rate": rate, "key": rec.get("key"),
                "status": rec.get("status"), "error": rec.get("error"),
                "meets_slo": passes(acc, rec), "wall_s": rec.get("wall_s"),
                **{k: summary.get(k) for k in SUMMARY_COLUMNS},
                **(token_costs(usd_per_hour, summary) if rec.get("status") == "ok" else {}),
            })
    df = pd.DataFrame(rows)
    if len(df):
        num = [c for c in SUMMARY_COLUMNS if c in df]
        df[num] = df[num].apply(pd.to_numeric, errors="coerce")
    return df


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
        return _max_rate(plan, searches, runs, obj)
    if isinstance(obj, Cheapest):
        return _cheapest(plan, searches, runs, obj)
    return _curves(plan, searches, runs, obj)


def _summary_at(runs: pd.DataFrame, config: int, rate) -> dict[str, Any]:
    if runs.empty:
        return {}
    sel = runs[(runs["config_index"] == config)
               & ((runs["rate"] == rate) if rate is not None else runs["rate"].isna())]
    if sel.empty:
        return {}
    row = sel.iloc[0]
    return {k: row[k] for k in SUMMARY_COLUMNS if k in row}


def _with_skipped(plan: Plan, configs: pd.DataFrame) -> pd.DataFrame:
    """Rows for the configurations that could not run, saying why."""
    rows = [{**_config_columns(plan, c.index), "outcome": "skipped", "error": c.skipped}
            for c in plan.configs if c.skipped]
    if not rows:
        return configs
    return pd.concat([configs, pd.DataFrame(rows)], ignore_index=True)


def _then(plan: Plan, headline: str) -> tuple[str, ...]:
    """The metric that breaks ties after cost and GPUs: the Pareto chart's other axis, so that
    the answer sits on the front."""
    x, y = default_pareto(plan)
    return tuple(m for m in (y, x) if m != headline and m not in TIE_BREAK)[:1]


def _finish(configs: pd.DataFrame, headline: str, note: str, runs: pd.DataFrame,
            plan: Plan) -> Outcome:
    configs = _with_skipped(plan, configs)
    then = _then(plan, headline)
    best = pick_best(configs, headline, then)
    if not configs.empty and headline in configs:
        configs = rank(configs, headline, then).reset_index(drop=True)
    note = f"{note}; {tie_rule(then)}"
    return Outcome(runs, configs, None if best is None else best.to_dict(), headline, note)


def _max_rate(plan, searches, runs, obj: MaxRate) -> Outcome:
    rows = []
    for s in searches:
        assert isinstance(s, Bisection)
        c = plan.configs[s.config]
        rate = s.best_rate
        row = {**_config_columns(plan, s.config), "outcome": s.outcome, "error": s.error,
               "max_rate": rate, "upper_bound": s.hi if s.outcome == "found" else None,
               "probes": len(s.records)}
        row["max_rate_per_gpu"] = rate / c.num_gpus if rate else None
        row["max_rate_per_dollar"] = (rate * 3600 / c.cost_per_hour
                                      if rate and c.cost_per_hour else None)
        rows.append({**row, **_summary_at(runs, s.config, rate)})
    configs = pd.DataFrame(rows)
    units = {"max_rate": "req/s", "max_rate_per_gpu": "req/s per GPU",
             "max_rate_per_dollar": "requests per dollar", "cost_per_1m_tokens": "USD per 1M tokens at the max rate",
             "cost_per_1m_output_tokens": "USD per 1M output tokens at the max rate"}
    limits = "".join(f", {k} ≤ {v:g} s" for k, v in obj.limits.items())
    note = (f"highest arrival rate with SLO attainment ≥ {obj.slo_target:.0%}{limits}, "
            f"ranked by {obj.rank_by} ({units[obj.rank_by]})")
    return _finish(configs, obj.rank_by, note, runs, plan)


def _cheapest(plan, searches, runs, obj: Cheapest) -> Outcome:
    rows = []
    qualifying = f"qualifying_{obj.rank_by}"
    for s in searches:
        rec = s.records.get(obj.rate, {})
        ok = passes(obj, rec)
        at = _summary_at(runs, s.config, obj.rate)
        cost = plan.configs[s.config].cost_per_hour if obj.rank_by == "cost_per_hour" else at.get(obj.rank_by)
        rows.append({**_config_columns(plan, s.config), "meets_slo": ok,
                     "status": rec.get("status"), "error": rec.get("error"),
                     qualifying: cost if ok else None, **at})
    configs = pd.DataFrame(rows)
    at = f"{obj.rate:g} req/s" if obj.rate else "the scenario's traffic"
    limits = "".join(f", {k} ≤ {v:g} s" for k, v in obj.limits.items())
    what = {"cost_per_hour": "GPU cost per hour", "cost_per_1m_tokens": "cost per 1M tokens (prompt + output)",
            "cost_per_1m_output_tokens": "cost per 1M output tokens"}[obj.rank_by]
    note = f"lowest {what} meeting SLO attainment ≥ {obj.slo_target:.0%}{limits} at {at}"
    out = _finish(configs, qualifying, note, runs, plan)
    if not out.configs.empty:  # passing ones by cost, then the rest by attainment
        cfg = out.configs
        meets = cfg["meets_slo"].fillna(False).astype(bool)
        cfg = pd.concat([cfg[meets].sort_values(obj.rank_by, kind="stable"),
                         cfg[~meets].sort_values("slo_attainment", ascending=False,
                                                 kind="stable", na_position="last")])
        out.configs = cfg.reset_index(drop=True)
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


def _curves(plan, searches, runs, obj: Curves) -> Outcome:
    rows = []
    for s in searches:
        recs = runs[runs["config_index"] == s.config] if len(runs) else runs
        good = recs[recs["meets_slo"]] if len(recs) else recs
        row = {**_config_columns(plan, s.config), "runs": len(recs),
               "failed": int((recs["status"] != "ok").sum()) if len(recs) else 0,
               "max_rate_meeting_slo": float(good["rate"].max()) if len(good) else None,
               "goodput_per_gpu": float(recs["goodput_per_gpu"].max())
               if len(recs) and recs["goodput_per_gpu"].notna().any() else None}
        metric = obj.rank_by
        if len(recs) and metric in recs and recs[metric].notna().any():
            best = pick_best(recs, metric)
            row[metric] = best[metric]
            row["at_rate"] = best["rate"]
        rows.append(row)
    configs = pd.DataFrame(rows)
    x, y = default_pareto(plan)
    if len(runs) and x in runs and y in runs:
        runs["pareto"] = pareto_mask(runs[x].to_numpy(float), runs[y].to_numpy(float),
                                     lower_is_better(x), lower_is_better(y))
        on_front = runs[runs["pareto"]].groupby("config_index").size()
        configs["pareto_points"] = configs["config_index"].map(on_front).fillna(0).astype(int)
    note = (f"best {obj.rank_by} over rates {', '.join(f'{r:g}' for r in obj.rates)} req/s; "
            f"Pareto front on {x} vs {y}")
    return _finish(configs, obj.rank_by, note, runs, plan)
