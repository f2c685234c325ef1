"""Arrival rates that change over time, and arrivals that follow them.

A schedule (``schema.RateSchedule``) becomes a :class:`RateCurve`: linear pieces of rate over
[0, ``horizon``) (constant pieces, ramps, a diurnal cosine drawn as ``DIURNAL_PIECES`` chords per
period, each multiplied by the burst covering it) and a tail after the horizon, either a
constant rate or the diurnal period repeated.

Arrivals follow the curve by a *time change*: a process with unit mean rate (Poisson:
exponential gaps; gamma: gamma gaps of mean 1 and the given CV; constant: gaps of 1) gives
operational times S₀ = 0 < S₁ < …, and request i arrives at Λ⁻¹(Sᵢ), where Λ(t) = ∫₀ᵗ rate is
the expected number of arrivals by t. For Poisson this is exactly the non-homogeneous Poisson
process with that rate; for gamma it keeps the gaps' CV in operational time. Inverting Λ on a
linear piece is a quadratic, solved in closed form for all requests at once (numpy), so the
work grows with requests and pieces, never with time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DIURNAL_PIECES = 512  # chords per period: the cosine's rate within 2e-5·amplitude
MAX_PIECES = 5_000_000


@dataclass(frozen=True)
class RateCurve:
    """Piecewise-linear rate: piece k runs from ``t0[k]`` to ``t1[k]`` with rate ``r0[k]`` →
    ``r1[k]``; pieces tile [0, horizon). After the horizon: ``tail_rate``, or with ``period`` the
    curve ``period`` (a RateCurve over one period, from 0) repeated."""

    t0: np.ndarray
    t1: np.ndarray
    r0: np.ndarray
    r1: np.ndarray
    tail_rate: float = 0.0
    period: RateCurve | None = None

    @property
    def horizon(self) -> float:
        return float(self.t1[-1]) if len(self.t1) else 0.0

    @property
    def mass(self) -> np.ndarray:
        """Expected arrivals in each piece."""
        return (self.r0 + self.r1) / 2 * (self.t1 - self.t0)

    def rate(self, t) -> np.ndarray:
        """The rate at times ``t`` (right-continuous at jumps)."""
        t = np.asarray(t, dtype=float)
        out = np.empty(t.shape)
        inside = t < self.horizon
        k = np.clip(np.searchsorted(self.t0, t[inside], side="right") - 1, 0, max(len(self.t0) - 1, 0))
        span = np.where(self.t1[k] > self.t0[k], self.t1[k] - self.t0[k], 1.0)
        out[inside] = self.r0[k] + (self.r1[k] - self.r0[k]) * (t[inside] - self.t0[k]) / span
        after = t[~inside] - self.horizon
        out[~inside] = (self.period.rate(after % self.period.horizon) if self.period is not None
                        else self.tail_rate)
        return out

    def cumulative(self, t) -> np.ndarray:
        """Λ(t): expected arrivals in [0, t)."""
        t = np.asarray(t, dtype=float)
        starts = np.concatenate([[0.0], np.cumsum(self.mass)])
        out = np.empty(t.shape)
        inside = t < self.horizon
        k = np.clip(np.searchsorted(self.t0, t[inside], side="right") - 1, 0, max(len(self.t0) - 1, 0))
        x = t[inside] - self.t0[k]
        span = np.where(self.t1[k] > self.t0[k], self.t1[k] - self.t0[k], 1.0)
        out[inside] = starts[k] + self.r0[k] * x + (self.r1[k] - self.r0[k]) / span * x * x / 2
        after = t[~inside] - self.horizon
        if self.period is not None:
            per = self.period.horizon
            whole, rest = np.divmod(after, per)
            out[~inside] = starts[-1] + whole * self.period.total + self.period.cumulative(rest)
        else:
            out[~inside] = starts[-1] + self.tail_rate * after
        return out

    @property
    def total(self) -> float:
        """Λ(horizon)."""
        return float(self.mass.sum())

    def inverse(self, s: np.ndarray) -> np.ndarray:
        """Λ⁻¹(s): the earliest time by which ``s`` arrivals are expected (inf where the rate
        has fallen to 0 for good first)."""
        s = np.asarray(s, dtype=float)
        starts = np.concatenate([[0.0], np.cumsum(self.mass)])
        total = starts[-1]
        out = np.empty(s.shape)
        inside = s < total
        if inside.any():
            out[inside] = self._invert_pieces(s[inside], starts)
        rest = s[~inside] - total
        if self.period is not None:
            whole, left = np.divmod(rest, self.period.total)
            out[~inside] = self.horizon + whole * self.period.horizon + self.period.inverse(left)
        elif self.tail_rate > 0:
            out[~inside] = self.horizon + rest / self.tail_rate
        else:
            out[~inside] = np.where(rest == 0, self.horizon, np.inf)
        return out

    def _invert_pieces(self, s: np.ndarray, starts: np.ndarray) -> np.ndarray:
        # the piece where Λ passes s: pieces without mass are skipped (side="right")
        k = np.clip(np.searchsorted(starts[:-1], s, side="right") - 1, 0, len(self.t0) - 1)
        d = s - starts[k]
        dt = self.t1[k] - self.t0[k]
        r0 = self.r0[k]
        slope = np.where(dt > 0, (self.r1[k] - r0) / np.where(dt > 0, dt, 1.0), 0.0)
        # slope/2·x² + r0·x = d, in the form that stays exact as slope → 0
        root = np.sqrt(np.maximum(r0 * r0 + 2 * slope * d, 0.0))
        denom = r0 + root
        x = np.where(denom > 0, 2 * d / np.where(denom > 0, denom, 1.0), 0.0)
        return self.t0[k] + np.clip(x, 0.0, dt)


def _diurnal_pieces(d, t_end: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = max(1, int(np.ceil(t_end / d.period_s * DIURNAL_PIECES - 1e-9)))
    if n > MAX_PIECES:
        raise ValueError(f"the schedule spans {t_end / d.period_s:,.0f} diurnal periods before its last "
                         f"burst ends; at most {MAX_PIECES // DIURNAL_PIECES:,} are drawn")
    edges = np.linspace(0.0, n * d.period_s / DIURNAL_PIECES, n + 1)
    r = d.mean + d.amplitude * np.cos(2 * np.pi * (edges - d.phase_s) / d.period_s)
    r = np.maximum(r, 0.0)
    return edges[:-1], edges[1:], r[:-1], r[1:]


def _base_pieces(schedule, t_end: float):
    """The schedule's own curve over [0, ≥ t_end), before bursts, and what holds after it."""
    if schedule.base is not None:
        one = np.array([0.0]), np.array([max(t_end, 1.0)]), np.array([schedule.base]), np.array([schedule.base])
        return one, schedule.base, None
    if schedule.segments is not None:
        segs = schedule.segments
        dur = np.array([s.duration_s for s in segs])
        t1 = np.cumsum(dur)
        t0 = t1 - dur
        r0 = np.array([s.rate for s in segs])
        r1 = np.array([s.rate if s.ramp_to is None else s.ramp_to for s in segs])
        if t1[-1] < t_end:  # the last rate holds on
            t0, t1 = np.append(t0, t1[-1]), np.append(t1, t_end)
            r0, r1 = np.append(r0, r1[-1]), np.append(r1, r1[-1])
        return (t0, t1, r0, r1), float(r1[-1]), None
    d = schedule.diurnal
    periods = max(1, int(np.ceil(t_end / d.period_s - 1e-12)))
    one = RateCurve(*_diurnal_pieces(d, d.period_s))
    return _diurnal_pieces(d, periods * d.period_s), 0.0, one


