"""What a fleet's GPUs spend in energy: per step, per request, per token, and its cost.

Computed after the run from the step log, so every loop gets the same figures by construction,
with work proportional to the steps:

- **A step** draws, on each GPU of its replica, what the power model gives for its work and
  duration (``sim.pricing.power.draw``; a capped step draws its cap). Above idle, that is the
  step's *dynamic* energy: ``(draw - idle) × duration × tp × pp`` (a pipeline's stages share it).
- **The fleet** draws its idle power on every GPU it holds, over the time it holds it: the GPU
  time money.py bills (every GPU × the arrival window, ``money.window_s``), plus every step's
  dynamic energy. ``fleet_energy`` takes the GPU-seconds held, so a fleet that grows and shrinks
  feeds what it held.
- **A request** gets its tokens' share: each step's dynamic energy is split equally over the
  tokens it computes, prompt (prefill) or output (decode); the fleet's idle energy is split in
  the same proportion as the dynamic; the run's joules per computed prompt token and per decoded
  token then price each request's computed prompt tokens (prompt - cached) and decoded tokens
  (outputs after the first, which its prefill step samples). The requests add up to the run's
  energy except for prompts recomputed after a preemption and requests still running at the end.
- **Per token**: J per output token and kWh per 1M tokens divide the fleet's energy by the tokens
  of the finished requests (as $ per 1M tokens does).
- **Cost**: kWh × the scenario's ``hardware.energy_usd_per_kwh``, else USD_PER_KWH.

Only the GPU boards are counted: no host, network or cooling (a PUE multiplies the figures).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.pricing.power import IDLE, PP, power_row, step_draws
from sim.results.money import window_s

# The average revenue per kWh of commercial customers in Virginia, the largest US data-centre
# market: 8.95 ¢/kWh (EIA, Electric Power Annual, data for 2023, released 2024-10-17,
# https://www.eia.gov/electricity/annual/secrev-map.php).
USD_PER_KWH = 0.0895
USD_PER_KWH_SOURCE = "EIA Electric Power Annual 2023: Virginia commercial average, 8.95 ¢/kWh"
J_PER_KWH = 3.6e6
ENERGY_METRICS = ("energy_kwh", "mean_power_w", "energy_j_per_output_token", "energy_kwh_per_1m_tokens",
                  "energy_cost_usd", "energy_cost_per_1m_output_tokens")


@dataclass(frozen=True)
class FleetPower:
    """Each engine's roofline row, power row, GPUs (tp × pp) and price of energy."""

    params: np.ndarray  # f8 [E, ROW_SIZE]
    power: np.ndarray  # f8 [E, POWER_SIZE]
    gpus: np.ndarray  # f8 [E] the GPUs each engine stands for: one stage's TP group (a replica's pp engines: tp × pp)
    tp: np.ndarray  # f8 [E]
    usd_per_kwh: np.ndarray  # f8 [E]

    @property
    def modelled(self) -> bool:
        """Whether every GPU has a power model (a TDP)."""
        return bool(len(self.power)) and bool(np.all(self.power[:, IDLE] > 0.0))


def scenario_power(scenario) -> FleetPower:
    """The scenario's engines' power (a pipelined replica: one engine per stage, as the loops have)."""
    from sim.pricing.roofline import roofline_for

    costs, prices = [], []
    for spec in scenario.replica_specs:
        costs += [roofline_for(scenario, spec)] * spec.hardware.engines
        prices += [spec.hardware.energy_usd_per_kwh] * spec.hardware.engines
    return fleet_power(costs, prices)


def fleet_power(costs: list, usd_per_kwh: list[float | None]) -> FleetPower:
    """From each engine's cost model (a pipelined replica: one per stage) and its hardware's price of energy."""
    from sim.pricing.roofline import DP

    E = len(costs)
    params = np.stack([getattr(c, "roofline", c).params for c in costs]) if E else np.zeros((0, 1))
    rooflines = [getattr(c, "roofline", c) for c in costs]
    power = np.stack([power_row(r.gpu, r.power_cap_w, r.pp) for r in rooflines]) if E else np.zeros((0, PP + 1))
    # each engine stands for one stage's TP GPUs (pp engines hold tp × pp), an attention DP rank for its tp / dp
    tp = np.array([float(r.tp) / float(r.params[DP]) for r in rooflines])
    gpus = tp.copy()
    price = np.array([USD_PER_KWH if p is None else float(p) for p in usd_per_kwh])
    return FleetPower(params, power, gpus, tp, price)


# Steps priced for their power at a time: a step's shape is a row of SHAPE_SIZE floats, so a run's
# millions of steps at once would take gigabytes for a moment (issue 31); each step's figures are
# its own, so the chunks give the same bits.
POWER_CHUNK = 1 << 18


