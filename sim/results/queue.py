"""The queue over time and what bursts do to it: peak queue, time to recover, SLO inside and
outside bursts.

The *queue* is the number of requests waiting across the cluster: arrived and not yet
scheduled for the first time (a rejected request never waits; a preempted one is not counted
again). It is a step function of time, built from every request's arrival (+1) and first
scheduling (−1), so the work grows with requests, never with tokens or steps.

*Time to recover* after a burst [a, b): the baseline is the time-weighted mean queue over the
burst's own length before it, [max(0, a − (b − a)), a) (0 for a burst that starts at 0); the
queue has recovered at the first instant t ≥ b at which it is at or below that baseline, and
the time to recover is t − b (0 when it already is at b; None when it never gets back within
the run, which ends when the last request completes).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def queue_series(requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(times, queue length from each time until the next), the queue at 0 before the first."""
    arrival = requests["arrival"].to_numpy(float)
    start = requests["first_scheduled"].to_numpy(float)
    rejected = (requests["status"] == "rejected").to_numpy() & ~np.isfinite(start)
    leaves = np.isfinite(start) | rejected
    leave = np.where(np.isfinite(start), start, arrival)[leaves]
    t = np.concatenate([arrival, leave])
    delta = np.concatenate([np.ones(len(arrival)), -np.ones(len(leave))])
    times, inverse = np.unique(t, return_inverse=True)
    q = np.cumsum(np.bincount(inverse, weights=delta, minlength=len(times)))
    return times, np.rint(q).astype(np.int64)


def value_at(times: np.ndarray, q: np.ndarray, t: float) -> int:
    """The queue at time ``t`` (after the events at ``t``)."""
    i = int(np.searchsorted(times, t, side="right")) - 1
    return int(q[i]) if i >= 0 else 0


def mean_between(times: np.ndarray, q: np.ndarray, lo: float, hi: float) -> float:
    """The time-weighted mean queue over [lo, hi) (the value at ``lo`` when hi ≤ lo)."""
    if hi <= lo:
        return float(value_at(times, q, lo))
    i, j = np.searchsorted(times, [lo, hi], side="right")
    knots = np.concatenate([[lo], times[i:j], [hi]])
    values = np.concatenate([[value_at(times, q, lo)], q[i:j]])
    return float(np.sum(values * np.diff(knots)) / (hi - lo))


def first_at_or_below(q: np.ndarray, level: float, start: int) -> int | None:
    """The first index ≥ ``start`` where ``q`` ≤ ``level``, looking in growing chunks (a queue
    that recovers soon is found without reading the rest of the run)."""
    width = 1024
    while start < len(q):
        hit = np.flatnonzero(q[start:start + width] <= level)
        if hit.size:
            return start + int(hit[0])
        start += width
        width *= 4
    return None


def recovery(times: np.ndarray, q: np.ndarray, start: float, end: float) -> dict:
    """One burst [start, end): the baseline before it, its peak, and when the queue got back
    (see the module's docstring for the definition). Reads the events from the baseline's
    window to the recovery only."""
    baseline = mean_between(times, q, max(0.0, start - (end - start)), start) if start > 0 else 0.0
    level = baseline + 1e-9
    i = max(int(np.searchsorted(times, end, side="right")) - 1, 0)
    if value_at(times, q, end) <= level:
        back = end
    else:
        k = first_at_or_below(q, level, i)
        back = None if k is None else float(times[k])
    lo = int(np.searchsorted(times, start, side="left"))
    hi = len(times) if back is None else int(np.searchsorted(times, back, side="right"))
    peak = max(int(q[lo:hi].max(initial=0)), value_at(times, q, start))
    return {"queue_before": baseline, "peak_queue": peak, "recovered_at_s": back,
            "time_to_recover_s": None if back is None else back - end}


def merged(bursts) -> list[tuple[float, float, float]]:
    """Burst windows (start, end, factor) sorted, overlapping ones (other classes') joined."""
    out: list[list[float]] = []
    for a, b, k in sorted(bursts):
        if out and a < out[-1][1]:
            out[-1][1], out[-1][2] = max(out[-1][1], b), max(out[-1][2], k)
        else:
            out.append([a, b, k])
    return [tuple(w) for w in out]


def queue_summary(requests: pd.DataFrame, bursts=()) -> dict:
    """Peak queue and, given bursts, each burst's recovery and SLO attainment inside and
    outside the bursts (by arrival time)."""
    times, q = queue_series(requests)
    if not len(times):
        return {"peak_queue": 0}
    k = int(np.argmax(q))
    out: dict = {"peak_queue": int(q[k]), "peak_queue_at_s": float(times[k])}
    windows = merged(bursts)
    if not windows:
        return out
    order = np.argsort(requests["arrival"].to_numpy(float), kind="stable")
    arrival = requests["arrival"].to_numpy(float)[order]
    met_before = np.concatenate([[0], np.cumsum(requests["slo_met"].to_numpy(bool)[order])])
    rows = []
    for a, b, factor in windows:
        i, j = np.searchsorted(arrival, [a, b], side="left")  # arriving in [a, b)
        rows.append({"start_s": a, "end_s": b, "factor": factor, **recovery(times, q, a, b),
                     "requests": int(j - i),
                     "slo_attainment": float(met_before[j] - met_before[i]) / (j - i) if j > i else None})
    n_in = sum(r["requests"] for r in rows)
    met_in = sum(r["slo_attainment"] * r["requests"] for r in rows if r["requests"])
    n_out, met_out = len(arrival) - n_in, float(met_before[-1]) - met_in
    out["bursts"] = rows
    out["slo_attainment_in_bursts"] = met_in / n_in if n_in else None
    out["slo_attainment_outside_bursts"] = met_out / n_out if n_out else None
    return out


def binned(times: np.ndarray, q: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The queue per bin of ``edges``: its time-weighted mean and its peak."""
    lo, hi = edges[:-1], edges[1:]
    knots = np.unique(np.concatenate([times, edges]))
    idx = np.searchsorted(times, knots, side="right") - 1
    values = np.where(idx >= 0, q[np.maximum(idx, 0)], 0) if len(times) else np.zeros(len(knots))
    area = np.concatenate([[0.0], np.cumsum(values[:-1] * np.diff(knots))])
    at = np.searchsorted(knots, edges)
    mean = (area[at[1:]] - area[at[:-1]]) / np.maximum(hi - lo, 1e-12)
    peak = np.maximum.reduceat(values, at[:-1]) if len(knots) else np.zeros(len(lo))
    return mean, peak[:len(lo)]


def burst_figures(summary: dict) -> dict:
    """Each burst's peak queue and time to recover as flat figures (``burst_1_peak_queue``,
    ``burst_1_time_to_recover_s``, …), for tables over seeds; None where a run never recovered."""
    out = {}
    for i, b in enumerate(summary.get("bursts") or [], start=1):
        out[f"burst_{i}_peak_queue"] = b.get("peak_queue")
        out[f"burst_{i}_time_to_recover_s"] = b.get("time_to_recover_s")
    return out
