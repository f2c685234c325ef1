"""The study file: a base scenario, what to vary, and the question to answer.

Parsed with pydantic (unknown fields are errors); every error names the study file and the
field path, and becomes exit code 2 in the CLI.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from sim.errors import InputError
from sim.inputs import load_yaml_mapping, validation_message
from sim.traffic.schema import STRICT, AsTuple

Fraction = Annotated[float, Field(gt=0, le=1)]

# Latency metrics of a run's summary that ``limits`` may bound from above.
LATENCY_METRIC = re.compile(r"^(ttft|tpot|e2e|queueing_delay)_(mean|p50|p90|p99)$")
# ... and its costs per token (USD, at the scenario's own prices: sim.results.money).
COST_BOUNDS = ("cost_per_1m_tokens", "cost_per_1m_output_tokens")


# Per-run summary metrics a study can rank, plot or bound.
RUN_METRICS = (
    "slo_attainment", "goodput", "goodput_per_gpu", "request_throughput",
    "output_token_throughput", "ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90",
    "tpot_p99", "itl_p50", "itl_p90", "itl_p99", "e2e_p50", "e2e_p90", "e2e_p99", "queueing_delay_mean",
    "preemptions", "offered_rate",
    "rejected", "unfinished", "requests", "finished", "duration_s", "mean_batch_size",
    "mean_kv_utilization", "cost_per_1m_output_tokens", "cost_per_1m_tokens",
)
# ... and per-configuration columns.
CONFIG_METRICS = ("rate", "cost_per_hour", "num_gpus", "max_rate", "max_rate_per_gpu",
                  "max_rate_per_dollar")


def _check_metric(name: str, allowed: tuple[str, ...]) -> str:
    if name not in allowed:
        raise ValueError(f"unknown metric {name!r}; expected one of {', '.join(allowed)}")
    return name


class StudyError(InputError):
    """A problem in a study file (or in one of the configurations it expands to)."""


class Strict(BaseModel):
    model_config = STRICT


class Case(Strict):
    """A named set of overrides, for variants that differ in more than one field."""

    name: str
    set: dict[str, Any] = {}


class Vary(Strict):
    """What changes between configurations: the product of grid × zip × cases.

    ``grid`` takes every combination of its lists; ``zip`` lists (all the same length) change
    together; ``cases`` are labelled override sets. Keys are dotted scenario field paths.
    """

    grid: dict[str, list[Any]] = {}
    zip: dict[str, list[Any]] = {}
    cases: list[Case] = []

    @field_validator("grid", "zip")
    @classmethod
    def _non_empty_lists(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in v.items():
            if not values:
                raise ValueError(f"{key}: give at least one value")
        return v

    @model_validator(mode="after")
    def _zip_lengths(self):
        lengths = {k: len(v) for k, v in self.zip.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"zip lists must have the same length, got {lengths}")
        both = set(self.grid) & set(self.zip)
        if both:
            raise ValueError(f"{sorted(both)} appear in both grid and zip")
        names = [c.name for c in self.cases]
        if len(set(names)) != len(names):
            raise ValueError("case names must be unique")
        return self


class Acceptance(Strict):
    """When a run counts as meeting the SLOs."""

    slo_target: Fraction = 0.9  # share of requests within the scenario's slo limits
    # upper bounds on summary latencies (seconds), e.g. ttft_p99, or on the cost per token (USD):
    # cost_per_1m_tokens, cost_per_1m_output_tokens
    limits: dict[str, PositiveFloat] = {}
    rate_field: str | None = None  # None: workload.trace.rate for traces, else arrival rate

    @field_validator("limits")
    @classmethod
    def _latency_metrics(cls, v: dict[str, float]) -> dict[str, float]:
        for key in v:
            if not LATENCY_METRIC.match(key) and key not in COST_BOUNDS:
                raise ValueError(f"{key!r} is not a latency metric or a cost per token; expected e.g. ttft_p99, "
                                 f"tpot_p90, e2e_p50, queueing_delay_mean or {' or '.join(COST_BOUNDS)}")
        return v


class MaxRate(Acceptance):
    """Highest arrival rate whose runs still meet the SLOs, per configuration (bisection)."""

    kind: Literal["max_rate"]
    bracket: Annotated[tuple[PositiveFloat, PositiveFloat], AsTuple]  # requests/s: lowest and highest rate tried
    rel_tol: Fraction = 0.05  # stop when hi - lo ≤ max(rel_tol × lo, abs_tol)
    abs_tol: NonNegativeFloat = 0.0
    # cost_per_1m_tokens: the cost per 1M tokens at each configuration's max rate (lowest first)
    rank_by: Literal["max_rate", "max_rate_per_gpu", "max_rate_per_dollar", "cost_per_1m_tokens",
                     "cost_per_1m_output_tokens"] = "max_rate"

    @field_validator("limits")
    @classmethod
    def _no_cost_bound(cls, v: dict[str, float]) -> dict[str, float]:
        bound = [k for k in v if k in COST_BOUNDS]
        if bound:
            raise ValueError(f"{bound[0]} falls as the rate rises, so a capacity search cannot bound it (the "
                             "lowest rates would fail); bound it in a cheapest or curves objective, or rank "
                             "by it (rank_by)")
        return v

    @field_validator("bracket")
    @classmethod
    def _ordered(cls, v):
        if v[0] >= v[1]:
            raise ValueError(f"expected [low, high] with low < high, got {list(v)}")
        return v


class Cheapest(Acceptance):
    """The configuration with the lowest GPU cost per hour that meets the SLOs at a rate."""

    kind: Literal["cheapest"]
    rate: PositiveFloat | None = None  # None: the scenario's own traffic
    # what "cheapest" means: GPU cost per hour, or per 1M tokens served (prompt + output, or output)
    rank_by: Literal["cost_per_hour", "cost_per_1m_tokens", "cost_per_1m_output_tokens"] = "cost_per_hour"


class Curves(Acceptance):
    """Latency–throughput curves: every configuration at every rate, and the Pareto front."""

    kind: Literal["curves"]
    rates: list[PositiveFloat] = Field(min_length=1)
    rank_by: str = "goodput_per_gpu"

    @field_validator("rank_by")
    @classmethod
    def _metric(cls, v: str) -> str:
        return _check_metric(v, RUN_METRICS)


Objective = Annotated[MaxRate | Cheapest | Curves, Field(discriminator="kind")]


class ReportOptions(Strict):
    heatmap: Annotated[tuple[str, str], AsTuple] | None = None  # two swept fields; default: the first two
    pareto: Annotated[tuple[str, str], AsTuple] | None = None  # x and y metrics; default depends on the objective
    latency: list[str] = ["ttft_p99", "tpot_p99", "e2e_p50"]  # drawn against load
    png: bool = False  # also write each figure as PNG (needs kaleido and Chrome/Chromium)

    @field_validator("pareto")
    @classmethod
    def _pareto_metrics(cls, v):
        if v is not None:
            for name in v:
                _check_metric(name, RUN_METRICS + CONFIG_METRICS)
        return v

    @field_validator("latency")
    @classmethod
    def _latency_metrics(cls, v: list[str]) -> list[str]:
        for name in v:
            _check_metric(name, RUN_METRICS)
        return v


class Study(Strict):
    name: str | None = None  # default: the study file's name
    scenario: str  # base scenario, relative to the study file
    set: dict[str, Any] = {}  # overrides applied to every configuration
    vary: Vary = Vary()
    objective: Objective
    prices: dict[str, PositiveFloat] = {}  # USD per GPU-hour, overriding the GPU catalog
    # A configuration that is valid but cannot run (the model does not fit the GPUs):
    # skip it and say so in the tables, or stop the study with an error.
    infeasible: Literal["skip", "error"] = "skip"
    report: ReportOptions = ReportOptions()
    # Runs per configuration and rate: the scenario's seed, seed + 1, ...; figures are means with
    # a 95 % interval over them and the SLO is judged on the interval (sim.study.intervals).
    seeds: PositiveInt = 1
    # Scenario fields (dotted paths) this study needs; a simulator without them stops the
    # study with a message saying so, rather than "unknown field".
    requires: list[str] = []

    @model_validator(mode="after")
    def _cost_bounds_at_the_scenarios_prices(self):
        bound = [k for k in self.objective.limits if k in COST_BOUNDS]
        if bound and self.prices:
            raise ValueError(f"objective.limits bounds {bound[0]}, which a run judges at the scenario's own GPU "
                             "prices, while prices sets others; set hardware.price_per_gpu_hour (in set or "
                             "vary) instead of prices, or drop the bound")
        return self

    @field_validator("prices")
    @classmethod
    def _known_gpus(cls, v: dict[str, float]) -> dict[str, float]:
        from sim.scenario.specs import get_gpu

        out = {}
        for name, price in v.items():
            try:
                out[get_gpu(name).name] = price
            except KeyError as e:
                raise ValueError(e.args[0]) from None
        return out


def _format_loc(loc: tuple) -> str:
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif p in ("max_rate", "cheapest", "curves") or str(p).startswith("function-"):
            continue
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"


def study_from_dict(data: Any, source: str) -> Study:
    if not isinstance(data, dict):
        raise StudyError(source, None, f"expected a mapping of fields, got {type(data).__name__}")
    if "objective" not in data and {"model", "workload", "hardware", "scheduler"} & data.keys():
        raise StudyError(source, None, "this is a scenario file, not a study (a study has scenario "
                         "and objective); run it with servesim run")
    try:
        return Study.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        msg = validation_message(err)
        if err["type"] == "union_tag_invalid":
            msg = "expected objective kind max_rate, cheapest or curves" + (
                f" (got {err['input'].get('kind')!r})" if isinstance(err.get("input"), dict)
                else "")
        more = f" (and {len(e.errors()) - 1} more problems)" if len(e.errors()) > 1 else ""
        raise StudyError(source, _format_loc(err["loc"]), msg + more) from None


def load_study(path: str | Path) -> Study:
    """Read and validate a study file (the configurations are checked by ``plan_study``)."""
    return study_from_dict(load_yaml_mapping(path, StudyError, "study file"), str(path))
