"""The engines' state over time, binned so any run draws light and true.

Each engine's step log is a piecewise-constant function of time (a step's values hold from its
start for its duration; nothing runs between steps). A bin shows its time-weighted mean over
the time the engine was busy, and nothing where it was idle, so no line crosses an idle period.
The decode batch is held through prefill-only steps (continuous batching pauses its decodes for
a prefill step; they are still running), so a prefill does not draw a dip to 1. Waiting requests
come from the requests themselves (arrival to first scheduled, averaged over the bin), so a
queue that clears within a step still shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.results.plotstyle import nice_step

MAX_BINS = 400
CONTIGUOUS_S = 1e-6  # a step starting within this of the previous one's end: no idle time between


@dataclass
class Engine:
    """One series: an engine (a replica, or one of a pipelined replica's virtual engines)."""

    index: int
    replica: int
    label: str
    capacity: int  # KV blocks


def engines(scenario) -> list[Engine]:
    """Every engine of the scenario with a label a planner recognises."""
    from sim.core.state import engines_of

    specs = scenario.replica_specs
    hw_kinds = {(r.hardware.gpu, r.hardware.tp, r.hardware.pp) for r in specs}
    out, seen = [], {}
    for e, x in enumerate(engines_of(scenario)):
        spec = specs[x.replica]
        j = seen.setdefault(x.replica, e)
        role = spec.role if spec.role != "colocated" else "replica"
        label = f"{role} {x.replica}"
        if len(hw_kinds) > 1:
            hw = spec.hardware
            label += f" ({hw.gpu}" + (f", TP {hw.tp}" if hw.tp > 1 else "") + ")"
        if spec.hardware.pp > 1:
            label += f" · virtual engine {e - j}"
        out.append(Engine(e, x.replica, label, int(x.num_blocks)))
    return out


def bin_edges(t_end: float, max_bins: int = MAX_BINS) -> np.ndarray:
    width = nice_step(max(t_end, 1e-9) / max_bins)
    n = max(1, int(np.ceil(t_end / width - 1e-9)))
    return np.arange(n + 1) * width


def _bounds(start: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    end = start + dur
    end[:-1] = np.minimum(end[:-1], start[1:])  # one engine's steps never overlap
    return start, end


def _integral_at(start, end, value, edges) -> np.ndarray:
    """∫ value dt from 0 to each edge, ``value`` holding over [start, end) of each step."""
    t = np.empty(2 * len(start))
    t[0::2], t[1::2] = start, end
    f = np.zeros(2 * len(start))
    area = value * (end - start)
    cum = np.concatenate([[0.0], np.cumsum(area)])
    f[0::2], f[1::2] = cum[:-1], cum[1:]
    if not len(t):
        return np.zeros(len(edges))
    return np.interp(edges, t, f, left=0.0, right=f[-1])


def busy_mean(start, dur, value, edges) -> np.ndarray:
    """Per bin, ``value``'s mean over the time a step ran (NaN: idle all bin)."""
    s, e = _bounds(np.asarray(start, float), np.asarray(dur, float))
    busy = np.diff(_integral_at(s, e, np.ones(len(s)), edges))
    area = np.diff(_integral_at(s, e, np.asarray(value, float), edges))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(busy > 1e-12, area / np.maximum(busy, 1e-300), np.nan)


def per_second(start, dur, amount, edges) -> np.ndarray:
    """Per bin, ``amount`` per second, each step's amount spread over its duration."""
    s, e = _bounds(np.asarray(start, float), np.asarray(dur, float))
    d = np.maximum(e - s, 1e-12)
    return np.diff(_integral_at(s, e, np.asarray(amount, float) / d, edges)) / np.diff(edges)


def held_decodes(start, dur, decode, prefill) -> np.ndarray:
    """Decode rows, held through prefill-only steps that follow a step without idle time."""
    decode = np.asarray(decode, dtype=float).copy()
    end = np.asarray(start) + np.asarray(dur)
    contiguous = np.zeros(len(decode), bool)
    contiguous[1:] = np.asarray(start)[1:] - end[:-1] <= CONTIGUOUS_S
    hold = (decode == 0) & (np.asarray(prefill) > 0) & contiguous
    decode[hold] = np.nan
    return pd.Series(decode).ffill().fillna(0).to_numpy()


def mean_count(up: np.ndarray, down: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per bin, the time-averaged number of items present, each present over [up, down)."""
    down = np.minimum(down, edges[-1])
    t = np.concatenate([up, down])
    d = np.concatenate([np.ones(len(up)), -np.ones(len(down))])
    if not len(t):
        return np.zeros(len(edges) - 1)
    order = np.argsort(t, kind="stable")
    t, level = t[order], np.cumsum(d[order])
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t))])  # ∫ count dt up to each event
    return np.diff(np.interp(edges, t, area, left=0.0, right=area[-1])) / np.diff(edges)


@dataclass
class Binned:
    """Per engine, per bin: the panels' values."""

    centers: np.ndarray
    decode: dict[int, np.ndarray]
    prefill_tps: dict[int, np.ndarray]
    kv_active: dict[int, np.ndarray]
    kv_cached: dict[int, np.ndarray]
    waiting: dict[int, np.ndarray]  # time-averaged
    queued: dict[int, np.ndarray]  # the step log's queue after admission (preempted included)
    width: float


def bin_run(steps: pd.DataFrame, requests: pd.DataFrame, eng: list[Engine], max_bins: int = MAX_BINS) -> Binned:
    end = float((steps["start"] + steps["duration"]).max()) if len(steps) else 0.0
    if len(requests) and requests["completion"].notna().any():
        end = max(end, float(requests["completion"].max()))
    edges = bin_edges(end, max_bins)
    out = Binned(0.5 * (edges[1:] + edges[:-1]), {}, {}, {}, {}, {}, {}, float(edges[1] - edges[0]))
    col = steps["engine"].to_numpy()
    for e in eng:
        rows = np.flatnonzero(col == e.index)
        s = steps.iloc[rows]
        start, dur = s["start"].to_numpy(float), s["duration"].to_numpy(float)
        cap = max(e.capacity, 1)
        out.decode[e.index] = busy_mean(start, dur, held_decodes(start, dur, s["decode_seqs"].to_numpy(),
                                                                 s["prefill_tokens"].to_numpy()), edges)
        out.prefill_tps[e.index] = per_second(start, dur, s["prefill_tokens"].to_numpy(float), edges)
        out.kv_active[e.index] = 100 * busy_mean(start, dur, s["kv_blocks_used"].to_numpy(float) / cap, edges)
        out.kv_cached[e.index] = 100 * busy_mean(start, dur, s["kv_blocks_cached"].to_numpy(float) / cap, edges)
        out.queued[e.index] = busy_mean(start, dur, s["queue_len"].to_numpy(float), edges)
    engine_of = requests["arrival_engine"].to_numpy() if "arrival_engine" in requests else None
    if engine_of is None:  # an older requests table: by replica (its first engine)
        first = {}
        for e in eng:
            first.setdefault(e.replica, e.index)
        engine_of = np.array([first.get(r, -1) for r in requests["replica"].to_numpy()])
    for e in eng:
        r = requests[engine_of == e.index]
        waited = r["first_scheduled"].notna() | (r["status"] == "unfinished")
        up = r["arrival"].to_numpy(float)[waited]
        down = r["first_scheduled"].fillna(np.inf).to_numpy(float)[waited]
        out.waiting[e.index] = mean_count(up, down, edges)
    return out


def _bin_max(start: np.ndarray, value: np.ndarray, edges: np.ndarray) -> np.ndarray:
    out = np.zeros(len(edges) - 1)
    idx = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, len(out) - 1)
    np.maximum.at(out, idx, value)
    return out