def step_power(fleet: FleetPower, steps: pd.DataFrame, block_size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each step's draw per GPU (W) and its dynamic energy (J above idle, all the replica's GPUs),
    POWER_CHUNK steps at a time."""
    from sim.pricing.power import log_shapes
    from sim.pricing.roofline import DP

    n = len(steps)
    watts, dynamic = np.empty(n), np.empty(n)
    for a in range(0, n, POWER_CHUNK):
        part = _rows(steps, a, POWER_CHUNK)
        engine = part["engine"].to_numpy(np.int64)
        duration = part["duration"].to_numpy(np.float64)
        w = watts[a:a + POWER_CHUNK]
        shapes = log_shapes(part, block_size)
        shapes *= fleet.params[engine, DP][:, None]  # an attention DP rank's step: as if every rank ran its rows
        w[:] = step_draws(fleet.params, fleet.power, engine, shapes, duration)
        tp, pp = fleet.tp[engine], fleet.power[engine, PP]
        dynamic[a:a + POWER_CHUNK] = (w - fleet.power[engine, IDLE]) * duration * tp * pp
    return watts, dynamic


def _rows(steps: pd.DataFrame, start: int, count: int) -> pd.DataFrame:
    """Rows ``start .. start + count`` of the step columns, a frame of views (a frame's ``iloc``
    may first copy the whole frame into one block per dtype)."""
    return pd.DataFrame({c: steps[c].to_numpy()[start:start + count] for c in steps.columns}, copy=False)


def fleet_energy(dynamic_j: float, held: list[tuple[float, float]]) -> float:
    """Joules: the steps' dynamic energy plus idle power over the GPU time held
    (``held``: (GPU-seconds, idle W) per kind of GPU)."""
    return float(dynamic_j + sum(s * w for s, w in held))


def token_split(steps: pd.DataFrame, dynamic: np.ndarray) -> tuple[float, float, int, int]:
    """The dynamic joules of the prompt tokens and of the decoded tokens (each step's split equally
    over its tokens), and how many of each the steps computed; POWER_CHUNK steps at a time (the
    joules: a sum of the chunks' dot products)."""
    pre_j = dec_j = 0.0
    pre_n = dec_n = 0
    for a in range(0, len(steps), POWER_CHUNK):
        part = _rows(steps, a, POWER_CHUNK)
        tokens = part["num_tokens"].to_numpy(np.float64)
        prefill = part["prefill_tokens"].to_numpy(np.float64)
        share = np.divide(dynamic[a:a + POWER_CHUNK], tokens, out=np.zeros(len(tokens)), where=tokens > 0)
        decoded = tokens - prefill
        pre_j += float(share @ prefill)
        dec_j += float(share @ decoded)
        pre_n += int(prefill.sum())
        dec_n += int(decoded.sum())
    return pre_j, dec_j, pre_n, dec_n


def engine_joules(steps: pd.DataFrame, dynamic: np.ndarray, engines: int) -> np.ndarray:
    """Each engine's dynamic joules, POWER_CHUNK steps at a time."""
    out = np.zeros(engines)
    for a in range(0, len(steps), POWER_CHUNK):
        engine = steps["engine"].to_numpy()[a:a + POWER_CHUNK].astype(np.int64)
        out += np.bincount(engine, weights=dynamic[a:a + POWER_CHUNK], minlength=engines)
    return out


def run_energy(fleet: FleetPower, steps: pd.DataFrame, requests: pd.DataFrame, summary: dict,
               block_size: np.ndarray, held_s: np.ndarray | None = None) -> dict[str, float]:
    """The run's energy figures (ENERGY_METRICS), and each step's ``power_w`` and each request's
    ``energy_j`` added to their tables. ``held_s``: the seconds each engine's GPUs were held
    within the cost window (an autoscaled fleet, sim/results/fleet.py); default, all of it.
    Without a power model (a GPU with no TDP): NaN."""
    nan = float("nan")
    if not fleet.modelled:
        steps["power_w"] = np.full(len(steps), nan)
        requests["energy_j"] = np.full(len(requests), nan)
        return dict.fromkeys(ENERGY_METRICS, nan)
    watts, dynamic = step_power(fleet, steps, block_size)
    steps["power_w"] = watts
    window = window_s(summary)
    seconds = np.full(len(fleet.gpus), window) if held_s is None else held_s
    held = [(g * t, w) for g, t, w in zip(fleet.gpus, seconds, fleet.power[:, IDLE], strict=True)]
    idle_j = fleet_energy(0.0, held)
    total = idle_j + float(dynamic.sum())
    pre_j, dec_j, pre_n, dec_n = token_split(steps, dynamic)
    dyn = pre_j + dec_j
    pre_total = pre_j + idle_j * (pre_j / dyn if dyn > 0 else pre_n / max(pre_n + dec_n, 1))
    dec_total = total - pre_total
    j_pre = pre_total / pre_n if pre_n else 0.0
    j_dec = dec_total / dec_n if dec_n else 0.0
    computed = (requests["prompt_tokens"] - requests["cached_tokens"]).clip(lower=0).to_numpy(np.float64)
    decoded = (requests["output_tokens"] - 1).clip(lower=0).to_numpy(np.float64)
    requests["energy_j"] = np.where(requests["status"].to_numpy() == "rejected", 0.0,
                                    computed * j_pre + decoded * j_dec)
    kwh = total / J_PER_KWH
    out_tok = summary.get("output_tokens") or 0
    all_tok = out_tok + (summary.get("prompt_tokens") or 0)
    # each engine's share of the energy at its hardware's price
    idle_e = np.array([s * w for s, w in held])
    dyn_e = engine_joules(steps, dynamic, len(fleet.gpus))
    usd = float(((idle_e + dyn_e) / J_PER_KWH) @ fleet.usd_per_kwh)
    return {"energy_kwh": kwh,
            "mean_power_w": total / window if window > 0 else nan,  # over the window the idle power is held
            "energy_j_per_output_token": total / out_tok if out_tok else nan,
            "energy_kwh_per_1m_tokens": kwh / all_tok * 1e6 if all_tok else nan,
            "energy_cost_usd": usd,
            "energy_cost_per_1m_output_tokens": usd / out_tok * 1e6 if out_tok else nan}


def power_series(fleet: FleetPower, steps: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """The fleet's mean draw (W) in each time bin between ``edges``: idle on every GPU, plus each
    step's dynamic power over the part of the bin it covers."""
    idle = float(fleet.gpus @ fleet.power[:, IDLE])
    if not len(steps) or "power_w" not in steps or not fleet.modelled:
        return np.full(len(edges) - 1, idle if fleet.modelled else np.nan)
    cum = np.zeros(len(edges))
    for a in range(0, len(steps), POWER_CHUNK):  # the joules add up over chunks of steps (bounded memory)
        part = _rows(steps, a, POWER_CHUNK)
        start = part["start"].to_numpy(np.float64)
        end = start + part["duration"].to_numpy(np.float64)
        engine = part["engine"].to_numpy(np.int64)
        dyn_w = (part["power_w"].to_numpy() - fleet.power[engine, IDLE]) * fleet.tp[engine] * fleet.power[engine, PP]
        cum += _cumulative_energy(edges, start, end, dyn_w)  # each bin gets the joules spent within it
    return idle + np.diff(cum) / np.diff(edges)


def _cumulative_energy(edges: np.ndarray, start: np.ndarray, end: np.ndarray, watts: np.ndarray) -> np.ndarray:
    """The dynamic joules spent by time t for each edge t: Σ watts × clip(t - start, 0, end - start),
    as the integral of a step function of power (sorted event times, no loop over steps)."""
    times = np.concatenate([start, end])
    delta = np.concatenate([watts, -watts])
    order = np.argsort(times, kind="stable")
    times, delta = times[order], delta[order]
    level = np.cumsum(delta)  # power after each event
    spent = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(times))])  # joules at each event
    i = np.searchsorted(times, edges, side="right") - 1
    before = i < 0
    i = np.clip(i, 0, len(times) - 1)
    out = spent[i] + level[i] * (edges - times[i])
    out[before] = 0.0
    return out


