"""The pricing core: every replica's cost model as arrays, and ``price`` — the one function that
turns a step's shape into seconds, for every loop (compiled, SimPy) and every Python caller."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.core.jit import HAVE_NUMBA, entry, jit, struct
from sim.core.plan import MAX_PREFILL_ROW, SHAPE_SIZE, StepShape
from sim.pricing.power import POWER_SIZE, capped, power_row
from sim.pricing.profiled import (
    COUNTERS,
    FITS,
    MODE_OPS,
    MODE_STEP,
    NUM_FEATURES,
    TABLES,
    ProfileArrays,
    ProfiledCost,
    points_of,
    profile_time,
)
from sim.pricing.roofline import NUM_OPS, ROW_SIZE, floor_time, group_time, roofline_time

ROOFLINE = 0


class Costs(NamedTuple):
    """One row per engine: ``mode`` (ROOFLINE, or a profile's step fit / per-op model), the
    roofline's parameters (the target's and the speculative draft's), a profile's arrays, a
    ``scale`` every step is multiplied by (1: as priced) and its GPUs' power row (the cap that
    slows a step: sim/pricing/power.py)."""

    mode: np.ndarray  # i8 [E]
    params: np.ndarray  # f8 [E, ROW_SIZE]
    draft: np.ndarray  # f8 [E, ROW_SIZE] (zeros: no draft model)
    overhead: np.ndarray  # f8 [E] a profile's per-step overhead
    tab: np.ndarray  # f8 [E, tables, 2, points]
    tab_n: np.ndarray  # i8 [E, tables]
    fit: np.ndarray  # f8 [E, fits, 2, features]
    fit_x: np.ndarray  # i8 [E, fits, features]
    fit_n: np.ndarray  # i8 [E, fits]
    scale: np.ndarray  # f8 [E]
    power: np.ndarray  # f8 [E, POWER_SIZE]
    ops: np.ndarray  # f8 [NUM_OPS] room for a step's operations (no value kept between steps)


CostsType, CostsRef = struct("Costs", Costs._fields, __name__)


@entry
def _new_costs(*fields):
    return CostsRef(*fields)


def costs_ref(costs: Costs):
    return _new_costs(*costs) if HAVE_NUMBA else costs


@jit
def price(c, e, s):
    """Seconds of engine ``e``'s step of shape ``s``, and the profile counters it extrapolated
    (bits of COUNTERS; 0 for the roofline). A power cap slows the step last (``capped``)."""
    if c.mode[e] == ROOFLINE:
        t = roofline_time(c.params[e], c.draft[e], s, c.ops)
        flags = 0
    else:
        t, flags = profile_time(c.mode[e], c.overhead[e], c.tab[e], c.tab_n[e], c.fit[e], c.fit_x[e], c.fit_n[e],
                                c.params[e], c.draft[e], s)
        t = max(t, floor_time(c.params[e], s))  # a fit extrapolated past physics stops at the floor
    if c.scale[e] != 1.0:
        t = t * c.scale[e]
    return capped(c.params[e], c.power[e], s, t), flags


@jit
def price_group(c, e, shapes, n):
    """Seconds of the step that the first ``n`` rows of ``shapes`` take together: attention DP
    ranks of one replica (engine ``e`` is one of them), as ``price`` prices one step. The roofline
    prices each rank's own part and their experts together (``roofline.group_time``); a profile
    prices their sum as one step."""
    merged = np.zeros(SHAPE_SIZE)
    for i in range(n):
        for j in range(SHAPE_SIZE):
            merged[j] += shapes[i, j]
    big = 0.0
    for i in range(n):
        big = max(big, shapes[i, MAX_PREFILL_ROW])
    merged[MAX_PREFILL_ROW] = big
    if c.mode[e] != ROOFLINE:
        return price(c, e, merged)
    t = group_time(c.params[e], c.draft[e], shapes, n, merged, c.ops)
    if c.scale[e] != 1.0:
        t = t * c.scale[e]
    return capped(c.params[e], c.power[e], merged, t), 0


@entry
def _price_group(c, e, shapes, n):
    return price_group(c, e, shapes, n)


@entry
def _price_many(c, e, shapes, out, flags):
    for i in range(shapes.shape[0]):
        out[i], flags[i] = price(c, e, shapes[i])


def encode(costs: list, scale: float | list[float] = 1.0) -> Costs:
    """One row per engine, from each engine's cost model (RooflineCost or ProfiledCost)."""
    E = len(costs)
    points = max([2] + [points_of(c.profile) for c in costs if isinstance(c, ProfiledCost)])
    out = Costs(mode=np.zeros(E, dtype=np.int64), params=np.zeros((E, ROW_SIZE)),
                draft=np.zeros((E, ROW_SIZE)), overhead=np.zeros(E),
                tab=np.zeros((E, len(TABLES), 2, points)), tab_n=np.zeros((E, len(TABLES)), dtype=np.int64),
                fit=np.zeros((E, len(FITS), 2, NUM_FEATURES)), fit_x=np.zeros((E, len(FITS), NUM_FEATURES),
                                                                              dtype=np.int64),
                fit_n=np.zeros((E, len(FITS)), dtype=np.int64), scale=np.broadcast_to(
                    np.asarray(scale, dtype=np.float64), (E,)).copy(), power=np.zeros((E, POWER_SIZE)),
                ops=np.zeros(NUM_OPS))
    for e, cost in enumerate(costs):
        roofline = cost.roofline if isinstance(cost, ProfiledCost) else cost
        out.params[e] = roofline.params
        out.draft[e] = roofline.draft_params
        out.power[e] = power_row(roofline.gpu, roofline.power_cap_w, roofline.pp)
        if isinstance(cost, ProfiledCost):
            a = ProfileArrays(cost.profile, cost.mode, points)
            out.mode[e] = MODE_STEP if cost.mode == "step" else MODE_OPS
            out.overhead[e] = a.overhead
            out.tab[e, :, :, :a.tab.shape[2]] = a.tab
            out.tab_n[e], out.fit[e], out.fit_x[e], out.fit_n[e] = a.tab_n, a.fit, a.fit_x, a.fit_n
    return out


