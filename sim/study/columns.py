"""Study and compare columns as people read them: a heading with its unit, and each value
formatted for it (latencies in ms, shares in %, rates without scientific notation)."""

from __future__ import annotations

from collections.abc import Callable

from sim.results import fmt
from sim.results.money import dollars

LATENCY_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E", "itl": "ITL", "queueing_delay": "queueing"}


def _latency(col: str) -> tuple[str, str] | None:
    for key, name in LATENCY_NAMES.items():
        if col.startswith(key + "_"):
            return name, col[len(key) + 1:]
    return None


def _tick(v) -> str:
    if fmt.missing(v):
        return fmt.DASH
    return "✓" if bool(v) else "✗"


FIXED: dict[str, tuple[str, Callable]] = {
    "max_rate": ("max rate (req/s)", fmt.num),
    "max_rate_per_gpu": ("max rate per GPU (req/s)", fmt.num),
    "max_rate_per_dollar": ("requests per $", lambda v: fmt.count(round(v)) if not fmt.missing(v) else fmt.DASH),
    "num_gpus": ("GPUs", fmt.count),
    "cost_per_hour": ("$/h", lambda v: fmt.DASH if fmt.missing(v) else f"{v:,.2f}"),
    "cost_per_1m_output_tokens": ("$ per 1M output tokens", dollars),
    "cost_per_1m_tokens": ("$ per 1M tokens", dollars),
    "qualifying_cost_per_hour": ("$/h meeting SLO", lambda v: fmt.DASH if fmt.missing(v) else f"{v:,.2f}"),
    "qualifying_cost_per_1m_tokens": ("$ per 1M tokens meeting SLO", dollars),
    "qualifying_cost_per_1m_output_tokens": ("$ per 1M output tokens meeting SLO", dollars),
    "energy_kwh": ("energy (kWh)", fmt.num),
    "mean_power_w": ("mean fleet power (W)", fmt.num),
    "energy_j_per_output_token": ("J per output token", fmt.num),
    "energy_kwh_per_1m_tokens": ("kWh per 1M tokens", fmt.num),
    "energy_cost_usd": ("energy $", dollars),
    "energy_cost_per_1m_output_tokens": ("energy $ per 1M output tokens", dollars),
    "slo_attainment": ("SLO met", fmt.pct),
    "meets_slo": ("meets SLO", _tick),
    "goodput": ("goodput (req/s)", fmt.num),
    "goodput_per_gpu": ("goodput per GPU (req/s)", fmt.num),
    "request_throughput": ("throughput (req/s)", fmt.num),
    "output_token_throughput": ("output tok/s", fmt.num),
    "offered_rate": ("offered (req/s)", fmt.num),
    "rate": ("rate (req/s)", fmt.num),
    "at_rate": ("at rate (req/s)", fmt.num),
    "max_rate_meeting_slo": ("max rate in SLO (req/s)", fmt.num),
    "pareto_points": ("on Pareto front", fmt.count),
    "mean_kv_utilization": ("KV in use", fmt.pct),
    "mean_batch_size": ("mean batch", fmt.num),
    "preemptions": ("preemptions", fmt.count),
    "requests": ("requests", fmt.count), "finished": ("finished", fmt.count), "rejected": ("rejected", fmt.count),
    "duration_s": ("span (s)", fmt.num),
    "outcome": ("outcome", str),
    "verdict": ("meets SLO", lambda v: {"meets": "✓", "uncertain": "? uncertain", "fails": "✗"}.get(v, str(v))),
    "why": ("why not", str),
    "seeds": ("seeds", fmt.count),
    "capacity": ("max rate (req/s)", str),
    "seed_max_rate": ("each seed's max rate (req/s)", fmt.num),
}
# Columns shown as the text of another: a capacity with its interval, "≥ X" or "< X".
SHOWN_AS = {"max_rate": "capacity", "max_rate_meeting_slo": "capacity"}


def heading(col: str, swept: dict[str, str] | None = None) -> str:
    """A column's heading: swept fields by their short name, metrics with their unit."""
    if swept and col in swept:
        return swept[col]
    if col in FIXED:
        return FIXED[col][0]
    lat = _latency(col)
    if lat:
        return f"{lat[0]} {lat[1]} (ms)"
    return col


def cell(col: str, v) -> str:
    """A value of column ``col`` as text."""
    if col in FIXED:
        return FIXED[col][1](v) if not fmt.missing(v) or col == "meets_slo" else fmt.DASH
    if _latency(col):
        return fmt.ms(v)
    if isinstance(v, bool):
        return _tick(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return str(int(v))  # a setting (chunk size 1024), not a quantity
    if isinstance(v, float):
        return fmt.num(v)
    return fmt.DASH if v is None else str(v)


def row_cell(row, col: str) -> str:
    """Column ``col`` of a table row, with its 95 % interval when the row has one over several
    seeds (``col_lo``, ``col_hi``): "93.1% (91.0%–95.2%)"."""
    shown = row.get(SHOWN_AS.get(col, ""))
    if isinstance(shown, str) and shown:
        return shown
    text = cell(col, row.get(col))
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    if fmt.missing(lo) or fmt.missing(hi) or lo == hi:
        return text
    return f"{text} ({cell(col, lo)}–{cell(col, hi)})"
