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
from sim.results.steplog import engine_rows

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
    hw_kinds = {(r.hardware.gpu_name, r.hardware.tp, r.hardware.pp) for r in specs}
    out, seen = [], {}
    for e, x in enumerate(engines_of(scenario)):
        spec = specs[x.replica]
        j = seen.setdefault(x.replica, e)
        role = spec.role if spec.role != "colocated" else "replica"
        label = f"{role} {x.replica}"
        if len(hw_kinds) > 1:
            hw = spec.hardware
            label += f" ({hw.gpu_name}" + (f", TP {hw.tp}" if hw.tp > 1 else "") + ")"
        if spec.hardware.pp > 1:
            label += f" · virtual engine {e - j}"
        elif spec.hardware.dp_attention > 1:
            label += f" · attention rank {e - j}"
        out.append(Engine(e, x.replica, label, int(x.num_blocks)))
    return out


def bin_edges(t_end: float, max_bins: int = MAX_BINS) -> np.ndarray:
    width = nice_step(max(t_end, 1e-9) / max_bins)
    n = max(1, int(np.ceil(t_end / width - 1e-9)))
    return np.arange(n + 1) * width


class StepClock:
    """One engine's steps as a clock: ∫ value dt up to each bin edge, in O(steps + bins).

    Steps hold their values over [start, end); one engine's steps never overlap (an end past the
    next start is cut there)."""

    def __init__(self, start, dur, edges: np.ndarray):
        self.start = np.asarray(start, float)
        end = self.start + np.asarray(dur, float)
        end[:-1] = np.minimum(end[:-1], self.start[1:])
        self.span = end - self.start
        self.edges = edges
        self.k = np.searchsorted(self.start, edges, side="right") - 1  # the last step begun by each edge
        kk = np.maximum(self.k, 0)
        self.inside = np.clip(edges - self.start[kk], 0.0, self.span[kk]) if len(self.start) else edges * 0
        self.busy = self.diff(np.ones(len(self.start)))

    def diff(self, value: np.ndarray) -> np.ndarray:
        """Per bin, ∫ value dt over the bin."""
        if not len(self.start):
            return np.zeros(len(self.edges) - 1)
        cum = np.concatenate([[0.0], np.cumsum(value * self.span)])
        kk = np.maximum(self.k, 0)
        at = np.where(self.k >= 0, cum[kk] + value[kk] * self.inside, 0.0)
        return np.diff(at)

    def busy_mean(self, value) -> np.ndarray:
        """Per bin, ``value``'s mean over the time a step ran (NaN: idle all bin)."""
        area = self.diff(np.asarray(value, float))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.busy > 1e-12, area / np.maximum(self.busy, 1e-300), np.nan)

    def per_second(self, amount) -> np.ndarray:
        """Per bin, ``amount`` per second, each step's amount spread over its duration."""
        rate = np.asarray(amount, float) / np.maximum(self.span, 1e-12)
        return self.diff(rate) / np.diff(self.edges)


def busy_mean(start, dur, value, edges) -> np.ndarray:
    """Per bin, ``value``'s mean over the time a step ran (NaN: idle all bin)."""
    return StepClock(start, dur, edges).busy_mean(value)


def per_second(start, dur, amount, edges) -> np.ndarray:
    """Per bin, ``amount`` per second, each step's amount spread over its duration."""
    return StepClock(start, dur, edges).per_second(amount)


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
    cols = {c: steps[c].to_numpy() for c in ("start", "duration", "decode_seqs", "prefill_tokens",
                                             "kv_blocks_used", "kv_blocks_cached", "queue_len")}
    order, rows = engine_rows(steps["engine"].to_numpy())  # each engine's steps together, in time order
    for e in eng:
        sl = rows.get(e.index, slice(0, 0))
        s = {c: v[sl] if order is None else v[order[sl]] for c, v in cols.items()}
        clock = StepClock(s["start"], s["duration"], edges)
        cap = max(e.capacity, 1)
        out.decode[e.index] = clock.busy_mean(held_decodes(s["start"], s["duration"], s["decode_seqs"],
                                                           s["prefill_tokens"]))
        out.prefill_tps[e.index] = clock.per_second(s["prefill_tokens"])
        out.kv_active[e.index] = 100 * clock.busy_mean(s["kv_blocks_used"] / cap)
        out.kv_cached[e.index] = 100 * clock.busy_mean(s["kv_blocks_cached"] / cap)
        out.queued[e.index] = clock.busy_mean(s["queue_len"])
    engine_of = requests["arrival_engine"].to_numpy() if "arrival_engine" in requests else None
    if engine_of is None:  # an older requests table: by replica (its first engine)
        first = {}
        for e in eng:
            first.setdefault(e.replica, e.index)
        engine_of = np.array([first.get(r, -1) for r in requests["replica"].to_numpy()])
    scheduled = requests["first_scheduled"].to_numpy(float)
    waited = ~np.isnan(scheduled) | (requests["status"] == "unfinished").to_numpy()
    arrival, scheduled = requests["arrival"].to_numpy(float), np.nan_to_num(scheduled, nan=np.inf)
    for e in eng:
        mine = waited & (engine_of == e.index)
        out.waiting[e.index] = mean_count(arrival[mine], scheduled[mine], edges)
    return out

