"""``servesim plan``: a planner's two questions in one command, without a study file.

- *What is the cheapest configuration (fewest GPUs) for this traffic under this SLO?*
  (``--rate R``) Given replica counts (``--replicas``, or prefill:decode splits with ``--pd``),
  one ``cheapest`` study runs them all at the rate. Otherwise the fleet is sized first: a
  ``max_rate`` study finds what one replica of each GPU × TP × policy × engine sustains, and
  the ``cheapest`` study then runs ⌈R / that⌉ replicas, one fewer and one more, at R — the
  answer always comes from runs at the rate asked about, never from the estimate.
- *What rate does this configuration sustain?* (``--max-rate``) one ``max_rate`` study.

The study is built in memory (``build_study``) and run by the study machinery (``plan_study``,
``execute_plan``, ``write_outputs``): seeds, intervals, the ranking rule and the report are the
studies'. Its study file is written beside its results (``plan.yaml``), so
``servesim study <out>/plan.yaml`` runs it again.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, get_args

import yaml

from sim.study.intervals import UNCERTAIN
from sim.study.schema import COST_BOUNDS, LATENCY_METRIC, MaxRate, Study, StudyError, study_from_dict

DEFAULT_SEEDS = 3
DEFAULT_DURATION_S = 60.0
DEFAULT_TP = (1, 2, 4, 8)
SIZING_SPAN = 64  # the sizing search tries one replica from rate / SIZING_SPAN up to the rate
PLAN_FILE = "plan.yaml"
BY = ("cost_per_hour", "cost_per_1m_tokens", "cost_per_1m_output_tokens")
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_PER_REQUEST = ("ttft", "tpot", "e2e")  # the scenario's per-request SLO fields (slo.<name>_s)


def _bad(option: str, value: Any, why: str) -> StudyError:
    return StudyError(option, None if value is None else str(value), why)


def parse_seconds(text: str, option: str) -> float:
    """"1s", "50ms", "200us" or a bare number of seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(s|ms|us)?\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise _bad(option, text, "expected a positive duration such as 1s, 50ms or 0.2")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


@dataclass(frozen=True)
class Slo:
    """What ``--slo`` asks: bounds on summary latencies, per-request limits and the share of
    requests that must meet them."""

    limits: dict[str, float]  # e.g. ttft_p99 -> 1.0 (s), bounds on the run's summary
    per_request: dict[str, float]  # ttft/tpot/e2e -> seconds: the scenario's slo.<name>_s
    target: float | None  # slo_target (share of requests within the per-request limits)


def parse_slo(text: str) -> Slo:
    """``ttft_p99=1s,tpot_p99=50ms`` (bounds on summary percentiles), ``ttft=500ms`` (a limit
    each request is held to) and ``attainment=95%`` (the share that must meet it)."""
    limits: dict[str, float] = {}
    per_request: dict[str, float] = {}
    target = None
    for item in (p.strip() for p in text.split(",")):
        key, eq, value = (x.strip() for x in item.partition("="))
        if not eq or not key or not value:
            raise _bad("--slo", item, "expected name=value pairs, e.g. ttft_p99=1s,tpot_p99=50ms")
        if key == "attainment":
            share = float(value[:-1]) / 100 if value.endswith("%") else _number(value, "--slo")
            if not 0 < share <= 1:
                raise _bad("--slo", item, "attainment is a share of requests: between 0 and 1 (or 1% to 100%)")
            target = share
        elif key in _PER_REQUEST:
            per_request[key] = parse_seconds(value, "--slo")
        elif LATENCY_METRIC.match(key):
            limits[key] = parse_seconds(value, "--slo")
        elif key in COST_BOUNDS:
            limits[key] = _number(value.removeprefix("$"), "--slo")
        else:
            raise _bad("--slo", item, f"{key!r} is not a latency: expected ttft, tpot or e2e with an optional "
                       "statistic (ttft_p99, tpot_p90, e2e_p50, queueing_delay_mean), attainment, or a cost "
                       f"bound in USD ({', '.join(COST_BOUNDS)})")
    for key, seconds in limits.items():  # each request is held to the bound too, unless given its own
        name = key.rpartition("_")[0]
        if name in _PER_REQUEST:
            per_request.setdefault(name, seconds)
    return Slo(limits, per_request, target)


