"""What a fleet costs: its GPUs and their price per hour, and the cost of the tokens it serves.

One rule for ``run``, ``compare``, ``study`` and ``plan``. A GPU's price per hour is, first,
``hardware.price_per_gpu_hour`` (or the price of a GPU the scenario defines), then a study's
``prices``, then the GPU catalog's dated, sourced price (``sim/scenario/data/gpus.yaml``).
Every GPU counts: colocated replicas, replica groups, prefill and decode pools, TP × PP each.

Cost per token is the fleet's price over the **arrival window** divided by the tokens served:
``$/h × window / 3600 / tokens × 1e6``. The window is the one goodput uses (first to last
arrival; a single instant of arrivals falls back to first arrival → last completion), so the
figure reads as a fleet kept busy by this traffic for good: in a steady state it serves what
arrives, and the drain after the last arrival — an artefact of a finite run — is not billed.
``gpu_hours`` is what the fleet held over that window: every GPU for the whole window, or, for an autoscaled fleet, the
GPU-hours its replicas were held (provisioning, active, draining: ``sim/results/fleet.py``),
which its cost is then the price of (its ``cost_per_hour`` the mean over the window).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from sim.results import fmt
from sim.scenario.specs import get_gpu

# The money figures a run's summary carries (and compare and study show).
COST_METRICS = ("cost_per_hour", "cost_per_1m_output_tokens", "cost_per_1m_tokens")


@dataclass(frozen=True)
class GpuPrice:
    """One kind of GPU in a fleet: how many, at what price per hour, and where the price is from."""

    gpu: str
    count: int
    usd_per_hour: float
    source: str
    date: str


def _hardware(scenario) -> list:
    specs = getattr(scenario, "replica_specs", None)
    if specs is not None:
        return [r.hardware for r in specs]
    return [scenario.hardware] * scenario.replicas  # a scenario schema without replica specs: homogeneous


def gpu_inventory(scenario) -> dict[str, int]:
    """GPU name -> count for a validated Scenario: every replica (colocated, replica groups,
    prefill and decode pools) with its own hardware, TP × PP GPUs each."""
    counts: Counter[str] = Counter()
    for hw in _hardware(scenario):
        counts[hw.gpu_name] += hw.tp * hw.pp
    return dict(counts)


def own_prices(scenario) -> dict[str, float]:
    """USD per GPU-hour the scenario itself sets: ``hardware.price_per_gpu_hour``, or the price of
    a GPU it defines."""
    return {hw.gpu_name: hw.gpu_spec.price_per_hour for hw in _hardware(scenario)
            if hw.price_per_gpu_hour is not None or not isinstance(hw.gpu, str)}


def cost_per_hour(inventory: dict[str, int], prices: dict[str, float] | None = None,
                  own: dict[str, float] | None = None) -> float:
    """USD per hour: the scenario's ``own`` prices, else ``prices`` (a study's, by catalog name),
    else the catalog's price_per_hour."""
    own, prices = own or {}, prices or {}

    def price(name: str) -> float:
        return own[name] if name in own else prices.get(name) or get_gpu(name).price_per_hour

    return sum(n * price(name) for name, n in inventory.items())


def fleet_prices(scenario, prices: dict[str, float] | None = None) -> list[GpuPrice]:
    """Each kind of GPU the scenario holds, with its count, price and the price's source and date."""
    prices = prices or {}
    specs = {}
    for hw in _hardware(scenario):
        specs.setdefault(hw.gpu_name, hw)
    out = []
    for name, n in gpu_inventory(scenario).items():
        hw = specs[name]
        spec = hw.gpu_spec
        if hw.price_per_gpu_hour is not None:
            out.append(GpuPrice(name, n, hw.price_per_gpu_hour, "hardware.price_per_gpu_hour", ""))
        elif not isinstance(hw.gpu, str):
            where = spec.price_source or "the scenario's GPU"
            out.append(GpuPrice(name, n, spec.price_per_hour, where, spec.price_date))
        elif name in prices:
            out.append(GpuPrice(name, n, prices[name], "the study's prices", ""))
        else:
            out.append(GpuPrice(name, n, spec.price_per_hour, spec.price_source, spec.price_date))
    return out


