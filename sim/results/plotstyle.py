"""What every chart of a report shares: one colour per series name across all its charts,
readable log-axis ticks with units, compact data."""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterable

import numpy as np

from sim.vocab import POLICIES, ROUTERS

# Okabe–Ito, colour-blind safe, then tab10's remaining hues; no colour means "best".
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
           "#8c564b", "#7f7f7f", "#bcbd22", "#17becf", "#9467bd", "#1f77b4", "#ff7f0e", "#2ca02c"]
GRID = "#e5e5e5"
SLO_LINE = {"dash": "dot", "color": "#444", "width": 1.5}


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def color_map(names: Iterable) -> dict[str, str]:
    """A colour per name, in first-seen order: pass every chart of a report the same map."""
    out: dict[str, str] = {}
    for n in names:
        n = str(n)
        if n not in out:
            out[n] = color(len(out))
    return out


# Choices a configuration is often named by, each with a colour of its own (its place here).
KNOWN_CHOICES = [*POLICIES, *ROUTERS]


def _slot(label: str) -> int:
    """Where a configuration's colour starts: the place of the one known choice its label names
    (``policy=chunked-prefill``, ``policy-chunked-prefill``, ``chunked-prefill``), else a hash of
    the label's text."""
    tokens = [t for t in re.split(r"[=,\s]+", label.lower()) if t]
    named = {i for i, c in enumerate(KNOWN_CHOICES) for t in tokens
             if t == c or t.endswith("-" + c) or t.startswith(c + "-")}
    if len(named) == 1:
        return named.pop()
    return len(KNOWN_CHOICES) + zlib.crc32(label.encode()) % (len(PALETTE) - len(KNOWN_CHOICES))


def config_colors(labels: Iterable) -> dict[str, str]:
    """One colour per configuration, the same in every report that shows it (a study's, a
    compare's): a label's colour follows from its text, never from its place in a list. Labels
    that would share a colour take the next free ones, in an order that depends on the set of
    labels alone, so the same configurations get the same colours in any order."""
    names = list(dict.fromkeys(str(n) for n in labels))
    taken: set[int] = set()
    out: dict[str, str] = {}
    for n in sorted(names, key=lambda n: (_slot(n), n)):
        i = _slot(n)
        while i % len(PALETTE) in taken and len(taken) < len(PALETTE):
            i += 1
        taken.add(i % len(PALETTE))
        out[n] = color(i)
    return {n: out[n] for n in names}


def nice_step(x: float) -> float:
    """The smallest of 1, 2, 5 × 10^k that is ≥ x."""
    if x <= 0:
        return 1.0
    k = math.floor(math.log10(x))
    for m in (1, 2, 5, 10):
        if m * 10**k >= x * (1 - 1e-12):
            return m * 10**k
    return 10 ** (k + 1)


def _unit_label(v: float, unit: str) -> str:
    if unit == "ms":  # v in ms
        if v >= 1000:
            return _unit_label(v / 1000, "s")
        return f"{v:g} ms" if v >= 1 else f"{v * 1000:g} µs"
    if unit == "s":
        return f"{v / 60:g} min" if v >= 60 and float(v / 60).is_integer() else f"{v:,g} s"
    return f"{v:,g}" + (f" {unit}" if unit else "")


def log_ticks(lo: float, hi: float, unit: str = "", max_ticks: int = 6) -> tuple[list[float], list[str]]:
    """Tick values 1, 2, 5 × 10^k spanning [lo, hi] (1, 3 × 10^k or powers of ten when that
    gives more than ``max_ticks``), labelled with their unit: 20 ms, 50 ms, 100 ms, 1 s."""
    lo, hi = max(lo, 1e-12), max(hi, lo * 1.0001)
    vals: list[float] = []
    for mults in ((1, 2, 5), (1, 3), (1,), (1,)):
        vals = []
        for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
            for m in mults:
                v = m * 10.0**k
                if lo / 1.0001 <= v <= hi * 1.0001:
                    vals.append(float(f"{v:.6g}"))
        if len(vals) <= max_ticks:
            break
    if len(vals) > max_ticks:  # many decades: every other power of ten
        vals = vals[::2]
    if len(vals) < 2:  # a narrow span: the ends
        vals = sorted({float(f"{lo:.2g}"), float(f"{hi:.2g}")})
    return vals, [_unit_label(v, unit) for v in vals]


def wide(values, factor: float = 20.0) -> bool:
    """Positive values spanning more than ``factor``: clearer on a log axis."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return len(v) > 1 and v.max() / v.min() > factor


def log_axis(values, unit: str = "", max_ticks: int = 6) -> dict:
    """Axis settings for a log axis over ``values`` with labelled 1-2-5 ticks."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    vals, text = log_ticks(float(v.min()), float(v.max()), unit, max_ticks)
    return {"type": "log", "tickvals": vals, "ticktext": text}


def compact(a) -> np.ndarray:
    """Float32 for plotting: half the bytes, far more precision than a chart shows."""
    return np.asarray(a, dtype=np.float32)


LAYOUT = {"margin": {"t": 50, "b": 40, "l": 60, "r": 20}, "font": {"size": 12}, "hoverlabel": {"namelength": -1}}


def base_layout(fig, height: int) -> None:
    """Height, margins and fonts every chart shares: a plotly figure, or a ``chart.Chart`` (which
    carries plotly_white's look itself)."""
    if hasattr(fig, "update_layout"):
        fig.update_layout(height=height, template="plotly_white", **LAYOUT)
    else:
        fig.update(height=height, **LAYOUT)