def _number(text: str, option: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _bad(option, text, "expected a number") from None
    if not value > 0 or math.isinf(value):
        raise _bad(option, text, "expected a positive number")
    return value


def parse_ints(text: str, option: str) -> list[int]:
    """"1,2,4" or a range "1-8" (both ends included)."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise _bad(option, text, "expected positive whole numbers, e.g. 1,2,4 or a range 1-8")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        out += range(lo, hi + 1)
    return list(dict.fromkeys(out))


def parse_names(text: str, option: str) -> list[str]:
    names = [p.strip() for p in text.split(",")]
    if not all(names):
        raise _bad(option, text, "expected a comma-separated list of names, e.g. H100,H200,A100")
    return list(dict.fromkeys(names))


def parse_pd(text: str) -> list[tuple[int, int]]:
    """"1:3,2:2,3:1": prefill:decode replica counts."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+):(\d+)", part)
        if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
            raise _bad("--pd", text, "expected prefill:decode replica counts, e.g. 1:3,2:2,3:1")
        out.append((int(m.group(1)), int(m.group(2))))
    return list(dict.fromkeys(out))


def parse_bracket(text: str) -> tuple[float, float]:
    parts = text.split(",")
    if len(parts) != 2:
        raise _bad("--bracket", text, "expected the lowest and highest rate to try, e.g. 1,64")
    lo, hi = (_number(p.strip(), "--bracket") for p in parts)
    if lo >= hi:
        raise _bad("--bracket", text, "expected low < high")
    return lo, hi


def base_scenario(path: str | None) -> Path:
    """The scenario the plan starts from: the file given, or the embedded default."""
    if path is None:
        return Path(str(resources.files("sim.scenario.data").joinpath("default.yaml"))).resolve()
    p = Path(path).expanduser()
    if not p.is_file():
        raise _bad("--scenario", path, "no such scenario file")
    return p.resolve()


def _seeded(study: dict, seeds: int) -> dict:
    """The one place the seed count goes into the study (``Study.seeds``: each configuration and
    rate on seeds seed, seed + 1, …, its figures with 95 % intervals)."""
    return {**study, "seeds": seeds}


def _overrides(args, slo: Slo, scenario: Path, trace: str | None) -> dict[str, Any]:
    """The fields every configuration shares: traffic (a trace in place of the base's arrivals
    and lengths), model, SLO."""
    out: dict[str, Any] = {}
    if trace:
        from sim.scenario.load import read_scenario_file

        workload = read_scenario_file(scenario).get("workload") or {}
        moot = ("trace", "arrival", "prompt_len", "output_len")
        out["workload"] = {**{k: v for k, v in workload.items() if k not in moot}, "trace": {"path": trace}}
    if args.model:
        out["model"] = args.model
    if args.requests:
        out["workload.num_requests"] = args.requests
        out["workload.duration_s"] = None
    else:
        out["workload.num_requests"] = None
        out["workload.duration_s"] = args.duration
    for name, seconds in slo.per_request.items():
        out[f"slo.{name}_s"] = seconds
    return out


def _rescalable(scenario: Path, trace: str | None) -> dict[str, Any]:
    """The base scenario's trace without its ``time_scale``: the plan sets the trace's rate
    (``workload.trace.rate``), and a trace takes one or the other."""
    if trace:
        return {}
    from sim.scenario.load import paths_from, read_scenario_file

    base = (read_scenario_file(scenario).get("workload") or {}).get("trace")
    if isinstance(base, dict) and "time_scale" in base:  # its path, as the scenario file meant it
        return {"workload.trace": paths_from(scenario.parent, "workload.trace",
                                             {k: v for k, v in base.items() if k != "time_scale"})}
    return {}


def _axes(args, sizing: bool) -> dict[str, list]:
    """The grid of what varies (one value: shared, not varied)."""
    axes: dict[str, list] = {}
    if args.gpu:
        axes["hardware.gpu"] = parse_names(args.gpu, "--gpu")
    if args.tp:
        axes["hardware.tp"] = parse_ints(args.tp, "--tp")
    elif sizing and not args.pd:
        axes["hardware.tp"] = list(DEFAULT_TP)
    if args.policy:
        axes["scheduler.policy"] = parse_names(args.policy, "--policy")
    if args.engine:
        axes["engine.name"] = parse_names(args.engine, "--engine")
    if args.replicas:
        if args.pd:
            raise _bad("--replicas", args.replicas, "--pd already gives the replica counts (prefill:decode)")
        axes["replicas"] = parse_ints(args.replicas, "--replicas")
    return axes