def window_s(summary: dict) -> float:
    """The seconds a run's cost is counted over: its arrival window (as goodput's)."""
    span, n = summary.get("arrival_span_s"), summary.get("requests") or 0
    if n > 1 and span and span > 0:
        return float(span)
    return float(summary.get("duration_s") or 0.0)


def token_costs(usd_per_hour: float, summary: dict) -> dict[str, float]:
    """``$/h``, ``$ per 1M output tokens`` and ``$ per 1M tokens`` (prompts and outputs of the
    finished requests) for a summary with ``output_tokens`` and ``prompt_tokens``; NaN where no
    token was served."""
    out_tok = summary.get("output_tokens") or 0
    all_tok = out_tok + (summary.get("prompt_tokens") or 0)
    spent = usd_per_hour * window_s(summary) / 3600.0
    return {"cost_per_hour": float(usd_per_hour),
            "cost_per_1m_output_tokens": spent / out_tok * 1e6 if out_tok else float("nan"),
            "cost_per_1m_tokens": spent / all_tok * 1e6 if all_tok else float("nan")}


def run_costs(scenario, summary: dict, held_gpu_hours: float | None = None) -> dict[str, float]:
    """The money figures of a run's summary and its ``gpu_hours``, at the scenario's own prices
    (else the catalog's); ``held_gpu_hours``: an autoscaled fleet's, over the cost window."""
    inventory = gpu_inventory(scenario)
    per_hour = cost_per_hour(inventory, own=own_prices(scenario))
    full = sum(inventory.values()) * window_s(summary) / 3600.0
    if held_gpu_hours is None:
        return {**token_costs(per_hour, summary), "gpu_hours": full}
    share = held_gpu_hours / full if full > 0 else 0.0  # an autoscaled fleet is one kind of GPU
    return {**token_costs(per_hour * share, summary), "gpu_hours": held_gpu_hours}


def price_records(scenario, prices: dict[str, float] | None = None) -> list[dict]:
    """``fleet_prices`` as plain records (summary.json's ``prices``)."""
    return [asdict(p) for p in fleet_prices(scenario, prices)]


def price_text(scenario, prices: dict[str, float] | None = None) -> str:
    """The fleet's price in words: "2 × H100-SXM at $2.49/h + 1 × A100-80GB at $1.79/h"."""
    return " + ".join(f"{p.count} × {p.gpu} at ${p.usd_per_hour:,.2f}/h" for p in fleet_prices(scenario, prices))


def price_sources(scenario, prices: dict[str, float] | None = None) -> str:
    """Each GPU's price and where it comes from: "H100-SXM $2.49/h (<source>, <date>)"."""
    parts = []
    for p in fleet_prices(scenario, prices):
        where = ", ".join(x for x in (p.source, p.date) if x)
        parts.append(f"{p.gpu} ${p.usd_per_hour:,.2f}/h" + (f" ({where})" if where else ""))
    return "; ".join(parts)


def dollars(v) -> str:
    """An amount of USD: "$1.23", "$0.0456" (three significant digits below a dollar)."""
    if fmt.missing(v):
        return fmt.DASH
    return f"${v:,.2f}" if abs(v) >= 1 else f"${v:.3g}"


def cost_text(summary: dict, price: str = "") -> str:
    """A run's money figures in words, for the summary table; ``price``: ``price_text``'s."""
    head = dollars(summary.get("cost_per_hour")) + "/h" + (f" ({price})" if price else "")
    return (f"{head}; {dollars(summary.get('cost_per_1m_output_tokens'))} per 1M output tokens, "
            f"{dollars(summary.get('cost_per_1m_tokens'))} per 1M tokens with prompts")


def catalog_price_text(names, prices: dict[str, float] | None = None) -> str:
    """Each named GPU's price per hour and where it comes from: a study's ``prices``, else the
    catalog's source and date ("H100-SXM $2.49/h (source, date)")."""
    prices = prices or {}
    parts = []
    for name in dict.fromkeys(names):
        if name in prices:
            parts.append(f"{name} ${prices[name]:,.2f}/h (the study's prices)")
            continue
        g = get_gpu(name)
        where = ", ".join(x for x in (g.price_source, g.price_date) if x)
        parts.append(f"{name} ${g.price_per_hour:,.2f}/h" + (f" ({where})" if where else ""))
    return "; ".join(parts)
