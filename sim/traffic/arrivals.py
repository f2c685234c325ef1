"""Arrival processes, generated as arrays of timestamps."""

from __future__ import annotations

import numpy as np

from sim.traffic.rates import rate_curve, scheduled_arrivals


def interarrival_times(process: str, rate: float, n: int, rng: np.random.Generator,
                       cv: float = 1.0) -> np.ndarray:
    """``n`` gaps between arrivals with mean ``1/rate``."""
    if process == "poisson":
        return rng.exponential(1.0 / rate, n)
    if process == "gamma":
        shape = 1.0 / cv**2  # CV of a gamma is 1/sqrt(shape)
        return rng.gamma(shape, 1.0 / (rate * shape), n)
    if process == "constant":
        return np.full(n, 1.0 / rate)
    raise ValueError(f"unknown arrival process {process!r}")


def expected_arrivals(rate, duration_s: float) -> float:
    """Requests expected in [0, ``duration_s``) at ``rate`` (a number or a ``RateSchedule``)."""
    if isinstance(rate, int | float):
        return rate * duration_s
    return float(rate_curve(rate).cumulative(np.array([duration_s]))[0])


def arrival_times(process: str, rate, rng: np.random.Generator, *,
                  num_requests: int | None, duration_s: float | None, cv: float = 1.0) -> np.ndarray:
    """Arrival timestamps (the first at time 0) until ``num_requests`` or ``duration_s``.
    ``rate``: requests/s, or a ``RateSchedule`` (the process then follows it by a time change:
    ``sim.traffic.rates``)."""
    if not isinstance(rate, int | float):
        def unit_gaps(n: int, g: np.random.Generator) -> np.ndarray:
            return interarrival_times(process, 1.0, n, g, cv)

        return scheduled_arrivals(rate_curve(rate), unit_gaps, rng, num_requests=num_requests,
                                  duration_s=duration_s, cv=cv)
    if num_requests is None:
        # Draw enough gaps to cover the duration with overwhelming probability, then cut.
        n = int(rate * duration_s * 1.2 + 10 * np.sqrt(rate * duration_s) * max(cv, 1) + 16)
    else:
        n = num_requests
    gaps = interarrival_times(process, rate, n, rng, cv)
    t = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    if duration_s is not None:
        t = t[t < duration_s]
    return t