def _split(axes: dict[str, list]) -> tuple[dict[str, Any], dict[str, list]]:
    shared = {k: v[0] for k, v in axes.items() if len(v) == 1}
    return shared, {k: v for k, v in axes.items() if len(v) > 1}


def _acceptance(slo: Slo) -> dict[str, Any]:
    acc: dict[str, Any] = {"limits": slo.limits}
    if slo.target is not None:
        acc["slo_target"] = slo.target
    return acc


def _pd_cases(pairs: list[tuple[int, int]]) -> list[dict]:
    return [{"name": f"P:D {p}:{d}", "set": {"disaggregation": {"prefill": {"count": p}, "decode": {"count": d}}}}
            for p, d in pairs]


@dataclass
class Request:
    """A plan's question, worked out from the command line."""

    kind: str  # cheapest | max_rate
    scenario: Path
    set: dict[str, Any]
    grid: dict[str, list]
    cases: list[dict]
    acceptance: dict[str, Any]
    rate: float | None
    by: str
    seeds: int
    sizing: bool  # size the fleet first (cheapest without replica counts)
    bracket: tuple[float, float]
    name: str


def make_request(args) -> Request:
    """Check the command line and say what to run (StudyError, exit 2, on a bad argument)."""
    from sim.study.cli import _parse_sets

    if args.max_rate and args.rate is not None and args.bracket:
        raise _bad("--rate", args.rate, "with --max-rate give the rates to search with --bracket, not --rate")
    if not args.max_rate and args.rate is None:
        raise _bad("--rate", None, "say the traffic to plan for (--rate REQ_PER_S), or ask for the highest "
                   "rate a configuration sustains (--max-rate)")
    if args.rate is not None and not (args.rate > 0 and math.isfinite(args.rate)):
        raise _bad("--rate", args.rate, "expected a positive rate in requests per second")
    slo = parse_slo(args.slo)
    scenario = base_scenario(args.scenario)
    trace = str(Path(args.trace).expanduser().resolve()) if args.trace else None
    if trace and not Path(trace).is_file():
        raise _bad("--trace", args.trace, "no such trace file")
    sizing = not args.max_rate and not args.replicas and not args.pd
    shared, grid = _split(_axes(args, sizing))
    sets = {**_overrides(args, slo, scenario, trace), **_rescalable(scenario, trace), **shared, **_parse_sets(args.set)}
    several_gpus = len(grid.get("hardware.gpu", [])) > 1
    if args.max_rate:
        kind = "max_rate"
        by = args.by or ("cost_per_1m_tokens" if several_gpus else "max_rate")
        ranks = get_args(MaxRate.model_fields["rank_by"].annotation)
        if by not in ranks:
            raise _bad("--by", by, f"a --max-rate plan ranks by {', '.join(ranks)}")
        bracket = parse_bracket(args.bracket) if args.bracket else (0.5, 128.0)
        if args.rate is not None:  # search around the rate given
            bracket = (args.rate / 8, args.rate * 8)
    else:
        kind, by = "cheapest", args.by or "cost_per_1m_tokens"
        if by not in BY:
            raise _bad("--by", by, f"a cheapest plan ranks by {', '.join(BY)}")
        bracket = (args.rate / SIZING_SPAN, args.rate)
    cases = _pd_cases(parse_pd(args.pd)) if args.pd else []
    name = args.name or ("plan-max-rate" if args.max_rate else f"plan-{args.rate:g}rps")
    seeds = args.seeds or DEFAULT_SEEDS
    return Request(kind, scenario, sets, grid, cases, _acceptance(slo), args.rate, by, seeds, sizing,
                   bracket, name)


def study_dict(req: Request, grid: dict[str, list] | None = None, cases: list[dict] | None = None) -> dict:
    """The study ``req`` asks for (``grid``/``cases`` replace its own: the sized fleet)."""
    vary: dict[str, Any] = {}
    grid = req.grid if grid is None else grid
    cases = req.cases if cases is None else cases
    if grid:
        vary["grid"] = grid
    if cases:
        vary["cases"] = cases
    if req.kind == "max_rate":
        objective = {"kind": "max_rate", "bracket": list(req.bracket), "rank_by": req.by, **req.acceptance}
    else:
        objective = {"kind": "cheapest", "rate": req.rate, "rank_by": req.by, **req.acceptance}
    study = {"name": req.name, "scenario": str(req.scenario), "set": req.set, "vary": vary, "objective": objective}
    return _seeded(study, req.seeds)


