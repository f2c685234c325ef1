"""An autoscaled fleet's results: its log of changes (sim/core/autoscale.py), the replicas
over time, the GPU-hours it held, and the SLO attainment between its changes.

A replica is *held* (paid for) from the moment it starts provisioning (or 0, for the replicas
serving at the start) until it stops after draining: provisioning, active and draining time
all count, not replicas × window. ``held_gpu_hours`` is the one rule for that figure;
sim/results/money.py prices it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.core.state import ACTIVE, DRAINING, FLEET_STATES, OFF, PROVISIONING, Scale, ScaleCounter


def fleet_log(core) -> pd.DataFrame | None:
    """The fleet's changes in time order (time, replica, state), or None for a fixed fleet."""
    if not core.scale[Scale.ON]:
        return None
    rows = core.scale_log[:int(core.scale_n[ScaleCounter.LOG_N])]
    order = np.argsort(rows[:, 0], kind="stable")  # a drained replica's stop is logged at its last step
    rows = rows[order]
    return pd.DataFrame({"time": rows[:, 0], "replica": rows[:, 1].astype(np.int64),
                         "state": pd.Categorical.from_codes(rows[:, 2].astype(np.int64), FLEET_STATES)})


def replicas_over_time(log: pd.DataFrame, replicas: int) -> pd.DataFrame:
    """After each change: how many replicas are active, provisioning, draining, and held."""
    state = np.full(replicas, OFF)
    out = []
    codes = log["state"].cat.codes.to_numpy()
    for t, r, s in zip(log["time"].to_numpy(), log["replica"].to_numpy(), codes, strict=True):
        state[r] = s
        out.append((t, *(int((state == k).sum()) for k in (ACTIVE, PROVISIONING, DRAINING))))
    frame = pd.DataFrame(out, columns=["time", "active", "provisioning", "draining"])
    frame = frame.groupby("time", sort=True).last().reset_index()  # several changes at one instant: the last
    frame["held"] = frame["active"] + frame["provisioning"] + frame["draining"]
    return frame


def held_intervals(log: pd.DataFrame, end: float) -> list[tuple[int, float, float]]:
    """(replica, from, to) for every stretch a replica was held; one still held at the end, to ``end``."""
    since: dict[int, float] = {}
    out = []
    codes = log["state"].cat.codes.to_numpy()
    for t, r, s in zip(log["time"].to_numpy(), log["replica"].to_numpy(), codes, strict=True):
        if s == OFF:
            if r in since:
                out.append((int(r), since.pop(r), float(t)))
        else:
            since.setdefault(int(r), float(t))
    out += [(r, t, max(end, t)) for r, t in since.items()]
    return sorted(out)


def held_seconds(log: pd.DataFrame, replicas: int, start: float, end: float) -> np.ndarray:
    """Seconds each replica was held within [start, end] (the run's cost window)."""
    out = np.zeros(replicas)
    for r, a, b in held_intervals(log, end):
        out[r] += max(0.0, min(b, end) - max(a, start))
    return out


def held_gpu_hours(log: pd.DataFrame, gpus_per_replica: int, start: float, end: float) -> float:
    """GPU-hours the fleet held within [start, end] (the run's cost window)."""
    replicas = int(log["replica"].max()) + 1 if len(log) else 0
    return float(held_seconds(log, replicas, start, end).sum()) * gpus_per_replica / 3600.0


def slo_between_changes(requests: pd.DataFrame, series: pd.DataFrame) -> list[dict]:
    """For each stretch between changes of the active count: its start, end, active replicas,
    the requests that arrived in it and the share of them that met the SLO (None: none arrived)."""
    active = series[["time", "active"]]
    changes = active[active["active"].diff().fillna(1) != 0]
    starts = changes["time"].to_numpy()
    counts = changes["active"].to_numpy()
    arrival = requests["arrival"].to_numpy()
    met = requests["slo_met"].to_numpy() if "slo_met" in requests else np.ones(len(requests), dtype=bool)
    last = max(float(arrival.max(initial=0.0)), float(starts[-1]) if len(starts) else 0.0)
    ends = np.append(starts[1:], last)
    out = []
    at = np.searchsorted(starts, arrival, side="right") - 1
    for i, (a, b, n) in enumerate(zip(starts, ends, counts, strict=True)):
        mine = at == i
        k = int(mine.sum())
        out.append({"start_s": float(a), "end_s": float(b), "active": int(n), "requests": k,
                    "slo_attainment": float(met[mine].mean()) if k else None})
    return out


def fleet_summary(log: pd.DataFrame, requests: pd.DataFrame, replicas: int, gpu_hours: float,
                  gpus_per_replica: int, window_s: float) -> dict:
    """The summary's ``autoscale`` entry: GPU-hours held, and those a fixed fleet of its peak
    would hold over the same window; the fleet's range, its changes, and the SLO between them
    (the worst stretch named)."""
    series = replicas_over_time(log, replicas)
    stretches = slo_between_changes(requests, series)
    scored = [s for s in stretches if s["requests"]]
    worst = min(scored, key=lambda s: s["slo_attainment"]) if scored else None
    peak = int(series["held"].max())
    return {"gpu_hours": gpu_hours, "fixed_gpu_hours": peak * gpus_per_replica * window_s / 3600.0,
            "min_active": int(series["active"].min()),
            "max_active": int(series["active"].max()), "max_held": peak,
            "mean_active": _time_mean(series, "active"), "scale_changes": len(stretches) - 1,
            "worst_stretch": worst, "stretches": stretches}


def _time_mean(series: pd.DataFrame, column: str) -> float:
    t = series["time"].to_numpy()
    if len(t) < 2 or t[-1] <= t[0]:
        return float(series[column].iloc[-1]) if len(t) else 0.0
    return float(np.sum(series[column].to_numpy()[:-1] * np.diff(t)) / (t[-1] - t[0]))