def rate_curve(schedule) -> RateCurve:
    """The curve of a ``RateSchedule`` (bursts multiplied in)."""
    bursts = sorted(schedule.bursts, key=lambda b: b.at_s)
    t_end = max([b.end_s for b in bursts], default=0.0)
    (t0, t1, r0, r1), tail, period = _base_pieces(schedule, t_end)
    if bursts:
        edges = np.array([x for b in bursts for x in (b.at_s, b.end_s)])
        cuts = np.unique(np.concatenate([t0, t1, edges]))
        cuts = cuts[cuts <= t1[-1]]
        a, b = cuts[:-1], cuts[1:]
        mid = (a + b) / 2
        k = np.searchsorted(t0, mid, side="right") - 1  # the base piece holding each new piece

        def at(t):
            span = np.where(t1[k] > t0[k], t1[k] - t0[k], 1.0)
            return r0[k] + (r1[k] - r0[k]) * (t - t0[k]) / span

        factor = np.ones(len(a))
        starts = np.array([x.at_s for x in bursts])
        j = np.searchsorted(starts, mid, side="right") - 1
        ends = np.array([x.end_s for x in bursts])
        inside = (j >= 0) & (mid < ends[np.maximum(j, 0)])
        factor[inside] = np.array([x.factor for x in bursts])[j[inside]]
        t0, t1, r0, r1 = a, b, at(a) * factor, at(b) * factor
    return RateCurve(t0, t1, r0, r1, tail, period)