def sizing_dict(req: Request) -> dict:
    """The first step of a cheapest plan without replica counts: what one replica sustains."""
    study = _seeded(study_dict(req), 1)  # an estimate: the answer comes from the next study's seeds
    study["name"] = f"{req.name}-sizing"
    study["set"] = {**req.set, "replicas": 1}
    study["objective"] = {"kind": "max_rate", "bracket": list(req.bracket), "rel_tol": 0.1, **req.acceptance}
    return study


def replica_counts(one_replica: float | None, rate: float, outcome: str | None) -> list[int]:
    """Replica counts worth trying at ``rate``, from what one replica sustains: ⌈rate / that⌉,
    one fewer and one more ([] when one replica fails even at the lowest rate tried)."""
    if outcome == "above_bracket":
        return [1]
    if not one_replica:
        return []
    n = math.ceil(rate / one_replica - 1e-9)
    return sorted({max(1, n - 1), n, n + 1})


def sized_cases(sizing_run, req: Request) -> list[dict]:
    """Cases for the cheapest study: each sized configuration's values with its replica counts."""
    cases = []
    for _, row in sizing_run.outcome.configs.iterrows():
        if row.get("outcome") in ("skipped", "error"):
            continue
        one = row.get("max_rate")
        counts = replica_counts(None if _missing(one) else float(one), req.rate, row.get("outcome"))
        config = sizing_run.plan.configs[int(row["config_index"])]
        for n in counts:
            label = f"{n} × ({config.label})" if config.values else f"{n} replica{'s' * (n > 1)}"
            cases.append({"name": label, "set": {**{k: v for k, v in config.values.items() if k != "case"},
                                                 "replicas": n}})
    return cases


MAX_ROUNDS = 8  # rounds of replica counts added after the sized ones (each reuses the runs before)


def _layouts(cases: list[dict]) -> dict[str, tuple[str, int]]:
    """Case name -> (its layout: everything but the replica count, its replica count)."""
    out = {}
    for c in cases:
        rest = {k: v for k, v in c["set"].items() if k != "replicas"}
        out[c["name"]] = (repr(sorted(rest.items())), int(c["set"]["replicas"]))
    return out


def more_cases(run, cases: list[dict]) -> list[dict]:
    """Replica counts to try next so the answer is the fewest that meets the SLO: one fewer than
    the fewest passing count of a layout (always for the answer's layout, else where it would
    cost less than the answer), and one more than the most tried of a layout that never passed
    where that would cost less than the answer. [] once every such neighbour has run."""
    cfg = run.outcome.configs
    if cfg.empty or "meets_slo" not in cfg:
        return []
    layouts = _layouts(cases)
    best = run.outcome.best
    best_cost = float(best["cost_per_hour"]) if best else math.inf
    best_layout = layouts[best["config"]][0] if best else None
    by_layout: dict[str, dict[int, tuple[bool, float, dict, str]]] = {}
    for _, row in cfg.iterrows():
        if row["config"] not in layouts:
            continue
        layout, n = layouts[row["config"]]
        case = next(c for c in cases if c["name"] == row["config"])
        by_layout.setdefault(layout, {})[n] = (bool(row.get("meets_slo")), float(row["cost_per_hour"]), case,
                                               str(row.get("verdict")))
    more = []
    for layout, tried in by_layout.items():
        passing = [n for n, t in tried.items() if t[0]]
        if passing:
            n = min(passing) - 1
            cost = tried[min(passing)][1] * n / (n + 1)
            wanted = n >= 1 and n not in tried and (layout == best_layout or cost < best_cost)
        else:
            n = max(tried) + 1
            cost = tried[max(tried)][1] * n / (n - 1)
            wanted = cost < best_cost and all(t[3] != UNCERTAIN for t in tried.values())
        if wanted:
            case = tried[min(passing) if passing else max(tried)][2]
            name = re.sub(r"^\d+ ", f"{n} ", case["name"]) if case["name"][0].isdigit() else f"{n} replicas"
            more.append({"name": name, "set": {**case["set"], "replicas": n}})
    return more


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def load(data: dict, source: str) -> Study:
    return study_from_dict(data, source)