def counts_of(flags: np.ndarray) -> dict[str, int]:
    """Extrapolation flag words (one per step) → steps per counter."""
    flags = np.asarray(flags, dtype=np.int64)
    return {name: int(np.count_nonzero(flags & (1 << i))) for i, name in enumerate(COUNTERS)
            if np.any(flags & (1 << i))}


def add_counts(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v
    return total


def extrapolation_warnings(counts: dict[str, int]) -> list[str]:
    how = {True: "continuing its linear fit", False: "following the roofline's shape"}
    return [f"cost profile extrapolated beyond its measured range ({what}) in {n} step(s), {how['.' in what]}"
            for what, n in sorted(counts.items()) if n]


class Pricer:
    """Prices shapes with one cost model (for Python callers and the SimPy loop's executor)."""

    def __init__(self, cost, scale: float = 1.0):
        self.cost = cost
        self.arrays = costs_ref(encode([cost], scale))

    def price(self, shapes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = np.empty(len(shapes))
        flags = np.empty(len(shapes), dtype=np.int64)
        _price_many(self.arrays, 0, np.ascontiguousarray(shapes, dtype=np.float64), out, flags)
        return out, flags

    def price_group(self, shapes: np.ndarray) -> float:
        """Seconds of a step of attention DP ranks with these shapes (one row per rank)."""
        t, _ = _price_group(self.arrays, 0, np.ascontiguousarray(shapes, dtype=np.float64), len(shapes))
        return float(t)

    def step_time(self, s: StepShape) -> np.ndarray | float:
        out, _ = self.price(s.vectors())
        return float(out[0]) if s.is_scalar else out