def scheduled_arrivals(curve: RateCurve, unit_gaps, rng: np.random.Generator, *,
                       num_requests: int | None, duration_s: float | None,
                       cv: float = 1.0) -> np.ndarray:
    """Arrival times (from 0) following ``curve``: ``unit_gaps(n, rng)`` draws gaps of mean 1;
    until ``num_requests`` or ``duration_s``, whichever comes first."""
    if num_requests is None:
        expected = float(curve.cumulative(np.array([duration_s]))[0])
        n = int(expected * 1.2 + 10 * np.sqrt(expected) * max(cv, 1) + 16)
    else:
        n = num_requests
    gaps = unit_gaps(n, rng)
    s = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    t = curve.inverse(s)
    if duration_s is not None:
        t = t[t < duration_s]
    return t[np.isfinite(t)]


def _g(x: float) -> str:
    from sim.results import fmt

    return fmt.num(x)


def burst_text(b, scale: float = 1.0) -> str:
    return f"×{b.factor:g} for {_g(b.duration_s / scale)} s at {_g(b.at_s / scale)} s"


def rate_text(rate, scale: float = 1.0) -> str:
    """A rate or schedule in words, its rates times ``scale`` (``workload.rate_scale``, which
    also compresses the schedule's times): "12 req/s", "diurnal 10 ± 5 req/s, period 86,400 s,
    peak at 0 s, with a ×2 burst for 60 s at 120 s"."""
    if isinstance(rate, int | float):
        return f"{_g(rate * scale)} req/s"
    if rate.base is not None:
        text = f"{_g(rate.base * scale)} req/s"
    elif rate.segments is not None:
        parts = [f"{_g(s.rate * scale)}" + ("" if s.ramp_to is None else f"→{_g(s.ramp_to * scale)}")
                 + f" for {_g(s.duration_s / scale)} s" for s in rate.segments[:4]]
        more = f", … ({len(rate.segments)} segments)" if len(rate.segments) > 4 else ""
        text = "req/s " + ", ".join(parts) + more + " (the last rate holds on)"
    else:
        d = rate.diurnal
        text = (f"diurnal {_g(d.mean * scale)} ± {_g(d.amplitude * scale)} req/s, period "
                f"{_g(d.period_s / scale)} s, peak at {_g(d.phase_s / scale)} s")
    if len(rate.bursts) == 1:
        text += f", with a burst {burst_text(rate.bursts[0], scale)}"
    elif rate.bursts:
        text += f", with {len(rate.bursts)} bursts (" + "; ".join(burst_text(b, scale) for b in rate.bursts[:3]) \
            + ("; …" if len(rate.bursts) > 3 else "") + ")"
    return text