def write_plan_file(study: dict, out: Path) -> Path:
    """The study the plan ran, as a file ``servesim study`` takes (written atomically)."""
    import os
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    text = ("# Written by servesim plan: run it again with servesim study " + str(out / PLAN_FILE) + "\n"
            + yaml.safe_dump(study, sort_keys=False, allow_unicode=True))
    fd, tmp = tempfile.mkstemp(prefix=".plan-", dir=out)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, out / PLAN_FILE)
    return out / PLAN_FILE


def _value(b: dict, col: str) -> str:
    """A figure of the answer's row, with its 95 % interval when the study ran seeds."""
    from sim.study.columns import row_cell

    return row_cell(b, col)


def _gpus(b: dict) -> str:
    """"24 GPUs: 24 × H100-SXM" from an answer row's ``num_gpus`` and ``gpus`` (a JSON mapping)."""
    import json

    n = int(b["num_gpus"])
    try:
        kinds = " + ".join(f"{k} × {name}" for name, k in json.loads(b.get("gpus") or "{}").items())
    except (TypeError, ValueError):
        kinds = str(b.get("gpus"))
    return f"{n} GPU{'s' * (n > 1)}" + (f" ({kinds})" if kinds else "")


def answer_text(run, req: Request) -> str:
    """The plan's answer in one paragraph: the configuration, its GPUs and cost per 1M tokens,
    the figures the SLO bounds, each with its interval, and how many seeds they stand on."""
    from sim.study.columns import heading

    b = run.outcome.best
    seeds = getattr(run.plan, "seeds", 1)
    on = f"on {seeds} seed{'s' * (seeds > 1)}" + (" (95% intervals in parentheses)" if seeds > 1 else "")
    if b is None:
        what = f"at {req.rate:g} req/s" if req.kind == "cheapest" else f"in {req.bracket[0]:g}–{req.bracket[1]:g} req/s"
        return f"answer: no configuration tried meets the SLO {what} ({on}); see the table above for why"
    head = f"answer: {b['config']}: {_gpus(b)}"
    if req.kind == "max_rate":
        rate = b.get("capacity") if isinstance(b.get("capacity"), str) else _value(b, "max_rate")
        head += f" sustains {rate} req/s under the SLO"
    else:
        head += f" meets the SLO at {req.rate:g} req/s"
    money = (f"${b['cost_per_hour']:,.2f}/h; {_value(b, 'cost_per_1m_tokens')} per 1M tokens, "
             f"{_value(b, 'cost_per_1m_output_tokens')} per 1M output tokens"
             + (" at that rate" if req.kind == "max_rate" else ""))
    figures = [f"{heading('slo_attainment')} {_value(b, 'slo_attainment')}"]
    figures += [f"{heading(k).removesuffix(' (ms)')} {_value(b, k)} ms" for k in req.acceptance.get("limits", {})
                if k in b and k not in COST_BOUNDS]
    return f"{head}; {money}; {', '.join(figures)}; {on}" + _uncertain(run, b)


def _uncertain(run, b: dict) -> str:
    """Cheaper configurations whose interval straddles a limit: more seeds would settle them."""
    cfg = run.outcome.configs
    if "verdict" not in cfg or "cost_per_hour" not in cfg:
        return ""
    cheaper = cfg[(cfg["verdict"] == UNCERTAIN) & (cfg["cost_per_hour"] < b["cost_per_hour"])]
    if cheaper.empty:
        return ""
    return ("; uncertain at a lower $/h (the interval straddles a limit; more --seeds would settle it): "
            + ", ".join(str(c) for c in cheaper["config"]))


def sizing_text(sizing_run, req: Request) -> str:
    """What one replica of each configuration sustains, and the replica counts tried at the rate."""
    from sim.study.columns import cell

    parts = []
    for _, row in sizing_run.outcome.configs.iterrows():
        if row.get("outcome") in ("skipped", "error"):
            parts.append(f"{row['config']}: {row.get('outcome')}")
            continue
        one = row.get("max_rate")
        counts = replica_counts(None if _missing(one) else float(one), req.rate, row.get("outcome"))
        rate = (f"≥ {cell('max_rate', one)}" if row.get("outcome") == "above_bracket" else cell("max_rate", one)) \
            if not _missing(one) else f"< {req.bracket[0]:g}"
        parts.append(f"{row['config']}: {rate} req/s" + (f" → {', '.join(map(str, counts))} replicas"
                                                          if counts else ""))
    return "sizing, what one replica sustains (one seed): " + "; ".join(parts)