def energy_price_text(scenario) -> str:
    """The price of energy the run used and where it is from."""
    given = {hw.energy_usd_per_kwh for hw in (r.hardware for r in scenario.replica_specs)}
    if given == {None}:
        return f"${USD_PER_KWH:g}/kWh ({USD_PER_KWH_SOURCE})"
    return ", ".join(f"${USD_PER_KWH if p is None else p:g}/kWh" for p in sorted(given, key=lambda p: p or -1.0)) \
        + " (hardware.energy_usd_per_kwh)"


def energy_text(summary: dict) -> str:
    """A run's energy figures in words, for the summary table."""
    from sim.results import fmt
    from sim.results.money import dollars

    kwh = summary.get("energy_kwh")
    if fmt.missing(kwh):
        return "not modelled (a GPU without power_w)"
    return (f"{fmt.num(kwh * 1e3)} Wh (fleet mean {fmt.num(summary['mean_power_w'])} W); "
            f"{fmt.num(summary['energy_j_per_output_token'])} J per output token, "
            f"{fmt.num(summary['energy_kwh_per_1m_tokens'])} kWh per 1M tokens with prompts; "
            f"{dollars(summary['energy_cost_usd'])} of energy, "
            f"{dollars(summary['energy_cost_per_1m_output_tokens'])} per 1M output tokens")


def power_text(scenario) -> str:
    """Each GPU's power figures and cap, for the setup table."""
    from sim.pricing.power import power_figures

    seen = {}
    for r in scenario.replica_specs:
        idle, _, _, tdp = power_figures(r.gpu)
        cap = r.hardware.power_cap_w
        seen[(r.gpu.name, cap)] = (f"{r.gpu.name}: idle {idle:g} W, TDP {tdp:g} W"
                                   + (f", capped at {cap:g} W" if cap else "")) if tdp else f"{r.gpu.name}: no power_w"
    return "; ".join(seen.values()) + f"; energy at {energy_price_text(scenario)}"
